"""The deploy's roles in pyinfra's own style: facts in, operations out, and then those operations
carried out in pyinfra's order as its executor would (each one's ``_if`` at the moment it runs, a
failing operation ending the host unless it ignores errors), with the gate, the rollback's check and
the gateways stood in at the deploy's own callbacks.

The facts are the real fact classes' ``process`` over the output their commands print on a host
(sglang_deploy/deploy/facts.py: the GPU probe of a recorded 2x RTX A6000 board,
tests/fixtures/probes; the deploy state script's ``key=value`` lines); pyinfra's own facts
(users, groups, systemd) answer as on a fresh Debian host. pyinfra's real Inventory, State and
operations build the operation list; nothing connects anywhere.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import pyinfra
import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.command import FunctionCommand
from pyinfra.api.host import Host
from pyinfra.api.state import StateStage
from pyinfra.api.util import PYINFRA_INSTALL_DIR, get_operation_order_from_stack
from pyinfra.context import ctx_host, ctx_state

from sglang_deploy import runcontext
from sglang_deploy.deploy import facts, gating, restart_run
from sglang_deploy.deploy import sglang as roles
from sglang_deploy.gate import outcomes
from sglang_deploy.lifecycle import drain, rollback_policy

from tests.conftest import FIXTURES

A6000 = {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"}
WORKER = {"sglang_model": "Qwen/Qwen3.6-27B", "sglang_model_source": "server", "sglang_gpus": A6000,
          "ssh_hostname": "10.0.1.1"}
GATEWAY = ("gw", {"ssh_hostname": "10.0.0.1", "sglang_gateway": {"port": 30100}})
PROBE = (FIXTURES / "probes" / "a6000x2-bridge.json").read_text().splitlines() + ["SGLANG_DEPLOY_RC=0"]
#: pyinfra's own facts, as a fresh Debian host answers them.
PYINFRA_FACTS: dict[str, Callable[..., Any]] = {"Os": lambda: "Linux", "LinuxName": lambda: "Debian",
                                                 "Which": lambda command: f"/usr/bin/{command}"}


@pytest.fixture(autouse=True)
def _no_run_context(monkeypatch):
    monkeypatch.delenv(runcontext.RUN_ENV, raising=False)


def state_lines(*, current: str | None = None, deployed: str | None = None, staged: tuple[str, ...] = (),
                active: bool = False) -> list[str]:
    """What the deploy state script (facts.DeployState) prints on a host."""
    lines = ["systemd=yes", "version=0.5.23", f"enabled={'enabled' if current else ''}",
             f"active={'active' if active else 'inactive'}", "need_reload=no", "account=yes", "workdir=yes"]
    lines += [f"{name}={value}" for name, value in (("current", current), ("deployed", deployed)) if value]
    return lines + [f"staged={rev}" for rev in staged]


def operation_order(state: State) -> list[int]:
    """pyinfra's ``get_operation_order_from_stack`` (pyinfra/api/util.py), read from the frames
    themselves: the line numbers of the calling frames from the deploy file's outermost one on,
    pyinfra's own left out, after the CLI's file number. The real one takes ``inspect.stack()``,
    which reads every frame's source line and searches every loaded module for a frame without a
    file (``<frozen runpy>`` under ``python -m pytest``): about 40% of this file's time, for the
    same list (test_the_operation_order_is_the_one_pyinfra_reads)."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    frames.reverse()
    start = 0
    if state.current_deploy_filename:
        start = next((i for i, f in enumerate(frames) if f.f_code.co_filename == state.current_deploy_filename),
                     len(frames))  # not found: pyinfra's loop ends on its own frame, left out
    numbers = [state.current_op_file_number] if pyinfra.is_cli else []
    return numbers + [f.f_lineno for f in frames[start:] if not f.f_code.co_filename.startswith(PYINFRA_INSTALL_DIR)]


@dataclass
class Loaded:
    state: State
    host: Host
    ops: list[tuple[str, Any]]  # (name, pyinfra's operation), in pyinfra's order

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.ops]


