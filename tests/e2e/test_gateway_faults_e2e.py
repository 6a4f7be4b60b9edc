"""The gateway's fault paths end to end: the REAL sglang-router 0.3.2, deployed by this project
onto a throwaway host, in front of two throwaway workers that run the simulated SGLang, all
deployed with `pyinfra -y INVENTORY deploy.py` over real SSH to real systemd (the gateway host
first, the workers join after their gates).

Each test leaves the fleet serving, both workers listed healthy, for the next:

1. The gateway unreachable (its unit stopped): a new revision of both workers fails before
   anything on them changes, naming the gateway; their servers, live files, revision markers
   and releases are untouched.
2. ``sglang_drain.timeout`` bounds the drain: a worker with a 30 s request in flight (sent to it
   directly) leaves the gateway, waits the timeout (2 s), warns, and stops, cutting the request;
   its new revision passes and it is listed again. The times are printed.
3. A gateway whose new revision fails its gate (a bind address the host does not have) gets the
   previous one back byte for byte (unit, env file, launcher), serves again with both workers,
   and its ``current`` marker is the old revision.
4. A worker whose new revision fails its gate and whose rollback fails (the host broke under its
   running server: every start crashes) stays out of the gateway, and clients through the
   gateway lose nothing; once the host is fixed, the next deploy puts it back.

Stand-ins at the real boundaries only: the GPUs (NVML stand-in of a 2x RTX A6000 board) and
SGLang (the simulated server package, its behaviour file ``/etc/sglang-sim.json``). The figures
are printed (run with -s). Own hosts and ports (32001, 32002, 32010, 32011): it runs beside the
other e2e files.
"""

from __future__ import annotations

import json
import pprint
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sglang_deploy.deploy import gateway_client
from sglang_deploy.deploy.gateway_host import READY_TIMEOUT_S
from sglang_deploy.plan.gateway import GatewaySettings
from sglang_deploy.lifecycle.revision import STATE_ROOT
from sglang_deploy.simulator.testbed import Testbed, TestHost, fleet
from tests.conftest import ROOT
from tests.e2e.test_deploy import HF_TOKEN
from tests.e2e.gateway_fleet import ROUTER_WHEELS_ON_HOST, GatewayView, ListPoller, boot_gateway_fleet
from tests.e2e.test_gateway_e2e import BOARD, ENV, FAST_GATE, KEY, KEY_ENV, SIM, TARGET
from tests.e2e.test_rollout import main_pid, marker, release, snapshot
from tests.gateway_load import ClientLoad, LoadResult

GW = "e2e-gwf-router"
W1, W2 = "e2e-gwf-w1", "e2e-gwf-w2"
NAMES = (W1, W2)
# Fixed ports distinct from every other e2e file (the session's hosts share this machine's network).
PORTS = {W1: 32001, W2: 32002}
GW_PORT = 32010
GW_METRICS_PORT = 32011
GW_URL = f"http://127.0.0.1:{GW_PORT}"
VIEW = GatewayView(GW_URL, KEY)
#: The gateway's unit and files where the deploy puts them (sglang_gateway's defaults).
GW_SETTINGS = GatewaySettings()
GW_UNIT = f"{GW_SETTINGS.service_name}.service"
GW_FILES = {"unit": GW_SETTINGS.unit_path, "env": GW_SETTINGS.env_path, "launcher": GW_SETTINGS.launcher_path}
GW_STATE = f"{STATE_ROOT}/{GW_SETTINGS.service_name}".lstrip("/")
#: Test 2: the drain timeout, and one request that would run far longer (the simulator decodes
#: SIM["decode_tok_s"] = 100 tok/s: 3000 tokens are 30 s).
DRAIN_TIMEOUT_S = 2
LONG_TOKENS = 3000
LONG_S = LONG_TOKENS / SIM["decode_tok_s"]
#: Test 3: a bind address this machine does not have (TEST-NET-1, RFC 5737): the router cannot bind it.
BAD_BIND = "192.0.2.1"
#: Test 4: the host broken under its running server: every new start of the simulated server
#: crashes 1 s after it started, before it is ready (the simulator's crash_after_s fault).
BROKEN_SIM = {**SIM, "startup_delay_s": 2, "faults": {"crash_after_s": 1}}
SIM_FILE = "etc/sglang-sim.json"
#: Client load through the gateway (test 4): streams of about a second.
STREAMS, MAX_TOKENS = 2, 96
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
T0 = time.monotonic()
#: The release (E2E_RELEASE) each worker's data says, after the last step that changed it.
MARKS = {W1: "r0", W2: "r0"}


