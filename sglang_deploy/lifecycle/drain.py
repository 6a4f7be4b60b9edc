"""A worker's restart behind its gateways, as a state machine. Pure: no I/O.

The glue (``sglang_deploy.deploy``) performs each :class:`Action` and answers with the
:class:`Event` it saw; :func:`step` says what to do next. One state machine per worker (a
serving host, or a multi-node tp group through its rank 0), for all of its gateways at once:
a gateway event stands for every gateway of the worker (``GATEWAY_OK``: all of them answered
as asked; ``GATEWAY_ERROR`` / ``GATEWAY_UNREACHABLE``: at least one did not, after the client's
own retries).

The rules:

* a worker is registered with its gateways exactly when it serves a gated revision: it leaves
  them before its server stops and joins them again only after a gate passed (the new revision's,
  or, after a failed gate, the previous revision's when its rollback re-gates);
* it is never stopped while registered: the stop waits until every gateway confirmed the leave
  and in-flight requests finished (or the drain timeout passed);
* a gateway that cannot be reached before the stop fails the host before anything changes: the
  gateways are read first (``CHECK``), and a leave that fails half-way is undone (``REGISTER``)
  before the host is failed;
* a failed rollback leaves the worker out;
* with ``sglang_drain: skip`` (the ``SKIP_DRAIN`` event) the gateways are not touched around the
  restart: they keep the worker in their lists and their own health checks take it out while it
  is down and back once it answers (sglang-router 0.3.2, ``--health-check-interval-secs``,
  ``--health-failure-threshold``: sglang_router/router_args.py); only a failed rollback makes
  the deploy take it out;
* every membership change is tried at most :data:`MAX_GATEWAY_ATTEMPTS` times; a gateway that
  keeps failing ends the run in ``GATEWAY_LOST`` (the host fails, its membership in that gateway
  unknown: the report names the gateway), so every run ends within :data:`MAX_STEPS` events.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace


class Phase(enum.Enum):
    SERVING = "serving"  # the old, gated revision, registered; the restart has not begun
    CHECKING = "checking"  # reading the gateways' worker lists: nothing changed yet
    LEAVING = "leaving"  # deregistering from every gateway
    RESTORING = "restoring"  # a leave failed half-way: registering again where it was removed
    DRAINING = "draining"  # out of every gateway; in-flight requests finishing
    STOPPING = "stopping"
    STARTING = "starting"  # the new revision
    GATING = "gating"
    ADMITTING = "admitting"  # the gate passed: registering, until the gateways list it healthy
    ROLLING_BACK = "rolling back"  # the previous revision back byte for byte, restarted, gated again
    READMITTING = "readmitting"  # the rollback passed: registering the previous revision again
    EVICTING_FOR_ROLLBACK = "evicting for rollback"  # crashed after its gate: out, then roll back
    EVICTING = "evicting"  # crashed after the rollback's gate, or a failed rollback under skip: out
    # terminal
    DONE = "done"  # the new revision, gated, registered
    UNCHANGED = "unchanged"  # failed before the stop: the old revision, gated, registered
    ROLLED_BACK = "rolled back"  # the previous revision, gated again, registered
    OUT = "out"  # no gated revision: not registered
    GATEWAY_LOST = "gateway lost"  # a gateway kept failing a membership change: membership unknown


TERMINAL = frozenset({Phase.DONE, Phase.UNCHANGED, Phase.ROLLED_BACK, Phase.OUT, Phase.GATEWAY_LOST})


class Event(enum.Enum):
    RESTART = "restart"  # begin the restart, draining first
    SKIP_DRAIN = "skip drain"  # begin the restart without touching the gateways (sglang_drain: skip)
    GATEWAY_OK = "gateway ok"
    GATEWAY_ERROR = "gateway error"
    GATEWAY_UNREACHABLE = "gateway unreachable"
    ADMIT_TIMEOUT = "admit timeout"  # the gateways did not list the worker healthy within admit_timeout
    DRAIN_DONE = "drain done"
    DRAIN_TIMEOUT = "drain timeout"
    STOPPED = "stopped"  # the server stopped, its GPUs free
    STARTED = "started"
    GATE_PASS = "gate pass"
    GATE_FAIL = "gate fail"
    ROLLBACK_PASS = "rollback pass"  # the previous revision is back and passed its gate again
    ROLLBACK_FAIL = "rollback fail"
    CRASH = "crash"  # the server under deploy died (its unit failed)


class Action(enum.Enum):
    CHECK = "check"  # read every gateway's worker list (changes nothing)
    DEREGISTER = "deregister"
    REGISTER = "register"  # and wait, up to admit_timeout, until the gateways list it healthy
    WAIT = "wait"  # for in-flight requests, up to the drain timeout
    STOP = "stop"
    START = "start"
    GATE = "gate"
    ROLL_BACK = "roll back"
    FAIL_HOST = "fail host"
    NOTHING = "nothing"


GATEWAY_FAILURES = frozenset({Event.GATEWAY_ERROR, Event.GATEWAY_UNREACHABLE, Event.ADMIT_TIMEOUT})
GATEWAY_ANSWERS = frozenset({Event.GATEWAY_OK}) | GATEWAY_FAILURES

#: Tries of one membership change (a register or a deregister) before the gateway counts as lost.
MAX_GATEWAY_ATTEMPTS = 3
#: No run takes more events than this. The longest path: the restart up to the gate's pass (7
#: events); the admission failing N-1 times, then a crash (N); the eviction failing N-1 times,
#: then done (N); the rollback's pass (1); its admission failing N-1 times, then a crash (N);
#: the eviction failing every try (N). tests/test_drain_fsm.py walks every path.
MAX_STEPS = 8 + 4 * MAX_GATEWAY_ATTEMPTS


class UnexpectedEvent(ValueError):
    """An event that cannot happen in the state (a bug in the glue, not in the inventory)."""


@dataclass(frozen=True)
class WorkerState:
    phase: Phase = Phase.SERVING
    skip: bool = False  # the restart began with SKIP_DRAIN
    attempts: int = 0  # failed tries of the membership change under way
    drain_timed_out: bool = False  # the stop went ahead with requests still in flight
    reason: str = ""  # a terminal state's why, in words

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL


# What each phase waits for; CRASH only where a server of this deploy runs and matters.
_EXPECTED: dict[Phase, frozenset[Event]] = {
    Phase.SERVING: frozenset({Event.RESTART, Event.SKIP_DRAIN}),
    Phase.CHECKING: frozenset({Event.GATEWAY_OK, Event.GATEWAY_ERROR, Event.GATEWAY_UNREACHABLE}),
    Phase.LEAVING: frozenset({Event.GATEWAY_OK, Event.GATEWAY_ERROR, Event.GATEWAY_UNREACHABLE}),
    Phase.RESTORING: frozenset({Event.GATEWAY_OK, Event.GATEWAY_ERROR, Event.GATEWAY_UNREACHABLE}),
    Phase.DRAINING: frozenset({Event.DRAIN_DONE, Event.DRAIN_TIMEOUT, Event.CRASH}),
    Phase.STOPPING: frozenset({Event.STOPPED}),
    Phase.STARTING: frozenset({Event.STARTED, Event.CRASH}),
    Phase.GATING: frozenset({Event.GATE_PASS, Event.GATE_FAIL, Event.CRASH}),
    Phase.ADMITTING: GATEWAY_ANSWERS | {Event.CRASH},
    Phase.ROLLING_BACK: frozenset({Event.ROLLBACK_PASS, Event.ROLLBACK_FAIL, Event.CRASH}),
    Phase.READMITTING: GATEWAY_ANSWERS | {Event.CRASH},
    Phase.EVICTING_FOR_ROLLBACK: frozenset({Event.GATEWAY_OK, Event.GATEWAY_ERROR, Event.GATEWAY_UNREACHABLE}),
    Phase.EVICTING: frozenset({Event.GATEWAY_OK, Event.GATEWAY_ERROR, Event.GATEWAY_UNREACHABLE}),
}


def expected_events(state: WorkerState) -> tuple[Event, ...]:
    """The events that can answer the state's action, in a fixed order (none when terminal)."""
    events = _EXPECTED.get(state.phase, frozenset())
    return tuple(e for e in Event if e in events)


