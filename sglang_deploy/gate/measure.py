"""What the gate measures, computed from recorded streams (pure: no I/O, no clock).

The I/O side (``client.py``) sends a request, stamps every line of the
server-sent-event stream with ``time.perf_counter()`` as it arrives, and hands
the stamped lines here. Everything else is arithmetic on that record:

* ``parse_sse`` turns stamped SSE lines of ``/v1/chat/completions`` or
  ``/v1/completions`` into content events ``(t, text, tokens_or_None)``, the
  server's ``usage`` and the finish reason.
* ``measure_request`` computes one request's figures: TTFT (request sent ->
  first content chunk), decode tok/s = (completion tokens - k1) / (t_last -
  t_first), where k1 is the first chunk's token count when the stream says it
  and 1 otherwise, and inter-token latencies spread over the tokens each chunk
  carried (a chunk of k tokens after a gap g counts as k gaps of g / k).
  Completion tokens come from the server's usage, never from the number of
  chunks: with speculative decoding one chunk carries several tokens.
  Without usage: ``max_tokens`` when the stream ended on ``length``, else an
  estimate from the text (one token per word or punctuation mark), always
  with a warning.
* ``spread`` and ``percentile`` are the statistics; ``aggregate_tok_s`` is the
  output throughput of concurrent streams.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence, TypeGuard

Event = tuple[float, str, "int | None"]
"""(arrival time in seconds, text the chunk carried, tokens it carried when the server says so)."""

_PIECE = re.compile(r"\w+|[^\w\s]", re.UNICODE)

TEXT_ESTIMATE_NOTE = (
    "one token per word or punctuation mark (real tokenizers give roughly 1.2-1.5x more for English)"
)


# A single stream's decode rate above this is not a measurement. Each decode step of one
# sequence is at least one forward pass of the model, and SGLang's scheduler loop alone
# takes on the order of a millisecond per step (sglang/srt/managers/scheduler.py,
# event_loop_normal); speculative decoding emits at most speculative_num_draft_tokens per
# step (tens at most). Published single-stream records are a few thousand tok/s (Cerebras'
# wafer-scale inference, 2024-2025): 50,000 tok/s is an order of magnitude above them.
DECODE_TOK_S_MAX = 50_000.0
# More tokens per text chunk than this is flagged: SGLang streams one chunk per decode step
# (stream_interval 1), a step carries at most the speculative draft (tens of tokens).
TOKENS_PER_CHUNK_MAX = 32.0


class MeasureError(ValueError):
    """A stream from which no decode rate can be computed (the gate cannot measure)."""


# ---------------------------------------------------------------------------
# parsing the stream
# ---------------------------------------------------------------------------


@dataclass
class ParsedStream:
    events: list[Event]
    usage: dict[str, Any] | None
    finish_reason: str | None
    done: bool  # saw "data: [DONE]"
    error: str | None = None  # an error object the server sent inside the stream
    t_final: float | None = None  # arrival of the first chunk with finish_reason or usage: the end of decoding


def _count(value: Any) -> int | None:
    """A token count as the server sent it: an int that is not a bool, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _choice_text(choice: dict[str, Any]) -> str:
    delta = choice.get("delta")
    if isinstance(delta, dict):  # chat
        parts = [delta.get("content"), delta.get("reasoning_content"), delta.get("reasoning")]
        text = "".join(p for p in parts if isinstance(p, str))
        calls = delta.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            fn = call.get("function") if isinstance(call, dict) else None
            args = fn.get("arguments") if isinstance(fn, dict) else None
            text += args if isinstance(args, str) else ""
        return text
    completion = choice.get("text")  # completions
    return completion if isinstance(completion, str) else ""


def _load(data: str) -> tuple[Any, str | None]:
    try:
        return json.loads(data), None
    except (ValueError, RecursionError):
        return None, f"unparseable stream line: {data[:120]!r}"


