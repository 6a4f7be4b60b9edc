"""The gateway client (sglang_deploy/deploy/gateway_client.py) and the deploy's own drain path
(the state machine of sglang_deploy/lifecycle/drain.py carried out by sglang_deploy/deploy/restart_run.py,
``drive`` on a ``RestartRun``: what a serving host's deploy runs around its restart) against the
REAL SGLang Model Gateway (sglang-router 0.3.2, from the test environment) in front of SIMULATED
SGLang 0.5.23 servers (sglang_deploy/simulator/sglang_server, stand-ins at the HTTP boundary),
with a client load of streamed chat completions running through the gateway the whole time:

- the deploy's restart (check, deregister, wait for the worker's in-flight requests -> stop ->
  start -> gate passed -> register) loses no client request; killing a registered worker does
  lose some (so the first can fail);
- a gateway with an API key: the client with the key works, without it (or with a wrong one)
  it is refused, and no message carries a key (the client's, nor the deploy's restart's lines);
  a worker added without its own key is reported;
- a gateway failing half-way through the leave: the worker is back where it had left (the
  state machine ends UNCHANGED, or GATEWAY_LOST when that gateway keeps failing);
- a request that never ends makes the drain give up at its timeout, and the stop goes ahead.

And, without processes, the parsing of the gateway's answers recorded from the real router
(tests/fixtures/gateway, see its README), hostile variants of them, and the client's requests
against those recordings replayed by an httpx stand-in transport.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

from sglang_deploy.deploy import restart_run
from sglang_deploy.deploy.gateway_client import (MAX_WORKERS, Gateway, GatewayError, in_flight, parse_in_flight,
                                                 parse_workers)
from sglang_deploy.lifecycle import drain
from sglang_deploy.plan.gateway import DrainSettings, WorkerMembership
from tests.conftest import FIXTURES, free_port
from tests.gateway_load import ClientLoad

RECORDED = FIXTURES / "gateway"
GW_KEY = "gateway-test-key-7c1e"
WORKER_KEY = "worker-test-key-52ab"
# 100 tok/s and 50 tokens: a stream lasts half a second, so a worker always has some in flight.
SIM_CFG = {"startup_delay_s": 0.2, "ttft_s": 0.02, "decode_tok_s": 100}
MAX_TOKENS = 50
STREAMS = 6

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="starts local servers")


def recorded(name: str) -> dict[str, Any]:
    return json.loads((RECORDED / f"{name}.json").read_text())


# ---------------------------------------------------------------------------
# processes: the real router, simulated servers
# ---------------------------------------------------------------------------

from tests.conftest import clean_env as _clean_env  # noqa: E402


@pytest.fixture(scope="module")
def router_ok() -> None:
    pytest.importorskip("sglang_router", reason="sglang-router==0.3.2 belongs in the [test] extra")


# The router's key never goes into its argv (readable by every local user in /proc): this
# launcher sets RouterArgs.api_key (sglang_router/router_args.py) from the environment.
ROUTER_CODE = """import os, sys
from sglang_router.launch_router import launch_router, parse_router_args
args = parse_router_args(sys.argv[1:])
args.api_key = os.environ.pop("GATEWAY_TEST_API_KEY", "") or None
launch_router(args)
"""


class Proc:
    """A process this test started, stopped by its pid."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path):
        self.argv, self.env, self.log = argv, env, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=out)

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.05)


