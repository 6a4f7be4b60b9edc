"""Layouts ranked by predicted speed (sglang_deploy/plan/layout_rank.py): under sglang_objective
throughput the planner keeps its smallest TP that holds the context unless a larger TP is
predicted to serve more than MARGIN more output tokens per GPU at the objective's workload, or
meets a latency limit the smaller one misses; the tp_size reason lists every layout's figures."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, strategies as st

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.layout_rank import MARGIN, Ranked, choose
from sglang_deploy.plan.perf import GpuPerf, Layout, Served, model_cost, served
from sglang_deploy.plan.spec import Workload, build_spec
from tests.test_recipes import plan
from tests.recorded_facts import LLAMA_70B, QWEN3_32B

H200X8 = {"model": "H200", "count": 8}
#: NVIDIA H200 SXM datasheet figures (as sglang_deploy/data/gpus.yaml records them).
H200 = GpuPerf("H200", hbm_gbps=4800, bf16_tflops=989.5, fp8_tflops=1979, memory_gib=141, nvlink_gbps=900,
               pcie_gbps=128)


def layout(p):
    return p.intents["tp_size"].value, p.intents["dp_size"].value


def test_under_a_tpot_limit_qwen3_32b_on_8x_h200_is_four_replicas_of_tp_2():
    # aiconfigurator 0.12's ranking for ISL 2000 / OSL 500 under TTFT 2 s and TPOT 50 ms:
    # 4 x TP 2 at 1,358 tok/s/GPU above 8 x TP 1 at 1,198; the rule alone planned 8 x TP 1.
    p = plan(QWEN3_32B, H200X8, sglang_objective={"serve": "throughput", "tpot_ms": 50, "ttft_ms": 2000})
    assert layout(p) == (2, 4)
    reason = p.intents["tp_size"].reason
    assert reason.startswith("sglang_objective throughput, ranked by predicted speed for 2,000 prompt / 500 output "
                             "tokens within TPOT 50 ms and TTFT 2000 ms: TP 2 is predicted +")
    # every other layout with its figures, for --explain
    for other in ("TP 1 x DP 8 ", "TP 4 x DP 2 ", "TP 8 x DP 1 "):
        assert other in reason.split("runners-up: ", 1)[1]
    assert "output tok/s per GPU" in reason and "bound by TPOT 50 ms" in reason


def test_the_default_workload_is_the_interactive_one():
    assert layout(plan(QWEN3_32B, H200X8)) == (2, 4)
    assert "within TPOT 50 ms and TTFT 2000 ms" in plan(QWEN3_32B, H200X8).intents["tp_size"].reason


def test_without_limits_a_near_tie_keeps_the_rules_layout_and_says_so():
    p = plan(QWEN3_32B, H200X8, sglang_objective={"tpot_ms": None, "ttft_ms": None})
    assert layout(p) == (1, 8)
    reason = p.intents["tp_size"].reason
    assert reason.startswith("sglang_objective throughput: the smallest TP that splits")
    assert "ranked by predicted speed for 2,000 prompt / 500 output tokens, no latency limit: kept" in reason
    assert "runners-up: TP 2 x DP 4" in reason


def test_a_limit_the_smaller_tp_cannot_meet_moves_to_one_that_does():
    p = plan(LLAMA_70B, H200X8, sglang_objective={"tpot_ms": 20})
    assert layout(p) == (8, 1)
    reason = p.intents["tp_size"].reason
    assert "TP 8 meets TPOT 20 ms, which TP 2 misses" in reason
    assert "TP 2 x DP 4" in reason and "misses TPOT 20 ms" in reason


def test_a_declared_layout_or_the_latency_objective_is_not_ranked():
    for data in ({"sglang_intents": {"tp_size": 2}}, {"sglang_intents": {"dp_size": 2}},
                 {"sglang_objective": "latency"}):
        p = plan(QWEN3_32B, H200X8, **data)
        assert "ranked by predicted speed" not in p.intents["tp_size"].reason, data


def test_the_workload_is_read_and_bad_values_name_the_field():
    spec = build_spec("gpu-1", {}, {"sglang_model": "Qwen/Qwen3-32B", "sglang_objective": {
        "serve": "throughput", "input_tokens": 8000, "output_tokens": 1000, "tpot_ms": 40}})
    assert spec.objective == "throughput"
    assert spec.workload == Workload(input_tokens=8000, output_tokens=1000, tpot_ms=40.0)
    assert build_spec("gpu-1", {}, {"sglang_model": "m"}).workload == Workload(2000, 500, 50.0, 2000.0)
    unlimited = build_spec("gpu-1", {}, {"sglang_model": "m", "sglang_objective": {"tpot_ms": None}})
    assert unlimited.workload.tpot_ms is None and unlimited.workload.ttft_ms == 2000.0
    bad = [({"tpot_ms": -1}, "sglang_objective.tpot_ms"), ({"tpot_ms": True}, "sglang_objective.tpot_ms"),
           ({"input_tokens": 1.5}, "sglang_objective.input_tokens"), ({"ttft_ms": "2s"}, "sglang_objective.ttft_ms"),
           ({"isl": 2000}, "sglang_objective.isl"), ({"serve": "fast"}, "sglang_objective.serve"),
           ({"serve": "latency", "tpot_ms": 50}, "sglang_objective")]
    for value, field in bad:
        with pytest.raises(PlanError) as err:
            build_spec("gpu-7", {}, {"sglang_model": "m", "sglang_objective": value})
        assert err.value.host == "gpu-7" and err.value.field == field, (value, str(err.value))


def test_served_batch_shrinks_under_a_tighter_limit_and_says_when_none_is_met():
    cost = model_cost(QWEN3_32B)
    lay = Layout(tp=2, dp=4, link="nvswitch")
    free = served(cost, H200, lay, prompt_tokens=2000, output_tokens=500)
    loose = served(cost, H200, lay, prompt_tokens=2000, output_tokens=500, tpot_ms=50)
    tight = served(cost, H200, lay, prompt_tokens=2000, output_tokens=500, tpot_ms=20)
    assert free.batch >= loose.batch > tight.batch >= 1
    assert 1000 / loose.tok_s_per_user <= 50 and 1000 / tight.tok_s_per_user <= 20
    assert loose.meets_tpot and tight.meets_tpot
    impossible = served(cost, H200, lay, prompt_tokens=2000, output_tokens=500, tpot_ms=1)
    assert impossible.batch == 1 and not impossible.meets_tpot and "not met" in impossible.bound
    # the planner's own KV sizing bounds the batch when it is given
    held = served(cost, H200, lay, prompt_tokens=2000, output_tokens=500, kv_tokens=25_000)
    assert held.batch == 10 and held.bound == "the KV cache"


def test_a_slower_link_costs_a_large_batch_more():
    cost = model_cost(QWEN3_32B)
    fast, slow = (served(cost, H200, Layout(tp=4, dp=2, link=link), prompt_tokens=2000, output_tokens=500,
                         kv_tokens=2_000_000) for link in ("nvswitch", "pcie"))
    assert fast.batch == slow.batch and slow.tok_s_per_gpu < fast.tok_s_per_gpu
    one = served(cost, H200, Layout(tp=1, dp=8, link="pcie"), prompt_tokens=2000, output_tokens=500,
                 kv_tokens=2_000_000)
    same = served(cost, H200, Layout(tp=1, dp=8, link="nvswitch"), prompt_tokens=2000, output_tokens=500,
                  kv_tokens=2_000_000)
    assert one == same  # TP 1 sends nothing over its link


def test_more_bandwidth_never_serves_less():
    cost = model_cost(LLAMA_70B)
    for tp in (2, 4, 8):
        lay = Layout(tp=tp, dp=8 // tp, link="nvswitch")
        base = served(cost, H200, lay, prompt_tokens=2000, output_tokens=500, tpot_ms=50, kv_tokens=400_000)
        more = served(cost, dataclasses.replace(H200, hbm_gbps=2 * H200.hbm_gbps), lay, prompt_tokens=2000,
                      output_tokens=500, tpot_ms=50, kv_tokens=400_000)
        assert more.tok_s_per_gpu >= base.tok_s_per_gpu and more.batch >= base.batch


_figure = st.floats(min_value=1.0, max_value=1e5, allow_nan=False)


@given(st.lists(st.tuples(_figure, st.booleans()), min_size=1, max_size=6), st.data())
def test_choose_meets_what_can_be_met_and_is_within_the_margin_of_the_best(rows, data):
    ranked = [Ranked(tp=2 ** i, dp=1, served=Served(per_gpu, 1, 1.0, "x"), ttft_ms=1.0,
                     problem=None if ok else "TPOT 1 ms") for i, (per_gpu, ok) in enumerate(rows)]
    rule = data.draw(st.sampled_from(ranked))
    pick, words = choose(ranked, rule.tp)
    meeting = [r for r in ranked if r.problem is None] or ranked
    top = max(r.per_gpu for r in meeting)
    assert pick in meeting
    assert pick.per_gpu * (1 + MARGIN) >= top
    assert not [r for r in meeting if r.tp < pick.tp and r.per_gpu * (1 + MARGIN) >= top]  # the smallest such TP
    if rule in meeting and rule.per_gpu * (1 + MARGIN) >= top:
        assert pick is rule or pick.tp < rule.tp
    assert f"TP {pick.tp} x DP 1" in words
