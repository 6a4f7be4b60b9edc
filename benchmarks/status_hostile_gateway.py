#!/usr/bin/env python3
"""`sglang-deploy status` against a hostile gateway: wall time, peak memory and what it printed.

    .venv/bin/python benchmarks/status_hostile_gateway.py [--cases NAME,...]

Each case is one answer a broken or compromised sglang-router could give to status's read of its
worker list (GET /workers), served from a raw socket on loopback (nothing above TCP is simulated):
headers one line at a time forever, a body one byte at a time, a body compressed twice (50 MB of
zeros in about 4 KB), 64 MiB of well-formed JSON, a worker list that echoes the API key back as
a worker's id and as a URL's password, a connection that is accepted and never answered; and a
well-formed empty list to compare with. The inventory names the gateway host (its SSH port
closed: only the HTTP read is under test) with an API key, and one worker behind it.

Per case the whole `sglang-deploy status INVENTORY --json` process is run as a user runs it and
measured: its wall time, its peak resident memory (``VmHWM`` read from /proc while it runs: the
kernel's ``ru_maxrss`` of a finished child also counts the pages of this process it was forked
from, 64 MiB more after the huge-json case), its exit code, whether a traceback or the API key
appears anywhere in its output, and the gateway's line in its answer. The goal, per case: done
within the read's bound (status gives each gateway ``GATEWAY_READ_TIMEOUT_S``;
sglang_deploy/status/model.py) plus 20 s for the process itself, under 512 MiB, no traceback, no
key. The last line says whether every case met it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from sglang_deploy.simulator.raw_peer import Behave, RawServer  # noqa: E402
from sglang_deploy.status.model import GATEWAY_READ_TIMEOUT_S  # noqa: E402

KEY = "sk-hostile-gw-KEY-0123456789abcdef"
MEMORY_GOAL_MB = 512
SLACK_S = 20.0


def _answer(body: bytes, headers: str = "Content-Type: application/json\r\n") -> bytes:
    return f"HTTP/1.1 200 OK\r\n{headers}Content-Length: {len(body)}\r\n\r\n".encode() + body


def well_formed(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(_answer(json.dumps({"workers": [], "total": 0}).encode()))


def trickle_headers(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    while not stop.wait(0.5):
        conn.sendall(b"X-Slow: 1\r\n")


def trickle_body(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
    while not stop.wait(0.2):
        conn.sendall(b" ")


NESTED = gzip.compress(gzip.compress(b"0" * (50 << 20)))


def nested_gzip(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(_answer(NESTED, "Content-Type: application/json\r\nContent-Encoding: gzip, gzip\r\n"))


def huge_json(conn: socket.socket, stop: threading.Event) -> None:
    worker = {"id": "7b4f1c2e-8a0d-4c3b-9a51-2f6e3d1c0b9a", "url": "http://10.0.0.5:30000", "is_healthy": True}
    one = json.dumps(worker).encode()
    count = (64 << 20) // (len(one) + 1)
    body = b'{"total": %d, "workers": [' % count + b",".join([one] * count) + b"]}"
    try:
        conn.sendall(_answer(body))
    except OSError:
        pass  # the client stopped reading at its cap


def echo_key(conn: socket.socket, stop: threading.Event) -> None:
    workers = [{"id": KEY, "url": "http://10.0.0.5:30000", "is_healthy": True},
               {"id": "7b4f1c2e-8a0d-4c3b-9a51-2f6e3d1c0b9a", "url": f"http://{KEY}@10.0.0.6:30000",
                "is_healthy": True}]
    conn.sendall(_answer(json.dumps({"workers": workers, "total": 2}).encode()))


def silent(conn: socket.socket, stop: threading.Event) -> None:
    stop.wait(600)


CASES: dict[str, Behave] = {"well-formed": well_formed, "trickle-headers": trickle_headers,
                            "trickle-body": trickle_body, "nested-gzip": nested_gzip, "huge-json": huge_json,
                            "echo-key": echo_key, "silent": silent}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def inventory(path: Path, gateway_port: int) -> Path:
    ssh = closed_port()
    text = f'''
gateways = [("gw", {{"ssh_hostname": "127.0.0.1", "ssh_port": {ssh},
                    "sglang_gateway": {{"port": {gateway_port}, "api_key": {{"env": "BENCH_GW_KEY"}}}}}})]
workers = [("w1", {{"ssh_hostname": "127.0.0.1", "ssh_port": {ssh}, "sglang_model": "Qwen/Qwen3-32B",
                   "sglang_model_source": "server",
                   "sglang_gpus": {{"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"}},
                   "sglang_gateways": ["gw"], "sglang_worker_url": "http://10.0.0.5:30000"}})]
'''
    path.write_text(text)
    return path


def hwm_kb(pid: int) -> int:
    """A running process's peak resident set so far (VmHWM, kB; 0 once it has exited): exec starts
    its count afresh, unlike the rusage of a finished child."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), 0)
    except (OSError, ValueError, IndexError):
        return 0


