"""A gateway tier with no single restart in the clients' path: the REAL HAProxy (Debian's haproxy)
in front of two REAL sglang-router 0.3.2 processes on a gateway host, deployed by this project
over real SSH to real systemd, with a client that never retries streaming through it the whole
time. Two gateway hosts (an operator's VIP or DNS would sit in front of both), two workers that
are workers of both.

Measured against the same changes through one router (the first gateway host before it becomes
balanced), in one run:
- (a) one router: a new gateway revision (policy change) refuses client connections;
- (b) the host turned into a balanced gateway (one router -> HAProxy and two routers): the
  gateway's port changes hands once (its figures are printed);
- (c) a new gateway revision (policy change): each router drained in the balancer, restarted,
  gated, back: 0 failed requests;
- (d) a new router install (another virtualenv: what a router version change does to the units,
  since 0.3.2 is the only release on the index): 0 failed requests;
- (e) a change of the balancer's own configuration (its check interval): a reload, no router and
  not the balancer's main process restarted: 0 failed requests;
- (f) README step 4 as written, `sglang-deploy rollout INVENTORY`, the gateway hosts changed (one
  wave each) and every worker changed: exit 0, 0 failed requests;
- (g) one router killed by SIGKILL under load: at most the requests in flight on it fail, and the
  balancer counts it DOWN within two check intervals;
- the balancer hop's cost: time to first token through HAProxy against straight to a router;
- `status` reads every router of a balanced gateway: exit 0.

Stand-ins at the real boundaries only: the GPUs (NVML stand-in) and SGLang (the simulated server).
The figures are printed (run with -s).
"""

from __future__ import annotations

import json
import pprint
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from sglang_deploy.simulator.sglang_server.build import build_wheel
from sglang_deploy.simulator.testbed import Testbed, TestHost, fleet
from sglang_deploy.simulator.testbed.gpu import stage_gpu_host
from tests.conftest import ROOT
from tests.e2e.conftest import NOT_ABOUT_SPEED
from tests.e2e.gateway_fleet import ROUTER_WHEELS_ON_HOST, GatewayView, router_wheels, status_rows
from tests.e2e.test_gateway_e2e import _ANSI, BOARD, ENV, KEY, KEY_ENV, check, pyinfra_deploy
from tests.gateway_load import ClientLoad, LoadResult

GW1, GW2 = "e2e-lb-gw1", "e2e-lb-gw2"
WORKERS = ("e2e-lb-w1", "e2e-lb-w2")
# Fixed ports distinct from every other e2e file (the hosts share this machine's network).
PORTS = {WORKERS[0]: 32601, WORKERS[1]: 32602}
GW_PORTS = {GW1: (32610, 32611, 32620), GW2: (32630, 32631, 32640)}  # port, router_port, metrics_port
URL = {g: f"http://127.0.0.1:{p[0]}" for g, p in GW_PORTS.items()}
ROUTER_URLS = {g: tuple(f"http://127.0.0.1:{p[1] + i}" for i in range(2)) for g, p in GW_PORTS.items()}
SIM = {"startup_delay_s": 0.5, "ttft_s": 0.02, "decode_tok_s": 100}
MAX_TOKENS = 96
STREAMS = 6
FAST_GATE = {"repeats": 2, "max_tokens": 48, "ready_timeout_s": 120, **NOT_ABOUT_SPEED}
T0 = time.monotonic()
FIGURES: list[str] = []


def say(text: str) -> None:
    print(f"[gateway balancer e2e +{time.monotonic() - T0:5.0f} s] {text}", flush=True)


@pytest.fixture(scope="module")
def hosts(testbed: Testbed, tmp_path_factory) -> dict[str, TestHost]:
    wheels = router_wheels()
    sim_wheels = tmp_path_factory.mktemp("wheels")
    build_wheel(fleet.VERSIONS[0], sim_wheels)

    def setup(name: str, root: Path) -> None:
        if name in WORKERS:
            stage_gpu_host(root, sim_wheels, BOARD, sim=dict(SIM))

    booted = testbed.boot([GW1, GW2, *WORKERS], setup=setup,
                          binds={g: [(wheels, ROUTER_WHEELS_ON_HOST)] for g in (GW1, GW2)})
    return {h.name: h for h in booted}


