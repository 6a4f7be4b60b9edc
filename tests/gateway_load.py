"""A client load for tests of restarts behind a gateway: N threads, each sending streamed chat
completions in a loop to one base URL, every request's outcome recorded.

A request is ok when it answered 200 and its stream ended with ``data: [DONE]`` after a
``finish_reason``; anything else (an HTTP error, a refused connection, a stream cut short, a
stream past its deadline) is a failure with its reason. ``stop()`` lets the requests under
way finish and counts them; a request started after ``stop()`` was called is not counted.

    load = ClientLoad("http://127.0.0.1:30000", api_key=None, streams=6).start()
    ...  # restart a worker behind the gateway
    result = load.stop()
    assert result.failed == 0, result.failures[:3]
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

ERROR_TEXT_MAX = 300
STREAM_BYTES_MAX = 4 << 20


@dataclass(frozen=True)
class RequestRecord:
    start: float          # time.monotonic() when the request was sent
    end: float
    ok: bool
    error: str | None     # why it failed, at most ERROR_TEXT_MAX characters, never the API key
    tokens: int           # completion tokens: the usage figure, else the content chunks seen

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class LoadResult:
    requests: int
    ok: int
    failed: int
    failures: list[RequestRecord]
    p50_s: float | None
    p99_s: float | None
    records: list[RequestRecord] = field(repr=False, default_factory=list)


def _percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


class ClientLoad:
    """``streams`` threads sending streamed ``/v1/chat/completions`` in a loop."""

    def __init__(self, base_url: str, api_key: str | None = None, streams: int = 4, max_tokens: int = 32,
                 timeout_s: float = 30.0, model: str | None = None, prompt: str = "Say hello."):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.streams = streams
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                                     "stream": True, "stream_options": {"include_usage": True}}
        if model:
            self.body["model"] = model
        self._stopping = threading.Event()
        self._stopped_at: float | None = None
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []
        self._threads: list[threading.Thread] = []

    def start(self) -> ClientLoad:
        for i in range(self.streams):
            t = threading.Thread(target=self._loop, name=f"client-load-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def snapshot(self) -> list[RequestRecord]:
        """The requests finished so far."""
        with self._lock:
            return list(self._records)

    def stop(self, timeout_s: float | None = None) -> LoadResult:
        """Stop sending; wait for the requests under way (at most ``timeout_s``, default the
        request timeout and a margin); the result of the requests started before this call."""
        self._stopped_at = time.monotonic()
        self._stopping.set()
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self.timeout_s + 5)
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            raise RuntimeError(f"client load: {len(alive)} thread(s) still in a request after the stop timeout")
        with self._lock:
            records = [r for r in self._records if r.start < self._stopped_at]
        failures = [r for r in records if not r.ok]
        latencies = [r.seconds for r in records if r.ok]
        return LoadResult(requests=len(records), ok=len(records) - len(failures), failed=len(failures),
                          failures=failures, p50_s=_percentile(latencies, 50), p99_s=_percentile(latencies, 99),
                          records=records)

    # ---- one thread ----------------------------------------------------------------------------

    def _loop(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        # One connection per request: a kept-alive connection to a worker that went away would
        # turn the next request's failure into a retry question of the client, not the gateway.
        while not self._stopping.is_set():
            start = time.monotonic()
            ok, error, tokens = self._one(headers, start)
            record = RequestRecord(start=start, end=time.monotonic(), ok=ok, error=self._bounded(error),
                                   tokens=tokens)
            with self._lock:
                self._records.append(record)

    def _bounded(self, text: str | None) -> str | None:
        if text is None:
            return None
        if self.api_key:
            text = text.replace(self.api_key, "***")
        return text[:ERROR_TEXT_MAX]

    def _one(self, headers: dict[str, str], start: float) -> tuple[bool, str | None, int]:
        deadline = start + self.timeout_s
        chunks, usage_tokens, finished, done, size = 0, None, False, False, 0
        try:
            with httpx.Client(timeout=self.timeout_s, trust_env=False) as client:
                with client.stream("POST", self.base_url + "/v1/chat/completions", json=self.body,
                                   headers={**headers, "Connection": "close"}) as r:
                    if r.status_code != 200:
                        text = r.read()[:ERROR_TEXT_MAX].decode("utf-8", "replace")
                        return False, f"HTTP {r.status_code}: {text}", 0
                    for line in r.iter_lines():
                        size += len(line)
                        if size > STREAM_BYTES_MAX or time.monotonic() > deadline:
                            return False, "stream over its size or time bound", chunks
                        if not line.startswith("data: "):
                            continue
                        data = line[6:].strip()
                        if data == "[DONE]":
                            done = True
                            break
                        event = json.loads(data)
                        if event.get("usage"):
                            usage_tokens = int(event["usage"].get("completion_tokens") or 0)
                        for choice in event.get("choices") or []:
                            if (choice.get("delta") or {}).get("content"):
                                chunks += 1
                            if choice.get("finish_reason"):
                                finished = True
        except (httpx.HTTPError, ValueError, TypeError, AttributeError) as exc:
            return False, f"{type(exc).__name__}: {exc}", usage_tokens or chunks
        tokens = usage_tokens if usage_tokens is not None else chunks
        if not (done and finished):
            return False, "stream ended without finish_reason and [DONE]", tokens
        return True, None, tokens
