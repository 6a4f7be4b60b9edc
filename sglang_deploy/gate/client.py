"""The gate's HTTP side: wait for a running SGLang (or OpenAI-compatible) server, read
what it resolved (``/server_info``, ``/v1/models``), and stream fixed prompts at it with
every line stamped on arrival. The records go to the pure ``measure.py``; a server that
cannot be measured raises ``GateError``, never a slow figure."""

from __future__ import annotations

import concurrent.futures
import json
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import httpx

from sglang_deploy.deadline import DeadlinePassed, within
from sglang_deploy.gate import measure
from sglang_deploy.gate.errors import GateError
from sglang_deploy.gate.measure import MeasureError, RequestFigures
from sglang_deploy.gate.options import default
from sglang_deploy.gate.scrub import Scrubber

HEALTH_PATHS = ("/health_generate", "/health", "/v1/models")
#: SGLang's bootstrap host of a request without a KV transfer (0.5.23 srt/disaggregation/utils.py).
FAKE_BOOTSTRAP_HOST = "2.2.2.2"
PROGRESS_EVERY_S = 5.0
# The slowest decode the gate waits for: one token a second. A request's whole stream must end
# within twice the stall timeout (the first token) plus max_tokens of those, so a stream that
# never ends, or trickles a byte at a time, ends as a failure instead of holding the gate.
SLOWEST_TOKEN_S = 1.0
# Bytes a stream may carry: generous for logprobs and tool calls, bounded against a flood.
STREAM_BYTES_BASE = 1 << 20
STREAM_BYTES_PER_TOKEN = 16 << 10
GET_BODY_MAX = 4 << 20
# The errors of a kept-alive connection the server had already closed: re-sent once, on a
# new connection, when nothing of the answer had arrived (the server never saw the request).
STALE_CONNECTION = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
# getaddrinfo's messages for a host that does not resolve (glibc, musl, macOS)
_UNRESOLVABLE = ("Name or service not known", "nodename nor servname", "No address associated with hostname",
                 "Name does not resolve", "Temporary failure in name resolution", "getaddrinfo failed")

Progress = Callable[[str], None]


def stream_deadline_s(max_tokens: int, stall_timeout: float) -> float:
    """The overall bound of one streamed request (see ``SLOWEST_TOKEN_S``)."""
    return 2 * stall_timeout + max_tokens * SLOWEST_TOKEN_S


def _stall_s(client: httpx.Client) -> float:
    """The client's read timeout (run_check sets it to the stall timeout), else the stall timeout's default."""
    read = client.timeout.read
    return float(read) if read else float(default("stall_timeout"))


def key_scrubber(client: httpx.Client) -> Scrubber:
    """Masks the key this client sends (``Authorization: Bearer KEY``) in server text."""
    auth = client.headers.get("authorization") or ""
    scheme, _, key = auth.partition(" ")
    return Scrubber([key.strip() or None, auth.strip() or None])


def server_text(content: bytes, scrub: Scrubber) -> str:
    """The server's own words from an error body: its message, else the body's start;
    secrets masked before the text is cut."""
    text = content.decode("utf-8", "replace")
    try:
        body = json.loads(text)
        if isinstance(body, dict):
            err = body.get("error")
            msg = body.get("message") or (err.get("message") if isinstance(err, dict) else err) \
                or body.get("detail")
            if msg:
                return scrub.text(str(msg))[:200]
        return scrub.text(json.dumps(body))[:200]
    except (ValueError, RecursionError, TypeError):
        return scrub.text(text.strip())[:200]


def _unresolvable(exc: Exception) -> bool:
    text = str(exc)
    return any(m in text for m in _UNRESOLVABLE)


@dataclass
class Answer:
    """A GET's answer, read whole within its deadline and size bound."""

    status: int
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content.decode("utf-8"))


