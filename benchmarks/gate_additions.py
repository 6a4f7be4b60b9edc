#!/usr/bin/env python3
"""What prefill and the concurrency level add to the deploy's gate (and so to the serving gap).

    .venv/bin/python benchmarks/gate_additions.py [--runs 3]

Plans the reference deployment (inventory/a6000.py: Qwen3.6-27B, TP 2 over 2x RTX A6000, MTP),
starts the simulated SGLang (sglang_deploy/simulator/sglang_server) with the plan's argv and the
reference deployment's performance model (sglang_deploy/simulator/perf/a6000_qwen36.yaml: about
52 tok/s single stream, 2,500 prompt tokens/s of prefill, 4% per further request in a batch), and
runs the gate as a deploy runs it by default (sglang_gate's defaults: 5 requests of 256 tokens, the
throughput objective's level of 8 streams, prefill of 2,048 tokens; no target, no baseline), printing
per run the measurement's seconds and what the concurrency level and the prefill took of them.
Goal: the two together at most 20 s. The simulated server's figures are planted, not SGLang's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.gate_accuracy import build_venv, clean_env, free_port  # noqa: E402

GOAL_S = 20.0


def main() -> int:
    import json
    import subprocess

    from sglang_deploy.commands.demo import with_address
    from sglang_deploy.commands.demo_setup import PERF_MODEL, SIMULATED, plan_for, reference_data
    from sglang_deploy.gate.options import CheckOptions
    from sglang_deploy.gate.run import run_check
    from sglang_deploy.plan.settings import GATE_ADDED_BUDGET_S, GATE_CONCURRENCY_BY_OBJECTIVE, GATE_DEFAULTS
    from sglang_deploy.simulator import perf_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    plan, _ = plan_for("a6000-1", reference_data())
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        py = build_venv(tmp)
        port = free_port()
        cfg = tmp / "sim.json"
        cfg.write_text(json.dumps({**SIMULATED, "startup_delay_s": 0.5,
                                   **perf_model.behaviour(perf_model.read_yaml(PERF_MODEL))}))
        argv = with_address(plan.argv, "127.0.0.1", port)
        with open(tmp / "sim.log", "wb") as log:
            proc = subprocess.Popen([str(py), "-m", "sglang.launch_server", *argv[argv.index("--model-path"):]],
                                    stdout=log, stderr=log, env=clean_env(SGLANG_SIM_CONFIG=str(cfg)), cwd=str(tmp))
            try:
                for _ in range(args.runs):
                    opts = CheckOptions(url=f"http://127.0.0.1:{port}", expect_plan=plan.as_dict(), ready_timeout=60,
                                        repeats=GATE_DEFAULTS["repeats"], max_tokens=GATE_DEFAULTS["max_tokens"],
                                        concurrency=GATE_CONCURRENCY_BY_OBJECTIVE["throughput"],
                                        prefill_tokens=GATE_DEFAULTS["prefill_tokens"],
                                        added_budget_s=GATE_ADDED_BUDGET_S)
                    report = run_check(opts)
                    if report["verdict"] == "error":
                        raise SystemExit(f"the gate could not measure: {report['reasons']}")
                    t = report["timing"]
                    rows.append((t["measure_s"], t["concurrency_s"], t["prefill_s"], report["decode_tok_s"],
                                 report["aggregate_tok_s"], report["prefill_tok_s"], report["verdict"]))
            finally:
                proc.terminate()
                proc.wait(10)
    print(f"{'run':>3}  {'measure s':>9}  {'concurrency s':>13}  {'prefill s':>9}  {'decode':>7}  "
          f"{'aggregate':>9}  {'prefill tok/s':>13}  verdict")
    for i, (meas, conc, pre, dec, agg, ptok, verdict) in enumerate(rows, 1):
        print(f"{i:>3}  {meas:>9.2f}  {conc:>13.2f}  {pre:>9.2f}  {dec:>7.1f}  {agg:>9.1f}  {ptok:>13.1f}  {verdict}")
    worst = max(r[1] + r[2] for r in rows)
    print(f"\nworst added (concurrency + prefill): {worst:.2f} s (goal <= {GOAL_S:g} s): "
          f"{'met' if worst <= GOAL_S else 'NOT met'}")
    return 0 if worst <= GOAL_S else 1


if __name__ == "__main__":
    sys.exit(main())
