"""What the model needs to start, per SGLang version: drafts from the model's own MTP/NextN
layers, the quantization methods a version knows, remote code, keys a published config sets
to 0 or omits, and the KV-cache floor (a project policy). Through the planner where it can be.

Recorded checkpoints: tests/recorded_facts.py (the Hub stand-in) and tests/fixtures/checkpoints
(published config.json files with provenance.json). Where no published file was available, a
test says which value it sets and why, on top of a recorded checkpoint."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sglang_deploy.errors import PlanError
from sglang_deploy.plan import constraints
from sglang_deploy.plan.catalog import SUPPORTED_VERSIONS, load_catalog
from sglang_deploy.plan.modelfacts import CheckpointError, QuantFacts, facts_from_metadata
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.spec import build_spec
from tests.recorded_facts import DEEPSEEK_V3, LLAMA_70B, QWEN3_30B_A3B, QWEN3_32B

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"
H200X8 = {"model": "H200", "count": 8}
H100X1 = {"model": "H100 SXM", "count": 1}
H100X8 = {"model": "H100 SXM", "count": 8}


def recorded(folder: str, tokenizer_config: dict | None = None):
    d = FIXTURES / folder
    prov = json.loads((d / "provenance.json").read_text())
    return facts_from_metadata(prov["model"], None, f"recorded {folder}", json.loads((d / "config.json").read_text()),
                               tokenizer_config=tokenizer_config)


QWEN3_CODER = recorded("Qwen--Qwen3-Coder-480B-A35B-Instruct")
KIMI_K2 = recorded("moonshotai--Kimi-K2-Instruct")


def plan(facts, gpus, version="0.5.23", **data):
    data = {"sglang_model": facts.model, "sglang_gpus": gpus, **data}
    return plan_host(build_spec("gpu-1", {}, data), sglang_version=version, facts=facts)


# ---- the catalogs carry what each wheel's source says -----------------------------------------

@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_every_catalog_carries_its_versions_model_support(version):
    support = load_catalog(version).model_support
    assert support is not None
    # DeepSeek-V3 and GLM-4.5 draft from their NextN layers with the model as draft path, in every version
    assert {"DeepseekV3ForCausalLM", "Glm4MoeForCausalLM"} <= support.default_draft_path
    assert {"DeepseekV3ForCausalLM", "Glm4MoeForCausalLM", "Qwen3NextForCausalLM"} <= set(support.draft_architectures)
    # Qwen3-Next's config names no MTP layer: SGLang sets one itself
    assert "Qwen3NextForCausalLM" in support.assumed_one_layer
    assert "Qwen3ForCausalLM" not in support.draft_architectures
    assert {"fp8", "compressed-tensors", "awq", "modelopt"} <= support.quantization_methods
    assert {"LlamaForCausalLM", "DeepseekV3ForCausalLM", "Qwen3MoeForCausalLM"} <= support.architectures


def test_fbgemm_fp8_left_sglang_after_0_5_15():
    known = {v: "fbgemm_fp8" in load_catalog(v).model_support.quantization_methods for v in SUPPORTED_VERSIONS}
    assert known == {"0.5.9": True, "0.5.15": True, "0.5.19": False, "0.5.23": False}


# ---- speculative decoding from the model's own layers -----------------------------------------

@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
@pytest.mark.parametrize("algo", ["EAGLE", "NEXTN", "eagle"])
def test_deepseek_v3_with_eagle_plans_in_every_version(version, algo):
    # SGLang's own DeepSeek-V3 recipe: --speculative-algorithm EAGLE, no draft model path
    p = plan(DEEPSEEK_V3, H200X8, version, sglang_intents={"speculative_algorithm": algo})
    assert p.intents["speculative_algorithm"].value == algo.upper()
    assert "--speculative-draft-model-path" not in p.argv
    assert not any("speculative" in w for w in p.warnings)


def test_an_architecture_without_a_draft_class_is_refused_naming_version_and_architecture():
    with pytest.raises(PlanError) as err:
        plan(QWEN3_32B, H100X8, sglang_intents={"speculative_algorithm": "NEXTN"})
    text = str(err.value)
    assert "SGLang 0.5.23 has no MTP/NextN draft for Qwen3ForCausalLM" in text
    assert "--speculative-draft-model-path" in text and "SGLang refuses it: sglang srt/arg_groups" in text
    # a draft model is the way out
    p = plan(QWEN3_32B, H100X8, sglang_intents={"speculative_algorithm": "EAGLE"},
             sglang_extra_args=["--speculative-draft-model-path", "org/eagle-draft"])
    assert p.intents["speculative_algorithm"].value == "EAGLE"


def test_a_config_that_sets_its_nextn_layers_to_zero_has_none_to_draft_with():
    # Kimi-K2-Instruct's published config.json: DeepseekV3ForCausalLM, num_nextn_predict_layers 0
    assert KIMI_K2.mtp_layers == 0
    problem = constraints.self_draft_problem(KIMI_K2, load_catalog("0.5.23").model_support, "0.5.23")
    assert problem is not None and "carries no MTP/NextN layers" in problem
    assert constraints.self_draft_problem(DEEPSEEK_V3, load_catalog("0.5.23").model_support, "0.5.23") is None


def test_qwen3_next_drafts_with_the_layer_sglang_assumes():
    # Qwen3-Next's config.json was not available here: the recorded Qwen3-30B-A3B stands in, with
    # the architecture name set to Qwen3NextForCausalLM and (like the published config) no MTP key.
    facts = dataclasses.replace(QWEN3_30B_A3B, architectures=("Qwen3NextForCausalLM",), mtp_layers=0)
    for version in SUPPORTED_VERSIONS:
        v = constraints.PlanView(tp=4, ep=1, gpu_mib=81920, compute_capability=90, mem_fraction=None,
                                 context_length=None, speculative_algorithm="NEXTN", draft_model=False,
                                 text_only=False, sglang_version=version, support=load_catalog(version).model_support)
        found = {x.constraint.id: x for x in constraints.check(facts, v)}
        assert "speculative-needs-draft-layers" not in found, version
        assert found["speculative-assumed-draft-layer"].constraint.severity == "warning"
        assert "assumes one MTP layer for Qwen3NextForCausalLM" in found["speculative-assumed-draft-layer"].message


def test_qwen3_moe_drafts_differ_between_versions():
    # Qwen3-Coder-480B (Qwen3MoeForCausalLM, no MTP key): 0.5.9 has no draft class for it,
    # 0.5.15 on assume one MTP layer (the plan says the weights must carry it).
    with pytest.raises(PlanError, match="SGLang 0.5.9 has no MTP/NextN draft for Qwen3MoeForCausalLM"):
        plan(QWEN3_CODER, H200X8, "0.5.9", sglang_intents={"speculative_algorithm": "EAGLE"})
    p = plan(QWEN3_CODER, H200X8, "0.5.23", sglang_intents={"speculative_algorithm": "EAGLE"})
    assert any("constraint speculative-assumed-draft-layer" in w and "weights must carry it" in w for w in p.warnings)


def test_eagle3_still_needs_a_draft_model():
    with pytest.raises(PlanError, match="EAGLE3 needs a draft model"):
        plan(DEEPSEEK_V3, H200X8, sglang_intents={"speculative_algorithm": "EAGLE3"})


# ---- quantization methods per version ---------------------------------------------------------

# Llama-3.1-405B-Instruct-FP8's config.json was not available here: the recorded Llama-3.3-70B
# stands in with its quant_method set to fbgemm_fp8 (the method that checkpoint publishes).
FBGEMM = dataclasses.replace(LLAMA_70B, quantization=QuantFacts("fbgemm_fp8"))


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_an_unknown_quantization_method_is_refused_naming_method_and_version(version):
    with pytest.raises(PlanError) as err:
        plan(FBGEMM, H100X8, version)
    text = str(err.value)
    assert f"quant_method 'fbgemm_fp8' is not a quantization method SGLang {version} knows" in text
    assert "Unknown quantization method" in text and err.value.field.startswith("quantization")


def test_a_known_or_converted_method_plans():
    assert plan(FBGEMM, H100X8, "0.5.15").argv
    # gptq is not in 0.5.23's CUDA list, but a Marlin-compatible checkpoint runs as gptq_marlin
    assert "gptq" not in load_catalog("0.5.23").model_support.quantization_methods
    assert plan(dataclasses.replace(LLAMA_70B, quantization=QuantFacts("GPTQ")), H100X8).argv
    with pytest.raises(PlanError, match="'made_up_q' is not a quantization method"):
        plan(dataclasses.replace(LLAMA_70B, quantization=QuantFacts("made_up_q")), H100X8)


# ---- keys a published config sets to 0 or omits ----------------------------------------------

def test_qwen3_coder_480b_reads_as_sglang_reads_it():
    moe = QWEN3_CODER.moe
    # shared_expert_intermediate_size: 0 is no shared expert; first_k_dense_replace absent; no MTP key
    assert (moe.shared_experts, moe.shared_expert_intermediate_size, moe.first_dense_layers) == (0, None, 0)
    assert QWEN3_CODER.mtp_layers == 0 and moe.num_experts == 160
    p = plan(QWEN3_CODER, H200X8)
    assert p.argv[p.argv.index("--tp-size") + 1] in {"1", "2", "4", "8"}
    with pytest.raises(CheckpointError, match="shared_expert_intermediate_size must be at least 0"):
        facts_from_metadata("x/y", None, "test", {**json.loads(
            (FIXTURES / "Qwen--Qwen3-Coder-480B-A35B-Instruct" / "config.json").read_text()),
            "shared_expert_intermediate_size": -1})


# ---- remote code ------------------------------------------------------------------------------

# Kimi-K2-Instruct's tokenizer_config.json was not available here. This test input carries only
# the two keys the check reads, as the issue describes the published file: its own tokenizer
# class, named in auto_map.
KIMI_TOKENIZER = {"tokenizer_class": "TikTokenTokenizer",
                  "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]}}


def test_kimi_k2_config_alone_loads_natively():
    # its config.json has an auto_map, but SGLang loads DeepseekV3ForCausalLM itself
    assert KIMI_K2.auto_maps[0].file == "config.json"
    p = plan(KIMI_K2, H200X8)
    assert "--trust-remote-code" not in p.argv


def test_a_tokenizer_of_the_repositorys_own_is_refused_without_consent():
    kimi = recorded("moonshotai--Kimi-K2-Instruct", KIMI_TOKENIZER)
    with pytest.raises(PlanError) as err:
        plan(kimi, H200X8)
    assert err.value.field == "sglang_trust_remote_code"
    assert "tokenizer_config.json (auto_map tokenization_kimi.TikTokenTokenizer)" in str(err.value)
    assert "sglang_trust_remote_code: true" in str(err.value)
    p = plan(kimi, H200X8, sglang_trust_remote_code=True)
    assert "--trust-remote-code" in p.argv and "--trust-remote-code" in load_catalog("0.5.23")
    assert any(w.startswith("--trust-remote-code (host layer)") and "tokenization_kimi" in w for w in p.warnings)
    # a tokenizer whose declared class transformers ships is not the repository's own
    plain = recorded("moonshotai--Kimi-K2-Instruct", {**KIMI_TOKENIZER, "tokenizer_class": "LlamaTokenizerFast"})
    assert "--trust-remote-code" not in plan(plain, H200X8).argv


def test_an_architecture_sglang_lacks_needs_remote_code_from_config_json():
    # the Kimi config with an architecture name no SGLang version registers (a test input)
    config = json.loads((FIXTURES / "moonshotai--Kimi-K2-Instruct" / "config.json").read_text())
    facts = facts_from_metadata("org/own-arch", None, "test", {**config, "architectures": ["OwnArchForCausalLM"]})
    with pytest.raises(PlanError, match=r"config.json \(auto_map configuration_deepseek.DeepseekV3Config"):
        plan(facts, H200X8)


def test_trust_remote_code_must_be_a_boolean():
    with pytest.raises(PlanError, match="sglang_trust_remote_code: must be true or false"):
        build_spec("gpu-1", {}, {"sglang_model": "x/y", "sglang_trust_remote_code": "yes"})


# ---- the KV-cache floor is a project policy ---------------------------------------------------

def test_qwen3_32b_on_one_h100_plans_with_a_lowered_context():
    p = plan(QWEN3_32B, H100X1)
    ctx = p.intents["context_length"].value
    assert 4096 <= ctx < 32768
    (w,) = [w for w in p.warnings if w.startswith("project policy:")]
    assert "less than the preferred 32,768-token request (floor 4,096)" in w and "SGLang" not in w.split("(")[0]


def test_below_the_floor_is_refused_as_the_projects_policy():
    with pytest.raises(PlanError) as err:
        plan(LLAMA_70B, {"model": "H100 SXM", "count": 2}, sglang_intents={"mem_fraction_static": 0.825})
    text = str(err.value)
    assert "project policy" in text and "SGLang refuses" not in text