def say(text: str) -> None:
    print(f"[gateway faults e2e +{time.monotonic() - T0:5.0f} s] {text}", flush=True)


def plain(text: str) -> str:
    return _ANSI.sub("", text)


# ---------------------------------------------------------------------------
# the hosts and the inventory


@pytest.fixture(scope="module")
def hosts(testbed: Testbed, tmp_path_factory) -> dict[str, TestHost]:
    booted = boot_gateway_fleet(testbed, tmp_path_factory, GW, NAMES, BOARD, SIM)
    say(f"booted {len(booted)} hosts")
    return booted


def worker_url(name: str) -> str:
    return f"http://127.0.0.1:{PORTS[name]}"


def worker_data(name: str, mark: str, **extra) -> dict:
    d = fleet.host_data(BOARD, PORTS[name])
    return {**d,
            "sglang_secrets": {**d["sglang_secrets"], "api_key": {"env": KEY_ENV}},
            "sglang_gateways": [GW],
            "sglang_worker_url": worker_url(name),
            "sglang_target_tok_s": TARGET,
            "sglang_gate": FAST_GATE,
            "sglang_env": {"E2E_RELEASE": mark},
            **extra}


def gateway_data(**settings) -> dict:
    return {"sglang_gateway": {"port": GW_PORT, "metrics_port": GW_METRICS_PORT, "host": "127.0.0.1",
                               "policy": "round_robin", "health_interval": "1s", "api_key": {"env": KEY_ENV},
                               **settings},
            "sglang_pip_find_links": ROUTER_WHEELS_ON_HOST,
            "sglang_pip_no_index": True}


def write_inventory(path: Path, hosts: dict[str, TestHost], marks: dict[str, str],
                    per_host: dict[str, dict] | None = None, gateway: dict | None = None) -> Path:
    """Groups ``gateways`` (the gateway host, ``gateway`` over its settings) and ``workers``
    (``marks[name]`` their release, ``per_host[name]`` on top of their data)."""
    _, conn = hosts[GW].inventory_entry()
    gateways = [(GW, {**conn, **gateway_data(**(gateway or {}))})]
    workers = []
    for name in NAMES:
        _, conn = hosts[name].inventory_entry()
        workers.append((name, {**conn, **worker_data(name, marks[name], **(per_host or {}).get(name, {}))}))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('"""Gateway faults e2e fleet (throwaway hosts)."""\n\n'
                    f"gateways = {pprint.pformat(gateways, sort_dicts=False, width=110)}\n"
                    f"workers = {pprint.pformat(workers, sort_dicts=False, width=110)}\n")
    return path


def deploy(inventory: Path, *args: str, timeout: float = 400) -> tuple[int, str]:
    """`pyinfra -y [args] INVENTORY deploy.py`: (exit status, output without colours); the output
    is kept beside the inventory."""
    proc = subprocess.run([sys.executable, "-m", "pyinfra", "-y", *args, str(inventory), "deploy.py"], cwd=ROOT,
                          env=ENV, capture_output=True, text=True, timeout=timeout)
    output = plain(proc.stdout + proc.stderr)
    (inventory.parent / "output.txt").write_text(output)
    return proc.returncode, output


def deploy_timed(inventory: Path, *args: str, timeout: float = 400) -> tuple[int, list[tuple[float, str]]]:
    """As :func:`deploy`, each output line with the time.monotonic() it arrived at."""
    proc = subprocess.Popen([sys.executable, "-m", "pyinfra", "-y", *args, str(inventory), "deploy.py"], cwd=ROOT,
                            env={**ENV, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    lines: list[tuple[float, str]] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.monotonic(), plain(line)))
        rc = proc.wait(timeout=30)
    finally:
        killer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (inventory.parent / "output.txt").write_text("".join(line for _, line in lines))
    return rc, lines