def gateway(name: str, routers: int, policy: str = "round_robin", **extra) -> dict:
    port, router_port, metrics_port = GW_PORTS[name]
    settings = {"port": port, "metrics_port": metrics_port, "host": "127.0.0.1", "policy": policy,
                "health_interval": "1s", "api_key": {"env": KEY_ENV}, "routers": routers, **extra}
    if routers > 1:
        settings["router_port"] = router_port
    return {"sglang_gateway": settings, "sglang_pip_find_links": ROUTER_WHEELS_ON_HOST, "sglang_pip_no_index": True}


def write_inventory(path: Path, hosts: dict[str, TestHost], mark: str, gw1: dict, gw2: dict | None = None) -> Path:
    gateways = []
    for name, data in ((GW1, gw1), (GW2, gw2 or gateway(GW2, 2))):
        _, conn = hosts[name].inventory_entry()
        gateways.append((name, {**conn, **data}))
    workers = []
    for name in WORKERS:
        _, conn = hosts[name].inventory_entry()
        d = fleet.host_data(BOARD, PORTS[name])
        workers.append((name, {**conn, **d, "sglang_secrets": {**d["sglang_secrets"], "api_key": {"env": KEY_ENV}},
                               "sglang_gateways": [GW1, GW2], "sglang_worker_url": f"http://127.0.0.1:{PORTS[name]}",
                               "sglang_target_tok_s": 50.0, "sglang_gate": FAST_GATE,
                               "sglang_env": {"E2E_RELEASE": mark}}))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('"""Balanced gateway e2e fleet (throwaway hosts)."""\n\n'
                    f"gateways = {pprint.pformat(gateways, sort_dicts=False, width=110)}\n"
                    f"workers = {pprint.pformat(workers, sort_dicts=False, width=110)}\n")
    return path


def worker_urls() -> list[str]:
    return [f"http://127.0.0.1:{PORTS[n]}" for n in WORKERS]


def every_router_lists_both(name: str, timeout: float = 60) -> None:
    for url in ROUTER_URLS[name]:
        GatewayView(url, KEY).wait_healthy(worker_urls(), timeout)


def show_stat(host: TestHost) -> dict[str, tuple[str, int]]:
    """The balancer's routers as HAProxy counts them: name -> (status, current sessions)."""
    code = ("import socket;s=socket.socket(socket.AF_UNIX);s.connect('/run/sglang-gateway/admin.sock');"
            "s.sendall(b'show stat\\n');b=b''\nwhile True:\n c=s.recv(65536)\n if not c:break\n b+=c\n"
            "print(b.decode())")
    out = host.ssh(f"python3 -c {subprocess.list2cmdline([code])}").stdout
    lines = out.splitlines()
    header = lines[0][2:].split(",")
    sv, st, cur = header.index("svname"), header.index("status"), header.index("scur")
    return {f[sv]: (f[st], int(f[cur] or 0)) for f in (line.split(",") for line in lines[1:] if line)
            if f[0] == "routers" and f[sv] not in ("BACKEND", "FRONTEND")}


def unit_pid(host: TestHost, unit: str) -> int:
    return int(host.ssh(f"systemctl show -p MainPID --value {unit}").stdout.strip())


def pids(host: TestHost) -> dict[str, int]:
    return {u: unit_pid(host, u) for u in ("sglang-gateway.service", "sglang-gateway-router0.service",
                                           "sglang-gateway-router1.service")}


class PortProbe:
    """A TCP connect to the gateway's port every PROBE_S, counting the refused ones: it sees the port
    closed for as long as it is (a router's restart), where the streaming client sees it only when a
    new request happens to start then, which on a loaded machine it may not."""

    def __init__(self, port: int) -> None:
        self.port, self.tries, self.refused = port, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(PROBE_S):
            self.tries += 1
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1.0).close()
            except ConnectionRefusedError:
                self.refused += 1
            except OSError:
                pass

    def stop(self) -> PortProbe:
        self._stop.set()
        self._thread.join(5)
        return self


PROBE_S = 0.05
PROBES: dict[str, PortProbe] = {}


def under_load(what: str, action) -> tuple[LoadResult, object]:
    """``action()`` run while a client that never retries streams through gateway 1, and a probe
    connects to its port every PROBE_S (PROBES[what]); the figures said."""
    client = ClientLoad(URL[GW1], api_key=KEY, streams=STREAMS, max_tokens=MAX_TOKENS).start()
    probe = PortProbe(GW_PORTS[GW1][0])
    time.sleep(1.0)
    try:
        value = action()
        time.sleep(1.0)
    finally:
        result = client.stop()
        PROBES[what] = probe.stop()
    refused = sum(1 for f in result.failures if "refused" in (f.error or "").lower()
                  or "ConnectError" in (f.error or ""))
    line = (f"{what}: {result.requests} client requests, {result.failed} failed ({refused} refused connections), "
            f"p50 {result.p50_s or 0:.3f} s, p99 {result.p99_s or 0:.3f} s; port probe: {probe.refused} of "
            f"{probe.tries} connects refused")
    FIGURES.append(line)
    say(line)
    if result.failures:
        say("    " + "; ".join(sorted({(f.error or "")[:100] for f in result.failures}))[:600])
    return result, value


