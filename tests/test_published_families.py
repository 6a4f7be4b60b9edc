"""Published config.json files of eleven architectures the recorded checkpoints did not cover
(tests/fixtures/checkpoints, each with its provenance.json), planned as a new user would: on the
reference layouts, with the recipe's parsers and speculative settings where a recipe names the
family, else SGLang's own detection and a warning that says what was left unset; sized as SGLang
sizes them where the plan depends on it. The facts matrix (tests/test_facts_matrix.py) plans them on
every hardware layout and version too, and scripts/check_plans_against_real_parsers.py hands those
argvs to the released parsers in CI."""

from __future__ import annotations

import pytest

from sglang_deploy.errors import PlanError
from sglang_deploy.plan import hybrid_state, sizing
from sglang_deploy.plan.catalog import load_catalog
from sglang_deploy.simulator.facts_matrix import FIXTURES as FIXTURES_DIR
from sglang_deploy.simulator.facts_matrix import HARDWARE, checkpoints, plan_case

# architecture -> (model, tool-call parser, reasoning parser, speculative algorithm) at 0.5.23;
# "auto" is SGLang's detection at start (no recipe names the family)
NEW = {
    "MiMoForCausalLM": ("XiaomiMiMo/MiMo-7B-Base", "auto", "auto", None),
    "MiMoV2FlashForCausalLM": ("XiaomiMiMo/MiMo-V2-Flash", "mimo", "qwen3", None),
    "DeepseekV4ForCausalLM": ("deepseek-ai/DeepSeek-V4-Flash", "auto", "auto", None),
    "KimiK3ForConditionalGeneration": ("moonshotai/Kimi-K3", "auto", "auto", None),
    "MiniMaxM3ForCausalLM": ("MiniMaxAI/MiniMax-M3", "auto", "auto", None),
    "NemotronHForCausalLM (Super, MTP)": ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8", "qwen3_coder", "nemotron_3",
                                          "EAGLE"),
    "NemotronHForCausalLM (Ultra)": ("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8", "qwen3_coder", "nemotron_3", None),
    "DeciLMForCausalLM": ("nvidia/Llama-3_3-Nemotron-Super-49B-v1", "auto", "auto", None),
    "Step3p7FlashForCausalLM": ("stepfun-ai/Step-3.7-Flash-FP8", "auto", "auto", None),
    "LagunaForCausalLM": ("poolside/Laguna-XS.2-FP8", "auto", "auto", None),
    "Qwen3VLForConditionalGeneration": ("Qwen/Qwen3-VL-32B-Instruct", "qwen", None, None),
}
# the single-host layouts of the issue: 2x RTX A6000 to 8x B200
LAYOUTS = ("a6000x2-bridge", "l40sx4-pcie", "h100x4-nvswitch", "a100x8-nvswitch", "h100x8-nvswitch",
           "h200x8-nvswitch", "b200x8-nvswitch")


def _opt(argv: list[str], option: str) -> str | None:
    return argv[argv.index(option) + 1] if option in argv else None


def test_eleven_architectures_are_recorded_with_their_provenance():
    recorded = checkpoints()
    for arch, (model, *_) in NEW.items():
        assert model in recorded, model
        assert recorded[model].architectures[0] == arch.split(" ")[0]


@pytest.mark.parametrize("arch", sorted(NEW))
def test_planned_on_every_reference_layout_with_the_recipe_or_the_warning(arch):
    model, tool, reasoning, spec = NEW[arch]
    catalog = load_catalog("0.5.23")
    planned = 0
    for hardware in LAYOUTS:
        p = plan_case(model, hardware, "0.5.23")
        if isinstance(p, PlanError):
            # only memory (or a split SGLang refuses) stops a plan, named so
            assert p.field == "tp_size (model-facts)" or "constraint " in p.message, (hardware, p)
            continue
        planned += 1
        assert catalog.check(p.argv) == [], (hardware, p.argv)
        count = HARDWARE[hardware]["count"]
        serving = p.intents["tp_size"].value * p.intents["dp_size"].value
        assert serving == count or any(f"{count - serving} stay idle" in w for w in p.warnings), (hardware, p.warnings)
        assert (_opt(p.argv, "--tool-call-parser"), _opt(p.argv, "--reasoning-parser")) == (tool, reasoning)
        assert _opt(p.argv, "--speculative-algorithm") == spec
        unset = [w for w in p.warnings if w.startswith("no recipe for")]
        if tool == "auto":
            # said, naming the architecture and how to set what was left to SGLang
            assert unset and arch.split(" ")[0] in unset[0] and "sglang_intents.tool_call_parser" in unset[0]
            assert "speculative" in unset[0]
        else:
            assert not unset, unset
    # every one of them plans on the 8-GPU hosts of the largest memory, every GPU serving
    assert planned >= 2
    for hardware in ("h200x8-nvswitch", "b200x8-nvswitch"):
        p = plan_case(model, hardware, "0.5.23")
        assert not isinstance(p, PlanError), p
        assert p.intents["tp_size"].value * p.intents["dp_size"].value == 8