# ---------------------------------------------------------------------------
# reading the gateway


def gateway_workers() -> dict[str, dict]:
    """The gateway's GET /workers, by worker URL."""
    return VIEW.workers()


def wait_all_healthy(timeout: float = 60) -> dict[str, dict]:
    """Until the gateway answers and lists both workers healthy; its list."""
    return VIEW.wait_healthy([worker_url(n) for n in NAMES], timeout)


def gateway_pid(host: TestHost) -> int:
    return int(host.ssh(f"systemctl show -p MainPID --value {GW_UNIT}").stdout.strip())


class Presence(ListPoller):
    """When ``url`` was first seen missing from the gateway's list, and when it was first seen listed
    healthy again after that (time.monotonic()), polled in a thread."""

    def __init__(self, url: str, poll_s: float = 0.1):
        super().__init__(VIEW, poll_s)
        self.url = url
        self.gone_at: float | None = None
        self.back_at: float | None = None

    def observe(self, listed: dict[str, dict], now: float) -> None:
        entry = listed.get(self.url)
        if entry is None and self.gone_at is None:
            self.gone_at = now
        elif entry is not None and entry.get("is_healthy") is True and self.gone_at is not None \
                and self.back_at is None:
            self.back_at = now


def figures(name: str, result: LoadResult) -> None:
    p50 = f"{result.p50_s:.3f}" if result.p50_s is not None else "-"
    say(f"{name}: {result.requests} client requests through the gateway, {result.failed} failed, p50 {p50} s")


@pytest.fixture
def load() -> Iterator[Callable[..., ClientLoad]]:
    """Starts client loads; whatever the test did not stop is stopped after it."""
    started: list[ClientLoad] = []

    def start(url: str = GW_URL, **kw) -> ClientLoad:
        kw = {"streams": STREAMS, "max_tokens": MAX_TOKENS, **kw}
        started.append(ClientLoad(url, api_key=KEY, **kw).start())
        return started[-1]

    yield start
    for client in started:
        client.stop(timeout_s=LONG_S + 30)  # again when the test stopped it: its threads ended, it returns at once


@pytest.fixture(scope="module")
def deployed(hosts, tmp_path_factory) -> dict[str, TestHost]:
    """The whole inventory deployed once with pyinfra (gateway first, the workers after their gates)."""
    inv = write_inventory(tmp_path_factory.mktemp("gwf-initial") / "inventory.py", hosts, MARKS)
    t = time.monotonic()
    rc, output = deploy(inv)
    assert rc == 0, output[-8000:]
    assert KEY not in output and HF_TOKEN not in output
    listed = wait_all_healthy()
    say(f"initial deploy of 1 gateway + {len(NAMES)} workers: {time.monotonic() - t:.1f} s; listed: "
        + ", ".join(f"{u} healthy={w.get('is_healthy')}" for u, w in sorted(listed.items())))
    for name in NAMES:
        assert release(hosts[name]) == "r0" and marker(hosts[name], "deployed") == marker(hosts[name], "current")
    return hosts


# ---------------------------------------------------------------------------
# 1. an unreachable gateway stops a worker's restart before anything changes