def deploy(inv: Path) -> subprocess.CompletedProcess:
    proc = pyinfra_deploy(inv, timeout=500)
    (inv.parent / "output.txt").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
    return proc


STATE: dict[str, object] = {}


@pytest.fixture(scope="module")
def deployed(hosts, tmp_path_factory) -> dict[str, TestHost]:
    """Gateway 1 with one router, gateway 2 balanced, both workers behind both."""
    inv = write_inventory(tmp_path_factory.mktemp("initial") / "inventory.py", hosts, "r0", gateway(GW1, 1))
    t = time.monotonic()
    deploy(inv)
    say(f"initial deploy: {time.monotonic() - t:.1f} s")
    return hosts


def test_initial_deploy_runs_haproxy_in_front_of_two_routers(deployed):
    gw2 = deployed[GW2]
    assert "haproxy" in (gw2.root / "etc/systemd/system/sglang-gateway.service").read_text().lower()
    cfg = (gw2.root / "etc/haproxy/sglang-gateway.cfg").read_text()
    assert "server router0 127.0.0.1:32631 check" in cfg and "server router1 127.0.0.1:32632 check" in cfg
    assert KEY not in cfg
    every_router_lists_both(GW2)
    GatewayView(URL[GW2], KEY).wait_healthy(worker_urls())
    assert {n: s for n, (s, _) in show_stat(gw2).items()} == {"router0": "UP", "router1": "UP"}
    for i in range(2):
        unit = gw2.ssh(f"systemctl show -p ExecStart --value sglang-gateway-router{i}.service").stdout
        assert f"--port {32631 + i} " in unit and KEY not in unit
    GatewayView(URL[GW1], KEY).wait_healthy(worker_urls())


def test_a_one_router_policy_change_refuses_clients(deployed, tmp_path):
    what = "(a) one router, new revision (policy change)"
    # the control: one router's restart closes the port (seen by the probe, and by the client when a
    # request starts then); the balanced cases below keep it open throughout. The port is closed for
    # tens of milliseconds: on a loaded machine the probe's thread once slept through all of it, so
    # the restart is tried up to three times (each a policy change) before the control fails.
    for attempt, policy in enumerate(("random", "round_robin", "random")):
        inv = write_inventory(tmp_path / f"inventory-{attempt}.py", deployed, "r0", gateway(GW1, 1, policy=policy))
        result, _ = under_load(what, lambda inv=inv: deploy(inv))
        GatewayView(URL[GW1], KEY).wait_healthy(worker_urls())
        if PROBES[what].refused > 0 or result.failed > 0:
            break
    STATE["single"] = result
    assert PROBES[what].refused > 0 or result.failed > 0, \
        f"one router's restart closed the port to no one in {attempt + 1} tries: the comparison proves nothing"


def test_b_one_router_becomes_a_balanced_gateway(deployed, tmp_path):
    inv = write_inventory(tmp_path / "inventory.py", deployed, "r0", gateway(GW1, 2, policy="random"))
    under_load("(b) one router -> HAProxy and two routers (the port changes hands once)", lambda: deploy(inv))
    every_router_lists_both(GW1)
    assert {n: s for n, (s, _) in show_stat(deployed[GW1]).items()} == {"router0": "UP", "router1": "UP"}


def test_c_a_new_revision_restarts_the_routers_one_at_a_time(deployed, tmp_path):
    gw1 = deployed[GW1]
    before = pids(gw1)
    inv = write_inventory(tmp_path / "inventory.py", deployed, "r0", gateway(GW1, 2, policy="round_robin"))
    what = "(c) balanced, new revision (policy change)"
    result, proc = under_load(what, lambda: deploy(inv))
    output = _ANSI.sub("", proc.stdout + proc.stderr)
    assert re.search(rf"\[{GW1}\].*router 0 drained in the balancer", output), output[-6000:]
    assert re.search(rf"\[{GW1}\].*router 1 back in the balancer, UP", output), output[-6000:]
    after = pids(gw1)
    assert after["sglang-gateway.service"] == before["sglang-gateway.service"]  # the balancer kept running
    assert all(after[u] != before[u] for u in after if "router" in u)
    assert "--policy round_robin" in (gw1.root / "etc/systemd/system/sglang-gateway-router1.service").read_text()
    every_router_lists_both(GW1)
    assert result.failed == 0, [f.error for f in result.failures[:5]]
    assert PROBES[what].refused == 0 and PROBES[what].tries > 0  # HAProxy held the port throughout
    STATE["balanced"] = result


