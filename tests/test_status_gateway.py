"""`sglang-deploy status` with the SGLang Model Gateway in the inventory: a gateway host gets a row
of its own, read from its worker list (never planned as an SGLang host), and each worker's row says
whether its gateways list it healthy.

- The decisions, pure (sglang_deploy/status/): the inventory's gateways and workers, a
  gateway's row from its list against the workers the inventory gives it, a worker's membership,
  a deploy's drain (its lock held) as expected, the table and the JSON.
- The controller's read (sglang_deploy/deploy/gateway_status.py) against the REAL router's
  answers recorded in tests/fixtures/gateway, replayed by a stand-in at the HTTP boundary; several
  gateways that never answer are waited for at once, within the timeout.
- End to end through ``collect`` and ``run_status`` with the REAL SGLang Model Gateway
  (sglang-router 0.3.2) in front of SIMULATED SGLang servers; only the SSH side of status (the GPU
  probe and the state read of each serving host) is a stand-in (``SshStandIn``), answering with
  the lines the host's state read prints.
"""

from __future__ import annotations

import json
import socket
import time
from io import StringIO
from pathlib import Path
from typing import Any

import httpx
import pytest

from sglang_deploy.deploy.gateway_client import Gateway
from sglang_deploy.deploy.gateway_status import GatewayReads, GatewayTarget, read_gateway
from sglang_deploy.deploy.status import HostRead
from sglang_deploy import status
from sglang_deploy.commands import status_table
from sglang_deploy.plan.gateway import GatewaySettings, WorkerMembership
from tests.conftest import ROOT, free_port, load_probe
from tests.test_gateway_client_real import GW_KEY, Replay, linux, recorded, wait_for
from tests.test_gateway_client_real import router_ok, stack  # noqa: F401 -- fixtures
from tests.test_status import PLANNED, columns, fact_lines

SETTINGS = GatewaySettings()
A, B, C = "http://10.0.0.11:30000", "http://10.0.0.12:30000", "http://10.0.0.13:30000"
EXPECTED = (("a", A), ("b", B), ("c", C))
LOCKED = ["lock=yes", "now_s=1000", "lock_started=900", "lock_expires=2000"]


def listed(*entries: tuple[str, bool | None]) -> status.GatewayRead:
    return status.GatewayRead(url="http://10.0.0.2:30000",
                              listed=tuple(status.ListedWorker(url=u, healthy=h) for u, h in entries))


UNREAD = status.GatewayRead(url="http://10.0.0.2:30000",
                            error="gateway http://10.0.0.2:30000: list workers: ConnectError: [Errno 111] "
                                  "Connection refused")


def worker_row(lines: list[str] | None = None, planned: status.Planned = PLANNED) -> status.Row:
    return status.build_row("a", status.parse_observed(lines or fact_lines()), planned)


# ---------------------------------------------------------------------------
# the inventory's gateways
# ---------------------------------------------------------------------------

GW = {"ssh_hostname": "10.0.0.2", "sglang_gateway": {"port": 30000, "api_key": {"env": "GW_KEY"}}}


def test_gateway_hosts_and_their_workers_in_inventory_order():
    hosts = [("gw-01", GW), ("gw-02", {"sglang_gateway": True, "sglang_node_address": "fd00::2"}),
             ("w1", {"ssh_hostname": "10.0.0.11", "sglang_gateways": ["gw-01", "gw-02"]}),
             ("plain", {"ssh_hostname": "10.0.0.9"}),
             ("w2", {"sglang_worker_url": "http://w2.internal:8000/", "sglang_gateways": ["gw-01"]})]
    fleet = status.fleet_gateways(hosts)
    assert fleet.gateway_hosts == ("gw-01", "gw-02") and set(fleet.gateways) == {"gw-01", "gw-02"}
    assert fleet.urls == {"gw-01": "http://10.0.0.2:30000", "gw-02": "http://[fd00::2]:30000"}
    assert fleet.expected == {"gw-01": (("w1", "http://10.0.0.11:30000"), ("w2", "http://w2.internal:8000")),
                              "gw-02": (("w1", "http://10.0.0.11:30000"),)}
    assert set(fleet.memberships) == {"w1", "w2"} and fleet.errors == {}


