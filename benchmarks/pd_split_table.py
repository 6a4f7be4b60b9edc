#!/usr/bin/env python3
"""The prefill/decode split the plan suggests, per workload, for a gateway of eight servers.

    .venv/bin/python benchmarks/pd_split_table.py [--hosts 8] [--markdown]

Each row: a recorded checkpoint (sglang_deploy/simulator/facts_matrix.py) on one host class,
eight hosts behind one gateway planned as ``servers // 2`` prefill and the rest decode servers
(``sglang_role``), for three workloads given as ``sglang_objective``: a chat turn (2,000 prompt /
500 output tokens, TPOT 50 ms), retrieval-augmented answers (8,000 / 200) and long generation
(500 / 4,000, TPOT 30 ms). The columns are plan/pd_split.py's: the servers behind the gateway (a
host's data-parallel replicas are servers of their own), each role's predicted requests per
second per server, the even split's requests per second, the split it suggests and what that
serves. Figures are the speed model's (plan/perf.py), not measurements.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._table import print_table  # noqa: E402
from sglang_deploy.errors import PlanError  # noqa: E402
from sglang_deploy.plan import pd_split  # noqa: E402
from sglang_deploy.plan.hostplan import Plan  # noqa: E402
from sglang_deploy.plan.inventory_plan import plan_inventory  # noqa: E402
from sglang_deploy.plan.profiles import load_knowledge  # noqa: E402
from sglang_deploy.plan.spec import build_spec  # noqa: E402
from sglang_deploy.simulator.facts_matrix import checkpoints  # noqa: E402
from sglang_deploy.simulator.plan_matrix import FACTS_HARDWARE  # noqa: E402

CASES = (("deepseek-ai/DeepSeek-R1", "h200x8-nvswitch"), ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "h100x8-nvswitch"),
         ("Qwen/Qwen3-32B", "h100x8-nvswitch"))
WORKLOADS = {"chat 2000/500": {"input_tokens": 2000, "output_tokens": 500, "tpot_ms": 50},
             "RAG 8000/200": {"input_tokens": 8000, "output_tokens": 200, "tpot_ms": 50},
             "generation 500/4000": {"input_tokens": 500, "output_tokens": 4000, "tpot_ms": 30}}


def row(model: str, hardware: str, workload: str, hosts_n: int) -> list[str]:
    facts = checkpoints()[model]
    objective = {"serve": "throughput", "ttft_ms": None, **WORKLOADS[workload]}
    hosts = [(f"h{i}", {}, {"sglang_model": model, "sglang_gpus": FACTS_HARDWARE[hardware], "sglang_gateways": ["gw"],
                            "sglang_role": "prefill" if i < hosts_n // 2 else "decode", "sglang_objective": objective})
             for i in range(hosts_n)]
    plans = plan_inventory(hosts, facts={h[0]: facts for h in hosts})
    refused = next((p for p in plans if isinstance(p, PlanError)), None)
    if refused is not None:
        return [model, hardware, workload, f"refused: {refused.message[:60]}", *[""] * 5]
    advice = pd_split.advise("gw", [p for p in plans if isinstance(p, Plan)], load_knowledge().gpus,
                             build_spec("h0", {}, hosts[0][2]).workload)
    if advice is None or not advice.best_rps:
        return [model, hardware, workload, advice.text[:80] if advice else "no split", *[""] * 5]
    servers = advice.prefill + advice.decode
    return [model, hardware, workload, str(servers), f"{advice.prefill_rps:.2f}", f"{advice.decode_rps:.2f}",
            f"{advice.now_rps:.2f}", f"{advice.best_prefill} : {servers - advice.best_prefill}",
            f"{advice.best_rps:.2f}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=8, help="hosts behind the gateway (default 8)")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    head = ["checkpoint", "hosts", "workload", "servers", "prefill req/s", "decode req/s", "even split req/s",
            "suggested", "suggested req/s"]
    rows = [row(m, h, w, args.hosts) for m, h in CASES for w in WORKLOADS]
    print_table(head, rows, args.markdown)
    gains = [float(r[8]) / float(r[6]) for r in rows if r[6] and r[8] and float(r[6]) > 0]
    print(f"\n{len(rows)} rows: the suggested split serves {min(gains):.2f}x to {max(gains):.2f}x the even split's "
          "requests/s (speed model, not measured)" if gains else f"\n{len(rows)} rows: no split predicted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