class Stack:
    """The processes of one test; every one is stopped when the test ends."""

    def __init__(self, sim_python: Path, tmp: Path):
        self.sim_python, self.tmp = sim_python, tmp
        self.procs: list[Proc] = []

    def sim(self, *args: str, cfg: dict[str, Any] | None = None, metrics: bool = True) -> tuple[Proc, str]:
        port = free_port()
        cfg_path = self.tmp / f"sim-{port}.json"
        cfg_path.write_text(json.dumps(cfg or SIM_CFG))
        argv = [str(self.sim_python), "-m", "sglang.launch_server", "--model-path", "m", "--host", "127.0.0.1",
                "--port", str(port), *(["--enable-metrics"] if metrics else []), *args]
        p = Proc(argv, _clean_env(SGLANG_SIM_CONFIG=str(cfg_path)), self.tmp / f"sim-{port}.log")
        self.procs.append(p)
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: httpx.get(url + "/health", timeout=2).status_code == 200, 20, f"simulated server {url}")
        return p, url

    def router(self, key: str | None = None) -> str:
        port = free_port()
        argv = [sys.executable, "-c", ROUTER_CODE, "--host", "127.0.0.1", "--port", str(port),
                "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
                "--policy", "round_robin", "--health-check-interval-secs", "1", "--log-level", "warn"]
        env = _clean_env(GATEWAY_TEST_API_KEY=key or "", HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_OFFLINE="1")
        self.procs.append(Proc(argv, env, self.tmp / f"router-{port}.log"))
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: httpx.get(url + "/liveness", timeout=2).status_code == 200, 20, f"router {url}")
        return url

    def stop_all(self) -> None:
        for p in reversed(self.procs):
            p.stop()


@pytest.fixture
def stack(sim_python, router_ok, tmp_path):
    s = Stack(sim_python, tmp_path)
    try:
        yield s
    finally:
        s.stop_all()


def requests_total(server: str) -> float:
    text = httpx.get(server + "/metrics", timeout=5).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("sglang:num_requests_total"))


def registered(gw: Gateway, *urls: str, key: str | None = None) -> None:
    """Register each worker and wait until the gateway lists it healthy (the state of a worker that
    serves its gated revision, before its deploy begins)."""
    for url in urls:
        gw.register(url, key)
    for url in urls:
        gw.wait_registered(url, 30)


def two_workers(stack: Stack) -> tuple[Proc, str, str, Gateway]:
    a_proc, a = stack.sim()
    _, b = stack.sim()
    gw = Gateway(stack.router(), None)
    assert gw.ready() is False  # no worker yet: "insufficient healthy workers"
    registered(gw, a, b)
    assert gw.ready() is True
    assert sorted(w.url for w in gw.workers()) == sorted([a, b])
    return a_proc, a, b, gw


