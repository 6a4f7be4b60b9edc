"""A pyinfra run's restart steps behind gateways (sglang_deploy/deploy/gateway.py: run_steps,
step_plan, step_check_callback) on pyinfra's own Inventory and State, and a multi-node tp group
as one worker of its gateways (sglang_deploy/plan/gateway_fleet.py inventory_gateways; the deploy's
worker_run). No hosts: inventory data only, as the steps are computed before any fact."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pyinfra.api import Config, Inventory, State

from sglang_deploy.deploy import gateway, restart_steps
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.gateway_fleet import inventory_gateways
from sglang_deploy.plan.gateway_fleet import fleet_memberships
from sglang_deploy import runcontext

GW = ("gw", {"ssh_hostname": "10.0.0.1", "sglang_gateway": {"port": 30100}})


def worker(name: str, *gateways: str, **extra) -> tuple[str, dict]:
    return (name, {"ssh_hostname": f"10.0.1.{name[-1]}", "sglang_gateways": list(gateways or ["gw"]), **extra})


def state_of(*hosts, limit: tuple[str, ...] | None = None) -> State:
    inventory = Inventory((list(hosts), {}))
    state = State(inventory, Config())
    if limit is not None:
        state.limit_hosts = [inventory.get_host(n) for n in limit]
    return state


def steps_of(state: State) -> list[tuple[str, ...]]:
    return list(restart_steps.run_steps(next(iter(state.inventory))).steps)


@pytest.fixture(autouse=True)
def _no_rollout_flag(monkeypatch):
    monkeypatch.delenv(runcontext.RUN_ENV, raising=False)


def test_one_worker_of_a_gateway_per_step_by_default_and_the_rest_in_the_first():
    state = state_of(GW, worker("w1"), ("plain", {"ssh_hostname": "10.0.2.1"}), worker("w2"), worker("w3"))
    assert steps_of(state) == [("gw", "w1", "plain"), ("w2",), ("w3",)]


def test_max_unavailable_from_the_inventory_or_the_rollouts_flag(monkeypatch, tmp_path):
    rollout = {"sglang_rollout": {"max_unavailable": "50%"}}
    hosts = [GW, *(worker(f"w{i}", **rollout) for i in range(1, 5))]
    assert steps_of(state_of(*hosts)) == [("gw", "w1", "w2"), ("w3", "w4")]
    # the rollout's --max-unavailable, in the run context it hands the deploy
    for name, value in runcontext.write(runcontext.RunContext(max_unavailable="3"), str(tmp_path / "run.json")).items():
        monkeypatch.setenv(name, value)
    assert steps_of(state_of(*hosts)) == [("gw", "w1", "w2", "w3"), ("w4",)]


def test_only_the_runs_hosts_are_stepped_and_a_percentage_is_of_the_whole_gateway():
    rollout = {"sglang_rollout": {"max_unavailable": "50%"}}
    hosts = [GW, *(worker(f"w{i}", **rollout) for i in range(1, 5))]
    # two of four may be out: the two in this run go together
    assert steps_of(state_of(*hosts, limit=("w2", "w4"))) == [("w2", "w4")]


def test_a_gateways_prefill_and_decode_servers_each_keep_one_serving_in_every_step():
    rollout = {"sglang_rollout": {"max_unavailable": 2}}
    hosts = [GW, *(worker(f"p{i}", sglang_role="prefill", **rollout) for i in (1, 2)),
             *(worker(f"d{i}", sglang_role="decode", **rollout) for i in (3, 4))]
    # 2 of the gateway's 4 workers may be out, but never both servers of one role
    assert steps_of(state_of(*hosts)) == [("gw", "p1"), ("p2", "d3"), ("d4",)]


def test_a_tp_group_is_one_worker_in_one_step():
    group = {"sglang_tp_group": "g"}
    state = state_of(GW, worker("n1", **group), worker("n2", **group), worker("w3"))
    assert steps_of(state) == [("gw", "n1", "n2"), ("w3",)]


def test_hosts_that_disagree_on_max_unavailable_fail_naming_the_field():
    state = state_of(GW, worker("w1", sglang_rollout={"max_unavailable": 1}),
                     worker("w2", sglang_rollout={"max_unavailable": 2}))
    with pytest.raises(PlanError) as exc:
        restart_steps.run_steps(state.inventory.get_host("w1"))
    assert "host w1: sglang_rollout.max_unavailable: hosts disagree (w1=1, w2=2)" in str(exc.value)


def ctx_for(state: State, name: str, *, serving: bool, tp: object | None = None, member: bool = True):
    host = state.inventory.get_host(name)
    prepared = SimpleNamespace(state=SimpleNamespace(active=serving))
    return SimpleNamespace(host=host, prepared=prepared, tp=tp, gateway=object() if member else None, error=None)


def test_a_serving_worker_takes_its_step_a_new_one_and_a_plain_host_the_first():
    state = state_of(GW, worker("w1"), worker("w2"), ("plain", {"ssh_hostname": "10.0.2.1"}))
    w2 = state.inventory.get_host("w2")
    assert restart_steps.step_plan(w2, ctx_for(state, "w2", serving=True)) == (2, 1)
    assert restart_steps.step_plan(w2, ctx_for(state, "w2", serving=False)) == (2, 0)  # takes no capacity away
    plain = state.inventory.get_host("plain")
    assert restart_steps.step_plan(plain, ctx_for(state, "plain", serving=True, member=False)) == (2, 0)


def test_without_a_gateway_host_there_is_one_step():
    state = state_of(("a", {"ssh_hostname": "10.0.2.1"}), ("b", {"ssh_hostname": "10.0.2.2"}))
    b = state.inventory.get_host("b")
    assert restart_steps.step_plan(b, ctx_for(state, "b", serving=True, member=False)) == (1, 0)


def test_a_failure_in_an_earlier_step_stops_a_later_worker_of_the_same_gateway(monkeypatch):
    state = state_of(GW, ("gw2", {"ssh_hostname": "10.0.0.2", "sglang_gateway": {"port": 30100}}),
                     worker("w1"), worker("w2"), worker("w3", "gw2"), worker("w4", "gw2"))
    failed: list[str] = []
    monkeypatch.setattr("sglang_deploy.deploy.restart_steps.fail_host", lambda host, ctx, text: failed.append(text))
    steps = restart_steps.run_steps(state.inventory.get_host("w2"))
    assert steps.index("w2") == 1 and steps.index("w4") == 1
    state.failed_hosts.add(state.inventory.get_host("w1"))
    w2, w4 = (SimpleNamespace(error=None) for _ in range(2))
    # w4: another gateway's worker
    assert restart_steps.step_check_callback(state, state.inventory.get_host("w4"), w4, steps) is True
    assert restart_steps.step_check_callback(state, state.inventory.get_host("w2"), w2, steps) is False
    assert w2.error == ("not restarted: w1, a worker of the same gateway(s) in an earlier step of this run, failed; "
                        "nothing was changed on this host")
    assert failed == [w2.error]


# ---------------------------------------------------------------------------
# a multi-node tp group: one worker, rank 0's server


def test_a_tp_group_is_listed_once_at_rank_0s_address_and_port():
    group = {"sglang_tp_group": "g", "sglang_intents": {"port": 31000}}
    pairs = [GW, worker("n1", **group), worker("n2", **group), worker("w3")]
    workers = inventory_gateways(pairs).workers["gw"]
    assert workers == ("http://10.0.1.1:31000", "http://10.0.1.3:30000")


def test_a_tp_group_member_with_a_url_of_its_own_is_refused():
    group = {"sglang_tp_group": "g"}
    pairs = [GW, worker("n1", **group), worker("n2", **group, sglang_worker_url="http://10.0.1.2:30000")]
    with pytest.raises(PlanError) as exc:
        inventory_gateways(pairs)
    assert str(exc.value).startswith("host n2: sglang_worker_url: http://10.0.1.2:30000, but tp group g is one "
                                     "worker of gateway gw, at http://10.0.1.1:30000 (rank 0's server)")


def test_the_deploy_refuses_a_member_whose_gateways_differ_from_rank_0s():
    state = state_of(GW, worker("n1", sglang_tp_group="g"),
                     ("n2", {"ssh_hostname": "10.0.1.2", "sglang_tp_group": "g"}))
    n2 = state.inventory.get_host("n2")
    p = SimpleNamespace(plan=SimpleNamespace(intents={"port": SimpleNamespace(value=30000)}), api_key=None)
    with pytest.raises(PlanError) as exc:
        gateway.worker_run(n2, dict(n2.data.dict()), p, leader="n1")
    assert str(exc.value).startswith("host n2: sglang_gateways: differs from rank 0 (n1) of its tp group")


def test_the_deploy_makes_every_member_the_groups_one_worker_at_rank_0():
    state = state_of(GW, worker("n1", sglang_tp_group="g"), worker("n2", sglang_tp_group="g"))
    p = SimpleNamespace(plan=SimpleNamespace(intents={"port": SimpleNamespace(value=30000)}), api_key=None)
    runs = [gateway.worker_run(h, dict(h.data.dict()), p, leader="n1")
            for h in (state.inventory.get_host("n1"), state.inventory.get_host("n2"))]
    assert [r.membership.url for r in runs if r is not None] == ["http://10.0.1.1:30000"] * 2
    assert [r.gateways for r in runs if r is not None] == [(("gw", "http://10.0.0.1:30100", None),)] * 2


@pytest.mark.parametrize("url, what", [("http://10.0.0.1:30100", "its own URL"),
                                       ("https://10.0.0.1:29000", "its metrics port")])
def test_a_workers_own_deploy_refuses_a_url_its_gateway_listens_on(url, what):
    state = state_of(GW, worker("w1", sglang_worker_url=url), limit=("w1",))
    w1 = state.inventory.get_host("w1")
    p = SimpleNamespace(plan=SimpleNamespace(intents={"port": SimpleNamespace(value=30000)}), api_key=None)
    with pytest.raises(PlanError) as exc:
        gateway.worker_run(w1, dict(w1.data.dict()), p)
    assert str(exc.value).startswith(f"host w1: sglang_worker_url: {url} is gateway host gw's own address ({what}, ")
    assert "would route to itself" in str(exc.value)


def test_status_lists_a_tp_group_once_and_gives_every_member_its_membership():
    from sglang_deploy.status import fleet_gateways

    group = {"sglang_tp_group": "g", "sglang_intents": {"port": 31000}}
    fleet = fleet_gateways([GW, worker("n1", **group), worker("n2", **group), worker("w3")])
    assert fleet.expected["gw"] == (("n1", "http://10.0.1.1:31000"), ("w3", "http://10.0.1.3:30000"))
    assert fleet.memberships["n2"].url == "http://10.0.1.1:31000" and not fleet.errors


def test_the_rollout_and_the_deploy_read_the_fleets_memberships_alike():
    """plan.gateway.fleet_memberships: every host's gateways and tp group, what both split by; a
    gateway host is no worker; a malformed list is no membership for the deploy (the host's plan
    refuses it) and refuses the rollout, naming the host and the field."""
    hosts = [("gw", {}, {"sglang_gateway": {"port": 30100}, "sglang_gateways": ["x"]}),
             ("a", {"sglang_gateways": ["gw"]}, {}),
             ("b", {}, {"sglang_gateways": "gw"}),
             ("n0", {}, {"sglang_gateways": ["gw"], "sglang_tp_group": "g"})]
    memberships, units = fleet_memberships(hosts)
    assert memberships == {"gw": (), "a": ("gw",), "b": (), "n0": ("gw",)} and units == {"n0": "g"}
    with pytest.raises(PlanError, match=r"^host b: sglang_gateways: must be a list of inventory host names"):
        fleet_memberships(hosts, strict=True)


def test_the_rollout_splits_a_wave_of_prefill_and_decode_servers_as_the_deploy_does():
    from sglang_deploy.commands.rollout import RolloutOptions, gateway_limits
    from sglang_deploy.deploy.inventory import InventoryHost
    from sglang_deploy.waves import Wave

    hosts = [InventoryHost("gw", (), {}, {"sglang_gateway": {"port": 30100}}),
             *(InventoryHost(n, (), {"sglang_role": r}, {"sglang_gateways": ["gw"]})
               for n, r in (("p1", "prefill"), ("p2", "prefill"), ("d3", "decode"), ("d4", "decode")))]
    limits = gateway_limits(RolloutOptions(inventory="x", max_unavailable="2"), hosts, hosts, {})
    assert limits.roles == {"p1": "prefill", "p2": "prefill", "d3": "decode", "d4": "decode"}
    wave = Wave(number=1, hosts=("p1", "p2", "d3", "d4"), size=4, reason="size 4")
    assert limits.steps(wave, {}) == [("p1",), ("p2", "d3"), ("d4",)]
