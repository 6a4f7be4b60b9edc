"""What one family's config.json names its own way, read as SGLang reads it (pure): which layers hold
KV and which a recurrent state (NemotronH's layer pattern, Kimi Linear's KDA layers, MiMo-V2's
hybrid_layer_pattern, layer_types), NemotronH's Mamba2 widths, a nemotron-nas model's KV heads and blocks, and
the method SGLang runs a ModelOpt quantization with."""

from __future__ import annotations

from typing import Any, Mapping

from sglang_deploy.plan.config_fields import MAX_LAYERS, CheckpointError, opt_int, req_int


def nas_kv_heads(model: str, t: Mapping[str, Any], heads: int) -> int | None:
    """KV heads of a nemotron-nas (DeciLM) config.json, which names none: its attention heads over
    each block's n_heads_in_group, one figure for every block with attention, as SGLang reads it
    (configs/model_config.py get_total_num_kv_heads, 0.5.9 to 0.5.23: "Variable GQA (VGQA) is not
    yet supported for nemotron-nas"). None for any other model type."""
    if t.get("model_type") != "nemotron-nas":
        return None
    blocks = t.get("block_configs")
    if not isinstance(blocks, list) or not blocks or len(blocks) > MAX_LAYERS:
        raise CheckpointError(f"{model}: config.json block_configs must list the blocks (at most {MAX_LAYERS})")
    groups = set()
    for block in blocks:
        attention = block.get("attention") if isinstance(block, Mapping) else None
        if not isinstance(attention, Mapping) or attention.get("no_op") is True:
            continue
        group = attention.get("n_heads_in_group")
        if isinstance(group, bool) or not isinstance(group, int) or not 0 < group <= heads:
            raise CheckpointError(f"{model}: config.json block_configs attention.n_heads_in_group must be an "
                                  f"integer from 1 to {heads}")
        groups.add(heads // group)
    if len(groups) != 1:
        raise CheckpointError(f"{model}: config.json block_configs give {len(groups)} KV head counts; SGLang "
                              "serves nemotron-nas with one (variable GQA is not supported)")
    return groups.pop()


#: The widest FFN multiplier a nemotron-nas block is read with (published blocks: 0.5 to 5.25).
MAX_FFN_MULT = 64.0


def nas_blocks(model: str, t: Mapping[str, Any], hidden: int) -> dict[str, int] | None:
    """A nemotron-nas (DeciLM) model's layers as SGLang builds them (srt/models/nemotron_nas.py
    DeciLMDecoderLayer, 0.5.9 to 0.5.23): attention unless the block's attention is a no-op, an MLP
    unless its FFN is, of _ffn_mult_to_intermediate_size(ffn_mult, hidden_size) = int(2 * ffn_mult
    * hidden / 3) rounded up to a multiple of 256. {"attention": layers with attention,
    "mlp_intermediate": the MLPs' intermediate sizes summed}; None for any other model type."""
    if t.get("model_type") != "nemotron-nas":
        return None
    blocks = t.get("block_configs")
    if not isinstance(blocks, list) or not blocks or len(blocks) > MAX_LAYERS:
        raise CheckpointError(f"{model}: config.json block_configs must list the blocks (at most {MAX_LAYERS})")
    attention = intermediate = 0
    for block in blocks:
        attn = block.get("attention") if isinstance(block, Mapping) else None
        ffn = block.get("ffn") if isinstance(block, Mapping) else None
        if not isinstance(attn, Mapping) or not isinstance(ffn, Mapping):
            raise CheckpointError(f"{model}: config.json block_configs: each block needs attention and ffn mappings")
        attention += attn.get("no_op") is not True
        if ffn.get("no_op") is True:
            continue
        mult = ffn.get("ffn_mult")
        if isinstance(mult, bool) or not isinstance(mult, (int, float)) or not 0 < mult <= MAX_FFN_MULT:
            raise CheckpointError(f"{model}: config.json block_configs ffn.ffn_mult must be a number above 0 and "
                                  f"at most {MAX_FFN_MULT:g}")
        size = int(2 * mult * hidden / 3)
        intermediate += size if size % 256 == 0 else size + 256 - size % 256
    return {"attention": attention, "mlp_intermediate": intermediate}


def modelopt_method(q: Mapping[str, Any]) -> str | None:
    """The method SGLang runs a ModelOpt (NVIDIA) quantization_config with: no quant_method, or
    "modelopt", and a quant_algo (configs/model_config.py ModelConfig._parse_modelopt_quant_config,
    0.5.19 and 0.5.23): MIXED_PRECISION with NVFP4 layers modelopt_mixed, else w4afp8; an FP4 or
    NVFP4 algorithm modelopt_fp4; FP8 modelopt_fp8; MXFP8 mxfp8. None: no algorithm SGLang maps.
    (0.5.9 and 0.5.15 map any algorithm containing FP8 to modelopt_fp8, and 0.5.9 MIXED_PRECISION
    to w4afp8: modelfacts.QuantFacts.method_at.)"""
    algo = q.get("quant_algo")
    if not isinstance(algo, str):
        return None
    if algo == "MIXED_PRECISION":
        layers = q.get("quantized_layers")
        nvfp4 = isinstance(layers, Mapping) and any(
            isinstance(v, Mapping) and str(v.get("quant_algo", "")).upper() in ("NVFP4", "W4A16_NVFP4")
            for v in layers.values())
        return "modelopt_mixed" if nvfp4 else "w4afp8"
    if "FP4" in algo:
        return "modelopt_fp4"
    return {"FP8": "modelopt_fp8", "MXFP8": "mxfp8"}.get(algo)


def layer_kinds(model: str, t: Mapping[str, Any], layers: int) -> tuple[int | None, int, int]:
    """(layers with a full KV cache or None for all, linear-attention layers, sliding-window layers).

    Hybrid Qwen3-Next / Qwen3.5 name each layer in ``layer_types`` (linear_attention or
    full_attention) or give ``full_attention_interval`` (sglang/srt/configs/qwen3_next.py
    layers_block_type); gpt-oss names sliding_attention layers the same way. Hybrid Mamba2 /
    attention NemotronH: :func:`_nemotron_h_kinds`."""
    if t.get("model_type") == "nemotron_h":
        return _nemotron_h_kinds(model, t, layers)
    if t.get("linear_attn_config") is not None:
        kda = len(_kda_layers(model, t, layers))
        return layers - kda, kda, 0
    pattern = t.get("hybrid_layer_pattern")
    if pattern is not None:
        # MiMo-V2 (and SGLang's generic hybrid-SWA fallback): 1 a sliding-window layer, 0 a full one
        # (configs/model_config.py get_hybrid_layer_ids, MIMO_V2_MODEL_ARCHS; 0.5.9 to 0.5.23)
        if (not isinstance(pattern, list) or len(pattern) != layers
                or not all(k in (0, 1) and not isinstance(k, bool) for k in pattern)):
            raise CheckpointError(f"{model}: config.json hybrid_layer_pattern must list 0 or 1 per layer ({layers})")
        return pattern.count(0), 0, pattern.count(1)
    kinds = t.get("layer_types")
    if kinds is not None:
        if not isinstance(kinds, list) or len(kinds) != layers or not all(isinstance(k, str) for k in kinds):
            raise CheckpointError(f"{model}: config.json layer_types must list one name per layer ({layers})")
        linear = sum(k == "linear_attention" for k in kinds)
        sliding = sum(k == "sliding_attention" for k in kinds)
        full = sum(k == "full_attention" for k in kinds)
        return (full if linear or sliding else None), linear, sliding
    interval = opt_int(model, "config.json", t, "full_attention_interval")
    if interval is not None:
        full = sum((i + 1) % interval == 0 for i in range(layers))
        return full, layers - full, 0
    return None, 0, 0


def _kda_layers(model: str, t: Mapping[str, Any], layers: int) -> set[int]:
    """The Kimi Delta Attention layers of a Kimi Linear text config (Kimi-Linear, Kimi-K3), 0-based,
    as SGLang reads them (configs/kimi_linear.py KimiLinearConfig.is_kda_layer: layer i is KDA when
    i + 1 is in linear_attn_config.kda_layers; every other layer is full attention,
    full_attention_layer_ids, the only layers with a KV cache; 0.5.9 to 0.5.23)."""
    cfg = t.get("linear_attn_config")
    listed = cfg.get("kda_layers") if isinstance(cfg, Mapping) else None
    if (not isinstance(listed, list) or len(listed) > MAX_LAYERS
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in listed)):
        raise CheckpointError(f"{model}: config.json linear_attn_config.kda_layers must be a list of layer "
                              f"numbers (at most {MAX_LAYERS})")
    return {i - 1 for i in listed if 1 <= i <= layers}


