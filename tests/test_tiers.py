"""The test tiers (tests/conftest.py, docs/testing.md): every test has exactly one, and the unit
tier's rule (no process, no socket, no sleep) is enforced, not assumed. This module is unit: the
guard is active around each test here, which is how the tests below see it fire."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import INTEGRATION_MODULES, RULE, TESTS, TIERS, TierViolation, UnitGuard, _run_guarded, tier_of


def modules_outside_e2e() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "e2e" not in p.relative_to(TESTS).parts)


def test_every_module_outside_e2e_is_unit_or_integration_and_e2e_is_e2e():
    modules = modules_outside_e2e()
    assert len(modules) > 50
    tiers = {m.relative_to(TESTS).as_posix(): tier_of(m) for m in modules}
    assert set(tiers.values()) == {"unit", "integration"}
    assert {m for m, t in tiers.items() if t == "integration"} == set(INTEGRATION_MODULES)
    for m in (TESTS / "e2e").glob("test_*.py"):
        assert tier_of(m) == "e2e", m


def test_the_integration_list_names_existing_modules_outside_e2e():
    stale = sorted(m for m in INTEGRATION_MODULES if not (TESTS / m).is_file() or m.startswith("e2e/"))
    assert not stale, f"INTEGRATION_MODULES in tests/conftest.py names modules that are not there: {stale}"


def test_no_module_sets_a_tier_of_its_own():
    """The tier is decided in tests/conftest.py alone; a module's own tier marker is refused at
    collection, and this says which module has one without a run."""
    own = [m.relative_to(TESTS).as_posix() for m in modules_outside_e2e()
           if any(f"pytest.mark.{t}" in m.read_text() for t in TIERS) and m.name != "test_tiers.py"]
    assert not own


def test_every_collected_test_has_exactly_one_tier_that_of_its_module(request):
    items = request.session.items
    assert request.node in items
    wrong = [(i.nodeid, sorted(n)) for i in items
             if (n := {m.name for m in i.iter_markers() if m.name in TIERS}) != {tier_of(i.path)}]
    assert not wrong


def test_the_tiers_are_registered_markers(pytestconfig):
    registered = {line.split(":", 1)[0].strip() for line in pytestconfig.getini("markers")}
    assert set(TIERS) <= registered
    assert pytestconfig.option.strict_markers or "--strict-markers" in pytestconfig.getini("addopts")


def test_this_module_is_guarded(unit_guard):
    assert tier_of(__file__) == "unit"
    assert isinstance(unit_guard, UnitGuard)


@contextmanager
def violation(guard: UnitGuard, match: str) -> Iterator[None]:
    """The block violates the rule on purpose: it must raise, naming what it did and the rule, and
    be recorded; then it is forgotten, so that the test itself passes."""
    with pytest.raises(TierViolation, match=match) as raised:
        yield
    assert RULE in str(raised.value)
    assert guard.violations == [str(raised.value)]
    guard.violations.clear()


def test_starting_a_process_fails_a_unit_test(unit_guard):
    with violation(unit_guard, r"started a process .*'true'"):
        subprocess.run(["true"], check=False)
    with violation(unit_guard, r"started a process .*'echo', 'x'"):
        subprocess.check_output(["echo", "x"])
    with violation(unit_guard, "os.posix_spawn"):
        os.posix_spawn("/bin/true", ["true"], dict(os.environ))
    with violation(unit_guard, "os.system"):
        os.system("true")


def test_forking_fails_a_unit_test(unit_guard):
    with violation(unit_guard, "os.fork"):
        if os.fork() == 0:  # the guard failed: the child leaves at once
            os._exit(0)


def test_a_socket_connect_fails_a_unit_test(unit_guard):
    with violation(unit_guard, r"opened a socket \(socket.connect to \('127.0.0.1', 9\), AF_INET\)"):
        socket.create_connection(("127.0.0.1", 9), timeout=1)
    import httpx
    with violation(unit_guard, "opened a socket"):
        httpx.get("http://127.0.0.1:9/", timeout=1)


def test_binding_a_socket_fails_a_unit_test_unix_sockets_too(unit_guard, tmp_path):
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s, violation(unit_guard, "AF_INET6"):
        s.bind(("::1", 0))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s, violation(unit_guard, "socket.bind .*AF_UNIX"):
        s.bind(str(tmp_path / "sock"))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s, violation(unit_guard, "socket.connect .*AF_UNIX"):
        s.connect(str(tmp_path / "sock"))


def test_a_sleep_fails_a_unit_test(unit_guard):
    with violation(unit_guard, r"slept \(time.sleep\(0.001\)\)"):
        time.sleep(0.001)


def test_a_sleep_of_nothing_is_allowed(unit_guard):
    time.sleep(0)
    assert not unit_guard.violations


def test_a_thread_the_test_starts_is_guarded_too(unit_guard):
    caught: list[BaseException] = []

    def sleeper() -> None:
        try:
            time.sleep(0.001)
        except BaseException as error:
            caught.append(error)

    thread = threading.Thread(target=sleeper)
    with violation(unit_guard, "slept"):
        thread.start()
        thread.join()
        raise caught[0]


class _Item:
    """What the guard reads of a test item."""

    def __init__(self, tier: str) -> None:
        self.nodeid = f"tests/test_example.py::test_{tier}"
        self.stash = pytest.Stash()
        self._mark = getattr(pytest.mark, tier).mark

    def iter_markers(self):
        return iter([self._mark])


def test_a_violation_the_code_under_test_swallows_still_fails_the_test():
    phase = _run_guarded(_Item("unit"))  # as pytest drives the call phase of a unit test
    next(phase)
    try:
        subprocess.run(["true"])
    except BaseException:  # the code under test swallowing everything
        pass
    with pytest.raises(TierViolation, match="caught it"):
        phase.send(None)


def test_an_integration_test_is_not_guarded():
    phase = _run_guarded(_Item("integration"))
    next(phase)
    with pytest.raises(StopIteration):
        phase.send("the result")


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers()))
def test_hypothesis_runs_under_the_guard(xs):
    assert sorted(sorted(xs)) == sorted(xs)