def test_a_hosts_wrong_gateway_data_is_its_own_error_not_the_whole_reads():
    hosts = [("gw-01", GW), ("gw-bad", {"sglang_gateway": {"policy": "fastest"}}),
             ("w1", {"ssh_hostname": "10.0.0.11", "sglang_gateways": ["gw-01", "gw-bad"]}),
             ("w2", {"ssh_hostname": "10.0.0.12", "sglang_gateways": ["nope"]}),
             ("w3", {"sglang_worker_url": "http://10.0.0.11:30000", "sglang_gateways": ["gw-01"]})]
    fleet = status.fleet_gateways(hosts)
    assert fleet.gateway_hosts == ("gw-01", "gw-bad") and set(fleet.gateways) == {"gw-01"}
    assert "sglang_gateway.policy" in fleet.errors["gw-bad"]
    assert "sglang_gateways[0]" in fleet.errors["w2"] and "not a gateway host" in fleet.errors["w2"]
    assert "also w1's worker URL in gateway gw-01" in fleet.errors["w3"]  # the later of two with one URL
    assert fleet.expected["gw-01"] == (("w1", "http://10.0.0.11:30000"),)
    assert fleet.expected["gw-bad"] == (("w1", "http://10.0.0.11:30000"),)


# ---------------------------------------------------------------------------
# a gateway's row
# ---------------------------------------------------------------------------

def test_every_worker_listed_healthy_is_ok():
    row = status.gateway_row("gw-01", SETTINGS, listed((A, True), (B + "/", True), (C, True)), EXPECTED)
    assert (row.kind, row.state, row.problems, row.warnings) == ("gateway", status.OK, [], [])
    table = status_table.render_table([row])
    assert columns(table)[:5] == ["gw-01", "ok", "-", "gateway 3/3 healthy", "router 0.3.2"]
    assert status.exit_code([row]) == 0


def test_a_worker_missing_or_unhealthy_is_a_problem_naming_host_and_url():
    row = status.gateway_row("gw-01", SETTINGS, listed((A, True), (C, False)), EXPECTED)
    assert row.state == status.DEGRADED and status.exit_code([row]) == 1
    assert row.problems == [
        f"worker b ({B}) is not listed: clients routed through gw-01 never reach it",
        f"worker c ({C}) is listed unhealthy: gw-01 routes it no requests until its health checks pass again"]
    assert columns(status_table.render_table([row]))[3] == "gateway 1/3 healthy"
    doc = row.as_dict()["gateway"]
    assert [w["membership"] for w in doc["workers"]] == ["listed", "missing", "unhealthy"]
    assert (doc["expected"], doc["listed"], doc["healthy"]) == (3, 2, 1)


def test_an_entry_without_is_healthy_is_not_counted_healthy():
    assert status.membership(listed((A, None)), A) == status.UNHEALTHY
    assert status.membership(listed((A, False), (A + "/", True)), A) == status.LISTED  # one healthy entry


def test_a_worker_a_deploy_drains_now_is_expected_out():
    row = status.gateway_row("gw-01", SETTINGS, listed((A, True), (C, False)), EXPECTED, draining={"b", "c"})
    assert row.state == status.OK and row.problems == []
    assert row.warnings == [
        f"worker b ({B}) is not listed while a deploy drains and restarts it (its lock is held): expected",
        f"worker c ({C}) is listed unhealthy while a deploy drains and restarts it (its lock is held): expected"]
    assert [w["draining"] for w in row.as_dict()["gateway"]["workers"]] == [False, True, True]