def test_an_unreachable_gateway_stops_the_workers_restart_before_anything_changes(deployed, tmp_path):
    gw = deployed[GW]
    workers = {n: deployed[n] for n in NAMES}
    before = snapshot(workers)
    before_marks = {n: (marker(h, "current"), marker(h, "deployed"), release(h)) for n, h in workers.items()}
    # Both workers in one restart step (max_unavailable 2), so each meets the gateway itself (with 1,
    # the second's step would be refused after the first's failure, before it asked the gateway).
    inv = write_inventory(tmp_path / "inventory.py", deployed, {n: "r1" for n in NAMES},
                          per_host={n: {"sglang_rollout": {"max_unavailable": 2}} for n in NAMES})
    gw.ssh(f"systemctl stop {GW_UNIT}")
    try:
        assert gw.ssh(f"systemctl is-active {GW_UNIT}", check=False).stdout.strip() != "active"
        t = time.monotonic()
        rc, output = deploy(inv, "--limit", "workers")
        seconds = time.monotonic() - t
    finally:
        gw.ssh(f"systemctl start {GW_UNIT}")
    lines = [line.strip() for line in output.splitlines() if "could not take the host out" in line]
    say(f"(1) workers' deploy with the gateway stopped: exit {rc} after {seconds:.1f} s")
    for line in lines:
        say(f"    {line}")
    assert rc != 0, output[-8000:]
    for name in NAMES:
        assert re.search(rf"\[{name}\]\s+could not take the host out of its gateways before the restart; nothing "
                         rf"changed: a gateway failed before the stop \(gateway unreachable\): nothing changed "
                         rf"\(gateways: {GW} \({re.escape(GW_URL)}\)\)", output), output[-8000:]
        assert re.search(rf"\[{name}\]\s+check: gateway {re.escape(GW_URL)}: ", output), output[-8000:]
        assert not re.search(rf"\[{name}\]\s+drained in", output)
    # nothing changed: the same server processes, live files byte for byte, markers and releases
    assert snapshot(workers) == before
    assert {n: (marker(h, "current"), marker(h, "deployed"), release(h)) for n, h in workers.items()} == before_marks
    t = time.monotonic()
    listed = wait_all_healthy()
    say(f"    gateway started again: both workers listed healthy after {time.monotonic() - t:.1f} s "
        f"({', '.join(sorted(listed))})")


# ---------------------------------------------------------------------------
# 2. the drain timeout bounds the wait


def test_the_drain_timeout_bounds_the_wait_and_cuts_the_request_in_flight(deployed, tmp_path, load):
    host = deployed[W1]
    before = (main_pid(host), marker(host, "current"))
    other = main_pid(deployed[W2])
    inv = write_inventory(tmp_path / "inventory.py", deployed, {**MARKS, W1: "r2"},
                          per_host={W1: {"sglang_drain": {"timeout": f"{DRAIN_TIMEOUT_S}s"}}})
    # One long streamed request sent to the worker itself (not through the gateway): its drain
    # cannot end by waiting for it.
    client = load(worker_url(W1), streams=1, max_tokens=LONG_TOKENS, timeout_s=LONG_S + 30)
    deadline = time.monotonic() + 15
    while (gateway_client.in_flight(worker_url(W1), KEY, 5.0) or 0) < 1:
        assert time.monotonic() < deadline, "the long request never ran on the worker"
        time.sleep(0.05)
    box: list[LoadResult] = []
    # No further request after this one: stop() lets the one under way end and counts it.
    stopper = threading.Thread(target=lambda: box.append(client.stop(timeout_s=LONG_S + 40)), daemon=True)
    stopper.start()
    t = time.monotonic()
    with Presence(worker_url(W1)) as presence:
        rc, lines = deploy_timed(inv, "--limit", W1)
        listed = wait_all_healthy()
    seconds = time.monotonic() - t
    stopper.join(LONG_S + 45)
    assert box, "the long request did not end"
    output = "".join(line for _, line in lines)
    assert rc == 0, output[-8000:]
    (long_request,) = box[0].records
    warned = [(at, line) for at, line in lines
              if re.search(rf"\[{W1}\]\s+drain timeout \({DRAIN_TIMEOUT_S} s\) with 1 request\(s\) still in flight; "
                           r"stopping all the same", line)]
    waited = [float(m.group(1)) for _, line in lines
              if (m := re.search(rf"\[{W1}\]\s+out of {GW} .*? after ([0-9.]+) s", line))]
    assert warned and waited, output[-8000:]
    assert not re.search(rf"\[{W1}\]\s+drained in", output)
    assert presence.gone_at is not None and presence.back_at is not None, (presence.gone_at, presence.back_at)
    leave, warn_at, cut = presence.gone_at, warned[0][0], long_request.end
    say(f"(2) drain timeout {DRAIN_TIMEOUT_S} s, one {LONG_TOKENS}-token request ({LONG_S:.0f} s) in flight: "
        f"deploy {seconds:.1f} s; the deploy's wait {waited[0]:g} s; from the leave (gone from the gateway's "
        f"list): warning +{warn_at - leave:.2f} s, request cut +{cut - leave:.2f} s, listed healthy again "
        f"+{presence.back_at - leave:.2f} s; the request: {long_request.tokens} tokens in "
        f"{long_request.seconds:.2f} s, {long_request.error}")
    # The wait is the timeout: the deploy's own measure, and the leave -> stop seen from outside
    # (the list polled every 0.1 s; the stop comes after the new revision's files are swapped in).
    assert DRAIN_TIMEOUT_S <= waited[0] <= DRAIN_TIMEOUT_S + 2.5, waited
    assert DRAIN_TIMEOUT_S - 0.5 <= warn_at - leave <= DRAIN_TIMEOUT_S + 4, (leave, warn_at)
    assert DRAIN_TIMEOUT_S - 0.5 <= cut - leave <= DRAIN_TIMEOUT_S + 12, (leave, cut)
    # the request was cut by the stop, long before its end
    assert not long_request.ok and long_request.tokens < LONG_TOKENS, long_request
    assert long_request.end < long_request.start + LONG_S / 2, long_request
    # the new revision passed and serves; listed healthy again; the other worker untouched
    assert release(host) == "r2" and main_pid(host) != before[0]
    assert marker(host, "current") != before[1] and marker(host, "deployed") == marker(host, "current")
    assert re.search(rf"\[{W1}\]\s+registered again in {GW}", output), output[-8000:]
    assert listed[worker_url(W1)]["is_healthy"] is True and main_pid(deployed[W2]) == other
    MARKS[W1] = "r2"


