"""The controller's client of the SGLang Model Gateway (PyPI ``sglang-router`` 0.3.2): a
gateway's admin API (list, register, deregister, each with its wait), a streamed request through
it, and a serving host's own count of requests in flight (``in_flight``, ``wait_idle``).

The order of a worker's leave, drain, restart and re-admission is not here: the drain state
machine (``sglang_deploy.lifecycle.drain``) decides it and ``sglang_deploy.deploy.gateway`` (``drive``)
carries out its actions with these calls.

Why it works as it does (observed against the real 0.3.2 binary; see docs/gateway-api.md):

- ``POST /workers {"url", "api_key"}`` answers 202 and registers in a background job: the
  worker is listed by ``GET /workers`` only once the job has read the worker's ``/health``,
  ``/server_info`` and ``/model_info``, so ``wait_registered`` polls the list.
- A worker's ``id`` is a fresh UUID per registration and ``DELETE /workers/{id}`` takes only
  that UUID (a URL is refused with 400), so ``deregister`` looks the URL up first. The URL is
  compared as given: the gateway keeps ``http://h:1`` and ``http://h:1/`` as two workers, so
  this client sends and compares URLs without a trailing slash.
- Removal is a background job too (202): the worker leaves the list a moment later, and a new
  registration of the same URL while it is still listed fails in the job ("already exists").
  Hence ``wait_deregistered`` before anything registers the URL again.
- A stream that already runs on a worker ends normally after the worker is deregistered; the
  gateway's own ``load`` is counted only by load-aware policies (0 under ``round_robin`` with
  streams running), so ``wait_idle`` waits on the server's own ``/metrics`` instead, which also
  counts requests that came through other gateways or directly.
- A worker that requires an API key but is registered without it is still listed, healthy,
  with ``model_id`` ``"unknown"`` (its ``/server_info`` answered 401), and every request sent
  to it fails: ``wait_registered`` reports that instead of waiting.

Everything read from a gateway or a server is untrusted: bodies are size-bounded and read
within a deadline, lists and strings are bounded, types are checked. No message carries an
API key (the gateway's or a worker's), nor the password of a URL.
"""

from __future__ import annotations

import dataclasses

import json
import math
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import httpx

from sglang_deploy.deadline import DeadlinePassed, within
from sglang_deploy.gate import prom
from sglang_deploy.plan.pd_gateway import RoleOf, registration
from sglang_deploy.untrusted import (Scrubber, UntrustedInput, check_token, load_json, printable,
                                     redact_url, shown, url_secrets)

#: A gateway lists at most this many workers (a fleet is far smaller; a longer list is refused).
MAX_WORKERS = 10_000
#: ``GET /workers`` answer: about 600 bytes a worker in 0.3.2, so 10 000 fit well below this.
MAX_LIST_BYTES = 16 << 20
#: Any other answer of a gateway (a job receipt, an error, the readiness object).
MAX_ANSWER_BYTES = 1 << 20
#: A server's ``/metrics`` text (SGLang's is tens of KiB; histograms per rank make it longer).
MAX_METRICS_BYTES = 8 << 20
#: A URL, a model id or a worker type in an answer.
MAX_TEXT = 2048
#: A load figure beyond this is not a request count.
MAX_LOAD = 10 ** 9
#: How often the wait_* helpers poll the gateway's list.
POLL_S = 0.25

#: SGLang's scheduler gauges (SGLang 0.5.23, python/sglang/srt/observability/metrics_collector.py,
#: SchedulerMetricsCollector): requests running in the batch and requests waiting for it.
RUNNING = "sglang:num_running_reqs"
QUEUED = "sglang:num_queue_reqs"

_URL = re.compile(r"https?://[^\s/?#@]+(/[^\s?#]*)?", re.IGNORECASE)


class GatewayError(Exception):
    """A gateway (or, for ``in_flight``, a server) did not do what was asked. The message names
    its URL and the step; it never holds an API key. ``refused``: the host refused the
    connection (nothing listens on the port)."""

    def __init__(self, message: str, refused: bool = False):
        super().__init__(message)
        self.refused = refused


@dataclass(frozen=True)
class WorkerEntry:
    """One worker as ``GET /workers`` lists it (sglang-router 0.3.2)."""

    url: str
    id: str                      # a UUID; DELETE /workers/{id} takes only this
    healthy: bool | None         # "is_healthy"
    load: int | None             # "load": the gateway's own count, kept only by load-aware policies
    model_id: str | None = None  # "unknown" when the gateway could not read the worker's metadata
    worker_type: str | None = None  # "regular", or in prefill/decode mode "prefill" or "decode"