def kda_shape(model: str, t: Mapping[str, Any]) -> dict[str, int]:
    """A Kimi Linear KDA layer's widths, as SGLang sizes its state from them
    (configs/kimi_linear.py mamba2_cache_params -> configs/mamba_utils.py KimiLinearStateShape.create)."""
    cfg = t["linear_attn_config"]
    where = "config.json linear_attn_config"
    return {"num_heads": req_int(model, where, cfg, "num_heads"), "head_dim": req_int(model, where, cfg, "head_dim"),
            "short_conv_kernel_size": req_int(model, where, cfg, "short_conv_kernel_size")}


def layer_count(model: str, t: Mapping[str, Any]) -> int:
    """num_hidden_layers. NemotronH's config.json may leave it out from 0.5.15's NemotronHConfig on,
    which counts layers_block_type instead (configs/nemotron_h.py: num_hidden_layers "deprecated,
    only for backward compatibility", its property len(layers_block_type); NVIDIA-Nemotron-3-Ultra
    publishes no num_hidden_layers)."""
    blocks = t.get("layers_block_type")
    if t.get("num_hidden_layers") is None and t.get("model_type") == "nemotron_h" and isinstance(blocks, list):
        if not 1 <= len(blocks) <= MAX_LAYERS:
            raise CheckpointError(f"{model}: config.json layers_block_type must name 1 to {MAX_LAYERS} layers")
        return len(blocks)
    return req_int(model, "config.json", t, "num_hidden_layers")


