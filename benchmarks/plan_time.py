#!/usr/bin/env python3
"""Plan time of a 20-host inventory of mixed models, with each checkpoint's facts supplied.

    .venv/bin/python benchmarks/plan_time.py [--runs 5] [--version 0.5.23]

Builds 20 hosts (the facts matrix's checkpoints on hardware each fits, round-robin)
and times, per run, reading every checkpoint's metadata files from disk and parsing
them into facts (what a warm controller cache costs: no network) plus
`plan_inventory` over all hosts with those facts. Knowledge and catalogs are
loaded once, as in one `plan` command. Prints each run and the median. Goal:
under 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglang_deploy.errors import PlanError  # noqa: E402
from sglang_deploy.plan.inventory_plan import plan_inventory  # noqa: E402
from sglang_deploy.simulator import facts_matrix  # noqa: E402
from sglang_deploy.simulator.facts_matrix import checkpoints, plan_case  # noqa: E402
from sglang_deploy.simulator.plan_matrix import HARDWARE  # noqa: E402


def inventory(version: str, size: int = 20):
    """``size`` hosts: every (checkpoint, layout) pair that plans, taken round-robin over models."""
    facts = checkpoints()
    fits: dict[str, list[str]] = {}
    for model in sorted(facts):
        fits[model] = [h for h in sorted(HARDWARE) if not isinstance(plan_case(model, h, version), PlanError)]
    hosts, lookup, i = [], {}, 0
    while len(hosts) < size:
        for model, layouts in fits.items():
            if layouts and len(hosts) < size:
                name = f"host-{len(hosts):02d}"
                hosts.append((name, {}, {"sglang_model": model, "sglang_gpus": HARDWARE[layouts[i % len(layouts)]]}))
                lookup[name] = facts[model]
        i += 1
    return hosts, lookup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--version", default="0.5.23")
    args = parser.parse_args()
    hosts, lookup = inventory(args.version)
    times = []
    for run in range(args.runs):
        start = time.perf_counter()
        facts_matrix._recorded.cache_clear()
        parsed = checkpoints()
        lookup = {name: parsed[data["sglang_model"]] for name, _, data in hosts}
        read = time.perf_counter() - start
        plans = plan_inventory(hosts, sglang_version=args.version, facts=lookup)
        times.append(time.perf_counter() - start)
        refused = [p for p in plans if isinstance(p, PlanError)]
        print(f"run {run + 1}: {len(plans)} hosts ({len({h[2]['sglang_model'] for h in hosts})} models), "
              f"{len(refused)} refused, {times[-1]:.3f} s (metadata read and parsed: {read:.3f} s)")
    median = statistics.median(times)
    print(f"median {median:.3f} s for {len(hosts)} hosts (goal: under 2 s) -> {'OK' if median < 2 else 'SLOW'}")
    return 0 if median < 2 else 1


if __name__ == "__main__":
    sys.exit(main())