def normalize_url(url: str) -> str:
    """The form this client sends and compares: stripped, without a trailing slash."""
    return url.strip().rstrip("/")


def _check_url(url: Any, what: str) -> str:
    """An ``http(s)://host[:port][/path]`` URL without credentials or whitespace, normalized."""
    if not isinstance(url, str) or not url.strip() or len(url) > MAX_TEXT:
        raise GatewayError(f"{what}: not a URL: {shown(redact_url(url) if isinstance(url, str) else url)}")
    norm = normalize_url(url)
    if url_secrets(norm):
        raise GatewayError(f"{what}: {redact_url(norm)}: a URL with credentials; the gateway would list "
                           "them to anyone who reads GET /workers")
    if not _URL.fullmatch(norm):
        raise GatewayError(f"{what}: {shown(norm)} is not an http:// or https:// URL")
    return norm


def _check_key(key: str | None, what: str) -> str | None:
    if key is None:
        return None
    try:
        return check_token(key, what)
    except UntrustedInput as exc:
        raise GatewayError(str(exc)) from None


# ---- reading answers ---------------------------------------------------------------------------

def _text(value: Any, where: str, name: str, required: bool) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise GatewayError(f"{where}: {name} is {shown(value)}, not a string of 1 to {MAX_TEXT} characters")
    return value


def parse_worker(item: Any, where: str) -> WorkerEntry:
    """One entry of ``GET /workers``' ``workers`` list, checked."""
    if not isinstance(item, dict):
        raise GatewayError(f"{where}: an entry is {shown(item)}, not an object")
    url = _text(item.get("url"), where, "url", True)
    wid = _text(item.get("id"), where, "id", True)
    assert url is not None and wid is not None
    try:
        wid = str(uuid.UUID(wid))  # the id goes into a request path: a UUID and nothing else
    except ValueError:
        raise GatewayError(f"{where}: id {shown(wid)} is not a UUID") from None
    healthy = item.get("is_healthy")
    if healthy is not None and not isinstance(healthy, bool):
        raise GatewayError(f"{where}: is_healthy of {shown(url)} is {shown(healthy)}, not true or false")
    load = item.get("load")
    if load is not None and (isinstance(load, bool) or not isinstance(load, int) or not -1 <= load <= MAX_LOAD):
        raise GatewayError(f"{where}: load of {shown(url)} is {shown(load)}, not a request count")
    return WorkerEntry(url=url, id=wid, healthy=healthy, load=load,
                       model_id=_text(item.get("model_id"), where, "model_id", False),
                       worker_type=_text(item.get("worker_type"), where, "worker_type", False))


def parse_workers(body: bytes, where: str) -> list[WorkerEntry]:
    """``GET /workers``' answer (``{"workers": [...], "total": n, "stats": {...}}``), checked."""
    try:
        doc = load_json(body, where, max_bytes=MAX_LIST_BYTES)
    except UntrustedInput as exc:
        raise GatewayError(str(exc)) from None
    items = doc.get("workers") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise GatewayError(f"{where}: no list of workers in the answer")
    if len(items) > MAX_WORKERS:
        raise GatewayError(f"{where}: {len(items)} workers listed, more than the {MAX_WORKERS} accepted")
    return [parse_worker(item, where) for item in items]


def parse_in_flight(text: str, where: str) -> int | None:
    """Running plus queued requests over every series of SGLang's scheduler gauges (one per
    TP/DP rank or label set); None when the text has neither gauge."""
    values = [s.value for s in prom.parse(text) if s.name in (RUNNING, QUEUED)]
    if not values:
        return None
    if not all(math.isfinite(v) and 0 <= v <= MAX_LOAD and v == int(v) for v in values):
        raise GatewayError(f"{where}: {RUNNING} / {QUEUED} hold a value that is not a request count")
    return int(sum(values))


def _error_text(body: bytes, scrub: Scrubber) -> str:
    """The gateway's own words from an error answer (``{"error": ..., "code": ...}``), bounded."""
    text = body[:4096].decode("utf-8", "replace").strip()
    try:
        doc = load_json(text, "error", max_bytes=4096)
        if isinstance(doc, dict) and isinstance(doc.get("error"), str):
            text = doc["error"] + (f" ({doc['code']})" if isinstance(doc.get("code"), str) else "")
    except UntrustedInput:
        pass
    return printable(scrub.text(text))[:300] or "no text"


# ---- HTTP --------------------------------------------------------------------------------------