#: NemotronH's layer kinds, as SGLang reads them (configs/nemotron_h.py NemotronHConfig:
#: hybrid_override_pattern, one character per layer, M Mamba2, * attention, - MLP, E MoE; 0.5.15 on
#: also layers_block_type, a list of mamba / attention / mlp / moe that wins over the pattern,
#: _resolve_layers_block_type). Only the attention layers hold per-token KV
#: (full_attention_layer_ids); the Mamba2 layers keep a per-request state (mamba_layer_ids, the
#: mamba2_cache_params SGLang splits memory with, configs/hybrid_arch.py mamba2_config in 0.5.19 and
#: 0.5.23, model_executor/model_runner.py ModelRunner.mamba2_config in 0.5.9 and 0.5.15).
NEMOTRON_H_KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


def _nemotron_h_blocks(model: str, t: Mapping[str, Any], layers: int) -> list[str]:
    """Each layer's kind (NEMOTRON_H_KINDS' names) of a NemotronH config.json."""
    kinds = t.get("layers_block_type")
    if kinds is None:
        pattern = t.get("hybrid_override_pattern")
        if not isinstance(pattern, str) or len(pattern) > MAX_LAYERS or not set(pattern) <= set(NEMOTRON_H_KINDS):
            raise CheckpointError(f"{model}: config.json hybrid_override_pattern must be a string of M, *, - and E, "
                                  "one per layer")
        kinds = [NEMOTRON_H_KINDS[c] for c in pattern]
    if (not isinstance(kinds, list) or len(kinds) != layers
            or not all(isinstance(k, str) and k in NEMOTRON_H_KINDS.values() for k in kinds)):
        raise CheckpointError(f"{model}: config.json's NemotronH layer pattern must name one of mamba, attention, "
                              f"mlp and moe per layer ({layers})")
    return kinds


def _nemotron_h_kinds(model: str, t: Mapping[str, Any], layers: int) -> tuple[int | None, int, int]:
    """(attention layers, Mamba2 layers, 0) of a NemotronH config.json (NEMOTRON_H_KINDS)."""
    kinds = _nemotron_h_blocks(model, t, layers)
    return sum(k == "attention" for k in kinds), sum(k == "mamba" for k in kinds), 0


def nemotron_h_shapes(model: str, t: Mapping[str, Any], layers: int) -> dict[str, Any]:
    """What the speed model counts a NemotronH's parameters from (plan/perf.py model_cost): its
    layers of each kind, and its Mamba2 mixers' widths as SGLang builds them (srt/models/nemotron_h.py
    NemotronHMambaDecoderLayer -> srt/layers/attention/mamba/mamba.py MambaMixer2, with
    configs/nemotron_h.py mamba2_cache_params: intermediate = mamba_num_heads x mamba_head_dim)."""
    kinds = _nemotron_h_blocks(model, t, layers)
    w = "config.json"
    mamba = {k: opt_int(model, w, t, k) for k in ("mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size",
                                                   "conv_kernel")}
    shapes: dict[str, Any] = {"layer_kinds": {k: kinds.count(k) for k in NEMOTRON_H_KINDS.values()}}
    if all(v is not None for v in mamba.values()):  # else the mixers are not counted (said by model_cost)
        shapes["mamba"] = mamba
    return shapes
