"""The gate's HTTP side: wait for a running SGLang (or OpenAI-compatible) server, read
what it resolved (``/server_info``, ``/v1/models``), and stream fixed prompts at it with
every line stamped on arrival. The records go to the pure ``measure.py``; a server that
cannot be measured raises ``GateError``, never a slow figure."""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import httpx

from . import measure
from .errors import GateError
from .measure import MeasureError, RequestFigures

HEALTH_PATHS = ("/health_generate", "/health", "/v1/models")
PROGRESS_EVERY_S = 5.0

Progress = Callable[[str], None]


def _server_text(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text.strip()[:200]
    if isinstance(body, dict):
        err = body.get("error")
        msg = body.get("message") or (err.get("message") if isinstance(err, dict) else err) or body.get("detail")
        if msg:
            return str(msg)[:200]
    return json.dumps(body)[:200]


def _permanent_connect_failure(exc: Exception) -> bool:
    text = str(exc)
    return "Name or service not known" in text or "nodename nor servname" in text


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
            r = client.get(path, timeout=httpx.Timeout(max(0.5, min(30.0, remaining)), connect=min(5.0, max(0.5, remaining))))
            reached = True
            if r.status_code == 200:
                return {"ready_s": round(clock() - start, 3), "endpoint": path, "polls": polls}
            if r.status_code in (404, 405) and idx < len(HEALTH_PATHS) - 1:
                idx += 1
                continue
            if r.status_code in (401, 403):
                raise GateError("ready", f"{path} answered {r.status_code} (unauthorized): pass the server's "
                                         "API key with --api-key-env VAR")
            last = f"{path} answered {r.status_code}"
        except httpx.ConnectError as exc:
            if _permanent_connect_failure(exc):
                raise GateError("ready", f"cannot resolve the host of the URL: {exc}") from None
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


def _get_json(client: httpx.Client, path: str, step: str) -> Any:
    """GET ``path`` and decode its JSON; None when the server has no such endpoint (404/405).

    Transport errors, 401/403 (with the hint to pass the API key), any other
    status and a body that is not JSON are the gate's own failure (GateError).
    """
    try:
        r = client.get(path)
    except httpx.HTTPError as exc:
        raise GateError(step, f"{path}: {type(exc).__name__}: {exc}") from None
    if r.status_code in (404, 405):
        return None
    if r.status_code in (401, 403):
        raise GateError(step, f"{path} answered {r.status_code} (unauthorized): pass the API key "
                              "with --api-key-env VAR")
    if r.status_code != 200:
        raise GateError(step, f"{path} answered {r.status_code}: {_server_text(r)}")
    try:
        return r.json()
    except ValueError:
        raise GateError(step, f"{path} answered something that is not JSON") from None


def read_server_info(client: httpx.Client) -> tuple[dict[str, Any] | None, str | None]:
    for path in ("/server_info", "/get_server_info"):
        body = _get_json(client, path, "server_info")
        if isinstance(body, dict):
            return body, path
    return None, None


def list_models(client: httpx.Client) -> list[str] | None:
    body = _get_json(client, "/v1/models", "models")
    if body is None:
        return None
    try:
        return [str(m["id"]) for m in body.get("data") or [] if isinstance(m, dict) and "id" in m]
    except AttributeError:
        raise GateError("models", "/v1/models answered something that is not a model list") from None


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

    def body(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0, "stream": True}
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


def record_stream(client: httpx.Client, path: str, body: dict[str, Any],
                  cancel: threading.Event | None = None) -> Recorded:
    """POST and stamp every SSE line with perf_counter() when its bytes arrive; give up at
    the next chunk once ``cancel`` is set."""
    stamped: list[tuple[float, bytes]] = []
    buf = b""
    t_sent = time.perf_counter()
    try:
        with client.stream("POST", path, json=body) as r:
            if r.status_code != 200:
                r.read()
                raise _HTTPRefused(r.status_code, _server_text(r))
            for data in r.iter_bytes():
                t = time.perf_counter()
                if cancel is not None and cancel.is_set():
                    raise StreamCancelled()
                buf += data
                if b"\n" in buf:
                    *complete, buf = buf.split(b"\n")
                    stamped.extend((t, line) for line in complete)
            t_end = time.perf_counter()
    except httpx.ReadTimeout:
        raise GateError("measure", f"{path}: the stream stalled (no data for the stall timeout) after "
                                   f"{len(stamped)} line(s)") from None
    except httpx.TimeoutException as exc:
        raise GateError("measure", f"{path}: timed out ({type(exc).__name__})") from None
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        raise GateError("measure", f"{path}: the server broke off the response after {len(stamped)} "
                                   f"line(s): {exc}") from None
    except httpx.ConnectError as exc:
        raise GateError("measure", f"{path}: cannot connect: {exc}") from None
    if buf:
        stamped.append((t_end, buf))
    return Recorded(t_sent, [(t, line.decode("utf-8", "replace")) for t, line in stamped])


def measure_one(client: httpx.Client, shape: RequestShape, prompt: str, max_tokens: int,
                cancel: threading.Event | None = None) -> RequestFigures:
    try:
        rec = record_stream(client, shape.path, shape.body(prompt, max_tokens), cancel)
    except _HTTPRefused as exc:
        raise GateError("measure", f"{shape.path} answered {exc.status}: {exc.text}") from None
    parsed = measure.parse_sse(rec.lines)
    if parsed.error:
        raise GateError("measure", f"{shape.path}: the server reported an error mid-stream: {parsed.error}")
    if not parsed.done and parsed.finish_reason is None:
        raise GateError("measure", f"{shape.path}: the stream ended before the response finished")
    try:
        return measure.measure_request(rec.t_sent, parsed.events, parsed.usage,
                                       finish_reason=parsed.finish_reason, max_tokens=max_tokens)
    except MeasureError as exc:
        raise GateError("measure", f"{shape.path}: {exc}") from None


def negotiate(client: httpx.Client, model: str | None, prompt: str, max_tokens: int,
              warnings: list[str]) -> RequestShape:
    """Warm-up request that also finds what this server accepts: chat first,
    then completions; ignore_eos and include_usage dropped only if refused."""
    ladders = [
        ("/v1/chat/completions", [(True, True), (False, True), (False, False)]),
        ("/v1/completions", [(True, True), (False, True), (False, False)]),
    ]
    first_refusal: str | None = None
    for path, variants in ladders:
        for ignore_eos, usage in variants:
            shape = RequestShape(path, model, ignore_eos, usage)
            try:
                rec = record_stream(client, path, shape.body(prompt, max_tokens))
            except _HTTPRefused as exc:
                if exc.status in (401, 403):
                    raise GateError("warm-up", f"{path} answered {exc.status} (unauthorized): pass the API key "
                                               "with --api-key-env VAR") from None
                if exc.status >= 500:
                    raise GateError("warm-up", f"{path} answered {exc.status}: {exc.text}") from None
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
               max_tokens: int, progress: Progress, cancel: threading.Event | None = None) -> list[RequestFigures]:
    out = []
    for i in range(repeats):
        out.append(measure_one(client, shape, prompts[i % len(prompts)], max_tokens, cancel))
    progress(f"single stream: {repeats} request(s), median decode "
             f"{measure.spread([r.decode_tok_s for r in out]).median:.1f} tok/s")
    return out


def run_concurrent(client: httpx.Client, shape: RequestShape, prompts: Sequence[str], n: int, rounds: int,
                   max_tokens: int, progress: Progress,
                   cancel: threading.Event | None = None) -> list[list[RequestFigures]]:
    """``rounds`` rounds of ``n`` concurrent streams. Each round's workers are started
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
    progress(f"{n} concurrent streams: {rounds} round(s)")
    return results


