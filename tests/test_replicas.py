"""A host's data-parallel replicas behind a gateway, each a server of its own (plan.replicas):
planned by the planner itself from the host's spec, one block of GPUs, one port and one unit each;
attention DP and a plan of one replica stay one server. The gateway's restart gives back only
replicas on its named workers' addresses (plan.gateway.workers_to_keep), and a host's record is
the worst of its replicas', or failed when one wrote none (rollback_policy.host_records). Replica
units that must stop first (lifecycle.retire.stale_units): those no longer planned, and those whose
GPUs or port an earlier replica takes."""

from __future__ import annotations

import pytest

from sglang_deploy.errors import PlanError
from sglang_deploy.lifecycle import rollback_policy
from sglang_deploy import status
from sglang_deploy.commands import status_table
from sglang_deploy.plan.gateway import MAX_REPLICAS_PER_HOST, MAX_WORKERS_PER_GATEWAY
from sglang_deploy.plan.gateway_fleet import workers_to_keep
from sglang_deploy.plan.inventory_plan import plan_inventory
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.deploy.facts import ReplicaUnits
from sglang_deploy.lifecycle.retire import MAX_UNITS_READ, stale_units
from sglang_deploy.plan.replicas import check_worker_url, replica_count, replica_specs, service_name
from sglang_deploy.plan.spec import build_spec
from tests.recorded_facts import DEEPSEEK_V3, QWEN3_32B, _ALL

QWEN3_06B = _ALL["Qwen/Qwen3-0.6B"]


def spec_and_plan(facts, gpus, **data):
    spec = build_spec("gpu-1", {}, {"sglang_model": facts.model, "sglang_gpus": gpus, **data})
    return spec, plan_host(spec, sglang_version="0.5.23", facts=facts)


def replica_plans(facts, gpus, **data):
    spec, plan = spec_and_plan(facts, gpus, **data)
    return plan, [plan_host(s, sglang_version="0.5.23", facts=facts) for s in replica_specs(spec, plan)]


@pytest.mark.parametrize("facts, gpus, tp, count", [
    (QWEN3_32B, {"model": "H100 SXM", "count": 8}, 4, 2),   # the planner's TP 4 x 2 replicas (ranked by speed)
    (QWEN3_06B, {"model": "H100 SXM", "count": 8}, 1, 8),   # TP 1 x 8 replicas
])
def test_each_replica_is_one_server_of_the_plans_tp_on_its_own_gpus_and_port(facts, gpus, tp, count):
    whole, plans = replica_plans(facts, gpus, sglang_intents={"port": 31000})
    assert (whole.intents["tp_size"].value, whole.intents["dp_size"].value) == (tp, count)
    assert "--dp-size" in whole.argv and len(plans) == count
    blocks = []
    for i, p in enumerate(plans):
        assert p.intents["tp_size"].value == tp and p.intents["dp_size"].value == 1 and "--dp-size" not in p.argv
        assert p.argv[p.argv.index("--port") + 1] == str(31000 + i)
        assert p.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, p.gpus.indices))
        assert p.service.name == ("sglang" if i == 0 else f"sglang-dp{i}")
        assert p.service.unit_path == f"/etc/systemd/system/{p.service.name}.service"
        assert f"replica {i} of {count}" in p.intents["dp_size"].reason
        blocks.append(p.gpus.indices)
    # disjoint blocks of tp GPUs, in order, covering the GPUs the whole plan uses (SGLang's own
    # placement of a --dp-size server's replicas)
    assert [i for b in blocks for i in b] == list(whole.gpus.indices)
    assert all(len(b) == tp for b in blocks)
    # the rest of the launch line is the whole plan's
    rest = {"--port", "--dp-size"}

    def flags(argv):
        return sorted(a for a in argv if a.startswith("--") and a not in rest)
    assert all(flags(p.argv) == flags(whole.argv) for p in plans)


def test_attention_dp_and_a_single_replica_stay_one_server():
    spec, plan = spec_and_plan(DEEPSEEK_V3, {"model": "H200", "count": 8})
    assert plan.intents["attn_dp_size"].value == 8  # its ranks share one TP group: one server
    assert replica_count(plan) == 1 and replica_specs(spec, plan) == (spec,)
    spec, plan = spec_and_plan(QWEN3_32B, {"model": "H100 SXM", "count": 8}, sglang_intents={"tp_size": 8})
    assert plan.intents["dp_size"].value == 1 and replica_specs(spec, plan) == (spec,)


def test_a_declared_service_name_is_kept_for_the_first_replica():
    spec, plan = spec_and_plan(QWEN3_06B, {"model": "H100 SXM", "count": 2}, sglang_service_name="llm")
    assert [s.service.name for s in replica_specs(spec, plan)] == ["llm", "llm-dp1"]
    assert service_name("llm", 0) == "llm" and service_name("llm", 3) == "llm-dp3"


def test_ports_past_65535_are_refused_naming_the_field():
    spec, plan = spec_and_plan(QWEN3_06B, {"model": "H100 SXM", "count": 8}, sglang_intents={"port": 65530})
    with pytest.raises(PlanError) as err:
        replica_specs(spec, plan)
    assert "sglang_intents.port" in str(err.value) and "65530..65537" in str(err.value)


