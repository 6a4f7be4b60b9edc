"""A server's restart, carried out as its state machine asks (``sglang_deploy.lifecycle.drain``).

pyinfra runs a deploy's operations after it has loaded them all, so the restart is declared once, in
order (``deploy.sglang.restart``; a multi-node tp group's: ``deploy.group_deploy``), and each step of
it runs only when the machine asks for what it does: the deploy's operations for the stop and start,
the gate and the rollback; this module's callbacks for what the operations cannot do, the gateway
actions (read every gateway, leave them, wait for the in-flight requests, join them again, stay out)
and telling the machine what each step found (``tell``): the restart went through and the server
started, the gate passed or failed, the rollback's revision is ready or not. Every decision about
a restart is the machine's; this module carries it out, one :class:`RestartRun` per server that
restarts (a host's, each of its replicas', a tp group's at rank 0).

A server with no gateway is a worker of none: its restart begins without a drain (``SKIP_DRAIN``),
and the gateway actions it is asked for have nothing to act on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from pyinfra import logger
from pyinfra.api.host import Host

from sglang_deploy.deploy import gateway_client, gating, tuning
from sglang_deploy.deploy.context import HostDeploy, Prepared
from sglang_deploy.lifecycle import drain
from sglang_deploy.plan.gateway import WorkerMembership

#: How long a worker's removal may take to show in a gateway's list (sglang-router 0.3.2 answers
#: DELETE /workers/{id} with 202 and removes it in a background job).
DEREGISTER_TIMEOUT_S = 30.0

GATEWAY_ACTIONS = frozenset({drain.Action.CHECK, drain.Action.DEREGISTER, drain.Action.REGISTER, drain.Action.WAIT})


@dataclass
class RestartRun:
    """One server's restart: its gateways (none for a server behind none) and where its state
    machine stands, with the action it asks for now."""

    membership: WorkerMembership | None  # None: the server is no gateway's worker
    gateways: tuple[tuple[str, str, str | None], ...]  # (name, url, API key), one per router
    worker_key: str | None
    log: Callable[[str], object]  # a line of the host's output
    warn: Callable[[str], object]  # a warning line of the host's output
    state: drain.WorkerState = field(default_factory=drain.WorkerState)
    action: drain.Action = drain.Action.NOTHING  # what the machine asks for now
    steps: list[str] = field(default_factory=list)  # every transition, and the gateways' errors
    drained_s: float | None = None
    gate_passed: bool | None = None  # the new revision's gate (None: not gated in this run)

    @classmethod
    def alone(cls, host: Host) -> RestartRun:
        """The restart of a server that no gateway lists."""
        return cls(membership=None, gateways=(), worker_key=None, log=host.log,
                   warn=lambda text: host.log_styled(text, fg="yellow", log_func=logger.warning))

    def clients(self) -> list[gateway_client.Gateway]:
        return [gateway_client.Gateway(url, key) for _, url, key in self.gateways]

    def names(self) -> str:
        return ", ".join(f"{name} ({url})" for name, url, _ in self.gateways)

    # ---- the machine ---------------------------------------------------------------------------

    def tell(self, event: drain.Event) -> drain.Action:
        """What happened, to the machine; the action it asks for next (kept in ``action``)."""
        before = self.state.phase
        self.state, self.action = drain.step(self.state, event)
        self.steps.append(f"{before.value} --{event.value}--> {self.state.phase.value}: {self.action.value}")
        return self.action

    def carry_out(self) -> drain.Action:
        """Carry out the gateway actions the machine asks for, each answered with what the gateways
        did, until it asks for something the deploy's operations do (stop, start, gate, roll back)
        or ends."""
        for _ in range(drain.MAX_STEPS + 1):
            if self.action not in GATEWAY_ACTIONS:
                return self.action
            self.tell(self._perform(self.action))
        raise AssertionError("the drain state machine did not settle")

    def wants(self, *actions: drain.Action) -> Callable[[], bool]:
        """For an operation's ``_if``: whether the machine asks for one of ``actions`` when it runs."""
        return lambda: self.action in actions

    def passed(self) -> bool:
        """For an operation's ``_if``: the new revision passed its gate in this run."""
        return self.gate_passed is True

    def failed(self) -> bool:
        """For an operation's ``_if``: the new revision failed its gate in this run."""
        return self.gate_passed is False

    # ---- the gateway actions ---------------------------------------------------------------------

    def _perform(self, action: drain.Action) -> drain.Event:
        """One gateway action, against every gateway of the worker (none: done at once); the event
        it ends in."""
        if self.membership is None:
            return drain.Event.DRAIN_DONE if action is drain.Action.WAIT else drain.Event.GATEWAY_OK
        url = self.membership.url
        try:
            if action is drain.Action.CHECK:
                for client in self.clients():
                    client.workers()
                return drain.Event.GATEWAY_OK
            if action is drain.Action.DEREGISTER:
                deregister(self, url)
                return drain.Event.GATEWAY_OK
            if action is drain.Action.REGISTER:
                for client in self.clients():
                    client.register(url, self.worker_key, self.membership.role_of)
                    client.wait_registered(url, self.membership.drain.admit_timeout_s)
                return drain.Event.GATEWAY_OK
            return self._wait_in_flight(self.membership)
        except gateway_client.GatewayError as exc:
            self.steps.append(f"{action.value}: {exc}")
            return drain.Event.GATEWAY_UNREACHABLE if exc.refused else drain.Event.GATEWAY_ERROR

    def _wait_in_flight(self, membership: WorkerMembership) -> drain.Event:
        """Until the server's own count of running and queued requests reads 0 twice (nothing
        listening on its port counts as 0), or the drain timeout (gateway_client.wait_idle)."""
        timeout = membership.drain.timeout_s
        started = time.monotonic()
        timed_out, last = gateway_client.wait_idle(membership.url, self.worker_key, timeout, poll_s=0.25)
        self.drained_s = round(time.monotonic() - started, 2)
        if not timed_out:
            self.log(f"drained in {self.drained_s:g} s")
            return drain.Event.DRAIN_DONE
        count = "an unknown number of" if last is None else str(last)  # no /metrics, or it cannot be read
        self.warn(f"drain timeout ({timeout} s) with {count} request(s) still in flight; stopping all the same")
        return drain.Event.DRAIN_TIMEOUT