def test_workers_no_host_names_are_a_warning_and_shown_safely():
    hostile = "http://user:pa55@evil:1/\x1b[2J"
    others = [(f"http://10.9.0.{i}:1", True) for i in range(7)]
    row = status.gateway_row("gw-01", SETTINGS, listed((A, True), (hostile, True), *others), EXPECTED[:1])
    assert row.state == status.OK
    assert row.warnings[0].startswith("8 worker(s) listed that no host of the inventory gives this gateway: ")
    assert row.warnings[0].endswith(" and 3 more")
    doc = row.as_dict()["gateway"]
    assert doc["others_total"] == 8 and len(doc["others"]) == status.OTHERS_SHOWN
    table = status_table.render_table([row])
    assert "pa55" not in table and "\x1b" not in table and "gateway 1/1 healthy (+8 other)" in table


def test_a_gateway_with_no_worker_says_so():
    row = status.gateway_row("gw-01", SETTINGS, listed(), ())
    assert row.state == status.OK and row.warnings == ["no host of the inventory names this gateway in "
                                                       "sglang_gateways"]


def test_a_gateway_that_does_not_answer_is_unreachable_exit_2():
    row = status.gateway_row("gw-01", SETTINGS, UNREAD, EXPECTED)
    assert row.state == status.UNREACHABLE and not row.reachable and status.exit_code([row, worker_row()]) == 2
    assert row.problems == [f"unreachable: {UNREAD.error}"]
    assert columns(status_table.render_table([row]))[:5] == ["gw-01", "unreachable", "-", "-", "router 0.3.2"]
    doc = row.as_dict()
    assert doc["kind"] == "gateway" and doc["error"] == UNREAD.error
    assert [w["membership"] for w in doc["gateway"]["workers"]] == ["unknown"] * 3


REV, OLD = "d1d26da89abeb1f5", "94ec939bcbad047f"


def test_the_gateway_hosts_own_read_shows_its_revision_and_router():
    seen = status.GatewayHostSeen(installed="0.3.2", current=REV, deployed=REV, active="active")
    row = status.gateway_row("gw-01", SETTINGS, listed((A, True), (B, True), (C, True)), EXPECTED, seen=seen)
    assert (row.state, row.problems, row.warnings) == (status.OK, [], [])
    assert columns(status_table.render_table([row]))[:5] == ["gw-01", "ok", REV, "gateway 3/3 healthy", "router 0.3.2"]
    doc = row.as_dict()["gateway"]
    assert doc["router"] == {"planned": "0.3.2", "installed": "0.3.2"}
    assert doc["unit"] == {"error": None, "active": "active", "current": REV, "deployed": REV}


def test_a_stopped_unit_another_router_or_an_ungated_revision_is_said():
    seen = status.GatewayHostSeen(installed="0.3.1", current=REV, deployed=OLD, active="failed")
    row = status.gateway_row("gw-01", SETTINGS, UNREAD, EXPECTED, seen=seen)
    assert row.state == status.UNREACHABLE  # its API did not answer: the unit says why
    assert row.problems == [f"unreachable: {UNREAD.error}",
                            "unit sglang-gateway.service is failed: the gateway does not run"]
    assert row.warnings == ["sglang-router 0.3.1 in its venv, 0.3.2 planned: the next deploy installs it",
                            f"revision {REV} is live but did not pass the gateway's gate (deployed: {OLD})"]
    assert columns(status_table.render_table([row]))[:5] == ["gw-01", "unreachable", REV, "-",
                                                             "router 0.3.1 (plan 0.3.2)"]
    answering = status.gateway_row("gw-01", SETTINGS, listed((A, True), (B, True), (C, True)), EXPECTED, seen=seen)
    assert answering.state == status.DEGRADED and len(answering.problems) == 1


