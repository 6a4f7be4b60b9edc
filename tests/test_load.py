"""The gate under load, pure parts (sglang_deploy/gate/load.py, prom.py): SLO and level
parsing, per-level percentiles, goodput and the early-abandon bound on streams recorded in
SGLang's SSE shape (tests/test_measure.py's sse_stream), and SGLang's /metrics text."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from sglang_deploy.gate import load, prom
from sglang_deploy.gate.measure import RequestFigures

from tests.test_measure import figures, sse_stream

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "metrics"


def req(ttft: float, rate: float, n: int = 41, t_sent: float = 100.0, tpc: int = 1) -> RequestFigures:
    return figures(sse_stream(n, rate, tpc, ttft=ttft, t_sent=t_sent), t_sent=t_sent)


# ---------------------------------------------------------------------------
# options
# ---------------------------------------------------------------------------


def test_parse_slo_units_and_keys():
    assert load.parse_slo("ttft_p90=2s,itl_p90=60ms") == {"ttft_p90": 2.0, "itl_p90": pytest.approx(0.06)}
    assert load.parse_slo(" TPOT_p50 = 0.5 s , e2e_p99=1.5e1s") == {"tpot_p50": 0.5, "e2e_p99": 15.0}


@pytest.mark.parametrize("text, names", [
    ("ttft_p90=2", "ttft_p90=2"),            # no unit
    ("ttft_p90=2min", "ttft_p90=2min"),
    ("ttft_p95=2s", "ttft_p95"),             # no such percentile
    ("latency_p90=2s", "latency_p90"),
    ("ttft_p90", "ttft_p90"),                # no limit
    ("ttft_p90=0s", "ttft_p90=0s"),
    ("ttft_p90=1s,ttft_p90=2s", "given twice"),
    ("ttft_p90=1s,", "empty item"),
    ("", "names no objective"),
])
def test_parse_slo_names_the_bad_item(text, names):
    with pytest.raises(ValueError, match=names.replace("+", r"\+")):
        load.parse_slo(text)


def test_levels():
    assert load.parse_levels("4") == 4
    assert load.parse_levels("1, 8,32") == (1, 8, 32)
    assert load.levels(4) == (1, 4) and load.levels((32, 8)) == (1, 8, 32) and load.levels(1) == (1,)
    for bad in ("", "1,,4", "four", "1.5"):
        with pytest.raises(ValueError):
            load.parse_levels(bad)


# ---------------------------------------------------------------------------
# one level from recorded streams
# ---------------------------------------------------------------------------


def test_level_figures_from_streams_of_known_timing():
    # one round of 4 streams sent together: TTFT 50, 100, 150, 200 ms, 41 tokens at 100 tok/s
    rd = [req(0.05 * (i + 1), 100.0, tpc=2) for i in range(4)]
    lv = load.level_figures(4, [rd], {"ttft_p50": 0.12, "itl_p90": 0.011})
    assert lv["concurrency"] == 4 and lv["requests"] == 4 and lv["failed"] == 0 and lv["rounds"] == 1
    assert lv["ttft_s"]["p50"] == pytest.approx(0.125)          # median of 50..200 ms
    assert lv["ttft_s"]["p99"] == pytest.approx(0.1985)
    assert lv["itl_s"] == {"p50": pytest.approx(0.01), "p90": pytest.approx(0.01), "p99": pytest.approx(0.01)}
    assert lv["tpot_s"]["p50"] == pytest.approx(0.01)           # (e2e - ttft) / 40 tokens
    assert lv["e2e_s"]["p50"] == pytest.approx(0.125 + 0.4)
    # the round: sent at 100.0, last token at 100.0 + 0.2 + 0.4
    assert lv["duration_s"] == pytest.approx(0.6)
    assert lv["output_tok_s"] == pytest.approx(4 * 41 / 0.6, rel=1e-6)
    # two of four within 120 ms TTFT, every one within the ITL limit
    assert lv["slo_met"] == 0.5
    assert lv["goodput_req_s"] == pytest.approx(2 / 0.6)
    assert lv["slo_ok"] == {"ttft_p50": False, "itl_p90": True}


def test_level_one_is_the_single_stream_run_one_request_a_round():
    single = [req(0.05, 50.0, t_sent=100.0 + 10 * i) for i in range(3)]
    lv = load.level_figures(1, [[r] for r in single])
    assert lv["duration_s"] == pytest.approx(3 * (0.05 + 40 / 50))
    assert lv["output_tok_s"] == pytest.approx(41 / 0.85)
    assert lv["goodput_req_s"] is None and lv["slo_met"] is None and lv["slo_ok"] == {}


def test_a_request_meets_the_slo_on_its_own_figures():
    # a stall: one gap of 500 ms in an otherwise 100 tok/s stream (its own p99 ITL is high, its p50 is not)
    lines = sse_stream(41, 100.0, 1)
    stalled = [(t + (0.5 if i > 20 else 0.0), line) for i, (t, line) in enumerate(lines)]
    r = figures(stalled)
    assert load.meets(r, {"itl_p50": 0.02})
    assert not load.meets(r, {"itl_p99": 0.02})
    assert load.tpot_s(r) == pytest.approx((0.4 + 0.5) / 40)
    assert not load.meets(r, {"tpot_p50": 0.02}) and load.meets(r, {"tpot_p50": 0.03})
    assert not load.meets(r, {"e2e_p50": 0.9}) and load.meets(r, {"e2e_p50": 1.0})


def test_abandon_bound():
    slow, fast = req(0.05, 40.0), req(0.05, 60.0)
    assert load.abandon_bound("decode", [slow], []) is None             # one request is too few
    assert load.abandon_bound("decode", [slow, fast], []) == pytest.approx(60.0)
    assert load.abandon_bound("throughput", [slow, fast], []) is None   # the highest level has no round yet
    rd1 = [req(0.05, 100.0), req(0.05, 100.0)]
    rd2 = [req(0.05, 50.0), req(0.05, 50.0)]
    assert load.abandon_bound("throughput", [], [rd1, rd2]) == pytest.approx(2 * 41 / 0.45)
    assert load.abandon_bound("goodput", [], [rd1, rd2], {"e2e_p50": 0.5}) == pytest.approx(2 / 0.45)


# ---------------------------------------------------------------------------
# properties of the arithmetic
# ---------------------------------------------------------------------------

_req = st.builds(
    lambda sent, ttft, rate, n, tpc: req(ttft, rate, n=n, t_sent=sent, tpc=tpc),
    st.floats(0, 5), st.floats(0.001, 2.0), st.floats(5.0, 2000.0), st.integers(2, 60), st.integers(1, 4))
_rounds = st.lists(st.lists(_req, min_size=1, max_size=4), min_size=1, max_size=3)
_slo = st.dictionaries(st.sampled_from(load.SLO_KEYS), st.floats(0.0005, 5.0), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(_rounds, _slo)
def test_goodput_is_at_most_the_request_rate_and_slo_met_a_fraction(rounds, slo):
    lv = load.level_figures(4, rounds, slo)
    assert 0.0 <= lv["slo_met"] <= 1.0
    assert 0.0 <= lv["goodput_req_s"] <= lv["request_s"] * (1 + 1e-9)
    assert lv["goodput_req_s"] == pytest.approx(lv["slo_met"] * lv["request_s"], rel=1e-4, abs=1e-6)
    for metric in ("ttft_s", "itl_s", "tpot_s", "e2e_s"):
        p = lv[metric]
        assert p["p50"] <= p["p90"] <= p["p99"]


@settings(max_examples=60, deadline=None)
@given(_rounds, _slo, st.floats(1.0, 10.0))
def test_goodput_is_monotone_in_the_limits(rounds, slo, looser):
    tight = load.level_figures(4, rounds, slo)
    loose = load.level_figures(4, rounds, {k: v * looser for k, v in slo.items()})
    assert loose["slo_met"] >= tight["slo_met"]
    assert loose["goodput_req_s"] >= tight["goodput_req_s"]
    assert all(loose["slo_ok"][k] >= tight["slo_ok"][k] for k in slo)


@settings(max_examples=40, deadline=None)
@given(_rounds, st.sampled_from(["throughput", "goodput"]))
def test_the_abandon_bound_is_optimistic(rounds, objective):
    """The bound from any prefix of the rounds is never below the final figure of those rounds."""
    slo = {"ttft_p90": 0.5}
    final = load.level_figures(4, rounds, slo)
    figure = final["output_tok_s"] if objective == "throughput" else final["goodput_req_s"]
    assert load.abandon_bound(objective, [], rounds, slo) >= figure * (1 - 1e-4)


# ---------------------------------------------------------------------------
# /metrics
# ---------------------------------------------------------------------------


def test_sglang_docs_example_gives_gen_throughput_and_no_accept_length():
    text = (FIXTURES / "sglang-production-metrics-example.txt").read_text()
    samples = prom.parse(text)
    assert len([s for s in samples if s.name == "sglang:time_to_first_token_seconds_bucket"]) == 21
    inf = [s for s in samples if s.labels.get("le") == "+Inf"]
    assert inf and inf[0].value == 11008.0 and inf[0].labels["model_name"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert prom.server_metrics(text) == {"spec_accept_length": None, "gen_throughput": pytest.approx(86.508),
                                         "source": "/metrics"}


def test_several_ranks_are_averaged_and_odd_lines_survive():
    # label names as SGLang's scheduler collector sets them (model_name, engine_type, tp_rank, dp_rank)
    text = "\n".join([
        "# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.",
        "# TYPE sglang:spec_accept_length gauge",
        'sglang:spec_accept_length{dp_rank="0",engine_type="unified",model_name="m",tp_rank="0"} 3.0',
        'sglang:spec_accept_length{dp_rank="1",engine_type="unified",model_name="m",tp_rank="1"} 2.0 1700000000000',
        'sglang:spec_accept_length{dp_rank="2",engine_type="unified",model_name="m",tp_rank="2"} NaN',
        'sglang:spec_accept_length{dp_rank="3",engine_type="unified",model_name="m",tp_rank="3"} 0.0',
        'sglang:gen_throughput{model_name="a \\"quoted\\", {braced} name",tp_rank="0"} 50',
        'sglang:gen_throughput{model_name="m",tp_rank="1",} 70.0',
        'sglang:gen_throughput{model_name="m" 99',               # unterminated labels: skipped
        "sglang:gen_throughput +Inf",                            # not finite: ignored
        "garbage line without a value",
        "",
    ])
    samples = prom.parse(text)
    quoted = [s for s in samples if s.name == "sglang:gen_throughput" and s.labels.get("tp_rank") == "0"]
    assert quoted[0].labels["model_name"] == 'a "quoted", {braced} name'
    assert any(math.isnan(s.value) for s in samples)
    # 0.0 is SGLang's value on a rank without speculative decoding: not an accept length
    assert prom.server_metrics(text) == {"spec_accept_length": 2.5, "gen_throughput": 60.0, "source": "/metrics"}


def test_no_metrics_answer_is_none():
    assert prom.server_metrics(None) is None
    assert prom.server_metrics("<html>not found</html>") == {"spec_accept_length": None, "gen_throughput": None,
                                                             "source": "/metrics"}
