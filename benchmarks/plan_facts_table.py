#!/usr/bin/env python3
"""Checkpoint x hardware layout -> TP, EP, memory fraction, context, estimated KV tokens, or the refusal.

    .venv/bin/python benchmarks/plan_facts_table.py [--version 0.5.23] [--markdown]

Plans every checkpoint of the facts matrix (sglang_deploy/simulator/facts_matrix.py) on
the 13 hardware layouts of sglang_deploy/simulator/plan_matrix.py from the checkpoint's own facts and
prints one row per pair. The KV estimate is sizing.budget at the plan's TP,
memory fraction and KV dtype (what SGLang's pool would hold, per its own
formulas); a refusal prints the constraint or sizing that refused it. A checkpoint whose total
weight size is unknown (facts_matrix.weight_source) plans without a memory check: its fraction,
context and KV estimate print as "-", "-" and "?".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._table import print_table  # noqa: E402
from sglang_deploy.plan import sizing  # noqa: E402
from sglang_deploy.errors import PlanError  # noqa: E402
from sglang_deploy.simulator.facts_matrix import checkpoints, plan_case, weight_source  # noqa: E402
from sglang_deploy.simulator.plan_matrix import HARDWARE  # noqa: E402


def row(model: str, hardware: str, version: str) -> list[str]:
    result = plan_case(model, hardware, version)
    if isinstance(result, PlanError):
        msg = result.message
        why = msg.split(":", 1)[0] if msg.startswith("constraint ") else "no TP fits"
        return [model, hardware, "-", "-", "-", "-", "-", f"refused: {why}"]
    i = {k: r.value for k, r in result.intents.items()}
    b = sizing.budget(result.facts, i["tp_size"], result.gpus.memory_mib, i["mem_fraction_static"],
                      i["kv_cache_dtype"])
    kv = f"{b.kv_tokens:,}" if b else "?"
    # A checkpoint whose total weight size is unknown (a published config without an index) is
    # planned without a memory check: no fraction or context is set, SGLang picks its own.
    mem = "-" if i["mem_fraction_static"] is None else f"{i['mem_fraction_static']:g}"
    context = "-" if i["context_length"] is None else str(i["context_length"])
    ok = "ok" if weight_source(model) != "unknown" else "ok (weight size unknown: memory not checked)"
    return [model, hardware, str(i["tp_size"]), str(i["ep_size"]), mem, context, kv, ok]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default="0.5.23")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    head = ["checkpoint", "layout", "TP", "EP", "mem", "context", "KV tokens", "plan"]
    rows = [row(m, h, args.version) for m in sorted(checkpoints()) for h in sorted(HARDWARE)]
    print_table(head, rows, args.markdown)
    ok = sum(r[-1].startswith("ok") for r in rows)
    print(f"\n{ok} of {len(rows)} pairs plan at SGLang {args.version}; {len(rows) - ok} refused with the reason")
    return 0


if __name__ == "__main__":
    sys.exit(main())