def _error_text(obj: dict[str, Any]) -> str | None:
    if obj.get("error") or obj.get("object") == "error":
        err = obj.get("error", obj)
        return str(err.get("message") if isinstance(err, dict) else err)[:300]
    return None


def parse_sse(lines: Iterable[tuple[float, str]]) -> ParsedStream:
    """Stamped SSE lines -> content events, usage and finish reason.

    Only ``data:`` lines count; a chunk whose choices carry no text (the
    role-only first chunk, the finish chunk, the usage chunk) is no content
    event. A chunk carrying ``meta_info.completion_tokens`` (cumulative, as
    SGLang's native API does) gives that chunk's exact token count. Fields of
    an unexpected type are ignored, never trusted.
    """
    out = ParsedStream(events=[], usage=None, finish_reason=None, done=False)
    cumulative = 0
    for t, line in lines:
        line = line.rstrip("\r")
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            out.done = True
            continue
        obj, bad = _load(data)
        if bad:
            out.error = bad
            continue
        if not isinstance(obj, dict):
            continue
        err = _error_text(obj)
        if err is not None:
            out.error = err
            continue
        final = False
        if isinstance(obj.get("usage"), dict):
            out.usage, final = obj["usage"], True
        tokens: int | None = None
        meta = obj.get("meta_info")
        done_tokens = _count(meta.get("completion_tokens")) if isinstance(meta, dict) else None
        if done_tokens is not None and done_tokens >= cumulative:
            tokens, cumulative = done_tokens - cumulative, done_tokens
        text = ""
        choices = obj.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict):
                continue
            text += _choice_text(choice)
            if choice.get("finish_reason"):
                out.finish_reason, final = str(choice["finish_reason"])[:60], True
        if text or (tokens or 0) > 0:
            out.events.append((t, text, tokens))
        if final and out.t_final is None:
            out.t_final = t
    return out


# ---------------------------------------------------------------------------
# one request
# ---------------------------------------------------------------------------


def estimate_tokens(text: str) -> int:
    """The stated approximation used only when the server sends no usage."""
    return len(_PIECE.findall(text))