def _end(state: WorkerState, phase: Phase, reason: str) -> tuple[WorkerState, Action]:
    return replace(state, phase=phase, attempts=0, reason=reason), (
        Action.NOTHING if phase is Phase.DONE else Action.FAIL_HOST)


def _go(state: WorkerState, phase: Phase, action: Action) -> tuple[WorkerState, Action]:
    return replace(state, phase=phase, attempts=0), action


def _retry(state: WorkerState, event: Event, action: Action, what: str) -> tuple[WorkerState, Action]:
    """A membership change failed: try again, or give the gateway up after MAX_GATEWAY_ATTEMPTS."""
    attempts = state.attempts + 1
    if attempts < MAX_GATEWAY_ATTEMPTS:
        return replace(state, attempts=attempts), action
    return _end(state, Phase.GATEWAY_LOST, f"{what} failed {attempts} times ({event.value}): the worker's "
                                          "membership in that gateway is unknown")


def step(state: WorkerState, event: Event) -> tuple[WorkerState, Action]:
    """The next state and what to do, for ``event`` answering ``state``'s action. A terminal
    state stays as it is (``NOTHING``); an event the state does not expect raises UnexpectedEvent."""
    if state.terminal:
        return state, Action.NOTHING
    if event not in _EXPECTED[state.phase]:
        raise UnexpectedEvent(f"{event.value!r} cannot answer {state.phase.value!r}; expected: "
                              f"{', '.join(e.value for e in expected_events(state))}")
    phase, ok = state.phase, event is Event.GATEWAY_OK
    if phase is Phase.SERVING:
        if event is Event.SKIP_DRAIN:
            return replace(state, phase=Phase.STOPPING, skip=True), Action.STOP
        return _go(state, Phase.CHECKING, Action.CHECK)
    if phase is Phase.CHECKING:
        if ok:
            return _go(state, Phase.LEAVING, Action.DEREGISTER)
        return _end(state, Phase.UNCHANGED, f"a gateway failed before the stop ({event.value}): nothing changed")
    if phase is Phase.LEAVING:
        if ok:
            return _go(state, Phase.DRAINING, Action.WAIT)
        return _go(replace(state, reason=f"leaving failed ({event.value})"), Phase.RESTORING, Action.REGISTER)
    if phase is Phase.RESTORING:
        if ok:
            return _end(state, Phase.UNCHANGED, "a gateway failed the leave before the stop; the worker is back in "
                                                "every gateway, nothing else changed")
        return _retry(state, event, Action.REGISTER, "registering the old revision again after a failed leave")
    if phase is Phase.DRAINING:
        if event is Event.DRAIN_TIMEOUT:
            state = replace(state, drain_timed_out=True)
        return _go(state, Phase.STOPPING, Action.STOP)
    if phase is Phase.STOPPING:
        return _go(state, Phase.STARTING, Action.START)
    if phase is Phase.STARTING:
        if event is Event.STARTED:
            return _go(state, Phase.GATING, Action.GATE)
        return _go(state, Phase.ROLLING_BACK, Action.ROLL_BACK)
    if phase is Phase.GATING:
        if event is Event.GATE_PASS:
            if state.skip:
                return _end(state, Phase.DONE, "the new revision passed its gate; the gateways' health checks "
                                               "admit it (drain skipped)")
            return _go(state, Phase.ADMITTING, Action.REGISTER)
        return _go(state, Phase.ROLLING_BACK, Action.ROLL_BACK)
    if phase is Phase.ADMITTING:
        if ok:
            return _end(state, Phase.DONE, "the new revision passed its gate and every gateway lists it")
        if event is Event.CRASH:
            return _go(state, Phase.EVICTING_FOR_ROLLBACK, Action.DEREGISTER)
        return _retry(state, event, Action.REGISTER, "registering the new revision")
    if phase is Phase.ROLLING_BACK:
        if event is Event.ROLLBACK_PASS:
            if state.skip:
                return _end(state, Phase.ROLLED_BACK, "the gate failed; the previous revision is back and passed its "
                                                      "gate; the gateways' health checks admit it (drain skipped)")
            return _go(state, Phase.READMITTING, Action.REGISTER)
        if state.skip:  # still in the gateways' lists: take it out
            return _go(state, Phase.EVICTING, Action.DEREGISTER)
        return _end(state, Phase.OUT, "the gate failed and so did the rollback: the worker stays out of its "
                                      "gateways")
    if phase is Phase.READMITTING:
        if ok:
            return _end(state, Phase.ROLLED_BACK, "the gate failed; the previous revision is back, passed its gate "
                                                  "and every gateway lists it again")
        if event is Event.CRASH:
            return _go(state, Phase.EVICTING, Action.DEREGISTER)
        return _retry(state, event, Action.REGISTER, "registering the previous revision again")
    if phase is Phase.EVICTING_FOR_ROLLBACK:
        if ok:
            return _go(state, Phase.ROLLING_BACK, Action.ROLL_BACK)
        return _retry(state, event, Action.DEREGISTER, "deregistering the crashed new revision")
    # Phase.EVICTING
    if ok:
        return _end(state, Phase.OUT, "no gated revision serves: the worker is out of its gateways")
    return _retry(state, event, Action.DEREGISTER, "deregistering a worker that serves no gated revision")


def run(events: "list[Event] | tuple[Event, ...]", state: WorkerState | None = None
        ) -> tuple[WorkerState, list[Action]]:
    """Feed ``events`` in order from ``state`` (the start: SERVING); the end state and the actions."""
    state = state or WorkerState()
    actions = []
    for event in events:
        state, action = step(state, event)
        actions.append(action)
    return state, actions
