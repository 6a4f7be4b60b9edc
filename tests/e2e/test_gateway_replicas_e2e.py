"""A host's data-parallel replicas behind the REAL SGLang Model Gateway (sglang-router 0.3.2), each
its own server and worker, deployed by this project over real SSH to real systemd, with a client
load through the gateway.

The host (NVML stand-in of 2x RTX A6000) declares TP 1 x dp_size 2. Behind a gateway that is two
servers, as sglang-router's own co-launcher starts them (sglang_router/launch_server.py): unit
`sglang` on GPU 0 and port P, unit `sglang-dp1` on GPU 1 and port P+1, neither with --dp-size.

- The whole inventory deployed with `pyinfra -y INVENTORY deploy.py`: the gateway lists both
  replicas healthy; each unit's server sees only its own GPU and serves on its own port.
- A new revision under client load: the replicas restart one after the other, each out of the
  gateway while it restarts (the other one serves); no client request fails.
- The gateway's own new revision: the restarted router is given back the replica its unit does
  not name (only replica 0 is in --worker-urls, from the inventory), so both are listed again.

Stand-ins at the real boundaries only: the GPUs (NVML stand-in) and SGLang (the simulated server).
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

from sglang_deploy.lifecycle.revision import STATE_ROOT
from sglang_deploy.simulator.testbed import Testbed, TestHost, fleet
from tests.conftest import ROOT
from tests.e2e.gateway_fleet import (ROUTER_WHEELS_ON_HOST, GatewayView, ListPoller, boot_gateway_fleet,
                                     deploy_inventory, run_polling, status_rows)
from tests.e2e.test_gateway_e2e import _ANSI, BOARD, ENV, KEY, KEY_ENV, SIM, pyinfra_deploy
from tests.gateway_load import ClientLoad
from tests.e2e.conftest import NOT_ABOUT_SPEED

GW, HOST = "e2e-gwdp-router", "e2e-gwdp-w"
# Fixed ports distinct from every other e2e file (the hosts share this machine's network).
PORT, GW_PORT, GW_METRICS_PORT = 32201, 32210, 32211
GW_URL = f"http://127.0.0.1:{GW_PORT}"
VIEW = GatewayView(GW_URL, KEY)
URLS = (f"http://127.0.0.1:{PORT}", f"http://127.0.0.1:{PORT + 1}")
UNITS = ("sglang", "sglang-dp1")
FAST_GATE = {"repeats": 2, "max_tokens": 48, "ready_timeout_s": 120, "run_on": "controller", **NOT_ABOUT_SPEED}
T0 = time.monotonic()


def say(text: str) -> None:
    print(f"[gateway replicas e2e +{time.monotonic() - T0:5.0f} s] {text}", flush=True)


@pytest.fixture(scope="module")
def hosts(testbed: Testbed, tmp_path_factory) -> dict[str, TestHost]:
    return boot_gateway_fleet(testbed, tmp_path_factory, GW, (HOST,), BOARD, SIM)


def write_inventory(path: Path, hosts: dict[str, TestHost], mark: str, health_interval: str = "1s",
                    target: float = 50.0, layout: dict | None = None, port: int = PORT) -> Path:
    entries = []
    for name in (GW, HOST):
        _, conn = hosts[name].inventory_entry()
        if name == GW:
            data = {"sglang_gateway": {"port": GW_PORT, "metrics_port": GW_METRICS_PORT, "host": "127.0.0.1",
                                       "policy": "round_robin", "health_interval": health_interval,
                                       "api_key": {"env": KEY_ENV}},
                    "sglang_pip_find_links": ROUTER_WHEELS_ON_HOST, "sglang_pip_no_index": True}
        else:
            d = fleet.host_data(BOARD, port, **(layout or {"tp_size": 1, "dp_size": 2}))
            data = {**d, "sglang_secrets": {**d["sglang_secrets"], "api_key": {"env": KEY_ENV}},
                    "sglang_gateways": [GW], "sglang_target_tok_s": target, "sglang_gate": FAST_GATE,
                    "sglang_env": {"E2E_RELEASE": mark}}
        entries.append((name, {**conn, **data}))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('"""Gateway + data-parallel replicas e2e fleet (throwaway hosts)."""\n\n'
                    f"fleet = {pprint.pformat(entries, sort_dicts=False, width=110)}\n")
    return path


def unit_pid(host: TestHost, unit: str) -> int:
    return int(host.ssh(f"systemctl show -p MainPID --value {unit}.service").stdout.strip())


def environ(host: TestHost, unit: str) -> dict[str, str]:
    lines = host.ssh(f"tr '\\0' '\\n' < /proc/{unit_pid(host, unit)}/environ").stdout.splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def argv(host: TestHost, unit: str) -> list[str]:
    return host.ssh(f"tr '\\0' '\\n' < /proc/{unit_pid(host, unit)}/cmdline").stdout.splitlines()


class Listed(ListPoller):
    """Per read: the replicas the gateway listed healthy."""

    def __init__(self) -> None:
        super().__init__(VIEW)
        self.reads: list[tuple[bool, bool]] = []

    def observe(self, listed: dict[str, dict], now: float) -> None:
        self.reads.append(tuple(listed.get(u, {}).get("is_healthy") is True for u in URLS))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def deployed(hosts, tmp_path_factory) -> dict[str, TestHost]:
    deploy_inventory(write_inventory(tmp_path_factory.mktemp("initial") / "inventory.py", hosts, "t0"), ENV, say,
                     "a gateway and a host of 2 replicas")
    return hosts


def test_each_replica_is_a_server_and_a_worker_of_its_own(deployed):
    host = deployed[HOST]
    VIEW.wait_healthy(URLS, 90)
    for i, unit in enumerate(UNITS):
        args = argv(host, unit)
        assert args[args.index("--port") + 1] == str(PORT + i), args
        assert args[args.index("--tp-size") + 1] == "1" and "--dp-size" not in args, args
        env = environ(host, unit)
        assert env.get("CUDA_VISIBLE_DEVICES") == str(i), (unit, env.get("CUDA_VISIBLE_DEVICES"))
        assert env.get("E2E_RELEASE") == "t0"
    assert unit_pid(host, UNITS[0]) != unit_pid(host, UNITS[1])


def test_status_gives_each_replica_a_row_and_expects_both_in_the_gateway(deployed, tmp_path):
    """`sglang-deploy status`: one row per replica (its unit's revision, server and membership), and
    the gateway row counts each replica as a worker the inventory gives it."""
    inv = write_inventory(tmp_path / "inventory.py", deployed, "t0")
    proc, rows = status_rows(inv, ENV)
    gw = rows[GW]["gateway"]
    assert (gw["expected"], gw["healthy"], gw["others_total"]) == (2, 2, 0), gw
    assert rows[GW]["state"] == "ok", (rows[GW]["problems"], rows[GW]["warnings"])
    mine = [r for r in json.loads(proc.stdout) if r["host"] == HOST]
    assert [r["service"] for r in mine] == list(UNITS)
    pids = [r["server"]["main_pid"] for r in mine]
    assert pids == [unit_pid(deployed[HOST], u) for u in UNITS], pids
    for r in mine:
        assert r["state"] == "ok" and r["gateways"] == {GW: "listed"}, (r["service"], r["problems"], r["warnings"])
        assert r["revision"]["running"] == r["revision"]["deployed"] == r["revision"]["planned"] is not None
    assert mine[0]["revision"]["running"] != mine[1]["revision"]["running"]  # each unit its own revision
    table = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "status", str(inv)], cwd=ROOT,
                           env=ENV, capture_output=True, text=True, timeout=300).stdout
    assert f"{HOST}:sglang " in table and f"{HOST}:sglang-dp1 " in table, table
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_a_new_revision_restarts_the_replicas_one_at_a_time_out_of_the_gateway(deployed, tmp_path):
    host = deployed[HOST]
    before = {u: unit_pid(host, u) for u in UNITS}
    VIEW.wait_healthy(URLS, 60)
    inv = write_inventory(tmp_path / "inventory.py", deployed, "t1")
    client = ClientLoad(GW_URL, api_key=KEY, streams=4, max_tokens=96).start()
    t = time.monotonic()
    try:
        rc, output = run_polling([sys.executable, "-m", "pyinfra", "-y", str(inv), "deploy.py"], ROOT, ENV,
                                 polled := Listed())
    finally:
        result = client.stop()
    output = _ANSI.sub("", output)
    (tmp_path / "output.txt").write_text(output)
    took = [float(s) for s in re.findall(rf"\[{HOST}\]\s+drained in ([0-9.]+) s", output)]
    say(f"new revision of 2 replicas: {time.monotonic() - t:.1f} s; {result.requests} client requests through the "
        f"gateway, {result.failed} failed, p50 {result.p50_s or 0:.3f} s, p99 {result.p99_s or 0:.3f} s; drains "
        f"{took}; reads with replica 0 out {sum(1 for r in polled.reads if not r[0])}, replica 1 out "
        f"{sum(1 for r in polled.reads if not r[1])}, both out {sum(1 for r in polled.reads if not any(r))}")
    assert rc == 0, output[-8000:]
    for unit in UNITS:
        assert unit_pid(host, unit) != before[unit] and environ(host, unit).get("E2E_RELEASE") == "t1", unit
    assert len(took) == 2, output[-6000:]  # each replica drained on its own
    lines = output.splitlines()

    def first(text: str, after: int = 0) -> int:
        return next(i for i, line in enumerate(lines) if i >= after and f"[{HOST}]" in line and text in line)

    # replica 1 left its gateway only after replica 0 had joined again
    joined = first("registered again in")
    assert first("drained in", first("drained in") + 1) > joined
    # each replica was out of the gateway at some read, never both at once
    assert any(not r[0] for r in polled.reads) and any(not r[1] for r in polled.reads), polled.reads
    assert not any(not any(r) for r in polled.reads), polled.reads
    assert result.failed == 0, [f.error for f in result.failures[:5]]


def test_a_restarted_gateway_gets_back_the_replica_its_unit_does_not_name(deployed, tmp_path):
    listed = VIEW.wait_healthy(URLS, 60)
    before = listed[URLS[1]]["id"]
    inv = write_inventory(tmp_path / "inventory.py", deployed, "t1", health_interval="2s")
    proc = pyinfra_deploy(inv, timeout=400)
    output = _ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode == 0, output[-8000:]
    assert "registered again 1 worker(s) it listed before the restart" in output, output[-6000:]
    after = VIEW.wait_healthy(URLS, 60)
    assert after[URLS[1]]["id"] != before  # a new router process: registered anew
    say("gateway restarted on a new revision: both replicas listed again")


def test_a_replica_that_fails_its_gate_is_rolled_back_and_the_next_is_not_touched(deployed, tmp_path):
    """`sglang-deploy rollout` of a revision whose gate fails (a target of 500 tok/s; the simulated
    server decodes 100): replica 0 leaves, restarts, fails, is rolled back and joins again; the host
    fails its wave (the record is the worst replica's) and replica 1 is never restarted; clients
    through the gateway see no failure."""
    host = deployed[HOST]
    VIEW.wait_healthy(URLS, 60)
    before = {u: unit_pid(host, u) for u in UNITS}
    inv = write_inventory(tmp_path / "inventory.py", deployed, "t2", target=500.0)
    summary = tmp_path / "summary.json"
    client = ClientLoad(GW_URL, api_key=KEY, streams=4, max_tokens=96).start()
    t = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "rollout", str(inv), "--limit",
                               HOST, "--json", str(summary)], cwd=ROOT, env=ENV, capture_output=True, text=True,
                              timeout=500)
    finally:
        result = client.stop()
    output = _ANSI.sub("", proc.stdout + proc.stderr)
    doc = json.loads(summary.read_text())
    say(f"rollout whose gate fails on replica 0: {time.monotonic() - t:.1f} s, exit {proc.returncode}; "
        f"{result.requests} client requests through the gateway, {result.failed} failed, p99 "
        f"{result.p99_s or 0:.3f} s")
    assert proc.returncode == 1, output[-6000:]
    assert [(h["host"], h["result"]) for h in doc["hosts"]] == [(HOST, "rolled back")], doc["hosts"]
    # replica 0 ran the failing revision and is back on t1; replica 1 was never touched
    assert unit_pid(host, UNITS[0]) != before[UNITS[0]] and environ(host, UNITS[0]).get("E2E_RELEASE") == "t1"
    assert unit_pid(host, UNITS[1]) == before[UNITS[1]] and environ(host, UNITS[1]).get("E2E_RELEASE") == "t1"
    VIEW.wait_healthy(URLS, 60)
    assert result.failed == 0, [f.error for f in result.failures[:5]]


def test_replicas_the_plan_no_longer_runs_leave_their_gateway_and_are_removed(deployed, tmp_path):
    """The host planned as one server of TP 2 on both GPUs: replica 1 (sglang-dp1) leaves the
    gateway, stops and its unit and env file are removed before `sglang` restarts on both GPUs."""
    host = deployed[HOST]
    VIEW.wait_healthy(URLS, 60)
    inv = write_inventory(tmp_path / "inventory.py", deployed, "t3", layout={"tp_size": 2, "dp_size": 1})
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(inv), "deploy.py"], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=500)
    output = _ANSI.sub("", proc.stdout + proc.stderr)
    say(f"from 2 replicas to one server of TP 2: {time.monotonic() - t:.1f} s")
    assert proc.returncode == 0, output[-8000:]
    assert f"replica {URLS[1]} is out of" in output, output[-6000:]
    gone = host.ssh(f"systemctl is-active sglang-dp1.service; ls -d /etc/systemd/system/sglang-dp1.service "
                    f"/etc/sglang/sglang-dp1.env {STATE_ROOT}/sglang-dp1 2>&1; true").stdout
    # its unit, its env file and its state (revisions with their secrets) are gone
    assert gone.splitlines()[0] in ("inactive", "unknown") and gone.count("No such file") == 3, gone
    args = argv(host, UNITS[0])
    assert args[args.index("--tp-size") + 1] == "2" and environ(host, UNITS[0])["CUDA_VISIBLE_DEVICES"] == "0,1"
    listed = VIEW.wait_healthy(URLS[:1], 60)
    assert URLS[1] not in listed, listed


def test_a_replica_whose_port_the_first_replica_takes_stops_first(deployed, tmp_path):
    """Two replicas again, then the host's port moved up by one: replica 0's new port is the one the
    running replica 1 serves on, so replica 1 leaves the gateway and stops before replica 0 restarts,
    and starts again on its own new port in its turn."""
    host = deployed[HOST]
    proc = pyinfra_deploy(write_inventory(tmp_path / "a" / "inventory.py", deployed, "t4"), timeout=500)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
    VIEW.wait_healthy(URLS, 60)
    moved = (f"http://127.0.0.1:{PORT + 1}", f"http://127.0.0.1:{PORT + 2}")
    t = time.monotonic()
    proc = pyinfra_deploy(write_inventory(tmp_path / "b" / "inventory.py", deployed, "t4", port=PORT + 1),
                          timeout=500)
    output = _ANSI.sub("", proc.stdout + proc.stderr)
    say(f"the host's port moved up by one under 2 replicas: {time.monotonic() - t:.1f} s")
    assert proc.returncode == 0, output[-8000:]
    lines = output.splitlines()
    stopped = next(i for i, line in enumerate(lines) if f"replica {moved[0]} is out of" in line)
    first_swap = next(i for i, line in enumerate(lines) if "Make the new revision live" in line)
    assert stopped < first_swap, output[-6000:]
    for i, unit in enumerate(UNITS):
        args = argv(host, unit)
        assert args[args.index("--port") + 1] == str(PORT + 1 + i), (unit, args)
    listed = VIEW.wait_healthy(moved, 60)
    assert URLS[0] not in listed, listed
