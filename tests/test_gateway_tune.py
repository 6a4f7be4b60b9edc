"""A host being tuned stays out of its gateways for the whole tune: a trial's passing gate does not
register it again (sglang_deploy.deploy.restart_run.register_callback); the tuner's return does."""

from __future__ import annotations

from types import SimpleNamespace

from sglang_deploy.deploy import restart_run
from sglang_deploy.lifecycle import drain
from sglang_deploy.plan.gateway import DrainSettings, WorkerMembership

from tests.conftest import free_port


class Host:
    """The part of pyinfra's Host the callback uses: its name and its log."""

    name = "w1"

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, text: str, *_: object) -> None:
        self.lines.append(text)

    def log_styled(self, text: str, **_: object) -> None:
        self.lines.append(text)


def _run() -> restart_run.RestartRun:
    """A worker that left its gateway, restarted and passed its gate: the machine asks to register it.
    The gateway is on a port nothing listens on: any request the callback made would fail."""
    url = f"http://127.0.0.1:{free_port()}"
    membership = WorkerMembership(host="w1", gateways=("gw",), url="http://127.0.0.1:1", drain=DrainSettings())
    lines: list[str] = []
    run = restart_run.RestartRun(membership=membership, gateways=(("gw", url, None),), worker_key=None,
                                 log=lines.append, warn=lines.append)
    run.state = drain.WorkerState(phase=drain.Phase.STOPPING)  # left, drained, stop asked
    run.action = drain.Action.STOP
    restart_run.started(run)
    restart_run.tell_gate(run, True)
    assert run.action is drain.Action.REGISTER and run.passed()
    return run


def test_a_trials_passing_gate_leaves_the_host_out_of_its_gateways(monkeypatch):
    monkeypatch.setattr(restart_run.tuning, "current_trial", lambda host: SimpleNamespace(number=3))
    host, run = Host(), _run()
    assert restart_run.register_callback(None, host, SimpleNamespace(), run) is True
    assert run.state.phase is drain.Phase.ADMITTING  # nothing registered
    assert any("stays out" in line for line in host.lines)


def test_outside_a_tune_the_same_callback_registers_and_fails_when_the_gateway_is_down(monkeypatch):
    monkeypatch.setattr(restart_run.tuning, "current_trial", lambda host: None)
    failed: list[str] = []
    monkeypatch.setattr(restart_run, "_fail",
                        lambda host, ctx, run, what: failed.append(run.state.phase.value) or False)
    host, run = Host(), _run()
    assert restart_run.register_callback(None, host, SimpleNamespace(), run) is False
    assert failed == [drain.Phase.GATEWAY_LOST.value]  # it tried, MAX_GATEWAY_ATTEMPTS times