class Lines:
    """What a RestartRun writes to its host's output, kept (the deploy gives it pyinfra's host.log)."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.warn: list[str] = []


def worker_run(url: str, gateways: tuple[tuple[str, str, str | None], ...], worker_key: str | None = None,
               timeout_s: int = 15, admit_timeout_s: int = 30) -> tuple[restart_run.RestartRun, Lines]:
    """The deploy's RestartRun of worker ``url`` behind ``gateways`` ((name, URL, API key) each), at
    its start (SERVING), with its output lines kept."""
    lines = Lines()
    membership = WorkerMembership(host="w-a", gateways=tuple(name for name, _, _ in gateways), url=url,
                                  drain=DrainSettings(timeout_s=timeout_s, admit_timeout_s=admit_timeout_s))
    run = restart_run.RestartRun(membership=membership, gateways=gateways, worker_key=worker_key,
                            log=lines.log.append, warn=lines.warn.append)
    return run, lines


def restart_behind_gateways(run: restart_run.RestartRun, proc: Proc, url: str) -> None:
    """The deploy's restart of a drained worker: stop (the state machine said STOP), start the same
    server on its port, the gate passes, and it is registered again (``drive`` performs the
    registration and waits until every gateway lists it healthy)."""
    assert run.state.phase is drain.Phase.STOPPING
    proc.stop()
    assert restart_run.drive(run, drain.Event.STOPPED) is drain.Action.START
    proc.start()  # the same port
    wait_for(lambda: httpx.get(url + "/health", timeout=2).status_code == 200, 20, "the restarted worker")
    assert restart_run.drive(run, drain.Event.STARTED) is drain.Action.GATE
    assert restart_run.drive(run, drain.Event.GATE_PASS) is drain.Action.NOTHING
    assert run.state.phase is drain.Phase.DONE, (run.state.reason, run.steps)


# ---------------------------------------------------------------------------
# the restart under load
# ---------------------------------------------------------------------------

@linux
def test_the_deploys_restart_behind_the_gateway_under_load_loses_no_request(stack):
    a_proc, a, b, gw = two_workers(stack)
    run, lines = worker_run(a, (("gw", gw.url, None),), timeout_s=15, admit_timeout_s=30)
    load = ClientLoad(gw.url, streams=STREAMS, max_tokens=MAX_TOKENS).start()
    try:
        wait_for(lambda: (in_flight(a, None, 5) or 0) > 0, 10, "requests in flight on the first worker")
        # the deploy's leave: read the gateway, deregister (its removal awaited), in-flight requests to 0
        assert restart_run.drive(run, drain.Event.RESTART) is drain.Action.STOP
        assert run.state.phase is drain.Phase.STOPPING and run.state.drain_timed_out is False
        assert [s.split(":")[0] for s in run.steps] == [
            "serving --restart--> checking", "checking --gateway ok--> leaving",
            "leaving --gateway ok--> draining", "draining --drain done--> stopping"]
        assert run.drained_s is not None and run.drained_s < 15
        assert lines.log == [f"drained in {run.drained_s:g} s"] and lines.warn == []
        assert [w.url for w in gw.workers()] == [b]  # new requests go to the other worker only
        assert in_flight(a, None, 5) == 0
        started = time.monotonic()
        restart_behind_gateways(run, a_proc, a)
        assert time.monotonic() - started < 30
        [back] = gw.find(a)
        assert back.healthy is True and run.steps[-1].startswith("admitting --gateway ok--> done")
        # the restarted process serves the gateway's requests again
        wait_for(lambda: requests_total(a) >= 2, 10, "requests on the restarted worker")
        time.sleep(0.5)
    finally:
        outcome = load.stop()
    assert outcome.failed == 0, [f.error for f in outcome.failures[:5]]
    assert outcome.ok >= 3 * STREAMS and all(r.tokens == MAX_TOKENS for r in outcome.records)
    assert outcome.p50_s is not None and outcome.p50_s < 5


@linux
def test_killing_a_registered_worker_fails_the_requests_it_was_serving(stack):
    a_proc, a, b, gw = two_workers(stack)
    load = ClientLoad(gw.url, streams=STREAMS, max_tokens=MAX_TOKENS).start()
    try:
        wait_for(lambda: (in_flight(a, None, 5) or 0) > 0, 10, "requests in flight on the first worker")
        a_proc.kill()  # no drain: the worker is still registered
        time.sleep(1.0)
    finally:
        outcome = load.stop()
    assert outcome.failed >= 1
    assert all(f.error for f in outcome.failures)
    assert outcome.ok >= 1  # the other worker kept serving


# ---------------------------------------------------------------------------
# API keys
# ---------------------------------------------------------------------------

def no_key_in(text: str) -> bool:
    return GW_KEY not in text and WORKER_KEY not in text and "wrong-key" not in text


@linux
def test_a_gateway_with_an_api_key_admits_only_its_key_holder(stack):
    w_proc, w = stack.sim("--api-key", WORKER_KEY)
    r = stack.router(key=GW_KEY)
    good, none, wrong = Gateway(r, GW_KEY), Gateway(r, None), Gateway(r, "wrong-key-0000")
    for g in (none, wrong):
        with pytest.raises(GatewayError) as exc:
            g.workers()
        assert "401" in str(exc.value) and r in str(exc.value) and no_key_in(str(exc.value))
    with pytest.raises(GatewayError) as exc:
        none.register(w, WORKER_KEY)
    assert "401" in str(exc.value) and no_key_in(str(exc.value))
    with pytest.raises(GatewayError) as exc:
        none.deregister(w)
    assert "401" in str(exc.value) and no_key_in(str(exc.value))
    assert none.ready() is False  # /readiness asks no key (and no worker is there yet)

    # the worker's own key forgotten: listed, but without metadata; said so at once
    good.register(w, None)
    with pytest.raises(GatewayError, match="model_id unknown") as exc:
        good.wait_registered(w, 10)
    assert no_key_in(str(exc.value))
    assert good.deregister(w) is True
    good.wait_deregistered(w, 10)
    assert good.deregister(w) is False  # idempotent

    registered(good, w, key=WORKER_KEY)
    keyed = ClientLoad(r, api_key=GW_KEY, streams=2, max_tokens=5).start()
    time.sleep(0.5)
    ok = keyed.stop()
    assert ok.failed == 0 and ok.ok >= 2
    anonymous = ClientLoad(r, streams=1, max_tokens=5).start()
    time.sleep(0.3)
    refused = anonymous.stop()
    assert refused.requests >= 1 and refused.ok == 0
    assert all(f.error and f.error.startswith("HTTP 401") for f in refused.failures)

    # The deploy's restart through the keyed gateway: each key goes where it belongs (the gateway's in
    # Authorization, the worker's in the registration, so the gateway reads its metadata again), and
    # no line of it carries either. (A deploy refuses a worker key that differs from its gateway's,
    # sglang_deploy/deploy/gateway.py worker_run; two keys here make a leak of either visible.)
    run, lines = worker_run(w, (("gw", r, GW_KEY),), worker_key=WORKER_KEY, timeout_s=10, admit_timeout_s=30)
    assert restart_run.drive(run, drain.Event.RESTART) is drain.Action.STOP
    assert good.find(w) == [] and run.state.drain_timed_out is False
    restart_behind_gateways(run, w_proc, w)
    [back] = good.find(w)
    assert back.healthy is True and back.model_id == "m"
    assert no_key_in("\n".join(run.steps + lines.log + lines.warn + [run.state.reason]))

    # the gateway's key wrong in the inventory: the check before anything changes fails, and says so
    # without the key; the worker stays listed, untouched
    run, lines = worker_run(w, (("gw", r, "wrong-key-0000"),), worker_key=WORKER_KEY)
    assert restart_run.drive(run, drain.Event.RESTART) is drain.Action.FAIL_HOST
    assert run.state.phase is drain.Phase.UNCHANGED
    [error] = [s for s in run.steps if s.startswith("check: ")]
    assert "401" in error and r in error
    assert no_key_in("\n".join(run.steps + lines.log + lines.warn + [run.state.reason]))
    assert [x.id for x in good.find(w)] == [back.id]


# ---------------------------------------------------------------------------
# a gateway failing half-way, a request that never ends
# ---------------------------------------------------------------------------

class BrokenGateway:
    """A stand-in for a second gateway, at the HTTP boundary (a local HTTP server): ``GET /workers``
    answers a recorded listing of the worker; every other request, and with ``lists`` set every
    listing past the first ``lists``, answers 500 with the router's error body."""

    def __init__(self, listing: str, lists: int | None = None):
        self.listing, self.lists = listing, lists
        self.seen: list[tuple[str, str]] = []  # (method, path) of every request, in order
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                outer.seen.append((self.command, self.path))
                listed = sum(1 for m, p in outer.seen if (m, p) == ("GET", "/workers"))
                if (self.command, self.path) == ("GET", "/workers") and (outer.lists is None or listed <= outer.lists):
                    status, body = 200, outer.listing
                else:
                    status, body = 500, '{"error":"simulated failure","code":"INTERNAL"}'
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@linux
@pytest.mark.parametrize("lists, phase", [
    (None, drain.Phase.UNCHANGED),  # fails the removal only: the restore registers again everywhere
    (2, drain.Phase.GATEWAY_LOST),  # fails every request after the leave: given up after its tries
])
def test_a_gateway_failing_half_way_puts_the_worker_back_where_it_left(stack, lists, phase):
    _, a = stack.sim()
    gw = Gateway(stack.router(), None)
    registered(gw, a)
    before = gw.find(a)[0].id
    broken = BrokenGateway(recorded("workers_two")["body"].replace("http://127.0.0.1:32001", a), lists)
    try:
        # the real gateway first: the worker has left it when the second fails
        run, lines = worker_run(a, (("gw", gw.url, None), ("gw-broken", broken.url, None)), timeout_s=5)
        assert restart_run.drive(run, drain.Event.RESTART) is drain.Action.FAIL_HOST
    finally:
        broken.stop()
    assert run.state.phase is phase, (run.state.reason, run.steps)
    assert "leaving --gateway error--> restoring: register" in run.steps
    [left] = [s for s in run.steps if s.startswith("deregister: ")]
    assert f"gateway {broken.url}: deregister {a}: HTTP 500: simulated failure (INTERNAL)" in left
    if phase is drain.Phase.UNCHANGED:
        assert run.steps[-1].startswith("restoring --gateway ok--> unchanged")
    else:
        assert [s.split(" --")[0] for s in run.steps if "-->" in s][-drain.MAX_GATEWAY_ATTEMPTS:] == [
            "restoring"] * drain.MAX_GATEWAY_ATTEMPTS
        assert "membership in that gateway is unknown" in run.state.reason
    assert "DELETE" in [m for m, _ in broken.seen] and lines.log == [] and lines.warn == []
    back = gw.find(a)
    assert len(back) == 1 and back[0].healthy is True
    assert back[0].id != before  # removed, then registered again (a new registration has a new id)
    assert run.drained_s is None  # it never got as far as the drain


