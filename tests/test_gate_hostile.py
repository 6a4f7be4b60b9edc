"""The gate against hostile or merely different OpenAI-compatible servers (httpx.MockTransport,
a stand-in at the HTTP boundary): malformed shapes from every endpoint it reads, streams cut at
any byte, odd types, missing fields, streams that never end, servers that echo the key, a
connection closed after a 500. Whatever the server does, ``run_check`` ends with a report of
exit 0, 1 or 2 and a message: never a traceback, a hang, a printed secret, or a pass on
nonsense."""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_deploy.gate import client as gate_client
from sglang_deploy.gate import measure
from sglang_deploy.gate.options import CheckOptions
from sglang_deploy.gate.report import format_report
from sglang_deploy.gate.run import run_check

KEY = "sk-canary-7f3a9c1e5d"
MAX_TOKENS = 12
TOKEN_GAP_S = 0.002  # 500 tok/s: a plausible rate

Handler = Callable[[httpx.Request], httpx.Response]


def sse(*objs: Any, done: bool = False) -> bytes:
    text = "".join(f"data: {o if isinstance(o, str) else json.dumps(o)}\n\n" for o in objs)
    return (text + ("data: [DONE]\n\n" if done else "")).encode()


def timed(pieces: list[bytes], gap: float = TOKEN_GAP_S) -> Iterator[bytes]:
    for p in pieces:
        time.sleep(gap)
        yield p


def tf_stream(n: int, chat: bool = True) -> list[bytes]:
    """How ``transformers serve`` streams: a role chunk, one chunk per token, then the finish
    chunk carrying usage; no [DONE]."""
    out = [sse({"choices": [{"delta": {"role": "assistant"}, "index": 0}]})] if chat else []
    for i in range(n):
        out.append(sse({"choices": [{"delta": {"content": f" t{i}"}, "index": 0} if chat
                                    else {"text": f" t{i}", "index": 0}]}))
    fin = {"delta": {}, "index": 0, "finish_reason": "length"} if chat else {"text": "", "index": 0,
                                                                             "finish_reason": "length"}
    out.append(sse({"choices": [fin], "usage": {"completion_tokens": n, "prompt_tokens": 5}}))
    return out


class Server:
    """An OpenAI-compatible server shaped like ``transformers serve``; ``routes`` replace
    the answer of a path (a Response, or a function of the request)."""

    def __init__(self, routes: dict[str, Any] | None = None, stream: Callable[[dict], Any] | None = None):
        self.routes = routes or {}
        self.stream = stream
        self.seen: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.seen.append(f"{request.method} {path}")
        if path in self.routes:
            route = self.routes[path]
            return route(request) if callable(route) else route
        if path == "/health":
            return httpx.Response(200, json={"status": "ok"})
        if path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "tiny", "object": "model"}]})
        if path == "/v1/chat/completions":
            body = json.loads(request.content)
            if "ignore_eos" in body:
                return httpx.Response(422, json={"detail": "Unexpected fields in the request: {'ignore_eos'}"})
            pieces = self.stream(body) if self.stream else tf_stream(body["max_tokens"])
            return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  content=pieces if isinstance(pieces, Iterator) else timed(pieces))
        return httpx.Response(404, json={"detail": "Not Found"})


def gate(server: Handler, progress: list[str] | None = None, **kw: Any) -> dict[str, Any]:
    opts = dict(url="http://gate.test", max_tokens=MAX_TOKENS, repeats=2, ready_timeout=0, stall_timeout=5.0)
    opts.update(kw)
    report = run_check(CheckOptions(**opts), (progress.append if progress is not None else lambda m: None),
                       transport=httpx.MockTransport(server))
    assert report["verdict"] in ("pass", "fail", "error") and report["exit_code"] in (0, 1, 2)
    assert report["exit_code"] == {"pass": 0, "fail": 1, "error": 2}[report["verdict"]]
    if report["verdict"] != "pass":
        assert report["reasons"] and all(isinstance(r, str) and r for r in report["reasons"])
    format_report(report)
    return report


