"""Every checkpoint x hardware layout x SGLang version, planned from the checkpoint's facts:
each plan satisfies every constraint and its argv passes the version's catalog, or it is
refused with the constraint (or the sizing) named. No traceback, no plan the checker refuses."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_deploy.plan import constraints
from sglang_deploy.plan.catalog import load_catalog
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.modelfacts import MoeFacts, QuantFacts
from sglang_deploy.plan.planner import constraint_view, plan_host
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.simulator import facts_matrix
from sglang_deploy.simulator.facts_matrix import (FIXTURES, HARDWARE, Recipe, cases, checkpoints, layout_rows,
                                                  layout_table, plan_case, recipe_difference, summary, weight_source)
from sglang_deploy.simulator.hub import tensors
from tests.test_recipes import RECIPES

CASES = cases()


def published_layouts() -> dict[tuple[str, str], Recipe]:
    """The recipes table's layouts (tests/test_recipes.py) by model and hardware layout."""
    def model(row):
        if row.checkpoint.startswith("hub:"):
            return row.checkpoint[4:]
        return json.loads((FIXTURES / row.checkpoint / "provenance.json").read_text())["model"]
    return facts_matrix.recipes_by_layout((name, model(r), r.gpus, r.layout, r.url)
                                          for name, r in sorted(RECIPES.items()))


# The layouts issue 21 tried every checkpoint on: 8x H100, 8x H200, 4x H100, 2x RTX A6000,
# 4x L40S, 8x B200, 1x RTX 4090, 8x A100.
ISSUE_LAYOUTS = {("H100 SXM", 8), ("H200", 8), ("H100 SXM", 4), ("RTX A6000", 2), ("L40S", 4), ("B200", 8),
                 ("RTX 4090", 1), ("A100 SXM", 8)}


def test_the_facts_matrix_covers_every_checkpoint_and_layout():
    assert ISSUE_LAYOUTS <= {(h["model"], h["count"]) for h in HARDWARE.values()}
    assert len(CASES) == len(checkpoints()) * len(HARDWARE) * 4
    # every recorded published config (tests/fixtures/checkpoints) is in the matrix
    fixtures = {json.loads((d / "provenance.json").read_text())["model"] for d in FIXTURES.iterdir()}
    assert len(fixtures) >= 15 and fixtures <= set(checkpoints())


def test_the_matrix_holds_each_kind_of_checkpoint_the_issue_names():
    facts = checkpoints()
    # MLA, planned with DP attention over all 8 GPUs where the weights fit
    assert facts["zai-org/GLM-5-FP8"].mla and facts["deepseek-ai/DeepSeek-V3"].mla
    assert plan_case("deepseek-ai/DeepSeek-V3", "h200x8-nvswitch", "0.5.23").intents["attn_dp_size"].value == 8
    # hybrid linear-attention MoE
    for model in ("Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.5-397B-A17B"):
        assert facts[model].linear_attention_layers > 0 and facts[model].moe is not None
    # a vision model with sliding-window layers (Gemma 4 names its experts per token top_k_experts)
    gemma = facts["google/gemma-4-26B-A4B"]
    assert gemma.vision and gemma.sliding_window_layers == 25 and gemma.sliding_window == 1024
    assert gemma.moe is not None and (gemma.moe.num_experts, gemma.moe.experts_per_token) == (128, 8)
    # MoE with no shared expert
    assert facts["mistralai/Mixtral-8x22B-v0.1"].moe.shared_experts == 0
    assert facts["Qwen/Qwen3-Coder-480B-A35B-Instruct"].moe.shared_experts == 0
    # compressed-tensors, and repository code named by config.json auto_map
    assert facts["moonshotai/Kimi-K2.5"].quantization.method == "compressed-tensors"
    assert any(m.file == "config.json" for m in facts["moonshotai/Kimi-K2-Instruct"].auto_maps)


