#!/usr/bin/env python3
"""Deploy wall time and remote commands: first deploy and no-op re-deploy, 1 and 4 hosts.

    sudo .venv/bin/python benchmarks/deploy_bench.py [--hosts 1,4] [--repeat 3]

Boots throwaway hosts (sglang_deploy/simulator/testbed: systemd-nspawn + sshd, needs root),
stands in GPUs (2x RTX A6000 NVML profile) and SGLang (simulated package from
a wheel directory on each host), then runs `pyinfra -y INVENTORY deploy.py`
twice per round: the first deploy on fresh hosts, then a no-op re-deploy.
Prints a table: median wall time and remote commands (shell commands +
uploads, per host) for each case, and the goals: a no-op re-deploy of one
host in at most 3 s, and of 4 hosts in at most 1.5x the one-host time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglang_deploy.simulator.testbed import Testbed  # noqa: E402
from sglang_deploy.simulator.testbed.fleet import build_wheels, host_data  # noqa: E402
from sglang_deploy.simulator.testbed.gpu import stage_gpu_host  # noqa: E402

#: The servers' ports: host i serves on PORTS[i]. The benchmarks' band (32300-32499, benchmarks/smoke.py
#: checks it), apart from the end-to-end tests' fixed ports (tests/test_e2e_ports.py).
PORTS = range(32300, 32320)


def run_deploy(inventory: Path, counts: Path) -> tuple[float, dict[str, int]]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/_counting_pyinfra.py"), str(counts), "-y",
                           str(inventory), "deploy.py"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "E2E_HF_TOKEN": "hf_bench"}, timeout=600)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"deploy failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, json.loads(counts.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="1,4")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(n) for n in args.hosts.split(",")]
    if not sizes or min(sizes) < 1 or max(sizes) > len(PORTS) or args.repeat < 1:
        parser.error(f"--hosts: counts from 1 to {len(PORTS)}; --repeat: at least 1")
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        wheels = tmp / "wheels"
        wheels.mkdir()
        build_wheels(wheels)
        results: dict[tuple[int, str], list[tuple[float, float]]] = {}
        for size in sizes:
            for _ in range(args.repeat):
                with Testbed() as bed:  # fresh hosts every round
                    names = [f"bench-{size}-{i}" for i in range(size)]
                    # every host stands in for the reference 2x A6000 box
                    hosts = bed.boot(names, setup=lambda name, root: stage_gpu_host(root, wheels, "a6000x2-bridge"))
                    data = {}
                    for i, h in enumerate(hosts):
                        data[h.name] = host_data("a6000x2-bridge", port=PORTS[i])
                    inventory = bed.write_inventory(tmp / "inventory.py", hosts, data, group="bench")
                    for case in ("first deploy", "no-op re-deploy"):
                        wall, counts = run_deploy(inventory, tmp / "counts.json")
                        results.setdefault((size, case), []).append((wall, sum(counts.values()) / size))
        for (size, case), samples in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            walls = [w for w, _ in samples]
            rows.append((case, size, statistics.median(walls), min(walls), max(walls), samples[0][1]))
    print(f"{'case':18} {'hosts':>5} {'median s':>9} {'min s':>7} {'max s':>7} {'remote ops/host':>16}")
    for case, size, med, lo, hi, ops in rows:
        print(f"{case:18} {size:>5} {med:>9.2f} {lo:>7.2f} {hi:>7.2f} {ops:>16.0f}")
    noop = {size: med for case, size, med, *_ in rows if case == "no-op re-deploy"}
    if 1 in noop:
        print(f"\nno-op re-deploy, 1 host: {noop[1]:.2f} s (goal <= 3 s)")
    if 1 in noop and 4 in noop:
        print(f"no-op re-deploy, 4 hosts / 1 host: {noop[4] / noop[1]:.2f}x (goal <= 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