def text_of(report: dict[str, Any]) -> str:
    return json.dumps(report) + format_report(report)


# ---------------------------------------------------------------------------
# endpoints the gate can do without
# ---------------------------------------------------------------------------


def test_transformers_serve_shape_passes():
    r = gate(Server(), model="tiny")
    assert r["verdict"] == "pass", r["reasons"]
    assert all(q["tokens_source"] == "usage" and q["completion_tokens"] == MAX_TOKENS for q in r["requests"])
    assert any("ignore_eos" in w for w in r["warnings"])


class ClosesAfter500(Server):
    """transformers serve 5.18: /v1/models answers 500 and the server closes the connection;
    the next request sent on it is reset before any answer."""

    def __init__(self) -> None:
        super().__init__({"/v1/models": self.models})
        self.closed = False
        self.resets = 0

    def models(self, request: httpx.Request) -> httpx.Response:
        self.closed = True
        return httpx.Response(500, text="Internal Server Error")

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.closed and request.method == "POST":
            self.closed = False
            self.resets += 1
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return super().__call__(request)


def test_a_500_on_models_with_model_is_a_warning_and_the_reset_connection_is_retried():
    server = ClosesAfter500()
    r = gate(server, model="tiny")
    assert r["verdict"] == "pass", r["reasons"]
    assert server.resets == 1
    assert any("/v1/models answered 500" in w and "not checked" in w for w in r["warnings"])


def test_a_500_on_models_without_model_cannot_measure_and_says_how_to_go_on():
    r = gate(Server({"/v1/models": httpx.Response(500, text="Internal Server Error")}))
    assert r["exit_code"] == 2 and "--model" in r["reasons"][0] and "answered 500" in r["reasons"][0]


def test_a_break_after_part_of_the_answer_is_not_retried():
    calls = []

    def stream(body: dict) -> Iterator[bytes]:
        calls.append(1)
        yield sse({"choices": [{"delta": {"content": "a"}, "index": 0}]})
        raise httpx.ReadError("Connection reset by peer")

    r = gate(Server(stream=stream), model="tiny")
    assert r["exit_code"] == 2 and "broke off the response after 2 line(s)" in r["reasons"][0]
    assert r["error"]["step"] == "warm-up" and len(calls) == 1


@pytest.mark.parametrize("body", [{"data": 5}, [1, 2], "x", {"data": "abc"}, {"data": {"id": "m"}}])
def test_a_models_list_of_the_wrong_shape(body):
    with_model = gate(Server({"/v1/models": httpx.Response(200, json=body)}), model="tiny")
    assert with_model["verdict"] == "pass", with_model["reasons"]
    assert any(w.startswith("unexpected answer from /v1/models") for w in with_model["warnings"])
    without = gate(Server({"/v1/models": httpx.Response(200, json=body)}))
    assert without["exit_code"] == 2 and "unexpected answer from /v1/models" in without["reasons"][0]


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_on_an_optional_endpoint_stays_fatal(status):
    for path in ("/v1/models", "/server_info"):
        r = gate(Server({path: httpx.Response(status, json={"detail": "bad key"})}), model="tiny")
        assert r["exit_code"] == 2 and "unauthorized" in r["reasons"][0]


@pytest.mark.parametrize("body", [5, [1], "text", None])
def test_a_server_info_that_is_not_an_object_is_an_unexpected_answer(body, tmp_path):
    r = gate(Server({"/server_info": httpx.Response(200, json=body)}), model="tiny")
    assert r["verdict"] == "pass", r["reasons"]
    assert any(w.startswith("unexpected answer from /server_info") for w in r["warnings"])
    assert not any("exposes no /server_info" in w for w in r["warnings"])