def load(*hosts: tuple[str, dict], deploy: str = "w1", deploy_state: list[str] | None = None,
         probe: list[str] | None = None) -> Loaded:
    """pyinfra loads deploy.py for host ``deploy`` of an inventory of ``hosts``: its operations."""
    return load_hosts(hosts, (deploy,), deploy_state, probe)[deploy]


def load_hosts(hosts: Any, deploys: tuple[str, ...], deploy_state: list[str] | None = None,
               probe: list[str] | None = None) -> dict[str, Loaded]:
    """deploy.py loaded for each host of ``deploys`` into one State, as pyinfra's CLI loads it
    (``pyinfra.is_cli``: an operation's hash comes from the lines that declared it, so hosts whose
    operation lists differ, such as a tp group's rank 0 and its followers, still share each one's
    hash and name; pyinfra/api/operation.py solve_operation_consistency)."""
    inventory = Inventory((list(hosts), {}))
    state = State(inventory, Config())
    state.current_stage = StateStage.Prepare
    outputs = {facts.GpuProbe: probe or PROBE, facts.DeployState: deploy_state or state_lines(), facts.ReplicaUnits: []}

    def get_fact(self: Host, fact: Any, *args: Any, **kwargs: Any) -> Any:
        if fact in outputs:
            return fact().process(outputs[fact])
        if fact.__name__ in PYINFRA_FACTS:
            return PYINFRA_FACTS[fact.__name__](**kwargs)
        return fact.default() if hasattr(fact, "default") else None

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Host, "get_fact", get_fact)
        mp.setattr(pyinfra, "is_cli", True)
        # the module (pyinfra.api's attribute of that name is the decorator)
        mp.setattr(importlib.import_module("pyinfra.api.operation"), "get_operation_order_from_stack", operation_order)
        for name in deploys:
            with ctx_state.use(state), ctx_host.use(inventory.get_host(name)):
                roles.deploy_current_host()
    out = {}
    for name in deploys:
        host = inventory.get_host(name)
        # an operation's name, less the @deploy's ("Restart and gate SGLang | Gate the new revision")
        ops = [(sorted(state.op_meta[h].names)[0].split(" | ")[-1], state.ops[host][h])
               for h in state.get_op_order() if h in state.ops[host]]
        out[name] = Loaded(state, host, ops)
    return out


def planned_revision(loaded: Loaded) -> str:
    """The revision the deploy marks deployed after a passing gate (the plan's revision id)."""
    with ctx_state.use(loaded.state), ctx_host.use(loaded.host):
        for name, op in loaded.ops:
            if name == "Mark the new revision deployed":
                [command] = [str(c) for c in op.command_generator()]
                return command.split()[1].strip("'")
    raise AssertionError("no revision is marked deployed")


# ---------------------------------------------------------------------------
# Facts in, operations out


def test_the_operation_order_is_the_one_pyinfra_reads(monkeypatch):
    state = State(Inventory(([("w1", {})], {})), Config())
    state.current_op_file_number = 3
    for deploy_file in (None, __file__, "/nowhere/deploy.py"):
        state.current_deploy_filename = deploy_file
        for cli in (False, True):
            monkeypatch.setattr(pyinfra, "is_cli", cli)
            real, ours = (order(state) for order in (get_operation_order_from_stack, operation_order))
            assert ours == real
            assert real[:cli] == [3] * cli
            lines = real[cli:]
            if deploy_file is None:  # every frame's, from pytest's outermost on
                assert len(lines) > 3
            elif deploy_file == __file__:  # from this test's frame on: its own and the generator's
                assert len(lines) == 2
            else:  # no frame is the deploy file's
                assert lines == []


def test_a_fresh_host_gets_installed_staged_proven_restarted_gated_and_stopped_if_the_gate_fails():
    loaded = load(("w1", WORKER))
    names = loaded.names
    order = ["Prove the launch flags with the installed SGLang", "Take the host's deploy lock",
             "Make the new revision live", "Reload systemd units", "Enable the service",
             "Restart the service on the new revision", "Gate the new revision", "Mark the new revision deployed",
             "If the gate fails: stop the service (no previous revision to roll back to)",
             "Release the host's deploy lock", "If the gate fails: fail the host, saying what was done"]
    assert [n for n in names if n in order] == order
    # no gateway: nothing to leave or join; no previous revision: nothing to roll back to
    assert not [n for n in names if "gateway" in n or n.startswith("If the gate fails, roll back")]


