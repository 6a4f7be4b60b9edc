"""A gateway of prefill and decode servers, without processes (sglang_deploy/plan/pd_gateway.py and
what carries it: the inventory's gateways, the router's argv, a worker's registration, the replicas a
restarted router is given back). The same argv and registrations against the real sglang-router
0.3.2: tests/test_pd_gateway_real.py."""

from __future__ import annotations

import json

import httpx
import pytest

from sglang_deploy.deploy.gateway_client import Gateway
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.gateway import GatewaySettings, gateway_settings
from sglang_deploy.plan.gateway_fleet import fleet_roles, inventory_gateways, kept_role
from sglang_deploy.plan.gateway_render import describe_gateway, router_argv
from sglang_deploy.plan.pd_gateway import RoleOf, registration, router_role_args

GW = ("gw", {"ssh_hostname": "10.0.0.1", "sglang_gateway": {"port": 30100}})


def worker(name: str, address: str, role: str | None, **intents: int) -> tuple[str, dict]:
    data: dict = {"ssh_hostname": address, "sglang_gateways": ["gw"]}
    if role is not None:
        data["sglang_role"] = role
    if intents:
        data["sglang_intents"] = intents
    return (name, data)


def test_the_inventorys_gateway_knows_each_workers_role_and_a_prefill_servers_bootstrap_port():
    found = inventory_gateways([GW, worker("p1", "10.0.0.11", "prefill"),
                                worker("p2", "10.0.0.12", "prefill", port=31000, disaggregation_bootstrap_port=9100),
                                worker("d1", "10.0.0.21", "decode", disaggregation_bootstrap_port=9200)])
    assert found.workers["gw"] == ("http://10.0.0.11:30000", "http://10.0.0.12:31000", "http://10.0.0.21:30000")
    # SGLang's default bootstrap port (8998) unless the inventory says; a decode server has none
    assert found.roles["gw"] == {"http://10.0.0.11:30000": RoleOf("prefill", 8998),
                                 "http://10.0.0.12:31000": RoleOf("prefill", 9100),
                                 "http://10.0.0.21:30000": RoleOf("decode", None)}
    assert inventory_gateways([GW, worker("w1", "10.0.0.11", None)]).roles == {}


def test_the_router_runs_in_prefill_decode_mode_with_each_role_and_policy():
    roles = {"http://p1:30000": RoleOf("prefill", 8998), "http://d1:30000": RoleOf("decode", None),
             "http://p2:30000": RoleOf("prefill", 9000)}
    settings = GatewaySettings(prefill_policy="bucket", decode_policy="power_of_two")
    argv = router_argv(settings, list(roles), roles=roles)
    assert "--worker-urls" not in argv
    tail = argv[argv.index("--pd-disaggregation"):]
    assert tail == ["--pd-disaggregation", "--prefill-policy", "bucket", "--decode-policy", "power_of_two",
                    "--prefill", "http://p1:30000", "8998", "--prefill", "http://p2:30000", "9000",
                    "--decode", "http://d1:30000"]
    # a role without a policy of its own takes the router's --policy: not written
    assert "--prefill-policy" not in router_argv(GatewaySettings(), list(roles), roles=roles)
    text = describe_gateway("gw", GatewaySettings(), list(roles), roles)
    assert "prefill/decode mode" in text and "worker http://p2:30000 (prefill, bootstrap port 9000)" in text


@pytest.mark.parametrize("roles, words", [
    ({"http://p1:1": RoleOf("prefill", 8998)}, "no decode server"),
    ({"http://d1:1": RoleOf("decode", None)}, "no prefill server"),
])
def test_a_gateway_that_would_pair_nothing_is_refused(roles, words):
    with pytest.raises(ValueError, match=words):
        router_role_args(list(roles), roles, {})


def test_a_worker_without_a_role_beside_role_workers_is_refused_naming_it():
    roles = {"http://p1:1": RoleOf("prefill", 8998), "http://d1:1": RoleOf("decode", None)}
    with pytest.raises(ValueError, match="worker http://w:1 has no sglang_role"):
        router_role_args([*roles, "http://w:1"], roles, {})


@pytest.mark.parametrize("key, value", [("prefill_policy", "fastest"), ("decode_policy", "bucket"),
                                        ("decode_policy", 3)])
def test_a_role_policy_is_one_of_the_routers_choices(key, value):
    with pytest.raises(PlanError) as exc:
        gateway_settings("gw", {"sglang_gateway": {key: value}})
    assert exc.value.field == f"sglang_gateway.{key}"
    assert gateway_settings("gw", {"sglang_gateway": {"prefill_policy": "bucket"}}).as_dict()["prefill_policy"] == \
        "bucket"


def test_a_registration_says_the_role_and_a_prefill_servers_bootstrap_port():
    assert registration(None) == {}
    assert registration(RoleOf("decode", None)) == {"worker_type": "decode"}
    assert registration(RoleOf("prefill", 9000)) == {"worker_type": "prefill", "bootstrap_port": 9000}
    seen: list[dict] = []

    def router(request: httpx.Request) -> httpx.Response:  # stand-in at the HTTP boundary: 0.3.2's answers
        if request.method == "GET":
            return httpx.Response(200, json={"workers": [], "total": 0})
        seen.append(json.loads(request.content))
        return httpx.Response(202, json={"status": "accepted"})

    Gateway("http://gw.test:30100", None, transport=httpx.MockTransport(router)).register(
        "http://10.0.0.11:30000/", "k-1", RoleOf("prefill", 9000))
    assert seen == [{"url": "http://10.0.0.11:30000", "worker_type": "prefill", "bootstrap_port": 9000,
                     "api_key": "k-1"}]


def test_a_replica_given_back_to_a_restarted_router_keeps_its_role_from_the_plan():
    roles = {"http://10.0.0.11:30000": RoleOf("prefill", 8998), "http://10.0.0.21:30000": RoleOf("decode", None)}
    assert kept_role("http://10.0.0.11:30002", roles) == RoleOf("prefill", 9000)  # replica 2: its own port
    assert kept_role("http://10.0.0.21:30001", roles) == RoleOf("decode", None)
    assert kept_role("http://10.0.0.99:30001", roles) is None  # no named worker on that host
    assert kept_role("http://10.0.0.11:29999", roles) is None  # below the first replica's port


def test_the_fleets_roles_come_from_each_hosts_data_layers():
    hosts = [("p1", {"sglang_role": "prefill"}, {}), ("d1", {}, {"sglang_role": "decode"}),
             ("w1", {}, {}), ("x", {}, {"sglang_role": "both"})]  # not a role: the host's own plan refuses it
    assert fleet_roles(hosts) == {"p1": "prefill", "d1": "decode"}
