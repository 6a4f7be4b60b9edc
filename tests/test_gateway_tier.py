"""A balanced gateway (``sglang_gateway.routers`` > 1), pure: its settings, files and names
(plan/gateway_tier.py, plan/gateway_render.py), the roll's decisions (lifecycle/gateway_roll.py)
and the parse of HAProxy's ``show stat`` (deploy/balancer.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_deploy.deploy.balancer import BalancerError, parse_stat
from sglang_deploy.errors import PlanError
from sglang_deploy.lifecycle.gateway_roll import KEEP, RELOAD, RESTART, roll_plan
from sglang_deploy.plan.gateway import gateway_settings
from sglang_deploy.plan.gateway_render import BalancedFiles, describe_gateway, render_gateway, revision_files
from sglang_deploy.plan.gateway_tier import Shape, admin_urls, backend_address, live_path, parse_shape



def gw(**raw):
    return gateway_settings("gw1", {"sglang_gateway": raw})


# ---- settings ---------------------------------------------------------------------------------

def test_one_router_by_default_and_the_balanced_ports():
    assert gw().routers == 1 and not gw().balanced
    s = gw(routers=3, port=30000, metrics_port=29000)
    assert s.balanced and s.router_port == 30001
    s = gw(routers=2, port=30000, router_port=31000)
    assert s.router_port == 31000


@pytest.mark.parametrize("raw, field, words", [
    ({"routers": 0}, "sglang_gateway.routers", "between 1 and 16"),
    ({"routers": 17}, "sglang_gateway.routers", "between 1 and 16"),
    ({"routers": True}, "sglang_gateway.routers", "whole number"),
    ({"router_port": 31000}, "sglang_gateway.router_port", "routers of 2 or more"),
    ({"balancer_check_interval": "2s"}, "sglang_gateway.balancer_check_interval", "routers of 2 or more"),
    ({"routers": 2, "balancer_check_interval": "2m"}, "sglang_gateway.balancer_check_interval", "60"),
    # router 1 on 29001 is router... no: metrics of router 1 (29000 + 1) is router 0's port
    ({"routers": 2, "port": 30000, "router_port": 29001, "metrics_port": 29000}, "sglang_gateway.metrics_port",
     "also the gateway's router_port"),
    ({"routers": 2, "port": 30001, "router_port": 30000}, "sglang_gateway.router_port", "also the gateway's port"),
    ({"routers": 4, "port": 30000, "router_port": 65534}, "sglang_gateway.router_port", "65535"),
])
def test_bad_balanced_settings_name_the_field(raw, field, words):
    with pytest.raises(PlanError) as err:
        gw(**raw)
    assert err.value.host == "gw1" and err.value.field == field and words in str(err.value)


# ---- files and names --------------------------------------------------------------------------

def test_the_balanced_files_name_every_router_and_hold_no_secret():
    s = gw(routers=2, port=30000, metrics_port=29000, host="127.0.0.1", api_key={"env": "GW_KEY"})
    files = render_gateway("gw1", s, ["http://10.0.0.11:30000"], {"SGLANG_GATEWAY_API_KEY": "k-123"})
    assert isinstance(files, BalancedFiles) and len(files.routers) == 2
    assert "ExecStart=/usr/sbin/haproxy -Ws -f ${CONFIG}" in files.unit
    assert "bind 127.0.0.1:30000" in files.balancer
    assert "server router0 127.0.0.1:30001 check" in files.balancer
    assert "server router1 127.0.0.1:30002 check" in files.balancer
    assert "expose-fd listeners" in files.balancer  # a reload keeps the listening sockets
    assert "--port 30002" in files.routers[1] and "--prometheus-port 29002" in files.routers[1]
    assert "k-123" not in files.unit + files.balancer + "".join(files.routers)
    assert "k-123" in files.env
    named = revision_files(s, files, "launcher")
    assert set(named) == {"unit", "env", "launcher", "balancer", "router0", "router1", "shape"}
    assert named["router1"][0] == "/etc/systemd/system/sglang-gateway-router1.service"
    assert named["balancer"][0] == "/etc/haproxy/sglang-gateway.cfg" and named["env"][1] == "0600"
    assert parse_shape(named["shape"][2], Shape(1, ())) == Shape(30000, (30001, 30002))
    described = describe_gateway("gw1", s, [])
    assert "router 1: sglang-gateway-router1.service on 127.0.0.1:30002, metrics 29002" in described
    assert "bind 127.0.0.1:29000" in files.balancer and "prometheus-exporter" in files.balancer


def test_one_router_keeps_its_three_files():
    files = render_gateway("gw1", gw(), ["http://10.0.0.11:30000"])
    assert set(revision_files(gw(), files, "launcher")) == {"unit", "env", "launcher"}


def test_routers_bind_every_address_and_the_balancer_reaches_them_on_loopback():
    assert backend_address(gw(routers=2)) == "127.0.0.1"
    assert backend_address(gw(routers=2, host="::")) == "::1"
    assert backend_address(gw(routers=2, host="10.0.0.2")) == "10.0.0.2"


def test_workers_join_every_router_of_a_balanced_gateway():
    data = {"ssh_hostname": "10.0.0.2"}
    assert admin_urls("gw1", data, gw(port=30000)) == ("http://10.0.0.2:30000",)
    assert admin_urls("gw1", data, gw(routers=2, port=30000)) == ("http://10.0.0.2:30001", "http://10.0.0.2:30002")


def test_live_paths_of_names_a_revision_may_hold():
    s = gw(routers=2)
    assert live_path(s, "router7") == "/etc/systemd/system/sglang-gateway-router7.service"
    assert live_path(s, "shape") is None and live_path(s, "../../etc/passwd") is None
    assert live_path(s, "router999") is None


@pytest.mark.parametrize("text", ["", "{", "[]", '{"port": 0, "router_ports": []}',
                                  '{"port": 30000, "router_ports": [true]}', '{"port": 30000, "router_ports": "x"}',
                                  '{"port": 30000, "router_ports": [' + ",".join(["1"] * 65) + "]}"])
def test_a_shape_the_host_returns_is_checked(text):
    assert parse_shape(text, Shape(1, ())) == Shape(1, ())


# ---- the roll's decisions ---------------------------------------------------------------------

BAL = {"unit": "u", "env": "e", "launcher": "l", "balancer": "b", "router0": "r0", "router1": "r1"}
UP = {"unit": True, "router0": True, "router1": True}


def test_a_router_change_drains_each_router_and_keeps_the_balancer():
    plan = roll_plan(BAL, {**BAL, "router0": "r0'", "router1": "r1'"}, UP)
    assert plan.routers == (0, 1) and plan.drained == (0, 1) and plan.front == KEEP and plan.retire == ()


def test_a_key_or_launcher_change_restarts_every_router():
    assert roll_plan(BAL, {**BAL, "env": "e'"}, UP).routers == (0, 1)
    assert roll_plan(BAL, {**BAL, "launcher": "l'"}, UP).routers == (0, 1)


def test_a_balancer_change_is_a_reload_and_nothing_else():
    plan = roll_plan(BAL, {**BAL, "balancer": "b'"}, UP)
    assert plan.routers == () and plan.front == RELOAD


def test_an_unchanged_revision_does_nothing_and_a_dead_router_starts():
    assert not roll_plan(BAL, BAL, UP).changes
    plan = roll_plan(BAL, BAL, {**UP, "router1": False})
    assert plan.routers == (1,) and plan.drained == (1,) and plan.front == KEEP


def test_one_router_to_a_balancer_starts_the_routers_then_restarts_the_front():
    one = {"unit": "single", "env": "e", "launcher": "l"}
    plan = roll_plan(one, BAL, {"unit": True})
    assert plan.routers == (0, 1) and plan.drained == () and plan.front == RESTART


def test_a_first_deploy_starts_everything():
    plan = roll_plan(None, BAL, {})
    assert plan.routers == (0, 1) and plan.drained == () and plan.front == RESTART


def test_fewer_routers_retire_the_last_after_draining_them():
    target = {k: v for k, v in BAL.items() if k != "router1"} | {"balancer": "b-one"}
    plan = roll_plan(BAL, target, UP)
    assert plan.retire == (1,) and plan.front == RELOAD and plan.routers == ()


def test_a_new_router_starts_after_the_drained_ones_and_the_balancer_reloads():
    target = {**BAL, "router0": "r0'", "router2": "r2", "balancer": "b3"}
    plan = roll_plan(BAL, target, UP)
    assert plan.routers == (0, 2) and plan.drained == (0,) and plan.front == RELOAD


def test_a_balancer_back_to_one_router_restarts_the_front_and_retires_every_router():
    one = {"unit": "single", "env": "e", "launcher": "l"}
    plan = roll_plan(BAL, one, UP)
    assert plan.front == RESTART and plan.retire == (0, 1) and plan.routers == ()


names = st.sampled_from(["unit", "env", "launcher", "balancer", "router0", "router1", "router2", "router3"])
revisions = st.dictionaries(names, st.sampled_from(["a", "b"]), max_size=8)


@given(live=st.one_of(st.none(), revisions), target=revisions,
       active=st.dictionaries(st.sampled_from(["unit", "router0", "router1", "router2", "router3"]), st.booleans()))
def test_the_roll_never_drains_what_the_running_balancer_does_not_send_to(live, target, active):
    plan = roll_plan(live, target, active)
    live = live or {}
    assert set(plan.drained) <= set(plan.routers)
    assert not set(plan.retire) & set(plan.routers)
    for i in plan.drained:
        assert active.get("unit") and "balancer" in live and f"router{i}" in live
    for i in plan.routers:
        assert f"router{i}" in target
    # every router the target runs is running afterwards: restarted, or already up and unchanged
    for name in target:
        if name.startswith("router") and name[6:].isdigit() and int(name[6:]) not in plan.routers:
            assert active.get(name) and live.get(name) == target[name]
    assert plan.routers == plan.drained + tuple(i for i in plan.routers if i not in plan.drained)


# ---- HAProxy's show stat ----------------------------------------------------------------------

STAT = ("# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,\n"
        "gateway,FRONTEND,,,3,5,262125,40,0,0,0,0,0,,,,,OPEN,\n"
        "routers,router0,0,0,2,3,,20,0,0,,0,,0,0,0,0,UP,\n"
        "routers,router1,0,0,0,2,,20,0,0,,0,,0,0,0,0,DRAIN,\n"
        "routers,BACKEND,0,0,2,5,26213,40,0,0,0,0,,0,0,0,0,UP,\n"
        "other,router9,0,0,7,7,,1,0,0,,0,,0,0,0,0,UP,\n")


def test_show_stat_gives_each_router_of_the_backend():
    stat = parse_stat(STAT)
    assert set(stat) == {"router0", "router1"}
    assert stat["router0"].up and stat["router0"].sessions == 2
    assert stat["router1"].status == "DRAIN" and not stat["router1"].up


@pytest.mark.parametrize("text", ["", "Unknown command\n", "# pxname,svname\nrouters,router0\n"])
def test_show_stat_that_is_not_haproxys_csv_is_an_error(text):
    with pytest.raises(BalancerError):
        parse_stat(text)


def test_show_stat_bounds_what_it_reads():
    rows = "".join(f"routers,r{i},0,0,{'9' * 20},0,,0,0,0,,0,,0,0,0,0,UP,\n" for i in range(10000))
    stat = parse_stat(STAT.splitlines()[0] + "\n" + rows)
    assert len(stat) < 4096 and all(s.sessions == 0 for s in stat.values())


# ---- status: every router of a balanced gateway -----------------------------------------------

def test_status_counts_a_worker_only_when_every_router_lists_it_healthy():
    from sglang_deploy.status.gateways import GatewayRead, ListedWorker, every_router
    a, b, c = "http://10.0.0.11:30000", "http://10.0.0.12:30000", "http://10.0.0.13:30000"
    front = GatewayRead(url="http://gw:30000", listed=(ListedWorker(a, True), ListedWorker(b, True),
                                                       ListedWorker(c, True)))
    r0 = GatewayRead(url="http://gw:30001", listed=(ListedWorker(a, True), ListedWorker(b, False),
                                                    ListedWorker(c, None)))
    r1 = GatewayRead(url="http://gw:30002", listed=(ListedWorker(a, True), ListedWorker(c, True)))
    merged = every_router(front, [r0, r1])
    assert merged.url == "http://gw:30000" and merged.error is None
    assert {w.url: w.healthy for w in merged.listed or ()} == {a: True, c: None}
    broken = every_router(front, [r0, GatewayRead(url="http://gw:30002", error="connection refused")])
    assert broken.listed is None and broken.error == "router http://gw:30002: connection refused"
    assert every_router(GatewayRead(url="u", error="down"), [r0]).error == "down"