@linux
def test_a_request_that_never_ends_makes_the_drain_give_up_at_its_timeout(stack):
    stalled_cfg = dict(SIM_CFG, faults={"stall_forever_after_tokens": 2})
    _, a = stack.sim(cfg=stalled_cfg)
    gw = Gateway(stack.router(), None)
    registered(gw, a)
    hold = threading.Event()

    def stuck_client() -> None:
        with httpx.Client(timeout=httpx.Timeout(10, read=0.2)) as c:
            with c.stream("POST", gw.url + "/v1/chat/completions",
                          json={"messages": [{"role": "user", "content": "x"}], "stream": True, "max_tokens": 20}):
                while not hold.is_set():
                    time.sleep(0.05)

    t = threading.Thread(target=stuck_client, daemon=True)
    t.start()
    try:
        wait_for(lambda: in_flight(a, None, 5) == 1, 10, "the stalled request")
        run, lines = worker_run(a, (("gw", gw.url, None),), timeout_s=1)
        started = time.monotonic()
        assert restart_run.drive(run, drain.Event.RESTART) is drain.Action.STOP  # the stop goes ahead
        elapsed = time.monotonic() - started
        assert run.state.drain_timed_out is True and run.state.phase is drain.Phase.STOPPING
        assert run.steps[-1] == "draining --drain timeout--> stopping: stop"
        assert run.drained_s is not None and 1.0 <= run.drained_s < 2.0  # the timeout, and no wait past it
        assert 1.0 <= elapsed < 4.0
        assert lines.warn == ["drain timeout (1 s) with 1 request(s) still in flight; stopping all the same"]
        assert gw.workers() == []
    finally:
        hold.set()
        t.join(5)
    # a server without /metrics cannot show that it is idle: the drain waits its whole timeout
    _, plain = stack.sim(metrics=False)
    assert in_flight(plain, None, 5) is None
    run, lines = worker_run(plain, (), timeout_s=1)
    assert restart_run.drive(run, drain.Event.RESTART) is drain.Action.STOP
    assert run.state.drain_timed_out is True and run.drained_s is not None and 1.0 <= run.drained_s < 2.0
    assert len(lines.warn) == 1 and lines.warn[0].startswith("drain timeout (1 s)")
    # nothing listens any more: a refused connection counts as nothing in flight
    dead = f"http://127.0.0.1:{free_port()}"
    run, lines = worker_run(dead, (), timeout_s=5)
    assert restart_run.drive(run, drain.Event.RESTART) is drain.Action.STOP
    assert run.state.drain_timed_out is False and run.drained_s is not None and run.drained_s < 2
    assert lines.warn == [] and lines.log == [f"drained in {run.drained_s:g} s"]


