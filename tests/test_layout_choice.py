"""The host's layout: TP x DP replicas (x DP attention) that fill the GPUs, chosen from the
checkpoint's facts and the host's sglang_objective, with the reason; declared tp/dp win and are
checked; a GPU left idle is always said, with why."""

from __future__ import annotations

import re

import dataclasses

import pytest

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.catalog import load_catalog
from sglang_deploy.plan.modelfacts import facts_from_metadata
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.spec import build_spec
from tests.recorded_facts import DEEPSEEK_V3, LLAMA_70B, QWEN3_32B, QWEN36_27B, _ALL

QWEN3_06B = _ALL["Qwen/Qwen3-0.6B"]
H100X8 = {"model": "H100 SXM", "count": 8}
H200X8 = {"model": "H200", "count": 8}


def plan(facts, gpus, version="0.5.23", **data):
    data = {"sglang_model": facts.model, "sglang_gpus": gpus, **data}
    return plan_host(build_spec("gpu-1", {}, data), sglang_version=version, facts=facts)


def layout(p):
    i = p.intents
    return i["tp_size"].value, i["dp_size"].value, i["attn_dp_size"].value


def after(argv, flag):
    return argv[argv.index(flag) + 1]


def idle_warnings(p):
    return [w for w in p.warnings if "stay idle" in w]


def _dense_bf16_bytes(t: dict) -> int:
    """bf16 bytes of a dense Llama-style decoder from its config's shapes: embeddings and LM head
    (untied), q/k/v/o, the gated MLP (the safetensors index was not recorded)."""
    h, heads, kv, d = t["hidden_size"], t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    attn = h * heads * d * 2 + h * kv * d * 2
    mlp = 3 * h * t["intermediate_size"]
    return 2 * (t["num_hidden_layers"] * (attn + mlp) + 2 * t["vocab_size"] * h)


#: mistralai/Mistral-Large-Instruct-2411 config.json, as published on the Hub (the fields the
#: planner reads); its weight size follows from these shapes (~245 GB in bf16).
MISTRAL_LARGE_CONFIG = {
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "torch_dtype": "bfloat16",
    "hidden_size": 12288, "intermediate_size": 28672, "num_hidden_layers": 88, "num_attention_heads": 96,
    "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 131072, "vocab_size": 32768,
}
MISTRAL_LARGE = facts_from_metadata("mistralai/Mistral-Large-Instruct-2411", None, "published config.json",
                                    MISTRAL_LARGE_CONFIG,
                                    safetensors_header_sizes=[_dense_bf16_bytes(MISTRAL_LARGE_CONFIG)])

#: meta-llama/Llama-4-Scout-17B-16E-Instruct config.json, as published (text_config's fields the
#: planner reads); no safetensors index recorded: the weight size is unknown.
SCOUT = facts_from_metadata("meta-llama/Llama-4-Scout-17B-16E-Instruct", None, "published config.json", {
    "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "torch_dtype": "bfloat16",
    "text_config": {"attention_chunk_size": 8192, "head_dim": 128, "hidden_size": 5120, "interleave_moe_layer_step": 1,
                    "intermediate_size": 8192, "intermediate_size_mlp": 16384, "max_position_embeddings": 10485760,
                    "model_type": "llama4_text", "num_attention_heads": 40, "num_experts_per_tok": 1,
                    "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16,
                    "torch_dtype": "bfloat16", "vocab_size": 202048}})


def test_mistral_large_on_8x_h200_serves_on_every_gpu_with_its_full_context():
    # Before: TP 2 with the context cut to 79,872 while six GPUs sat idle.
    p = plan(MISTRAL_LARGE, H200X8)
    tp, dp, attn = layout(p)
    assert tp * dp == 8 and attn == 1
    assert p.intents["context_length"].value == 131072
    assert not idle_warnings(p)
    assert "holds the 131,072-token context" in p.intents["tp_size"].reason
    assert (after(p.argv, "--tp-size"), after(p.argv, "--dp-size")) == (str(tp), str(dp))


def test_llama4_scout_on_8x_h100_runs_tp_8_as_sglangs_page_does():
    # SGLang's docs/basic_usage/llama4 page: "--tp 8" on 8xH100/H200. With no weight size to check the
    # KV cache against, the largest TP the 40 heads / 8 KV heads allow: all eight.
    p = plan(SCOUT, H100X8)
    assert layout(p) == (8, 1, 1)
    assert "no weight size" in p.intents["tp_size"].reason
    assert "--dp-size" not in p.argv and not idle_warnings(p)


def test_a_small_model_on_8_gpus_is_8_replicas():
    p = plan(QWEN3_06B, H100X8)
    assert layout(p) == (1, 8, 1)
    assert p.intents["dp_size"].layer == "model-facts"
    assert "8 replica(s) of TP 1 fill the 8 GPUs" in p.intents["dp_size"].reason
    for version in ("0.5.9", "0.5.15", "0.5.19", "0.5.23"):
        v = plan(QWEN3_06B, H100X8, version=version)
        assert after(v.argv, "--dp-size") == "8" and after(v.argv, "--tp-size") == "1"
        assert load_catalog(version).check(v.argv) == []


def test_latency_puts_every_gpu_in_one_replica_where_heads_allow():
    p = plan(QWEN3_06B, H100X8, sglang_objective="latency")
    assert layout(p) == (8, 1, 1)
    assert p.intents["tp_size"].reason.startswith("sglang_objective latency: the largest TP")
    # 48 heads / 6 KV heads split at TP 2 only (TP 4 and 8: neither divides the other): the
    # largest TP the heads allow, and replicas fill the rest.
    odd = dataclasses.replace(QWEN3_32B, num_attention_heads=48, num_key_value_heads=6)
    q = plan(odd, H100X8, sglang_objective="latency")
    assert layout(q) == (2, 4, 1) and not idle_warnings(q)


