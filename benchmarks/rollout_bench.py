#!/usr/bin/env python3
"""Fleet rollout wall time against hosts and wave layouts, and what the rollout adds per wave.

    sudo .venv/bin/python benchmarks/rollout_bench.py [--hosts 1,4,8] [--repeat 1]

Boots throwaway hosts (sglang_deploy/simulator/testbed, needs root), every one a 2x RTX A6000
stand-in with the simulated SGLang at 200 tok/s; installs once (one plain
deploy of all hosts, not timed), then times `sglang-deploy rollout` with a new
revision each run (a changed service environment) for several wave layouts.
The gate's measurement is fixed: 2 requests of 128 tokens after one warm-up.

Per wave it splits the wall time, from the hosts' own records, into:
- restart + gate: from the first restart in the wave (journal) to the last
  deployed marker written in it (gate passed);
- before the restart: pyinfra start, connecting, facts, staging and proving
  the revision (the deploy's own work, plus one pyinfra start per wave);
- runner: the rollout's own time around the pyinfra run (spawn, results, summary).
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

STATE = "var/lib/sglang-deploy/sglang"
GATE = {"repeats": 2, "max_tokens": 128, "ready_timeout_s": 120,
        # about rollout time, not speed: the gate judges no speed (as the weights benchmark: a busy
        # machine once measured a redeploy 21% below the host's own history and rolled it back)
        "tolerance": 0.9, "prediction_floor": 0.0}
LAYOUTS = {1: ["100%"], 4: ["100%", "1,25%", "2"], 8: ["100%", "1,25%", "50%"]}
#: The servers' ports: host i serves on PORTS[i]. The benchmarks' band (32300-32499, benchmarks/smoke.py
#: checks it), apart from the end-to-end tests' fixed ports (tests/test_e2e_ports.py).
PORTS = range(32320, 32340)


def write_inventory(path: Path, hosts, mark: str) -> Path:
    entries = []
    for i, h in enumerate(hosts):
        _, conn = h.inventory_entry()
        d = host_data("a6000x2-bridge", port=PORTS[i])
        entries.append((h.name, {**conn, **d, "sglang_target_tok_s": 100.0, "sglang_gate": GATE,
                                 "sglang_env": {"BENCH_RELEASE": mark}}))
    path.write_text(f"bench = {entries!r}\n")
    return path


def started_at(host, since: float) -> float:
    out = host.ssh(f"journalctl -u sglang.service -o short-unix --since @{int(since)} --no-pager").stdout
    times = [float(line.split()[0]) for line in out.splitlines() if " Stopping " in line and line[:1].isdigit()]
    if not times:
        times = [float(line.split()[0]) for line in out.splitlines() if " Started " in line and line[:1].isdigit()]
    return min(times)


def run(inventory: Path, waves: str, tmp: Path) -> tuple[float, dict]:
    summary = tmp / "summary.json"
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "rollout", str(inventory),
                           "--waves", waves, "--json", str(summary)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "E2E_HF_TOKEN": "hf_bench"})
    wall = time.time() - t0
    if proc.returncode:
        raise SystemExit(f"rollout failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
    return wall, {"t0": t0, **json.loads(summary.read_text())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="1,4,8")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    sizes = [int(n) for n in args.hosts.split(",")]
    if not sizes or min(sizes) < 1 or max(sizes) > len(PORTS) or args.repeat < 1:
        parser.error(f"--hosts: counts from 1 to {len(PORTS)}; --repeat: at least 1")
    rows, per_wave = [], []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        wheels = tmp / "wheels"
        wheels.mkdir()
        build_wheels(wheels)
        for size in sizes:
            with Testbed() as bed:
                hosts = bed.boot([f"bench-r{size}-{i}" for i in range(size)],
                                 setup=lambda name, root: stage_gpu_host(root, wheels, "a6000x2-bridge"))
                by_name = {h.name: h for h in hosts}
                run(write_inventory(tmp / "inv.py", hosts, "install"), "100%", tmp)  # install, not timed
                for layout in LAYOUTS.get(size, ["100%"]):
                    walls = []
                    for k in range(args.repeat):
                        wall, doc = run(write_inventory(tmp / "inv.py", hosts, f"{layout}-{k}"), layout, tmp)
                        walls.append(wall)
                        for w in doc["waves"]:
                            members = [by_name[n] for n in w["hosts"]]
                            first = min(started_at(h, doc["t0"]) for h in members)
                            done = max((h.root / STATE / "deployed").stat().st_mtime for h in members)
                            per_wave.append((size, layout, w["wave"], len(members), w["seconds"], done - first))
                        runner = wall - sum(w["seconds"] for w in doc["waves"])
                    rows.append((size, layout, len(doc["waves"]), statistics.median(walls), runner))
    print(f"\n{'hosts':>5}  {'waves':>8}  {'wave count':>10}  {'rollout s':>9}  {'runner s (total)':>16}")
    for size, layout, n, wall, runner in rows:
        print(f"{size:>5}  {layout:>8}  {n:>10}  {wall:>9.2f}  {runner:>16.2f}")
    print(f"\n{'hosts':>5}  {'waves':>8}  {'wave':>4}  {'hosts':>5}  {'wave s':>6}  {'restart+gate s':>14}  "
          f"{'before restart s':>16}")
    for size, layout, wave, n, secs, gate in per_wave:
        print(f"{size:>5}  {layout:>8}  {wave:>4}  {n:>5}  {secs:>6.2f}  {gate:>14.2f}  {secs - gate:>16.2f}")
    before = [secs - gate for *_, secs, gate in per_wave]
    print(f"\nper wave, beyond restart + gate: median {statistics.median(before):.2f} s "
          f"(pyinfra start, connect, facts, stage + prove); the runner itself: "
          f"median {statistics.median([r[4] / r[2] for r in rows]):.2f} s per wave")
    return 0


if __name__ == "__main__":
    sys.exit(main())