def _connection_refused(exc: BaseException) -> bool:
    """Whether ``exc`` comes from a refused connection (not a timeout, not a name that does not resolve)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _call(method: str, base: str, path: str, *, shown_as: str, step: str, key: str | None,
          scrub: Scrubber, timeout_s: float, max_bytes: int, body: Any = None,
          transport: httpx.BaseTransport | None = None) -> tuple[int, bytes]:
    """One request on a connection of its own, its answer read whole within ``timeout_s`` and
    ``max_bytes``; a failure of the transport is a GatewayError naming ``shown_as`` and ``step``."""
    # identity only: an answer is read as sent, never decompressed (a few KB of nested gzip can
    # decode to gigabytes), and one in another encoding is refused
    headers = {"Accept-Encoding": "identity", **({"Authorization": f"Bearer {key}"} if key else {})}
    deadline = time.monotonic() + timeout_s
    client = httpx.Client(timeout=timeout_s, trust_env=False, transport=transport)

    def exchange() -> tuple[int, bytes]:
        with client.stream(method, base + path, headers=headers, json=body) as r:
            encoding = r.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise GatewayError(f"{shown_as}: {step}: an answer in content encoding {encoding[:40]!r} "
                                   "(asked for identity; not decoded)")
            data = bytearray()
            for chunk in r.iter_bytes():  # identity: the bytes as sent
                data += chunk
                if len(data) > max_bytes:
                    raise GatewayError(f"{shown_as}: {step}: an answer over {max_bytes} bytes")
                if time.monotonic() > deadline:
                    raise GatewayError(f"{shown_as}: {step}: the answer did not end within {timeout_s:g} s")
            return r.status_code, bytes(data)

    try:
        # one deadline over connect, headers and body: a peer that trickles its headers keeps
        # every read under the client's timeout (sglang_deploy.deadline)
        with client:
            return within(timeout_s + 0.5, exchange, abort=client.close)
    except DeadlinePassed:
        raise GatewayError(f"{shown_as}: {step}: no whole answer within {timeout_s:g} s") from None
    except httpx.HTTPError as exc:
        detail = printable(scrub.text(str(exc) or type(exc).__name__))[:300]
        raise GatewayError(f"{shown_as}: {step}: {type(exc).__name__}: {detail}",
                           refused=_connection_refused(exc)) from None


class Gateway:
    """One gateway's admin API. Every call is bounded by ``timeout_s``; the API key, when the
    gateway was started with ``--api-key``, goes in ``Authorization: Bearer`` (0.3.2 then
    refuses ``/workers`` without it, 401) and never into a message."""

    def __init__(self, url: str, api_key: str | None, timeout_s: float = 10,
                 *, transport: httpx.BaseTransport | None = None):
        self.url = _check_url(url, "gateway URL")
        self.shown = "gateway " + redact_url(self.url)
        self._key = _check_key(api_key, f"{self.shown}: API key")
        if not (isinstance(timeout_s, (int, float)) and 0 < timeout_s <= 3600):
            raise GatewayError(f"{self.shown}: timeout {shown(timeout_s)} is not in (0, 3600] seconds")
        self.timeout_s = float(timeout_s)
        self._transport = transport  # a stand-in at the HTTP boundary, for unit tests
        self._secrets = [api_key, *url_secrets(url)]
        self._scrub = Scrubber(self._secrets)

    def __repr__(self) -> str:
        return f"Gateway({self.shown!r})"

    def _request(self, method: str, path: str, step: str, body: Any = None,
                 max_bytes: int = MAX_ANSWER_BYTES, scrub: Scrubber | None = None) -> tuple[int, bytes]:
        return _call(method, self.url, path, shown_as=self.shown, step=step, key=self._key,
                     scrub=scrub or self._scrub, timeout_s=self.timeout_s, max_bytes=max_bytes,
                     body=body, transport=self._transport)

    def _refused(self, step: str, status: int, body: bytes, scrub: Scrubber | None = None) -> GatewayError:
        if status == 401:
            why = "401: the gateway wants its API key" + (" and refused the one given" if self._key else "")
            return GatewayError(f"{self.shown}: {step}: {why}")
        return GatewayError(f"{self.shown}: {step}: HTTP {status}: {_error_text(body, scrub or self._scrub)}")

    def workers(self) -> list[WorkerEntry]:
        """The registered workers (``GET /workers``); a registration still in its job is not listed."""
        status, body = self._request("GET", "/workers", "list workers", max_bytes=MAX_LIST_BYTES)
        if status != 200:
            raise self._refused("list workers", status, body)
        # What the gateway says is its own: one that echoes the API key (as a worker's id or URL)
        # gets it masked in the error and in every URL handed on, so no output shows it.
        try:
            entries = parse_workers(body, f"{self.shown}: GET /workers")
        except GatewayError as exc:
            raise GatewayError(self._scrub.text(str(exc)), refused=exc.refused) from None
        return [dataclasses.replace(w, url=self._scrub.text(w.url)) if self._scrub.text(w.url) != w.url else w
                for w in entries]

    def find(self, worker_url: str) -> list[WorkerEntry]:
        """The entries of ``worker_url`` (one, unless someone registered it twice)."""
        want = _check_url(worker_url, f"{self.shown}: worker URL")
        return [w for w in self.workers() if normalize_url(w.url) == want]

    def register(self, worker_url: str, worker_api_key: str | None, role: RoleOf | None = None) -> None:
        """Ask the gateway to add the worker (``POST /workers``, answered 202 while a job adds it).
        Nothing is sent when the URL is already listed: the job would fail with "already exists".
        ``worker_api_key`` is the key the worker's SGLang was started with; a dynamically added
        worker does not inherit the gateway's key (sglang-router 0.3.2 README, "Router and Worker
        API Keys"). ``role``: a prefill or decode server's, sent as its ``worker_type`` (and a prefill
        server's ``bootstrap_port``): without it the gateway lists it ``regular`` and pairs it with
        nothing (``plan.pd_gateway.registration``)."""
        url = _check_url(worker_url, f"{self.shown}: worker URL")
        key = _check_key(worker_api_key, f"{self.shown}: API key of worker {redact_url(url)}")
        if self.find(url):
            return
        step = f"register {redact_url(url)}"
        scrub = Scrubber([*self._secrets, key])
        payload: dict[str, Any] = {"url": url, **registration(role)}
        if key:
            payload["api_key"] = key
        status, body = self._request("POST", "/workers", step, body=payload, scrub=scrub)
        if status not in (200, 201, 202):
            raise self._refused(step, status, body, scrub)

    def wait_registered(self, worker_url: str, timeout_s: float, poll_s: float = POLL_S) -> WorkerEntry:
        """Poll until the worker is listed and healthy; its entry. A worker listed with model_id
        "unknown" fails at once: the gateway could not read its metadata (a wrong or missing worker
        API key) and would send it requests that fail."""
        url = _check_url(worker_url, f"{self.shown}: worker URL")
        deadline = time.monotonic() + timeout_s
        while True:
            entries = self.find(url)
            for w in entries:
                if w.model_id == "unknown":
                    raise GatewayError(f"{self.shown}: worker {redact_url(url)} was added without its metadata "
                                       "(model_id unknown): the gateway could not read its /server_info; "
                                       "is the worker's API key right?")
                if w.healthy:
                    return w
            if time.monotonic() >= deadline:
                state = "listed but not healthy" if entries else "not listed"
                raise GatewayError(f"{self.shown}: worker {redact_url(url)} {state} after {timeout_s:g} s")
            time.sleep(poll_s)

    def deregister(self, worker_url: str) -> bool:
        """Ask the gateway to remove every entry of the worker (``DELETE /workers/{id}``, 202, a job);
        True when it was listed. Removing a worker that is not there changes nothing."""
        url = _check_url(worker_url, f"{self.shown}: worker URL")
        entries = self.find(url)
        for w in entries:
            step = f"deregister {redact_url(url)}"
            status, body = self._request("DELETE", f"/workers/{w.id}", step)
            if status == 404:  # gone between the list and the delete: what was asked for
                continue
            if status not in (200, 202, 204):
                raise self._refused(step, status, body)
        return bool(entries)

    def wait_deregistered(self, worker_url: str, timeout_s: float, poll_s: float = POLL_S) -> None:
        """Poll until the worker is no longer listed (its removal job has run)."""
        url = _check_url(worker_url, f"{self.shown}: worker URL")
        deadline = time.monotonic() + timeout_s
        while self.find(url):
            if time.monotonic() >= deadline:
                raise GatewayError(f"{self.shown}: worker {redact_url(url)} still listed after {timeout_s:g} s")
            time.sleep(poll_s)

    def ready(self) -> bool:
        """``GET /readiness``: True with 200 (at least one healthy worker), False with 503
        ("insufficient healthy workers"); anything else is a GatewayError."""
        status, body = self._request("GET", "/readiness", "readiness")
        if status == 200:
            return True
        if status == 503:
            return False
        raise self._refused("readiness", status, body)


    def alive(self) -> bool:
        """``GET /health``: the gateway process answers (200), whatever its workers' state; False when
        nothing answers or it answers otherwise."""
        try:
            status, _ = self._request("GET", "/health", "health")
        except GatewayError:
            return False
        return status == 200

    def stream_once(self, max_tokens: int = 8) -> tuple[float, int]:
        """One streamed chat completion through the gateway (the model its ``/v1/models`` lists
        first): (seconds, content chunks received). GatewayError when it fails or ends without
        ``[DONE]``."""
        status, body = self._request("GET", "/v1/models", "/v1/models")
        model = "default"
        if status == 200:
            try:
                listed = json.loads(body).get("data") or []
                first = listed[0].get("id") if listed and isinstance(listed[0], dict) else None
                model = first if isinstance(first, str) and 0 < len(first) <= MAX_TEXT else model
            except (ValueError, AttributeError):
                pass
        payload = {"model": model, "messages": [{"role": "user", "content": "Say hello."}],
                   "max_tokens": max_tokens, "temperature": 0, "stream": True}
        started = time.monotonic()
        status, body = self._request("POST", "/v1/chat/completions", "a streamed request", body=payload)
        if status != 200:
            raise self._refused("a streamed request", status, body)
        lines = [line for line in body.decode("utf-8", "replace").splitlines() if line.startswith("data:")]
        if not lines or lines[-1].strip() != "data: [DONE]":
            raise GatewayError(f"{self.shown}: a streamed request: the stream did not end with [DONE]")
        return time.monotonic() - started, len(lines) - 1


def server_answers(server_url: str, api_key: str | None, timeout_s: float) -> bool:
    """Whether the SGLang server answers its own ``GET /health`` with 200 (from here)."""
    url = _check_url(server_url, "server URL")
    try:
        status, _ = _call("GET", url, "/health", shown_as="server " + redact_url(url), step="/health",
                          key=_check_key(api_key, "server API key"), scrub=Scrubber([api_key]),
                          timeout_s=timeout_s, max_bytes=MAX_ANSWER_BYTES)
    except GatewayError:
        return False
    return status == 200


# ---- the server side ---------------------------------------------------------------------------

def in_flight(server_url: str, api_key: str | None, timeout_s: float,
              *, transport: httpx.BaseTransport | None = None) -> int | None:
    """Requests the SGLang server is running or holding in its queue: the sum of
    ``sglang:num_running_reqs`` and ``sglang:num_queue_reqs`` over all their label sets, from its
    own ``/metrics``. None when it serves no ``/metrics`` (started without ``--enable-metrics``)
    or the text has neither gauge. SGLang never asks a key for ``/metrics`` (0.5.23,
    python/sglang/srt/utils/auth.py, decide_request_auth); the key is sent anyway, harmlessly."""
    url = _check_url(server_url, "server URL")
    shown_as = "server " + redact_url(url)
    key = _check_key(api_key, f"{shown_as}: API key")
    status, body = _call("GET", url, "/metrics", shown_as=shown_as, step="/metrics", key=key,
                         scrub=Scrubber([api_key, *url_secrets(server_url)]), timeout_s=timeout_s,
                         max_bytes=MAX_METRICS_BYTES, transport=transport)
    if status == 404:
        return None
    if status != 200:
        raise GatewayError(f"{shown_as}: /metrics: HTTP {status}")
    return parse_in_flight(body.decode("utf-8", "replace"), f"{shown_as}: /metrics")


def _reading(server_url: str, api_key: str | None, timeout_s: float) -> int | None:
    """One in-flight reading for ``wait_idle``: a refused connection (nothing listens on the port) means
    nothing in flight (0); a server that cannot be read, or serves no /metrics, gives None."""
    try:
        return in_flight(server_url, api_key, timeout_s)
    except GatewayError as exc:
        return 0 if exc.refused else None


def wait_idle(server_url: str, api_key: str | None, timeout_s: float, poll_s: float = 0.5,
              clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
              start: float | None = None) -> tuple[bool, int | None]:
    """Poll the server's in-flight count (``_reading``) every ``poll_s`` until it reads 0 twice in a
    row (a request may be between the gateway and the scheduler at the first zero) or ``timeout_s``
    passed since ``start`` (default: now): (timed out, the last reading). A server without /metrics,
    or one that cannot be read, never reads 0: the wait then lasts the whole timeout."""
    start = clock() if start is None else start
    zeros, last = 0, None
    while True:
        last = _reading(server_url, api_key, max(1.0, min(10.0, timeout_s)))
        zeros = zeros + 1 if last == 0 else 0
        if zeros >= 2:
            return False, last
        if clock() - start >= timeout_s:
            return True, last
        sleep(poll_s)
