#!/usr/bin/env python3
"""`sglang-deploy status` wall time against the number of hosts, and what 100 and 1,000 would take.

    sudo .venv/bin/python benchmarks/status_scale.py [--hosts 1,4,10] [--repeat 5]

Boots the largest count of throwaway hosts (sglang_deploy/simulator/testbed, needs root), every one
a 2x RTX A6000 stand-in with the simulated SGLang, and deploys them all once with the real
`pyinfra -y INVENTORY deploy.py` (not timed): each host then holds a deployed revision, a running
unit and a gate line in its history, as after a real deploy. Then, for each count N, an inventory
of the first N of those hosts, and the whole `sglang-deploy status INVENTORY --json` process is
timed (as a user runs it: interpreter start, imports, connect, probe, plan, state read, print),
``--repeat`` times after one untimed warm-up run. A run counts only when it exits 0 with every
row ``ok``; anything else stops the benchmark with status's output.

Printed per N: median, min and max wall time, wall per host, the status process's own CPU time
(user + system, from the kernel's accounting of the finished child), and the CPU time the hosts
spent on it (every process in each host's PID namespace, /proc/PID/stat, children reaped during
the run included: the SSH sessions, the login's user manager, the probe, the state read; less
what the same hosts spend idle in as long, measured for IDLE_S before each count), both per
host too.

The projection. status connects to, probes and reads every host at once, one greenlet per host
(sglang_deploy/deploy/status.py), in one process on one core: the waits on the network overlap,
the controller's CPU work per host (SSH handshake and channels, parsing, planning) does not. So
the model is wall(n) = fixed + per_host * n, with ``fixed`` and ``per_host`` fitted (least squares)
to the measured medians, not assumed; 100 and 1,000 hosts are that line extended. On this testbed
the hosts share the controller's CPUs (each host's probe and state read are Python processes on
the same cores), so the fitted per-host wall includes the hosts' own work, which a real fleet
does on its own machines: that projection is an upper bound for a controller of the same speed.
On a real fleet the part that grows with n is the status process's CPU per host (one core, the
greenlets take turns), so the second projection is the status CPU line, fitted the same way; the
network's round trips overlap and add a constant, not a per-host term.

The hosts are masked from starting this machine's Prometheus and node_exporter units (the
throwaway hosts boot a copy of this machine's root and share its network: they would fight over
ports 9090 and 9100 and add their start-up to the measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglang_deploy.simulator.testbed import Testbed, TestHost  # noqa: E402
from sglang_deploy.simulator.testbed.fleet import TOKEN_ENV, build_wheels, host_data  # noqa: E402
from sglang_deploy.simulator.testbed.gpu import stage_gpu_host  # noqa: E402
from sglang_deploy.simulator.testbed.processes import children_of, pid_namespace, pids_in_namespace  # noqa: E402

#: The servers' ports: host i serves on PORTS[i]. The benchmarks' band (32300-32499, benchmarks/smoke.py
#: checks it), apart from the end-to-end tests' fixed ports (tests/test_e2e_ports.py).
PORTS = range(32400, 32500)
#: A short gate for the one deploy (its figures do not matter here, only that a gate line exists).
GATE = {"repeats": 2, "max_tokens": 64, "ready_timeout_s": 120,
        # about status's time, not speed: the gate judges no speed (as the weights benchmark: a busy
        # machine once measured a redeploy 21% below the host's own history and rolled it back)
        "tolerance": 0.9, "prediction_floor": 0.0}
ENV = {**os.environ, TOKEN_ENV: "hf_status_bench"}
DEPLOY_TIMEOUT_S = 1800
STATUS_TIMEOUT_S = 600
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: How long the hosts' idle CPU (the servers, journald, timers) is sampled before each count.
IDLE_S = 5.0


def setup(wheels: Path):
    def stage(name: str, root: Path) -> None:
        # Debian's prometheus units are masked by the testbed itself (testbed/rootfs.py).
        stage_gpu_host(root, wheels, "a6000x2-bridge")
    return stage


def namespaces(hosts: list[TestHost]) -> list[str]:
    """The PID namespace of each host's init (the child of its systemd-nspawn)."""
    own = pid_namespace(os.getpid())
    found = []
    for host in hosts:
        assert host.process is not None
        inner = [ns for ns in map(pid_namespace, children_of(host.process.pid)) if ns and ns != own]
        if not inner:
            raise SystemExit(f"{host.name}: no process of its own PID namespace found")
        found.append(inner[0])
    return found


def hosts_cpu(spaces: list[str]) -> dict[tuple[int, str], float]:
    """CPU seconds of every process in ``spaces``, its reaped children's included, by (pid, start time)."""
    cpu = {}
    for ns in spaces:
        for pid in pids_in_namespace(ns):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue  # gone meanwhile
            # after the command name: state is field 3 of proc(5), utime..cstime 14-17, starttime 22
            ticks = sum(int(v) for v in fields[11:15])
            cpu[(pid, fields[19])] = ticks / CLOCK_TICKS
    return cpu


def cpu_spent(before: dict[tuple[int, str], float], after: dict[tuple[int, str], float]) -> float:
    return sum(t - before.get(key, 0.0) for key, t in after.items())


