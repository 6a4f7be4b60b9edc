"""Shared test helpers. Stand-ins live under tests/fixtures and are named as such."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from sglang_deploy.commands.demo import PORT_RANGE as DEMO_PORTS
from sglang_deploy.commands.demo import free_port as free_port  # the tests' own servers use it too

# The inner loop keeps its bytecode as .ci/run does (it unsets PYTHONDONTWRITEBYTECODE, which this
# machine's image sets): otherwise every run compiles the project's modules and rewrites every test
# module's asserts again, about 6 of the unit tier's 9 s of collection. This process only; the
# processes a test starts keep the caller's setting. __pycache__ is git-ignored.
sys.dont_write_bytecode = False

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


#: Where the servers a test starts listen: the demo's band (sglang_deploy/commands/demo.py, its
#: free_port), below the kernel's ephemeral range, from which every outgoing connection takes its
#: local port, so that one made meanwhile (an e2e file's SSH, say) cannot take a port picked and
#: released here before the server binds it (CI saw sglang-router fail with "Address already in
#: use" so); and below the testbed's sshd ports and the e2e files' fixed ones
#: (tests/test_e2e_ports.py keeps them apart).
FREE_PORTS = range(*DEMO_PORTS)


def load_probe(name: str) -> dict[str, Any]:
    """A GPU probe stand-in (tests/fixtures/probes), see its README."""
    return json.loads((FIXTURES / "probes" / f"{name}.json").read_text())


@pytest.fixture
def repo_root() -> Path:
    return ROOT


def clean_env(**extra: str) -> dict[str, str]:
    """This environment for a simulated server or the router a test starts, without pip's, Python's,
    SGLang's and the Hub's variables: HF_HUB_OFFLINE=1 (below) makes the simulated server refuse a
    Hub id, and the router, which looks for a tokenizer on the Hub, then fails at once."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "SGLANG_", "HF_"))}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def sim_python(tmp_path_factory) -> Path:
    """python of a throwaway venv with the simulated sglang 0.5.23 installed."""
    from sglang_deploy.simulator.sglang_server import build
    tmp = tmp_path_factory.mktemp("sim")
    build.build_wheels(["0.5.23"], tmp / "wheels")
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True, env=clean_env())
    py = tmp / "venv" / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                    "--find-links", str(tmp / "wheels"), "sglang==0.5.23"], check=True, env=clean_env(), timeout=180)
    return py


_SESSION_CACHE: list[str] = []  # the whole run's model-facts cache (pytest_configure), removed at its end


def pytest_configure(config: pytest.Config) -> None:
    """Before anything is collected, the run's controller cache is a directory of its own: a test
    module that builds its subprocesses' environment at import (``ENV = {**os.environ, ...}``, as
    the e2e files do) then never plans from the user's cache, where a benchmark or an earlier run
    may have left other facts for the same model id (seen: a stand-in's 10 MB Qwen3.6-27B made
    the e2e hosts' plans two data-parallel replicas of TP 1). The fixtures below give each test a
    fresh one on top of that."""
    _SESSION_CACHE.append(tempfile.mkdtemp(prefix="sglang-deploy-test-cache-"))
    os.environ["XDG_CACHE_HOME"] = _SESSION_CACHE[-1]


def _isolate_from_the_hub(mp: pytest.MonkeyPatch, cache: Path) -> None:
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    mp.setenv("XDG_CACHE_HOME", str(cache))
    mp.delenv("HF_TOKEN", raising=False)


@pytest.fixture(scope="session")
def _test_caches(tmp_path_factory) -> Path:
    """One directory that holds every test's own cache directory. ``tmp_path_factory.mktemp``
    lists its whole base directory to number each new one, so a fresh one per test that way
    cost time quadratic in the tests run (about 16 s of a 65 s unit tier for 6,000 of them);
    ``tempfile.mkdtemp`` inside this one costs the same for the first test and the last."""
    return tmp_path_factory.mktemp("xdg-caches")


@pytest.fixture(scope="session", autouse=True)
def _no_real_hub_for_shared_fixtures(tmp_path_factory):
    """The same for module- and session-scoped fixtures, which pytest sets up before any
    function-scoped autouse fixture (a plan made there must not read the user's cache either)."""
    with pytest.MonkeyPatch.context() as mp:
        _isolate_from_the_hub(mp, tmp_path_factory.mktemp("xdg-cache-session"))
        yield


