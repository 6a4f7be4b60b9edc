"""The speed model (sglang_deploy/plan/perf.py): parameters counted from real configs, and its
properties: monotone in bandwidth and bytes, TP and DP scaling, speculative accept length."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import given
from hypothesis import strategies as st

from sglang_deploy.plan.modelfacts import ModelFacts, MoeFacts, facts_from_metadata
from sglang_deploy.plan import perf
from sglang_deploy.plan.perf import (GpuPerf, Layout, _weight_read_bytes, accept_band, capacity, model_cost,
                                      predict)

from tests.conftest import FIXTURES

# meta-llama/Llama-3.1-8B-Instruct's config.json (hidden 4096, 32 layers, 32 heads, 8 KV heads,
# intermediate 14336, vocab 128256) and its safetensors index total_size.
LLAMA_8B = ModelFacts(model="meta-llama/Llama-3.1-8B-Instruct", revision=None, source="config",
                      architectures=("LlamaForCausalLM",), model_type="llama", dtype="bfloat16",
                      total_weight_bytes=16060522496, num_hidden_layers=32, hidden_size=4096,
                      num_attention_heads=32, num_key_value_heads=8, head_dim=128, intermediate_size=14336,
                      vocab_size=128256)
# Qwen/Qwen3-30B-A3B's config.json: 48 layers, hidden 2048, 32 heads, 4 KV heads, head_dim 128,
# 128 experts, 8 per token, moe_intermediate_size 768, vocab 151936.
QWEN3_30B_A3B = ModelFacts(model="Qwen/Qwen3-30B-A3B", revision=None, source="config",
                           architectures=("Qwen3MoeForCausalLM",), model_type="qwen3_moe", dtype="bfloat16",
                           total_weight_bytes=None, num_hidden_layers=48, hidden_size=2048, num_attention_heads=32,
                           num_key_value_heads=4, head_dim=128, intermediate_size=6144, vocab_size=151936,
                           moe=MoeFacts(num_experts=128, experts_per_token=8, moe_intermediate_size=768))
H100 = GpuPerf("H100-SXM5-80GB", hbm_gbps=3350, bf16_tflops=989, fp8_tflops=1979)


def test_parameters_are_counted_from_the_config():
    dense = model_cost(LLAMA_8B)
    assert abs(dense.total_params / 1e9 - 8.03) < 0.02  # Llama 3.1 8B: 8.03B parameters
    assert dense.active_params == dense.total_params and abs(dense.bytes_per_param - 2.0) < 0.01
    assert dense.kv_bytes_per_token == 8 * 128 * 2 * 2 * 32  # KV heads x head_dim x (K, V) x bf16 x layers
    moe = model_cost(QWEN3_30B_A3B)
    assert abs(moe.total_params / 1e9 - 30.5) < 0.6  # Qwen3-30B-A3B: 30.5B in all, 3.3B activated
    assert abs(moe.active_params / 1e9 - 3.3) < 0.3
    assert moe.bytes_per_param == 2.0  # no checkpoint size: bf16


def test_a_hybrid_counts_each_layer_as_what_it_is():
    # nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16's published config.json (recorded): 52 layers of
    # which 6 attention, 23 Mamba2 and 23 MoE (128 non-gated experts, 6 per token, one shared);
    # 31.6B parameters in all. Counted as if every layer had attention and a gated MoE it was about 102B.
    config = json.loads((FIXTURES / "checkpoints" / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16" /
                         "config.json").read_text())
    facts = facts_from_metadata("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", None, "recorded", config)
    cost = model_cost(facts)
    assert abs(cost.total_params / 1e9 - 31.6) < 0.2
    embeddings = 2 * 131072 * 2688
    assert 2.6 < (cost.active_params - embeddings) / 1e9 < 3.3  # A3B: about 3B activated per token
    assert "6 attention, 23 Mamba2, 23 MoE, 0 MLP layers" in cost.how
    without_widths = dataclasses.replace(facts, extra={k: v for k, v in facts.extra.items() if k != "mamba"})
    fewer = model_cost(without_widths)
    assert fewer.total_params < cost.total_params and "not counted" in fewer.how


@given(st.integers(min_value=1, max_value=4096))
def test_a_batch_reads_the_expected_distinct_experts_of_uniform_routing(batch):
    """Each of a batch's tokens picks 8 of Qwen3-30B-A3B's 128 experts: the step reads the expected
    number of distinct experts, 128 (1 - (1 - 8/128) ** batch) per MoE layer, besides what every
    token reads (attention, embeddings), never more than the whole model."""
    cost = model_cost(QWEN3_30B_A3B)
    assert cost.routed_share == 8 / 128 and 0 < cost.routed_params < cost.active_params
    expert = cost.routed_params / (cost.moe_layers * 8)
    touched = cost.moe_layers * 128 * (1 - (1 - 8 / 128) ** batch) * expert
    read = _weight_read_bytes(cost, Layout(tp=2), batch)
    expected = (cost.active_params - cost.routed_params + touched) * cost.bytes_per_param / 2
    assert abs(read - expected) <= 1e-6 * expected
    assert cost.active_bytes / 2 <= read <= cost.total_params * cost.bytes_per_param / 2 * (1 + 1e-9)
    assert read <= _weight_read_bytes(cost, Layout(tp=2), batch + 1)
    if batch == 1:
        assert read == cost.active_bytes / 2


def test_a_dense_batch_reads_its_weights_once():
    cost = model_cost(LLAMA_8B)
    assert cost.routed_params == 0 and cost.routed_share == 0
    assert _weight_read_bytes(cost, Layout(), 64) == cost.active_bytes


def test_an_moe_decodes_faster_than_a_dense_model_of_its_total_size():
    moe = predict(model_cost(QWEN3_30B_A3B), H100, Layout())
    dense = predict(model_cost(LLAMA_8B), H100, Layout())
    assert moe.decode_tok_s.expected > dense.decode_tok_s.expected  # 3.3B read per token against 8B


def test_bands_are_ordered():
    p = predict(model_cost(LLAMA_8B), H100, Layout(tp=2), concurrency=(1, 8, 32))
    for band in (p.decode_tok_s, p.ttft_ms, *p.output_tok_s.values()):
        assert band.low <= band.expected <= band.high
    assert set(p.as_dict()["output_tok_s"]) == {"1", "8", "32"}
    assert "roofline" in p.basis and p.lines


def test_speculative_accept_length_prior_and_measured():
    band, note = accept_band(Layout(spec_steps=3))
    assert 2.0 < band.expected < 3.0 and "prior" in note
    band, note = accept_band(Layout(spec_steps=3, accept_length=3.4))
    assert band.expected == 3.4 and "measured" in note
    assert accept_band(Layout())[0].expected == 1.0
    plain = predict(model_cost(LLAMA_8B), H100, Layout()).decode_tok_s.expected
    spec = predict(model_cost(LLAMA_8B), H100, Layout(spec_steps=3)).decode_tok_s.expected
    assert spec > 1.5 * plain


gbps = st.floats(min_value=300, max_value=10000)
scale = st.floats(min_value=1.01, max_value=4)


@given(bw=gbps, more=scale)
def test_more_bandwidth_never_slows_decode(bw, more):
    cost = model_cost(LLAMA_8B)
    slow = predict(cost, dataclasses.replace(H100, hbm_gbps=bw), Layout()).decode_tok_s
    fast = predict(cost, dataclasses.replace(H100, hbm_gbps=bw * more), Layout()).decode_tok_s
    assert fast.low >= slow.low and fast.expected >= slow.expected and fast.high >= slow.high


@given(more=scale)
def test_more_bytes_never_speeds_decode(more):
    small = model_cost(LLAMA_8B)
    big = model_cost(dataclasses.replace(LLAMA_8B, total_weight_bytes=int(LLAMA_8B.total_weight_bytes * more)))
    assert predict(big, H100, Layout()).decode_tok_s.expected <= predict(small, H100, Layout()).decode_tok_s.expected


@given(tp=st.sampled_from([2, 4, 8]), link=st.sampled_from(["nvswitch", "nvlink", "pcie_p2p", "pcie"]))
def test_tp_speeds_decode_up_less_than_linearly(tp, link):
    cost = model_cost(LLAMA_8B)
    one = predict(cost, H100, Layout(tp=1)).decode_tok_s.expected
    many = predict(cost, H100, Layout(tp=tp, link=link)).decode_tok_s.expected
    assert many < tp * one  # the fixed step cost and the all-reduces do not split
    if link in ("nvswitch", "nvlink"):
        assert many > one


@given(dp=st.integers(min_value=1, max_value=8), c=st.sampled_from([1, 8, 32]))
def test_dp_multiplies_aggregate_output_and_not_single_stream(dp, c):
    cost = model_cost(LLAMA_8B)
    one = predict(cost, H100, Layout(), concurrency=(c,))
    many = predict(cost, H100, Layout(dp=dp), concurrency=(c,))
    assert many.decode_tok_s == one.decode_tok_s
    assert abs(many.output_tok_s[c].expected - dp * one.output_tok_s[c].expected) < 1e-6


@given(c=st.sampled_from([2, 8, 32, 128]))
def test_a_batch_outputs_more_but_each_stream_slower(c):
    p = predict(model_cost(LLAMA_8B), H100, Layout(), concurrency=(1, c))
    assert p.output_tok_s[c].expected > p.output_tok_s[1].expected
    assert p.output_tok_s[c].expected / c <= p.output_tok_s[1].expected


def _published(name: str) -> ModelFacts:
    config = json.loads((FIXTURES / "checkpoints" / name / "config.json").read_text())
    return facts_from_metadata(name.replace("--", "/"), None, "recorded", config)


def test_mla_attention_is_counted_through_its_low_rank_projections():
    # deepseek-ai/DeepSeek-R1's published config.json (recorded): hidden 7168, 128 heads, q_lora_rank
    # 1536, kv_lora_rank 512, qk_nope 128 + rope 64, v_head_dim 128: 187.1M attention parameters per
    # layer; 671B parameters, 37B activated (DeepSeek-V3's model card). Counted with the query at full
    # rank and every head 192 wide it was 381M per layer, 12B too many per token.
    cost = model_cost(_published("deepseek-ai--DeepSeek-R1"))
    assert abs(cost.attention_params / 61 / 1e6 - 187.1) < 0.1
    assert abs(cost.total_params / 1e9 - 671) < 1 and abs(cost.active_params / 1e9 - 37.4) < 0.5
    assert cost.kv_heads == 1  # one latent per token


def test_dp_attention_reads_the_attention_weights_of_its_group():
    # Kimi-K2-Instruct's published config.json on 8 GPUs: TP 8 alone splits every weight 8 ways; under
    # DP attention 4 (attention TP 2: srt/layers/dp_attention.py compute_dp_attention_world_info) each
    # GPU reads a quarter of the attention weights instead of an eighth, the rest as before.
    cost = model_cost(_published("moonshotai--Kimi-K2-Instruct"))
    tp, dpa = Layout(tp=8), Layout(tp=8, attn_dp=4)
    assert dpa.attn_tp == 2 and tp.attn_tp == 8
    extra = _weight_read_bytes(cost, dpa, 1) - _weight_read_bytes(cost, tp, 1)
    assert abs(extra - cost.attention_params * cost.bytes_per_param * (1 / 2 - 1 / 8)) < 1e3
    b200 = GpuPerf("B200", hbm_gbps=8000, bf16_tflops=2250, fp8_tflops=4500, memory_gib=180)
    one = predict(cost, b200, tp, fp8_weights=True).decode_tok_s.expected
    assert predict(cost, b200, dpa, fp8_weights=True).decode_tok_s.expected < one


def test_an_mla_cache_is_whole_on_every_rank_and_dp_attention_divides_the_requests():
    # MLA's latent is one KV head: TP keeps all of it on every rank (srt/mem_cache/memory_pool.py
    # MLATokenToKVPool), so TP 8 holds no more sequences than one GPU's pool allows; DP attention 8
    # gives each rank its own requests and holds about 8 times as many.
    cost = model_cost(_published("deepseek-ai--DeepSeek-R1"))
    h200 = GpuPerf("H200", hbm_gbps=4800, bf16_tflops=989, fp8_tflops=1979, memory_gib=141)
    tp, dpa = Layout(tp=8), Layout(tp=8, attn_dp=8)
    assert perf._kv_read_bytes(cost, tp, 8, 1000) == 8 * 1000 * cost.kv_bytes_per_token
    assert perf._kv_read_bytes(cost, dpa, 8, 1000) == 1000 * cost.kv_bytes_per_token
    held_tp, held_dpa = capacity(cost, h200, tp, 2048), capacity(cost, h200, dpa, 2048)
    assert held_tp > 1 and held_dpa > 4 * held_tp  # DP attention also replicates the attention weights
    # a GQA model with at least as many KV heads as GPUs splits its cache: Llama-3.1-8B on TP 8
    dense = model_cost(LLAMA_8B)
    assert perf._kv_read_bytes(dense, Layout(tp=8), 1, 1000) == 1000 * dense.kv_bytes_per_token / 8


def test_dp_attention_adds_the_attention_groups_all_reduce():
    cost = model_cost(_published("moonshotai--Kimi-K2-Instruct"))
    assert perf._collectives(cost, Layout(tp=8)) == 2 * cost.layers
    assert perf._collectives(cost, Layout(tp=8, attn_dp=8)) == 2 * cost.layers  # attention TP 1: no all-reduce
    assert perf._collectives(cost, Layout(tp=8, attn_dp=4)) == 3 * cost.layers
    assert perf._collectives(cost, Layout(tp=1)) == 0


def test_a_sliding_window_layer_reads_its_window_not_the_context():
    # openai/gpt-oss-120b's published config.json (recorded): 36 layers alternating sliding (window
    # 128) and full attention, 8 KV heads of 64. A step at 8,192 tokens reads the full layers' KV of
    # every token and the sliding ones' of the last 128 alone; capacity counts the sliding pool at
    # SGLang's swa_full_tokens_ratio (0.8) of the full pool's tokens.
    from tests.recorded_facts import GPT_OSS_120B

    cost = model_cost(GPT_OSS_120B)
    layer = 8 * (64 + 64) * 2  # heads x (K + V) x bf16
    assert cost.kv_bytes_per_token == 18 * layer and cost.swa_kv_bytes_per_token == 18 * layer
    assert cost.sliding_window == 128
    one = Layout(tp=1)
    assert perf._kv_read_bytes(cost, one, 1, 8192) == 8192 * 18 * layer + 128 * 18 * layer
    assert perf._kv_read_bytes(cost, one, 1, 100) == 100 * 36 * layer  # within the window: every layer
    h100 = GpuPerf("H100", hbm_gbps=3350, bf16_tflops=989, memory_gib=80)
    without = dataclasses.replace(cost, swa_kv_bytes_per_token=0.0, sliding_window=0)
    assert capacity(cost, h100, one, 4096) < capacity(without, h100, one, 4096)
    assert model_cost(LLAMA_8B).swa_kv_bytes_per_token == 0


def test_keys_values_and_sliding_heads_of_their_own_widths_are_counted_as_sglang_sizes_them():
    # XiaomiMiMo/MiMo-V2-Flash's published config.json (recorded): keys 192 and values 128 wide, 9
    # full-attention layers of 4 KV heads, 39 sliding (window 128) of 8; bf16. The speed model's
    # per-token KV agrees with the planner's pool sizing (sizing.kv_cell, the sliding layers at 0.8).
    from sglang_deploy.plan.sizing import kv_cell

    facts = _published("XiaomiMiMo--MiMo-V2-Flash")
    cost = model_cost(facts)
    assert cost.kv_bytes_per_token == 4 * (192 + 128) * 2 * 9
    assert cost.swa_kv_bytes_per_token == 8 * (192 + 128) * 2 * 39 and cost.swa_kv_heads == 8
    assert cost.kv_bytes_per_token + 0.8 * cost.swa_kv_bytes_per_token == kv_cell(facts, 1).bytes_per_token


def test_sparse_attention_reads_the_latent_of_its_top_k_and_the_indexer_keys_of_every_token():
    # deepseek-ai/DeepSeek-V3.2's published config.json (recorded fixture): DeepSeek-R1's shapes plus
    # the indexer (index_n_heads 64, index_head_dim 128, index_topk 2048). Per layer the indexer adds
    # 1536 x 64 x 128 + 7168 x (128 + 64) = 13,959,168 parameters (dsa_indexer.py Indexer: wq_b, wk,
    # weights_proj); per token and layer its FP8 key with a float32 scale, 132 B. A decode step at
    # 32,768 tokens reads 2,048 tokens' latent and 32,768 tokens' indexer keys; within the top-k it
    # reads every token's latent, as a dense MLA model does.
    from sglang_deploy.simulator.facts_matrix import checkpoints

    facts = checkpoints()
    v32, r1 = model_cost(facts["deepseek-ai/DeepSeek-V3.2"]), model_cost(facts["deepseek-ai/DeepSeek-R1"])
    assert v32.attention_params - r1.attention_params == 13_959_168 * 61
    assert v32.active_params - r1.active_params == 13_959_168 * 61
    assert (v32.sparse_topk, v32.index_kv_bytes_per_token) == (2048, 132 * 61)
    assert (r1.sparse_topk, r1.index_kv_bytes_per_token) == (0, 0.0)
    latent = (512 + 64) * 2 * 61
    assert v32.kv_bytes_per_token == r1.kv_bytes_per_token == latent
    one = Layout(tp=8, attn_dp=8)
    assert perf._kv_read_bytes(v32, one, 1, 32768) == 2048 * latent + 32768 * 132 * 61
    assert perf._kv_read_bytes(v32, one, 1, 1000) == 1000 * (latent + 132 * 61)
    assert perf._kv_read_bytes(r1, one, 1, 32768) == 32768 * latent
    # the indexer's keys take pool memory beside the latent: fewer sequences held than R1's
    b200 = GpuPerf("B200", hbm_gbps=8000, bf16_tflops=2250, fp8_tflops=4500, memory_gib=180)
    assert capacity(v32, b200, one, 32768) < capacity(r1, b200, one, 32768)
    # at a long context and a large batch the sparse read is what decodes faster than dense MLA
    fast = predict(v32, b200, one, prompt_tokens=32768, output_tokens=1000, concurrency=(64,), fp8_weights=True)
    dense = predict(r1, b200, one, prompt_tokens=32768, output_tokens=1000, concurrency=(64,), fp8_weights=True)
    assert fast.output_tok_s[64].expected > dense.output_tok_s[64].expected
