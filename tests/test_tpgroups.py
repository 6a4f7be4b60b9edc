"""Multi-node tensor-parallel groups: ranks, the rendezvous address, and what must match."""

from __future__ import annotations

import copy

import pytest

from sglang_deploy.commands.cli import main
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.inventory_plan import check_plans, plan_inventory
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.plan.tpgroups import assign, nodes_from_data
from tests.conftest import ROOT, load_probe

H100 = {"model": "H100 SXM", "count": 8, "topology": "nvswitch"}
GROUP = {
    "sglang_model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
    "sglang_gpus": H100,
    "sglang_tp_group": "tp16",
    "sglang_intents": {"host": "0.0.0.0"},
}


def hosts(*members, group=None, **per_host):
    """(name, group_data, host_data) for each member, group data shared."""
    group = GROUP if group is None else group
    return [(name, copy.deepcopy(group), {"ssh_hostname": f"10.0.0.{i + 1}", **per_host.get(name, {})})
            for i, name in enumerate(members)]


def plans(*members, group=None, probes=None, **per_host):
    return plan_inventory(hosts(*members, group=group, **per_host), probes=probes)


def after(argv, option):
    return argv[argv.index(option) + 1]


def test_two_nodes_get_consistent_ranks_and_rendezvous_address():
    a, b = plans("node-a", "node-b")
    assert isinstance(a, Plan) and isinstance(b, Plan)
    for rank, plan in enumerate((a, b)):
        assert after(plan.argv, "--nnodes") == "2"
        assert after(plan.argv, "--node-rank") == str(rank)
        assert after(plan.argv, "--dist-init-addr") == "10.0.0.1:50000"  # rank 0's ssh_hostname, default port
        assert after(plan.argv, "--tp-size") == "16"  # the whole instance: 8 GPUs x 2 nodes
        assert plan.intents["tp_size"].reason.endswith("(8 GPUs x 2 nodes)")
        assert plan.tp_node.members == ("node-a", "node-b") and plan.tp_node.rank == rank
    # golden: the whole argv of each rank; only --node-rank differs
    argv = ["--model-path", "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "--host", "0.0.0.0", "--port", "30000",
            "--tp-size", "16",
            # the Qwen3 family's tool-call parser (the recipe in data/model_rules.yaml); no reasoning
            # parser for a 2507 Instruct model, which does not think
            "--tool-call-parser", "qwen",
            "--nnodes", "2", "--node-rank", "RANK", "--dist-init-addr", "10.0.0.1:50000",
            # FP8 experts over TP 16: 1536 / (16 / 4) = 384 columns per rank, 3 blocks of 128
            "--ep-size", "4", "--enable-nccl-nvls"]
    assert a.argv == [w.replace("RANK", "0") for w in argv]
    assert b.argv == [w.replace("RANK", "1") for w in argv]
    assert {k: r.value for k, r in a.intents.items() if k != "node_rank"} == \
        {k: r.value for k, r in b.intents.items() if k != "node_rank"}
    # the per-node TP (8) is what the interconnect rules see: NVLS on with NVSwitch
    assert a.intents["nvls"].value is True
    assert a.intents["node_rank"].layer == "group" and "inventory order" in a.intents["node_rank"].reason
    assert a.as_dict()["tp_group"] == {
        "name": "tp16", "nnodes": 2, "node_rank": 0, "dist_init_addr": "10.0.0.1:50000",
        "members": [{"host": "node-a", "node_rank": 0, "address": "10.0.0.1"},
                    {"host": "node-b", "node_rank": 1, "address": "10.0.0.2"}]}


def test_rank_follows_inventory_order_and_address_and_port_come_from_data():
    group = {"sglang_model": "Qwen/Qwen3.6-27B", "sglang_gpus": {"model": "RTX A6000", "count": 2},
             "sglang_tp_group": "a6000s", "sglang_dist_init_port": 29500}
    c, a, b = plans("node-c", "node-a", "node-b", group=group,
                    **{"node-c": {"sglang_node_address": "192.168.7.3"}})
    assert [after(p.argv, "--node-rank") for p in (c, a, b)] == ["0", "1", "2"]
    assert {after(p.argv, "--dist-init-addr") for p in (c, a, b)} == {"192.168.7.3:29500"}
    assert after(c.argv, "--tp-size") == "6"  # the model profile's tp_size: all = 2 GPUs x 3 nodes


def test_ipv6_rendezvous_address_is_bracketed():
    a, _ = plans("node-a", "node-b", **{"node-a": {"sglang_node_address": "fd00::1"}})
    assert after(a.argv, "--dist-init-addr") == "[fd00::1]:50000"