# ---------------------------------------------------------------------------
# recorded answers (no processes)
# ---------------------------------------------------------------------------

WHERE = "gateway http://g:1: GET /workers"


def test_recorded_lists_parse():
    two = parse_workers(recorded("workers_two")["body"].encode(), WHERE)
    assert [(w.url, w.id, w.healthy, w.load, w.model_id, w.worker_type) for w in two] == [
        ("http://127.0.0.1:32001", "5676e81a-9584-40d6-ad70-dcb5c97c7e08", True, 0, "m", "regular"),
        ("http://127.0.0.1:32003", "14c2ae2f-e1ae-4aad-820a-e53743c9e8e6", True, 0, "m", "regular")]
    assert parse_workers(recorded("workers_empty")["body"].encode(), WHERE) == []
    [unknown] = parse_workers(recorded("keyed_workers_unknown_model")["body"].encode(), WHERE)
    assert unknown.model_id == "unknown" and unknown.healthy is True


def _mutated(change: Callable[[dict[str, Any]], Any]) -> bytes:
    doc = json.loads(recorded("workers_two")["body"])
    change(doc)
    return json.dumps(doc).encode()


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc["workers"][0].__setitem__(key, value)


@pytest.mark.parametrize("body, says", [
    (_mutated(_set("is_healthy", "true")), "is_healthy"),
    (_mutated(_set("id", "../../flush_cache")), "not a UUID"),
    (_mutated(_set("id", None)), "id is None"),
    (_mutated(_set("url", "x" * 5000)), "url is"),
    (_mutated(_set("url", 42)), "url is 42"),
    (_mutated(_set("load", True)), "load"),
    (_mutated(_set("load", -7)), "load"),
    (_mutated(_set("load", 1.5)), "load"),
    (_mutated(_set("model_id", ["m"])), "model_id"),
    (_mutated(lambda d: d.__setitem__("workers", {"a": 1})), "no list of workers"),
    (_mutated(lambda d: d["workers"].append("worker")), "not an object"),
    (_mutated(lambda d: d.__setitem__("workers", d["workers"][:1] * (MAX_WORKERS + 1))), "more than the 10000"),
    (b'{"workers": [], "total": NaN}', "not JSON"),
    (b"[" * 100 + b"]" * 100, "nested deeper"),
    (b'{"workers": []}' + b" " * (16 << 20), "bytes, more than"),
    (b"Failed to deserialize", "not JSON"),
])
def test_hostile_lists_are_refused_naming_the_gateway(body, says):
    with pytest.raises(GatewayError, match="gateway http://g:1: GET /workers") as exc:
        parse_workers(body, WHERE)
    assert says in str(exc.value)
    assert len(str(exc.value)) < 500


