"""The gate's stream arithmetic and statistics (sglang_deploy/measure.py) on
synthetic streams shaped like SGLang's SSE output: 1, 2 and 4 tokens per
chunk, with and without usage, with jittered arrival times."""

from __future__ import annotations

import json
import random

import pytest

from sglang_deploy.gate import measure
from sglang_deploy.gate.measure import MeasureError, apportion, measure_request, parse_sse, percentile, spread

WORDS = [" The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."]


def sse_stream(n: int, rate: float, tpc: int, *, ttft: float = 0.05, t_sent: float = 100.0, usage: bool = True,
               jitter: float = 0.0, seed: int = 0, chat: bool = True, finish: str = "length",
               first_chunk: int = 1) -> list[tuple[float, str]]:
    """Stamped SSE lines like SGLang's: token i due at t_first + i / rate; a chunk
    arrives when its last token is due (plus uniform jitter in +-jitter)."""
    rng = random.Random(seed)
    t0 = t_sent + ttft
    sizes = [min(first_chunk, n)]
    while sum(sizes) < n:
        sizes.append(min(tpc, n - sum(sizes)))
    lines: list[tuple[float, str]] = []
    base = {"id": "x", "object": "chat.completion.chunk" if chat else "text_completion", "model": "m"}
    if chat:
        lines.append((t0, "data: " + json.dumps(dict(base, choices=[{"index": 0, "delta": {"role": "assistant",
                                                                                          "content": ""}}]))))
    start = 0
    t = t0
    for size in sizes:
        last = start + size - 1
        t = t0 + last / rate + (rng.uniform(-jitter, jitter) if jitter else 0.0)
        text = "".join(WORDS[i % len(WORDS)] for i in range(start, start + size))
        choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
        lines.append((t, "data: " + json.dumps(dict(base, choices=[dict(choice, finish_reason=None)], usage=None))))
        lines.append((t, ""))
        start += size
    fin = {"index": 0, "delta": {}, "finish_reason": finish} if chat else {"index": 0, "text": "",
                                                                            "finish_reason": finish}
    lines.append((t, "data: " + json.dumps(dict(base, choices=[fin]))))
    if usage:
        lines.append((t, "data: " + json.dumps(dict(base, choices=[], usage={
            "prompt_tokens": 10, "completion_tokens": n, "total_tokens": n + 10}))))
    lines.append((t, "data: [DONE]"))
    return lines


def figures(lines, t_sent=100.0, max_tokens=None):
    p = parse_sse(lines)
    return measure_request(t_sent, p.events, p.usage, finish_reason=p.finish_reason, max_tokens=max_tokens)


@pytest.mark.parametrize("tpc", [1, 2, 4])
def test_decode_rate_counts_tokens_from_usage_not_chunks(tpc):
    f = figures(sse_stream(101, 50.0, tpc))
    assert f.completion_tokens == 101 and f.tokens_source == "usage"
    assert f.chunks == 1 + 100 // tpc
    assert f.decode_tok_s == pytest.approx(50.0, rel=1e-9)
    assert f.ttft_s == pytest.approx(0.05)
    assert f.tokens_per_chunk == pytest.approx(101 / f.chunks)
    # counting chunks instead would have under-counted by the chunk size
    assert (f.chunks - 1) / (f.t_last - f.t_first) == pytest.approx(50.0 / tpc)


@pytest.mark.parametrize("tpc", [1, 2, 4])
def test_itl_spreads_each_gap_over_the_tokens_of_its_chunk(tpc):
    f = figures(sse_stream(41, 100.0, tpc))
    assert len(f.itl_s) == 40  # one latency per token after the first
    assert all(g == pytest.approx(0.01) for g in f.itl_s)
    assert percentile(f.itl_s, 50) == pytest.approx(0.01)


def test_itl_with_uneven_chunks_uses_each_chunks_token_count():
    # speculative decoding: 1, then 3 tokens after 30 ms, then 1 token after 30 ms
    events = [(0.0, " a", None), (0.03, " b c d", None), (0.06, " e", None)]
    f = measure_request(-0.1, events, {"completion_tokens": 5})
    assert f.itl_s == pytest.approx([0.01, 0.01, 0.01, 0.03])
    assert f.decode_tok_s == pytest.approx(4 / 0.06)


def test_exact_per_chunk_counts_from_the_stream_win():
    events = [(0.0, "x", 2), (0.1, "y", 3), (0.2, "z", 5)]
    f = measure_request(0.0, events, None)
    assert f.completion_tokens == 10 and f.tokens_source == "stream"
    # the first chunk carried 2 tokens: 8 tokens decoded after it
    assert f.decode_tok_s == pytest.approx(8 / 0.2)
    assert f.itl_s == pytest.approx([0.1 / 3] * 3 + [0.02] * 5)