def test_a_gateway_host_ssh_cannot_reach_is_a_warning_when_its_api_answers():
    seen = status.GatewayHostSeen(error="Could not connect to gw-01: timed out")
    row = status.gateway_row("gw-01", SETTINGS, listed((A, True), (B, True), (C, True)), EXPECTED, seen=seen)
    assert row.state == status.OK and row.warnings == ["not read over SSH: Could not connect to gw-01: timed out"]


def test_a_gateway_that_cannot_be_planned_is_an_error_row():
    row = status.gateway_error_row("gw-bad", "host gw-bad: sglang_gateway.policy: must be one of ...")
    assert (row.kind, row.state) == ("gateway", status.ERROR) and status.exit_code([row]) == 2


# ---------------------------------------------------------------------------
# a worker's membership
# ---------------------------------------------------------------------------

def membership_of(gateways: tuple[str, ...] = ("gw-01",)) -> WorkerMembership:
    return WorkerMembership(host="a", gateways=gateways, url=A)


def test_a_serving_worker_listed_healthy_stays_ok():
    row = status.add_gateways(worker_row(), membership_of(), {"gw-01": listed((A, True))}, status.parse_observed(
        fact_lines()))
    assert row.state == status.OK and row.gateways == {"gw-01": "listed"} and row.problems == []


@pytest.mark.parametrize("entries, word, said", [
    ((), "missing", "not in gateway gw-01: clients routed through it never reach this host"),
    (((A, False),), "unhealthy", "unhealthy in gateway gw-01: it routes no requests to this host until its health "
                                 "checks pass again")])
def test_a_serving_worker_a_gateway_misses_is_degraded_exit_1(entries, word, said):
    seen = status.parse_observed(fact_lines())
    row = status.add_gateways(worker_row(), membership_of(), {"gw-01": listed(*entries)}, seen)
    assert row.state == status.DEGRADED and status.exit_code([row]) == 1
    assert row.gateways == {"gw-01": word} and row.problems == [said]
    # more severe than a pending revision; less than a stopped server, whose row keeps saying so
    pending = status.add_gateways(worker_row(planned=status.Planned(revision="aaaaaaaaaaaaaaaa")), membership_of(),
                                  {"gw-01": listed(*entries)}, seen)
    assert pending.state == status.DEGRADED and len(pending.problems) == 2
    down_lines = fact_lines(active="inactive")
    down = status.add_gateways(worker_row(down_lines), membership_of(), {"gw-01": listed(*entries)},
                               status.parse_observed(down_lines))
    assert down.state == status.DOWN and said in down.problems


def test_a_worker_drained_by_a_deploy_now_is_missing_without_a_problem():
    lines = fact_lines() + LOCKED
    seen = status.parse_observed(lines)
    assert status.lock_held(seen)
    row = status.add_gateways(worker_row(lines), membership_of(), {"gw-01": listed()}, seen)
    assert row.state == status.HALF  # the lock itself, as without a gateway
    assert row.gateways == {"gw-01": "missing"}
    assert not any("gateway" in p for p in row.problems)
    assert "not in gateway gw-01 while the deploy holding this host's lock drains and restarts it: expected" in \
        row.warnings
    # a lock past its deadline is a deploy that died: then being out is a problem again
    dead = fact_lines() + ["lock=yes", "now_s=3000", "lock_started=900", "lock_expires=2000"]
    seen = status.parse_observed(dead)
    assert not status.lock_held(seen)
    row = status.add_gateways(worker_row(dead), membership_of(), {"gw-01": listed()}, seen)
    assert "not in gateway gw-01: clients routed through it never reach this host" in row.problems


def test_a_gateway_not_read_leaves_the_membership_unknown_and_the_state_alone():
    seen = status.parse_observed(fact_lines())
    row = status.add_gateways(worker_row(), membership_of(gateways=("gw-01", "gw-02")),
                              {"gw-01": UNREAD}, seen, unread={"gw-02": "gateway gw-02 cannot be planned: ..."})
    assert row.state == status.OK and row.gateways == {"gw-01": "unknown", "gw-02": "unknown"}
    assert row.warnings == [f"membership in gateway gw-01 unknown: {UNREAD.error}",
                            "membership in gateway gw-02 unknown: gateway gw-02 cannot be planned: ..."]