def test_before_0_5_15_no_auto_detection_exists_so_no_parser_is_set_and_the_plan_says_so():
    p = plan_case("XiaomiMiMo/MiMo-7B-Base", "h200x8-nvswitch", "0.5.9")
    assert not isinstance(p, PlanError)
    assert "--tool-call-parser" not in p.argv and "--reasoning-parser" not in p.argv
    assert any("has no auto detection" in w for w in p.warnings), p.warnings


# ---- the classes these checkpoints found ---------------------------------------------------------

def test_kimi_linear_is_sized_on_its_24_mla_layers_with_a_kda_state_per_request():
    # Refused before ("config.json has no experts_per_token"): Kimi Linear names it
    # num_experts_per_token, and its 69 Kimi Delta Attention layers (linear_attn_config.kda_layers,
    # 1-based) hold no KV. SGLang's KimiLinearStateShape: 3 short convolutions of 96 x 128 / tp
    # channels x 3 in bfloat16 and a 96 / tp x 128 x 128 float32 state per KDA layer.
    f = checkpoints()["moonshotai/Kimi-K3"]
    assert (f.num_hidden_layers, f.full_attention_layers, f.linear_attention_layers) == (93, 24, 69)
    assert f.moe is not None and (f.moe.num_experts, f.moe.experts_per_token) == (896, 16)
    assert sizing.kv_cell(f, 8).bytes_per_token == (512 + 64) * 24 * 2
    for tp in (1, 2, 8):
        per_layer = 3 * (96 * 128 // tp) * 3 * 2 + 96 // tp * 128 * 128 * 4
        assert hybrid_state.recurrent_state_per_request(f, tp) == 69 * per_layer
    # its own code is not needed where SGLang has the class (0.5.23), and is the operator's consent where not
    assert "--trust-remote-code" not in plan_case(f.model, "b200x8-nvswitch", "0.5.23").argv
    refused = plan_case(f.model, "b200x8-nvswitch", "0.5.9")
    assert isinstance(refused, PlanError) and refused.field == "sglang_trust_remote_code"


def test_a_nemotron_h_that_names_its_layers_only_in_layers_block_type_plans_from_0_5_15():
    # Refused before ("config.json has no num_hidden_layers"): 0.5.15's NemotronHConfig counts
    # layers_block_type; 0.5.9's reads num_hidden_layers (default 52) and cannot load it.
    f = checkpoints()["nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8"]
    assert (f.num_hidden_layers, f.full_attention_layers, f.linear_attention_layers) == (108, 12, 48)
    assert not isinstance(plan_case(f.model, "b200x8-nvswitch", "0.5.15"), PlanError)
    old = plan_case(f.model, "b200x8-nvswitch", "0.5.9")
    assert isinstance(old, PlanError) and old.field == "sglang_version" and "0.5.15" in old.message


def test_a_tp_whose_dense_blocks_do_not_split_is_passed_over_not_planned_and_refused():
    # Refused before: TP 8 was chosen, then the dense-block-n constraint refused it. The shared
    # expert (1280 wide) splits into 128-wide FP8 blocks only at TP 1 and 2.
    p = plan_case("stepfun-ai/Step-3.7-Flash-FP8", "h200x8-nvswitch", "0.5.23")
    assert not isinstance(p, PlanError), p
    assert (p.intents["tp_size"].value, p.intents["dp_size"].value) == (2, 4)
    reason = p.intents["tp_size"].reason
    assert ("TP 4: shared experts' width 1280 / TP 4 = 320 is not a multiple of the weight quantization "
            "block_n 128") in reason
    assert sizing.dense_split_problem(checkpoints()[p.model_path], 2) is None


@pytest.mark.parametrize("model", ["MiniMaxAI/MiniMax-M3", "stepfun-ai/Step-3.7-Flash-FP8"])
def test_an_architecture_sglang_has_no_class_for_is_said(model):
    # config.json names no code of its own: SGLang falls back to its Transformers backend
    p = plan_case(model, "h200x8-nvswitch", "0.5.23")
    said = [w for w in p.warnings if "has no class of its own" in w]
    assert said and checkpoints()[model].architectures[0] in said[0] and "Transformers backend" in said[0]
    # an architecture SGLang has: no such warning
    q = plan_case("poolside/Laguna-XS.2-FP8", "h200x8-nvswitch", "0.5.23")
    assert not [w for w in q.warnings if "has no class of its own" in w]


def test_latent_moe_experts_are_counted_in_their_own_width():
    # Nemotron 3 Ultra's experts work in moe_latent_size, Kimi-K3's in routed_expert_hidden_size:
    # counted in the hidden size, Ultra was 2,094B parameters (Super 458B); its name says 550B, 55B active
    from sglang_deploy.plan.perf import model_cost

    ultra = model_cost(checkpoints()["nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8"])
    assert 540e9 < ultra.total_params < 560e9 and 54e9 < ultra.active_params < 57e9
    super_ = model_cost(checkpoints()["nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8"])
    assert 118e9 < super_.total_params < 123e9 and 12e9 < super_.active_params < 13e9


def test_nvidia_modelopt_checkpoints_run_as_the_method_sglang_maps_their_algorithm_to():
    # quant_method "modelopt" (or none) and a quant_algo: SGLang's _parse_modelopt_quant_config picks
    # the method. Before, the plan took "modelopt" (FP8's SM89 floor: refused on A100 and A6000 that
    # 0.5.15 on serve NVFP4 from) and sized NVFP4 weights at 2 bytes per parameter.
    from sglang_deploy.plan.perf import model_cost

    fp4, mixed = (checkpoints()[m] for m in ("nvidia/Qwen3.5-122B-A10B-NVFP4", "nvidia/Qwen3.6-35B-A3B-NVFP4"))
    assert fp4.quantization is not None and fp4.quantization.method == "modelopt_fp4"
    assert mixed.quantization is not None and mixed.quantization.method == "modelopt_mixed"
    assert model_cost(fp4).bytes_per_param < 0.6
    for hardware in ("a6000x2-bridge", "a100x8-nvswitch", "h100x8-nvswitch", "b200x8-nvswitch"):
        for model in (fp4.model, mixed.model):
            assert not isinstance(plan_case(model, hardware, "0.5.23"), PlanError), (model, hardware)
    # 0.5.9's ModelOptFp4Config asks for SM100, and 0.5.9 maps MIXED_PRECISION to w4afp8 (FP8 linear
    # layers, INT4 experts), which loads no NVFP4 layer: refused saying so
    old = plan_case(fp4.model, "h100x8-nvswitch", "0.5.9")
    assert isinstance(old, PlanError) and "quantization-capability" in old.message
    assert "compute capability 10" in old.message
    assert not isinstance(plan_case(fp4.model, "b200x8-nvswitch", "0.5.9"), PlanError)
    mixed_old = plan_case(mixed.model, "b200x8-nvswitch", "0.5.9")
    assert isinstance(mixed_old, PlanError) and "runs MIXED_PRECISION as w4afp8" in mixed_old.message
    assert "NVFP4" in mixed_old.message and "0.5.15 and later run it as modelopt_mixed" in mixed_old.message
    assert not isinstance(plan_case(mixed.model, "b200x8-nvswitch", "0.5.15"), PlanError)


def test_each_release_maps_a_modelopt_algorithm_to_its_own_method():
    # configs/model_config.py ModelConfig._parse_modelopt_quant_config: 0.5.19 and 0.5.23 map FP8 and
    # MXFP8 each to its own method; 0.5.9 and 0.5.15 map any algorithm containing FP8 to modelopt_fp8;
    # 0.5.9 maps MIXED_PRECISION to w4afp8 whatever its layers
    from sglang_deploy.plan.modelfacts import QuantFacts

    mixed = checkpoints()["nvidia/Qwen3.6-35B-A3B-NVFP4"].quantization
    assert mixed is not None and mixed.modelopt_algo == "MIXED_PRECISION"
    assert [mixed.method_at(r) for r in ((0, 5, 9), (0, 5, 15), (0, 5, 23))] == ["w4afp8", "modelopt_mixed",
                                                                                "modelopt_mixed"]
    mx = QuantFacts(method="mxfp8", modelopt_algo="MXFP8")
    assert [mx.method_at(r) for r in ((0, 5, 9), (0, 5, 15), (0, 5, 19), (0, 5, 23))] == ["modelopt_fp8"] * 2 + [
        "mxfp8"] * 2
    assert QuantFacts(method="fp8").method_at((0, 5, 9)) == "fp8"  # not a ModelOpt checkpoint
    # an algorithm name no release maps (over-long, not text) is not kept: each release then reads
    # the checkpoint's own method, and nothing raises (Llama-3.1-8B's shapes, as published)
    from sglang_deploy.plan.modelfacts import facts_from_metadata

    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}
    for algo in ("FP8" * 100_000, 8, ["FP8"]):
        facts = facts_from_metadata("m", None, "recorded", {**config, "quantization_config": {
            "quant_method": "modelopt", "quant_algo": algo}})
        q = facts.quantization
        assert q is not None and q.modelopt_algo is None and q.method_at((0, 5, 9)) == q.method