def test_d_a_new_router_install_restarts_them_one_at_a_time(deployed, tmp_path):
    gw1 = deployed[GW1]
    before = pids(gw1)
    inv = write_inventory(tmp_path / "inventory.py", deployed, "r0",
                          gateway(GW1, 2, venvs_dir="/opt/sglang-gateway-next"))
    result, _ = under_load("(d) balanced, new router install (another virtualenv)", lambda: deploy(inv))
    after = pids(gw1)
    assert after["sglang-gateway.service"] == before["sglang-gateway.service"]
    assert all(after[u] != before[u] for u in after if "router" in u)
    assert "/opt/sglang-gateway-next/" in gw1.ssh(
        "systemctl show -p ExecStart --value sglang-gateway-router0.service").stdout
    every_router_lists_both(GW1)
    assert result.failed == 0, [f.error for f in result.failures[:5]]


def test_e_a_balancer_change_is_a_reload(deployed, tmp_path):
    gw1 = deployed[GW1]
    before = pids(gw1)
    inv = write_inventory(tmp_path / "inventory.py", deployed, "r0",
                          gateway(GW1, 2, venvs_dir="/opt/sglang-gateway-next", balancer_check_interval="2s"))
    result, proc = under_load("(e) balanced, balancer configuration change (reload)", lambda: deploy(inv))
    assert "inter 2s" in (gw1.root / "etc/haproxy/sglang-gateway.cfg").read_text()
    assert pids(gw1) == before, "a balancer change restarted something"
    assert "balancer reloaded" in _ANSI.sub("", proc.stdout + proc.stderr)
    assert result.failed == 0, [f.error for f in result.failures[:5]]


def readme_rollout(inv: Path, label: str) -> tuple[LoadResult, subprocess.CompletedProcess, dict]:
    """README step 4 as written, under the client load; (load, process, summary)."""
    summary = inv.parent / "summary.json"

    def run() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "rollout", str(inv),
                               "--json", str(summary)], cwd=ROOT, env=ENV, capture_output=True, text=True,
                              timeout=600)

    result, proc = under_load(label, run)
    (inv.parent / "output.txt").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
    return result, proc, json.loads(summary.read_text())


def test_f0_the_readme_rollout_with_the_gateways_unchanged(deployed, tmp_path_factory):
    inv = write_inventory(tmp_path_factory.mktemp("f0") / "inventory.py", deployed, "r0b",
                          gateway(GW1, 2, venvs_dir="/opt/sglang-gateway-next", balancer_check_interval="2s"))
    result, _, doc = readme_rollout(inv, "(f0) README rollout: every worker changed, the gateways not")
    rows = {h["host"]: h for h in doc["hosts"]}
    assert {n: rows[n]["result"] for n in WORKERS} == dict.fromkeys(WORKERS, "passed")
    assert rows[GW1]["result"] == rows[GW2]["result"] == "unchanged", (rows[GW1], rows[GW2])
    assert result.failed == 0, [f.error for f in result.failures[:5]]


def test_f_the_readme_rollout_with_both_gateways_changed(deployed, tmp_path):
    inv = write_inventory(tmp_path / "inventory.py", deployed, "r1",
                          gateway(GW1, 2, policy="random", venvs_dir="/opt/sglang-gateway-next"),
                          gateway(GW2, 2, policy="random"))
    result, proc, doc = readme_rollout(inv, "(f) README rollout: both gateway hosts and every worker changed")
    output = proc.stdout + proc.stderr
    rows = {h["host"]: h for h in doc["hosts"]}
    assert {n: rows[n]["result"] for n in (GW1, GW2, *WORKERS)} == dict.fromkeys((GW1, GW2, *WORKERS), "passed")
    waves = [set(w["hosts"]) for w in doc["waves"]]
    assert waves[0] == {GW1} and waves[1] == {GW2}, waves  # one gateway host at a time
    assert "random" in (deployed[GW2].root / "etc/systemd/system/sglang-gateway-router0.service").read_text()
    for g in (GW1, GW2):
        every_router_lists_both(g)
    assert KEY not in output
    assert result.failed == 0, [f.error for f in result.failures[:5]]


