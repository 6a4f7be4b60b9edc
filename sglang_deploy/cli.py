"""`sglang-deploy`: the top floor, tying the core to the glue.

    sglang-deploy plan [INVENTORY] [--host NAME] [--sglang-version V] [--explain] [--json]
    sglang-deploy check --url URL [--target TOK_S] [--baseline FILE] [--expect PLAN.json] [--json FILE] ...
    sglang-deploy demo [--offline] [--json FILE]
    sglang-deploy rollout INVENTORY [--waves 1,25%] [--max-fail 0] [--limit HOSTS] [--json FILE]

`plan` plans every host of a pyinfra inventory offline, from the hardware its
data declares (default inventory: the shipped reference deployment).
Exit codes: 0 planned, 1 a host's data is wrong (message names host and
field), 2 the command itself is wrong (usage, missing inventory).

`check` is the post-deploy gate against any running SGLang (or
OpenAI-compatible) server: ready, configured as planned, fast enough.
Exit codes: 0 pass, 1 fail (with the reason), 2 could not measure.

`demo` runs the reference deployment end to end on a throwaway local host
with simulated GPUs and server (see demo.py), or, where no host can be
booted, the offline plan and the gate against a local simulated server.
Exit codes: 0 deploy and gate passed, 1 something failed, 2 cannot run here.

`rollout` deploys an inventory wave by wave (the ordinary deploy, limited to
each wave's hosts), halting when a wave fails more hosts than allowed.
Exit codes: 0 every host passed, 1 halted or interrupted, 2 bad input (nothing
ran), 3 completed with failures within the budget.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any, TextIO

from .errors import PlanError
from .planner import Plan, plan_inventory
from .render import RenderedFiles, render

DEFAULT_INVENTORY = "inventory/a6000.py"


def _default_inventory() -> str:
    here = Path(__file__).resolve().parent.parent / DEFAULT_INVENTORY
    return str(here) if here.is_file() else DEFAULT_INVENTORY


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
    g = plan.gpus
    w = out.write
    w(f"== {plan.host} ".ljust(78, "=") + "\n")
    w(f"GPUs      {g.count}x {g.model}: {g.arch} ({plan.arch_name}), {g.memory_gib:g} GiB each ({g.memory_tier}), "
      f"topology {g.topology}, P2P {'yes' if g.p2p else 'NO'}{', GeForce' if g.geforce else ''} [{g.source}]\n")
    w(f"Model     {plan.model_path} (profile: {plan.model_profile or 'none'})\n")
    w(f"SGLang    {plan.sglang_version}\n")
    node = plan.tp_node
    if node is not None:
        w(f"TP group  {node.group}: node rank {node.rank} of {node.nnodes}, rendezvous at rank 0 "
          f"{node.dist_init_addr}; gated at rank 0 ({node.leader})\n")
        for rank, (member, address) in enumerate(zip(node.members, node.addresses)):
            w(f"          rank {rank}  {member} ({address}){'  <- this host' if member == plan.host else ''}\n")
    shown = [r for r in plan.intents.values() if explain or r.layer != "sglang-default"]
    w("\nIntents" + ("" if explain else " (set above SGLang's defaults; --explain shows all, with reasons)") + "\n")
    width = max(len(r.name) for r in shown) if shown else 10
    for r in shown:
        line = f"  {r.name.ljust(width)}  {_fmt(r.value).ljust(12)}  {r.layer.ljust(14)}"
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


def cmd_plan(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from roles.inventory import InventoryError, load_inventory

    try:
        hosts = everyone = load_inventory(args.inventory)
    except InventoryError as exc:
        err.write(f"error: {exc}\n")
        return 2
    if args.host:
        hosts = [h for h in hosts if h.name in args.host]
        missing = set(args.host) - {h.name for h in hosts}
        if missing:
            err.write(f"error: --host: {', '.join(sorted(missing))} not in {args.inventory}\n")
            return 2
    selected = {h.name for h in hosts}
    results = []
    failures = []
    # Every host is planned (a tp group's ranks depend on all its members); --host filters the output.
    plans = plan_inventory([(h.name, h.group_data, h.host_data) for h in everyone],
                           sglang_version=args.sglang_version)
    for h, plan in zip(everyone, plans):
        if h.name not in selected:
            continue
        try:
            if isinstance(plan, PlanError):
                raise plan
            files = render(plan)
        except PlanError as exc:
            failures.append(str(exc))
            continue
        results.append((plan, files))
    if args.json:
        json.dump([plan_json(p, f) for p, f in results], out, indent=2)
        out.write("\n")
    else:
        for plan, files in results:
            print_plan(plan, files, args.explain, out)
    for failure in failures:
        err.write(f"error: {failure}\n")
    return 1 if failures else 0


def cmd_check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import os

    from .gate import verdict
    from .gate.options import CheckOptions
    from .gate.report import format_report
    from .gate.run import run_check
    from .gate.watch import AbortFileWatch, SystemdWatch, local_shell

    try:
        fail_on = verdict.parse_fail_on(args.fail_on)
    except ValueError as exc:
        err.write(f"error: --fail-on: {exc}\n")
        return 2
    api_key = None
    if args.api_key_env and args.api_key_file:
        err.write("error: --api-key-env and --api-key-file: give one of them\n")
        return 2
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            err.write(f"error: --api-key-env: environment variable {args.api_key_env} is not set\n")
            return 2
    if args.api_key_file:
        try:
            api_key = Path(args.api_key_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            err.write(f"error: --api-key-file: cannot read {args.api_key_file}: {exc.strerror or exc}\n")
            return 2
        if not api_key:
            err.write(f"error: --api-key-file: {args.api_key_file} is empty\n")
            return 2
    if args.record and not args.baseline:
        err.write("error: --record needs --baseline FILE\n")
        return 2
    if args.abort_file and not args.watch_unit:
        err.write("error: --abort-file needs --watch-unit UNIT\n")
        return 2
    opts = CheckOptions(
        url=args.url, target_tok_s=args.target, baseline=args.baseline, tolerance=args.tolerance,
        concurrency=args.concurrency, model=args.model, expect=args.expect, expect_host=args.host,
        fail_on=fail_on, ready_timeout=args.ready_timeout, repeats=args.repeats, max_tokens=args.max_tokens,
        api_key=api_key, hardware=args.hardware, nvml=args.nvml, stall_timeout=args.stall_timeout,
        record=args.record,
        watch=(AbortFileWatch(local_shell, args.watch_unit, args.abort_file) if args.abort_file else
               SystemdWatch(local_shell, args.watch_unit) if args.watch_unit else None),
    )

    def progress(msg: str) -> None:
        err.write(f"check: {msg}\n")
        err.flush()

    report = run_check(opts, progress)
    out.write(format_report(report))
    if args.json:
        try:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump(report, fh, indent=2)
                fh.write("\n")
        except OSError as exc:
            err.write(f"error: --json: cannot write {args.json}: {exc.strerror or exc}\n")
            return 2
    if report["verdict"] == "error":
        err.write(f"error: {report['reasons'][0]}\n")
    return int(report["exit_code"])


def cmd_demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .demo import run_demo

    return run_demo(offline=args.offline, json_path=args.json, out=out, err=err)


def cmd_sample_gpus(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .gate.nvml import sample_gpus

    try:
        indices = [int(i) for i in args.indices.split(",")] if args.indices else None
    except ValueError:
        err.write(f"error: --indices: expected GPU indices such as 0,1, got {args.indices!r}\n")
        return 2
    return sample_gpus(args.out, indices, args.every, args.until_file, args.max_seconds)


def cmd_rollout(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from roles.fleet import RolloutOptions, rollout

    opts = RolloutOptions(inventory=args.inventory, waves=args.waves, max_fail=args.max_fail,
                          limit=args.limit or (), json_path=args.json)
    code, _ = rollout(opts, out, err)
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglang-deploy", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="plan every host of an inventory offline, from declared hardware")
    p.add_argument("inventory", nargs="?", default=None,
                   help=f"pyinfra inventory file (default: the shipped {DEFAULT_INVENTORY})")
    p.add_argument("--host", action="append", help="plan only this host (repeatable)")
    p.add_argument("--sglang-version", help="plan for this SGLang version instead of the inventory's")
    p.add_argument("--explain", action="store_true", help="every intent with its layer and reason")
    p.add_argument("--json", action="store_true", help="a JSON array, one object per host")
    p.set_defaults(func=cmd_plan)

    c = sub.add_parser("check", help="post-deploy gate against a running server: ready, configured as planned, "
                                     "fast enough (exit 0 pass, 1 fail, 2 could not measure)")
    c.add_argument("--url", required=True, help="base URL of the server, e.g. http://127.0.0.1:30000")
    c.add_argument("--target", type=float, metavar="TOK_S", help="minimum median single-stream decode tok/s")
    c.add_argument("--baseline", metavar="FILE",
                   help="JSON lines of earlier gate reports; fail when more than --tolerance below the best "
                        "recent passing one for the same hardware, model and SGLang version")
    c.add_argument("--tolerance", type=float, default=0.10, help="allowed drop below the baseline (default 0.10)")
    c.add_argument("--record", action="store_true", help="append this run's report to the --baseline file")
    c.add_argument("--concurrency", type=int, default=1, metavar="N",
                   help="also run N concurrent streams and report aggregate output tok/s")
    c.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    c.add_argument("--model", help="model to ask for (default: the one /v1/models lists)")
    c.add_argument("--expect", metavar="PLAN.json",
                   help="output of 'sglang-deploy plan --json' (an object, or an array plus --host): "
                        "compare with what the server resolved")
    c.add_argument("--host", help="the host's plan to use when --expect holds several")
    c.add_argument("--fail-on", metavar="GROUPS",
                   help="configuration differences that fail the gate, comma-separated (default "
                        "speculative,tp,prefill_graph; also custom_all_reduce, nvls, attention_backend, "
                        "mem_fraction_static, model, version; or all / none)")
    c.add_argument("--ready-timeout", type=float, default=600.0, metavar="S",
                   help="how long to wait for the server to become ready (default 600)")
    c.add_argument("--repeats", type=int, default=5, metavar="N", help="single-stream requests (default 5)")
    c.add_argument("--max-tokens", type=int, default=256, metavar="N", help="output tokens per request (default 256)")
    c.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the server's API key")
    c.add_argument("--api-key-file", metavar="FILE", help="file holding the server's API key (keeps it out of argv "
                                                          "and the environment)")
    c.add_argument("--abort-file", metavar="FILE",
                   help="with --watch-unit: also fail the gate at once when FILE appears (its first line is the "
                        "reason); the deploy writes it on rank 0 of a multi-node group when another member fails")
    c.add_argument("--watch-unit", metavar="UNIT",
                   help="on the server's host: watch this systemd unit while waiting and measuring; a failed "
                        "or restarted unit fails the gate at once, with the journal's last lines")
    c.add_argument("--hardware", help="hardware part of the baseline key (default: from --expect or NVML)")
    c.add_argument("--stall-timeout", type=float, default=60.0, metavar="S",
                   help="a stream with no data for this long is an error (default 60)")
    c.add_argument("--nvml", action="store_true",
                   help="on the GPU host: sample clocks, throttling, memory and processes during the measurement")
    c.set_defaults(func=cmd_check)

    g = sub.add_parser("sample-gpus", help="on a GPU host: record NVML samples (clocks, throttling, memory, "
                                           "processes) until a file appears; the deploy runs it beside the gate")
    g.add_argument("--out", required=True, metavar="FILE", help="where to write the samples (JSON)")
    g.add_argument("--indices", metavar="I,J", help="GPU indices (default all)")
    g.add_argument("--every", type=float, default=0.5, metavar="S", help="seconds between samples (default 0.5)")
    g.add_argument("--until-file", metavar="PATH", help="stop once this file exists")
    g.add_argument("--max-seconds", type=float, default=3600.0, metavar="S", help="stop after this long (default 3600)")
    g.set_defaults(func=cmd_sample_gpus)

    r = sub.add_parser("rollout", help="deploy a fleet in waves (canary first), each gated; halt when a wave "
                                       "fails more hosts than allowed")
    r.add_argument("inventory", help="pyinfra inventory file")
    r.add_argument("--waves", metavar="SIZES",
                   help="wave sizes, Ansible serial style: counts and percentages, the last repeated "
                        "(default: sglang_rollout.waves from the inventory, else 1,25%%); a 'canary' group is "
                        "the first wave")
    r.add_argument("--max-fail", type=int, metavar="N",
                   help="failed hosts a wave may have before the rollout halts (default: sglang_rollout.max_fail, "
                        "else 0)")
    r.add_argument("--limit", action="append", metavar="HOSTS",
                   help="only these hosts or groups (names or globs, comma-separated; repeatable)")
    r.add_argument("--json", metavar="FILE", help="write the summary as JSON")
    r.set_defaults(func=cmd_rollout)

    d = sub.add_parser("demo", help="the reference deployment end to end on a throwaway local host, with "
                                    "simulated GPUs and server; offline plan + gate against a local simulated "
                                    "server where no host can be booted (exit 0 deploy and gate passed)")
    d.add_argument("--offline", action="store_true",
                   help="do not boot a host: the offline plan and the gate against a local simulated server")
    d.add_argument("--json", metavar="FILE", help="write the plan, the deploy's outcome and the gate report as JSON")
    d.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "inventory", "x") is None:
        args.inventory = _default_inventory()
    return args.func(args, out or sys.stdout, err or sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