def test_a_modelopt_export_names_its_quantization_in_hf_quant_config_json(tmp_path):
    # nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8's config.json names no quantization; its
    # hf_quant_config.json says FP8, which SGLang reads when config.json is silent
    # (ModelConfig._parse_quant_hf_config). The plan sized it as bfloat16 and applied no FP8 rule.
    import shutil

    from sglang_deploy.deploy.model_files import read_directory
    from sglang_deploy.plan.perf import model_cost

    src = FIXTURES_DIR / "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8"
    shutil.copy(src / "config.json", tmp_path / "config.json")
    assert read_directory("m", tmp_path).quantization is None  # without the file: nothing says FP8
    shutil.copy(src / "hf_quant_config.json", tmp_path / "hf_quant_config.json")
    f = read_directory("m", tmp_path)
    assert f.quantization is not None and f.quantization.method == "modelopt_fp8"
    assert model_cost(f).bytes_per_param == 1.0
    assert checkpoints()["nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8"].quantization.method == "modelopt_fp8"
    # SGLang's ModelOptFp8Config needs SM89: on A100 (SM80) it is refused, naming the constraint
    refused = plan_case("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8", "a100x8-nvswitch", "0.5.23")
    assert isinstance(refused, PlanError) and "quantization-capability" in refused.message


