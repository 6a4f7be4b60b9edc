#!/usr/bin/env python3
"""What a tune costs per trial on a real deploy path, and what the tuner adds to it.

    sudo .venv/bin/python benchmarks/tune_overhead.py [--json FILE] [--budget N]

Runs `sglang-deploy demo --tune` (a throwaway host: real systemd, sshd and pyinfra; simulated
GPUs and server, the reference deployment's performance model) and prints, from the tune's own
record of every pyinfra run and every trial's gate report:

- per trial: its wall time (the whole deploy: plan, stage, prove, swap, restart, gate), of which
  the gate's measurement and the server's readiness wait;
- the tuner's own time per trial (search, trial files, reading reports: the loop's time minus
  its pyinfra runs);
- the fixed runs every tune adds: the precheck, the return to the original revision (gated) and
  the proof that it runs again.

Exit 0 when the tune found the performance model's planted best. ``--budget N`` runs the demo's
tune with N trials instead of its own budget (``demo_host.TUNE_BUDGET``; the smoke run,
benchmarks/smoke.py, takes 2): too few to find the planted best, so that is printed, not judged,
and exit 0 means the tune ran its trials and returned the host.

Run it under the e2e lock: it boots a throwaway host.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: `sglang-deploy demo` with the tune's budget set first (``--budget``): argv[1] the budget, the rest the CLI's.
# The throwaway-host path reads the budget (commands/demo_host.py, from demo_setup): it is set there.
WITH_BUDGET = ("import sys; import sglang_deploy.commands.demo_host as demo; demo.TUNE_BUDGET = int(sys.argv[1]); "
               "from sglang_deploy.commands.cli import main; sys.exit(main(sys.argv[2:]))")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="also write the demo's result (with the tune's summary) here")
    ap.add_argument("--from", dest="source", metavar="FILE",
                    help="print the tables from an earlier `sglang-deploy demo --tune --json FILE` "
                         "instead of running it")
    ap.add_argument("--budget", type=int, default=None,
                    help="the tune's trials (default: the demo's own); the planted best is then not judged")
    args = ap.parse_args()
    if args.budget is not None and args.budget < 1:
        ap.error("--budget: at least 1")
    if args.source:
        return report(json.loads(Path(args.source).read_text()), "")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.json or Path(tmp) / "demo.json")
        demo = ["demo", "--tune", "--json", str(out)]
        argv = ([sys.executable, "-m", "sglang_deploy.commands.cli", *demo] if args.budget is None else
                [sys.executable, "-c", WITH_BUDGET, str(args.budget), *demo])
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        if not out.exists():
            print(proc.stdout[-3000:] + proc.stderr[-3000:])
            return 1
        result = json.loads(out.read_text())
    return report(result, proc.stdout, judge_planted=args.budget is None)


def report(result: dict, output: str, judge_planted: bool = True) -> int:
    tune = result.get("tune") or {}
    summary = tune.get("summary") or {}
    rows = summary.get("trials") or []
    if not rows:
        print("the tune ran no trial:", output[-3000:])
        return 1
    print(f"{'trial':>5}  {'status':<10} {'config':<64} {'wall s':>7} {'measure s':>9} {'ready s':>7}")
    measures, readies, walls = [], [], []
    for r in rows:
        timing = (r.get("figures") or {}).get("timing") or {}
        m, rd = timing.get("measure_s"), timing.get("ready_s")
        walls.append(r["seconds"])
        if isinstance(m, (int, float)):
            measures.append(m)
        if isinstance(rd, (int, float)):
            readies.append(rd)
        config = ", ".join(f"{k.replace('speculative_', '')}={v}" for k, v in sorted(r["config"].items()))
        print(f"{r['trial']:>5}  {r['status']:<10} {config[:64]:<64} {r['seconds']:>7.1f} "
              f"{m if m is not None else '-':>9} {rd if rd is not None else '-':>7}")
    fixed = {run["run"]: run["seconds"] for run in summary.get("runs") or [] if not run["run"].startswith("trial")}
    n = len(rows)
    print()
    print(f"{'what':<52} {'seconds':>8}")
    print(f"{'trials':<52} {n:>8}")
    print(f"{'trial wall time, median':<52} {statistics.median(walls):>8.2f}")
    if measures:
        print(f"{'  of which the gate measuring, median':<52} {statistics.median(measures):>8.2f}")
    if readies:
        print(f"{'  of which waiting for readiness, median':<52} {statistics.median(readies):>8.2f}")
    print(f"{'the tuner itself per trial (loop minus pyinfra runs)':<52} {summary.get('overhead_s', 0) / n:>8.3f}")
    for name in ("precheck", "restore", "verify", "apply"):
        if name in fixed:
            print(f"{name + ' run (once per tune)':<52} {fixed[name]:>8.2f}")
    print(f"{'whole tune':<52} {summary.get('seconds', 0):>8.1f}")
    print(f"\nbest found: {tune.get('best')}; planted: {tune.get('planted')}; "
          f"found the planted best: {tune.get('found_planted')}"
          f"{'' if judge_planted else ' (a smaller budget than the demo: not judged)'}; "
          f"host returned: {tune.get('restored')}; tune exit {tune.get('exit_code')}")
    if judge_planted:
        return 0 if tune.get("found_planted") else 1
    return 0 if tune.get("exit_code") == 0 and tune.get("restored") else 1


if __name__ == "__main__":
    sys.exit(main())
