"""Where the plan depends on SGLang's own sizing rules (issue 38, "SGLang's own sizing"), each
from a published config.json recorded under tests/fixtures/checkpoints: the request cap under
speculative decoding and how DP attention divides it, whether a multimodal checkpoint is served
with its vision tower, which layers of a hybrid Mamba2 / attention model hold KV."""

from __future__ import annotations

import json
import re

import pytest

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.catalog import SUPPORTED_VERSIONS
from sglang_deploy.plan.modelfacts import facts_from_metadata
from tests.test_recipes import FIXTURES, plan, recorded

H200X8 = {"model": "H200", "count": 8}
H100X8 = {"model": "H100 SXM", "count": 8}


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
    # the same choice as an intent: the flag planned and the tower sized, as with the extra argument
    intent = plan(scout, H100X8, version, sglang_intents={"enable_multimodal": True})
    assert intent.argv.count("--enable-multimodal") == 1
    assert (intent.intents["mem_fraction_static"].value, intent.intents["context_length"].value) == (
        mm_frac.value, mm_ctx.value)


def test_enable_multimodal_and_text_only_together_are_refused_and_a_text_model_gets_no_flag():
    scout = _scout_with_tower()
    with pytest.raises(PlanError, match=r"sglang_intents\.enable_multimodal: and text_only are both set"):
        plan(scout, H100X8, "0.5.23", sglang_intents={"enable_multimodal": True, "text_only": True})
    text_model = recorded("meta-llama--Meta-Llama-3.1-405B")
    p = plan(text_model, H100X8, "0.5.23", sglang_intents={"enable_multimodal": True})
    assert "--enable-multimodal" not in p.argv
    assert any("enable_multimodal=true on a text-only model" in w for w in p.warnings), p.warnings


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


# ---- hybrid Mamba2 / attention NemotronH: only the attention layers hold per-token KV ------------

NEMOTRON = "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"


def _nemotron_h_bf16_bytes(c: dict) -> int:
    """bf16 bytes of a NemotronH decoder from its config's shapes, layer by layer of its
    hybrid_override_pattern (the safetensors index was not recorded): Mamba2 in/out projections and
    conv, attention q/k/v/o, MoE routed experts (up and down, relu2) with the shared expert and the
    router, embeddings and LM head untied. 31.6B parameters for Nemotron-3-Nano-30B-A3B."""
    h = c["hidden_size"]
    inner, groups = c["mamba_num_heads"] * c["mamba_head_dim"], 2 * c["n_groups"] * c["ssm_state_size"]
    per_layer = {
        "M": h * (2 * inner + groups + c["mamba_num_heads"]) + (inner + groups) * c["conv_kernel"] + inner * h,
        "*": 2 * h * c["num_attention_heads"] * c["head_dim"] + 2 * h * c["num_key_value_heads"] * c["head_dim"],
        "E": (c["n_routed_experts"] * 2 * h * c["moe_intermediate_size"]
              + 2 * h * c["moe_shared_expert_intermediate_size"] + h * c["n_routed_experts"]),
        "-": 2 * h * c["intermediate_size"]}
    return 2 * (sum(per_layer[k] for k in c["hybrid_override_pattern"]) + 2 * c["vocab_size"] * h)


def _nemotron(**changes):
    config = {**json.loads((FIXTURES / NEMOTRON / "config.json").read_text()), **changes}
    model = json.loads((FIXTURES / NEMOTRON / "provenance.json").read_text())["model"]
    return facts_from_metadata(model, None, "recorded", config,
                               safetensors_header_sizes=[_nemotron_h_bf16_bytes(config)])


def test_nemotron_h_kv_is_held_by_its_6_attention_layers_of_52():
    f = _nemotron()
    assert 31.5e9 < f.total_weight_bytes / 2 < 31.7e9
    assert (f.num_hidden_layers, f.full_attention_layers, f.linear_attention_layers) == (52, 6, 23)
    # the same layers named the 0.5.15+ way (configs/nemotron_h.py layers_block_type wins over the pattern)
    kinds = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    pattern = json.loads((FIXTURES / NEMOTRON / "config.json").read_text())["hybrid_override_pattern"]
    g = _nemotron(layers_block_type=[kinds[c] for c in pattern])
    assert (g.full_attention_layers, g.linear_attention_layers) == (6, 23)


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_nemotron_h_on_8x_h100_holds_its_full_context_and_ranks_by_its_recurrent_state(version):
    # KV on the 6 attention layers alone: every TP holds the 262,144-token context (sized for all 52
    # layers it was TP 2 x DP 4, cut). Each request also holds 46.8 MiB of Mamba2 state on one GPU
    # at TP 1, and SGLang runs at most a third of the state slots in 0.5.9 (26 requests per replica
    # at TP 1), a fifth from 0.5.15, where it picks the extra_buffer strategy for NemotronH by itself
    # (arg_groups/overrides.py _MAMBA_EXTRA_BUFFER_ARCHS: two tracking slots more per request; 14
    # or 15), so the throughput ranking plans TP 4 x DP 2 and says why.
    p = plan(_nemotron(), H100X8, version)
    assert p.intents["context_length"].value == 262144
    reason = p.intents["tp_size"].reason
    assert "6 full-attention layers" in reason and "recurrent state" in reason
    assert (p.intents["tp_size"].value, p.intents["dp_size"].value) == (4, 2)
    tp1 = re.search(r"TP 1 x DP 8 [\d,]+ output tok/s per GPU \((\d+) sequences per replica at [\d.,]+ tok/s each, "
                    r"bound by the recurrent state", reason)
    assert tp1 is not None and int(tp1.group(1)) in ((26,) if version == "0.5.9" else (14, 15))


