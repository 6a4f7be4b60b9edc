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
    assert set(predicted) == {"decode_tok_s", "ttft_ms", "output_tok_s", "basis"}
    band = predicted["decode_tok_s"]
    assert 0 < band["low"] <= band["expected"] <= band["high"]
    assert set(predicted["output_tok_s"]) == {"1", "8", "32"}
    assert "RTX A6000" in predicted["basis"] and "TP 2" in predicted["basis"]
    short, explained = io.StringIO(), io.StringIO()
    print_plan(p, render(p), False, short)
    print_plan(p, render(p), True, explained)
    assert "Predicted decode" in short.getvalue() and "GB/s HBM" not in short.getvalue()
    assert "GB/s HBM" in explained.getvalue() and "per step" in explained.getvalue()


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