def test_the_objective_is_checked():
    with pytest.raises(PlanError) as err:
        plan(QWEN3_06B, H100X8, sglang_objective="fast")
    assert err.value.field == "sglang_objective" and "throughput, latency" in str(err.value)


def test_deepseek_v3_on_8_gpus_runs_dp_attention_under_throughput():
    # SGLang's docs/basic_usage/deepseek_v3 page: "--enable-dp-attention --tp 8 --dp 8 ... 8 H200 GPUs".
    p = plan(DEEPSEEK_V3, H200X8)
    assert layout(p) == (8, 1, 8)
    assert "DP attention" in p.intents["attn_dp_size"].reason and "deepseek_v3" in p.intents["attn_dp_size"].reason
    assert after(p.argv, "--attn-dp-size") == "8" and "--dp-size" not in p.argv
    old = plan(DEEPSEEK_V3, H200X8, version="0.5.19")
    assert "--enable-dp-attention" in old.argv and after(old.argv, "--dp-size") == "8"
    assert load_catalog("0.5.19").check(old.argv) == []
    # SGLang reserves more for DP attention's padding: a lower static fraction than plain TP 8.
    plain = plan(DEEPSEEK_V3, H200X8, sglang_objective="latency")
    assert layout(plain) == (8, 1, 1)
    assert p.intents["mem_fraction_static"].value < plain.intents["mem_fraction_static"].value


def test_declared_tp_and_dp_win_and_are_checked():
    p = plan(QWEN3_06B, H100X8, sglang_intents={"tp_size": 2})
    assert layout(p) == (2, 4, 1)
    assert p.intents["dp_size"].layer == "topology" and "fill the 8 GPUs" in p.intents["dp_size"].reason
    q = plan(QWEN3_06B, H100X8, sglang_intents={"dp_size": 2})
    assert q.intents["dp_size"].value == 2 and q.intents["tp_size"].value * 2 <= 8
    r = plan(QWEN3_06B, H100X8, sglang_intents={"tp_size": 2, "dp_size": 2})
    assert layout(r) == (2, 2, 1)
    assert any("uses 4 of the 8 GPUs; 4 stay idle: dp_size 2 is declared" in w for w in r.warnings)
    with pytest.raises(PlanError) as err:
        plan(QWEN3_06B, H100X8, sglang_intents={"tp_size": 4, "dp_size": 4})
    assert err.value.field == "sglang_intents.dp_size" and "= 16 GPUs; the server uses 8" in str(err.value)
    with pytest.raises(PlanError, match="dp_size 16 replicas need at least 16 GPUs"):
        plan(QWEN3_06B, H100X8, sglang_intents={"dp_size": 16})
    # Before 0.5.23 replicas and DP attention are both --dp-size: both at once cannot be spelled.
    with pytest.raises(PlanError, match="spells both as --dp-size"):
        plan(QWEN3_06B, H100X8, version="0.5.19", sglang_intents={"tp_size": 2, "dp_size": 2, "attn_dp_size": 2})


def test_a_gpu_count_that_no_tp_divides_says_why_gpus_stay_idle():
    # 70B on 6 H100s: TP 2 x 3 replicas hold under the 4,096-token floor on NVML's 81,559 MiB with
    # SGLang's prefill-graph reserve (~1.6k); TP 4 holds the context and leaves two GPUs idle, which the
    # plan says, naming what TP 2 lacks.
    p = plan(LLAMA_70B, {"model": "H100 SXM", "count": 6})
    assert layout(p) == (4, 1, 1)
    (w,) = idle_warnings(p)
    assert "uses 4 of the 6 GPUs; 2 stay idle: 6 GPUs are not a multiple of TP 4" in w
    assert "TP 2: weights 65.7 GiB/GPU leave ~" in w
    # A small model uses all six: TP 1 x 6 (throughput), TP 2 x 3 (latency: 16 heads do not split 6 ways).
    assert layout(plan(QWEN3_06B, {"model": "H100 SXM", "count": 6})) == (1, 6, 1)
    assert layout(plan(QWEN3_06B, {"model": "H100 SXM", "count": 6}, sglang_objective="latency")) == (2, 3, 1)


def test_the_context_is_never_cut_while_a_larger_tp_on_idle_gpus_holds_it():
    # Qwen3.6-27B on 8x H100: TP 1 would hold ~245k of its 262,144 positions; TP 2 holds them all.
    # The ranking then plans TP 4 x DP 2: at TP 2 the recurrent state, with MTP's 4 draft states per
    # request and 0.5.23's extra_buffer slots (5 per request), runs 28 requests per replica, at TP 4 76.
    p = plan(QWEN36_27B, H100X8)
    assert layout(p) == (4, 2, 1)
    assert re.search(r"TP 2 x DP 4 [\d,]+ output tok/s per GPU \(28 sequences per replica at [\d.]+ tok/s each, "
                     r"bound by the recurrent state", p.intents["tp_size"].reason)
    assert p.intents["context_length"].value == 262144
    assert not any("lowered" in w for w in p.warnings)


def test_the_reference_plan_stays_tp_2_on_two_a6000s():
    # Qwen3.6-27B does not fit one RTX A6000: TP 2 is the only layout, and it uses both GPUs.
    p = plan(QWEN36_27B, {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"})
    assert layout(p) == (2, 1, 1) and "--dp-size" not in p.argv and not idle_warnings(p)