def test_an_unreachable_worker_gets_the_gateways_view_only():
    row = status.add_gateways(status.unreachable_row("a", "SSH error"), membership_of(),
                              {"gw-01": listed((A, True))})
    assert row.state == status.UNREACHABLE and row.gateways == {"gw-01": "listed"} and len(row.problems) == 1


def test_json_has_kind_and_gateways_on_every_row():
    plain = json.loads(status_table.rows_json([worker_row()]))[0]
    assert (plain["kind"], plain["gateways"], plain["gateway"]) == ("server", {}, None)
    assert plain["schema"] == status.SCHEMA
    gw = json.loads(status_table.rows_json([status.gateway_row("gw-01", SETTINGS, listed((A, True)), EXPECTED[:1])]))[0]
    assert gw["kind"] == "gateway" and set(gw) == set(plain)
    assert gw["gateway"] == {"url": "http://10.0.0.2:30000", "router": {"planned": "0.3.2", "installed": None},
                             "unit": None, "expected": 1, "listed": 1, "healthy": 1, "others": [], "others_total": 0,
                             "workers": [{"host": "a", "url": A, "membership": "listed", "draining": False}]}


# ---------------------------------------------------------------------------
# the controller's read: recorded answers of the real router, and gateways that never answer
# ---------------------------------------------------------------------------

def test_read_gateway_on_the_routers_recorded_answers():
    replay = Replay({("GET", "/workers"): "workers_two"})
    read = read_gateway("http://g:1", "k3y-for-the-gateway", transport=httpx.MockTransport(replay))
    assert read.error is None and read.listed == (status.ListedWorker("http://127.0.0.1:32001", True),
                                                  status.ListedWorker("http://127.0.0.1:32003", True))
    assert [(r.method, r.url.path, r.headers["authorization"]) for r in replay.seen] == [
        ("GET", "/workers", "Bearer k3y-for-the-gateway")]  # one request
    empty = read_gateway("http://g:1", None, transport=httpx.MockTransport(Replay({("GET", "/workers"):
                                                                                    "workers_empty"})))
    assert empty.listed == ()


@pytest.mark.parametrize("answer, said", [("keyed_workers_401", "401: the gateway wants its API key and refused"),
                                          ("legacy_list_workers_404", None)])
def test_read_gateway_refused_is_an_error_naming_the_url_never_the_key(answer, said):
    rec = recorded(answer)
    read = read_gateway("http://g:1", "k3y-for-the-gateway", transport=httpx.MockTransport(
        lambda r: httpx.Response(rec["status"], text=rec["body"])))
    assert read.listed is None and read.error is not None and read.error.startswith("gateway http://g:1: ")
    assert "k3y-for-the-gateway" not in read.error
    if said:
        assert said in read.error
    hostile = read_gateway("http://g:1", None, transport=httpx.MockTransport(
        lambda r: httpx.Response(200, json={"workers": [{"url": "http://x:1", "id": "../../admin"}]})))
    assert hostile.listed is None and "not a UUID" in (hostile.error or "")


def test_gateways_that_never_answer_are_waited_for_at_once_within_the_timeout():
    """Two gateways that accept the connection and never answer: both reads end with the timeout,
    together (one greenlet each), not one after the other."""
    holes = []
    try:
        for _ in range(2):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(8)
            holes.append(s)
        targets = {f"gw{i}": GatewayTarget(f"http://127.0.0.1:{s.getsockname()[1]}", "k3y-for-the-gateway")
                   for i, s in enumerate(holes)}
        started = time.monotonic()
        reads = GatewayReads(targets, timeout_s=1.0).results()
        took = time.monotonic() - started
    finally:
        for s in holes:
            s.close()
    assert set(reads) == {"gw0", "gw1"}
    for name, read in reads.items():
        assert read.listed is None and "Timeout" in (read.error or "") and targets[name].url in (read.error or "")
    assert 0.9 <= took < 1.8, took
    assert "k3y" not in repr(targets["gw0"])


