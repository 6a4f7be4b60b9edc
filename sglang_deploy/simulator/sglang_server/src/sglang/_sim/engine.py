"""Token generation on a schedule.

Every request gets its own timeline, fixed when it arrives:

* the first token (from the prefill) at ``t0 = arrival + ttft_s``
  (+ ``prompt_tokens / prefill_tok_s`` when set);
* output token ``i`` (0-based) is due at ``t0 + i / decode_tok_s``;
* a chunk is sent at the due time of its last token.  The first chunk is one
  token (the prefill's, as in SGLang); every later chunk but the last carries
  exactly ``tokens_per_chunk`` tokens (default: ``--stream-interval``, or,
  with speculative decoding, a deterministic sequence whose mean is the
  accept length: e.g. 2.5 -> 2, 3, 2, 3, ...), the last one the remainder;
* faults.stall_after_tokens shifts every chunk after the one that brings the
  count to N by stall_s; faults.stall_forever_after_tokens stops before it.

With a performance model (the behaviour file's ``performance``, ``perf.py``)
each request's TTFT, rate and accept length come from the model instead, given
the server args and the requests in flight when it arrives (those whose
planned last token is still ahead).

Deadlines are absolute (``time.monotonic``), so sleeping does not accumulate
error: (tokens - 1) / (t_last - t_first) is the configured rate to well
under 1% for a few dozen tokens. A chunk sent late (the process did not run)
is caught up: the chunks already due follow at once, so a request's end stays
on time under load. A late first chunk therefore shortens the window a client
times from the first chunk to the last by its lateness: a test that reads a
rate from that window times a second or more of tokens.
"""

from __future__ import annotations

import math
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union

WORDS = [" The", " simulated", " server", " says", " hello", " and", " counts", " tokens", "."]


def sleep_until(deadline: float) -> None:
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(left)


def token_text(index: int) -> str:
    return WORDS[index % len(WORDS)]


@dataclass
class Plan:
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    chunks: List[int]  # tokens per chunk, summing to completion_tokens
    t0: float  # when the first chunk is due (monotonic)
    rate: float
    speculative: bool
    stall_after: Optional[int] = None  # faults.stall_after_tokens
    stall_s: float = 0.0
    hang_after: Optional[int] = None  # faults.stall_forever_after_tokens

    def boundary(self, tokens: Optional[int]) -> Optional[int]:
        """Index of the first chunk sent once ``tokens`` tokens have gone out
        (a chunk is never split); None when the plan ends before that."""
        if tokens is None:
            return None
        sent = 0
        for index, size in enumerate(self.chunks):
            if sent >= tokens:
                return index
            sent += size
        return None

    def hang_index(self) -> Optional[int]:
        """The chunk before which the stream stops for good (None: never)."""
        return self.boundary(self.hang_after)

    def schedule(self) -> Iterator[Tuple[float, int, int]]:
        """(due time, first token index, token count) per chunk; chunks after
        the stall boundary are all shifted by stall_s."""
        stall_at = self.boundary(self.stall_after)
        start = 0
        for index, size in enumerate(self.chunks):
            last = start + size - 1
            due = self.t0 + last / self.rate
            if stall_at is not None and index >= stall_at:
                due += self.stall_s
            yield due, start, size
            start += size


@dataclass
class Stats:
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    last_gen_throughput: float = 0.0
    spec_tokens: int = 0
    spec_steps: int = 0
    running: int = 0  # generation requests in flight, for the num_running_reqs gauge

    @contextmanager
    def in_flight(self) -> Iterator[None]:
        """Count one generation request from its arrival to its last byte."""
        with self.lock:
            self.running += 1
        try:
            yield
        finally:
            with self.lock:
                self.running -= 1

    def record(self, plan: Plan, t_first: Optional[float], t_last: Optional[float]) -> None:
        with self.lock:
            self.requests += 1
            self.prompt_tokens += plan.prompt_tokens
            self.generation_tokens += plan.completion_tokens
            if t_first is not None and t_last is not None and t_last > t_first:
                self.last_gen_throughput = (plan.completion_tokens - plan.chunks[0]) / (t_last - t_first)
            if plan.speculative and len(plan.chunks) > 1:
                self.spec_tokens += sum(plan.chunks[1:])
                self.spec_steps += len(plan.chunks) - 1

    def avg_spec_accept_length(self) -> Optional[float]:
        with self.lock:
            return self.spec_tokens / self.spec_steps if self.spec_steps else None


class RequestError(ValueError):
    """A request SGLang would refuse (HTTP 400)."""


