"""A host being tuned stays out of its gateways for the whole tune: a trial's passing gate does not
register it again (sglang_deploy.deploy.gateway.admit_callback); the tuner's return does."""

from __future__ import annotations

from types import SimpleNamespace

from sglang_deploy.deploy import gateway
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


def _run() -> gateway.WorkerRun:
    # a gateway on a port nothing listens on: any request the callback made would fail the run
    url = f"http://127.0.0.1:{free_port()}"
    membership = WorkerMembership(host="w1", gateways=("gw",), url="http://127.0.0.1:1", drain=DrainSettings())
    lines: list[str] = []
    run = gateway.WorkerRun(membership=membership, gateways=(("gw", url, None),), worker_key=None,
                            log=lines.append, warn=lines.append)
    run.state = drain.WorkerState(phase=drain.Phase.STOPPING)  # left, drained, stop asked
    return run


def test_a_trials_passing_gate_leaves_the_host_out_of_its_gateways(monkeypatch):
    monkeypatch.setattr(gateway.tuning, "current_trial", lambda host: SimpleNamespace(number=3))
    host, run = Host(), _run()
    assert gateway.admit_callback(None, host, SimpleNamespace(), run) is True
    assert run.state.phase is drain.Phase.STOPPING  # nothing registered
    assert any("stays out" in line for line in host.lines)


def test_outside_a_tune_the_same_callback_registers_and_fails_when_the_gateway_is_down(monkeypatch):
    monkeypatch.setattr(gateway.tuning, "current_trial", lambda host: None)
    failed: list[str] = []
    monkeypatch.setattr(gateway, "_fail", lambda host, ctx, run, what: failed.append(run.state.phase.value) or False)
    host, run = Host(), _run()
    assert gateway.admit_callback(None, host, SimpleNamespace(), run) is False
    assert failed == [drain.Phase.GATEWAY_LOST.value]  # it tried, MAX_GATEWAY_ATTEMPTS times
