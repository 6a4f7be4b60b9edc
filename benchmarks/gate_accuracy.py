#!/usr/bin/env python3
"""Accuracy of the gate's decode rate: measured vs true single-stream tok/s.

    .venv/bin/python benchmarks/gate_accuracy.py [--rates 10,100,1000,5000] [--chunks 1,2,4] [--repeats 3]

Builds the SIMULATED SGLang (sglang_deploy/simulator/sglang_server, a stand-in that emits
tokens on an exact schedule: token i at t_first + i / rate, a chunk sent when
its last token is due) into a throwaway venv, then for every rate and
tokens-per-chunk starts it and measures it with the same code as
`sglang-deploy check` (gate/client.py wait_ready, negotiate, run_single). Prints a
table: true rate, tokens per chunk, output tokens per request, measured median
decode tok/s, error % (median and worst request). Goal: |error| <= 1% everywhere.
Each configuration runs a fraction of a second to about two seconds per request.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglang_deploy.gate import client as gate_client, measure  # noqa: E402
from sglang_deploy.gate.files import load_prompts  # noqa: E402



def max_tokens_for(rate: float) -> int:
    """One second of decode per request (two below 100 tok/s), at least 21 tokens."""
    seconds = 1.0 if rate >= 100 else 2.0
    return max(21, int(rate * seconds) + 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "SGLANG_"))}
    env.update(extra)
    return env


def build_venv(tmp: Path) -> Path:
    from sglang_deploy.simulator.sglang_server import build as build
    wheels = tmp / "wheels"
    build.build_wheels(["0.5.23"], wheels)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=clean_env())
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                    "--find-links", str(wheels), "sglang==0.5.23"], check=True, env=clean_env(), timeout=300)
    return py


@contextlib.contextmanager
def simulator(py: Path, tmp: Path, config: dict) -> Iterator[int]:
    """Run the simulated server with ``config`` on a free port; yields the port, stops it after."""
    port = free_port()
    cfg = tmp / f"sim-{port}.json"
    cfg.write_text(json.dumps(config))
    with open(tmp / f"sim-{port}.log", "wb") as log:
        proc = subprocess.Popen([str(py), "-m", "sglang.launch_server", "--model-path", "m", "--port", str(port)],
                                stdout=log, stderr=log, env=clean_env(SGLANG_SIM_CONFIG=str(cfg)), cwd=str(tmp))
        try:
            yield port
        finally:
            proc.terminate()
            proc.wait(10)


def measure_config(py: Path, tmp: Path, rate: float, tpc: int, repeats: int) -> dict:
    n = max_tokens_for(rate)
    config = {"startup_delay_s": 0.1, "ttft_s": 0.02, "decode_tok_s": rate, "tokens_per_chunk": tpc}
    with simulator(py, tmp, config) as port, \
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60, trust_env=False) as client:
        gate_client.wait_ready(client, 30, lambda m: None)
        warnings: list[str] = []
        shape = gate_client.negotiate(client, "m", "warm up", 32, warnings)
        prompts = load_prompts()
        figures = gate_client.run_single(client, shape, prompts, repeats, n, lambda m: None)
    rates = [f.decode_tok_s for f in figures]
    med = measure.spread(rates).median
    worst = max(rates, key=lambda r: abs(r - rate))
    return {"rate": rate, "tpc": tpc, "tokens": n, "chunks": figures[0].chunks, "median": med,
            "error_pct": (med - rate) / rate * 100, "worst_pct": (worst - rate) / rate * 100,
            "seconds": sum(f.decode_s for f in figures) / len(figures)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="10,100,1000,5000")
    parser.add_argument("--chunks", default="1,2,4")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    chunks = [int(c) for c in args.chunks.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        py = build_venv(tmp)
        for rate in rates:
            for tpc in chunks:
                rows.append(measure_config(py, tmp, rate, tpc, args.repeats))
                r = rows[-1]
                print(f"  measured {r['rate']:g} tok/s x {r['tpc']}: {r['median']:.2f}", file=sys.stderr)
    print()
    print(f"{'true tok/s':>10}  {'tok/chunk':>9}  {'tokens':>6}  {'chunks':>6}  {'decode s':>8}  "
          f"{'measured':>10}  {'error %':>8}  {'worst %':>8}")
    for r in rows:
        print(f"{r['rate']:>10g}  {r['tpc']:>9}  {r['tokens']:>6}  {r['chunks']:>6}  {r['seconds']:>8.2f}  "
              f"{r['median']:>10.2f}  {r['error_pct']:>+8.3f}  {r['worst_pct']:>+8.3f}")
    worst = max(abs(r["worst_pct"]) for r in rows)
    ok = worst <= 1.0
    # The verdict is printed, not the exit: like the other benchmarks, a goal missed on a busy
    # machine (1.165% at the smoke size beside the e2e lanes) is a figure to read, not a failed run.
    print(f"\nworst |error| of any request: {worst:.3f}% (goal <= 1%): {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
