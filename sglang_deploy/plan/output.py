"""A plan as the user reads it: text (``--explain`` adds every intent's reason) or JSON.

Used by ``sglang-deploy plan`` and the demo; it writes to the stream it is given.
"""

from __future__ import annotations

import shlex
from typing import Any, TextIO

from sglang_deploy.plan import layers
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.render import RenderedFiles
from sglang_deploy.untrusted import printable


def plan_json(plan: Plan, files: RenderedFiles) -> dict[str, Any]:
    """One host of `plan --json`: the plan and its rendered files (secrets redacted)."""
    return {**plan.as_dict(), "files": files.as_dict()}


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
    g = plan.gpus
    w = out.write
    w(f"== {plan.host} ".ljust(78, "=") + "\n")
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
    w("\nArgv (python -m sglang.launch_server ...)\n")
    w("  " + shlex.join(plan.argv) + "\n")
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