def test_g_a_killed_router_costs_only_its_requests_in_flight(deployed):
    gw1 = deployed[GW1]
    interval = 2.0  # balancer_check_interval since (e)
    client = ClientLoad(URL[GW1], api_key=KEY, streams=STREAMS, max_tokens=MAX_TOKENS).start()
    time.sleep(2.0)
    victim = unit_pid(gw1, "sglang-gateway-router0.service")
    in_flight = show_stat(gw1)["router0"][1]
    gw1.ssh(f"kill -9 {victim}")
    killed = time.monotonic()
    down_after = None
    while time.monotonic() - killed < 4 * interval + 5:
        if show_stat(gw1)["router0"][0].startswith("DOWN"):
            down_after = time.monotonic() - killed
            break
        time.sleep(0.1)
    time.sleep(2.0)
    result = client.stop()
    late = [f for f in result.failures if f.start > killed + 0.5]
    line = (f"(g) router 0 killed (SIGKILL) with {in_flight} session(s) on it: {result.requests} client requests, "
            f"{result.failed} failed, {len(late)} of them started after the kill; DOWN in the balancer after "
            f"{down_after if down_after is None else round(down_after, 2)} s (check every {interval:g} s, fall 2)")
    FIGURES.append(line)
    say(line)
    assert down_after is not None and down_after <= 2 * interval + 1.5, down_after
    # Only requests in flight at the kill fail: none started after it, and at most one per stream (each
    # stream has one request at a time). The router's session count read just before the kill is a
    # snapshot for the figure line, not a bound: in a CI run at a load of 8 it read 0 while 3 were on it.
    assert result.failed <= STREAMS, [f.error for f in result.failures]
    assert not late, [f.error for f in late]
    every_router_lists_both(GW1, timeout=90)  # systemd restarts it; its worker list comes from --worker-urls


def first_token_s(url: str) -> float:
    """Seconds from sending a streamed chat completion to its first content chunk."""
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "stream": True}
    start = time.monotonic()
    with httpx.Client(timeout=30, trust_env=False) as client:
        with client.stream("POST", url + "/v1/chat/completions", json=body,
                           headers={"Authorization": f"Bearer {KEY}"}) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: ") and '"content"' in line:
                    return time.monotonic() - start
    raise AssertionError(f"{url}: no content chunk")


def test_the_balancer_hop_and_status(deployed, tmp_path):
    every_router_lists_both(GW1, timeout=90)
    hop: dict[str, list[float]] = {"straight": [], "through": []}
    for _ in range(20):  # alternately, so that both see the same machine
        hop["straight"].append(first_token_s(ROUTER_URLS[GW1][1]))
        hop["through"].append(first_token_s(URL[GW1]))
    p = {k: sorted(v) for k, v in hop.items()}
    line = ("TTFT of 20 streamed requests each, p50 / p99: straight to a router "
            f"{p['straight'][9] * 1000:.1f} / {p['straight'][-1] * 1000:.1f} ms, through HAProxy "
            f"{p['through'][9] * 1000:.1f} / {p['through'][-1] * 1000:.1f} ms")
    FIGURES.append(line)
    say(line)
    straight = check(ROUTER_URLS[GW1][1], tmp_path)
    through = check(URL[GW1], tmp_path)
    line = (f"sglang-deploy check: TTFT straight to a router {float(straight['ttft_s']) * 1000:.1f} ms, "
            f"through HAProxy {float(through['ttft_s']) * 1000:.1f} ms; decode "
            f"{float(straight['decode_tok_s']):.1f} and {float(through['decode_tok_s']):.1f} tok/s")
    FIGURES.append(line)
    say(line)
    inv = write_inventory(tmp_path / "inventory.py", deployed, "r1",
                          gateway(GW1, 2, policy="random", venvs_dir="/opt/sglang-gateway-next",
                                  balancer_check_interval="2s"), gateway(GW2, 2, policy="random"))
    proc, rows = status_rows(inv, ENV)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert rows[GW1]["state"] == "ok" and rows[GW2]["state"] == "ok", (rows[GW1], rows[GW2])
    single: LoadResult | None = STATE.get("single")  # type: ignore[assignment]
    say("figures:\n    " + "\n    ".join(FIGURES))
    assert single is not None