def test_in_flight_sums_every_series_of_both_gauges():
    busy = recorded("sim_metrics_3_running")["body"]
    assert parse_in_flight(busy, "m") == 3
    assert parse_in_flight(recorded("sim_metrics_idle")["body"], "m") == 0
    # SGLang exports one series per scheduler (TP/DP rank): the recorded line with a second rank
    # and a queue of 2
    line = next(x for x in busy.splitlines() if x.startswith("sglang:num_running_reqs{"))
    ranks = busy + line.replace('tp_rank="0"', 'tp_rank="1"') + "\n" + \
        line.replace("num_running_reqs", "num_queue_reqs").replace(" 3", " 2") + "\n"
    assert parse_in_flight(ranks, "m") == 3 + 3 + 2
    assert parse_in_flight("# no gauges\nsglang:gen_throughput 1.0\n", "m") is None
    for bad in ("-1", "NaN", "+Inf", "2.5", "1e12"):
        with pytest.raises(GatewayError, match="server http://s:1: /metrics"):
            parse_in_flight(busy.replace("} 3", "} " + bad), "server http://s:1: /metrics")


class Replay:
    """A stand-in gateway at the HTTP boundary that answers with recorded exchanges."""

    def __init__(self, answers: dict[tuple[str, str], str]):
        self.answers = answers
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        path = request.url.path
        key = (request.method, "/workers/{id}" if path.startswith("/workers/") else path)
        rec = recorded(self.answers[key])
        return httpx.Response(rec["status"], text=rec["body"], headers={"content-type": rec["content_type"] or ""})

    def gateway(self, key: str | None = None) -> Gateway:
        return Gateway("http://g:1/", key, transport=httpx.MockTransport(self))


