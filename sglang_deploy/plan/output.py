"""A plan as the user reads it: text (``--explain`` adds every intent's reason) or JSON.

Used by ``sglang-deploy plan`` and the demo; it writes to the stream it is given.

A fleet's hosts come in classes (``inventory_plan``: plans that differ only by the host's name,
``Plan.shared``). :func:`render_plans`, :func:`write_plans_json` and :func:`print_plans` render and
format each class once, under ``inventory_plan.CLASS_HOST``, and put each member's name where
that stands: the same bytes as one host at a time (tests/test_plan_classes.py).
"""

from __future__ import annotations

import io
import json
import shlex
from typing import Any, Sequence, TextIO

from sglang_deploy.errors import PlanError
from sglang_deploy.plan import layers
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.inventory_plan import CLASS_HOST
from sglang_deploy.plan.render import RenderedFiles, render
from sglang_deploy.untrusted import printable


def plan_json(plan: Plan, files: RenderedFiles) -> dict[str, Any]:
    """One host of `plan --json`: the plan and its rendered files (secrets redacted)."""
    budget = plan.start_budget.as_dict() if plan.start_budget is not None else None
    return {**plan.as_dict(), "start_budget": budget, "files": files.as_dict()}


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def print_plan(plan: Plan, files: RenderedFiles, explain: bool, out: TextIO) -> None:
    """One host of `plan`: hardware, model, version, tp group, the intents set above SGLang's
    defaults (all of them, with layer and reason, when ``explain``), argv, warnings and files.
    The layer column is as wide as the longest name in ``layers.LAYERS``."""
    out.write(_title(plan.host))
    _print_body(plan, files, explain, out)


def _title(host: str) -> str:
    return f"== {host} ".ljust(78, "=") + "\n"


def _print_body(plan: Plan, files: RenderedFiles, explain: bool, out: TextIO) -> None:
    """All of print_plan's but the title line (whose padding depends on the name's length)."""
    g = plan.gpus
    w = out.write
    w(f"GPUs      {g.count}x {g.model}: {g.arch} ({plan.arch_name}), {g.memory_gib:g} GiB each ({g.memory_tier}), "
      f"topology {g.topology}, P2P {'yes' if g.p2p else 'NO'}{', GeForce' if g.geforce else ''} [{g.source}]\n")
    w(f"Model     {plan.model_path} (profile: {plan.model_profile or 'none'})\n")
    if plan.facts is not None:
        rev = plan.facts.revision
        pinned = f" (revision {rev})" if rev and rev not in plan.facts.source else ""
        w(f"Facts     the checkpoint's own metadata, from {plan.facts.source}{pinned}\n")
    elif plan.facts_missing:
        w(f"Facts     none ({plan.facts_missing}): sized from the model profile\n")
    if plan.weights is not None:
        w(f"Weights   {plan.weights.origin}; SGLang loads {plan.weights.snapshot_dir}\n")
    w(f"SGLang    {plan.sglang_version}\n")
    if plan.driver is not None and (explain or plan.driver.status != "not-judged" or plan.gpus.source != "declared"):
        w(f"Driver    {plan.driver.summary}\n")
        for line in plan.driver.lines if explain else ():
            w(f"          {line}\n")
    if plan.pcie is not None and (explain or plan.pcie.status == "broken"):
        w(f"PCIe P2P  {plan.pcie.status}: {plan.pcie.detail}\n")
    if plan.pd_split is not None:
        w(f"PD split  {plan.pd_split}\n")
    if plan.transfer_engine is not None:
        w(f"KV engine {plan.transfer_engine.requirement} into {plan.venv}, imported as {plan.transfer_engine.module} "
          "before anything stops\n")
    if plan.caches is not None:
        w(f"Caches    {plan.caches.explain() if explain else plan.caches.dir}\n")
    b = plan.start_budget
    if b is not None:
        w(f"Start     up to {b.total_s:g} s to ready ({b.basis}"
          + ("; a deploy refines it with the host's recorded starts and caches" if b.basis != "inventory" else "")
          + ")\n")
        for line in b.lines() if explain else ():
            w(f"          {line}\n")
    if plan.tuning is not None:
        t = plan.tuning
        # a record is a file beside the inventory: what it says is shown without terminal controls
        w(printable(f"Tuning    record measured on {t.measured_on} ({t.date}, {t.objective} objective, "
                    f"{t.trial_count} trials): the tuned layer sets {', '.join(t.intents) or 'nothing'}") + "\n")
    for note in plan.tuning_notes:
        w(printable(f"Tuning    {note}") + "\n")
    node = plan.tp_node
    if node is not None:
        w(f"TP group  {node.group}: node rank {node.rank} of {node.nnodes}, rendezvous at rank 0 "
          f"{node.dist_init_addr}; gated at rank 0 ({node.leader})\n")
        for rank, (member, address) in enumerate(zip(node.members, node.addresses)):
            w(f"          rank {rank}  {member} ({address}){'  <- this host' if member == plan.host else ''}\n")
    shown = [r for r in plan.intents.values() if explain or r.layer != layers.DEFAULT]
    w("\nIntents" + ("" if explain else " (set above SGLang's defaults; --explain shows all, with reasons)") + "\n")
    width = max(len(r.name) for r in shown) if shown else 10
    for r in shown:
        line = f"  {r.name.ljust(width)}  {_fmt(r.value).ljust(12)}  {r.layer.ljust(layers.WIDTH)}"
        if explain:
            line += f"  {r.reason}"
            if r.source:
                line += f" [{r.source}]"
        w(line.rstrip() + "\n")
    _print_predicted(plan, explain, w)
    w("\nArgv (python -m sglang.launch_server ...)\n")
    w("  " + shlex.join(plan.argv) + "\n")
    if plan.replicas:
        w(f"\nReplicas  {len(plan.replicas)} servers behind the gateway, one per data-parallel replica, each its own "
          "worker (this plan and files are the first's; the others differ in port, GPUs and unit):\n")
        for replica in plan.replicas:
            w(f"  {replica.service.name}  port {replica.intents['port'].value}  GPUs "
              f"{','.join(map(str, replica.gpus.indices))}  {replica.service.unit_path}\n")
    w("\nWarnings\n")
    for warning in plan.warnings or ["none"]:
        w(f"  - {warning}\n")
    for title, path, text in (
        ("unit", plan.service.unit_path, files.unit),
        ("env file (0600, secrets redacted)", plan.service.env_path, files.env),
        ("nccl.conf", plan.nccl_conf_path, files.nccl_conf),
    ):
        w(f"\n--- {path} ({title})\n{text}")
    w("\n")


