#!/usr/bin/env python3
"""The gate through a prefill/decode pair against each server alone: what the gateway's prefill/decode
mode adds to a request's first token and takes from its decode rate.

    .venv/bin/python benchmarks/pd_pair.py [--runs 3] [--decode-tok-s 100] [--ttft-s 0.05] [--markdown]

A simulated SGLang 0.5.23 prefill server and decode server (sglang_deploy/simulator/sglang_server,
``--disaggregation-mode``; the simulated KV transfer is a long poll of the prefill server's
bootstrap port) behind the REAL sglang-router 0.3.2, started with the argv the gateway host's unit
gets (plan/gateway_render.router_argv in prefill/decode mode). Per run, `sglang-deploy check`'s gate
(gate/run.py run_check, 5 requests of 64 tokens and a prefill of 512) three ways: through the
gateway (the router pairs the servers and adds the bootstrap fields), against the decode server
(``role`` decode: SGLang's fake bootstrap host, no transfer) and against the prefill server (``role``
prefill: its prefill alone). Prints TTFT, decode and prefill tok/s per way (medians over the runs)
and the pair's over the decode server's. The figures are the simulator's and the router's on this
machine: what the router and the transfer handshake add, not what a GPU does.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._table import print_table  # noqa: E402
from sglang_deploy.gate.options import CheckOptions  # noqa: E402
from sglang_deploy.gate.run import run_check  # noqa: E402
from sglang_deploy.plan.gateway import GatewaySettings  # noqa: E402
from sglang_deploy.plan.gateway_render import router_argv  # noqa: E402
from sglang_deploy.plan.pd_gateway import RoleOf  # noqa: E402
from sglang_deploy.simulator.sglang_server import build  # noqa: E402
from benchmarks.gate_accuracy import clean_env, free_port  # noqa: E402


def wait(url: str, path: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{url}{path} did not answer within {timeout:g} s")
        time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--decode-tok-s", type=float, default=100.0)
    parser.add_argument("--ttft-s", type=float, default=0.05)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    procs: list[subprocess.Popen] = []
    ways: dict[str, list[dict]] = {"through the gateway": [], "decode server alone": [], "prefill server alone": []}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        py = build.install_pd_venv(tmp, clean_env())
        cfg = tmp / "sim.json"
        cfg.write_text(f'{{"startup_delay_s": 0.2, "ttft_s": {args.ttft_s}, "decode_tok_s": {args.decode_tok_s}}}')
        env = clean_env(SGLANG_SIM_CONFIG=str(cfg))
        # the router looks for the model's tokenizer on the Hub: offline, it goes on without it
        router_env = clean_env(HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_OFFLINE="1")
        p_port, d_port, boot, gw_port = free_port(), free_port(), free_port(), free_port()
        p_url, d_url, gw_url = (f"http://127.0.0.1:{p}" for p in (p_port, d_port, gw_port))
        try:
            for port, role in ((p_port, "prefill"), (d_port, "decode")):
                extra = ["--disaggregation-bootstrap-port", str(boot)] if role == "prefill" else []
                procs.append(subprocess.Popen([str(py), "-m", "sglang.launch_server", "--model-path", "m", "--port",
                                               str(port), "--disaggregation-mode", role, *extra],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
            roles = {p_url: RoleOf("prefill", boot), d_url: RoleOf("decode", None)}
            settings = GatewaySettings(host="127.0.0.1", port=gw_port, metrics_port=free_port(), policy="round_robin",
                                       health_interval_s=1)
            procs.append(subprocess.Popen([sys.executable, "-m", "sglang_router.launch_router",
                                           *router_argv(settings, list(roles), roles=roles), "--log-level", "warn"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=router_env))
            for url, path in ((p_url, "/health"), (d_url, "/health"), (gw_url, "/readiness")):
                wait(url, path)
            common = dict(repeats=5, max_tokens=64, ready_timeout=30, prefill_tokens=512)
            for _ in range(args.runs):
                ways["through the gateway"].append(run_check(CheckOptions(url=gw_url, model="m", **common)))
                ways["decode server alone"].append(run_check(CheckOptions(url=d_url, role="decode", **common)))
                ways["prefill server alone"].append(run_check(CheckOptions(url=p_url, role="prefill", **common)))
        finally:
            for p in reversed(procs):
                p.terminate()
                p.wait(10)
    bad = [(way, r.get("verdict"), r.get("error")) for way, rs in ways.items() for r in rs
           if r.get("verdict") != "pass"]
    if bad:
        print(f"a gate did not pass: {bad[0]}")
        return 1

    def med(reports: list[dict], key: str) -> float | None:
        values = [r[key] for r in reports if isinstance(r.get(key), (int, float))]
        return statistics.median(values) if values else None

    def shown(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
        return "-" if value is None else f"{value * scale:.{digits}f}"

    rows = [(way, shown(med(rs, "ttft_s"), 1000), shown(med(rs, "decode_tok_s")), shown(med(rs, "prefill_tok_s")))
            for way, rs in ways.items()]
    print_table(("way", "TTFT ms", "decode tok/s", "prefill tok/s"), rows, args.markdown)
    pair, alone = ways["through the gateway"], ways["decode server alone"]
    ratio = (med(pair, "decode_tok_s") or 0) / (med(alone, "decode_tok_s") or 1)
    print(f"\n{args.runs} run(s): the pair's decode rate is {ratio:.3f}x the decode server's alone; its TTFT "
          f"{(med(pair, 'ttft_s') or 0) / (med(alone, 'ttft_s') or 1):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
