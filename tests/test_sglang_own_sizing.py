"""Where the plan depends on SGLang's own sizing rules (issue 38, "SGLang's own sizing"), each
from a published config.json recorded under tests/fixtures/checkpoints: the request cap under
speculative decoding and how DP attention divides it, whether a multimodal checkpoint is served
with its vision tower."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_deploy.plan.catalog import SUPPORTED_VERSIONS
from sglang_deploy.plan.modelfacts import facts_from_metadata
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.spec import build_spec

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"
H200X8 = {"model": "H200", "count": 8}
H100X8 = {"model": "H100 SXM", "count": 8}


def recorded(folder: str):
    d = FIXTURES / folder
    prov = json.loads((d / "provenance.json").read_text())
    return facts_from_metadata(prov["model"], None, f"recorded {folder}", json.loads((d / "config.json").read_text()))


def plan(facts, gpus, version="0.5.23", **data):
    data = {"sglang_model": facts.model, "sglang_gpus": gpus, **data}
    return plan_host(build_spec("gpu-1", {}, data), sglang_version=version, facts=facts)


# ---- the request cap under speculative decoding, divided by DP attention --------------------------

@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_dp_attention_with_mtp_runs_48_requests_per_rank_not_48_in_all(version):
    # DeepSeek-R1 on 8x H200: DP attention over 8 ranks and its NextN layer drafting (EAGLE). Unset,
    # SGLang caps the server at 48 and each rank runs 48 // 8 = 6; the plan sets 48 per rank.
    p = plan(recorded("deepseek-ai--DeepSeek-R1"), H200X8, version)
    assert p.intents["attn_dp_size"].value == 8 and p.intents["speculative_algorithm"].value == "EAGLE"
    cap = p.intents["max_running_requests"]
    assert (cap.value, cap.layer) == (384, "model-facts")
    assert "6 per rank" in cap.reason and "48 per rank x 8 = 384" in cap.reason
    assert "resolve_max_num_reqs" in cap.source and "_handle_eagle_family" in cap.source
    assert "--max-running-requests" in p.argv and p.argv[p.argv.index("--max-running-requests") + 1] == "384"


def test_the_cap_is_left_alone_without_either_half_or_when_the_inventory_sets_it():
    r1 = recorded("deepseek-ai--DeepSeek-R1")
    no_spec = plan(r1, H200X8, sglang_intents={"speculative_algorithm": None})
    assert no_spec.intents["attn_dp_size"].value == 8
    assert no_spec.intents["max_running_requests"].value is None
    latency = plan(r1, H200X8, sglang_objective="latency")
    assert latency.intents["attn_dp_size"].value == 1
    assert latency.intents["max_running_requests"].value is None
    declared = plan(r1, H200X8, sglang_intents={"max_running_requests": 128})
    assert (declared.intents["max_running_requests"].value, declared.intents["max_running_requests"].layer) == (
        128, "host")
    left = plan(r1, H200X8, sglang_intents={"max_running_requests": None})
    assert left.intents["max_running_requests"].value is None


# ---- a multimodal checkpoint SGLang serves text-only unless --enable-multimodal ------------------

def _scout_with_tower():
    """Llama-4-Scout's recorded config.json with a vision_config: the recorded copy leaves it out,
    the published checkpoint ships one (34 layers x 1408 hidden, Llama 4's vision encoder). No
    safetensors index is recorded: the weights are the config's own parameter count in bf16."""
    from sglang_deploy.plan.perf import model_cost

    d = FIXTURES / "meta-llama--Llama-4-Scout-17B-16E-Instruct"
    config = {**json.loads((d / "config.json").read_text()),
              "vision_config": {"num_hidden_layers": 34, "hidden_size": 1408}}
    model = json.loads((d / "provenance.json").read_text())["model"]
    params = model_cost(facts_from_metadata(model, None, "recorded", config)).total_params
    return facts_from_metadata(model, None, "recorded", config, safetensors_header_sizes=[int(params * 2)])


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_llama4_is_sized_text_only_unless_multimodal_is_enabled(version):
    # SGLang serves Llama4ForConditionalGeneration without its vision tower unless --enable-multimodal
    # (configs/model_config.py mm_disabled_models, every supported release): no VLM reduction of
    # mem_fraction_static, no context cut for it, no multimodal prefill-graph warning.
    scout = _scout_with_tower()
    assert scout.vision
    text = plan(scout, H100X8, version)
    frac, ctx = text.intents["mem_fraction_static"], text.intents["context_length"]
    assert "mm_disabled_models" in frac.reason and "vision tower (scaled" not in frac.reason
    assert "--enable-multimodal" not in text.argv
    assert not any("multimodal" in w for w in text.warnings), text.warnings
    served = plan(scout, H100X8, version, sglang_extra_args=["--enable-multimodal"])
    mm_frac, mm_ctx = served.intents["mem_fraction_static"], served.intents["context_length"]
    assert "vision tower (scaled by its size" in mm_frac.reason
    assert "--enable-multimodal" in served.argv
    assert frac.value > mm_frac.value + 0.1 and ctx.value > mm_ctx.value
    if version == "0.5.23":  # the example: 8x H100, 0.6467 and ~1.2M tokens before
        assert (frac.value, mm_frac.value) == (0.812, 0.6467)
        assert (ctx.value, mm_ctx.value) == (1789952, 1215488)


def test_which_architectures_sglang_serves_text_only_by_release():
    from sglang_deploy.plan.sizing import multimodal_by_default

    for version in SUPPORTED_VERSIONS:
        for arch in ("Llama4ForConditionalGeneration", "Gemma3ForConditionalGeneration",
                     "Step3VLForConditionalGeneration"):
            assert not multimodal_by_default(arch, version), (arch, version)
        assert multimodal_by_default("Qwen3VLMoeForConditionalGeneration", version)
    assert multimodal_by_default("InklingForConditionalGeneration", "0.5.15")
    assert not multimodal_by_default("InklingForConditionalGeneration", "0.5.19")
    assert not multimodal_by_default("InklingForConditionalGeneration", "0.5.23")