def test_one_worker_url_for_several_replicas_is_refused():
    check_worker_url("gpu-1", {}, 2)
    with pytest.raises(PlanError) as err:
        check_worker_url("gpu-1", {"sglang_worker_url": "http://10.0.0.5:30000"}, 2)
    assert "host gpu-1: sglang_worker_url:" in str(err.value) and "sglang_node_address" in str(err.value)


def test_a_restarted_gateway_gets_back_only_replicas_on_its_named_workers_addresses():
    named = ("http://10.0.0.5:30000", "http://10.0.0.6:30000")
    listed = ["http://10.0.0.5:30000", "http://10.0.0.5:30001", "http://10.0.0.6:30003",
              "http://10.0.0.5:30001",            # listed twice: once
              "https://10.0.0.5:30002",           # another scheme than the named worker's
              "http://10.0.0.7:30001",            # an address no named worker has
              "http://10.0.0.5:29999",            # below the named port: no replica's
              "http://10.0.0.5:30065",            # past MAX_REPLICAS_PER_HOST above it
              "http://10.0.0.5", "http://169.254.169.254:80", "file:///etc/passwd", "http://10.0.0.5:30001/x",
              "x" * 5000, 7]
    assert workers_to_keep(listed, named) == ("http://10.0.0.5:30001", "http://10.0.0.6:30003")
    assert workers_to_keep(["http://10.0.0.5:30064"], named) == ("http://10.0.0.5:30064",)
    assert MAX_REPLICAS_PER_HOST == 64
    assert workers_to_keep([], named) == () and workers_to_keep(listed, ()) == ()
    many = [f"http://10.0.0.{i}:{p}" for i in range(1, 100) for p in range(30001, 30065)]
    assert len(workers_to_keep(many, [f"http://10.0.0.{i}:30000" for i in range(1, 100)])) == MAX_WORKERS_PER_GATEWAY


def record(result):
    return {"host": "gpu-1", "result": result}


def test_a_hosts_record_is_the_worst_of_its_replicas():
    P = rollback_policy

    def one(*results, replicas=None, replica_of=None):
        out = []
        for i, result in enumerate(results):
            rec = {"host": "gpu-1", "result": result}
            if replicas:
                rec.update(replica=i if replica_of is None else replica_of[i], replicas=replicas)
            out.append(rec)
        return P.host_records(out)["gpu-1"]["result"]
    assert set(P._SEVERITY) == set(P.HOST_RESULTS)  # every result ranked
    assert one(P.PASSED) == P.PASSED and one(P.UNCHANGED, P.PASSED, replicas=2) == P.PASSED
    assert one(P.PASSED, P.UNCHANGED, replicas=2) == P.PASSED
    assert one(P.PASSED, P.ROLLED_BACK, replicas=2) == P.ROLLED_BACK
    assert one(P.FAILED, P.PASSED, replicas=2) == P.FAILED
    # replica 1 wrote nothing (its deploy stopped at its swap): the host failed, not passed
    assert one(P.PASSED, replicas=2) == P.FAILED
    assert "replica(s) 1 of 2 wrote no result" in P.host_records(
        [{"host": "h", "result": P.PASSED, "replica": 0, "replicas": 2}])["h"]["summary"]
    # replica 0 rolled back and so replica 1 was never run: rolled back says more than failed
    assert one(P.ROLLED_BACK, replicas=2) == P.ROLLED_BACK
    # a host of one server writes no replica fields: its one record stands
    assert one(P.UNCHANGED) == P.UNCHANGED
    for a in P.HOST_RESULTS:
        for b in P.HOST_RESULTS:
            assert one(a, b, replicas=2) == one(b, a, replicas=2)


def test_the_inventorys_plan_of_a_gateway_worker_is_its_replicas():
    """`plan`: a gateway's worker of 2 replicas is planned as the deploy runs it (replica 0's plan,
    holding both); the same host without a gateway keeps one server with --dp-size 2; hosts of one
    class get their own names."""
    gpus = {"model": "H100 SXM", "count": 2}
    base = {"sglang_model": QWEN3_06B.model, "sglang_gpus": gpus, "sglang_intents": {"port": 31000}}
    behind = {**base, "sglang_gateways": ["gw"]}
    hosts = [("a", {}, behind), ("b", {}, behind), ("c", {}, base)]
    a, b, c = plan_inventory(hosts, sglang_version="0.5.23", facts={h: QWEN3_06B for h, _, _ in hosts})
    for p, name in ((a, "a"), (b, "b")):
        assert [(r.host, r.service.name, r.intents["port"].value, r.gpus.indices) for r in p.replicas] == [
            (name, "sglang", 31000, (0,)), (name, "sglang-dp1", 31001, (1,))]
        assert p.host == name and "--dp-size" not in p.argv and p.as_dict()["replicas"][1]["port"] == 31001
    assert c.replicas == () and c.argv[c.argv.index("--dp-size") + 1] == "2"


