"""Every plan says what speed it should reach (sglang_deploy/plan/predicted.py over plan/perf.py):
`plan --json`'s ``predicted`` (bands and basis, on the plan and on each replica), the text's
"Predicted" line and, with --explain, its derivation; and why there is none."""

from __future__ import annotations

import io
import json

from sglang_deploy.plan.output import plan_json, print_plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.plan.spec import build_spec
from tests.recorded_facts import LLAMA_70B, QWEN36_27B

A6000X2 = {"model": "RTX A6000", "count": 2}
H100X8 = {"model": "H100 SXM", "count": 8}


def plan(facts, gpus, **data):
    data = {"sglang_model": facts.model if facts is not None else "Qwen/Qwen3.6-27B", "sglang_gpus": gpus, **data}
    return plan_host(build_spec("gpu-1", {}, data), sglang_version="0.5.23", facts=facts)


def test_a_plan_with_facts_predicts_its_speed_in_json_and_text():
    p = plan(QWEN36_27B, A6000X2)
    assert p.predicted is not None and p.predicted_missing is None
    doc = json.loads(json.dumps(plan_json(p, render(p))))
    predicted = doc["predicted"]
    assert set(predicted) == {"decode_tok_s", "ttft_ms", "output_tok_s", "prefill_tok_s", "prefill_tokens", "basis"}
    assert predicted["prefill_tokens"] == 2048
    assert 0 < predicted["prefill_tok_s"]["low"] <= predicted["prefill_tok_s"]["expected"] \
        <= predicted["prefill_tok_s"]["high"]
    band = predicted["decode_tok_s"]
    assert 0 < band["low"] <= band["expected"] <= band["high"]
    assert set(predicted["output_tok_s"]) == {"1", "8", "32"}
    assert "RTX A6000" in predicted["basis"] and "TP 2" in predicted["basis"]
    short, explained = io.StringIO(), io.StringIO()
    print_plan(p, render(p), False, short)
    print_plan(p, render(p), True, explained)
    assert "Predicted decode" in short.getvalue() and "GB/s HBM" not in short.getvalue()
    assert "GB/s HBM" in explained.getvalue() and "per step" in explained.getvalue()
    assert "prefill" in short.getvalue() and "at 2048 prompt tokens" in short.getvalue()
    assert "prefill: 2048 prompt tokens x" in explained.getvalue()


def test_the_prefill_band_holds_the_published_input_rates_of_long_prompts():
    """The published TTFTs of Qwen3.6-27B at 8,192 input tokens (tests/fixtures/perf/published.yaml,
    SGLang's qwen3.6 benchmark data: 770 ms on one H100, 734 ms on one H200) as input tok/s lie within
    the model's prefill band at that length; and the band's floor (0.7 of its low end) is far below them."""
    from sglang_deploy.plan.perf import GpuPerf, Layout, model_cost, predict
    from sglang_deploy.plan.profiles import load_knowledge

    db = load_knowledge().gpus
    for gpu, ttft_ms in (("H100 SXM", 770.0), ("H200", 734.0)):
        entry = db.lookup(gpu)
        assert entry is not None and entry.bf16_tflops and entry.hbm_gbps, gpu
        band = predict(model_cost(QWEN36_27B), GpuPerf(gpu, entry.hbm_gbps, entry.bf16_tflops), Layout(tp=1),
                       prefill_tokens=8192).prefill_tok_s
        measured = 8192 / (ttft_ms / 1000)
        assert band is not None and band.low <= measured <= band.high, (gpu, band, measured)
        assert 0.7 * band.low < 0.8 * measured


def test_a_small_model_predicts_no_prefill_faster_than_its_request_overhead_allows():
    """A request's own overhead bounds a small model's predicted input rate: 2,048 tokens in no less
    than the band's per-request seconds."""
    from sglang_deploy.plan.perf import EFFICIENCY, GpuPerf, Layout, ModelCost, predict

    tiny = ModelCost(total_params=0.5e9, active_params=0.5e9, bytes_per_param=2.0, kv_bytes_per_token=12e3,
                     layers=24, how="dense: 0.5B parameters")
    band = predict(tiny, GpuPerf("H100", 3350, 989), Layout(tp=1), prefill_tokens=2048).prefill_tok_s
    assert band is not None
    assert band.low <= 2048 / EFFICIENCY["request_s"][0]
    assert band.high <= 2048 / EFFICIENCY["request_s"][2]


def test_the_reference_deployment_is_predicted_near_its_story():
    """Qwen3.6-27B on 2x RTX A6000 with MTP (the product's own story: 50 to 57 tok/s single stream,
    measured): the band holds it."""
    p = plan(QWEN36_27B, A6000X2)
    assert p.intents["speculative_algorithm"].value is not None
    band = p.predicted.decode_tok_s
    assert band.low <= 50 and band.high >= 57, band


def test_a_bigger_gpu_predicts_faster():
    slow = plan(LLAMA_70B, {"model": "A100-SXM4-80GB", "count": 8}, sglang_intents={"tp_size": 8})
    fast = plan(LLAMA_70B, H100X8, sglang_intents={"tp_size": 8})
    assert fast.predicted.decode_tok_s.expected > slow.predicted.decode_tok_s.expected


def test_no_facts_no_prediction_and_why():
    p = plan(None, A6000X2)
    assert p.predicted is None and "no checkpoint facts" in p.predicted_missing
    assert p.as_dict()["predicted"] == {"none": p.predicted_missing}
    out = io.StringIO()
    print_plan(p, render(p), False, out)
    assert "Predicted none: no checkpoint facts" in out.getvalue()


def test_a_plan_with_dp_attention_is_predicted_as_one_server_with_its_attention_in_ranks():
    # DeepSeek-V3 on 8x H200 is planned TP 8 with DP attention 8 (MLA): one server whose every GPU
    # holds all of the attention weights and its own requests' KV cache. Predicted as DP replicas (or
    # as TP 8 alone) its single stream would read an eighth of the attention weights.
    from tests.recorded_facts import DEEPSEEK_V3

    p = plan(DEEPSEEK_V3, {"model": "H200", "count": 8})
    assert p.intents["attn_dp_size"].value == 8
    assert p.predicted is not None and "DP attention 8" in p.predicted.basis
    tp_alone = plan(DEEPSEEK_V3, {"model": "H200", "count": 8}, sglang_intents={"attn_dp_size": 1})
    assert tp_alone.predicted is not None and "DP attention" not in tp_alone.predicted.basis
    assert p.predicted.decode_tok_s.expected < tp_alone.predicted.decode_tok_s.expected