def data_for(index: int) -> dict:
    return {**host_data("a6000x2-bridge", port=PORTS[index]), "sglang_gate": GATE}


def idle_rate(spaces: list[str]) -> float:
    """CPU seconds per second the hosts of ``spaces`` spend with nobody asking them anything."""
    before = hosts_cpu(spaces)
    time.sleep(IDLE_S)
    return cpu_spent(before, hosts_cpu(spaces)) / IDLE_S


def run_status(inventory: Path, expected: int, spaces: list[str], idle: float) -> tuple[float, float, float]:
    """One whole `sglang-deploy status --json` process: wall seconds, its CPU seconds, the hosts' CPU
    seconds above their ``idle`` rate."""
    hosts_before = hosts_cpu(spaces)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "status", str(inventory), "--json"],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=STATUS_TIMEOUT_S)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    on_hosts = cpu_spent(hosts_before, hosts_cpu(spaces)) - idle * wall
    try:
        rows = json.loads(proc.stdout)
    except ValueError:
        rows = []
    states = [row.get("state") for row in rows]
    if proc.returncode != 0 or len(rows) != expected or set(states) != {"ok"}:
        raise SystemExit(f"status did not report {expected} hosts ok (exit {proc.returncode}, states {states}):\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, cpu, on_hosts


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares line through ``(n, seconds)``: (fixed, per_host)."""
    xs, ys = [float(n) for n, _ in points], [s for _, s in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - slope * mx, slope


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="1,4,10", help="host counts, comma-separated (default 1,4,10)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per count (default 5)")
    args = parser.parse_args()
    sizes = sorted({int(n) for n in args.hosts.split(",")})
    if not sizes or sizes[0] < 1 or sizes[-1] > len(PORTS) or args.repeat < 1:
        parser.error(f"--hosts: counts from 1 to {len(PORTS)}; --repeat: at least 1")
    results: dict[int, list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp_name, Testbed() as bed:
        tmp = Path(tmp_name)
        wheels = tmp / "wheels"
        wheels.mkdir()
        build_wheels(wheels)
        names = [f"status-bench-{i}" for i in range(sizes[-1])]
        t0 = time.perf_counter()
        hosts: list[TestHost] = bed.boot(names, setup=setup(wheels))
        booted = time.perf_counter() - t0
        data = {h.name: data_for(i) for i, h in enumerate(hosts)}
        full = bed.write_inventory(tmp / "inventory-all.py", hosts, data, group="bench")
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(full), "deploy.py"], cwd=ROOT, env=ENV,
                              capture_output=True, text=True, timeout=DEPLOY_TIMEOUT_S)
        if proc.returncode:
            raise SystemExit(f"deploy failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        print(f"booted {len(hosts)} hosts in {booted:.1f} s, deployed them in {time.perf_counter() - t0:.1f} s",
              flush=True)
        spaces = namespaces(hosts)
        for size in sizes:
            inventory = bed.write_inventory(tmp / f"inventory-{size}.py", hosts[:size], data, group="bench")
            run_status(inventory, size, spaces[:size], 0.0)  # warm-up: page cache, bytecode, the hosts' first logins
            idle = idle_rate(spaces[:size])
            results[size] = [run_status(inventory, size, spaces[:size], idle) for _ in range(args.repeat)]
            print(f"  {size} hosts (idle {idle:.2f} CPU s/s): " + ", ".join(f"{w:.2f} s" for w, _, _ in results[size]),
                  flush=True)
    print(f"\n{'hosts':>5} {'median s':>9} {'min s':>6} {'max s':>6} {'wall/host s':>11} "
          f"{'status CPU s':>12} {'/host':>6} {'hosts CPU s':>11} {'/host':>6}", flush=True)
    medians, cpu_medians = [], []
    for size, samples in results.items():
        walls = [w for w, _, _ in samples]
        med, cpu = statistics.median(walls), statistics.median(c for _, c, _ in samples)
        on_hosts = statistics.median(h for _, _, h in samples)
        medians.append((size, med))
        cpu_medians.append((size, cpu))
        print(f"{size:>5} {med:>9.2f} {min(walls):>6.2f} {max(walls):>6.2f} {med / size:>11.3f} "
              f"{cpu:>12.2f} {cpu / size:>6.3f} {on_hosts:>11.2f} {on_hosts / size:>6.3f}")
    if len(medians) >= 2:
        fixed, per_host = fit(medians)
        cpu_fixed, cpu_per_host = fit(cpu_medians)
        print(f"\nfit: wall(n) = {fixed:.2f} s + {per_host:.3f} s x n  (status CPU: {cpu_fixed:.2f} s + "
              f"{cpu_per_host:.3f} s x n)")
        if per_host <= 0:
            print("no per-host cost measurable at these counts: the runs' spread is larger than it")
            return 0
        for n in (100, 1000):
            print(f"projected {n:>5} hosts: {fixed + per_host * n:7.1f} s wall on this testbed (upper bound), "
                  f"{cpu_fixed + max(cpu_per_host, 0.0) * n:7.1f} s of status CPU (a real fleet's floor)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