def _get(client: httpx.Client, path: str, timeout: httpx.Timeout | None = None,
         deadline_s: float | None = None) -> Answer:
    """GET ``path`` on a connection that is not kept (a server that fails a GET may close
    it, and a request sent on it after would race the close), re-sent once when the
    connection broke before any answer; the body read within ``deadline_s``."""
    bound = deadline_s if deadline_s is not None else 2 * _stall_s(client)
    deadline = time.monotonic() + bound
    kw: dict[str, Any] = {"headers": {"Connection": "close", "Accept-Encoding": "identity"}}
    if timeout is not None:
        kw["timeout"] = timeout

    def exchange() -> Answer:
        for attempt in (1, 2):
            try:
                with client.stream("GET", path, **kw) as r:
                    refuse_encoding(r)
                    body = b""
                    for data in r.iter_bytes():
                        body += data
                        if len(body) > GET_BODY_MAX:
                            raise httpx.DecodingError(f"an answer over {GET_BODY_MAX >> 20} MiB")
                        if time.monotonic() > deadline:
                            raise httpx.ReadTimeout("the answer did not end within its deadline")
                    return Answer(r.status_code, body)
            except STALE_CONNECTION:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    try:
        # one deadline over connect, headers and body: a server that trickles its headers keeps
        # every read under the client's timeout (sglang_deploy.deadline)
        return within(bound + 1.0, exchange)
    except DeadlinePassed:
        raise httpx.ReadTimeout(f"no whole answer within {bound:g} s") from None


def refuse_encoding(r: httpx.Response) -> None:
    """The gate asks for the identity encoding: an answer in another one is refused, not decoded
    (a few KB of nested gzip decode to gigabytes)."""
    encoding = r.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise httpx.DecodingError(f"an answer in content encoding {encoding[:40]!r} (asked for identity)")


# ---------------------------------------------------------------------------
# 1. ready
# ---------------------------------------------------------------------------


def wait_ready(client: httpx.Client, timeout: float, progress: Progress,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep,
               watch: Callable[[], None] | None = None) -> dict[str, Any]:
    """Poll /health_generate (then /health, then /v1/models where the server has
    no such path) with exponential backoff capped at 1 s, until 200 or timeout.
    ``watch`` runs before each wait (see ``CheckOptions.watch``)."""
    start = clock()
    next_note = start + PROGRESS_EVERY_S
    idx, delay = 0, 0.05
    reached = False
    last = "no answer yet"
    polls = 0
    while True:
        path = HEALTH_PATHS[idx]
        remaining = timeout - (clock() - start)
        try:
            polls += 1
            r = _get(client, path, httpx.Timeout(max(0.5, min(30.0, remaining)), connect=min(5.0, max(0.5, remaining))),
                     deadline_s=max(0.5, min(30.0, remaining)))
            reached = True
            if r.status == 200:
                # ready_at: this machine's wall clock, for the serving gap (sglang_deploy.downtime)
                return {"ready_s": round(clock() - start, 3), "endpoint": path, "polls": polls,
                        "ready_at": round(time.time(), 3)}
            if r.status in (404, 405) and idx < len(HEALTH_PATHS) - 1:
                idx += 1
                continue
            if r.status in (401, 403):
                raise Unauthorized("ready", f"{path} answered {r.status} (unauthorized): pass the server's "
                                         "API key with --api-key-env VAR")
            last = f"{path} answered {r.status}"
        except httpx.ConnectError as exc:
            if _unresolvable(exc):
                raise GateError("ready", f"the server is unreachable: cannot resolve the host of the URL "
                                         f"({exc})") from None
            last = f"connection failed ({exc})"
        except httpx.TimeoutException:
            reached = True
            last = f"{path} timed out"
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        now = clock()
        if now - start >= timeout:
            if reached:
                raise GateError("ready", f"the server never became ready within {timeout:g} s (last: {last})")
            raise GateError("ready", f"the server is unreachable: nothing answered within {timeout:g} s "
                                     f"(last: {last})")
        if now >= next_note:
            progress(f"waiting for the server to be ready: {now - start:.0f} s of {timeout:g} s (last: {last})")
            next_note = now + PROGRESS_EVERY_S
        if watch is not None:
            watch()
        sleep(max(0.0, min(delay, timeout - (now - start))))
        delay = min(delay * 2, 1.0)