def test_a_host_that_runs_the_planned_revision_is_not_restarted():
    first = load(("w1", WORKER))
    rev = planned_revision(first)
    again = load(("w1", WORKER), deploy_state=state_lines(current=rev, deployed=rev, staged=(rev,), active=True))
    # (its files are swapped in: the stand-in state has no checksums of them; the server is not touched)
    assert [n for n in again.names if "Restart" in n or "Gate" in n or "roll back" in n] == [], again.names


def test_wrong_data_is_one_failing_operation_naming_the_host_and_field_before_anything_changes():
    loaded = load(("w1", {**WORKER, "sglang_gpus": {**A6000, "count": 3}}))
    assert loaded.names == ["Plan SGLang for this host"]
    with ctx_state.use(loaded.state), ctx_host.use(loaded.host):
        [command] = list(loaded.ops[0][1].command_generator())
    assert "host w1" in str(command) and "exit 1" in str(command)


def test_a_prefill_or_decode_server_gets_its_transfer_engine_installed_and_imported_before_anything_stops():
    workers = (("w1", {**WORKER, "sglang_gateways": ["gw"], "sglang_role": "prefill"}),
               ("w2", {**WORKER, "ssh_hostname": "10.0.1.2", "sglang_gateways": ["gw"], "sglang_role": "decode",
                       "sglang_transfer_engine_version": "0.3.10.post1"}))
    running = state_lines(current="old", deployed="old", staged=("old",), active=True)
    loaded = load_hosts((GATEWAY, *workers), ("w1", "w2"), deploy_state=running)
    for name, version in (("w1", "0.3.13.post1"), ("w2", "0.3.10.post1")):
        one = loaded[name]
        install = "Install the KV transfer engine into the SGLang virtualenv"
        assert install in one.names, one.names
        assert one.names.index(install) < one.names.index(
            "Take the host out of its gateways and let in-flight requests finish")
        with ctx_state.use(one.state), ctx_host.use(one.host):
            [op] = [op for n, op in one.ops if n == install]
            commands = [str(c) for c in op.command_generator()]
        # installed unless that version is there, then imported as SGLang imports it at start
        assert f"mooncake-transfer-engine=={version}" in commands[0] and "m.version('mooncake-transfer-engine')" in \
            commands[0]
        assert "-c 'import mooncake.engine' ||" in commands[-1] and "exit 1" in commands[-1]
    # a server of no role installs none
    plain = load(GATEWAY, ("w1", {**WORKER, "sglang_gateways": ["gw"]}))
    assert not [n for n in plain.names if "transfer engine" in n]


def test_a_worker_of_a_gateway_leaves_before_the_live_change_and_joins_after_its_gate():
    loaded = load(GATEWAY, ("w1", {**WORKER, "sglang_gateways": ["gw"]}),
                  deploy_state=state_lines(current="old", deployed="old", staged=("old",), active=True))
    order = ["Gateway hosts deployed before any worker changes",
             "Take the host out of its gateways and let in-flight requests finish", "Take the host's deploy lock",
             "Make the new revision live", "Restart the service on the new revision", "Gate the new revision",
             "Mark the new revision deployed", "Register the host in its gateways again",
             "If the gate fails, roll back: restore the last good revision",
             "If the gate fails, roll back: confirm the last good revision is ready",
             "If the gate fails and the rollback is ready: register the host in its gateways again",
             "If the gate fails and nothing gated serves: keep the host out of its gateways",
             "Release the host's deploy lock", "If the gate fails: fail the host, saying what was done"]
    assert [n for n in loaded.names if n in order] == order


# ---------------------------------------------------------------------------
# The operations carried out: the restart's state machine decides which run