def test_network_interfaces_land_where_each_library_reads_them():
    group = {**GROUP, "sglang_nccl_socket_ifname": "bond0", "sglang_gloo_socket_ifname": "^docker,lo"}
    a, _ = plans("node-a", "node-b", group=group)
    files = render(a)
    assert a.nccl_conf["NCCL_SOCKET_IFNAME"] == "bond0" and "NCCL_SOCKET_IFNAME=bond0" in files.nccl_conf
    # Gloo reads only its process environment
    assert a.env["GLOO_SOCKET_IFNAME"] == "^docker,lo" and "GLOO_SOCKET_IFNAME" not in files.nccl_conf
    assert "GLOO_SOCKET_IFNAME='^docker,lo'" in files.env or "GLOO_SOCKET_IFNAME=^docker,lo" in files.env


@pytest.mark.parametrize("version", ["0.5.9", "0.5.15", "0.5.19", "0.5.23"])
def test_flags_are_accepted_by_every_catalog(version):
    # plan_host checks every argv against the version's catalog; a refusal raises
    a, b = plans("node-a", "node-b", group={**GROUP, "sglang_version": version})
    assert isinstance(a, Plan) and isinstance(b, Plan), (a, b)


def test_declared_nnodes_must_match_the_member_count():
    a, b, c = plans("node-a", "node-b", "node-c", group={**GROUP, "sglang_nnodes": 2})
    assert isinstance(a, PlanError) and a.field == "sglang_nnodes"
    assert "declares 2 nodes but has 3 member(s)" in str(a) and "node-a, node-b, node-c" in str(a)
    # every member fails, naming the group
    assert all(isinstance(p, PlanError) for p in (b, c))
    assert "tp group tp16 cannot be deployed" in str(b) and "declares 2 nodes" in str(b)


def test_a_group_of_one_is_an_error():
    [a] = plans("node-a")
    assert isinstance(a, PlanError) and a.field == "sglang_tp_group" and "only this host" in str(a)


def test_different_gpu_counts_fail_naming_the_host_and_field():
    a, b = plans("node-a", "node-b", **{"node-b": {"sglang_gpus": {**H100, "count": 4}}})
    assert isinstance(b, PlanError) and b.host == "node-b" and b.field == "sglang_gpus"
    assert "4 GPU(s) here but 8 at rank 0 (node-a)" in str(b)
    assert isinstance(a, PlanError) and a.host == "node-a" and "node-b" in str(a)


def test_different_architecture_fails():
    _, b = plans("node-a", "node-b", **{"node-b": {"sglang_gpus": {"model": "A100 SXM 80GB", "count": 8,
                                                                   "topology": "nvswitch"}}})
    assert isinstance(b, PlanError) and b.field == "sglang_gpus"
    assert "sm80" in str(b) and "sm90" in str(b) and "same GPU model and architecture" in str(b)


def test_probed_hardware_is_compared_during_a_deploy():
    """With probes (the deploy), the probed GPUs are what must match."""
    probes = {"node-a": load_probe("h100x8-nvswitch"), "node-b": load_probe("a6000x2-bridge")}
    group = {k: v for k, v in GROUP.items() if k != "sglang_gpus"}
    _, b = plans("node-a", "node-b", group=group, probes=probes)
    assert isinstance(b, PlanError) and b.field == "GPU probe"


def test_members_must_resolve_intents_alike():
    _, b = plans("node-a", "node-b", **{"node-b": {"sglang_intents": {"mem_fraction_static": 0.8}}})
    assert isinstance(b, PlanError) and b.field == "intent mem_fraction_static"
    assert "0.8 here (host layer" in str(b)


def test_members_must_agree_on_version_model_and_port():
    for key, value in (("sglang_version", "0.5.19"), ("sglang_model", "Qwen/Qwen3-32B"),
                       ("sglang_dist_init_port", 50001)):
        _, b = plans("node-a", "node-b", **{"node-b": {key: value}})
        assert isinstance(b, PlanError) and b.field == key and "at rank 0 (node-a)" in str(b), (key, b)


def test_extra_args_must_match_but_bind_address_may_differ():
    _, b = plans("node-a", "node-b", **{"node-b": {"sglang_extra_args": ["--max-prefill-tokens", "8192"]}})
    assert isinstance(b, PlanError) and b.field == "argv" and "extra here: --max-prefill-tokens 8192" in str(b)
    a, b = plans("node-a", "node-b", **{"node-b": {"sglang_intents": {"host": "10.0.0.2"}}})
    assert isinstance(b, Plan) and after(b.argv, "--host") == "10.0.0.2"


def test_rendezvous_port_must_not_be_the_http_port():
    a, _ = plans("node-a", "node-b", group={**GROUP, "sglang_dist_init_port": 30000})
    assert isinstance(a, PlanError) and a.field == "sglang_dist_init_port" and "HTTP port" in str(a)


