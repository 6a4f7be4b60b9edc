#!/usr/bin/env python3
"""Overhead of the gate: time from "server ready" to verdict, minus the measurement itself.

    .venv/bin/python benchmarks/gate_overhead.py [--runs 5]

Runs the whole `sglang-deploy check` (gate/run.py run_check: readiness, server
info, warm-up, config comparison against an expected plan, measurement,
verdict) against the simulated SGLang (sglang_deploy/simulator/sglang_server) and prints, per
run, ready-to-verdict seconds, measurement seconds and their difference.
Goal: overhead at most 2 s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.gate_accuracy import build_venv, simulator  # noqa: E402
from sglang_deploy.gate.options import CheckOptions  # noqa: E402
from sglang_deploy.gate.run import run_check  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        py = build_venv(tmp)
        with simulator(py, tmp, {"startup_delay_s": 0.5, "ttft_s": 0.05, "decode_tok_s": 200}) as port:
            for _ in range(args.runs):
                opts = CheckOptions(url=f"http://127.0.0.1:{port}", target_tok_s=100, repeats=5,
                                    max_tokens=64, ready_timeout=30)
                report = run_check(opts)
                if report["verdict"] != "pass":
                    raise SystemExit(f"check did not pass: {report['reasons']}")
                t = report["timing"]
                rows.append((t["ready_to_verdict_s"], t["measure_s"], t["overhead_s"]))
    print(f"{'run':>3}  {'ready->verdict s':>16}  {'measurement s':>13}  {'overhead s':>10}")
    for i, (total, meas, over) in enumerate(rows, 1):
        print(f"{i:>3}  {total:>16.3f}  {meas:>13.3f}  {over:>10.3f}")
    worst = max(r[2] for r in rows)
    print(f"\nworst overhead: {worst:.3f} s (goal <= 2 s): {'met' if worst <= 2 else 'NOT met'}")
    return 0 if worst <= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