@dataclass
class Executed:
    ran: list[str] = field(default_factory=list)
    failed_at: str | None = None
    run: restart_run.RestartRun | None = None


class Stand:
    """The deploy's callbacks that reach outside, stood in: the gate's verdict, the rollback's
    readiness, what the gateways answer to each action (GATEWAY_OK unless scripted), and the
    commands the callbacks run over the host's connection (each succeeds, printing nothing)."""

    def __init__(self, gate: bool, rollback_ready: bool = True,
                 gateway: dict[drain.Action, list[drain.Event]] | None = None) -> None:
        self.gate, self.rollback_ready = gate, rollback_ready
        self.gateway = {k: list(v) for k, v in (gateway or {}).items()}
        self.actions: list[str] = []
        self.shell: list[tuple[str, str]] = []  # (host, command) the callbacks ran over SSH
        self.refuse: str | None = None  # a command containing it fails, as a timed-out connect prints

    def install(self, mp: pytest.MonkeyPatch) -> None:
        def gate(state: Any, host: Host, ctx: Any, p: Any) -> bool:
            ctx.gate.outcome = outcomes.Outcome(outcomes.PASS if self.gate else outcomes.FAIL, "stood in")
            ctx.gate.step = rollback_policy.next_step(ctx.gate.outcome, p.rollback is not None)
            return self.gate

        def confirm(state: Any, host: Host, ctx: Any, p: Any, target: str) -> bool:
            ctx.gate.rollback_ok = self.rollback_ready
            return self.rollback_ready

        def perform(run: restart_run.RestartRun, action: drain.Action) -> drain.Event:
            self.actions.append(action.value)
            if action is drain.Action.WAIT:
                run.drained_s = 0.5
            script = self.gateway.get(action)
            if script:
                return script.pop(0)
            return drain.Event.DRAIN_DONE if action is drain.Action.WAIT else drain.Event.GATEWAY_OK

        def sh(host: Host, command: str) -> tuple[bool, str]:
            self.shell.append((host.name, command))
            if "ss -Hltn" in command and "echo up" in command:  # the tp preflight's listener on rank 0 is up
                return True, "up"
            if "nohup timeout" in command:  # that listener's pid
                return True, "4242"
            if self.refuse and self.refuse in command:
                return False, "TimeoutError timed out"
            return True, ""

        mp.setattr(gating, "sh", sh)
        mp.setattr(gating, "gate_callback", gate)
        mp.setattr(gating, "confirm_callback", confirm)
        mp.setattr(restart_run.RestartRun, "_perform", perform)
        mp.setattr(restart_run.RestartRun, "_wait_in_flight", lambda run, m: drain.Event.DRAIN_DONE)


def _run_op(loaded: Loaded, name: str, op: Any, out: Executed) -> None:
    """One operation on one host as pyinfra's executor runs it (pyinfra/api/operations.py): skipped
    when its ``_if`` is false; a python.call's function called (False fails it); a failure ends the
    host unless the operation ignores errors. Shell operations succeed (nothing runs)."""
    conditions = op.global_arguments.get("_if") or []
    conditions = conditions if isinstance(conditions, list) else [conditions]
    if not all(c() for c in conditions):
        return
    out.ran.append(name)
    ok = True
    for command in op.command_generator():
        if isinstance(command, FunctionCommand):
            for value in (*command.args, *command.kwargs.values()):
                if isinstance(value, restart_run.RestartRun):
                    out.run = value
            if command.execute(loaded.state, loaded.host, {}) is False:
                ok = False
    if not ok and not op.global_arguments.get("_ignore_errors"):
        out.failed_at = name


def execute(loaded: Loaded, stand: Stand) -> Executed:
    """The host's operations in pyinfra's order, each as its executor runs it (``_run_op``)."""
    out = Executed()
    with pytest.MonkeyPatch.context() as mp, ctx_state.use(loaded.state), ctx_host.use(loaded.host):
        stand.install(mp)
        for name, op in loaded.ops:
            _run_op(loaded, name, op, out)
            if out.failed_at:
                break
    return out