@pytest.fixture(autouse=True)
def _no_real_hub_and_no_real_cache(monkeypatch, _test_caches):
    """Plans resolve model facts (sglang_deploy/deploy/model_metadata.py): in tests the Hub is never the real
    one and the cache never the user's, and each test starts from an empty cache of its own. A
    test that wants the Hub stand-in sets HF_ENDPOINT and unsets HF_HUB_OFFLINE."""
    _isolate_from_the_hub(monkeypatch, Path(tempfile.mkdtemp(prefix="xdg-cache-", dir=_test_caches)))


# --- Tiers -------------------------------------------------------------------------------------
#
# Every test has exactly one tier (docs/testing.md):
#   unit         starts no process, opens no socket and does not sleep (enforced below);
#                `pytest -m unit` is the inner loop, meant to take under a minute;
#   integration  everything outside tests/e2e that is not unit: simulated servers, the router,
#                promtool, systemd-analyze, the CLI in a subprocess, waits on real time;
#   e2e          tests/e2e: throwaway hosts.
# The tier is decided per module, here and nowhere else: a module under tests/e2e is e2e, one
# named in INTEGRATION_MODULES is integration, every other one is unit. A new module is therefore
# unit until it needs more, and the guard below says so the first time it does.

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "e2e")

#: Test modules (paths relative to tests/) outside tests/e2e that start a process, open a socket
#: or sleep, directly or through the code they drive (the comment: what the guard saw first in
#: its tests). Found by running the tier with every module unit (docs/testing.md).
INTEGRATION_MODULES = frozenset({
    "test_alert_rules.py",               # process
    "test_balancer_haproxy.py",          # process (the real haproxy), socket, sleep
    "test_hostile_router.py",            # socket, sleep (a hostile peer on loopback)
    "test_build_catalogs.py",            # process
    "test_check_cli.py",                 # process, socket, sleep
    "test_cli.py",                       # process
    "test_cli_hostile.py",               # process, sleep
    "test_demo.py",                      # process, socket
    "test_e2e_ports.py",                 # socket
    "test_gate_hostile.py",              # sleep
    "test_gateway_client_real.py",       # socket
    "test_pd_gateway_real.py",           # process, socket, sleep (the real router in PD mode)
    "test_gateway_plan.py",              # process
    "test_gateway_tune.py",              # socket
    "test_gatezip.py",                   # process
    "test_gpu_health.py",                # process
    "test_gpu_probe.py",                 # process
    "test_hostile_writes.py",            # process (sh runs the deploy's commands)
    "test_hostile_metadata.py",          # socket, sleep
    "test_hub_stand_in.py",              # socket
    "test_inventory_properties.py",      # process
    "test_model_metadata.py",            # socket
    "test_prove_argv.py",                # process
    "test_readers_fuzz.py",              # socket
    "test_real_openai_server.py",        # process, socket (`transformers serve`; skipped without its venv)
    "test_render.py",                    # process
    "test_simulated_perf.py",            # process, socket
    "test_simulated_sglang.py",          # process, socket
    "test_simulated_start_phases.py",    # process, socket, sleep
    "test_simulated_weights.py",         # process
    "test_stage_weights.py",             # process, socket
    "test_stage_weights_hostile.py",     # process, socket
    "test_stage_weights_verify.py",      # process, socket
    "test_status.py",                    # process
    "test_status_gateway.py",            # socket
    "test_status_parallel.py",           # process, sleep
    "test_testbed_propagate.py",         # process
    "test_tune_layout.py",               # process
    "test_tune_search.py",               # process
    "test_watch.py",                     # process, socket
})


def tier_of(path: Path | str) -> str:
    """The tier of the test module at ``path`` (a test outside tests/, named on the command line,
    is integration: unguarded)."""
    try:
        rel = Path(path).resolve().relative_to(TESTS)
    except ValueError:
        return "integration"
    if rel.parts[0] == "e2e":
        return "e2e"
    return "integration" if rel.as_posix() in INTEGRATION_MODULES else "unit"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``-m unit`` alone does not import the other tiers' modules (about a third of the collection's
    time): every test they hold would be deselected. Any other selection collects everything."""
    if config.option.markexpr.strip() != "unit" or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_") or tier_of(collection_path) == "unit":
        return None
    return True


def tiers_of(item: pytest.Item) -> set[str]:
    return {m.name for m in item.iter_markers() if m.name in TIERS}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item.path)
        other = tiers_of(item) - {tier}
        if other:
            raise pytest.UsageError(f"{item.nodeid}: marked {', '.join(sorted(other))}, but its module is {tier}; "
                                    "a module's tier is set in tests/conftest.py (INTEGRATION_MODULES) only")
        if tier not in tiers_of(item):
            item.add_marker(getattr(pytest.mark, tier))


class TierViolation(BaseException):
    """A unit test started a process, opened a socket or slept. A BaseException, so that no
    ``except Exception`` in the code under test swallows it (and each one is also recorded: the
    test fails even where one was swallowed)."""


RULE = ("the unit tier's rule: a unit test starts no process, opens no socket and does not sleep; "
        "make the test do without, or list its module in INTEGRATION_MODULES in tests/conftest.py")


class UnitGuard:
    """Active around a unit test's setup (fixtures of every scope it brings up) and its call.

    Fires in the thread that runs the test and in threads started while it is active, not in
    threads an earlier (integration) test left running."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.violations: list[str] = []
        self._threads: set[threading.Thread] = set()
        self._outer: UnitGuard | None = None

    def __enter__(self) -> UnitGuard:
        global _ACTIVE
        _install_wrappers()
        self._threads = set(threading.enumerate()) - {threading.current_thread()}
        self._outer, _ACTIVE = _ACTIVE, self
        return self

    def __exit__(self, *exc: object) -> None:
        global _ACTIVE
        _ACTIVE = self._outer

    def watches_this_thread(self) -> bool:
        return threading.current_thread() not in self._threads

    def violate(self, what: str) -> TierViolation:
        message = f"{self.nodeid} is a unit test but {what}: {RULE}"
        self.violations.append(message)
        return TierViolation(message)