def test_a_requests_recurrent_state_is_sized_as_sglang_sizes_it():
    # SGLang's BaseLinearStateParams.mamba_cache_per_req (configs/mamba_utils.py) for the recorded
    # Nemotron-3-Nano config: conv (4096 + 2 x 8 x 128) / tp x 3 in bfloat16, SSM 64 / tp x 64 x 128 in
    # float32 (config.json's mamba_ssm_cache_dtype is not the key SGLang reads), over 23 Mamba2 layers
    from sglang_deploy.plan import hybrid_state, sizing

    facts = _nemotron()
    for tp in (1, 2, 4, 8):
        per_layer = 6144 // tp * 3 * 2 + 64 // tp * 64 * 128 * 4
        assert hybrid_state.recurrent_state_per_request(facts, tp) == 23 * per_layer
    b = sizing.budget(facts, 1, 81559, version="0.5.9")  # the slots: the state's share over one request's, a third each
    assert b is not None and b.max_requests == int(b.state_bytes // b.state_per_request) // 3
    assert hybrid_state.recurrent_state_per_request(plain := facts_from_metadata(
        "m", None, "recorded", {k: v for k, v in json.loads((FIXTURES / NEMOTRON / "config.json").read_text()).items()
                                if k != "mamba_num_heads"}), 1) == 0 and plain.extra.get("mamba") is None


def test_a_nemotron_h_pattern_that_does_not_name_every_layer_is_refused():
    from sglang_deploy.plan.modelfacts import CheckpointError

    config = json.loads((FIXTURES / NEMOTRON / "config.json").read_text())
    with pytest.raises(CheckpointError, match="hybrid_override_pattern"):
        facts_from_metadata("m", None, "recorded", {**config, "hybrid_override_pattern": "MEMEX*"})
    with pytest.raises(CheckpointError, match="one of mamba, attention, mlp and moe per layer"):
        facts_from_metadata("m", None, "recorded", {**config, "hybrid_override_pattern": "MEM*"})


# ---- the recipes of Llama 4 and Nemotron 3, spelled per SGLang version -------------------------

@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_llama4_calls_tools_with_the_pythonic_parser(version):
    from sglang_deploy.plan.catalog import load_catalog

    assert "llama4" not in (load_catalog(version).options["--tool-call-parser"].choices or ())
    p = plan(recorded("meta-llama--Llama-4-Scout-17B-16E-Instruct"), H100X8, version)
    tool = p.intents["tool_call_parser"]
    assert (tool.value, tool.layer) == ("pythonic", "model") and tool.reason.startswith("recipe llama-4:")
    assert "sgl-cookbook" in tool.source
    assert p.argv[p.argv.index("--tool-call-parser") + 1] == "pythonic"
    assert not any("no recipe" in w for w in p.warnings)


@pytest.mark.parametrize("version,reasoning", [("0.5.9", "nano_v3"), ("0.5.15", "nemotron_3"),
                                               ("0.5.19", "nemotron_3"), ("0.5.23", "nemotron_3")])
def test_nemotron_3_gets_its_parsers_as_each_version_spells_them(version, reasoning):
    p = plan(_nemotron(), H100X8, version)
    assert p.intents["tool_call_parser"].value == "qwen3_coder"
    r = p.intents["reasoning_parser"]
    assert (r.value, r.layer) == (reasoning, "model")
    assert ("names it nano_v3" in r.reason) == (reasoning == "nano_v3")
    assert p.argv[p.argv.index("--reasoning-parser") + 1] == reasoning
    assert not any("no recipe" in w or "left out" in w for w in p.warnings), p.warnings


def test_every_per_version_spelling_is_a_choice_of_that_version():
    from sglang_deploy.plan import recipes
    from sglang_deploy.plan.catalog import load_catalog

    spelled = 0
    for recipe in recipes.load():
        for intent, v in recipe.parsers.items():
            option = "--tool-call-parser" if intent == "tool_call_parser" else "--reasoning-parser"
            for version in SUPPORTED_VERSIONS:
                choices = load_catalog(version).options[option].choices or ()
                if version in v.by_version:
                    spelled += 1
                    assert v.by_version[version] in choices, (recipe.id, version)
                    assert v.value not in choices, (recipe.id, version, "the by_version entry is not needed")
            assert set(v.by_version) <= set(SUPPORTED_VERSIONS), recipe.id
    assert spelled >= 1
