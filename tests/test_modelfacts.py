"""Model facts from every recorded checkpoint, against the numbers its model card publishes;
malformed configs end in one clear error naming the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_deploy.plan.modelfacts import CheckpointError, ModelFacts, facts_from_metadata

CHECKPOINTS = Path(__file__).resolve().parent.parent / "sglang_deploy" / "simulator" / "hub" / "checkpoints"


def recorded(name: str) -> tuple[dict, dict | None]:
    d = CHECKPOINTS / name
    index = d / "model.safetensors.index.json"
    return json.loads((d / "config.json").read_text()), json.loads(index.read_text()) if index.is_file() else None


def facts(name: str) -> ModelFacts:
    config, index = recorded(name)
    return facts_from_metadata(name.replace("--", "/"), "c" * 40, "test", config, index)


# Each model card's architecture table (layers, attention heads Q/KV, experts, context).
CARDS = {
    "meta-llama--Llama-3.3-70B-Instruct": dict(num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
                                               head_dim=128, hidden_size=8192, vocab_size=128256,
                                               max_position_embeddings=131072, total_weight_bytes=141107412992),
    "meta-llama--Llama-3.1-8B": dict(num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                     head_dim=128, hidden_size=4096, vocab_size=128256,
                                     max_position_embeddings=131072, total_weight_bytes=16060522496),
    "Qwen--Qwen3-32B": dict(num_hidden_layers=64, num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                            max_position_embeddings=40960),
    "Qwen--Qwen3-0.6B": dict(num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                             total_weight_bytes=None),
    "mistralai--Mixtral-8x7B-v0.1": dict(num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                         max_position_embeddings=32768, total_weight_bytes=93405585408),
    "Qwen--Qwen3-30B-A3B": dict(num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4),
    "Qwen--Qwen3-235B-A22B-Instruct-2507-FP8": dict(num_hidden_layers=94, num_attention_heads=64,
                                                    num_key_value_heads=4, max_position_embeddings=262144),
    "deepseek-ai--DeepSeek-V3": dict(num_hidden_layers=61, num_attention_heads=128, hidden_size=7168,
                                     kv_lora_rank=512, qk_rope_head_dim=64, head_dim=192, mtp_layers=1,
                                     max_position_embeddings=163840, vocab_size=129280),
    "openai--gpt-oss-120b": dict(num_hidden_layers=36, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                                 sliding_window=128, sliding_window_layers=18, full_attention_layers=18,
                                 total_weight_bytes=65248815744),
    "Qwen--Qwen3.6-27B": dict(num_hidden_layers=64, num_attention_heads=24, num_key_value_heads=4, head_dim=256,
                              full_attention_layers=16, linear_attention_layers=48, mtp_layers=1, vision=True,
                              max_position_embeddings=262144, vocab_size=248320),
}
MOE = {  # routed experts, active per token, expert width, shared, dense first layers
    "mistralai--Mixtral-8x7B-v0.1": (8, 2, 14336, 0, 0),
    "Qwen--Qwen3-30B-A3B": (128, 8, 768, 0, 0),
    "Qwen--Qwen3-235B-A22B-Instruct-2507-FP8": (128, 8, 1536, 0, 0),
    "deepseek-ai--DeepSeek-V3": (256, 8, 2048, 1, 3),
    "openai--gpt-oss-120b": (128, 4, 2880, 0, 0),
}


def test_every_recorded_checkpoint_has_card_numbers():
    assert sorted(CARDS) == sorted(p.name for p in CHECKPOINTS.iterdir() if (p / "config.json").is_file())


@pytest.mark.parametrize("name", sorted(CARDS))
def test_facts_match_the_model_card(name):
    f = facts(name)
    for key, value in CARDS[name].items():
        assert getattr(f, key) == value, key
    moe = MOE.get(name)
    got = f.moe and (f.moe.num_experts, f.moe.experts_per_token, f.moe.moe_intermediate_size,
                     f.moe.shared_experts, f.moe.first_dense_layers)
    assert got == moe
    assert f.revision == "c" * 40 and f.model == name.replace("--", "/")


def test_quantization_facts():
    q = facts("Qwen--Qwen3-235B-A22B-Instruct-2507-FP8").quantization
    assert (q.method, q.fmt, q.weight_block_size) == ("fp8", "e4m3", (128, 128))
    assert "lm_head" in q.modules_not_converted and "model.layers.93.mlp.gate" in q.modules_not_converted
    d = facts("deepseek-ai--DeepSeek-V3").quantization
    assert (d.method, d.weight_block_size, d.modules_not_converted) == ("fp8", (128, 128), ())
    g = facts("openai--gpt-oss-120b").quantization
    assert g.method == "mxfp4" and g.weight_block_size is None and "lm_head" in g.modules_not_converted
    assert facts("Qwen--Qwen3-32B").quantization is None


def test_text_config_is_read_as_sglang_reads_it():
    f = facts("Qwen--Qwen3.6-27B")
    assert f.model_type == "qwen3_5" and f.architectures == ("Qwen3_5ForConditionalGeneration",)
    assert f.dtype == "bfloat16" and f.extra["linear_num_value_heads"] == 48


def test_safetensors_headers_stand_in_for_a_missing_index():
    config, _ = recorded("Qwen--Qwen3-0.6B")
    f = facts_from_metadata("Qwen/Qwen3-0.6B", None, "dir", config, safetensors_header_sizes=[1000, 24])
    assert f.total_weight_bytes == 1024


def test_full_attention_interval_counts_hybrid_layers():
    config, _ = recorded("Qwen--Qwen3.6-27B")
    text = dict(config["text_config"])
    del text["layer_types"]
    f = facts_from_metadata("m", None, "t", {**config, "text_config": text})
    assert (f.full_attention_layers, f.linear_attention_layers) == (16, 48)


@pytest.mark.parametrize("path, value, words", [
    (("num_hidden_layers",), None, "config.json has no num_hidden_layers"),
    (("num_attention_heads",), "64", "num_attention_heads must be an integer"),
    (("hidden_size",), 0, "hidden_size must be at least 1"),
    (("quantization_config", "weight_block_size"), [128], "weight_block_size must be two positive integers"),
    (("quantization_config",), "fp8", "quantization_config is not an object"),
    (("layer_types",), ["full_attention"], "layer_types must list one name per layer"),
])
def test_malformed_configs_name_the_field(path, value, words):
    name = "openai--gpt-oss-120b" if path[0] == "layer_types" else "Qwen--Qwen3-235B-A22B-Instruct-2507-FP8"
    config, index = recorded(name)
    target = config
    for key in path[:-1]:
        target = target[key]
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    with pytest.raises(CheckpointError, match=words) as err:
        facts_from_metadata("org/m", None, "t", config, index)
    assert str(err.value).startswith("org/m: ") and "\n" not in str(err.value)


def test_a_bad_index_names_the_file():
    config, _ = recorded("Qwen--Qwen3-32B")
    with pytest.raises(CheckpointError, match="model.safetensors.index.json has no metadata"):
        facts_from_metadata("m", None, "t", config, {"weight_map": {}})
    with pytest.raises(CheckpointError, match="total_size must be an integer"):
        facts_from_metadata("m", None, "t", config, {"metadata": {"total_size": "big"}})


JSONISH = st.recursive(st.none() | st.booleans() | st.integers(-3, 300) | st.text(max_size=5),
                       lambda inner: (st.lists(inner, max_size=3)
                                      | st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                       max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(CARDS)), pick=st.integers(0, 10_000), value=JSONISH,
       nested=st.booleans(), drop=st.booleans())
def test_any_mutation_gives_facts_or_the_clear_error(name, pick, value, nested, drop):
    config, index = recorded(name)
    config = copy.deepcopy(config)
    target = config.get("text_config", config) if nested else config
    keys = sorted(target)
    real = keys[pick % len(keys)]
    if drop:
        target.pop(real)
    else:
        target[real] = value
    try:
        result = facts_from_metadata("org/m", None, "t", config, index)
    except CheckpointError as err:
        assert str(err).startswith("org/m: ") and "\n" not in str(err)
    else:
        assert isinstance(result, ModelFacts)


def test_glm45_compressed_tensors_config():
    """zai-org/GLM-4.5-FP8's config.json as recorded in gogongxt/python scripts/models/glm_4.5_fp8.md
    (commit ec9962697819add8f24ce1b180cf98ca6a53c40f), quantization_config's config_groups left out and
    its long `ignore` list shortened to the first three entries: GLM's MoE and NextN names,
    compressed-tensors' format and ignore list. (Not served by the Hub stand-in: partial.)"""
    config = {
        "architectures": ["Glm4MoeForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
        "pad_token_id": 151329, "eos_token_id": [151329, 151336], "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 5120, "partial_rotary_factor": 0.5, "initializer_range": 0.02, "intermediate_size": 12288,
        "max_position_embeddings": 131072, "model_type": "glm4_moe", "moe_intermediate_size": 1536,
        "norm_topk_prob": True, "num_attention_heads": 96, "n_group": 1, "topk_group": 1, "n_routed_experts": 160,
        "n_shared_experts": 1, "routed_scaling_factor": 2.5, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
        "num_hidden_layers": 92, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": None,
        "rope_theta": 1000000, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.54.0", "use_cache": True, "use_qk_norm": True,
        "vocab_size": 151552,
        "quantization_config": {"format": "float-quantized", "quant_method": "compressed-tensors",
                                "ignore": ["model.layers.12.input_layernorm", "model.layers.48.input_layernorm",
                                           "model.layers.74.input_layernorm"]},
    }
    f = facts_from_metadata("zai-org/GLM-4.5-FP8", None, "t", config)
    assert (f.num_hidden_layers, f.num_attention_heads, f.num_key_value_heads, f.head_dim) == (92, 96, 8, 128)
    moe = f.moe
    assert (moe.num_experts, moe.experts_per_token, moe.shared_experts, moe.first_dense_layers) == (160, 8, 1, 3)
    assert f.mtp_layers == 1 and f.quantization.method == "compressed-tensors"
    assert f.quantization.fmt == "float-quantized" and len(f.quantization.modules_not_converted) == 3
