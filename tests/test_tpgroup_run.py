"""A tp group within one pyinfra run (sglang_deploy/deploy/tpgroup.py), without hosts: who is in the run,
whether the members agree, whether they restart, what the group does after its gate, and
rank 0's watch over every member's unit."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from pyinfra.api import Config, Inventory, State

from sglang_deploy.deploy import tpgroup
from sglang_deploy.gate import outcomes
from sglang_deploy.lifecycle import rollback_policy
from sglang_deploy.gate.errors import ServiceDown
from sglang_deploy.gate.watch import SystemdWatch
from sglang_deploy.plan.planner import plan_host

H100 = {"model": "H100 SXM", "count": 8, "topology": "nvswitch"}
MODEL = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"


def member(name: str, **extra) -> tuple[str, dict]:
    return (name, {"ssh_hostname": f"10.0.0.{name[-1]}", "sglang_model": MODEL, "sglang_gpus": H100,
                   "sglang_tp_group": "g", **extra})


def run_of(*hosts) -> tuple[tpgroup.GroupRun, State]:
    inventory = Inventory((list(hosts), {}))
    state = State(inventory, Config())
    return tpgroup.join(inventory.get_host(hosts[0][0] if isinstance(hosts[0], tuple) else hosts[0]), "g"), state


@dataclass
class FakeCtx:
    host: Any
    error: str | None = None
    prepared: Any = None  # plan, actions, rollback: what prepare decided (sglang_deploy/deploy/context.py Prepared)


def register(run: tpgroup.GroupRun, state: State, name: str, restart: bool = True, rollback: bool = True,
             **spec_data) -> FakeCtx:
    from sglang_deploy.plan.spec import build_spec

    host = state.inventory.get_host(name)
    data = dict(host.data.dict())
    data.update(spec_data)
    spec = build_spec(name, {}, data)
    ctx = FakeCtx(host=host, prepared=SimpleNamespace(
        plan=plan_host(spec, node=run.node(name)), actions=SimpleNamespace(restart=restart),
        rollback=rollback_policy.RollbackPlan(target="prev", previous=None) if rollback else None))
    run.register(ctx)
    return ctx


def test_members_ranks_and_nodes_come_from_the_whole_inventory():
    run, state = run_of(member("n1"), "other", member("n2"))
    assert run.members == ("n1", "n2") and run.leader == "n1"
    assert run.node("n2").rank == 1 and run.node("n2").dist_init_addr == "10.0.0.1:50000"
    # one GroupRun per group and pyinfra run
    assert tpgroup.join(state.inventory.get_host("n2"), "g") is run


def test_group_data_that_disagrees_is_an_error_for_every_member():
    run, _ = run_of(member("n1", sglang_nnodes=3), member("n2"))
    with pytest.raises(Exception, match="declares 3 nodes"):
        run.node("n1")
    with pytest.raises(Exception, match="tp group g cannot be deployed"):
        run.node("n2")


def test_problem_names_a_member_missing_from_the_run():
    run, state = run_of(member("n1"), member("n2"))
    register(run, state, "n1")
    assert "member(s) n2 not in this run" in run.problem()


def test_problem_names_a_member_that_cannot_be_deployed():
    run, state = run_of(member("n1"), member("n2"))
    register(run, state, "n1")
    bad = register(run, state, "n2")
    bad.error = "host n2: GPU probe: no NVIDIA driver"
    assert run.problem() == "member n2 cannot be deployed: host n2: GPU probe: no NVIDIA driver"


def test_problem_compares_the_members_plans():
    run, state = run_of(member("n1"), member("n2"))
    register(run, state, "n1")
    register(run, state, "n2", sglang_gpus={**H100, "count": 4})
    assert "4 GPU(s) here but 8 at rank 0 (n1)" in run.problem()


def test_a_group_that_agrees_has_no_problem_and_restarts_when_any_member_must():
    run, state = run_of(member("n1"), member("n2"))
    register(run, state, "n1", restart=False)
    register(run, state, "n2", restart=False)
    assert run.problem() is None and not run.restart_needed()
    run.ctxs["n2"].prepared.actions.restart = True
    assert run.restart_needed()


@pytest.mark.parametrize("kind,rollbacks,step", [
    (outcomes.PASS, (True, True), rollback_policy.MARK_DEPLOYED),
    (outcomes.CRASHED, (True, True), rollback_policy.ROLLBACK),
    (outcomes.FAIL, (True, False), rollback_policy.STOP),
    (outcomes.UNREACHABLE, (True, True), rollback_policy.KEEP_UNPROVEN),
])
def test_what_every_member_does_after_the_gate(kind, rollbacks, step):
    run, state = run_of(member("n1"), member("n2"))
    for name, rb in zip(("n1", "n2"), rollbacks):
        register(run, state, name, rollback=rb)
    run.decide(outcomes.Outcome(kind, "x"))
    assert run.step == step and run.passed() is (kind == outcomes.PASS)


def test_a_follower_stops_waiting_when_rank_0_failed():
    run, state = run_of(member("n1"), member("n2"))
    leader = register(run, state, "n1")
    register(run, state, "n2")
    state.failed_hosts.add(leader.host)
    assert run.wait_for("verdict", 5, "gate") is False
    assert run.failed_members() == ["n1"]


class FakeUnit:
    """A unit whose `systemctl show` answers are scripted."""

    def __init__(self, *states: str):
        self.states = list(states)

    def __call__(self, command: str) -> str:
        if command.startswith("journalctl"):
            return "last lines"
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        active, sub, pid = state.split()
        return f"ActiveState={active}\nSubState={sub}\nResult=success\nNRestarts=0\nMainPID={pid}\n"


def test_rank_0s_watch_fails_when_a_follower_does_and_names_it():
    run, state = run_of(member("n1"), member("n2"))
    register(run, state, "n1")
    register(run, state, "n2")
    follower_unit = FakeUnit("active running 20", "active running 20", "activating auto-restart 0")
    own = SystemdWatch(FakeUnit("active running 10"), "sglang.service", every_s=0)
    watch = run.watch(own, lambda ctx: SystemdWatch(follower_unit, "sglang.service", every_s=0))
    assert watch.failure() is None and watch.unit == "sglang.service"
    watch.check(force=True)
    with pytest.raises(ServiceDown) as exc:
        watch.check(force=True)
    assert exc.value.reason.startswith("tp group g: member n2 (node rank 1): the server exited")
    assert "--- n2 (node rank 1) ---\nlast lines" in exc.value.journal


def test_rank_0s_own_unit_comes_first_and_a_failed_member_counts():
    run, state = run_of(member("n1"), member("n2"))
    register(run, state, "n1")
    follower = register(run, state, "n2")
    own = SystemdWatch(FakeUnit("active running 10", "failed failed 0"), "sglang.service", every_s=0)
    watch = run.watch(own, lambda ctx: SystemdWatch(FakeUnit("active running 20"), "sglang.service"))
    state.failed_hosts.add(follower.host)
    assert watch.failure() == "tp group g: member n2 (node rank 1) failed in this run"
    assert watch.failure().startswith("the unit failed")


def test_a_member_failure_reaches_a_gate_on_rank_0s_host_through_its_abort_file(tmp_path):
    """Gated on rank 0's host, the gate there sees rank 0's unit only: the controller polls the
    other members and writes the abort file the gate there reads (check --abort-file)."""
    from sglang_deploy.gate.watch import AbortFileWatch

    run, state = run_of(member("n1"), member("n2"))
    register(run, state, "n1")
    register(run, state, "n2")
    own = SystemdWatch(FakeUnit("active running 10"), "sglang.service", every_s=0)
    follower_unit = FakeUnit("active running 20", "active running 20", "failed failed 0")
    watch = run.watch(own, lambda ctx: SystemdWatch(follower_unit, "sglang.service", every_s=0))
    assert watch.failure() is None
    abort = tmp_path / "abort"
    watch.abort_when_a_member_fails(abort.write_text, every_s=0)
    assert abort.read_text().startswith("tp group g: member n2 (node rank 1): the unit failed\n--- n2 (node rank 1)")
    # the gate on the host: its own unit is fine, the file says why it must stop
    remote = AbortFileWatch(FakeUnit("active running 10"), "sglang.service", str(abort), every_s=0)
    with pytest.raises(ServiceDown) as exc:
        remote.check(force=True)
    assert exc.value.reason == "tp group g: member n2 (node rank 1): the unit failed"
    assert "--- n2 (node rank 1) ---\nlast lines" in exc.value.journal
    abort.unlink()
    remote.check(force=True)  # no file: nothing to say