def test_tp_size_must_split_evenly_over_the_nodes():
    group = {**GROUP, "sglang_intents": {"tp_size": 12}}
    a, _ = plans("node-a", "node-b", group=group)  # 6 per node does not divide 8 GPUs
    assert isinstance(a, PlanError) and "6 per node" in str(a)
    a, _, _ = plans("node-a", "node-b", "node-c", group={**GROUP, "sglang_intents": {"tp_size": 16}})
    assert isinstance(a, PlanError) and "not a multiple of the 3 nodes" in str(a)
    a, b = plans("node-a", "node-b", group={**GROUP, "sglang_intents": {"tp_size": 8}})  # 4 GPUs per node
    assert isinstance(a, Plan) and after(a.argv, "--tp-size") == "8"


def test_a_member_with_bad_data_takes_the_group_down():
    a, b = plans("node-a", "node-b", **{"node-b": {"sglang_intents": {"not_an_intent": 1}}})
    assert isinstance(b, PlanError) and b.host == "node-b" and "not_an_intent" in str(b)
    assert isinstance(a, PlanError) and a.field == "sglang_tp_group" and "node-b" in str(a)


def test_ranks_and_addresses_cannot_be_set_by_hand():
    for data in ({"sglang_intents": {"node_rank": 1}}, {"sglang_extra_args": ["--node-rank", "1"]},
                 {"sglang_extra_args": ["--dist-init-addr=10.0.0.1:5000"]}):
        single = {"sglang_model": "Qwen/Qwen3-32B", "sglang_gpus": H100, **data}
        with pytest.raises(PlanError, match="sglang_tp_group"):
            plan_host(build_spec("h", {}, single))
    with pytest.raises(PlanError, match="sglang_nnodes.*only means something for a member of a tp group"):
        build_spec("h", {}, {"sglang_model": "m", "sglang_nnodes": 2})


def test_bad_group_values_are_clear_errors():
    cases = [({"sglang_tp_group": "a b"}, "sglang_tp_group"), ({"sglang_nnodes": 1}, "sglang_nnodes"),
             ({"sglang_dist_init_port": 70000}, "sglang_dist_init_port"),
             ({"sglang_node_address": "10.0.0.1; rm"}, "sglang_node_address"),
             ({"sglang_nccl_socket_ifname": "eth0 eth1"}, "sglang_nccl_socket_ifname")]
    for extra, field in cases:
        with pytest.raises(PlanError) as exc:
            build_spec("h", {}, {**GROUP, **extra})
        assert exc.value.field == field, (extra, exc.value)


def test_a_member_planned_alone_is_refused():
    with pytest.raises(PlanError, match="plan it with the other members"):
        plan_host(build_spec("node-a", GROUP, {}))


def test_nodes_from_data_and_check_plans_directly():
    specs, nodes, errors = nodes_from_data(hosts("node-a", "node-b"))
    assert not errors and nodes["node-b"].rank == 1 and nodes["node-b"].dist_init_addr == "10.0.0.1:50000"
    assert nodes["node-a"].is_leader and not nodes["node-b"].is_leader
    a = plan_host(specs["node-a"], node=nodes["node-a"])
    b = plan_host(specs["node-b"], node=nodes["node-b"], probe=load_probe("h100x8-nvswitch"))
    check_plans([a, b])  # the probe of an 8x H100 SXM matches the declared hardware
    assert assign([specs["node-b"], specs["node-a"]])["node-b"].rank == 0


def test_plan_cli_shows_members_with_rank_and_address(capsys):
    rc = main(["plan", str(ROOT / "inventory/fleet.py"), "--host", "h100-tp16-b"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "TP group  qwen3-235b-tp16: node rank 1 of 2, rendezvous at rank 0 10.10.1.21:50000" in out
    assert "rank 0  h100-tp16-a (10.10.1.21)" in out and "rank 1  h100-tp16-b (10.10.1.22)  <- this host" in out
    assert "--nnodes 2 --node-rank 1 --dist-init-addr 10.10.1.21:50000" in out


def test_plan_cli_reports_a_bad_group_before_anything(tmp_path, capsys):
    inventory = tmp_path / "inventory.py"
    inventory.write_text(
        "tp = ([('n1', {'sglang_gpus': {'model': 'H100 SXM', 'count': 8}}),\n"
        "       ('n2', {'sglang_gpus': {'model': 'H100 SXM', 'count': 4}})],\n"
        "      {'sglang_model': 'Qwen/Qwen3-32B', 'sglang_tp_group': 'g'})\n")
    rc = main(["plan", str(inventory), "--json"])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out.strip() == "[]"
    assert "host n2: sglang_gpus: 4 GPU(s) here but 8 at rank 0 (n1)" in captured.err
    assert "host n1: sglang_tp_group: tp group g cannot be deployed" in captured.err