_ACTIVE: UnitGuard | None = None


def _guard() -> UnitGuard | None:
    guard = _ACTIVE
    return guard if guard is not None and guard.watches_this_thread() else None


def _describe_args(args: Any) -> str:
    if isinstance(args, (str, bytes, os.PathLike)):
        return repr(os.fsdecode(args))
    try:
        return repr([os.fsdecode(a) for a in args][:6])
    except TypeError:
        return repr(args)


_NET_FAMILIES = tuple(getattr(socket, f) for f in ("AF_INET", "AF_INET6", "AF_UNIX") if hasattr(socket, f))


def _socket_wrapper(name: str, original: Any) -> Any:
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        guard = _guard()
        if guard is not None and getattr(self, "family", None) in _NET_FAMILIES:
            address = args[0] if name != "sendto" else args[-1]
            family = socket.AddressFamily(self.family).name
            raise guard.violate(f"opened a socket (socket.{name} to {address!r}, {family})")
        return original(self, *args, **kwargs)
    return guarded


def _process_wrapper(name: str, original: Any, method: bool = False) -> Any:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        guard = _guard()
        if guard is not None:
            argv = args[1] if method and len(args) > 1 else args[0] if args and not method else ""
            shown = f" {_describe_args(argv)}" if argv != "" else ""
            raise guard.violate(f"started a process ({name}{shown})")
        return original(*args, **kwargs)
    return guarded


def _sleep_wrapper(name: str, original: Any) -> Any:
    def guarded(seconds: float = 0, *args: Any, **kwargs: Any) -> Any:
        guard = _guard()
        if guard is not None and seconds and seconds > 0:
            raise guard.violate(f"slept ({name}({seconds!r}))")
        return original(seconds, *args, **kwargs)
    return guarded


def _patch_points() -> list[tuple[Any, str, Any]]:
    """(owner, attribute, wrapper factory) for every way to start a process, open a socket or sleep,
    in the standard library and in gevent's versions of it (pyinfra's CLI package monkey-patches
    with gevent on import, so both are live in a test run)."""
    import _posixsubprocess
    import subprocess as subprocess_module
    import time

    points: list[tuple[Any, str, Any]] = []
    popens = {subprocess_module.Popen, _STDLIB_POPEN}
    sockets = {socket.socket, _STDLIB_SOCKET}
    gevent_module = sys.modules.get("gevent")
    if "gevent.subprocess" in sys.modules:
        popens.add(sys.modules["gevent.subprocess"].Popen)
    if "gevent._socket3" in sys.modules:
        sockets.add(sys.modules["gevent._socket3"].socket)
    for popen in popens:
        points.append((popen, "_execute_child",
                       lambda orig, n=f"{popen.__module__}.Popen": _process_wrapper(n, orig, method=True)))
    points.append((subprocess_module, "_fork_exec", lambda orig: _process_wrapper("_posixsubprocess.fork_exec", orig)))
    points.append((_posixsubprocess, "fork_exec", lambda orig: _process_wrapper("_posixsubprocess.fork_exec", orig)))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve"):
        if hasattr(os, name):
            points.append((os, name, lambda orig, n=f"os.{name}": _process_wrapper(n, orig)))
    for cls in sockets:
        for name in ("connect", "connect_ex", "bind", "sendto"):
            points.append((cls, name, lambda orig, n=name: _socket_wrapper(n, orig)))
    points.append((time, "sleep", lambda orig: _sleep_wrapper("time.sleep", orig)))
    if gevent_module is not None:
        points.append((gevent_module, "sleep", lambda orig: _sleep_wrapper("gevent.sleep", orig)))
    if _gevent_monkey is not None:
        points.append((_gevent_monkey, "patch_all", _rewrap_after))
    return points


