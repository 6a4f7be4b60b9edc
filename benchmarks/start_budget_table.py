#!/usr/bin/env python3
"""The start budget of every recorded checkpoint on its reference hardware, beside the fixed 900 s
the gate once waited.

    .venv/bin/python benchmarks/start_budget_table.py [--version 0.5.23] [--markdown]

For each checkpoint of the facts matrix (sglang_deploy/simulator/facts_matrix.py) the reference
hardware is the layout of sglang_deploy/simulator/plan_matrix.FACTS_HARDWARE with the least GPU
memory in all on which it plans (ties: fewer GPUs, then the name). The budget is the plan's own
(sglang_deploy/plan/start_budget.py): the first start (caches cold, no recorded start) and a
later one with warm caches and still no history, both with the disk under the weights unknown
(200 MiB/s); "on NVMe" is the first start where the host says the weights are on an NVMe SSD
(1 GiB/s). After the first recorded start the host's own starts set it. "cut at 900 s" says
whether a first start that takes its whole cold budget would have been rolled back by the old
fixed timeout. A checkpoint whose size is unknown falls back to
the unit's start timeout (basis "profile"); one whose index gives no total size is counted from its
config.json's shapes ("~": estimated).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._table import print_table  # noqa: E402
from sglang_deploy.errors import PlanError  # noqa: E402
from sglang_deploy.plan import start_budget  # noqa: E402
from sglang_deploy.plan.profiles import load_knowledge  # noqa: E402
from sglang_deploy.simulator.facts_matrix import HARDWARE, checkpoints, plan_case  # noqa: E402

FIXED_S = 900


def _memory(name: str) -> tuple[float, int, str]:
    hw = HARDWARE[name]
    entry = load_knowledge().gpus.lookup(hw["model"])
    return (entry.planned_mib * hw["count"] if entry is not None else 0, hw["count"], name)


def reference(model: str, version: str):
    """The least memory on which it plans and its weights (known or estimated) fit with a tenth to spare."""
    for name in sorted(HARDWARE, key=_memory):
        plan = plan_case(model, name, version)
        if isinstance(plan, PlanError):
            continue
        known = start_budget.weights_bytes(plan)
        if known is None or known[0] * 1.1 <= _memory(name)[0] * (1 << 20):
            return name, plan
    return None, None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default="0.5.23")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    head = ["checkpoint", "reference", "weights GiB", "first start s", "on NVMe s", "warm s", "of which compile",
            "basis", f"cut at {FIXED_S} s"]
    rows = []
    for model in sorted(checkpoints()):
        name, plan = reference(model, args.version)
        if plan is None:
            rows.append([model, "none plans", "-", "-", "-", "-", "-", "-", "-"])
            continue
        cold, warm = plan.start_budget, start_budget.derive(plan, "warm")
        nvme = start_budget.derive(plan, "cold", "nvme")
        jit = sum(p.seconds for p in cold.parts if "JIT" in p.name or p.name == "torch.compile")
        known = start_budget.weights_bytes(plan)
        size = f"{known[0] / (1 << 30):.1f}" + ("~" if known[1] else "") if known else "?"
        rows.append([model, name, size, f"{cold.total_s:g}", f"{nvme.total_s:g}",
                     f"{warm.total_s:g}", str(jit), cold.basis, "yes" if cold.total_s > FIXED_S else "no"])
    print_table(head, rows, args.markdown)
    cut = sum(r[-1] == "yes" for r in rows)
    print(f"\n{len(rows)} checkpoints at SGLang {args.version}: {cut} first starts budgeted past the fixed {FIXED_S} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
