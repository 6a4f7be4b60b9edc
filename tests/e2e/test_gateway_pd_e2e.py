"""A disaggregated fleet behind the REAL SGLang Model Gateway (sglang-router 0.3.2) in its
prefill/decode mode, deployed by this project over real SSH to real systemd, with a client load
through the gateway.

Two serving hosts (NVML stand-in of 2x RTX A6000), each TP 1 x dp_size 2 behind the gateway, so two
servers each: the prefill host's two prefill servers (bootstrap ports BOOTSTRAP and BOOTSTRAP + 1)
and the decode host's two decode servers.

- `pyinfra -y INVENTORY deploy.py`: the gateway's router runs with --pd-disaggregation and lists
  both prefill servers with their bootstrap ports and both decode servers; each server's venv has
  its KV transfer engine (the simulated wheel under mooncake-transfer-engine's name) and imports it;
  a request through the gateway goes through a pair.
- A new revision of the whole fleet under client load: every server restarts, one at a time, out of
  the gateway while it restarts; no client request fails, and a role is never without a listed server.
- `sglang-deploy rollout` of a decode revision whose gate fails: the decode server is rolled back and
  joins again; no client request fails.
- A new revision with `sglang_drain: skip` on the decode host: client requests fail.

Stand-ins at the real boundaries only: the GPUs (NVML stand-in) and SGLang (the simulated server,
which simulates the KV transfer between the two; sglang_deploy/simulator/sglang_server/src/sglang/_sim/disagg.py).
"""

from __future__ import annotations

import json
import pprint
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sglang_deploy.plan.transfer import ENGINES
from sglang_deploy.simulator.testbed import Testbed, TestHost, fleet
from tests.conftest import ROOT
from tests.e2e.conftest import NOT_ABOUT_SPEED
from tests.e2e.gateway_fleet import (ROUTER_WHEELS_ON_HOST, GatewayView, ListPoller, boot_gateway_fleet,
                                     deploy_inventory, run_polling)
from tests.e2e.test_gateway_e2e import _ANSI, BOARD, ENV, KEY, KEY_ENV, SIM
from tests.gateway_load import ClientLoad
from tests.test_gateway_client_real import requests_total

GW, PREFILL, DECODE = "e2e-gwpd-router", "e2e-gwpd-prefill", "e2e-gwpd-decode"
# Fixed ports distinct from every other e2e file (the hosts share this machine's network).
PREFILL_PORT, DECODE_PORT, BOOTSTRAP, GW_PORT, GW_METRICS_PORT = 32501, 32511, 32521, 32531, 32532
GW_URL = f"http://127.0.0.1:{GW_PORT}"
VIEW = GatewayView(GW_URL, KEY)
PREFILLS = (f"http://127.0.0.1:{PREFILL_PORT}", f"http://127.0.0.1:{PREFILL_PORT + 1}")
DECODES = (f"http://127.0.0.1:{DECODE_PORT}", f"http://127.0.0.1:{DECODE_PORT + 1}")
URLS = PREFILLS + DECODES
UNITS = ("sglang", "sglang-dp1")
FAST_GATE = {"repeats": 2, "max_tokens": 48, "prefill_tokens": 512, "ready_timeout_s": 120, "run_on": "controller",
             **NOT_ABOUT_SPEED}
MAX_TOKENS, STREAMS = 96, 6
LONG_TOKENS = 1000  # test_without_the_drain_a_new_revision_fails_client_requests
T0 = time.monotonic()


def say(text: str) -> None:
    print(f"[gateway pd e2e +{time.monotonic() - T0:5.0f} s] {text}", flush=True)


@pytest.fixture(scope="module")
def hosts(testbed: Testbed, tmp_path_factory) -> dict[str, TestHost]:
    return boot_gateway_fleet(testbed, tmp_path_factory, GW, (PREFILL, DECODE), BOARD, SIM)


def write_inventory(path: Path, hosts: dict[str, TestHost], mark: str, decode: dict | None = None) -> Path:
    """The gateway host and the two role hosts; ``decode``: more of the decode host's data."""
    entries = []
    for name in (GW, PREFILL, DECODE):
        _, conn = hosts[name].inventory_entry()
        if name == GW:
            data = {"sglang_gateway": {"port": GW_PORT, "metrics_port": GW_METRICS_PORT, "host": "127.0.0.1",
                                       "policy": "round_robin", "health_interval": "1s",
                                       "api_key": {"env": KEY_ENV}},
                    "sglang_pip_find_links": ROUTER_WHEELS_ON_HOST, "sglang_pip_no_index": True}
        else:
            prefill = name == PREFILL
            intents = {"tp_size": 1, "dp_size": 2, **({"disaggregation_bootstrap_port": BOOTSTRAP} if prefill else {})}
            d = fleet.host_data(BOARD, PREFILL_PORT if prefill else DECODE_PORT, **intents)
            data = {**d, "sglang_secrets": {**d["sglang_secrets"], "api_key": {"env": KEY_ENV}},
                    "sglang_gateways": [GW], "sglang_role": "prefill" if prefill else "decode",
                    "sglang_target_tok_s": 50.0, "sglang_gate": FAST_GATE, "sglang_env": {"E2E_RELEASE": mark},
                    **({} if prefill else decode or {})}
        entries.append((name, {**conn, **data}))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('"""Gateway + prefill and decode servers e2e fleet (throwaway hosts)."""\n\n'
                    f"fleet = {pprint.pformat(entries, sort_dicts=False, width=110)}\n")
    return path