# ---------------------------------------------------------------------------
# end to end: collect and run_status, the real router, simulated servers, SSH stood in for
# ---------------------------------------------------------------------------

MODEL = ROOT / "sglang_deploy" / "simulator" / "hub" / "checkpoints" / "Qwen--Qwen3-0.6B"
KEY_ENV = "STATUS_GATEWAY_TEST_KEY"


class SshStandIn:
    """Stands in for status's SSH side (sglang_deploy/deploy/status.py StatusReader): every serving
    host is reachable, probes as two RTX A6000 (a recorded probe) and reads as ``deployed[host]``
    deployed and running it, active, last gate passed (the lines tests/test_status.py's
    ``fact_lines`` prints); a host in ``locked`` holds a deploy's lock now."""

    deployed: dict[str, str] = {}
    locked: set[str] = set()
    connected: list[str] = []
    gateway_hosts: list[str] = []

    def __init__(self, inventory: str, parallel: int = 1):
        pass

    def probe(self, names: list[str], cache_roots: dict[str, str] | None = None) -> dict[str, HostRead]:
        SshStandIn.connected += names
        return {n: HostRead(n, probe=load_probe("a6000x2-bridge")) for n in names}

    def read(self, reads: dict[str, HostRead], layouts: dict[str, Any], diff: bool,
             replicas: dict[str, Any] | None = None) -> None:
        assert not any((replicas or {}).values())  # no host of these inventories runs replicas
        for n in layouts:
            rev = self.deployed.get(n, "0123456789abcdef")
            lines = fact_lines(current=rev, deployed=rev) + (LOCKED if n in self.locked else [])
            reads[n].observed = status.parse_observed(lines)

    def verify_weights(self, reads: Any, layouts: Any) -> dict:
        return {}

    def read_gateway_hosts(self, gateways: dict[str, Any]) -> dict[str, status.GatewayHostSeen]:
        """A gateway host as its deploy leaves it: its planned router, its revision live and gated."""
        SshStandIn.gateway_hosts += list(gateways)
        return {n: status.GatewayHostSeen(installed=s.version, current="fedcba9876543210",
                                          deployed="fedcba9876543210", active="active") for n, s in gateways.items()}

    def close(self) -> None:
        pass