def test_server_info_fields_of_odd_types_are_ignored_with_a_warning():
    info = {"version": 5, "model_path": ["m"], "served_model_name": {"a": 1}, "internal_states": "x",
            "avg_spec_accept_length": "2", "tp_size": [], "cuda_graph_config": "{not json"}
    r = gate(Server({"/server_info": httpx.Response(200, json=info)}))
    assert r["verdict"] == "pass", r["reasons"]
    for states in (True, 5, "x", [1, None], {"avg_spec_accept_length": 10**400}):
        other = gate(Server({"/server_info": httpx.Response(200, content=json.dumps(
            {"internal_states": states, "avg_spec_accept_length": 10**400}).encode())}))
        assert other["verdict"] == "pass" and other["accept_length"] is None
    assert r["server"]["version"] is None and r["server"]["model_path"] is None
    assert any("version is a int" in w for w in r["warnings"])


def test_a_server_info_that_fails_is_a_warning_without_expect():
    r = gate(Server({"/server_info": httpx.Response(500, text="boom")}), model="tiny")
    assert r["verdict"] == "pass" and any("/server_info answered 500" in w for w in r["warnings"])


# ---------------------------------------------------------------------------
# streams
# ---------------------------------------------------------------------------


def _chunks_of(*chunks: Any) -> Callable[[dict], list[bytes]]:
    return lambda body: [sse(c) for c in chunks] + [sse({"choices": [{"delta": {}, "finish_reason": "length"}]})]


@pytest.mark.parametrize("chunk", [
    {"choices": 5}, {"choices": [5, "x", None]}, {"choices": "abc"}, 5, "str", [1, 2], None,
    {"choices": [{"delta": {"tool_calls": "not a list"}}]},
    {"choices": [{"delta": {"tool_calls": [5, {"function": "f"}, {"function": {"arguments": 5}}]}}]},
    {"choices": [{"delta": {"content": 5}}]}, {"choices": [{"delta": "x", "text": 5}]},
    {"usage": 5, "meta_info": "x"}, {"usage": {"completion_tokens": True}}, {"error": 5},
])
def test_odd_chunks_end_in_a_message_never_a_traceback(chunk):
    r = gate(Server(stream=_chunks_of(chunk, chunk)), model="tiny")
    assert r["exit_code"] in (1, 2)


def test_usage_above_max_tokens_is_distrusted_never_a_pass():
    def stream(body):
        n = body["max_tokens"]
        return tf_stream(n)[:-1] + [sse({"choices": [{"delta": {}, "finish_reason": "length"}],
                                         "usage": {"completion_tokens": 100 * n}})]

    r = gate(Server(stream=stream), model="tiny", target_tok_s=1)
    assert r["exit_code"] == 2 and "cannot be trusted" in r["reasons"][0] and "max_tokens=12" in r["reasons"][0]
    final = {"choices": [{"delta": {}, "finish_reason": "length"}], "usage": {"completion_tokens": 10**400}}
    huge = gate(Server(stream=lambda body: tf_stream(2)[:-1] + [sse(final)]), model="tiny")
    assert huge["exit_code"] == 2 and "cannot be trusted" in huge["reasons"][0]


def test_a_rate_above_the_physical_bound_is_distrusted():
    # every stream in one burst (a proxy that buffers): measured three times, then refused
    r = gate(Server(stream=lambda body: iter(tf_stream(body["max_tokens"]))), model="tiny", target_tok_s=1)
    assert r["exit_code"] == 2 and "cannot be trusted" in r["reasons"][0]
    assert "(measured 3 times)" in r["reasons"][0]


def test_one_stream_read_in_a_burst_is_measured_again_and_said():
    # the client read one stream in one burst (a loaded machine): that request is measured again
    calls: list[int] = []

    def stream(body):
        calls.append(1)
        pieces = tf_stream(body["max_tokens"])
        return iter(pieces) if len(calls) == 2 else pieces  # the first measured request, after the warm-up

    r = gate(Server(stream=stream), model="tiny", target_tok_s=1)
    assert r["exit_code"] == 0, r["reasons"]
    assert len(calls) == 4  # warm-up, the burst, its repeat, the second request
    assert any("were measured again: the client read them in one burst" in w for w in r["warnings"]), r["warnings"]
    assert all(q["decode_tok_s"] < 50_000 for q in r["requests"] if q["phase"] == "single")