def execute_lockstep(group: dict[str, Loaded], stand: Stand) -> dict[str, Executed]:
    """Several hosts of one run as pyinfra runs them: each operation on every host (in inventory
    order) before the next operation; a host that failed runs nothing more."""
    state = next(iter(group.values())).state
    out = {name: Executed() for name in group}
    with pytest.MonkeyPatch.context() as mp, ctx_state.use(state):
        stand.install(mp)
        for op_hash in state.get_op_order():
            for name, loaded in group.items():
                if out[name].failed_at or op_hash not in state.ops[loaded.host]:
                    continue
                label = sorted(state.op_meta[op_hash].names)[0].split(" | ")[-1]
                with ctx_host.use(loaded.host):
                    _run_op(loaded, label, state.ops[loaded.host][op_hash], out[name])
    return out


def serving_worker() -> Loaded:
    return load(GATEWAY, ("w1", {**WORKER, "sglang_gateways": ["gw"]}),
                deploy_state=state_lines(current="old", deployed="old", staged=("old",), active=True))


LIVE = ["Take the host's deploy lock", "Make the new revision live", "Reload systemd units",
        "Restart the service on the new revision", "Gate the new revision"]


def test_a_passing_gate_marks_the_revision_and_the_machine_registers_the_worker_again():
    done = execute(serving_worker(), stand := Stand(gate=True))
    assert done.failed_at is None
    restart = done.ran[done.ran.index("Take the host out of its gateways and let in-flight requests finish"):]
    assert restart[:len(LIVE) + 1] == ["Take the host out of its gateways and let in-flight requests finish", *LIVE]
    assert "Mark the new revision deployed" in restart and "Register the host in its gateways again" in restart
    assert not [n for n in restart if "If the gate fails" in n]
    assert stand.actions == ["check", "deregister", "wait", "register"]
    assert done.run is not None and done.run.state.phase is drain.Phase.DONE


def test_a_failing_gate_rolls_back_and_the_machine_registers_the_previous_revision_again():
    done = execute(serving_worker(), stand := Stand(gate=False, rollback_ready=True))
    assert "Mark the new revision deployed" not in done.ran
    assert "Register the host in its gateways again" not in done.ran
    assert [n for n in done.ran if n.startswith("If the gate fails")] == [
        "If the gate fails, roll back: restore the last good revision",
        "If the gate fails, roll back: reload systemd units",
        "If the gate fails, roll back: restart the service on the last good revision",
        "If the gate fails, roll back: confirm the last good revision is ready",
        "If the gate fails and the rollback is ready: register the host in its gateways again",
        "If the gate fails: fail the host, saying what was done"]
    assert stand.actions == ["check", "deregister", "wait", "register"]
    assert done.run is not None and done.run.state.phase is drain.Phase.ROLLED_BACK
    assert done.failed_at == "If the gate fails: fail the host, saying what was done"


def test_a_rollback_that_is_not_ready_keeps_the_worker_out():
    done = execute(serving_worker(), stand := Stand(gate=False, rollback_ready=False))
    assert "If the gate fails and the rollback is ready: register the host in its gateways again" not in done.ran
    assert "If the gate fails and nothing gated serves: keep the host out of its gateways" in done.ran
    assert stand.actions == ["check", "deregister", "wait"]  # nothing registers it again
    assert done.run is not None and done.run.state.phase is drain.Phase.OUT


def test_a_gateway_that_cannot_be_read_fails_the_host_before_anything_changes():
    done = execute(serving_worker(), Stand(gate=True, gateway={drain.Action.CHECK: [drain.Event.GATEWAY_UNREACHABLE]}))
    assert done.failed_at == "Take the host out of its gateways and let in-flight requests finish"
    assert not [n for n in done.ran if n in LIVE]
    assert done.run is not None and done.run.state.phase is drain.Phase.UNCHANGED