def write_inventory(path: Path, gw_port: int, off_port: int, urls: dict[str, str]) -> Path:
    """``gw`` (the real router, its key read from KEY_ENV), ``gw-off`` (nothing listens on its port,
    no worker) and one serving host per URL, each a worker of ``gw``."""
    gateways = [("gw", {"ssh_hostname": "127.0.0.1",
                        "sglang_gateway": {"port": gw_port, "api_key": {"env": KEY_ENV}}}),
                ("gw-off", {"ssh_hostname": "127.0.0.1", "sglang_gateway": {"port": off_port}})]
    worker = {"sglang_model": str(MODEL), "sglang_gateways": ["gw"],
              "sglang_gpus": {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"}}
    workers = [(name, {**worker, "sglang_worker_url": url}) for name, url in urls.items()]
    path.write_text(f"gateways = {gateways!r}\nworkers = {workers!r}\n")
    return path


@linux
def test_status_reads_the_real_gateway_and_each_workers_membership(stack, tmp_path, monkeypatch):  # noqa: F811
    from sglang_deploy.commands import status as command

    monkeypatch.setattr(command, "StatusReader", SshStandIn)
    monkeypatch.setattr(SshStandIn, "deployed", {})
    monkeypatch.setattr(SshStandIn, "locked", {"w-d"})
    monkeypatch.setattr(SshStandIn, "connected", [])
    monkeypatch.setenv(KEY_ENV, GW_KEY)
    a_proc, a = stack.sim()
    c_proc, c = stack.sim()
    _, e = stack.sim()
    router = stack.router(key=GW_KEY)
    gw = Gateway(router, GW_KEY)
    for url in (a, c, e):  # e: registered by hand, no host of the inventory names it
        gw.register(url, None)
    for url in (a, c, e):
        gw.wait_registered(url, 30)
    c_proc.kill()  # listed, then unhealthy after the router's failed health checks (1 s apart)
    wait_for(lambda: any(w.url == c and w.healthy is False for w in gw.workers()), 30, "c listed unhealthy")
    urls = {"w-a": a, "w-b": f"http://127.0.0.1:{free_port()}", "w-c": c, "w-d": f"http://127.0.0.1:{free_port()}"}
    inventory = write_inventory(tmp_path / "inventory.py", int(router.rsplit(":", 1)[1]), free_port(), urls)

    # first: the revisions the inventory plans, so that the stand-in reports each as deployed
    rows = command.collect(command.StatusOptions(str(inventory), limit=["w-a", "w-b", "w-c", "w-d"]))
    SshStandIn.deployed = {r.host: r.revision["planned"] for r in rows}
    assert all(SshStandIn.deployed.values()), [r.problems for r in rows]

    SshStandIn.connected, SshStandIn.gateway_hosts = [], []
    out, err = StringIO(), StringIO()
    code = command.run_status(command.StatusOptions(str(inventory), limit=["gw", "w-a", "w-b", "w-c", "w-d"]),
                              out, err)
    table = out.getvalue()
    assert code == 1, table + err.getvalue()
    assert SshStandIn.connected == ["w-a", "w-b", "w-c", "w-d"]  # the gateway host is not an SGLang host
    assert SshStandIn.gateway_hosts == ["gw"]  # its own read: router, revision, unit
    assert columns(table, 1)[:5] == ["gw", "degraded", "fedcba9876543210", "gateway 1/4 healthy (+1 other)",
                                     "router 0.3.2"]
    states = {line.split()[0]: line.split()[1] for line in table.splitlines()[2:6]}
    assert states == {"w-a": "ok", "w-b": "degraded", "w-c": "degraded", "w-d": "half-deployed"}
    for line in (f"gw: worker w-b ({urls['w-b']}) is not listed: clients routed through gw never reach it",
                 f"gw: worker w-c ({c}) is listed unhealthy: gw routes it no requests until its health checks pass "
                 "again",
                 f"gw: warning: worker w-d ({urls['w-d']}) is not listed while a deploy drains and restarts it (its "
                 "lock is held): expected",
                 f"gw: warning: 1 worker(s) listed that no host of the inventory gives this gateway: {e}",
                 "w-b: not in gateway gw: clients routed through it never reach this host",
                 "w-c: unhealthy in gateway gw: it routes no requests to this host until its health checks pass again",
                 "w-d: warning: not in gateway gw while the deploy holding this host's lock drains and restarts it: "
                 "expected"):
        assert line in table.splitlines(), table
    assert GW_KEY not in table + err.getvalue()

    out = StringIO()
    assert command.run_status(command.StatusOptions(str(inventory), json=True), out, StringIO()) == 2  # gw-off
    doc = {r["host"]: r for r in json.loads(out.getvalue())}
    assert [doc[h]["kind"] for h in doc] == ["gateway", "gateway", "server", "server", "server", "server"]
    assert {h: doc[h]["gateways"] for h in urls} == {"w-a": {"gw": "listed"}, "w-b": {"gw": "missing"},
                                                     "w-c": {"gw": "unhealthy"}, "w-d": {"gw": "missing"}}
    assert [(w["host"], w["membership"], w["draining"]) for w in doc["gw"]["gateway"]["workers"]] == [
        ("w-a", "listed", False), ("w-b", "missing", False), ("w-c", "unhealthy", False), ("w-d", "missing", True)]
    assert doc["gw"]["gateway"]["others"] == [e] and doc["gw"]["state"] == "degraded"
    off = doc["gw-off"]
    assert off["state"] == "unreachable" and "Connection refused" in off["error"] and off["gateway"]["expected"] == 0
    assert GW_KEY not in out.getvalue()

    # a worker alone: its gateway is still read (its row needs it), the gateway's row is not shown
    out = StringIO()
    assert command.run_status(command.StatusOptions(str(inventory), limit=["w-a"], json=True), out, StringIO()) == 0
    only = json.loads(out.getvalue())
    assert [(r["host"], r["state"], r["gateways"]) for r in only] == [("w-a", "ok", {"gw": "listed"})]


def test_wrong_gateway_data_gives_error_rows_and_the_rest_is_read(tmp_path, monkeypatch):
    """No router needed: nothing here can be asked. A gateway whose settings are wrong and a worker
    naming no gateway host are error rows (exit 2, as the deploy refuses them); a worker of the
    broken gateway is read as usual, its membership unknown."""
    from sglang_deploy.commands import status as command

    monkeypatch.setattr(command, "StatusReader", SshStandIn)
    monkeypatch.setattr(SshStandIn, "connected", [])
    worker = {"sglang_model": str(MODEL), "sglang_gpus": {"model": "RTX A6000", "count": 2,
                                                          "topology": "nvlink-pairs"}}
    inventory = tmp_path / "inventory.py"
    gateways = [("gw-bad", {"sglang_gateway": {"policy": "fastest"}})]
    workers = [("w-x", {**worker, "sglang_gateways": ["nope"]}),
               ("w-y", {**worker, "sglang_gateways": ["gw-bad"], "sglang_worker_url": "http://127.0.0.1:9"})]
    inventory.write_text(f"gateways = {gateways!r}\nworkers = {workers!r}\n")
    out = StringIO()
    assert command.run_status(command.StatusOptions(str(inventory), json=True), out, StringIO()) == 2
    doc = {r["host"]: r for r in json.loads(out.getvalue())}
    assert (doc["gw-bad"]["kind"], doc["gw-bad"]["state"]) == ("gateway", "error")
    assert "sglang_gateway.policy" in doc["gw-bad"]["problems"][0]
    assert doc["w-x"]["state"] == "error" and "sglang_gateways[0]" in doc["w-x"]["problems"][0]
    assert doc["w-y"]["state"] not in ("error", "unreachable") and doc["w-y"]["gateways"] == {"gw-bad": "unknown"}
    assert any(w.startswith("membership in gateway gw-bad unknown: gateway gw-bad cannot be planned")
               for w in doc["w-y"]["warnings"]), doc["w-y"]["warnings"]
    assert SshStandIn.connected == ["w-x", "w-y"]


def test_a_gateway_hosts_read_keeps_only_values_of_the_expected_shape():
    seen = status.gateway_host_seen({"systemd": "yes", "version": "0.3.2", "current": REV, "deployed": OLD,
                                     "active": "active"})
    assert (seen.installed, seen.current, seen.deployed, seen.active, seen.error) == ("0.3.2", REV, OLD, "active", None)
    hostile = status.gateway_host_seen({"systemd": "yes", "version": "\x1b[2J0.3.2", "current": "../../etc",
                                        "deployed": REV.upper(), "active": "Active\n"})
    assert (hostile.installed, hostile.current, hostile.deployed, hostile.active) == (None, None, None, None)
    assert status.gateway_host_seen({}).error == "no systemd answered (the read printed nothing)"
    assert status.gateway_host_seen(None).error == "no systemd answered (the read printed nothing)"
