"""Bounded readers of a checkpoint's config.json fields, and the bounds themselves (pure).

Every number that sizes a loop, a list or arithmetic is read through here: an absent, mistyped or
hostile value is refused with one line naming the model, the file and the field."""

from __future__ import annotations

from typing import Any, Mapping


class CheckpointError(ValueError):
    """A checkpoint's metadata is malformed or lacks a field the facts need. The message
    names the model and the field, in one line."""


# Upper bounds of the numbers that size loops, lists and arithmetic: far above any real
# checkpoint (DeepSeek-V3's config.json: 61 layers + 1 NextN layer, 256 routed experts, 128
# heads, hidden_size 7168, vocab 129280, 163840 positions; Llama-3.1-405B: 126 layers,
# hidden_size 16384, intermediate_size 53248; Gemma 3: vocab 262144), so a config past them is
# hostile or broken and refused with one line naming the field, before anything iterates over it.
MAX_LAYERS = 1024
MAX_HEADS = 4096
MAX_EXPERTS = 16384
MAX_WIDTH = 2 ** 20          # hidden, intermediate, head and latent sizes
MAX_POSITIONS = 2 ** 31      # max_position_embeddings, sliding_window
MAX_VOCAB = 2 ** 24
MAX_TOTAL_BYTES = 2 ** 50    # 1 PiB of weights (DeepSeek-V3 in FP8: about 0.7 TB)
LIMITS = {
    **dict.fromkeys(("num_hidden_layers", "num_nextn_predict_layers", "mtp_num_hidden_layers", "first_k_dense_replace",
                     "full_attention_interval"), MAX_LAYERS),
    **dict.fromkeys(("num_attention_heads", "num_key_value_heads", "swa_num_key_value_heads", "index_n_heads"),
                    MAX_HEADS),
    **dict.fromkeys(("n_routed_experts", "num_experts", "num_local_experts", "num_experts_per_tok",
                     "experts_per_token", "num_experts_per_token", "top_k_experts", "n_shared_experts"), MAX_EXPERTS),
    **dict.fromkeys(("hidden_size", "intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size",
                     "moe_shared_expert_intermediate_size", "head_dim", "kv_lora_rank", "qk_nope_head_dim",
                     "qk_rope_head_dim", "mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size",
                     "conv_kernel", "num_heads", "short_conv_kernel_size", "moe_latent_size",
                     "routed_expert_hidden_size", "v_head_dim", "swa_head_dim", "swa_v_head_dim", "index_head_dim"),
                    MAX_WIDTH),
    **dict.fromkeys(("max_position_embeddings", "sliding_window", "index_topk"), MAX_POSITIONS),
    "vocab_size": MAX_VOCAB,
    "total_size": MAX_TOTAL_BYTES,
}


def number(value: Any) -> str:
    """A number for a message (a huge one is not spelled out: str() of 10^5 digits raises)."""
    return str(value) if isinstance(value, int) and abs(value) < 10 ** 30 else "a larger number"


def shown(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return number(value)
    text = repr(value) if isinstance(value, (str, float, bool)) or value is None else type(value).__name__
    return text[:60]


def opt_int(model: str, where: str, config: Mapping[str, Any], key: str, minimum: int = 1) -> int | None:
    """``config[key]`` as a bounded integer, or None when it is absent or null."""
    value = config.get(key) if isinstance(config, Mapping) else None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"{model}: {where} {key} must be an integer, not {shown(value)}")
    if value < minimum:
        raise CheckpointError(f"{model}: {where} {key} must be at least {minimum}, not {number(value)}")
    if key in LIMITS and value > LIMITS[key]:
        raise CheckpointError(f"{model}: {where} {key} is {number(value)}, more than the {LIMITS[key]} accepted "
                              "(far above any real checkpoint)")
    return value


def req_int(model: str, where: str, config: Mapping[str, Any], key: str, minimum: int = 1) -> int:
    """``config[key]`` as a bounded integer the checkpoint must carry."""
    value = opt_int(model, where, config, key, minimum)
    if value is None:
        raise CheckpointError(f"{model}: {where} has no {key}")
    return value


def req_str(model: str, where: str, config: Mapping[str, Any], key: str) -> str:
    """``config[key]`` as a string the checkpoint must carry."""
    value = config.get(key) if isinstance(config, Mapping) else None
    if value is None:
        raise CheckpointError(f"{model}: {where} has no {key}")
    if not isinstance(value, str):
        raise CheckpointError(f"{model}: {where} {key} must be a string, not {shown(value)}")
    return value