def deregister(run: RestartRun, url: str) -> None:
    """``url`` out of every gateway of ``run``, each one's removal job seen done (it no longer lists
    it) within DEREGISTER_TIMEOUT_S; GatewayError otherwise."""
    for client in run.clients():
        if client.deregister(url):
            client.wait_deregistered(url, DEREGISTER_TIMEOUT_S)


def drive(run: RestartRun, event: drain.Event) -> drain.Action:
    """``event`` to the machine, then its gateway actions carried out (``tell`` + ``carry_out``)."""
    run.tell(event)
    return run.carry_out()


def _fail(host: Host, ctx: HostDeploy, run: RestartRun, what: str) -> bool:
    ctx.error = f"{what}: {run.state.reason}" + (f" (gateways: {run.names()})" if run.gateways else "")
    tail = [s for s in run.steps if ":" in s and "-->" not in s][-3:]
    gating.fail_host(host, ctx, ctx.error + ("\n" + "\n".join(tail) if tail else ""))
    return False


# ---------------------------------------------------------------------------
# The callbacks (pyinfra python.call): each one step of the restart, on the controller


def leave_callback(state: Any, host: Host, ctx: HostDeploy, run: RestartRun) -> bool:
    """The restart begins: before anything changes, out of every gateway, in-flight requests
    finished (``sglang_drain: skip`` or no gateway: the gateways are not touched)."""
    skip = run.membership is None or run.membership.drain.skip
    action = drive(run, drain.Event.SKIP_DRAIN if skip else drain.Event.RESTART)
    if action is drain.Action.STOP:
        if run.membership is None:
            pass
        elif skip:
            host.log("drain skipped (sglang_drain: skip): the gateways keep this worker listed")
        elif run.state.drain_timed_out:
            host.log(f"out of {run.names()}; drain timeout after {run.drained_s:g} s: stopped with requests in flight")
        else:
            host.log(f"out of {run.names()}; in-flight requests done after {run.drained_s:g} s")
        return True
    return _fail(host, ctx, run, "could not take the host out of its gateways before the restart; nothing changed")


def started(run: RestartRun) -> None:
    """The restart's operation went through (pyinfra runs nothing more for a host whose operation
    failed): the old server stopped, its GPUs free, and the new one started."""
    if run.action is drain.Action.STOP:
        run.tell(drain.Event.STOPPED)
        run.tell(drain.Event.STARTED)


def gate_callback(state: Any, host: Host, ctx: HostDeploy, p: Prepared, run: RestartRun) -> bool:
    """The new revision's gate, as the machine asks (``GATE``); its verdict told to the machine."""
    started(run)
    passed = gating.gate_callback(state, host, ctx, p)
    tell_gate(run, passed)
    return passed


def tell_gate(run: RestartRun, passed: bool) -> None:
    run.gate_passed = passed
    run.tell(drain.Event.GATE_PASS if passed else drain.Event.GATE_FAIL)


def rollback_confirmed(run: RestartRun, ready: bool) -> None:
    """The rollback's revision is back and ready (``ready``), or not; told to the machine."""
    if run.action is drain.Action.ROLL_BACK:
        run.tell(drain.Event.ROLLBACK_PASS if ready else drain.Event.ROLLBACK_FAIL)


def confirm_callback(state: Any, host: Host, ctx: HostDeploy, p: Prepared, target: str, run: RestartRun) -> bool:
    """The rollback's readiness check (``gating.confirm_callback``), its answer told to the machine."""
    ready = gating.confirm_callback(state, host, ctx, p, target)
    rollback_confirmed(run, ready)
    return ready


def register_callback(state: Any, host: Host, ctx: HostDeploy, run: RestartRun) -> bool:
    """The machine asks to join the gateways again (``REGISTER``: after a passing gate, or after a
    rollback whose revision is ready again). A tuning trial's server stays out: a host being tuned
    serves no client until the tuner's return to its own revision, whose deploy registers it again."""
    if tuning.current_trial(host.name) is not None:
        host.log(f"tuning trial: stays out of {run.names()} until the tuner returns the host to its revision")
        return True
    run.carry_out()
    if run.state.phase in (drain.Phase.DONE, drain.Phase.ROLLED_BACK):
        host.log(f"registered again in {run.names()}")
        return True
    return _fail(host, ctx, run, "the server passed its gate but could not join its gateways again")


def out_callback(state: Any, host: Host, ctx: HostDeploy, run: RestartRun) -> bool:
    """The gate failed and no gated revision serves (the rollback's revision is not ready, or there
    was none to roll back to and the service was stopped or kept unproven): the machine takes the
    worker out of its gateways, or keeps it out."""
    rollback_confirmed(run, False)  # no rollback ran: nothing gated serves
    run.carry_out()
    host.log(run.state.reason)
    return True