class Engine:
    def __init__(self, info: Mapping[str, Any], cfg: Mapping[str, Any], accept_length: Optional[float],
                 model: Any = None):
        self.info = info
        self.cfg = cfg
        self.accept_length = accept_length
        self.stats = Stats()
        self.model = model  # perf.PerfModel or None
        self.rng = model.rng() if model is not None else None
        self.lock = threading.Lock()
        self.ends: List[float] = []  # planned end of each request in flight (with a model)

    # -- counting -------------------------------------------------------------

    def count_prompt_tokens(self, prompt: Any) -> int:
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            return max(1, len(prompt))  # token ids
        if isinstance(prompt, list):
            text = "".join(self._text_of(p) for p in prompt)
        else:
            text = self._text_of(prompt)
        return max(1, int(math.ceil(len(text) * float(self.cfg["prompt_tokens_per_char"]))))

    def _text_of(self, value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, str):
            return value
        if isinstance(value, dict):  # a chat message or a content part
            if "content" in value:
                return self._text_of(value["content"])
            return str(value.get("text") or "")
        if isinstance(value, list):
            return "".join(self._text_of(v) for v in value)
        return str(value)

    # -- planning ---------------------------------------------------------------

    def chunk_sizes(self, n: int, accept_length: Optional[float] = None) -> List[int]:
        if n <= 0:
            return []
        accept = self.accept_length if accept_length is None else accept_length
        sizes = [1]
        fixed = self.cfg.get("tokens_per_chunk")
        left = n - 1
        k = 0
        while left > 0:
            if fixed:
                size = int(fixed)
            elif accept:
                size = int(math.floor((k + 1) * accept + 1e-9)) - int(math.floor(k * accept + 1e-9))
            else:
                size = int(self.info.get("stream_interval") or 1)
            size = max(1, min(size, left))
            sizes.append(size)
            left -= size
            k += 1
        return sizes

    def plan(self, prompt_tokens: int, max_tokens: Any, ignore_eos: bool, arrival: float,
             extra_ttft: Union[float, Callable[[], float]] = 0.0,
             stall: Optional[Mapping[str, Any]] = None) -> Plan:
        """The request's timeline.  ``extra_ttft`` (or its callable, called only
        once the request is accepted) is added to the TTFT; ``stall`` holds
        the Plan's stall fields."""
        if max_tokens is None:
            max_tokens = self.cfg["default_max_tokens"]
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise RequestError(f"max_tokens must be a non-negative integer, got {max_tokens!r}")
        context = int(self.info.get("context_length") or self.cfg["context_length"])
        if prompt_tokens + max_tokens > context:
            raise RequestError(
                f"Requested token count exceeds the model's maximum context length of {context} "
                f"tokens. You requested a total of {prompt_tokens + max_tokens} tokens: "
                f"{prompt_tokens} tokens from the input messages and {max_tokens} tokens for the "
                "completion. Please reduce the number of tokens in the input messages or the "
                "completion to fit within the limit."
            )
        n, finish = max_tokens, "length"
        eos = self.cfg.get("eos_after_tokens")
        if eos is not None and not ignore_eos and int(eos) < n:
            n, finish = int(eos), "stop"
        extra = float(extra_ttft() if callable(extra_ttft) else extra_ttft)
        if self.model is not None:
            return self._modelled(prompt_tokens, n, finish, arrival, extra, stall)
        ttft = float(self.cfg["ttft_s"]) + extra
        if self.cfg.get("prefill_tok_s"):
            ttft += prompt_tokens / float(self.cfg["prefill_tok_s"])
        return Plan(
            prompt_tokens=prompt_tokens,
            completion_tokens=n,
            finish_reason=finish,
            chunks=self.chunk_sizes(n),
            t0=arrival + ttft,
            rate=float(self.cfg["decode_tok_s"]),
            speculative=self.accept_length is not None,
            **dict(stall or {}),
        )

    def _modelled(self, prompt_tokens: int, n: int, finish: str, arrival: float, extra: float,
                  stall: Optional[Mapping[str, Any]]) -> Plan:
        """The plan from the performance model, given the requests in flight at arrival."""
        with self.lock:
            self.ends = [end for end in self.ends if end > arrival]
            ttft, rate, accept = self.model.request(self.info, len(self.ends), prompt_tokens, self.rng,
                                                    max_tokens=n)
            t0 = arrival + ttft + extra
            self.ends.append(t0 + max(0, n - 1) / rate)
        return Plan(
            prompt_tokens=prompt_tokens,
            completion_tokens=n,
            finish_reason=finish,
            chunks=self.chunk_sizes(n, accept),
            t0=t0,
            rate=rate,
            speculative=accept is not None,
            **dict(stall or {}),
        )

    def internal_state(self) -> Dict[str, Any]:
        state: Dict[str, Any] = {
            "last_gen_throughput": round(self.stats.last_gen_throughput, 3),
            "memory_usage": {"weight": 25.1, "kvcache": 12.4, "graph": 0.6, "token_capacity": 200000},
        }
        avg = self.stats.avg_spec_accept_length()
        if avg is not None:
            state["avg_spec_accept_length"] = round(avg, 4)
        return state