def test_a_gateway_lost_while_admitting_fails_the_host_after_its_passing_gate():
    lost = [drain.Event.GATEWAY_ERROR] * drain.MAX_GATEWAY_ATTEMPTS
    done = execute(serving_worker(), Stand(gate=True, gateway={drain.Action.REGISTER: lost}))
    assert done.failed_at == "Register the host in its gateways again"
    assert "Mark the new revision deployed" in done.ran  # it passed: the revision is the deployed one
    assert done.run is not None and done.run.state.phase is drain.Phase.GATEWAY_LOST


def test_a_host_without_gateways_restarts_as_its_machine_asks_too():
    loaded = load(("w1", WORKER), deploy_state=state_lines(current="old", deployed="old", staged=("old",), active=True))
    passed = execute(loaded, Stand(gate=True))
    assert passed.failed_at is None and passed.run is not None and passed.run.membership is None
    assert passed.run.state.phase is drain.Phase.DONE
    assert [s.split(":")[0] for s in passed.run.steps] == [
        "serving --skip drain--> stopping", "stopping --stopped--> starting", "starting --started--> gating",
        "gating --gate pass--> done"]
    failed = execute(load(("w1", WORKER), deploy_state=state_lines(current="old", deployed="old", staged=("old",),
                                                                   active=True)), Stand(gate=False))
    assert "If the gate fails, roll back: confirm the last good revision is ready" in failed.ran
    assert failed.run is not None and failed.run.state.phase is drain.Phase.ROLLED_BACK


H100 = {"model": "H100 SXM", "count": 8, "topology": "nvswitch"}
GROUP_MODEL = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"


def test_a_tp_group_member_restarts_gates_and_prunes_with_its_group():
    probe = (FIXTURES / "probes" / "h100x8-nvswitch.json").read_text().splitlines() + ["SGLANG_DEPLOY_RC=0"]
    member = {"sglang_model": GROUP_MODEL, "sglang_model_source": "server", "sglang_gpus": H100,
              "sglang_tp_group": "g", "sglang_nnodes": 2}
    loaded = load(("n1", {**member, "ssh_hostname": "10.0.0.1"}), ("n2", {**member, "ssh_hostname": "10.0.0.2"}),
                  deploy="n1", deploy_state=state_lines(current="old", deployed="old", staged=("old",), active=True),
                  probe=probe)
    order = ["Check the tp group: every member here and alike", "Stop the service at rank 0 of the tp group first",
             "Restart the service on the new revision (every tp group member)", "Gate the tp group once, at rank 0",
             "Mark the new revision deployed (the tp group passed)",
             "Remove the compile caches of SGLang versions whose venv is gone",
             "If the gate fails, roll back: restore the last good revision",
             "If the tp group's gate fails: fail this member, saying what was done"]
    assert [n for n in loaded.names if n in order] == order, loaded.names


def tp_group(deploy_state: list[str]) -> dict[str, Loaded]:
    """Both members of a two-node tp group (a recorded 8x H100 board each), loaded together."""
    probe = (FIXTURES / "probes" / "h100x8-nvswitch.json").read_text().splitlines() + ["SGLANG_DEPLOY_RC=0"]
    member = {"sglang_model": GROUP_MODEL, "sglang_model_source": "server", "sglang_gpus": H100,
              "sglang_tp_group": "g", "sglang_nnodes": 2}
    return load_hosts([("n1", {**member, "ssh_hostname": "10.0.0.1"}), ("n2", {**member, "ssh_hostname": "10.0.0.2"})],
                      ("n1", "n2"), deploy_state, probe)


def test_a_tp_group_that_cannot_meet_fails_every_member_before_anything_stops():
    """pyinfra's lockstep: the follower cannot reach rank 0's rendezvous port (its connect fails as
    Python's socket says), so both members fail at the group's verdict, before any stop or swap."""
    stand = Stand(gate=True)
    stand.refuse = "python3 -c"  # the follower's connect, and only that runs python3 -c outside a listener
    done = execute_lockstep(tp_group(RAN_BEFORE), stand)
    verdict = "Check the tp group can meet: every member's findings"
    for name, executed in done.items():
        assert executed.failed_at == verdict, (name, executed.ran)
        assert not [n for n in executed.ran if "Stop" in n or "Restart" in n or "live" in n], executed.ran
    listen = [c for h, c in stand.shell if h == "n1" and "create_server" in c]
    connect = [c for h, c in stand.shell if h == "n2" and "create_connection" in c]
    assert len(listen) == 1 and "10.0.0.1" in listen[0] and len(connect) == 1 and "10.0.0.1 50000" in connect[0]
    assert any(h == "n1" and c.startswith("kill ") for h, c in stand.shell)  # the check's listener closed