# ---------------------------------------------------------------------------
# 3. a gateway whose new revision fails its gate is rolled back byte for byte


def test_a_gateway_whose_new_revision_fails_its_gate_is_rolled_back_byte_for_byte(deployed, tmp_path, load):
    gw = deployed[GW]
    files = {name: (gw.root / path.lstrip("/")).read_bytes() for name, path in GW_FILES.items()}
    old = (gw.root / GW_STATE / "current").read_text().strip()
    assert old and (gw.root / GW_STATE / "deployed").read_text().strip() == old
    pid = gateway_pid(gw)
    # An operator's bind address that is not this host's: the router cannot bind it, so the new
    # revision never answers at the gateway's URL. The settings check accepts any address.
    inv = write_inventory(tmp_path / "inventory.py", deployed, MARKS, gateway={"host": BAD_BIND})
    since = int(time.time()) - 1
    t = time.monotonic()
    rc, output = deploy(inv, "--limit", "gateways")
    seconds = time.monotonic() - t
    # what the bad revision's router said (no assertion: the router's wording is its own)
    journal = gw.ssh(f"journalctl -u {GW_UNIT} --since @{since} -o cat --no-pager | grep -i -E "
                     "'assign|bind|address|error|exited' | head -n 3", check=False).stdout.strip()
    gate_line = next((line.strip() for line in output.splitlines() if "the gateway's gate failed" in line), "")
    back_line = next((line.strip() for line in output.splitlines() if "rolled back to revision" in line), "")
    say(f"(3) gateway revision with bind address {BAD_BIND}: exit {rc} after {seconds:.1f} s (the gate waits "
        f"at most {READY_TIMEOUT_S:g} s)\n    {gate_line}\n    {back_line}\n"
        f"    journal: {journal or '(nothing named it)'}")
    assert rc != 0, output[-8000:]
    # the router exits at start (the bind): the gate sees systemd restart it and fails well before its
    # READY_TIMEOUT_S, naming the unit and its last journal lines
    assert re.search(rf"\[{GW}\]\s+the gateway's gate failed: {re.escape(GW_UNIT)}(\.service)? exited while "
                     r"starting \(systemd restarted it \d+ time\(s\)\); its last lines: ", output), output[-8000:]
    assert seconds < READY_TIMEOUT_S, seconds
    assert re.search(rf"\[{GW}\]\s+rolled back to revision {old}: ready again", output), output[-8000:]
    # the new revision was made live (and failed): its unit had the bad address
    staged = [p for p in (gw.root / GW_STATE / "revisions").iterdir() if p.name != old]
    assert any(f"--host {BAD_BIND}" in (p / "unit").read_text() for p in staged), [p.name for p in staged]
    # the previous revision back byte for byte, and its marker
    for name, path in GW_FILES.items():
        assert (gw.root / path.lstrip("/")).read_bytes() == files[name], f"{path} differs from before"
    assert gw.ssh(f"stat -c '%a' {GW_SETTINGS.env_path}").stdout.strip() == "600"
    assert (gw.root / GW_STATE / "current").read_text().strip() == old
    assert (gw.root / GW_STATE / "deployed").read_text().strip() == old
    # it serves again, restarted from the old unit, with both workers listed healthy
    assert gw.ssh(f"systemctl is-active {GW_UNIT}").stdout.strip() == "active"
    new_pid = gateway_pid(gw)
    assert new_pid not in (0, pid)
    # (the router renames its process, "sglang::router": its argv is the unit's, compared above)
    assert KEY not in gw.ssh(f"tr '\\0' ' ' < /proc/{new_pid}/cmdline").stdout
    bound = gw.ssh(f"ss -Hltn 'sport = :{GW_PORT}'").stdout
    assert f"127.0.0.1:{GW_PORT}" in bound and BAD_BIND not in bound, bound
    wait_all_healthy()
    client = load()
    time.sleep(1.5)
    r = client.stop()
    assert r.requests >= 2 and r.failed == 0, r.failures[:3]