def test_deregister_and_register_send_what_the_router_takes():
    listed = Replay({("GET", "/workers"): "workers_two", ("DELETE", "/workers/{id}"): "delete_worker_202",
                     ("POST", "/workers"): "post_workers_202"})
    gw = listed.gateway()
    assert gw.url == "http://g:1"
    assert gw.deregister("http://127.0.0.1:32001/") is True  # compared without the trailing slash
    assert [(r.method, r.url.path) for r in listed.seen] == [
        ("GET", "/workers"), ("DELETE", "/workers/5676e81a-9584-40d6-ad70-dcb5c97c7e08")]
    listed.seen.clear()
    assert gw.deregister("http://127.0.0.1:39999") is False
    assert [r.method for r in listed.seen] == ["GET"]  # nothing to remove, nothing sent
    listed.seen.clear()
    gw.register("http://127.0.0.1:32001", WORKER_KEY)  # already listed: nothing posted
    assert [r.method for r in listed.seen] == ["GET"]
    listed.seen.clear()
    gw.register("http://127.0.0.1:32005/", WORKER_KEY)
    post = listed.seen[-1]
    assert (post.method, json.loads(post.content)) == ("POST", {"url": "http://127.0.0.1:32005", "api_key": WORKER_KEY})

    gone = Replay({("GET", "/workers"): "workers_two", ("DELETE", "/workers/{id}"): "delete_worker_404"})
    assert gone.gateway().deregister("http://127.0.0.1:32003") is True  # removed meanwhile: fine


def test_refusals_name_the_gateway_and_the_step_never_a_key():
    refused = Replay({("GET", "/workers"): "keyed_workers_401", ("GET", "/readiness"): "keyed_readiness_503"})
    with pytest.raises(GatewayError, match=r"^gateway http://g:1: list workers: 401: the gateway wants its API "
                                           r"key and refused the one given$"):
        refused.gateway(GW_KEY).workers()
    assert refused.seen[-1].headers["authorization"] == f"Bearer {GW_KEY}"
    assert refused.gateway(GW_KEY).ready() is False
    bad = Replay({("GET", "/workers"): "workers_empty", ("POST", "/workers"): "post_workers_422_no_url",
                  ("GET", "/readiness"): "legacy_list_workers_404"})
    with pytest.raises(GatewayError, match=r"register http://127.0.0.1:1: HTTP 422: Failed to deserialize") as exc:
        bad.gateway(GW_KEY).register("http://127.0.0.1:1", WORKER_KEY)
    assert no_key_in(str(exc.value))
    with pytest.raises(GatewayError, match="readiness: HTTP 404: no text"):
        bad.gateway().ready()
    ready = Replay({("GET", "/readiness"): "readiness_200"})
    assert ready.gateway().ready() is True


@pytest.mark.parametrize("url, says", [
    ("127.0.0.1:30000", "not an http:// or https:// URL"),
    ("http://user:secret@h:1", "a URL with credentials"),
    ("http://h:1/?x=1", "not an http:// or https:// URL"),
    ("", "not a URL"),
])
def test_urls_are_checked_before_anything_is_sent(url, says):
    with pytest.raises(GatewayError, match=says) as exc:
        Gateway(url, None)
    assert "secret" not in str(exc.value)
    with pytest.raises(GatewayError, match=says):
        Replay({}).gateway().register(url, None)


def test_a_key_that_cannot_travel_in_a_header_is_refused_unquoted():
    with pytest.raises(GatewayError, match="API key") as exc:
        Gateway("http://g:1", "two words\nkey")
    assert "two words" not in str(exc.value)


def test_an_unreachable_gateway_is_a_gateway_error_naming_it():
    with pytest.raises(GatewayError, match=r"gateway http://127.0.0.1:\d+: list workers: ConnectError") as exc:
        Gateway(f"http://127.0.0.1:{free_port()}", GW_KEY, timeout_s=2).workers()
    assert exc.value.refused is True and no_key_in(str(exc.value))
