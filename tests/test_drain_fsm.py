"""The drain state machine (sglang_deploy/lifecycle/drain.py) against a model of the world it acts on.

The model (``World``) is written here from the actions' meaning alone, not from the machine's
table: a register the gateways confirmed puts the worker in, a deregister out, a failed one
leaves its membership unknown; a stop, a start, a gate, a rollback and a crash change what the
host serves. Any interleaving of the events each state can see, drawn by Hypothesis and, the
graph being small, walked path by path, must keep the rules of the module's docstring.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_deploy.lifecycle.drain import (GATEWAY_FAILURES, MAX_GATEWAY_ATTEMPTS, MAX_STEPS, Action, Event, Phase,
                                      UnexpectedEvent, WorkerState, expected_events, run, step)

IN, OUT, UNKNOWN = "in", "out", "unknown"


@dataclass(frozen=True)
class World:
    registered: str = IN  # in every gateway, in none, or not known
    serving: str | None = "old"  # "old", "new" or None (stopped / crashed)
    gated: bool = True  # the serving revision passed its gate
    stopped_ever: bool = False

    @property
    def serves_gated(self) -> bool:
        return self.serving is not None and self.gated


@functools.cache  # pure, over a few hundred (world, action, event): the walk below asks it 100,000 times
def answer(world: World, action: Action | None, event: Event) -> World:
    """What ``event``, answering ``action``, says about the world."""
    if event is Event.CRASH:
        world = replace(world, serving=None, gated=False)
        if action is Action.REGISTER and world.registered != IN:
            world = replace(world, registered=UNKNOWN)  # the request may have gone through
        return world
    if action is Action.DEREGISTER:
        if event is Event.GATEWAY_OK:
            return replace(world, registered=OUT)
        return world if world.registered == OUT else replace(world, registered=UNKNOWN)
    if action is Action.REGISTER:
        if event is Event.GATEWAY_OK:
            return replace(world, registered=IN)
        return world if world.registered == IN else replace(world, registered=UNKNOWN)
    if action is Action.STOP and event is Event.STOPPED:
        return replace(world, serving=None, gated=False, stopped_ever=True)
    if action is Action.START and event is Event.STARTED:
        return replace(world, serving="new", gated=False)
    if action is Action.GATE:
        return replace(world, gated=event is Event.GATE_PASS)
    if action is Action.ROLL_BACK:
        return replace(world, serving="old", gated=event is Event.ROLLBACK_PASS)
    return world


@dataclass(frozen=True)
class Trace:
    state: WorkerState
    world: World
    events: tuple[Event, ...]
    actions: tuple[Action, ...]


START = Trace(WorkerState(), World(), (), ())


def advance(t: Trace, event: Event) -> Trace:
    """One step of the machine and of the world, checking the rules that hold at every step."""
    world = answer(t.world, t.actions[-1] if t.actions else None, event)
    state, action = step(t.state, event)
    t = Trace(state, world, t.events + (event,), t.actions + (action,))
    # never stopped while registered (unless the gateways are deliberately left to their health checks)
    if action is Action.STOP and not state.skip:
        assert world.registered == OUT, (t.events, world)
    # never registered unless serving a gated revision
    if action is Action.REGISTER:
        assert world.serves_gated, (t.events, world)
    if action is Action.START:
        assert world.serving is None
    assert len(t.events) <= MAX_STEPS, t.events
    assert state.terminal or expected_events(state), state
    return t


def play(choices: list[int], first: Event) -> Trace:
    """From SERVING with ``first``, then at each state the event ``choices`` picks among the
    ones it expects (the choices are many: every run ends before they do)."""
    t = advance(START, first)
    for choice in choices:
        if t.state.terminal:
            return t
        options = expected_events(t.state)
        t = advance(t, options[choice % len(options)])
    raise AssertionError(f"no end after {len(t.events)} events: {t.events}")


def check_end(t: Trace) -> None:
    s, w = t.state, t.world
    stop = next((i for i, a in enumerate(t.actions) if a is Action.STOP), len(t.events))
    failures_before_stop = any(e in GATEWAY_FAILURES for e in t.events[:stop + 1])
    if s.phase is Phase.GATEWAY_LOST:
        # only a gateway that failed every try of one change ends here
        assert all(e in GATEWAY_FAILURES for e in t.events[-MAX_GATEWAY_ATTEMPTS:]), t.events
        assert t.actions[-1] is Action.FAIL_HOST
        return
    # a worker is registered exactly when it serves a gated revision, and its membership is known
    assert w.registered != UNKNOWN, t.events
    assert (w.registered == IN) == w.serves_gated, (t.events, w)
    if s.phase is Phase.DONE:
        assert w.serving == "new" and w.gated and t.actions[-1] is Action.NOTHING
    elif s.phase is Phase.ROLLED_BACK:
        assert w.serving == "old" and w.gated and t.actions[-1] is Action.FAIL_HOST
    elif s.phase is Phase.UNCHANGED:
        assert w.serving == "old" and w.gated and not w.stopped_ever and t.actions[-1] is Action.FAIL_HOST
    else:
        assert s.phase is Phase.OUT and w.registered == OUT and t.actions[-1] is Action.FAIL_HOST
    # a gateway failure before the stop fails the host before anything changes (drain not skipped)
    if failures_before_stop and not s.skip:
        assert s.phase is Phase.UNCHANGED and not w.stopped_ever, t.events


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=15), min_size=MAX_STEPS, max_size=MAX_STEPS),
       st.sampled_from([Event.RESTART, Event.SKIP_DRAIN]))
def test_any_interleaving_keeps_the_rules(choices: list[int], first: Event) -> None:
    check_end(play(choices, first))


def all_paths(t: Trace) -> Iterator[Trace]:
    """Every run from ``t`` on: each event the state expects, depth first (a stack, not one
    generator per level that each run's end would pass up through)."""
    stack = [t]
    while stack:
        t = stack.pop()
        if t.state.terminal:
            yield t
        else:
            stack.extend(reversed([advance(t, event) for event in expected_events(t.state)]))


@pytest.mark.parametrize("first", [Event.RESTART, Event.SKIP_DRAIN])
def test_every_path_keeps_the_rules_and_ends_within_the_bound(first: Event) -> None:
    lengths, ends = [], set()
    for t in all_paths(advance(START, first)):
        check_end(t)
        lengths.append(len(t.events))
        ends.add(t.state.phase)
    if first is Event.RESTART:
        assert max(lengths) == MAX_STEPS  # the bound is the longest path, not a loose guess
        assert ends == {Phase.DONE, Phase.UNCHANGED, Phase.ROLLED_BACK, Phase.OUT, Phase.GATEWAY_LOST}
    else:
        assert max(lengths) <= MAX_STEPS
        assert ends == {Phase.DONE, Phase.ROLLED_BACK, Phase.OUT, Phase.GATEWAY_LOST}


# -- the paths a reader of the rules expects, spelled out --------------------------------------

E = Event
A = Action


def test_the_ordinary_restart():
    state, actions = run([E.RESTART, E.GATEWAY_OK, E.GATEWAY_OK, E.DRAIN_DONE, E.STOPPED, E.STARTED, E.GATE_PASS,
                          E.GATEWAY_OK])
    assert actions == [A.CHECK, A.DEREGISTER, A.WAIT, A.STOP, A.START, A.GATE, A.REGISTER, A.NOTHING]
    assert state.phase is Phase.DONE and not state.drain_timed_out


def test_a_drain_timeout_stops_anyway_and_says_so():
    state, actions = run([E.RESTART, E.GATEWAY_OK, E.GATEWAY_OK, E.DRAIN_TIMEOUT])
    assert actions[-1] is A.STOP and state.drain_timed_out


@pytest.mark.parametrize("failure", [E.GATEWAY_UNREACHABLE, E.GATEWAY_ERROR])
def test_an_unreachable_gateway_fails_the_host_before_anything_changes(failure):
    state, actions = run([E.RESTART, failure])
    assert actions == [A.CHECK, A.FAIL_HOST] and state.phase is Phase.UNCHANGED
    assert failure.value in state.reason


def test_a_leave_that_fails_half_way_is_undone_before_the_host_fails():
    state, actions = run([E.RESTART, E.GATEWAY_OK, E.GATEWAY_ERROR, E.GATEWAY_OK])
    assert actions == [A.CHECK, A.DEREGISTER, A.REGISTER, A.FAIL_HOST]
    assert state.phase is Phase.UNCHANGED and A.STOP not in actions


def test_a_failed_gate_whose_rollback_regates_registers_the_old_revision_again():
    state, actions = run([E.RESTART, E.GATEWAY_OK, E.GATEWAY_OK, E.DRAIN_DONE, E.STOPPED, E.STARTED, E.GATE_FAIL,
                          E.ROLLBACK_PASS, E.GATEWAY_OK])
    assert actions[-3:] == [A.ROLL_BACK, A.REGISTER, A.FAIL_HOST] and state.phase is Phase.ROLLED_BACK


def test_a_failed_rollback_leaves_the_worker_out():
    state, actions = run([E.RESTART, E.GATEWAY_OK, E.GATEWAY_OK, E.DRAIN_DONE, E.STOPPED, E.STARTED, E.GATE_FAIL,
                          E.ROLLBACK_FAIL])
    assert actions[-2:] == [A.ROLL_BACK, A.FAIL_HOST] and state.phase is Phase.OUT
    assert A.REGISTER not in actions


def test_a_crash_after_the_gate_takes_the_worker_out_before_the_rollback():
    state, actions = run([E.RESTART, E.GATEWAY_OK, E.GATEWAY_OK, E.DRAIN_DONE, E.STOPPED, E.STARTED, E.GATE_PASS,
                          E.CRASH, E.GATEWAY_OK, E.ROLLBACK_PASS, E.GATEWAY_OK])
    assert actions[-4:] == [A.DEREGISTER, A.ROLL_BACK, A.REGISTER, A.FAIL_HOST]
    assert state.phase is Phase.ROLLED_BACK


def test_a_gateway_that_keeps_failing_the_admission_is_given_up():
    head = [E.RESTART, E.GATEWAY_OK, E.GATEWAY_OK, E.DRAIN_DONE, E.STOPPED, E.STARTED, E.GATE_PASS]
    state, actions = run(head + [E.ADMIT_TIMEOUT] * (MAX_GATEWAY_ATTEMPTS - 1) + [E.GATEWAY_OK])
    assert state.phase is Phase.DONE and actions.count(A.REGISTER) == MAX_GATEWAY_ATTEMPTS
    state, actions = run(head + [E.GATEWAY_UNREACHABLE] * MAX_GATEWAY_ATTEMPTS)
    assert state.phase is Phase.GATEWAY_LOST and actions[-1] is A.FAIL_HOST and "unknown" in state.reason


def test_skip_leaves_the_gateways_alone():
    state, actions = run([E.SKIP_DRAIN, E.STOPPED, E.STARTED, E.GATE_PASS])
    assert actions == [A.STOP, A.START, A.GATE, A.NOTHING] and state.phase is Phase.DONE and state.skip
    # ... until a failed rollback: then it is taken out
    state, actions = run([E.SKIP_DRAIN, E.STOPPED, E.STARTED, E.GATE_FAIL, E.ROLLBACK_FAIL, E.GATEWAY_OK])
    assert actions[-2:] == [A.DEREGISTER, A.FAIL_HOST] and state.phase is Phase.OUT


def test_an_event_the_state_cannot_see_is_a_glue_bug():
    with pytest.raises(UnexpectedEvent, match="'gate pass' cannot answer 'checking'"):
        run([E.RESTART, E.GATE_PASS])
    with pytest.raises(UnexpectedEvent):
        step(WorkerState(), E.GATEWAY_OK)


def test_a_terminal_state_stays():
    state, _ = run([E.RESTART, E.GATEWAY_ERROR])
    assert step(state, E.GATEWAY_OK) == (state, A.NOTHING) and expected_events(state) == ()
