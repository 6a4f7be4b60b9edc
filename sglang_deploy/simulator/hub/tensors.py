"""A checkpoint's tensor list (name, safetensors dtype, shape), rebuilt from its ``config.json``.

The Hub stand-in records each checkpoint's real ``config.json``; where the real
``model.safetensors.index.json`` (its ``metadata.total_size``) was not found, the
total is derived here from the tensor shapes the config implies and the dtypes the
checkpoint stores, never guessed. Each family's layout follows the model's
``transformers`` modeling file and was checked against a recorded tensor listing
of the published checkpoint (tests/test_hub_checkpoints.py holds those recorded
counts and parameter totals). The provenance file next to each checkpoint says
which values are derived.

Block-wise FP8 (quant_method fp8 with weight_block_size) stores every quantized
Linear weight as one byte plus a ``weight_scale_inv`` of ceil(out/bn) x ceil(in/bk)
(sglang/srt/layers/quantization/fp8.py, Fp8LinearMethod.create_weights); the scale's
dtype is a per-checkpoint fact (float32 for DeepSeek-V3, bfloat16 for Qwen's FP8
releases, both from the recorded listings) passed in as ``scale_dtype``.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

Tensor = tuple[str, str, tuple[int, ...]]   # name, safetensors dtype, shape

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1, "I8": 1}


def nbytes(tensor: Tensor) -> int:
    return DTYPE_BYTES[tensor[1]] * math.prod(tensor[2])


def total_size(tensors: list[Tensor]) -> int:
    """What ``model.safetensors.index.json`` records as ``metadata.total_size``: the
    sum of the tensors' data bytes (huggingface_hub's save_torch_state_dict)."""
    return sum(nbytes(t) for t in tensors)


def parameters(tensors: list[Tensor]) -> int:
    return sum(math.prod(t[2]) for t in tensors)


class _Linear:
    """Emit a Linear weight, block-FP8 quantized unless the checkpoint leaves it in bf16."""

    def __init__(self, config: dict[str, Any], scale_dtype: str | None):
        quant = config.get("quantization_config") or {}
        self.block = tuple(quant["weight_block_size"]) if quant.get("quant_method") == "fp8" else None
        self.scale_dtype = scale_dtype

    def __call__(self, name: str, out: int, inp: int, quantized: bool = True) -> Iterator[Tensor]:
        if self.block and quantized:
            bn, bk = self.block
            yield f"{name}.weight", "F8_E4M3", (out, inp)
            yield f"{name}.weight_scale_inv", self.scale_dtype or "F32", (-(-out // bn), -(-inp // bk))
        else:
            yield f"{name}.weight", "BF16", (out, inp)


def _norm(name: str, size: int) -> Tensor:
    return f"{name}.weight", "BF16", (size,)


def _gqa(lin: _Linear, p: str, c: dict[str, Any], qk_norm: bool, q_mult: int = 1) -> Iterator[Tensor]:
    h, hd = c["hidden_size"], c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    yield from lin(f"{p}.q_proj", q_mult * heads * hd, h)
    yield from lin(f"{p}.k_proj", kv * hd, h)
    yield from lin(f"{p}.v_proj", kv * hd, h)
    yield from lin(f"{p}.o_proj", h, heads * hd)
    if qk_norm:
        yield _norm(f"{p}.q_norm", hd)
        yield _norm(f"{p}.k_norm", hd)


def _mlp(lin: _Linear, p: str, h: int, inter: int) -> Iterator[Tensor]:
    yield from lin(f"{p}.gate_proj", inter, h)
    yield from lin(f"{p}.up_proj", inter, h)
    yield from lin(f"{p}.down_proj", h, inter)


def _ends(c: dict[str, Any], prefix: str = "model") -> Iterator[Tensor]:
    yield f"{prefix}.embed_tokens.weight", "BF16", (c["vocab_size"], c["hidden_size"])
    yield _norm(f"{prefix}.norm", c["hidden_size"])
    yield "lm_head.weight", "BF16", (c["vocab_size"], c["hidden_size"])


def llama_like(c: dict[str, Any], scale_dtype: str | None = None) -> list[Tensor]:
    """llama, qwen3 (q_norm/k_norm), qwen3_moe (experts), mixtral (block_sparse_moe).

    Qwen3-0.6B stores lm_head.weight although tie_word_embeddings is true (its recorded
    listing has 311 tensors, lm_head included), so lm_head is always emitted."""
    lin, h, mt = _Linear(c, scale_dtype), c["hidden_size"], c["model_type"]
    out = list(_ends(c))
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out += [_norm(f"{p}.input_layernorm", h), _norm(f"{p}.post_attention_layernorm", h)]
        out += _gqa(lin, f"{p}.self_attn", c, qk_norm=mt.startswith("qwen3"))
        if mt == "mixtral":
            out.append((f"{p}.block_sparse_moe.gate.weight", "BF16", (c["num_local_experts"], h)))
            for e in range(c["num_local_experts"]):
                q = f"{p}.block_sparse_moe.experts.{e}"
                out += [*lin(f"{q}.w1", c["intermediate_size"], h), *lin(f"{q}.w2", h, c["intermediate_size"]),
                        *lin(f"{q}.w3", c["intermediate_size"], h)]
        elif mt == "qwen3_moe":
            out.append((f"{p}.mlp.gate.weight", "BF16", (c["num_experts"], h)))
            for e in range(c["num_experts"]):
                out += _mlp(lin, f"{p}.mlp.experts.{e}", h, c["moe_intermediate_size"])
        else:
            out += _mlp(lin, f"{p}.mlp", h, c["intermediate_size"])
    return out


def _deepseek_layer(lin: _Linear, c: dict[str, Any], i: int) -> Iterator[Tensor]:
    p, h = f"model.layers.{i}", c["hidden_size"]
    heads, qk = c["num_attention_heads"], c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    yield _norm(f"{p}.input_layernorm", h)
    yield _norm(f"{p}.post_attention_layernorm", h)
    a = f"{p}.self_attn"
    yield from lin(f"{a}.q_a_proj", c["q_lora_rank"], h)
    yield _norm(f"{a}.q_a_layernorm", c["q_lora_rank"])
    yield from lin(f"{a}.q_b_proj", heads * qk, c["q_lora_rank"])
    yield from lin(f"{a}.kv_a_proj_with_mqa", c["kv_lora_rank"] + c["qk_rope_head_dim"], h)
    yield _norm(f"{a}.kv_a_layernorm", c["kv_lora_rank"])
    yield from lin(f"{a}.kv_b_proj", heads * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"])
    yield from lin(f"{a}.o_proj", h, heads * c["v_head_dim"])
    if i < c["first_k_dense_replace"]:
        yield from _mlp(lin, f"{p}.mlp", h, c["intermediate_size"])
        return
    yield f"{p}.mlp.gate.weight", "BF16", (c["n_routed_experts"], h)
    yield f"{p}.mlp.gate.e_score_correction_bias", "F32", (c["n_routed_experts"],)
    for e in range(c["n_routed_experts"]):
        yield from _mlp(lin, f"{p}.mlp.experts.{e}", h, c["moe_intermediate_size"])
    yield from _mlp(lin, f"{p}.mlp.shared_experts", h, c["moe_intermediate_size"] * c["n_shared_experts"])


def deepseek_v3(c: dict[str, Any], scale_dtype: str | None = "F32") -> list[Tensor]:
    """DeepSeek-V3: MLA, dense first layers, routed + shared experts, and the NextN (MTP)
    layer stored as model.layers.{num_hidden_layers} with its own embedding and head."""
    lin, h, n = _Linear(c, scale_dtype), c["hidden_size"], c["num_hidden_layers"]
    out = list(_ends(c))
    for i in range(n + c.get("num_nextn_predict_layers", 0)):
        out += _deepseek_layer(lin, c, i)
    for i in range(n, n + c.get("num_nextn_predict_layers", 0)):
        p = f"model.layers.{i}"
        out += [(f"{p}.eh_proj.weight", "BF16", (h, 2 * h)), (f"{p}.embed_tokens.weight", "BF16", (c["vocab_size"], h)),
                _norm(f"{p}.enorm", h), _norm(f"{p}.hnorm", h),
                (f"{p}.shared_head.head.weight", "BF16", (c["vocab_size"], h)), _norm(f"{p}.shared_head.norm", h)]
    return out


def gpt_oss(c: dict[str, Any], scale_dtype: str | None = None) -> list[Tensor]:
    """gpt-oss: attention with biases and sinks in bf16; experts in MXFP4 as uint8 blocks
    (32 fp4 values in 16 bytes) with one uint8 scale per block, biases in bf16."""
    h, e, inter = c["hidden_size"], c["num_local_experts"], c["intermediate_size"]
    heads, kv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    out = list(_ends(c))
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out += [_norm(f"{p}.input_layernorm", h), _norm(f"{p}.post_attention_layernorm", h)]
        for proj, rows, cols in (("q_proj", heads * hd, h), ("k_proj", kv * hd, h), ("v_proj", kv * hd, h),
                                 ("o_proj", h, heads * hd)):
            out += [(f"{p}.self_attn.{proj}.weight", "BF16", (rows, cols)),
                    (f"{p}.self_attn.{proj}.bias", "BF16", (rows,))]
        out.append((f"{p}.self_attn.sinks", "BF16", (heads,)))
        out += [(f"{p}.mlp.router.weight", "BF16", (e, h)), (f"{p}.mlp.router.bias", "BF16", (e,))]
        x = f"{p}.mlp.experts"
        for proj, rows, cols in (("gate_up_proj", 2 * inter, h), ("down_proj", h, inter)):
            out += [(f"{x}.{proj}_blocks", "U8", (e, rows, cols // 32, 16)),
                    (f"{x}.{proj}_scales", "U8", (e, rows, cols // 32)),
                    (f"{x}.{proj}_bias", "BF16", (e, rows))]
    return out


def _vision(v: dict[str, Any]) -> Iterator[Tensor]:
    vh, vi, out_h = v["hidden_size"], v["intermediate_size"], v["out_hidden_size"]
    merged = vh * v["spatial_merge_size"] ** 2
    for b in range(v["depth"]):
        p = f"model.visual.blocks.{b}"
        for name, rows, cols in (("attn.qkv", 3 * vh, vh), ("attn.proj", vh, vh), ("mlp.linear_fc1", vi, vh),
                                 ("mlp.linear_fc2", vh, vi)):
            yield f"{p}.{name}.weight", "BF16", (rows, cols)
            yield f"{p}.{name}.bias", "BF16", (rows,)
        for norm in ("norm1", "norm2"):
            yield f"{p}.{norm}.weight", "BF16", (vh,)
            yield f"{p}.{norm}.bias", "BF16", (vh,)
    m = "model.visual.merger"
    yield from ((f"{m}.linear_fc1.weight", "BF16", (merged, merged)), (f"{m}.linear_fc1.bias", "BF16", (merged,)),
                (f"{m}.linear_fc2.weight", "BF16", (out_h, merged)), (f"{m}.linear_fc2.bias", "BF16", (out_h,)),
                (f"{m}.norm.weight", "BF16", (vh,)), (f"{m}.norm.bias", "BF16", (vh,)))
    yield "model.visual.patch_embed.proj.weight", "BF16", (vh, v["in_channels"], v["temporal_patch_size"],
                                                           v["patch_size"], v["patch_size"])
    yield "model.visual.patch_embed.proj.bias", "BF16", (vh,)
    yield "model.visual.pos_embed.weight", "BF16", (v["num_position_embeddings"], vh)


def _gated_delta(p: str, t: dict[str, Any]) -> Iterator[Tensor]:
    h, nk, nv = t["hidden_size"], t["linear_num_key_heads"], t["linear_num_value_heads"]
    dk, dv = t["linear_key_head_dim"], t["linear_value_head_dim"]
    conv = 2 * nk * dk + nv * dv
    yield from ((f"{p}.A_log", "BF16", (nv,)), (f"{p}.dt_bias", "BF16", (nv,)),
                (f"{p}.conv1d.weight", "BF16", (conv, 1, t["linear_conv_kernel_dim"])),
                (f"{p}.in_proj_a.weight", "BF16", (nv, h)), (f"{p}.in_proj_b.weight", "BF16", (nv, h)),
                (f"{p}.in_proj_qkv.weight", "BF16", (conv, h)), (f"{p}.in_proj_z.weight", "BF16", (nv * dv, h)),
                (f"{p}.norm.weight", "BF16", (dv,)), (f"{p}.out_proj.weight", "BF16", (h, nv * dv)))


def qwen3_5(c: dict[str, Any], scale_dtype: str | None = None) -> list[Tensor]:
    """Qwen3.5 / Qwen3.6 dense hybrid: Gated DeltaNet and gated full attention layers
    (q_proj twice wide for the output gate), a vision tower, and one MTP layer under mtp.*."""
    t, lin = c["text_config"], _Linear({}, None)
    h = t["hidden_size"]
    gate = 2 if t.get("attn_output_gate") else 1
    out = list(_ends(t, "model.language_model"))
    for i, kind in enumerate(t["layer_types"]):
        p = f"model.language_model.layers.{i}"
        out += [_norm(f"{p}.input_layernorm", h), _norm(f"{p}.post_attention_layernorm", h)]
        if kind == "linear_attention":
            out += _gated_delta(f"{p}.linear_attn", t)
        else:
            out += _gqa(lin, f"{p}.self_attn", t, True, gate)
        out += _mlp(lin, f"{p}.mlp", h, t["intermediate_size"])
    if "vision_config" in c:
        out += _vision(c["vision_config"])
    for j in range(t.get("mtp_num_hidden_layers", 0)):
        p = f"mtp.layers.{j}"
        out += [_norm(f"{p}.input_layernorm", h), _norm(f"{p}.post_attention_layernorm", h)]
        out += [*_gqa(lin, f"{p}.self_attn", t, True, gate), *_mlp(lin, f"{p}.mlp", h, t["intermediate_size"])]
    if t.get("mtp_num_hidden_layers", 0):
        out += [("mtp.fc.weight", "BF16", (h, 2 * h)), _norm("mtp.norm", h), _norm("mtp.pre_fc_norm_embedding", h),
                _norm("mtp.pre_fc_norm_hidden", h)]
    return out


FAMILIES = {"llama": llama_like, "qwen3": llama_like, "qwen3_moe": llama_like, "mixtral": llama_like,
            "deepseek_v3": deepseek_v3, "gpt_oss": gpt_oss, "qwen3_5": qwen3_5}


def tensors_for(config: dict[str, Any], scale_dtype: str | None = None) -> list[Tensor]:
    family = FAMILIES[config["model_type"]]
    return family(config, scale_dtype) if scale_dtype else family(config)