def test_a_dense_checkpoint_above_200_gb_has_its_size_derived_from_its_shapes():
    llama = checkpoints()["meta-llama/Meta-Llama-3.1-405B"]
    assert llama.moe is None and weight_source(llama.model) == "derived"
    config = json.loads((FIXTURES / "meta-llama--Meta-Llama-3.1-405B" / "config.json").read_text())
    params = tensors.parameters(tensors.tensors_for(config))
    assert 400e9 < params < 410e9                      # the model's name: 405B parameters
    assert llama.total_weight_bytes == 2 * params > 200e9   # bfloat16
    # a family hub/tensors.py does not rebuild, or a quantized config, keeps its size unknown
    assert weight_source("google/gemma-4-26B-A4B") == weight_source("zai-org/GLM-5-FP8") == "unknown"
    assert checkpoints()["zai-org/GLM-5-FP8"].total_weight_bytes is None
    # 811 GB does not fit 8 x 80 GB, does fit 8 x 141 GB
    assert isinstance(plan_case(llama.model, "h100x8-nvswitch", "0.5.23"), PlanError)
    assert plan_case(llama.model, "h200x8-nvswitch", "0.5.23").intents["tp_size"].value == 8


@pytest.mark.parametrize("model,hardware,version", CASES)
def test_plan_is_accepted_or_refused_by_name(model, hardware, version):
    result = plan_case(model, hardware, version)
    if isinstance(result, PlanError):
        named = "constraint " in result.message or result.field == "tp_size (model-facts)"
        facts = checkpoints()[model]
        support = load_catalog(version).model_support
        # a checkpoint whose own code the version would run waits for the operator's consent; a
        # NemotronH config without num_hidden_layers is not 0.5.9's to load
        consent = (result.field == "sglang_trust_remote_code" and support is not None
                   and not set(facts.architectures) & support.architectures
                   and any(m.file == "config.json" for m in facts.auto_maps))
        too_old = result.field == "sglang_version" and facts.extra.get("layers_from_block_type") and version == "0.5.9"
        assert named or consent or too_old, f"refused without naming a constraint: {result}"
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
    planned = [r for r in layout_rows("0.5.23") if not r.refused]
    known = [r for r in planned if r.weights != "unknown"]
    assert known and sum(r.serving for r in known) == sum(r.present for r in known)
    assert all(r.plan == "ok" for r in planned)


def test_the_table_compares_each_plan_with_the_published_recipe_for_its_model_and_hardware():
    page = Recipe("r", {"tp_size": 8}, "u")
    assert recipe_difference({"tp_size": 8, "dp_size": 1, "attn_dp_size": 1}, page) == "r: same"
    assert recipe_difference({"tp_size": 8, "dp_size": 1, "attn_dp_size": 8}, page) == (
        "r: page TP 8 x DP 1; differs: DP attention 8 vs 1")
    assert recipe_difference({"tp_size": 4, "dp_size": 2, "attn_dp_size": 1}, page) == (
        "r: page TP 8 x DP 1; differs: TP 4 vs 8, DP 2 vs 1")
    assert recipe_difference(None, page) == "r: page TP 8 x DP 1; plan refused"
    rows = layout_rows("0.5.23", published_layouts())
    with_recipe = {(r.model, r.hardware): r.recipe for r in rows if r.recipe}
    assert len(with_recipe) >= 8
    assert with_recipe[("Qwen/Qwen3.5-397B-A17B", "h200x8-nvswitch")] == "qwen3.5-397b: same"
    lines = summary(rows, "0.5.23")
    assert lines[0].startswith(f"SGLang 0.5.23: {len(rows)} plans")
    assert any(line.startswith("wherever the weights fit") and "(100%)" in line for line in lines)


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


if __name__ == "__main__":
    # the checkpoint x layout table with the published recipes' layouts (docs/planning.md "The matrix")
    raise SystemExit(facts_matrix.main(recipes=published_layouts()))