def unit_pid(host: TestHost, unit: str) -> int:
    return int(host.ssh(f"systemctl show -p MainPID --value {unit}.service").stdout.strip())


def release_of(host: TestHost, unit: str) -> str | None:
    lines = host.ssh(f"tr '\\0' '\\n' < /proc/{unit_pid(host, unit)}/environ").stdout.splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line).get("E2E_RELEASE")


class Roles(ListPoller):
    """Per read: how many prefill and decode servers the gateway listed healthy."""

    def __init__(self) -> None:
        super().__init__(VIEW)
        self.reads: list[tuple[int, int]] = []

    def observe(self, listed: dict[str, dict], now: float) -> None:
        healthy = [w for w in listed.values() if w.get("is_healthy") is True]
        self.reads.append((sum(w.get("worker_type") == "prefill" for w in healthy),
                           sum(w.get("worker_type") == "decode" for w in healthy)))


@pytest.fixture(scope="module")
def deployed(hosts, tmp_path_factory) -> dict[str, TestHost]:
    deploy_inventory(write_inventory(tmp_path_factory.mktemp("initial") / "inventory.py", hosts, "t0"), ENV, say,
                     "a gateway in prefill/decode mode, 2 prefill and 2 decode servers")
    return hosts


def test_the_gateway_pairs_the_prefill_and_decode_servers_it_was_deployed_with(deployed):
    listed = VIEW.wait_healthy(URLS, 90)
    assert {u: (listed[u]["worker_type"], listed[u].get("bootstrap_port")) for u in URLS} == {
        PREFILLS[0]: ("prefill", BOOTSTRAP), PREFILLS[1]: ("prefill", BOOTSTRAP + 1),
        DECODES[0]: ("decode", None), DECODES[1]: ("decode", None)}
    unit = deployed[GW].ssh("cat /etc/systemd/system/sglang-gateway.service").stdout
    assert "--pd-disaggregation" in unit and f"--prefill {PREFILLS[0]} {BOOTSTRAP}" in unit, unit
    assert f"--decode {DECODES[0]}" in unit and "--worker-urls" not in unit and KEY not in unit
    engine = ENGINES["mooncake"]
    for name in (PREFILL, DECODE):
        got = deployed[name].ssh("/opt/sglang/sglang-0.5.23/bin/python -c 'import importlib.metadata as m, "
                                 "mooncake.engine; print(m.version(\"mooncake-transfer-engine\"))'")
        assert got.stdout.strip() == engine.version, (name, got.stdout, got.stderr)
    before = sum(requests_total(u) for u in URLS)
    load = ClientLoad(GW_URL, api_key=KEY, streams=2, max_tokens=16).start()
    time.sleep(1.0)
    result = load.stop()
    assert result.failed == 0 and result.ok >= 2, [f.error for f in result.failures[:3]]
    # every request went to a prefill and a decode server
    assert sum(requests_total(u) for u in PREFILLS) >= result.ok and sum(requests_total(u) for u in DECODES) >= \
        result.ok and sum(requests_total(u) for u in URLS) - before >= 2 * result.ok