# ---------------------------------------------------------------------------
# 2. what the server resolved
# ---------------------------------------------------------------------------


class Unauthorized(GateError):
    """The server refused the key (401/403): never something to warn about and go on."""


def _describe(value: Any) -> str:
    try:
        shown = json.dumps(value, default=str)[:60]
    except (ValueError, RecursionError):
        shown = "..."
    return f"a JSON {type(value).__name__} {shown}"


def _get_json(client: httpx.Client, path: str, step: str) -> Any:
    """GET ``path`` and decode its JSON; None when the server has no such endpoint (404/405).

    Transport errors, 401/403 (``Unauthorized``, with the hint to pass the API key), any
    other status and a body that is not JSON raise GateError; the caller decides whether
    the endpoint is one the gate can do without.
    """
    try:
        r = _get(client, path)
    except httpx.HTTPError as exc:
        if isinstance(exc, httpx.ConnectError) and _unresolvable(exc):
            raise GateError(step, f"the server is unreachable: cannot resolve the host ({exc})") from None
        raise GateError(step, f"{path}: {type(exc).__name__}: {exc}") from None
    if r.status in (404, 405):
        return None
    if r.status in (401, 403):
        raise Unauthorized(step, f"{path} answered {r.status} (unauthorized): pass the API key "
                                 "with --api-key-env VAR")
    if r.status != 200:
        raise GateError(step, f"{path} answered {r.status}: {server_text(r.content, key_scrubber(client))}")
    try:
        return r.json()
    except (ValueError, RecursionError):
        raise GateError(step, f"unexpected answer from {path}: not JSON") from None


def read_server_info(client: httpx.Client) -> tuple[dict[str, Any] | None, str | None]:
    """The server's resolved arguments (SGLang's /server_info, /get_server_info before
    0.4.6); (None, None) when it has neither. A body that is not a JSON object is an
    unexpected answer (GateError), not a missing endpoint."""
    for path in ("/server_info", "/get_server_info"):
        body = _get_json(client, path, "server_info")
        if body is None:
            continue
        if not isinstance(body, dict):
            raise GateError("server_info", f"unexpected answer from {path}: {_describe(body)} where an "
                                           "object was expected")
        return body, path
    return None, None


def list_models(client: httpx.Client) -> list[str] | None:
    """The ids of ``/v1/models`` (None without the endpoint); a body not shaped
    ``{"data": [{"id": ...}, ...]}`` is an unexpected answer (GateError)."""
    body = _get_json(client, "/v1/models", "models")
    if body is None:
        return None
    data = body.get("data", []) if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise GateError("models", f"unexpected answer from /v1/models: {_describe(body)} is not a model list")
    return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]]


# ---------------------------------------------------------------------------
# 3. streams
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestShape:
    """How this server is asked: endpoint and the optional fields it accepts."""

    path: str  # /v1/chat/completions | /v1/completions
    model: str | None
    ignore_eos: bool
    include_usage: bool
    # A prefill or decode server (--disaggregation-mode) refuses a request without a bootstrap room;
    # one from SGLang's FAKE_BOOTSTRAP_HOST runs without a KV transfer (SGLang 0.5.23
    # srt/disaggregation/utils.py; its own warm-up, srt/entrypoints/warmup.py, asks so): each request
    # gets that host and a room of its own.
    fake_bootstrap: bool = False

    def body(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0, "stream": True}
        if self.fake_bootstrap:
            body.update(bootstrap_host=FAKE_BOOTSTRAP_HOST, bootstrap_room=secrets.randbits(63))
        if self.model:
            body["model"] = self.model
        if self.path.endswith("chat/completions"):
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if self.ignore_eos:
            body["ignore_eos"] = True
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        return body