def test_mimo_v2_sizes_its_full_and_sliding_window_layers_each_in_its_own_geometry():
    # hybrid_layer_pattern: 9 full-attention layers (0) and 39 sliding-window ones (1), as SGLang's
    # get_hybrid_layer_ids reads it; keys 192 wide and values 128, 4 full / 8 sliding KV heads. The
    # plan counted all 48 layers as full ones of 4 heads x 192 x 2.
    f = checkpoints()["XiaomiMiMo/MiMo-V2-Flash"]
    assert (f.full_attention_layers, f.sliding_window_layers, f.sliding_window) == (9, 39, 128)
    for tp, full_heads, swa_heads in ((1, 4, 8), (4, 1, 2), (8, 1, 1)):
        # SGLang's cell: F x full + swa_full_tokens_ratio (0.8) x S x sliding, bf16
        want = full_heads * (192 + 128) * 2 * 9 + 0.8 * swa_heads * (192 + 128) * 2 * 39
        assert sizing.kv_cell(f, tp).bytes_per_token == pytest.approx(want)
    # a model without its own value or sliding geometry is counted as before
    gpt = checkpoints()["openai/gpt-oss-120b"]
    heads = sizing.kv_heads_per_rank(gpt, 8)
    assert sizing.kv_cell(gpt, 8).bytes_per_token == pytest.approx(
        heads * gpt.head_dim * 2 * 2 * (gpt.full_attention_layers + 0.8 * gpt.sliding_window_layers))


def test_a_nemotron_nas_model_has_the_kv_heads_its_blocks_name():
    # DeciLM's config.json names no num_key_value_heads: SGLang takes 64 attention heads over each
    # block's n_heads_in_group 8 (get_total_num_kv_heads), 8 KV heads. The plan fell back to 64, and
    # sized eight times the KV per token.
    import json

    from sglang_deploy.plan.modelfacts import CheckpointError, facts_from_metadata

    f = checkpoints()["nvidia/Llama-3_3-Nemotron-Super-49B-v1"]
    assert (f.num_attention_heads, f.num_key_value_heads) == (64, 8)
    config = json.loads((FIXTURES_DIR / "nvidia--Llama-3_3-Nemotron-Super-49B-v1" / "config.json").read_text())
    varied = [dict(b, attention={**b["attention"], "n_heads_in_group": 4 if i == 3 else b["attention"].get(
        "n_heads_in_group")}) for i, b in enumerate(config["block_configs"])]
    with pytest.raises(CheckpointError, match="variable GQA is not supported"):
        facts_from_metadata("m", None, "test", {**config, "block_configs": varied})