@dataclass
class Measured:
    returncode: int
    wall_s: float
    peak_kb: int  # the process's own peak resident set (hwm_kb while it ran)
    out: bytes
    err: bytes
    killed: bool  # still running ``kill_after_s`` after its start


def measured(argv: list[str], *, cwd: Path, env: dict, kill_after_s: float, preexec_fn: Any = None,
             max_bytes: int = -1) -> Measured:
    """``argv`` run to its end as a whole process (killed ``kill_after_s`` after its start), reaped
    here: its wall time, its own peak memory read from /proc while it runs, and its output (at most
    ``max_bytes`` of each stream; -1: all of it)."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                preexec_fn=preexec_fn)
        killed, peak_kb = False, 0
        while True:
            peak_kb = max(peak_kb, hwm_kb(proc.pid))
            pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > kill_after_s:
                proc.kill()
                _, status, _ = os.wait4(proc.pid, 0)
                killed = True
                break
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        return Measured(proc.returncode, wall, peak_kb, out.read(max_bytes), err.read(max_bytes), killed)


def run_case(name: str, behave: Behave, workdir: Path) -> dict:
    server = RawServer(behave)
    inv = inventory(workdir / f"{name}.py", server.port)
    env = {**os.environ, "BENCH_GW_KEY": KEY, "HF_HUB_OFFLINE": "1"}
    bound = GATEWAY_READ_TIMEOUT_S + SLACK_S
    m = measured([str(Path(sys.executable).parent / "sglang-deploy"), "status", str(inv), "--json"], cwd=ROOT,
                 env=env, kill_after_s=bound + 60)
    out, wall, peak_kb = m.out, m.wall_s, m.peak_kb
    server.close()
    text = (out + m.err).decode("utf-8", "replace")
    gateway_line = ""
    try:
        rows = json.loads(out)
        gw = next((r for r in rows if r.get("host") == "gw"), {})
        listed = (gw.get("gateway") or {}).get("listed")
        gateway_line = str(gw.get("error") or f"read: {listed} worker(s) listed")[:100]
    except (ValueError, AttributeError, TypeError):
        gateway_line = (text.strip().splitlines() or [""])[-1][:90]
    return {"case": name, "wall_s": wall, "peak_mb": peak_kb / 1024,
            "exit": m.returncode, "traceback": "Traceback" in text, "key": KEY in text,
            "within": wall <= bound, "gateway": gateway_line}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    args = ap.parse_args()
    names = [n for n in args.cases.split(",") if n]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown case(s): {', '.join(unknown)}")
    results = []
    with tempfile.TemporaryDirectory(prefix="status-hostile-") as tmp:
        for name in names:
            results.append(run_case(name, CASES[name], Path(tmp)))
    bound = GATEWAY_READ_TIMEOUT_S + SLACK_S
    print(f"{'case':<16} {'wall s':>7} {'peak MiB':>9} {'exit':>5}  traceback  key printed  "
          "the gateway's row in --json")
    met = True
    for r in results:
        peak = f"{r['peak_mb']:.0f}"
        ok = r["within"] and not r["traceback"] and not r["key"] and r["peak_mb"] < MEMORY_GOAL_MB
        met &= ok
        shown = "yes" if r["traceback"] else "no"
        print(f"{r['case']:<16} {r['wall_s']:>7.1f} {peak:>9} {r['exit']!s:>5}  {shown:<9}  "
              f"{'YES' if r['key'] else 'no':<11}  {r['gateway']}")
    worst = max(r["wall_s"] for r in results)
    peak_all = max(r["peak_mb"] for r in results)
    print(f"worst wall {worst:.1f} s (goal <= {bound:g} s), peak {peak_all:.0f} MiB (goal < {MEMORY_GOAL_MB}), "
          f"no traceback, no key: {'met' if met else 'NOT MET'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