def test_the_decode_window_ends_at_the_final_chunk_not_the_last_text():
    """A byte-level tokenizer: 12 tokens, text only in the first 3 chunks, the rest empty."""
    def stream(body):
        n = body["max_tokens"]
        chunks = [{"choices": [{"delta": {"content": f"w{i}" if i < 3 else ""}, "index": 0}]} for i in range(n)]
        return [sse(c) for c in chunks] + tf_stream(n)[-1:]

    r = gate(Server(stream=stream), model="tiny")
    assert r["verdict"] == "pass", r["reasons"]
    q = r["requests"][0]
    assert q["chunks"] == 3 and q["tokens_per_chunk"] == 4.0
    # 11 tokens over ~10 gaps of 2 ms: about 500 tok/s, not 11 tokens over the first 2 gaps
    assert 150 < q["decode_tok_s"] < 700, q["decode_tok_s"]


def test_a_stream_that_never_ends_is_a_failure_not_a_hang():
    def stream(body):
        while True:
            yield b": keep-alive\n\n" * 4096

    t0 = time.monotonic()
    r = gate(Server(stream=stream), model="tiny")
    assert r["exit_code"] == 2 and "without ending" in r["reasons"][0]
    assert time.monotonic() - t0 < 10


def test_a_trickle_ends_at_the_request_deadline(monkeypatch):
    monkeypatch.setattr(gate_client, "SLOWEST_TOKEN_S", 0.01)

    def stream(body):
        while True:
            time.sleep(0.01)
            yield b":"

    t0 = time.monotonic()
    r = gate(Server(stream=stream), model="tiny", stall_timeout=0.1)
    assert r["exit_code"] == 2 and "did not end within" in r["reasons"][0]
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("line", ["[" * 100000, "\xff\xfe", "1" * 5000, "NaN", '{"choices": [{"delta": '])
def test_unparsable_stream_lines(line):
    r = gate(Server(stream=lambda body: [f"data: {line}\n\n".encode("utf-8", "surrogateescape")]), model="tiny")
    assert r["exit_code"] == 2


# ---------------------------------------------------------------------------
# messages and secrets
# ---------------------------------------------------------------------------


def test_an_unresolvable_host_is_unreachable():
    def server(request):
        raise httpx.ConnectError("[Errno -2] Name or service not known")

    r = gate(server, ready_timeout=5)
    assert r["exit_code"] == 2 and "unreachable" in r["reasons"][0]


def echo(request: httpx.Request) -> str:
    return f"bad request, headers: {dict(request.headers)}"


@pytest.mark.parametrize("routes", [
    {"/health": lambda rq: httpx.Response(401, text=echo(rq))},
    {"/v1/models": lambda rq: httpx.Response(500, json={"error": {"message": echo(rq)}})},
    {"/server_info": lambda rq: httpx.Response(502, text="x" * 190 + echo(rq))},
    {"/server_info": lambda rq: httpx.Response(200, json={"version": echo(rq), "api_key": KEY})},
    {"/v1/chat/completions": lambda rq: httpx.Response(400, json={"detail": echo(rq)})},
])
def test_a_server_that_echoes_the_key_does_not_make_the_gate_print_it(routes):
    notes: list[str] = []
    r = gate(Server(routes), notes, model="tiny", api_key=KEY)
    assert KEY[:8] not in text_of(r) + "\n".join(notes)


def test_the_key_echoed_mid_stream_or_in_a_url_is_masked():
    def stream(body):
        return [sse({"error": {"message": "auth " + KEY}})]

    r = gate(Server(stream=stream), model="tiny", api_key=KEY, url=f"http://u:{KEY}@gate.test")
    assert r["exit_code"] == 2 and KEY not in text_of(r) and "***" in text_of(r)


# ---------------------------------------------------------------------------
# property-based: any shape from any endpoint, any stream cut anywhere
# ---------------------------------------------------------------------------

NAMES = ["data", "id", "choices", "delta", "content", "text", "finish_reason", "usage", "completion_tokens",
         "meta_info", "tool_calls", "function", "arguments", "error", "message", "object", "version",
         "model_path", "served_model_name", "internal_states", "avg_spec_accept_length", "index", "role"]
scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.just(10**400) | st.floats(allow_nan=True)
           | st.sampled_from(["", "length", "stop", "tiny", "x" * 50, "\x00\u2028"]) | st.text(max_size=8))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.sampled_from(NAMES) | st.text(max_size=4), inner, max_size=5),
                           max_leaves=20)


def _chunk() -> st.SearchStrategy[Any]:
    choice = st.fixed_dictionaries({}, optional={
        "delta": st.fixed_dictionaries({}, optional={"content": scalars, "tool_calls": json_values,
                                                     "role": scalars}) | json_values,
        "text": scalars, "index": scalars, "finish_reason": scalars})
    return st.fixed_dictionaries({}, optional={
        "choices": st.lists(choice | json_values, max_size=3) | json_values,
        "usage": st.fixed_dictionaries({}, optional={"completion_tokens": scalars}) | json_values,
        "meta_info": st.fixed_dictionaries({}, optional={"completion_tokens": scalars}),
        "error": json_values}) | json_values


lines = st.one_of(_chunk().map(lambda c: f"data: {json.dumps(c)}"), st.just("data: [DONE]"),
                  st.text(max_size=20), st.just(""), st.just(": ping"))


def _often(valid: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly ``valid``, sometimes ``odd``: streams that get past the warm-up, then break."""
    return st.one_of(valid, valid, valid, odd)


_delta = _often(st.fixed_dictionaries({"content": st.text(min_size=1, max_size=4)},
                                      optional={"tool_calls": json_values}), json_values)
_choice = _often(st.fixed_dictionaries({"delta": _delta, "index": st.just(0)}), json_values)
_content_chunk = _often(st.fixed_dictionaries({"choices": st.lists(_choice, min_size=1, max_size=2)},
                                              optional={"meta_info": json_values}), _chunk())
_final_chunk = _often(st.fixed_dictionaries({
    "choices": st.just([{"delta": {}, "index": 0, "finish_reason": "length"}]),
    "usage": _often(st.fixed_dictionaries({"completion_tokens": st.integers(-3, 40)}), json_values)}), _chunk())
near_valid_streams = st.builds(
    lambda body, final, done, junk, at: [*body[:at], *junk, *body[at:], final, *(["[DONE]"] if done else [])],
    st.lists(_content_chunk, min_size=2, max_size=14), _final_chunk, st.booleans(),
    st.lists(st.text(max_size=10), max_size=2), st.integers(0, 14))


PROPS = settings(max_examples=60, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _split(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(raw) + 1) for c in cuts})
    edges = [0, *points, len(raw)]
    return [raw[a:b] for a, b in zip(edges, edges[1:]) if b > a]


@PROPS
@given(st.lists(lines, max_size=20), st.lists(st.integers(0, 10_000), max_size=12), st.booleans())
def test_any_stream_cut_anywhere_ends_with_a_verdict(stream_lines, cuts, crlf):
    raw = "".join(line + ("\r\n" if crlf else "\n") for line in stream_lines).encode()
    server = Server(stream=lambda body: iter(_split(raw, cuts)))
    gate(server, model="tiny")


@PROPS
@given(near_valid_streams, st.lists(st.integers(0, 10_000), max_size=12))
def test_a_stream_that_breaks_after_the_warm_up_ends_with_a_verdict(chunks, cuts):
    raw = "".join(f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n" for c in chunks).encode()
    server = Server(stream=lambda body: _split(raw, cuts))
    gate(server, model="tiny", repeats=1)


def _answer(status: int, body: Any, raw: bool) -> httpx.Response:
    if raw:
        return httpx.Response(status, content=json.dumps(body).encode()[:-1] or b"{")
    return httpx.Response(status, content=json.dumps(body).encode(), headers={"content-type": "application/json"})


answers = st.builds(_answer, st.sampled_from([200, 200, 200, 404, 405, 422, 500, 503]), json_values, st.booleans())


@PROPS
@given(st.fixed_dictionaries({}, optional={"/health": answers, "/v1/models": answers, "/server_info": answers,
                                           "/get_server_info": answers}),
       st.sampled_from([None, "tiny"]))
def test_any_answer_from_any_endpoint_ends_with_a_verdict(routes, model):
    gate(Server(routes), model=model)


@PROPS
@given(st.dictionaries(st.sampled_from(NAMES + ["tp_size", "speculative_algorithm", "cuda_graph_config",
                                                "mem_fraction_static", "disable_custom_all_reduce",
                                                "attention_backend", "enable_nccl_nvls"]),
                       json_values, max_size=8))
def test_any_server_info_against_a_plan_ends_with_a_verdict(info):
    plan = {"host": "h", "model": "tiny", "sglang_version": "0.5.23", "gpus": {"count": 2, "model": "X"},
            "intents": {"tp_size": 2, "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
                        "mem_fraction_static": 0.8, "attention_backend": "fa3", "custom_all_reduce": True,
                        "nvls": False, "prefill_cuda_graph": "on"}}
    gate(Server({"/server_info": httpx.Response(200, content=json.dumps(info).encode())}), model="tiny",
         expect_plan=plan)


def test_measure_parse_never_raises_on_odd_chunks():
    parsed = measure.parse_sse([(0.0, 'data: {"meta_info": {"completion_tokens": 5}, "choices": [{"text": "a"}]}'),
                                (0.1, 'data: {"meta_info": {"completion_tokens": 2}, "choices": [{"text": "b"}]}')])
    assert [e[2] for e in parsed.events] == [5, None]


# ---------------------------------------------------------------------------
# /metrics: an extra, never a reason to fail
# ---------------------------------------------------------------------------


def _refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.mark.parametrize("answer", [
    httpx.Response(404, json={"detail": "Not Found"}),
    httpx.Response(500, text="Internal Server Error"),
    httpx.Response(401, json={"error": "Unauthorized"}),
    _refuse,
    httpx.Response(200, text="<html>a proxy page</html>"),
    httpx.Response(200, content=b"\xff\xfe\x00garbage{{{ sglang:gen_throughput{ NaN"),
])
def test_metrics_that_fail_or_mislead_are_no_figures_and_no_error(answer):
    r = gate(Server({"/metrics": answer}), model="tiny", concurrency=(1, 2))
    assert r["verdict"] == "pass", r["reasons"]
    assert r["server_metrics"] in (None, {"spec_accept_length": None, "gen_throughput": None, "source": "/metrics"})
    assert [lv["concurrency"] for lv in r["load"]] == [1, 2]


def test_metrics_gauges_are_read_after_the_measurement():
    server = Server({"/metrics": httpx.Response(200, text=(
        'sglang:gen_throughput{model_name="tiny",tp_rank="0"} 480.5\n'
        'sglang:spec_accept_length{model_name="tiny",tp_rank="0"} 3.25\n'))})
    r = gate(server, model="tiny")
    assert r["server_metrics"] == {"spec_accept_length": 3.25, "gen_throughput": 480.5, "source": "/metrics"}
    streams = [i for i, s in enumerate(server.seen) if s == "POST /v1/chat/completions"]
    assert server.seen.index("GET /metrics") > max(streams)


@pytest.mark.parametrize("kw, names", [
    ({"slo": "ttft_p90=2s"}, "--slo"),
    ({"slo": {"ttft_p95": 2.0}}, "--slo"),
    ({"slo": {"itl_p90": float("nan")}}, "--slo"),
    ({"concurrency": ()}, "--concurrency"),
    ({"concurrency": (1, 0)}, "--concurrency"),
    ({"abandon_below": ("latency", 1.0)}, "abandon_below"),
    ({"abandon_below": ("goodput", 1.0)}, "abandon_below"),  # goodput needs SLOs
    ({"abandon_below": ("decode", float("inf"))}, "abandon_below"),
])
def test_bad_load_options_are_refused_before_any_request(kw, names):
    server = Server()
    r = gate(server, model="tiny", **kw)
    assert r["verdict"] == "error" and r["error"]["step"] == names, r["reasons"]
    assert server.seen == []