def test_status_expects_every_replica_in_its_gateways():
    hosts = [("gw", {"sglang_gateway": {"port": 30100}}),
             ("w", {"sglang_gateways": ["gw"], "sglang_node_address": "10.0.0.5", "sglang_intents": {"port": 31000}})]
    fleet = status.fleet_gateways(hosts)
    assert fleet.expected["gw"] == (("w", "http://10.0.0.5:31000"),)
    more = status.with_replicas(fleet, {"w": [31000, 31001, 31002]}, dict(hosts))
    assert more.expected["gw"] == (("w", "http://10.0.0.5:31000"), ("w", "http://10.0.0.5:31001"),
                                   ("w", "http://10.0.0.5:31002"))
    assert [(m.host, m.url, m.gateways) for m in more.replicas["w"]] == [
        ("w", "http://10.0.0.5:31001", ("gw",)), ("w", "http://10.0.0.5:31002", ("gw",))]
    # one URL for every replica: the deploy refuses the host; status adds none
    url = status.fleet_gateways([hosts[0], ("w", {**hosts[1][1], "sglang_worker_url": "http://10.0.0.5:31000"})])
    assert status.with_replicas(url, {"w": [31000, 31001]}, {"w": {"sglang_worker_url": "x"}}).expected == \
        url.expected


def test_a_replicas_status_row_is_named_by_its_unit():
    row = status.unreachable_row("w", "connection refused")
    assert row.label == "w" and row.as_dict()["service"] is None
    row.service = "sglang-dp1"
    assert row.label == "w:sglang-dp1" and row.as_dict()["service"] == "sglang-dp1"
    table = status_table.render_table([row])
    assert table.splitlines()[1].startswith("w:sglang-dp1 ") and "w:sglang-dp1: " in table


def stale(found, planned):
    return [(r.unit, r.index, r.port, r.remove) for r in stale_units("sglang", found, planned)]


def test_replica_units_the_plan_no_longer_runs_are_removed():
    found = [("sglang-dp2.service", 30002, (2,)), ("sglang-dp1.service", 30001, (1,)),
             ("other-dp1.service", 1, None), ("sglang-dp3.service", None, None), ("sglang-dp0.service", 3, None),
             ("sglang-dp1x.service", 1, None), ("sglang-dp4.service", 70000, None), ("sglang-dp5.service", True, None),
             ("../sglang-dp6.service", 1, None), (7, 1, None)]
    two = [((0,), 30000), ((1,), 30001)]
    assert stale(found, two) == [("sglang-dp2", 2, 30002, True), ("sglang-dp3", 3, None, True),
                                 ("sglang-dp4", 4, None, True), ("sglang-dp5", 5, None, True)]
    assert stale(found, [((0, 1), 30000)])[0] == ("sglang-dp1", 1, 30001, True)  # one server runs none
    assert stale(found, [((i,), 30000 + i) for i in range(8)]) == []
    many = [(f"sglang-dp{i}.service", 1, None) for i in range(1, 1000)]
    assert len(stale(many, [((0,), 30000)])) == MAX_UNITS_READ


def test_replicas_whose_gpus_or_port_an_earlier_replica_takes_stop_first():
    """TP 2 x 4 on 8 GPUs becomes TP 4 x 2: replica 0 restarts first on GPUs 0-3, which the old
    replica 1 (GPUs 2-3) still holds: it stops first; old replicas 2 and 3 are no longer run."""
    found = [(f"sglang-dp{i}.service", 30000 + i, (2 * i, 2 * i + 1)) for i in (1, 2, 3)]
    tp4 = [((0, 1, 2, 3), 30000), ((4, 5, 6, 7), 30001)]
    assert stale(found, tp4) == [("sglang-dp1", 1, 30001, False), ("sglang-dp2", 2, 30002, True),
                                 ("sglang-dp3", 3, 30003, True)]
    # the same layout again: nothing stops first
    tp2 = [((2 * i, 2 * i + 1), 30000 + i) for i in range(4)]
    assert stale(found, tp2) == []
    # the base port moved up by one: replica 0's new port is replica 1's old one
    moved = [((2 * i, 2 * i + 1), 30001 + i) for i in range(4)]
    assert [r[:2] for r in stale(found, moved)] == [("sglang-dp1", 1), ("sglang-dp2", 2), ("sglang-dp3", 3)]
    # GPUs that do not read are checked by port alone
    assert stale([("sglang-dp1.service", 30001, "0,1")], tp4) == []
    assert stale([("sglang-dp1.service", 30000, None)], tp4) == [("sglang-dp1", 1, 30000, False)]


def test_the_hosts_list_of_replica_units_is_parsed_not_trusted():
    fact = ReplicaUnits()
    assert fact.process(["sglang-dp1.service 30001 2,3", "sglang-dp2.service", "x.service 9999999 1,x",
                         "y 3a 12345"]) == [("sglang-dp1.service", 30001, (2, 3)), ("sglang-dp2.service", None, None),
                                            ("x.service", None, None), ("y", None, None)]
    command = fact.command("sglang", "/etc/sglang")
    assert "/etc/systemd/system/sglang-dp" in command and f"head -n {MAX_UNITS_READ}" in command
