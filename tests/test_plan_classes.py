"""Hosts of one class share one computation (inventory_plan: plans that differ only by the host's
name), and every host still gets its own plan, values, files and errors: the same as planning,
rendering and printing each host alone."""

from __future__ import annotations

import copy
import io
import json

import pytest

from sglang_deploy.errors import PlanError
from sglang_deploy.plan import inventory_plan
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.inventory_plan import CLASS_HOST, offline_weights, plan_inventory
from sglang_deploy.plan.output import plan_json, print_plan, print_plans, render_plans, write_plans_json
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.plan.tpgroups import nodes_from_data
from tests.recorded_facts import QWEN3_32B, QWEN3_235B_FP8

H100 = {"model": "H100 SXM", "count": 8, "topology": "nvswitch"}
A6000 = {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"}
QWEN = {"sglang_model": "Qwen/Qwen3-32B", "sglang_gpus": H100, "sglang_intents": {"host": "0.0.0.0"}}
A6 = {"sglang_model": "Qwen/Qwen3.6-27B", "sglang_gpus": A6000}
BIG = {"sglang_model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "sglang_gpus": H100, "sglang_tp_group": "tp16"}


def inventory():
    """Classes of several members (only ssh_hostname or an inline secret's value differs),
    members whose own values make them classes of their own (a port, a config directory), a bad
    member, a version of its own, and a tp group (planned alone: its node names its members)."""
    hosts = [(f"q-{i}", copy.deepcopy(QWEN), {"ssh_hostname": f"10.0.0.{i}"}) for i in range(1, 5)]
    hosts += [
        ("q-port", copy.deepcopy(QWEN), {"sglang_intents": {"port": 31000}}),
        ("q-bad", copy.deepcopy(QWEN), {"sglang_intents": {"port": "x"}}),
        ("q-dir", copy.deepcopy(QWEN), {"sglang_config_dir": "/etc/sglang-b"}),
        ("a-1", {}, {**A6, "sglang_env": {"MY_API_TOKEN": "one"}}),
        ("a-2", {}, {**A6, "sglang_env": {"MY_API_TOKEN": "two"}}),
        ("a-3", {}, {**A6, "sglang_version": "0.5.9"}),
        ("a-4", {}, {**A6, "sglang_version": "0.5.9"}),
        ("tp-a", copy.deepcopy(BIG), {"ssh_hostname": "10.1.0.1"}),
        ("tp-b", copy.deepcopy(BIG), {"ssh_hostname": "10.1.0.2"}),
    ]
    facts = {name: QWEN3_32B for name, _, data in hosts if {**_, **data}["sglang_model"] == QWEN["sglang_model"]}
    facts.update({"tp-a": QWEN3_235B_FP8, "tp-b": QWEN3_235B_FP8})
    return hosts, facts


def alone(hosts, facts):
    """Each host planned by itself (a tp group's members with their nodes), as before classes."""
    specs, nodes, _ = nodes_from_data(hosts)
    out = []
    for name, _, _ in hosts:
        spec = specs[name]
        try:
            if isinstance(spec, PlanError):
                raise spec
            out.append(plan_host(spec, node=nodes.get(name), facts=facts.get(name),
                                 weights=offline_weights(spec, facts.get(name))))
        except PlanError as exc:
            out.append(exc)
    return out


@pytest.fixture
def counted(monkeypatch):
    """plan_host as inventory_plan calls it, counting the specs it plans by host name."""
    calls: list[str] = []
    real = inventory_plan.plan_host

    def counting(spec, **kw):
        calls.append(spec.host)
        return real(spec, **kw)

    monkeypatch.setattr(inventory_plan, "plan_host", counting)
    return calls


def test_one_class_is_planned_once_and_each_host_gets_what_planning_it_alone_gives(counted):
    hosts, facts = inventory()
    plans = plan_inventory(hosts, facts=facts)
    # q-1..q-4 one class; a-1/a-2 one (an inline secret's value is no part of a plan: each keeps
    # its own, below); a-3/a-4 one; q-port and q-dir each their own; q-bad's data is refused
    # before planning; tp-a and tp-b planned alone
    assert counted.count(CLASS_HOST) == 5
    assert sorted(h for h in counted if h != CLASS_HOST) == ["tp-a", "tp-b"]
    for (name, _, _), mine, theirs in zip(hosts, plans, alone(hosts, facts)):
        if isinstance(theirs, PlanError):
            assert isinstance(mine, PlanError) and str(mine) == str(theirs)
            continue
        assert isinstance(mine, Plan) and mine.host == name
        assert mine.as_dict() == theirs.as_dict()
        assert render(mine) == render(theirs)
        assert CLASS_HOST not in repr(mine.as_dict())
    assert plans[0].shared is plans[1].shared is not None  # q-1 and q-2: one class plan
    assert plans[-1].shared is None  # a tp member is its own


def test_host_specific_values_stay_with_their_host_and_a_bad_one_names_its_host():
    hosts, facts = inventory()
    by = {name: p for (name, _, _), p in zip(hosts, plan_inventory(hosts, facts=facts))}
    assert by["q-port"].intents["port"].value == 31000 and "31000" in by["q-port"].argv
    assert all(by[f"q-{i}"].intents["port"].value == 30000 for i in range(1, 5))
    assert by["q-dir"].service.config_dir == "/etc/sglang-b"
    assert by["q-1"].service.config_dir != "/etc/sglang-b"
    # inline secrets: each host keeps its own value (the deploy writes it into that host's env file)
    assert [s.value for s in by["a-1"].secrets] == ["one"] and [s.value for s in by["a-2"].secrets] == ["two"]
    bad = by["q-bad"]
    assert isinstance(bad, PlanError) and bad.host == "q-bad" and bad.field == "sglang_intents.port"
    assert str(bad).startswith("host q-bad: sglang_intents.port:")
    assert all(isinstance(by[n], Plan) for n in by if n != "q-bad")


def test_a_class_error_is_each_members_own(counted):
    hosts = [(f"h-{i}", {**QWEN, "sglang_intents": {"tp_size": 3}}, {}) for i in range(3)]
    errors = plan_inventory(hosts, facts={n: QWEN3_32B for n, _, _ in hosts})
    assert counted == [CLASS_HOST]
    assert [(e.host, e.field) for e in errors] == [(f"h-{i}", "sglang_intents.tp_size") for i in range(3)]
    assert all(str(e).startswith(f"host h-{i}: ") and CLASS_HOST not in str(e) for i, e in enumerate(errors))


def test_other_facts_make_another_class(counted):
    hosts = [("x", copy.deepcopy(QWEN), {}), ("y", copy.deepcopy(QWEN), {})]
    other = copy.deepcopy(QWEN3_32B)  # equal, but another lookup: not assumed the same
    x, y = plan_inventory(hosts, facts={"x": QWEN3_32B, "y": other})
    assert counted == [CLASS_HOST, CLASS_HOST] and x.facts is QWEN3_32B and y.facts is other


def test_nothing_one_members_plan_changes_reaches_another():
    hosts = [(f"h-{i}", copy.deepcopy(QWEN), {}) for i in range(2)]
    a, b = plan_inventory(hosts, facts={n: QWEN3_32B for n, _, _ in hosts})
    before = b.as_dict()
    a.warnings.append("mine")
    a.env["X"] = "1"
    a.argv.append("--mine")
    a.intents.pop("port")
    a.nccl_conf["NCCL_DEBUG"] = "INFO"
    a.tuning_notes.append("mine")
    assert b.as_dict() == before and a.shared is b.shared and a.shared.as_dict()["argv"] == before["argv"]


def test_a_class_plan_that_holds_the_name_elsewhere_is_planned_per_host(monkeypatch, counted):
    # Were the planner ever to write the host's name into its plan (a warning here), sharing would
    # give every member the first one's: the class is then planned member by member instead.
    real = inventory_plan.plan_host

    def naming(spec, **kw):
        plan = real(spec, **kw)
        plan.warnings.append(f"planned for {spec.host}")
        return plan

    monkeypatch.setattr(inventory_plan, "plan_host", naming)
    hosts = [(f"h-{i}", copy.deepcopy(QWEN), {}) for i in range(3)]
    plans = plan_inventory(hosts, facts={n: QWEN3_32B for n, _, _ in hosts})
    assert [p.warnings[-1] for p in plans] == ["planned for h-0", "planned for h-1", "planned for h-2"]
    assert all(p.shared is None for p in plans)


def test_output_is_byte_for_byte_one_host_at_a_time():
    hosts, facts = inventory()
    plans = [p for p in plan_inventory(hosts, facts=facts) if isinstance(p, Plan)]
    singles = [p for p in alone(hosts, facts) if isinstance(p, Plan)]
    assert [p.host for p in plans] == [p.host for p in singles]
    done: dict = {}
    files = render_plans(plans, done)
    assert files == [render(p) for p in singles]
    results = list(zip(plans, files))
    assert len(done) == 5
    want = io.StringIO()
    json.dump([plan_json(p, render(p)) for p in singles], want, indent=2)
    for given in (done, None):  # without render_plans's files: rendered again
        got = io.StringIO()
        write_plans_json(results, got, given)
        assert got.getvalue() == want.getvalue()
    got = io.StringIO()
    write_plans_json([], got)
    assert got.getvalue() == json.dumps([], indent=2)
    for explain in (False, True):
        got, want = io.StringIO(), io.StringIO()
        print_plans(results, explain, got, done)
        for p in singles:
            print_plan(p, render(p), explain, want)
        assert got.getvalue() == want.getvalue()


def test_a_render_error_of_a_class_names_each_member(monkeypatch):
    hosts = [(f"h-{i}", copy.deepcopy(QWEN), {}) for i in range(2)]
    plans = plan_inventory(hosts, facts={n: QWEN3_32B for n, _, _ in hosts})
    from sglang_deploy.plan import output

    def refuse(plan):
        raise PlanError(plan.host, "rendered value", f"cannot write {plan.host}'s unit")

    monkeypatch.setattr(output, "render", refuse)
    errors = render_plans(plans)
    assert [str(e) for e in errors] == [f"host h-{i}: rendered value: cannot write h-{i}'s unit" for i in range(2)]


def test_plan_builds_each_hosts_spec_once(monkeypatch, capsys):
    """`sglang-deploy plan` builds every host's spec once for the facts and the plans (the
    facts lookup and the tp-group assignment each built them again before)."""
    from sglang_deploy.commands.cli import main
    from sglang_deploy.deploy import model_metadata
    from sglang_deploy.plan import spec as spec_module
    from sglang_deploy.plan import tpgroups
    from tests.conftest import ROOT

    calls: list[str] = []
    real = spec_module.build_spec

    def counting(name, *args, **kwargs):
        calls.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(tpgroups, "build_spec", counting)
    monkeypatch.setattr(model_metadata, "build_spec", counting)
    assert main(["plan", str(ROOT / "inventory" / "fleet.py"), "--json"]) in (0, 2)
    capsys.readouterr()
    assert calls and len(calls) == len(set(calls)), sorted(calls)