def test_a_nemotron_nas_model_counts_the_blocks_sglang_builds():
    # 80 blocks, 31 of them without attention, MLP widths from ffn_mult 0.5 to 5.25
    # (srt/models/nemotron_nas.py _ffn_mult_to_intermediate_size): 49.9B parameters, the "49B" of
    # its name. Counted as 80 Llama layers of the config's width it was 88B.
    from sglang_deploy.plan.perf import model_cost

    f = checkpoints()["nvidia/Llama-3_3-Nemotron-Super-49B-v1"]
    assert f.extra["nas_blocks"]["attention"] == 49
    cost = model_cost(f)
    assert cost.total_params == cost.active_params and 49.7e9 < cost.total_params < 50.0e9
    assert "49 of 80 blocks with attention" in cost.how


@pytest.mark.parametrize("folder, change, field", [
    ("moonshotai--Kimi-K3", {"linear_attn_config": {"kda_layers": "1,2", "full_attn_layers": []}}, "kda_layers"),
    ("moonshotai--Kimi-K3", {"linear_attn_config": {"kda_layers": [1], "num_heads": "96", "head_dim": 128,
                                                    "short_conv_kernel_size": 4}}, "num_heads"),
    ("XiaomiMiMo--MiMo-V2-Flash", {"hybrid_layer_pattern": [0, 2] * 24}, "hybrid_layer_pattern"),
    ("XiaomiMiMo--MiMo-V2-Flash", {"swa_num_key_value_heads": 10 ** 9}, "swa_num_key_value_heads"),
    ("nvidia--Llama-3_3-Nemotron-Super-49B-v1", {"block_configs": "x"}, "block_configs"),
    ("nvidia--Llama-3_3-Nemotron-Super-49B-v1",
     {"block_configs": [{"attention": {"n_heads_in_group": True}}]}, "n_heads_in_group"),
    ("nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8", {"layers_block_type": ["mamba"] * 2000}, "layers_block_type"),
    ("nvidia--Llama-3_3-Nemotron-Super-49B-v1",
     {"block_configs": [{"attention": {"n_heads_in_group": 8}, "ffn": {"ffn_mult": "5.25"}}]}, "ffn_mult"),
    ("nvidia--Llama-3_3-Nemotron-Super-49B-v1",
     {"block_configs": [{"attention": {"n_heads_in_group": 8}, "ffn": {"ffn_mult": 1e300}}]}, "ffn_mult"),
    ("nvidia--Llama-3_3-Nemotron-Super-49B-v1", {"block_configs": [{"attention": {"n_heads_in_group": 8}}]},
     "block_configs"),
])
def test_a_bad_value_of_a_field_read_here_is_refused_in_one_line_naming_it(folder, change, field):
    import json

    from sglang_deploy.plan.modelfacts import CheckpointError, facts_from_metadata

    config = json.loads((FIXTURES_DIR / folder / "config.json").read_text())
    target = config["text_config"] if "text_config" in config else config
    target.update(change)
    with pytest.raises(CheckpointError) as err:
        facts_from_metadata("m", None, "test", config)
    assert field in str(err.value) and "\n" not in str(err.value)


def test_an_odd_hf_quant_config_is_no_quantization_as_sglang_reads_it_never_an_error():
    # SGLang's _parse_modelopt_quant_config maps no method from it: the model loads unquantized
    import json

    from sglang_deploy.plan.modelfacts import facts_from_metadata

    config = json.loads((FIXTURES_DIR / "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8" / "config.json").read_text())
    for odd in ({"quantization": "FP8"}, {"quantization": {"quant_algo": 8}}, {"quantization": {"quant_algo": "INT3"}},
                {"quantization": {"quant_algo": "FP8", "exclude_modules": "lm_head"}}):
        f = facts_from_metadata("m", None, "test", config, hf_quant_config=odd)
        assert f.quantization is None or (f.quantization.method == "modelopt_fp8"
                                          and f.quantization.modules_not_converted == ())


