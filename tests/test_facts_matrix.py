"""Every checkpoint x hardware layout x SGLang version, planned from the checkpoint's facts:
each plan satisfies every constraint and its argv passes the version's catalog, or it is
refused with the constraint (or the sizing) named. No traceback, no plan the checker refuses."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_deploy.plan import constraints
from sglang_deploy.plan.catalog import load_catalog
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.modelfacts import MoeFacts, QuantFacts
from sglang_deploy.plan.planner import constraint_view, plan_host
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.simulator.facts_matrix import cases, checkpoints, layout_table, plan_case
from sglang_deploy.simulator.plan_matrix import HARDWARE

CASES = cases()


def test_the_facts_matrix_covers_every_checkpoint_and_layout():
    assert len(HARDWARE) == 13
    assert len(CASES) == len(checkpoints()) * 13 * 4


@pytest.mark.parametrize("model,hardware,version", CASES)
def test_plan_is_accepted_or_refused_by_name(model, hardware, version):
    result = plan_case(model, hardware, version)
    if isinstance(result, PlanError):
        named = "constraint " in result.message or result.field == "tp_size (model-facts)"
        assert named, f"refused without naming a constraint: {result}"
        return
    facts = checkpoints()[model]
    errors = [v for v in constraints.check(facts, constraint_view(result)) if v.constraint.severity == "error"]
    assert errors == []
    assert load_catalog(version).check(result.argv) == []
    # Every GPU serves, or a warning says how many stay idle and why.
    present = HARDWARE[hardware]["count"]
    serving = result.intents["tp_size"].value * result.intents["dp_size"].value
    assert serving <= present
    idle = [w for w in result.warnings if f"uses {serving} of the {present} GPUs; {present - serving} stay idle: " in w]
    assert (serving == present) != bool(idle), (serving, present, result.warnings)
    assert result.facts is facts


def test_some_plans_are_accepted_and_some_refused():
    results = [plan_case(*c) for c in CASES if c[2] == "0.5.23"]
    assert any(isinstance(r, PlanError) for r in results)
    assert sum(not isinstance(r, PlanError) for r in results) >= len(results) // 3


def test_every_gpu_of_the_matrix_serves_wherever_the_weights_fit():
    # Before the layout choice: 160 of 406 GPUs served (TP only, the smallest that fits).
    rows, serving, present = layout_table("0.5.23")
    assert present > 0 and serving == present
    assert any("DP attention 8" in r[2] for r in rows if r[0] == "deepseek-ai/DeepSeek-V3")


# --- any checkpoint shape, any declared TP/EP: a plan the checker accepts, or a named refusal ---


@st.composite
def shapes(draw):
    base = draw(st.sampled_from(sorted(checkpoints())))
    f = checkpoints()[base]
    heads = draw(st.sampled_from([8, 12, 24, 32, 40, 64, 96, 128]))
    kv = draw(st.sampled_from([1, 2, 4, 6, 8, heads]))
    moe = None
    if draw(st.booleans()):
        moe = MoeFacts(num_experts=draw(st.sampled_from([8, 60, 64, 128, 160, 256])), experts_per_token=4,
                       moe_intermediate_size=draw(st.sampled_from([768, 1408, 1536, 2048, 2880, 14336])))
    quant = draw(st.sampled_from([None, QuantFacts("fp8", "e4m3", (128, 128)), QuantFacts("mxfp4"),
                                  QuantFacts("w8a8_fp8")]))
    total = draw(st.integers(min_value=10**8, max_value=8 * 10**11))
    return dataclasses.replace(f, model="org/shape", num_attention_heads=heads, num_key_value_heads=kv, moe=moe,
                               quantization=quant, total_weight_bytes=total, intermediate_size=heads * 256,
                               kv_lora_rank=None if draw(st.booleans()) else f.kv_lora_rank)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(facts=shapes(), hardware=st.sampled_from(sorted(HARDWARE)),
       tp=st.sampled_from([None, 1, 2, 4, 8]), ep=st.sampled_from([None, 1, 2, 4, 8]))
def test_any_shape_plans_within_the_constraints_or_is_refused_by_name(facts, hardware, tp, ep):
    intents = {k: v for k, v in (("tp_size", tp), ("ep_size", ep)) if v is not None}
    data = {"sglang_model": facts.model, "sglang_gpus": HARDWARE[hardware], "sglang_intents": intents}
    try:
        p = plan_host(build_spec("m", {}, data), sglang_version="0.5.23", facts=facts)
    except PlanError as exc:
        assert exc.host == "m" and exc.message
        return
    errors = [v for v in constraints.check(facts, constraint_view(p)) if v.constraint.severity == "error"]
    assert errors == []
    assert load_catalog("0.5.23").check(p.argv) == []
    present, serving = HARDWARE[hardware]["count"], p.intents["tp_size"].value * p.intents["dp_size"].value
    assert serving == present or any(f"{present - serving} stay idle: " in w for w in p.warnings)