def _rewrap_after(original: Any) -> Any:
    """gevent.monkey.patch_all, then the guard's wrappers around what it put in place: a unit test
    that imports pyinfra's CLI package first (a run of one module) is guarded from then on."""
    def patch_all(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        _install_wrappers()
        return result
    return patch_all


try:  # importing it patches nothing; pyinfra's CLI package calls its patch_all on import
    import gevent.monkey as _gevent_monkey
except ImportError:  # pragma: no cover - gevent comes with pyinfra
    _gevent_monkey = None


_STDLIB_POPEN = subprocess.Popen
_STDLIB_SOCKET = socket.socket
#: (owner, attribute) -> the original, for every wrapper installed
_WRAPPED: dict[tuple[Any, str], Any] = {}


def _install_wrappers() -> None:
    """Wrap every patch point not wrapped yet. The wrappers stay for the whole run and pass through
    unless a unit test is running: gevent (or any monkey-patcher) that takes one as its "original"
    keeps working; one that replaces one is wrapped again before the next unit test."""
    for owner, attr, factory in _patch_points():
        current = getattr(owner, attr, None)
        if current is None or getattr(current, "__tier_guard__", False):
            continue
        wrapper = factory(current)
        wrapper.__tier_guard__ = True
        wrapper.__wrapped__ = current
        _WRAPPED[(owner, attr)] = current
        setattr(owner, attr, wrapper)


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    for path in _SESSION_CACHE:
        shutil.rmtree(path, ignore_errors=True)
    _SESSION_CACHE.clear()
    for (owner, attr), original in _WRAPPED.items():
        if getattr(getattr(owner, attr, None), "__tier_guard__", False):
            setattr(owner, attr, original)
    _WRAPPED.clear()


_GUARD_KEY = pytest.StashKey[UnitGuard]()


def _guarded(item: pytest.Item) -> UnitGuard | None:
    if "unit" not in tiers_of(item):
        return None
    if _GUARD_KEY not in item.stash:
        item.stash[_GUARD_KEY] = UnitGuard(item.nodeid)
    return item.stash[_GUARD_KEY]


def _run_guarded(item: pytest.Item) -> Any:
    guard = _guarded(item)
    if guard is None:
        return (yield)
    with guard:
        try:
            result = yield
        except TierViolation:
            raise
        except BaseException as error:
            if guard.violations and not isinstance(error, (pytest.skip.Exception, GeneratorExit)):
                raise TierViolation("\n".join(guard.violations)) from error
            raise
    if guard.violations:
        raise TierViolation("\n".join(guard.violations) + "\n(raised where the code under test caught it)")
    return result


# Hooks, not an autouse fixture: a function-scoped fixture starts only after the module- and
# session-scoped fixtures a test brings up, which would then start servers unguarded. Teardown is
# left out: the last test of a run tears down every session fixture, whatever its tier.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    """The guard covers a unit test's setup too: fixtures of every scope it brings up."""
    return (yield from _run_guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    return (yield from _run_guarded(item))


@pytest.fixture
def unit_guard(request: pytest.FixtureRequest) -> UnitGuard | None:
    """The guard of this test (None outside the unit tier), for tests of the guard itself."""
    return _guarded(request.node)


# CPU seconds by test module, printed with --durations (as .ci/run runs every tier and lane): this
# process's and those of the processes it waited for while the module's tests ran: its pyinfra runs,
# commands and servers. A throwaway host counts where it is stopped (each host's init reaps its
# processes and systemd-nspawn waits for it): the session's testbed stops most at the end of the run,
# so they count in the last module. CI is bound by its two cores, and this says which files spend them.
_CPU_BY_MODULE: dict[str, float] = {}


def _cpu_seconds() -> float:
    own, waited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    start = _cpu_seconds()
    try:
        return (yield)
    finally:
        module = item.nodeid.split("::", 1)[0]
        _CPU_BY_MODULE[module] = _CPU_BY_MODULE.get(module, 0.0) + _cpu_seconds() - start


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if config.option.durations is None or not _CPU_BY_MODULE:
        return
    ranked = sorted(_CPU_BY_MODULE.items(), key=lambda kv: -kv[1])
    terminalreporter.write_sep("=", f"CPU seconds by module ({sum(_CPU_BY_MODULE.values()):.0f} in all; the top 8)")
    for module, seconds in ranked[:8]:
        terminalreporter.write_line(f"{seconds:8.1f}  {module}")
