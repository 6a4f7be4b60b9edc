"""The simulated server's send loop (sglang_deploy/simulator/sglang_server/src/sglang/_sim/streaming.py
``run_schedule``) on a clock the test moves. Deadlines are absolute: a chunk sent late is caught up, so a
wake-up error per chunk never adds up and a request ends on time on a loaded machine (the load tests and
the check's figures rely on it). The price, pinned here: a late first chunk shortens the window a client
times from the first chunk to the last, so a rate read from a short stream can read high; the tests that
read one time a second or more of tokens (tests/e2e/test_gate_deploy.py: 256 tokens at 200 tok/s)."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any, List

import pytest

SIM = Path(__file__).resolve().parent.parent / "sglang_deploy/simulator/sglang_server/src/sglang/_sim"


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """engine.py and streaming.py as the wheel holds them, under their own names (``sglang._sim.*``)
    for this test only, so that no real ``sglang`` on the path is touched."""
    for name in ("sglang", "sglang._sim"):
        package = types.ModuleType(name)
        package.__path__ = []  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, name, package)
    loaded = {}
    for name in ("http_types", "engine", "streaming"):
        spec = importlib.util.spec_from_file_location(f"sglang._sim.{name}", SIM / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, f"sglang._sim.{name}", module)
        spec.loader.exec_module(module)
        loaded[name] = module
    return types.SimpleNamespace(**loaded)


class Clock:
    """time.monotonic and sleep_until for the send loop: sleeping moves the clock to the deadline,
    and a send that the test marks as held up adds that much before the clock is read again."""

    def __init__(self, held_up: dict[int, float]):
        self.now = 100.0
        self.held_up = held_up
        self.sends = 0
        self.deadlines: List[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep_until(self, deadline: float) -> None:
        self.deadlines.append(deadline)
        self.now = max(self.now, deadline)

    def emit(self, start: int, size: int) -> None:
        self.now += self.held_up.get(self.sends, 0.0)
        self.sends += 1


def run(sim: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch, held_up: dict[int, float],
        tokens: int = 11, rate: float = 100.0) -> tuple[Clock, Any]:
    clock = Clock(held_up)
    monkeypatch.setattr(sim.streaming, "sleep_until", clock.sleep_until)
    monkeypatch.setattr(sim.streaming, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    plan = sim.engine.Plan(prompt_tokens=4, completion_tokens=tokens, finish_reason="length",
                           chunks=[1] * tokens, t0=clock.now, rate=rate, speculative=False)
    recorded: list[tuple[float | None, float | None]] = []
    app = types.SimpleNamespace(engine=types.SimpleNamespace(
        stats=types.SimpleNamespace(record=lambda _plan, first, last: recorded.append((first, last)))))
    first, last = sim.streaming.run_schedule(types.SimpleNamespace(app=app), plan, clock.emit)
    assert recorded == [(first, last)]
    return clock, (first, last)


def test_on_time_the_stream_keeps_its_rate_to_the_token(sim, monkeypatch):
    clock, (first, last) = run(sim, monkeypatch, held_up={})
    assert clock.deadlines == pytest.approx([100.0 + i / 100.0 for i in range(11)])
    assert (11 - 1) / (last - first) == pytest.approx(100.0)


def test_a_wake_up_error_on_every_chunk_does_not_add_up(sim, monkeypatch):
    # every send 2 ms late (the sleep's own error): the deadlines stay where they were
    clock, (first, last) = run(sim, monkeypatch, held_up={i: 0.002 for i in range(11)})
    assert clock.deadlines == pytest.approx([100.0 + i / 100.0 for i in range(11)])
    assert last - first == pytest.approx(0.1)


def test_a_stall_mid_stream_is_caught_up_and_the_request_ends_on_time(sim, monkeypatch):
    clock, (first, last) = run(sim, monkeypatch, held_up={4: 0.03})
    assert clock.deadlines == pytest.approx([100.0 + i / 100.0 for i in range(11)])
    assert last == pytest.approx(100.1)


def test_a_late_first_chunk_shortens_the_window_a_client_times(sim, monkeypatch):
    # held up 50 ms: the next five chunks are already due and go at once; ten tokens in 0.05 s read
    # 200 tok/s from a 100 tok/s stream. Over 256 tokens at 200 tok/s (tests/e2e/test_gate_deploy.py)
    # the same 50 ms moves the rate 4%.
    _, (first, last) = run(sim, monkeypatch, held_up={0: 0.05})
    assert first == pytest.approx(100.05) and last == pytest.approx(100.1)
    assert (11 - 1) / (last - first) == pytest.approx(200.0)
    _, (first, last) = run(sim, monkeypatch, held_up={0: 0.05}, tokens=256, rate=200.0)
    assert (256 - 1) / (last - first) / 200.0 == pytest.approx(1.04, abs=0.005)
