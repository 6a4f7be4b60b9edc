"""The gateway client (sglang_deploy/deploy/gateway_client.py) against the REAL SGLang Model
Gateway (sglang-router 0.3.2, from the test environment) in front of SIMULATED SGLang 0.5.23
servers (sglang_deploy/simulator/sglang_server, stand-ins at the HTTP boundary), with a client
load of streamed chat completions running through the gateway the whole time:

- drain (deregister, wait for the worker's in-flight requests) -> stop -> start -> admit loses
  no client request; killing a registered worker does lose some (so the first can fail);
- a gateway with an API key: the client with the key works, without it (or with a wrong one)
  it is refused, and no message carries a key; a worker added without its own key is reported;
- a gateway failing half-way through a drain puts the worker back where it had left;
- a request that never ends makes the drain give up at its timeout.

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
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

from sglang_deploy.deploy.gateway_client import (MAX_WORKERS, Gateway, GatewayError, admit, drain, in_flight,
                                                 parse_in_flight, parse_workers)
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


def two_workers(stack: Stack) -> tuple[Proc, str, str, Gateway]:
    a_proc, a = stack.sim()
    _, b = stack.sim()
    gw = Gateway(stack.router(), None)
    assert gw.ready() is False  # no worker yet: "insufficient healthy workers"
    admit([gw], a, None, 30)
    admit([gw], b, None, 30)
    assert gw.ready() is True
    assert sorted(w.url for w in gw.workers()) == sorted([a, b])
    return a_proc, a, b, gw


# ---------------------------------------------------------------------------
# the restart under load
# ---------------------------------------------------------------------------

@linux
def test_drain_stop_start_admit_under_load_loses_no_request(stack):
    a_proc, a, b, gw = two_workers(stack)
    load = ClientLoad(gw.url, streams=STREAMS, max_tokens=MAX_TOKENS).start()
    try:
        wait_for(lambda: (in_flight(a, None, 5) or 0) > 0, 10, "requests in flight on the first worker")
        result = drain([gw], a, a, None, drain_timeout_s=15, poll_s=0.05)
        assert result.timed_out is False and result.last_in_flight == 0
        assert result.left == [gw.url]
        assert [w.url for w in gw.workers()] == [b]  # new requests go to the other worker only
        assert in_flight(a, None, 5) == 0
        a_proc.stop()
        a_proc.start()  # the same port
        wait_for(lambda: httpx.get(a + "/health", timeout=2).status_code == 200, 20, "the restarted worker")
        assert admit([gw], a, None, 30) < 30
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
    _, w = stack.sim("--api-key", WORKER_KEY)
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

    admit([good], w, WORKER_KEY, 30)
    keyed = ClientLoad(r, api_key=GW_KEY, streams=2, max_tokens=5).start()
    time.sleep(0.5)
    ok = keyed.stop()
    assert ok.failed == 0 and ok.ok >= 2
    anonymous = ClientLoad(r, streams=1, max_tokens=5).start()
    time.sleep(0.3)
    refused = anonymous.stop()
    assert refused.requests >= 1 and refused.ok == 0
    assert all(f.error and f.error.startswith("HTTP 401") for f in refused.failures)


# ---------------------------------------------------------------------------
# a gateway failing half-way, a request that never ends
# ---------------------------------------------------------------------------

@linux
def test_a_gateway_failing_half_way_puts_the_worker_back_where_it_left(stack):
    _, a = stack.sim()
    gw = Gateway(stack.router(), None)
    admit([gw], a, None, 30)
    before = gw.find(a)[0].id
    listing = recorded("workers_two")["body"].replace("http://127.0.0.1:32001", a)

    def broken(request: httpx.Request) -> httpx.Response:
        # a stand-in for a second gateway: lists the worker, then fails to remove it
        if request.method == "GET" and request.url.path == "/workers":
            return httpx.Response(200, text=listing)
        return httpx.Response(500, text='{"error":"simulated failure","code":"INTERNAL"}')

    other = Gateway("http://gateway-stand-in:30000", None, transport=httpx.MockTransport(broken))
    with pytest.raises(GatewayError, match=r"gateway http://gateway-stand-in:30000: deregister .*HTTP 500: "
                                           r"simulated failure \(INTERNAL\)"):
        drain([gw, other], a, a, None, drain_timeout_s=5)
    back = gw.find(a)
    assert len(back) == 1 and back[0].healthy is True
    assert back[0].id != before  # removed, then registered again (a new registration has a new id)


@linux
def test_a_request_that_never_ends_makes_the_drain_give_up_at_its_timeout(stack):
    stalled_cfg = dict(SIM_CFG, faults={"stall_forever_after_tokens": 2})
    _, a = stack.sim(cfg=stalled_cfg)
    gw = Gateway(stack.router(), None)
    admit([gw], a, None, 30)
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
        started = time.monotonic()
        result = drain([gw], a, a, None, drain_timeout_s=1.0, poll_s=0.1)
        assert result.timed_out is True and result.last_in_flight == 1
        assert 1.0 <= time.monotonic() - started < 4.0
        assert gw.workers() == []
    finally:
        hold.set()
        t.join(5)
    # nothing listens any more: a refused connection counts as nothing in flight
    _, plain = stack.sim(metrics=False)
    assert in_flight(plain, None, 5) is None
    result = drain([], plain, plain, None, drain_timeout_s=0.5, poll_s=0.1)
    assert result.timed_out is True and result.last_in_flight is None  # cannot see: waits it out
    dead = f"http://127.0.0.1:{free_port()}"
    result = drain([], dead, dead, None, drain_timeout_s=5, poll_s=0.05)
    assert result.timed_out is False and result.last_in_flight == 0 and result.seconds < 2


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