# ---------------------------------------------------------------------------
# 4. a failed gate and a failed rollback leave the worker out of the gateway


def test_a_worker_whose_gate_and_rollback_fail_stays_out_of_the_gateway(deployed, tmp_path, load):
    host = deployed[W2]
    sim = host.root / SIM_FILE
    good_sim = sim.read_bytes()
    good_rev = marker(host, "current")
    other = main_pid(deployed[W1])
    inv = write_inventory(tmp_path / "inventory.py", deployed, {**MARKS, W2: "r4"})
    client = load()
    # The host breaks under its running server: the server keeps serving (it read its behaviour
    # at its start), but every new start, of the new revision and of the old, crashes.
    sim.write_text(json.dumps(BROKEN_SIM))
    try:
        t = time.monotonic()
        rc, output = deploy(inv, "--limit", W2)
        seconds = time.monotonic() - t
        # out, and it stays out: the gateway's own health checks (every 1 s) do not bring it back
        out_for = time.monotonic()
        while time.monotonic() - out_for < 3:
            listed = gateway_workers()
            assert worker_url(W2) not in listed, listed
            assert listed.get(worker_url(W1), {}).get("is_healthy") is True, listed
            time.sleep(0.2)
        time.sleep(1)
        result = client.stop()
        figures(f"(4) gate and rollback of {W2} fail (deploy {seconds:.1f} s)", result)
        for line in output.splitlines():
            if re.search(rf"\[{W2}\].*(did not stay up|rolled back to revision|the gate failed and so did)", line):
                say(f"    {line.strip()}")
        assert rc != 0, output[-8000:]
        assert re.search(rf"\[{W2}\]\s+out of {GW} ", output), output[-8000:]
        assert re.search(rf"\[{W2}\]\s+the gate failed and so did the rollback: the worker stays out of its "
                         "gateways", output), output[-8000:]
        assert re.search(rf"rolled back to revision {good_rev}: the restored revision is not healthy either",
                         output), output[-8000:]
        assert not re.search(rf"\[{W2}\]\s+registered again", output)
        assert marker(host, "current") == good_rev and marker(host, "deployed") is None
        assert result.failed == 0 and result.requests > 0, [f.error for f in result.failures[:5]]
        assert main_pid(deployed[W1]) == other
    finally:
        sim.write_bytes(good_sim)
    # fixed: the next deploy of its revision restarts it, gates it and puts it back
    t = time.monotonic()
    rc, output = deploy(write_inventory(tmp_path / "again" / "inventory.py", deployed, MARKS), "--limit", W2)
    assert rc == 0, output[-8000:]
    listed = wait_all_healthy()
    say(f"    host fixed: the next deploy put {W2} back in {time.monotonic() - t:.1f} s")
    assert re.search(rf"\[{W2}\]\s+registered again in {GW}", output), output[-8000:]
    assert release(host) == MARKS[W2] and marker(host, "deployed") == marker(host, "current") == good_rev
    assert listed[worker_url(W2)]["is_healthy"] is True
    say(f"module wall time so far: {time.monotonic() - T0:.0f} s")