@pytest.mark.parametrize("tpc", [1, 2, 4])
def test_jittered_arrivals_stay_close_and_the_median_is_robust(tpc):
    rates = [figures(sse_stream(501, 200.0, tpc, jitter=0.001, seed=s)).decode_tok_s for s in range(5)]
    # +-1 ms on each end of a 2.5 s decode: at most 0.08% off
    assert all(abs(r - 200.0) / 200.0 < 0.001 for r in rates)
    med = spread(rates).median
    assert abs(med - 200.0) / 200.0 < 0.001
    f = figures(sse_stream(501, 200.0, tpc, jitter=0.001, seed=1))
    assert len(f.itl_s) == 500 and sum(f.itl_s) == pytest.approx(f.t_last - f.t_first)


def test_no_usage_length_finish_takes_max_tokens_with_a_warning():
    f = figures(sse_stream(64, 100.0, 4, usage=False), max_tokens=64)
    assert f.completion_tokens == 64 and f.tokens_source == "max_tokens"
    assert f.decode_tok_s == pytest.approx(100.0)
    assert f.warnings and "no usage" in f.warnings[0] and "max_tokens" in f.warnings[0]


def test_no_usage_otherwise_estimates_from_text_never_from_chunks():
    f = figures(sse_stream(41, 100.0, 4, usage=False, finish="stop"), max_tokens=64)
    assert f.tokens_source == "text-estimate"
    assert f.completion_tokens == 41  # one word or mark per token in this text
    assert f.chunks == 11  # not what was counted
    assert "estimated from the text" in f.warnings[0] and "approximate" in f.warnings[0]
    assert any("stopped at 41 of 64" in w for w in f.warnings)
    assert measure.estimate_tokens("Hello, world! It's 3.5 km.") == 12  # Hello , world ! It ' s 3 . 5 km .


def test_completions_stream_and_reasoning_content_count_as_content():
    f = figures(sse_stream(21, 10.0, 2, chat=False))
    assert f.completion_tokens == 21 and f.decode_tok_s == pytest.approx(10.0)
    lines = [(1.0, 'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}'),
             (1.1, 'data: {"choices":[{"delta":{"reasoning_content":"Let me"}}]}'),
             (1.2, 'data: {"choices":[{"delta":{"content":" think"}}]}'),
             (1.3, 'data: {"choices":[],"usage":{"completion_tokens":3}}'),
             (1.3, ": keep-alive comment"),
             (1.3, "data: [DONE]")]
    p = parse_sse(lines)
    assert [e[1] for e in p.events] == ["Let me", " think"]
    assert p.usage == {"completion_tokens": 3} and p.done and p.finish_reason is None


def test_error_object_inside_the_stream_is_reported():
    p = parse_sse([(0.0, 'data: {"object":"error","message":"boom","code":500}'), (0.1, "data: [DONE]")])
    assert p.error == "boom" and not p.events


def test_a_stream_without_a_decode_phase_cannot_be_measured():
    with pytest.raises(MeasureError, match="no decode phase"):
        measure_request(0.0, [(0.1, "all at once", None)], {"completion_tokens": 8})
    with pytest.raises(MeasureError, match="no content"):
        measure_request(0.0, [], {"completion_tokens": 0})


def test_apportion_keeps_totals_and_exact_weights():
    assert apportion([1, 2, 3], 6) == [1, 2, 3]
    assert sum(apportion([1, 1, 5], 13)) == 13
    assert apportion([1, 9], 2) == [1, 1]
    assert min(apportion([1, 100, 100], 12)) >= 1
    assert apportion([], 5) == []
    assert apportion([3, 3], 1) == [1, 0]


def test_percentile_and_spread():
    xs = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert percentile(xs, 50) == 5.5
    assert percentile(xs, 10) == pytest.approx(1.9)
    assert percentile(xs, 90) == pytest.approx(9.1)
    assert percentile([7], 99) == 7
    s = spread([3.0, 1.0, 2.0])
    assert (s.median, s.min, s.max, s.n) == (2.0, 1.0, 3.0, 3)
    with pytest.raises(ValueError):
        spread([])


def test_itl_summary_and_aggregate_rate():
    a = figures(sse_stream(11, 10.0, 1, t_sent=0.0), t_sent=0.0)
    b = figures(sse_stream(11, 20.0, 1, t_sent=0.5), t_sent=0.5)
    itl = measure.itl_summary_ms([a, b])
    assert itl["n"] == 20 and itl["min"] == pytest.approx(50.0) and itl["max"] == pytest.approx(100.0)
    # 22 tokens from t=0 (first sent) to b's last token at 0.5 + 0.05 + 0.5
    assert measure.aggregate_tok_s([a, b]) == pytest.approx(22 / 1.05)
    d = a.as_dict()
    assert d["completion_tokens"] == 11 and d["itl_ms_p50"] == pytest.approx(100.0) and "itl_s" not in d


def test_accept_length_from_internal_states():
    assert measure.mean_accept_length({"internal_states": [{"last_gen_throughput": 1.0}]}) is None
    assert measure.mean_accept_length({"internal_states": [{"avg_spec_accept_length": 2.0},
                                                           {"avg_spec_accept_length": 3.0}]}) == 2.5
    assert measure.mean_accept_length(None) is None