class _HTTPRefused(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(f"{status}: {text}")
        self.status = status
        self.text = text


@dataclass
class Recorded:
    t_sent: float
    lines: list[tuple[float, str]]


class StreamCancelled(Exception):
    """The watch saw the service go down (``cancel`` set): the stream was abandoned."""


class _Broken(Exception):
    """The connection broke; ``answered`` when part of the answer had arrived."""

    def __init__(self, exc: Exception, answered: bool):
        super().__init__(str(exc))
        self.exc, self.answered = exc, answered


def _stream_once(client: httpx.Client, path: str, body: dict[str, Any], cancel: threading.Event | None,
                 deadline_s: float, max_bytes: int, stamped: list[tuple[float, bytes]]) -> tuple[float, float, bytes]:
    """One POST, its lines stamped into ``stamped``: (t_sent, t_end, the unfinished last line)."""
    buf = b""
    total = 0
    t_sent = time.perf_counter()
    answered = False
    try:
        with client.stream("POST", path, json=body, headers={"Accept-Encoding": "identity"}) as r:
            answered = True
            refuse_encoding(r)
            if r.status_code != 200:
                content = b""
                for data in r.iter_bytes():
                    content += data
                    if len(content) > GET_BODY_MAX or time.perf_counter() - t_sent > deadline_s:
                        break
                raise _HTTPRefused(r.status_code, server_text(content, key_scrubber(client)))
            for data in r.iter_bytes():
                t = time.perf_counter()
                if cancel is not None and cancel.is_set():
                    raise StreamCancelled()
                total += len(data)
                if t - t_sent > deadline_s:
                    raise GateError("", f"{path}: the stream did not end within {deadline_s:g} s (the bound for "
                                        f"max_tokens at the slowest rate the gate waits for) after "
                                        f"{len(stamped)} line(s)")
                if total > max_bytes:
                    raise GateError("", f"{path}: the stream carried over {max_bytes >> 10} KiB without ending "
                                        f"after {len(stamped)} line(s)")
                buf += data
                if b"\n" in buf:
                    *complete, buf = buf.split(b"\n")
                    stamped.extend((t, line) for line in complete)
            return t_sent, time.perf_counter(), buf
    except STALE_CONNECTION as exc:
        raise _Broken(exc, answered or bool(stamped)) from None


def record_stream(client: httpx.Client, path: str, body: dict[str, Any],
                  cancel: threading.Event | None = None, step: str = "measure") -> Recorded:
    """POST and stamp every SSE line with perf_counter() when its bytes arrive; give up at
    the next chunk once ``cancel`` is set, and at the request's overall deadline. A
    connection that broke before any answer arrived (a kept-alive one the server had
    closed) is retried once on a new connection."""
    max_tokens = int(body.get("max_tokens") or 0)
    deadline_s = stream_deadline_s(max_tokens, _stall_s(client))
    max_bytes = STREAM_BYTES_BASE + max_tokens * STREAM_BYTES_PER_TOKEN
    for attempt in (1, 2):
        stamped: list[tuple[float, bytes]] = []
        try:
            t_sent, t_end, buf = _stream_once(client, path, body, cancel, deadline_s, max_bytes, stamped)
            break
        except _Broken as exc:
            if attempt == 1 and not exc.answered:
                continue
            raise GateError(step, f"{path}: the server broke off the response after {len(stamped)} "
                                  f"line(s): {exc.exc}") from None
        except GateError as exc:
            raise GateError(step, exc.message) from None
        except httpx.ReadTimeout:
            raise GateError(step, f"{path}: the stream stalled (no data for the stall timeout) after "
                                  f"{len(stamped)} line(s)") from None
        except httpx.TimeoutException as exc:
            raise GateError(step, f"{path}: timed out ({type(exc).__name__})") from None
        except httpx.ConnectError as exc:
            raise GateError(step, f"{path}: cannot connect: {exc}") from None
        except httpx.HTTPError as exc:
            raise GateError(step, f"{path}: {type(exc).__name__}: {exc}") from None
    if buf:
        stamped.append((t_end, buf))
    scrub = key_scrubber(client)
    return Recorded(t_sent, [(t, scrub.text(line.decode("utf-8", "replace"))) for t, line in stamped])


def _refused(step: str, path: str, exc: _HTTPRefused) -> GateError:
    if exc.status in (401, 403):
        return Unauthorized(step, f"{path} answered {exc.status} (unauthorized): pass the API key "
                                  "with --api-key-env VAR")
    return GateError(step, f"{path} answered {exc.status}: {exc.text}")


def measure_stream(client: httpx.Client, shape: RequestShape, prompt: str, max_tokens: int,
                   cancel: threading.Event | None = None, step: str = "measure") -> tuple[float, measure.ParsedStream]:
    """One streamed request, parsed: (when it was sent, the stream). An error the server sent, or
    a stream that ended before the response finished, is GateError."""
    try:
        rec = record_stream(client, shape.path, shape.body(prompt, max_tokens), cancel, step=step)
    except _HTTPRefused as exc:
        raise _refused(step, shape.path, exc) from None
    parsed = measure.parse_sse(rec.lines)
    if parsed.error:
        raise GateError(step, f"{shape.path}: the server reported an error mid-stream: {parsed.error}")
    if not parsed.done and parsed.finish_reason is None:
        raise GateError(step, f"{shape.path}: the stream ended before the response finished")
    return rec.t_sent, parsed


#: Times a single stream whose rate cannot be true is measured again before the gate gives up. A
#: client the machine leaves unscheduled for a moment reads a whole stream in one burst once (a
#: simulated server's 200 tok/s read as 124,356 beside CI's lanes on 2 cores); a proxy that buffers
#: does it every time, and still fails the gate.
IMPLAUSIBLE_RETRIES = 2


def measure_one(client: httpx.Client, shape: RequestShape, prompt: str, max_tokens: int,
                cancel: threading.Event | None = None, retry_implausible: bool = False) -> RequestFigures:
    """One request's figures. ``retry_implausible`` (single streams only: a concurrent round's streams
    must start together): a rate no real server reaches is measured again, up to
    IMPLAUSIBLE_RETRIES times, and the figures kept say so in a warning."""
    discarded: list[float] = []
    while True:
        t_sent, parsed = measure_stream(client, shape, prompt, max_tokens, cancel)
        try:
            figures = measure.measure_request(t_sent, parsed.events, parsed.usage,
                                              finish_reason=parsed.finish_reason, max_tokens=max_tokens,
                                              t_final=parsed.t_final)
        except MeasureError as exc:
            raise GateError("measure", f"{shape.path}: {exc}") from None
        distrust = measure.implausible(figures)
        if not distrust:
            if discarded:
                figures.warnings.append(
                    f"{len(discarded)} stream(s) read at {', '.join(f'{r:.0f}' for r in discarded)} tok/s, above any "
                    "real server's, were measured again: the client read them in one burst")
            return figures
        if not retry_implausible or len(discarded) == IMPLAUSIBLE_RETRIES:
            tries = f" (measured {len(discarded) + 1} times)" if discarded else ""
            raise GateError("measure", f"{shape.path}: the server's figures cannot be trusted: {distrust}{tries}")
        discarded.append(figures.decode_tok_s)


def negotiate(client: httpx.Client, model: str | None, prompt: str, max_tokens: int,
              warnings: list[str], fake_bootstrap: bool = False) -> RequestShape:
    """Warm-up request that also finds what this server accepts: chat first,
    then completions; ignore_eos and include_usage dropped only if refused. ``fake_bootstrap``:
    a prefill or decode server's requests (``RequestShape.fake_bootstrap``)."""
    ladders = [
        ("/v1/chat/completions", [(True, True), (False, True), (False, False)]),
        ("/v1/completions", [(True, True), (False, True), (False, False)]),
    ]
    first_refusal: str | None = None
    for path, variants in ladders:
        for ignore_eos, usage in variants:
            shape = RequestShape(path, model, ignore_eos, usage, fake_bootstrap)
            try:
                rec = record_stream(client, path, shape.body(prompt, max_tokens), step="warm-up")
            except _HTTPRefused as exc:
                if exc.status in (401, 403) or exc.status >= 500:
                    raise _refused("warm-up", path, exc) from None
                first_refusal = first_refusal or f"{path} answered {exc.status}: {exc.text}"
                if exc.status in (404, 405):
                    break  # no such endpoint: next one
                continue
            parsed = measure.parse_sse(rec.lines)
            if parsed.error:
                raise GateError("warm-up", f"{path}: the server reported an error mid-stream: {parsed.error}")
            if not parsed.events:
                raise GateError("warm-up", f"{path}: the warm-up stream carried no text")
            if path != "/v1/chat/completions":
                warnings.append("the server has no usable /v1/chat/completions: measured with /v1/completions")
            if not ignore_eos:
                warnings.append("the server refused ignore_eos: output length may vary between requests")
            if not usage:
                warnings.append("the server refused stream_options.include_usage")
            return shape
    raise GateError("warm-up", f"the server accepted no streamed request ({first_refusal})")


def run_single(client: httpx.Client, shape: RequestShape, prompts: Sequence[str], repeats: int,
               max_tokens: int, progress: Progress, cancel: threading.Event | None = None,
               stop: Callable[[list[RequestFigures]], bool] | None = None) -> list[RequestFigures]:
    """``repeats`` requests one after the other; ``stop`` (the requests so far) ends them early."""
    out: list[RequestFigures] = []
    for i in range(repeats):
        out.append(measure_one(client, shape, prompts[i % len(prompts)], max_tokens, cancel, retry_implausible=True))
        if stop is not None and stop(out):
            break
    progress(f"single stream: {len(out)} request(s), median decode "
             f"{measure.spread([r.decode_tok_s for r in out]).median:.1f} tok/s")
    return out


def run_concurrent(client: httpx.Client, shape: RequestShape, prompts: Sequence[str], n: int, rounds: int,
                   max_tokens: int, progress: Progress, cancel: threading.Event | None = None,
                   stop: Callable[[list[list[RequestFigures]]], bool] | None = None) -> list[list[RequestFigures]]:
    """``rounds`` rounds of ``n`` concurrent streams (``stop``, given the rounds so far, ends
    them after a round). Each round's workers are started
    first and released together from a barrier, so the streams start as close together
    as the client can send them (the aggregate's window opens at the first send: a
    stream started late would lower it without the server being slow)."""
    results: list[list[RequestFigures]] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
        for _ in range(rounds):
            barrier = threading.Barrier(n)

            def one(i: int, barrier: threading.Barrier = barrier) -> RequestFigures:
                barrier.wait(timeout=60)
                return measure_one(client, shape, prompts[i % len(prompts)], max_tokens, cancel)

            futures = [pool.submit(one, i) for i in range(n)]
            results.append([f.result() for f in futures])
            if stop is not None and stop(results):
                break
    progress(f"{n} concurrent streams: {len(results)} round(s), median aggregate "
             f"{measure.spread([measure.aggregate_tok_s(rd) for rd in results]).median:.1f} tok/s")
    return results


def read_metrics(client: httpx.Client) -> str | None:
    """SGLang's Prometheus text (``/metrics``, served with ``--enable-metrics``), or None when
    the server does not answer it with 200: the figures in it are extras, never a reason to
    fail the gate."""
    try:
        wait = min(10.0, _stall_s(client))
        r = _get(client, "/metrics", httpx.Timeout(wait, connect=min(5.0, wait)), deadline_s=wait)
    except httpx.HTTPError:
        return None
    if r.status != 200:
        return None
    return r.content.decode("utf-8", "replace")