def test_a_modelopt_checkpoint_that_names_an_fp8_kv_cache_is_sized_at_one_byte_per_element():
    # SGLang's kv_cache_dtype auto is float8_e4m3fn where the quantization config's
    # kv_cache_quant_algo is FP8 (configure_kv_cache_dtype); its ModelOpt configs read it from
    # hf_quant_config.json or from config.json's kv_cache_scheme. Sized at bf16, the plan held half
    # the context SGLang holds.
    recorded = checkpoints()
    super_fp8 = recorded["nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8"]  # hf_quant_config.json
    nvfp4 = recorded["nvidia/Qwen3.5-122B-A10B-NVFP4"]  # config.json kv_cache_scheme: float, 8 bits
    for f, method in ((super_fp8, "modelopt_fp8"), (nvfp4, "modelopt_fp4")):
        assert f.quantization is not None and (f.quantization.method, f.quantization.kv_cache_quant_algo) == (
            method, "FP8")
        assert sizing.kv_dtype_bytes(f, None) == sizing.kv_dtype_bytes(f, "auto") == 1
        assert sizing.kv_cell(f, 8).bytes_per_token * 2 == sizing.kv_cell(f, 8, "bfloat16").bytes_per_token
    for version in ("0.5.9", "0.5.15", "0.5.19", "0.5.23"):  # ModelOpt's: in every supported release
        assert sizing.kv_dtype_bytes(super_fp8, None, version) == 1


def test_compressed_tensors_and_fp8_configs_name_an_fp8_kv_cache_from_0_5_19():
    # poolside/Laguna-XS.2-FP8's published config.json (recorded): compressed-tensors with a static,
    # symmetric, per-tensor 8-bit float kv_cache_scheme. 0.5.19 and 0.5.23 read it as kv_cache_quant_algo
    # FP8 (CompressedTensorsConfig.kv_cache_quant_algo, is_supported_scheme), so auto is one byte; 0.5.9
    # and 0.5.15's config has no such property: the model's bf16, two.
    laguna = checkpoints()["poolside/Laguna-XS.2-FP8"]
    assert laguna.quantization is not None and laguna.quantization.kv_cache_quant_algo == "FP8"
    assert [sizing.kv_dtype_bytes(laguna, None, v) for v in ("0.5.9", "0.5.15", "0.5.19", "0.5.23")] == [2, 2, 1, 1]
    assert sizing.kv_cell(laguna, 1, None, "0.5.15").bytes_per_token == 2 * sizing.kv_cell(laguna, 1).bytes_per_token
    assert sizing.kv_dtype_bytes(laguna, "bfloat16", "0.5.23") == 2  # an explicit dtype wins
    # a dynamic scheme carries no scales SGLang can load: not read as FP8
    import json

    from sglang_deploy.plan.modelfacts import facts_from_metadata

    config = json.loads((FIXTURES_DIR / "poolside--Laguna-XS.2-FP8" / "config.json").read_text())
    config["quantization_config"]["kv_cache_scheme"]["dynamic"] = True
    assert facts_from_metadata("m", None, "test", config).quantization.kv_cache_quant_algo is None
    # fp8 (Fp8Config.from_config reads kv_cache_quant_algo from 0.5.19): Qwen's published FP8 config of
    # Qwen3-235B-A22B-Instruct-2507 names none; with the key added, 0.5.19 on size it at one byte
    qwen = checkpoints()["Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"]
    assert qwen.quantization is not None and qwen.quantization.kv_cache_quant_algo is None
    assert sizing.kv_dtype_bytes(qwen, None) == 2
    from sglang_deploy.simulator.facts_matrix import CHECKPOINTS as HUB

    config = json.loads((HUB / "Qwen--Qwen3-235B-A22B-Instruct-2507-FP8" / "config.json").read_text())
    config["quantization_config"]["kv_cache_quant_algo"] = "FP8"
    f = facts_from_metadata("m", None, "test", config)
    assert [sizing.kv_dtype_bytes(f, None, v) for v in ("0.5.15", "0.5.19")] == [2, 1]


def test_a_kv_cache_quant_algo_that_is_no_short_name_is_none():
    import json

    from sglang_deploy.plan.modelfacts import facts_from_metadata

    config = json.loads((FIXTURES_DIR / "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8" / "config.json").read_text())
    for odd in (8, "F" * 17, "FP8\n", None):
        f = facts_from_metadata("m", None, "test", config,
                                hf_quant_config={"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": odd}})
        assert f.quantization is not None and f.quantization.kv_cache_quant_algo is None
        assert sizing.kv_dtype_bytes(f, None) == 2