def _print_predicted(plan: Plan, explain: bool, w: Any) -> None:
    """The speed the plan should reach (``plan.perf``): one line, the derivation with ``explain``."""
    p = plan.predicted
    if p is None:
        w(f"\nPredicted none: {plan.predicted_missing}\n")
        return
    output = ", ".join(f"{b.expected:.0f} at {c}" for c, b in sorted(p.output_tok_s.items()) if c > 1)
    w(f"\nPredicted decode {p.decode_tok_s.text('tok/s')} single stream, TTFT {p.ttft_ms.text('ms')}"
      + (f"; output tok/s {output} concurrent" if output else "")
      + (f"; prefill {p.prefill_tok_s.text('input tok/s')} at {p.prefill_tokens} prompt tokens"
         if p.prefill_tok_s is not None else "") + "\n")
    if explain:
        for line in p.lines:
            w(f"  {line}\n")


def _named(text: str, host: str) -> str:
    return text.replace(CLASS_HOST, host)


#: Files of a class plan (``Plan.shared``) by its id, rendered under inventory_plan.CLASS_HOST
#: (or why they cannot be): what render_plans fills and write_plans_json and print_plans reuse.
ClassFiles = dict[int, "RenderedFiles | PlanError"]


def _class_files(shared: Plan, done: ClassFiles) -> RenderedFiles | PlanError:
    if id(shared) not in done:
        try:
            done[id(shared)] = render(shared)
        except PlanError as exc:
            done[id(shared)] = exc
    return done[id(shared)]


def render_plans(plans: Sequence[Plan], done: ClassFiles | None = None) -> list[RenderedFiles | PlanError]:
    """Each plan's files (secrets redacted), or why they cannot be written: a class's once.
    ``done``: the classes' files, kept for write_plans_json and print_plans."""
    done = {} if done is None else done
    out: list[RenderedFiles | PlanError] = []
    for plan in plans:
        if plan.shared is None:
            try:
                out.append(render(plan))
            except PlanError as exc:
                out.append(exc)
            continue
        got, host = _class_files(plan.shared, done), plan.host
        if isinstance(got, PlanError):
            out.append(PlanError(host, _named(got.field, host), _named(got.message, host)))
        else:
            out.append(RenderedFiles(unit=_named(got.unit, host), env=_named(got.env, host),
                                     nccl_conf=_named(got.nccl_conf, host)))
    return out


def _json_item(item: Any) -> str:
    """One element of an indent-2 JSON array, as ``json.dump`` writes it inside the array."""
    return "\n".join("  " + line for line in json.dumps(item, indent=2).split("\n"))


def write_plans_json(results: Sequence[tuple[Plan, RenderedFiles]], out: TextIO,
                     done: ClassFiles | None = None) -> None:
    """`plan --json`: what ``json.dump([plan_json(...), ...], out, indent=2)`` writes, a class's
    item encoded once. ``done``: render_plans's classes' files (else rendered here again)."""
    if not results:
        out.write("[]")
        return
    done = {} if done is None else done
    anonymous = json.dumps(CLASS_HOST)[1:-1]  # the name as JSON spells it inside a string
    texts: dict[int, str] = {}
    out.write("[\n")
    for i, (plan, files) in enumerate(results):
        if i:
            out.write(",\n")
        shared = plan.shared
        class_files = None if shared is None else _class_files(shared, done)
        if shared is None or not isinstance(class_files, RenderedFiles):
            out.write(_json_item(plan_json(plan, files)))
            continue
        if id(shared) not in texts:
            texts[id(shared)] = _json_item(plan_json(shared, class_files))
        out.write(texts[id(shared)].replace(anonymous, json.dumps(plan.host)[1:-1]))
    out.write("\n]")


def print_plans(results: Sequence[tuple[Plan, RenderedFiles]], explain: bool, out: TextIO,
                done: ClassFiles | None = None) -> None:
    """`plan` for many hosts: print_plan's text for each, a class's body formatted once.
    ``done``: render_plans's classes' files (else rendered here again)."""
    done = {} if done is None else done
    texts: dict[int, str] = {}
    for plan, files in results:
        shared = plan.shared
        class_files = None if shared is None else _class_files(shared, done)
        if shared is None or not isinstance(class_files, RenderedFiles):
            print_plan(plan, files, explain, out)
            continue
        if id(shared) not in texts:
            body = io.StringIO()
            _print_body(shared, class_files, explain, body)
            texts[id(shared)] = body.getvalue()
        out.write(_title(plan.host))
        out.write(_named(texts[id(shared)], plan.host))