def test_a_tp_group_that_can_meet_restarts_in_lockstep():
    done = execute_lockstep(tp_group(RAN_BEFORE), stand := Stand(gate=True))
    for name, executed in done.items():
        assert executed.failed_at is None, (name, executed.failed_at)
        assert "Mark the new revision deployed (the tp group passed)" in executed.ran
    assert [h for h, c in stand.shell if "create_connection" in c] == ["n2"]


def execute_group(deploy_state: list[str], stand: Stand) -> dict[str, Executed]:
    """Rank 0 (n1) carried out, then its follower (n2): the follower's waits for rank 0's verdict
    and rollback find them decided."""
    group = tp_group(deploy_state)
    return {name: execute(group[name], stand) for name in ("n1", "n2")}


RAN_BEFORE = state_lines(current="old", deployed="old", staged=("old",), active=True)
MACHINE = ["serving --skip drain--> stopping", "stopping --stopped--> starting", "starting --started--> gating"]


def test_a_tp_group_restarts_as_each_members_machine_asks():
    done = execute_group(RAN_BEFORE, Stand(gate=True))
    for name, executed in done.items():
        assert executed.failed_at is None, name
        run = executed.run
        assert run is not None and run.membership is None and run.state.phase is drain.Phase.DONE, name
        assert [s.split(":")[0] for s in run.steps] == [*MACHINE, "gating --gate pass--> done"], name
        assert "Mark the new revision deployed (the tp group passed)" in executed.ran
        assert not [n for n in executed.ran if "fail" in n]
    assert "Stop the service at rank 0 of the tp group first" in done["n1"].ran
    assert "Stop the service at rank 0 of the tp group first" not in done["n2"].ran


def test_a_failed_tp_group_gate_rolls_every_member_back_as_its_machine_asks():
    stand = Stand(gate=False, rollback_ready=True)
    done = execute_group(RAN_BEFORE, stand)
    rollback = ["If the gate fails, roll back: restore the last good revision",
                "If the gate fails, roll back: reload systemd units",
                "If the gate fails, roll back: restart the service on the last good revision (every tp group member)",
                "If the gate fails, roll back: confirm the tp group is ready at rank 0"]
    for name, executed in done.items():
        assert [n for n in executed.ran if n.startswith("If the gate fails, roll back")
                and "rank 0 of the tp group first" not in n] == rollback, name
        assert "Mark the new revision deployed (the tp group passed)" not in executed.ran
        assert "If the gate fails and a tp group member has no previous revision: stop the service" not in executed.ran
        assert executed.failed_at == "If the tp group's gate fails: fail this member, saying what was done", name
        run = executed.run
        assert run is not None and run.state.phase is drain.Phase.ROLLED_BACK, name
        assert [s.split(":")[0] for s in run.steps][:5] == [*MACHINE, "gating --gate fail--> rolling back",
                                                            "rolling back --rollback pass--> rolled back"], name
    # the follower adopted rank 0's verdict and answer: its history says so, over its own connection
    n2_history = [c for h, c in stand.shell if h == "n2" and "history.jsonl" in c]
    assert n2_history and all("tp group g" in c for c in n2_history)


def test_a_tp_group_member_without_a_previous_revision_stops_every_member():
    done = execute_group(state_lines(current="old", deployed="old", active=True), Stand(gate=False))
    for name, executed in done.items():
        assert "If the gate fails and a tp group member has no previous revision: stop the service" in executed.ran
        assert not [n for n in executed.ran if n.startswith("If the gate fails, roll back")], name
        assert executed.failed_at == "If the tp group's gate fails: fail this member, saying what was done", name
        assert executed.run is not None and executed.run.failed(), name