def apportion(weights: Sequence[float], total: int) -> list[int]:
    """Split ``total`` tokens over chunks in proportion to ``weights`` (largest
    remainder), every chunk at least one token when ``total`` allows. When the
    weights already add up to ``total`` they come back unchanged."""
    n = len(weights)
    if n == 0:
        return []
    if total <= n:
        return [1] * total + [0] * (n - total)
    w = [max(0.0, float(x)) for x in weights]
    wsum = sum(w)
    if wsum <= 0:
        w, wsum = [1.0] * n, float(n)
    exact = [total * x / wsum for x in w]
    counts = [int(math.floor(x + 1e-9)) for x in exact]
    left = total - sum(counts)
    order = sorted(range(n), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[:max(left, 0)]:
        counts[i] += 1
    while sum(counts) > total:  # float edge: take back from the largest
        counts[max(range(n), key=lambda k: counts[k])] -= 1
    for i in range(n):  # every chunk carried at least one token
        while counts[i] < 1:
            j = max(range(n), key=lambda k: (counts[k], -k))
            counts[j] -= 1
            counts[i] += 1
    return counts


@dataclass
class RequestFigures:
    ttft_s: float
    decode_tok_s: float
    completion_tokens: int
    tokens_source: str  # usage | stream | max_tokens | text-estimate
    chunks: int
    tokens_per_chunk: float
    t_sent: float
    t_first: float
    t_last: float
    finish_reason: str | None
    itl_s: list[float] = field(default_factory=list, repr=False)
    warnings: list[str] = field(default_factory=list)

    @property
    def decode_s(self) -> float:
        return self.t_last - self.t_first

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        itl = d.pop("itl_s")
        d["itl_ms_p50"] = round(percentile(itl, 50) * 1000, 4) if itl else None
        for k in ("t_sent", "t_first", "t_last"):
            d.pop(k)
        d["decode_s"] = round(self.decode_s, 6)
        for k in ("ttft_s", "decode_tok_s", "tokens_per_chunk"):
            d[k] = round(d[k], 6)
        return d


def completion_tokens(events: Sequence[Event], usage: dict[str, Any] | None, finish_reason: str | None,
                      max_tokens: int | None) -> tuple[int, str, list[str]]:
    """(tokens, where the count came from, warnings). Usage first, never chunks."""
    if usage and _count(usage.get("completion_tokens")) is not None:
        return usage["completion_tokens"], "usage", []
    if events and all(e[2] is not None for e in events):
        return sum(int(e[2] or 0) for e in events), "stream", []
    if finish_reason == "length" and max_tokens:
        return max_tokens, "max_tokens", [
            f"the server sent no usage; completion tokens taken as max_tokens ({max_tokens}) "
            "because the stream finished on length"
        ]
    text = "".join(e[1] for e in events)
    n = estimate_tokens(text)
    return n, "text-estimate", [
        f"the server sent no usage; completion tokens estimated from the text as {TEXT_ESTIMATE_NOTE}: "
        "decode tok/s is approximate"
    ]


def chunk_tokens(events: Sequence[Event], total: int) -> list[int]:
    """Tokens each content chunk carried: exact where the stream says so,
    otherwise the usage total spread over chunks by their text (words and
    punctuation), so the counts always add up to the server's total."""
    if events and all(e[2] is not None for e in events) and sum(int(e[2] or 0) for e in events) == total:
        return [int(e[2] or 0) for e in events]
    weights = [max(1, estimate_tokens(e[1])) for e in events]
    return apportion(weights, total)


def itl_gaps(events: Sequence[Event], counts: Sequence[int]) -> list[float]:
    """Inter-token latencies: the gap before each chunk after the first, spread
    evenly over the tokens it carried (k tokens after a gap g: k gaps of g/k)."""
    out: list[float] = []
    for i in range(1, len(events)):
        k = counts[i]
        if k <= 0:
            continue
        g = events[i][0] - events[i - 1][0]
        out.extend([g / k] * k)
    return out


def measure_request(t_sent: float, events: Sequence[Event], usage: dict[str, Any] | None = None, *,
                    finish_reason: str | None = None, max_tokens: int | None = None,
                    t_final: float | None = None) -> RequestFigures:
    """One request's figures from its recorded content events. The decode window ends at
    ``t_final``, the stream's final chunk (finish reason or usage) when there is one: a
    byte-level tokenizer emits tokens whose text is empty, so the last text chunk may come
    well before the last token."""
    if not events:
        raise MeasureError("the stream carried no content")
    total, source, warnings = completion_tokens(events, usage, finish_reason, max_tokens)
    if max_tokens and source in ("usage", "stream") and total > max_tokens:
        raise MeasureError(f"the server's figures cannot be trusted: it counted {total} completion tokens "
                           f"for a request of at most max_tokens={max_tokens}")
    t_first = events[0][0]
    t_last = max(events[-1][0], t_final) if t_final is not None else events[-1][0]
    counts = chunk_tokens(events, total)
    first = events[0][2] if events[0][2] is not None else 1
    after_first = total - first
    if len(events) < 2 or t_last <= t_first or after_first <= 0:
        raise MeasureError(
            f"no decode phase to time: {total} token(s) in {len(events)} chunk(s); raise max_tokens"
        )
    if max_tokens and finish_reason == "stop" and total < max_tokens:
        warnings.append(f"the request stopped at {total} of {max_tokens} tokens (the server ignored ignore_eos)")
    per_chunk = total / len(events)
    if per_chunk > TOKENS_PER_CHUNK_MAX or per_chunk < 1:
        warnings.append(f"{total} token(s) in {len(events)} text chunk(s) ({per_chunk:.2f} per chunk): "
                        + ("fewer tokens than chunks that carried text: the server's count looks wrong"
                           if per_chunk < 1 else
                           "the server batches its output (or sends tokens with empty text): "
                           "the inter-token latencies are spread evenly over each chunk"))
    return RequestFigures(
        ttft_s=t_first - t_sent,
        decode_tok_s=after_first / (t_last - t_first),
        completion_tokens=total,
        tokens_source=source,
        chunks=len(events),
        tokens_per_chunk=per_chunk,
        t_sent=t_sent,
        t_first=t_first,
        t_last=t_last,
        finish_reason=finish_reason,
        itl_s=itl_gaps(events, counts),
        warnings=warnings,
    )


def implausible(figures: RequestFigures) -> str | None:
    """Why one request's decode rate cannot be true (above ``DECODE_TOK_S_MAX``), or None.
    (A count above max_tokens is refused by ``measure_request`` itself.)"""
    if not math.isfinite(figures.decode_tok_s) or figures.decode_tok_s > DECODE_TOK_S_MAX:
        return (f"a single-stream decode rate of {figures.decode_tok_s:.0f} tok/s is above any real server's "
                f"({DECODE_TOK_S_MAX:g} tok/s): the stream was buffered on the way or its token count is wrong")
    return None


# ---------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), like numpy's default."""
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    if len(xs) == 1:
        return float(xs[0])
    pos = (len(xs) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


@dataclass(frozen=True)
class Spread:
    median: float
    min: float
    max: float
    p10: float
    p90: float
    n: int

    def as_dict(self, ndigits: int = 4, scale: float = 1.0) -> dict[str, Any]:
        return {k: (round(v * scale, ndigits) if k != "n" else v) for k, v in asdict(self).items()}


def spread(values: Sequence[float]) -> Spread:
    if not values:
        raise ValueError("spread of no values")
    return Spread(
        median=percentile(values, 50), min=float(min(values)), max=float(max(values)),
        p10=percentile(values, 10), p90=percentile(values, 90), n=len(values),
    )


def itl_summary_ms(requests: Sequence[RequestFigures]) -> dict[str, float] | None:
    """ITL percentiles in milliseconds over every token of the given requests."""
    gaps = [g for r in requests for g in r.itl_s]
    if not gaps:
        return None
    return {
        "p10": round(percentile(gaps, 10) * 1000, 4),
        "p50": round(percentile(gaps, 50) * 1000, 4),
        "p90": round(percentile(gaps, 90) * 1000, 4),
        "p99": round(percentile(gaps, 99) * 1000, 4),
        "min": round(min(gaps) * 1000, 4),
        "max": round(max(gaps) * 1000, 4),
        "mean": round(sum(gaps) / len(gaps) * 1000, 4),
        "n": len(gaps),
    }


def aggregate_tok_s(requests: Sequence[RequestFigures]) -> float:
    """Output throughput of concurrent streams: every completion token over the
    wall time from the first request sent to the last token received."""
    if not requests:
        raise ValueError("no requests")
    start = min(r.t_sent for r in requests)
    end = max(r.t_last for r in requests)
    if end <= start:
        raise MeasureError("concurrent streams took no time")
    return sum(r.completion_tokens for r in requests) / (end - start)


def _finite(v: object) -> TypeGuard[float]:
    """A number (an int or a float, not a bool) that is finite; the type checker may treat it as a float."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def mean_accept_length(server_info: dict[str, Any] | None) -> float | None:
    """``avg_spec_accept_length`` from ``internal_states`` (mean over DP ranks
    that report it), or None when the server reports none."""
    if not isinstance(server_info, dict):
        return None
    states = server_info.get("internal_states")
    if isinstance(states, dict):
        states = [states]
    if not isinstance(states, list):
        states = []
    reported = [s.get("avg_spec_accept_length") for s in states if isinstance(s, dict)]
    values = [float(v) for v in reported if _finite(v)]
    if not values and _finite(server_info.get("avg_spec_accept_length")):
        values = [float(server_info["avg_spec_accept_length"])]
    return sum(values) / len(values) if values else None
