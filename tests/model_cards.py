"""Model facts written from published model cards and config.json files, for unit tests of
the model-facts layer and the constraint checker (the matrix test reads the recorded
checkpoints under sglang_deploy/simulator/hub/checkpoints/ through the real parser).

Sizes and shapes are the config.json values of each Hub repository; total_weight_bytes is
the safetensors index's metadata.total_size where noted, else the card's parameter count x
bytes per parameter (said so beside it).
"""

from __future__ import annotations

from sglang_deploy.modelfacts import ModelFacts, MoeFacts, QuantFacts


def _facts(model: str, **kw) -> ModelFacts:
    base = dict(model=model, revision="0" * 40, source="test card", dtype="bfloat16")
    base.update(kw)
    return ModelFacts(**base)


# meta-llama/Llama-3.3-70B-Instruct config.json; index metadata.total_size 141107412992.
LLAMA_70B = _facts("meta-llama/Llama-3.3-70B-Instruct", architectures=("LlamaForCausalLM",), model_type="llama",
                   total_weight_bytes=141_107_412_992, num_hidden_layers=80, hidden_size=8192,
                   num_attention_heads=64, num_key_value_heads=8, head_dim=128, intermediate_size=28672,
                   max_position_embeddings=131072, vocab_size=128256)

# Qwen/Qwen3-32B config.json; weights: 32.8B parameters (card) x 2 bytes.
QWEN3_32B = _facts("Qwen/Qwen3-32B", architectures=("Qwen3ForCausalLM",), model_type="qwen3",
                   total_weight_bytes=65_600_000_000, num_hidden_layers=64, hidden_size=5120,
                   num_attention_heads=64, num_key_value_heads=8, head_dim=128, intermediate_size=25600,
                   max_position_embeddings=40960, vocab_size=151936)

# Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 config.json (quantization_config: fp8, e4m3,
# weight_block_size [128, 128]); weights: 235B parameters (card) at ~1 byte + bf16 embeddings.
QWEN3_235B_FP8 = _facts("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", architectures=("Qwen3MoeForCausalLM",),
                        model_type="qwen3_moe", total_weight_bytes=236_000_000_000, num_hidden_layers=94,
                        hidden_size=4096, num_attention_heads=64, num_key_value_heads=4, head_dim=128,
                        intermediate_size=12288,
                        moe=MoeFacts(num_experts=128, experts_per_token=8, moe_intermediate_size=1536),
                        quantization=QuantFacts("fp8", "e4m3", (128, 128)),
                        max_position_embeddings=262144, vocab_size=151936)

# Qwen/Qwen3-30B-A3B config.json; weights: 30.5B parameters (card) x 2 bytes.
QWEN3_30B_A3B = _facts("Qwen/Qwen3-30B-A3B", architectures=("Qwen3MoeForCausalLM",), model_type="qwen3_moe",
                       total_weight_bytes=61_000_000_000, num_hidden_layers=48, hidden_size=2048,
                       num_attention_heads=32, num_key_value_heads=4, head_dim=128, intermediate_size=6144,
                       moe=MoeFacts(num_experts=128, experts_per_token=8, moe_intermediate_size=768),
                       max_position_embeddings=40960, vocab_size=151936)

# deepseek-ai/DeepSeek-V3 config.json (MLA: kv_lora_rank 512, qk_rope_head_dim 64;
# num_nextn_predict_layers 1; first_k_dense_replace 3; fp8 block [128, 128]);
# weights: 671B + 14B MTP parameters (card) at ~1 byte.
DEEPSEEK_V3 = _facts("deepseek-ai/DeepSeek-V3", architectures=("DeepseekV3ForCausalLM",), model_type="deepseek_v3",
                     total_weight_bytes=688_000_000_000, num_hidden_layers=61, hidden_size=7168,
                     num_attention_heads=128, num_key_value_heads=128, head_dim=192, intermediate_size=18432,
                     kv_lora_rank=512, qk_rope_head_dim=64,
                     moe=MoeFacts(num_experts=256, experts_per_token=8, moe_intermediate_size=2048,
                                  shared_experts=1, first_dense_layers=3),
                     quantization=QuantFacts("fp8", "e4m3", (128, 128)), mtp_layers=1,
                     max_position_embeddings=163840, vocab_size=129280)

# Qwen/Qwen3.6-27B config.json (text_config): 64 layers, 16 full-attention and 48 linear-attention
# (Gated DeltaNet), 24 heads / 4 KV heads of 256, 1 MTP layer, a vision tower;
# weights: 27B parameters + the vision tower (card) x 2 bytes.
QWEN36_27B = _facts("Qwen/Qwen3.6-27B", architectures=("Qwen3_5ForConditionalGeneration",), model_type="qwen3_5",
                    total_weight_bytes=55_600_000_000, num_hidden_layers=64, hidden_size=5120,
                    num_attention_heads=24, num_key_value_heads=4, head_dim=256, intermediate_size=17408,
                    mtp_layers=1, full_attention_layers=16, linear_attention_layers=48, vision=True,
                    max_position_embeddings=262144, vocab_size=248320)