def test_a_new_revision_restarts_every_server_one_at_a_time_without_a_failed_request(deployed, tmp_path):
    VIEW.wait_healthy(URLS, 60)
    before = {(h, u): unit_pid(deployed[h], u) for h in (PREFILL, DECODE) for u in UNITS}
    inv = write_inventory(tmp_path / "inventory.py", deployed, "t1")
    client = ClientLoad(GW_URL, api_key=KEY, streams=STREAMS, max_tokens=MAX_TOKENS).start()
    t = time.monotonic()
    try:
        rc, output = run_polling([sys.executable, "-m", "pyinfra", "-y", str(inv), "deploy.py"], ROOT, ENV,
                                 polled := Roles())
    finally:
        result = client.stop()
    output = _ANSI.sub("", output)
    (tmp_path / "output.txt").write_text(output)
    drains = re.findall(r"\[(e2e-gwpd-\w+)\]\s+drained in ([0-9.]+) s", output)
    say(f"new revision of 2 prefill and 2 decode servers: {time.monotonic() - t:.1f} s; {result.requests} client "
        f"requests through the gateway, {result.failed} failed, p50 {result.p50_s or 0:.3f} s, p99 "
        f"{result.p99_s or 0:.3f} s; drains {drains}; fewest listed (prefill, decode) "
        f"{min(r[0] for r in polled.reads)}, {min(r[1] for r in polled.reads)}")
    assert rc == 0, output[-8000:]
    for (h, u), pid in before.items():
        assert unit_pid(deployed[h], u) != pid and release_of(deployed[h], u) == "t1", (h, u)
    assert len(drains) == 4, output[-6000:]
    # one server out at a time: a role never lost its last listed server
    assert min(r[0] for r in polled.reads) >= 1 and min(r[1] for r in polled.reads) >= 1, polled.reads
    assert any(r[0] == 1 for r in polled.reads) and any(r[1] == 1 for r in polled.reads), polled.reads
    assert result.failed == 0, [f.error for f in result.failures[:5]]
    VIEW.wait_healthy(URLS, 60)
    listed = VIEW.workers()
    assert [listed[u]["worker_type"] for u in URLS] == ["prefill", "prefill", "decode", "decode"]


def test_a_decode_canary_that_fails_its_gate_is_rolled_back_without_a_failed_request(deployed, tmp_path):
    """`sglang-deploy rollout` limited to the decode host, its revision's gate failing (a target of
    500 tok/s; the simulated server decodes 100): its first server leaves, restarts, fails, is
    rolled back and joins again as a decode server; the second is not touched."""
    host = deployed[DECODE]
    VIEW.wait_healthy(URLS, 60)
    before = {u: unit_pid(host, u) for u in UNITS}
    inv = write_inventory(tmp_path / "inventory.py", deployed, "t2", decode={"sglang_target_tok_s": 500.0})
    summary = tmp_path / "summary.json"
    client = ClientLoad(GW_URL, api_key=KEY, streams=STREAMS, max_tokens=MAX_TOKENS).start()
    t = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "rollout", str(inv), "--limit",
                               DECODE, "--json", str(summary)], cwd=ROOT, env=ENV, capture_output=True, text=True,
                              timeout=500)
    finally:
        result = client.stop()
    output = _ANSI.sub("", proc.stdout + proc.stderr)
    doc = json.loads(summary.read_text())
    say(f"decode rollout whose gate fails: {time.monotonic() - t:.1f} s, exit {proc.returncode}; {result.requests} "
        f"client requests through the gateway, {result.failed} failed, p99 {result.p99_s or 0:.3f} s")
    assert proc.returncode == 1, output[-6000:]
    assert [(h["host"], h["result"]) for h in doc["hosts"]] == [(DECODE, "rolled back")], doc["hosts"]
    assert unit_pid(host, UNITS[0]) != before[UNITS[0]] and release_of(host, UNITS[0]) == "t1"
    assert unit_pid(host, UNITS[1]) == before[UNITS[1]]
    listed = VIEW.wait_healthy(URLS, 60)
    assert listed[DECODES[0]]["worker_type"] == "decode"
    assert result.failed == 0, [f.error for f in result.failures[:5]]


def test_without_the_drain_a_new_revision_fails_client_requests(deployed, tmp_path):
    """Without the drain a decode server leaves the gateway and stops at once, cutting the streams
    it is serving. The requests are long here (1,000 tokens: about 10 s at the simulated 100 tok/s,
    a real reply's length): with the other tests' 96 tokens (about 1 s) every stream could end
    before the stop on a loaded machine, where pyinfra takes seconds from the leave to the stop (a
    fresh-clone CI run saw 114 requests, none failed), and the control would prove nothing."""
    VIEW.wait_healthy(URLS, 60)
    inv = write_inventory(tmp_path / "inventory.py", deployed, "t3", decode={"sglang_drain": "skip"})
    client = ClientLoad(GW_URL, api_key=KEY, streams=STREAMS, max_tokens=LONG_TOKENS, timeout_s=90).start()
    t = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(inv), "deploy.py"], cwd=ROOT, env=ENV,
                              capture_output=True, text=True, timeout=500)
    finally:
        result = client.stop()
    output = _ANSI.sub("", proc.stdout + proc.stderr)
    say(f"new revision, the decode servers' drain skipped: {time.monotonic() - t:.1f} s; {result.requests} client "
        f"requests through the gateway, {result.failed} failed, p99 {result.p99_s or 0:.3f} s")
    assert proc.returncode == 0, output[-6000:]
    assert result.failed >= 1, result
    VIEW.wait_healthy(URLS, 60)
