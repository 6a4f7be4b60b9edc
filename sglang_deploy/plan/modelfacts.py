"""A checkpoint's metadata as typed model facts: what the planner sizes and checks against.

Pure: the I/O that fetches ``config.json``, the safetensors index,
``tokenizer_config.json`` and ``generation_config.json`` (a local directory, the Hub, the controller's cache)
lives in glue (``sglang_deploy/deploy/model_metadata.py``); this module only reads the dicts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from sglang_deploy.plan.config_fields import (MAX_POSITIONS, MAX_TOTAL_BYTES, MAX_WIDTH,
                                              number, opt_int, req_int, req_str, shown)
from sglang_deploy.plan.config_fields import CheckpointError as CheckpointError  # its readers raise it here
from sglang_deploy.plan.family_layers import (kda_shape, layer_count, layer_kinds, modelopt_method, nas_blocks,
                                              nas_kv_heads, nemotron_h_shapes)


@dataclass(frozen=True)
class MoeFacts:
    num_experts: int                 # routed experts
    experts_per_token: int
    moe_intermediate_size: int       # per expert
    shared_experts: int = 0
    first_dense_layers: int = 0      # leading layers with a dense MLP (DeepSeek's first_k_dense_replace)
    shared_expert_intermediate_size: int | None = None   # Qwen2-MoE style shared expert width


@dataclass(frozen=True)
class QuantFacts:
    method: str                                # quantization_config.quant_method: fp8, mxfp4, awq, ...
    fmt: str | None = None                     # e.g. "e4m3", "float-quantized"
    weight_block_size: tuple[int, int] | None = None   # (block_n, block_k) of block-wise FP8
    modules_not_converted: tuple[str, ...] = ()
    # the KV cache's quantization the checkpoint names, e.g. "FP8"; None where it names none (ModelOpt:
    # hf_quant_config.json's kv_cache_quant_algo or config.json's kv_cache_scheme; fp8: its
    # kv_cache_quant_algo; compressed-tensors: a static per-tensor FP8 kv_cache_scheme)
    kv_cache_quant_algo: str | None = None
    # a ModelOpt checkpoint's quant_algo, which releases before 0.5.19 map to a method their own way
    modelopt_algo: str | None = None

    def method_at(self, release: tuple[int, ...]) -> str:
        """The method SGLang ``release`` runs the checkpoint with. ``method`` is 0.5.19's and 0.5.23's;
        before, ModelConfig._parse_modelopt_quant_config (configs/model_config.py) maps any quant_algo
        containing FP8 to modelopt_fp8 (MXFP8 too), and 0.5.9 maps MIXED_PRECISION to w4afp8 whatever
        its layers (0.5.15 modelopt_mixed with NVFP4 layers, as later)."""
        algo = self.modelopt_algo
        if algo is None or release >= (0, 5, 19):
            return self.method
        if algo == "MIXED_PRECISION":
            return "w4afp8" if release < (0, 5, 15) else self.method
        if "FP4" in algo:
            return "modelopt_fp4"
        return "modelopt_fp8" if "FP8" in algo else self.method


@dataclass(frozen=True)
class AutoMap:
    """Classes a metadata file names in its ``auto_map``: code of the model's own repository.

    ``own_tokenizer`` (tokenizer_config.json): the declared ``tokenizer_class`` is one of the
    auto_map's classes, so no transformers class stands in for it and AutoTokenizer refuses it
    without trust_remote_code (sglang srt/utils/hf_transformers/tokenizer.py
    _auto_tokenizer_from_pretrained: "consider ... the `--trust-remote-code` flag")."""

    file: str                        # config.json | tokenizer_config.json
    classes: tuple[str, ...]         # "module.Class" references, as the file names them
    own_tokenizer: bool = False


@dataclass(frozen=True)
class ModelFacts:
    """What the checkpoint says about itself. ``None`` where the checkpoint is silent."""

    model: str                        # the id or path the server loads
    revision: str | None              # resolved commit (Hub) or None for a local directory
    source: str                       # where the facts came from, in words (directory, hub, cache)
    architectures: tuple[str, ...]
    model_type: str
    dtype: str | None                 # torch_dtype / dtype of the weights ("bfloat16", ...)
    total_weight_bytes: int | None    # index metadata.total_size, else the safetensors headers
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int | None = None
    kv_lora_rank: int | None = None          # MLA (DeepSeek): the compressed KV rank
    qk_rope_head_dim: int | None = None      # MLA: the decoupled RoPE part, cached beside the latent
    moe: MoeFacts | None = None
    quantization: QuantFacts | None = None
    mtp_layers: int = 0                      # MTP / NextN draft layers carried by the checkpoint
    full_attention_layers: int | None = None  # hybrid models: layers with a KV cache (None: all of them)
    linear_attention_layers: int = 0          # hybrid models: linear-attention (state, no KV) layers
    sliding_window_layers: int = 0            # layers whose attention is a sliding window
    sliding_window: int | None = None
    vision: bool = False                      # a vision tower ships in the checkpoint
    # vision_config's num_hidden_layers / hidden_size, as SGLang reads them to size the tower's
    # memory (None: the key is absent, SGLang then counts 24 / 1024: sizing.vlm_fraction)
    vision_layers: int | None = None
    vision_hidden_size: int | None = None
    max_position_embeddings: int | None = None
    # The longest context SGLang accepts without SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN, derived
    # as it derives it (context_length_as_sglang); None: facts built without it (max positions then).
    derived_context_length: int | None = None
    vocab_size: int | None = None
    auto_maps: tuple[AutoMap, ...] = ()       # config.json / tokenizer_config.json auto_map (remote code)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def context_limit(self) -> int | None:
        """The context SGLang derives from the config (see ``derived_context_length``)."""
        return self.derived_context_length if self.derived_context_length is not None else self.max_position_embeddings

    @property
    def kv_layers(self) -> int:
        """Layers that hold per-token KV in SGLang's full pool: the full-attention layers a hybrid
        names, else every layer but those its config names linear or sliding (none, when it names
        no kinds)."""
        if self.full_attention_layers is not None:
            return self.full_attention_layers
        return self.num_hidden_layers - self.linear_attention_layers - self.sliding_window_layers

    @property
    def context_limit_source(self) -> str:
        """What the limit is, for messages."""
        if self.derived_context_length is None or self.derived_context_length == self.max_position_embeddings:
            return "max_position_embeddings"
        return "context length SGLang derives from its config (positions key times rope_scaling factor)"

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def architecture(self) -> str | None:
        """The architecture SGLang loads: config.json's first (None when it names none)."""
        return self.architectures[0] if self.architectures else None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FactsUnavailable:
    """No source answered for the model: the plan says why in one line and falls back to
    the model profile (it never guesses sizes)."""

    model: str
    reason: str
    #: The inventory key at fault when the data itself is wrong (a ``sglang_model_dir`` that is
    #: not a readable checkpoint): the plan refuses, naming it, instead of falling back.
    field: str | None = None


#: What the glue hands the planner for one host: the facts, or why there are none.
FactsLookup = ModelFacts | FactsUnavailable


#: The keys SGLang reads a model's context length from, first present wins (sglang
#: srt/utils/hf_transformers/common.py CONTEXT_LENGTH_KEYS, 0.5.15-0.5.23; 0.5.9:
#: srt/utils/hf_transformers_utils.py), and its default when none is present.
CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length",
                       "max_position_embeddings")
SGLANG_DEFAULT_CONTEXT = 2048
MAX_ROPE_FACTOR = 1024.0


def context_length_as_sglang(model: str, where: str, text_config: Mapping[str, Any]) -> int:
    """The context length SGLang derives from the (text) config, as sglang
    srt/utils/hf_transformers/common.py ``get_context_length`` does: the first of
    CONTEXT_LENGTH_KEYS times ``rope_scaling.factor``, unless rope_scaling names
    ``original_max_position_embeddings`` or ``rope_type: llama3`` (factor 1 then); 2048 when
    no key is present. ModelConfig._derive_context_length refuses a longer --context-length."""
    factor: float = 1.0
    rope = text_config.get("rope_scaling")
    if isinstance(rope, Mapping) and rope:
        raw = rope.get("factor", 1)
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0 < raw <= MAX_ROPE_FACTOR:
            raise CheckpointError(f"{model}: {where} rope_scaling.factor must be a number in (0, "
                                  f"{MAX_ROPE_FACTOR:g}], not {shown(raw)}")
        factor = float(raw)
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1.0
    for key in CONTEXT_LENGTH_KEYS:
        value = text_config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_POSITIONS:
            raise CheckpointError(f"{model}: {where} {key} must be an integer from 1 to {MAX_POSITIONS}, "
                                  f"not {shown(value)}")
        return int(factor * value)
    return SGLANG_DEFAULT_CONTEXT


def text_config(model: str, config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's config, as SGLang reads it (sglang/srt/configs/model_config.py,
    get_hf_text_config): a multimodal checkpoint nests it under ``text_config``."""
    if not isinstance(config, Mapping):
        raise CheckpointError(f"{model}: config.json is not a JSON object")
    nested = config.get("text_config")
    if nested is None:
        return config
    if not isinstance(nested, Mapping):
        raise CheckpointError(f"{model}: config.json text_config is not an object")
    return nested


def _moe(model: str, t: Mapping[str, Any]) -> MoeFacts | None:
    """Routed experts under each family's name: num_experts (Qwen MoE), num_local_experts
    (Mixtral, gpt-oss), n_routed_experts (DeepSeek, GLM-4.5) - SGLang's model files
    (qwen3_moe.py, mixtral.py, gpt_oss.py, deepseek_v2.py, glm4_moe.py) read the same keys."""
    key = next((k for k in ("n_routed_experts", "num_experts", "num_local_experts") if t.get(k) is not None), None)
    if key is None:
        return None
    w = "config.json"
    experts = req_int(model, w, t, key)
    # Experts per token: num_experts_per_tok (most families), top_k_experts (Gemma 4: sglang
    # srt/models/gemma4_causal.py Gemma4MoE reads config.top_k_experts), num_experts_per_token
    # (Kimi Linear and Kimi-K3's text model: configs/kimi_linear.py KimiLinearConfig, whose
    # attribute_map reads num_experts_per_tok as it), experts_per_token (gpt-oss).
    per_token = (opt_int(model, w, t, "num_experts_per_tok") or opt_int(model, w, t, "top_k_experts")
                 or opt_int(model, w, t, "num_experts_per_token") or req_int(model, w, t, "experts_per_token"))
    inter = t.get("moe_intermediate_size")
    inter = req_int(model, w, t, "moe_intermediate_size" if inter is not None else "intermediate_size")
    # 0 means no shared expert, as SGLang reads it (models/qwen2_moe.py Qwen2MoeSparseMoeBlock:
    # a shared expert only when shared_expert_intermediate_size > 0; Qwen3-Coder-480B-A35B
    # publishes 0); an absent first_k_dense_replace means no leading dense layer.
    shared_size = opt_int(model, w, t, "shared_expert_intermediate_size", minimum=0) or None
    shared = opt_int(model, w, t, "n_shared_experts", minimum=0)
    # NemotronH: the shared experts are one MLP of moe_shared_expert_intermediate_size x
    # n_shared_experts (srt/models/nemotron_h.py NemotronHMoE, 0.5.9 to 0.5.23)
    per_shared = opt_int(model, w, t, "moe_shared_expert_intermediate_size", minimum=0)
    if shared_size is None and per_shared and shared:
        shared_size = per_shared * shared
    return MoeFacts(num_experts=experts, experts_per_token=per_token, moe_intermediate_size=inter,
                    shared_experts=shared if shared is not None else (1 if shared_size else 0),
                    first_dense_layers=opt_int(model, w, t, "first_k_dense_replace", minimum=0) or 0,
                    shared_expert_intermediate_size=shared_size)


def _quant(model: str, config: Mapping[str, Any], t: Mapping[str, Any],
           hf_quant: Mapping[str, Any] | None = None) -> QuantFacts | None:
    q = config.get("quantization_config", t.get("quantization_config"))
    if q is None and isinstance(hf_quant, Mapping):
        # A ModelOpt export names its quantization in hf_quant_config.json, {"quantization": {...}},
        # which SGLang reads where config.json has none (configs/model_config.py
        # ModelConfig._parse_quant_hf_config); an algorithm it maps to no method leaves it unquantized.
        inner = hf_quant.get("quantization", hf_quant)
        method = modelopt_method(inner) if isinstance(inner, Mapping) else None
        if method is None:
            return None
        excluded = inner.get("exclude_modules")
        return QuantFacts(method=method, modules_not_converted=tuple(m for m in excluded if isinstance(m, str))
                          if isinstance(excluded, list) else (), kv_cache_quant_algo=_kv_quant(inner),
                          modelopt_algo=_short(inner.get("quant_algo")))
    if q is None:
        return None
    if not isinstance(q, Mapping):
        raise CheckpointError(f"{model}: config.json quantization_config is not an object")
    raw = q.get("quant_method")
    method = modelopt_method(q) if raw in (None, "modelopt") else None
    method = method or req_str(model, "quantization_config", q, "quant_method")
    block = q.get("weight_block_size")
    if block is not None:
        if (not isinstance(block, (list, tuple)) or len(block) != 2
                or not all(isinstance(b, int) and not isinstance(b, bool) and 0 < b <= MAX_WIDTH for b in block)):
            raise CheckpointError(f"{model}: quantization_config weight_block_size must be two positive integers")
        block = (block[0], block[1])
    # fp8 names what it skips modules_to_not_convert, compressed-tensors `ignore`, others
    # ignored_layers (sglang/srt/layers/quantization/fp8.py Fp8Config.from_config).
    skipped: object = next((q[k] for k in ("modules_to_not_convert", "ignored_layers", "ignore")
                            if q.get(k) is not None), [])
    if not isinstance(skipped, list) or not all(isinstance(m, str) for m in skipped):
        raise CheckpointError(f"{model}: quantization_config modules_to_not_convert must be a list of names")
    fmt = q.get("fmt", q.get("format"))
    return QuantFacts(method=method, fmt=fmt if isinstance(fmt, str) else None, weight_block_size=block,
                      modules_not_converted=tuple(skipped), kv_cache_quant_algo=_kv_quant_of(method, q),
                      modelopt_algo=_short(q.get("quant_algo")) if raw in (None, "modelopt") else None)


def _kv_quant_of(method: str, q: Mapping[str, Any]) -> str | None:
    """The KV cache quantization a config.json quantization_config of ``method`` names."""
    if method.startswith("modelopt"):
        return _kv_quant(q)
    if method == "compressed-tensors":
        return _ct_kv_quant(q)
    if method == "fp8":
        return _short(q.get("kv_cache_quant_algo"))
    return None


def _kv_quant(q: Mapping[str, Any]) -> str | None:
    """The KV cache quantization a ModelOpt config names, as SGLang's ModelOpt configs read it
    (layers/quantization/modelopt_quant.py ModelOptFp8Config and ModelOptFp4Config from_config,
    0.5.9 to 0.5.23): a kv_cache_scheme of 8-bit floats is FP8 and of 4-bit floats NVFP4 (0.5.23;
    0.5.9 reads any other scheme as "auto"), any other scheme "auto"; else the kv_cache_quant_algo
    string. None where neither is given or it is not a short name."""
    scheme = q.get("kv_cache_scheme")
    if isinstance(scheme, Mapping):
        if scheme.get("type") == "float" and scheme.get("num_bits") in (8, 4):
            return "FP8" if scheme.get("num_bits") == 8 else "NVFP4"
        return "auto"
    return _short(q.get("kv_cache_quant_algo"))


def _short(algo: Any) -> str | None:
    return algo if isinstance(algo, str) and 0 < len(algo) <= 16 and algo.isprintable() else None


def _ct_kv_quant(q: Mapping[str, Any]) -> str | None:
    """A compressed-tensors config's KV cache, as 0.5.19 and 0.5.23 read it
    (layers/quantization/compressed_tensors/compressed_tensors.py CompressedTensorsConfig.kv_cache_quant_algo:
    "FP8" where CompressedTensorsKVCacheMethod.is_supported_scheme takes its kv_cache_scheme: static,
    symmetric, per-tensor 8-bit floats); None otherwise."""
    s = q.get("kv_cache_scheme")
    if (isinstance(s, Mapping) and s.get("type") == "float" and s.get("num_bits") == 8 and s.get("strategy") == "tensor"
            and s.get("symmetric", True) and not s.get("dynamic", False)):
        return "FP8"
    return None


def _total_bytes(model: str, index: Mapping[str, Any] | None, header_sizes: Any) -> int | None:
    if index is not None:
        meta = index.get("metadata") if isinstance(index, Mapping) else None
        if not isinstance(meta, Mapping):
            raise CheckpointError(f"{model}: model.safetensors.index.json has no metadata")
        return req_int(model, "model.safetensors.index.json metadata", meta, "total_size")
    if header_sizes:
        given: list[object] = list(header_sizes)
        sizes = [s for s in given if isinstance(s, int) and not isinstance(s, bool) and s >= 0]
        if len(sizes) != len(given):
            raise CheckpointError(f"{model}: safetensors header sizes must be non-negative integers")
        total = sum(sizes)
        if total > MAX_TOTAL_BYTES:
            raise CheckpointError(f"{model}: the safetensors headers describe {number(total)} bytes, more than the "
                                  f"{MAX_TOTAL_BYTES} accepted")
        return total
    return None


def _mtp_layers(model: str, t: Mapping[str, Any]) -> int:
    """Draft layers the checkpoint carries: DeepSeek-V3 / GLM-4.5 num_nextn_predict_layers,
    Qwen3-Next / Qwen3.5 mtp_num_hidden_layers (SGLang's EAGLE/NEXTN draft models
    deepseek_nextn.py, glm4_moe_nextn.py, qwen3_5_mtp.py load them)."""
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        value = opt_int(model, "config.json", t, key, minimum=0)
        if value:
            return value
    return 0


MAX_AUTO_MAP = 64          # entries of one auto_map
MAX_CLASS_REF = 256        # characters of one "module.Class" reference


def _class_refs(model: str, where: str, value: Any) -> list[str]:
    """One auto_map value: "module.Class", or a list of them (AutoTokenizer: [slow, fast], null allowed)."""
    items = value if isinstance(value, list) else [value]
    if len(items) > 4:
        raise CheckpointError(f"{model}: {where} auto_map entry lists more than 4 classes")
    out = []
    for item in items:
        if item is None:
            continue
        if not isinstance(item, str) or not item or len(item) > MAX_CLASS_REF:
            raise CheckpointError(f"{model}: {where} auto_map values must be class references "
                                  f"(\"module.Class\", at most {MAX_CLASS_REF} characters), not {shown(item)}")
        out.append(item)
    return out


def auto_map(model: str, where: str, data: Mapping[str, Any] | None) -> AutoMap | None:
    """The classes ``data``'s ``auto_map`` names (None: it names none)."""
    if not isinstance(data, Mapping):
        return None
    raw = data.get("auto_map")
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or len(raw) > MAX_AUTO_MAP:
        raise CheckpointError(f"{model}: {where} auto_map must be an object of at most {MAX_AUTO_MAP} entries")
    refs = [ref for key in sorted(raw, key=str) for ref in _class_refs(model, where, raw[key])]
    if not refs:
        return None
    own = False
    if where == "tokenizer_config.json":
        declared = data.get("tokenizer_class")
        tok_refs = _class_refs(model, where, raw.get("AutoTokenizer")) if raw.get("AutoTokenizer") else []
        names = {r.rsplit(".", 1)[-1] for r in tok_refs}
        own = bool(tok_refs) and (declared is None or (isinstance(declared, str) and declared in names))
    return AutoMap(file=where, classes=tuple(dict.fromkeys(refs)), own_tokenizer=own)


def _vision_int(model: str, config: Mapping[str, Any], key: str) -> int | None:
    """A vision_config size key, validated like the text model's (None: no vision_config or no key)."""
    vision = config.get("vision_config")
    if not isinstance(vision, Mapping):
        return None
    return opt_int(model, "config.json vision_config", vision, key)


def facts_from_metadata(model: str, revision: str | None, source: str, config: Mapping[str, Any],
                        index: Mapping[str, Any] | None = None, generation_config: Mapping[str, Any] | None = None,
                        safetensors_header_sizes: Any = None,
                        tokenizer_config: Mapping[str, Any] | None = None,
                        hf_quant_config: Mapping[str, Any] | None = None) -> ModelFacts:
    """Turn a checkpoint's metadata files into facts; raise CheckpointError naming the field."""
    t = text_config(model, config)
    w = "config.json"
    layers = layer_count(model, t)
    hidden = req_int(model, w, t, "hidden_size")
    heads = req_int(model, w, t, "num_attention_heads")
    # sglang/srt/configs/model_config.py get_total_num_kv_heads: falls back to the heads.
    kv = nas_kv_heads(model, t, heads) or opt_int(model, w, t, "num_key_value_heads") or heads
    # ModelConfig.__init__: head_dim from the config, else hidden_size // heads. MLA's
    # query/key head is qk_nope_head_dim + qk_rope_head_dim (sglang/srt/models/deepseek_v2.py
    # DeepseekV2AttentionMLA.qk_head_dim); its KV cache holds the latent instead (kv_lora_rank).
    head_dim = opt_int(model, w, t, "head_dim") or hidden // heads
    if t.get("kv_lora_rank") is not None:
        head_dim = req_int(model, w, t, "qk_nope_head_dim") + req_int(model, w, t, "qk_rope_head_dim")
    archs = config.get("architectures") or t.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise CheckpointError(f"{model}: config.json architectures must be a list of names")
    model_type = config.get("model_type") or t.get("model_type")
    if not isinstance(model_type, str):
        raise CheckpointError(f"{model}: config.json has no model_type")
    dtype = next((d for d in (config.get("torch_dtype"), config.get("dtype"), t.get("torch_dtype"), t.get("dtype"))
                  if isinstance(d, str)), None)
    full, linear, sliding = layer_kinds(model, t, layers)
    kv_lora = opt_int(model, w, t, "kv_lora_rank")
    extra = {k: t[k] for k in ("q_lora_rank", "qk_nope_head_dim", "v_head_dim", "linear_num_key_heads",
                               "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                               "linear_conv_kernel_dim", "mamba_ssm_dtype", "tie_word_embeddings",
                               "learnable_sink") if k in t}
    if isinstance(generation_config, Mapping):
        extra["generation_config"] = dict(generation_config)
    if t.get("model_type") == "nemotron_h":
        extra.update(nemotron_h_shapes(model, t, layers))
        if t.get("num_hidden_layers") is None:
            extra["layers_from_block_type"] = True
    nas = nas_blocks(model, t, hidden)
    if nas is not None:
        extra["nas_blocks"] = nas
    if linear and t.get("linear_attn_config") is not None:
        extra["kda"] = kda_shape(model, t)
    if kv_lora is not None and (topk := opt_int(model, w, t, "index_topk")) is not None:
        # DeepSeek Sparse Attention's indexer (DeepSeek-V3.2, GLM-5): a key of its own per token and layer
        # (configs/model_config.py is_deepseek_dsa, get_dsa_index_head_dim: config.index_head_dim), its
        # heads, and the tokens each query attends to (layers/attention/dsa/dsa_indexer.py Indexer)
        extra.update(dsa_index_head_dim=opt_int(model, w, t, "index_head_dim"), dsa_index_topk=topk,
                     dsa_index_n_heads=opt_int(model, w, t, "index_n_heads"))
    if kv_lora is None:
        # a KV geometry of its own: values narrower than keys, sliding-window layers with their own
        # heads (configs/model_config.py ModelConfig v_head_dim, swa_head_dim, swa_v_head_dim,
        # get_swa_num_kv_heads; MiMo-V2-Flash: keys 192, values 128, 4 full / 8 sliding KV heads)
        extra.update({k: v for k in ("v_head_dim", "swa_num_key_value_heads", "swa_head_dim", "swa_v_head_dim")
                      if (v := opt_int(model, w, t, k)) is not None})
    # Latent MoE: the routed experts work in a narrower width, between two projections from and to
    # the hidden size (srt/models/nemotron_h.py NemotronHMoE moe_latent_size, fc1/fc2_latent_proj;
    # srt/models/kimi_k3.py routed_expert_hidden_size, 0.5.23)
    latent = opt_int(model, w, t, "moe_latent_size") or opt_int(model, w, t, "routed_expert_hidden_size")
    if latent is not None and latent < hidden:
        extra["moe_latent_size"] = latent
    return ModelFacts(
        model=model, revision=revision, source=source, architectures=tuple(archs), model_type=model_type,
        dtype=dtype, total_weight_bytes=_total_bytes(model, index, safetensors_header_sizes),
        num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv,
        head_dim=head_dim, intermediate_size=opt_int(model, w, t, "intermediate_size"),
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=opt_int(model, w, t, "qk_rope_head_dim") if kv_lora else None,
        moe=_moe(model, t), quantization=_quant(model, config, t, hf_quant_config), mtp_layers=_mtp_layers(model, t),
        full_attention_layers=full, linear_attention_layers=linear, sliding_window_layers=sliding,
        sliding_window=opt_int(model, w, t, "sliding_window") if sliding else None,
        vision=isinstance(config.get("vision_config"), Mapping),
        vision_layers=_vision_int(model, config, "num_hidden_layers"),
        vision_hidden_size=_vision_int(model, config, "hidden_size"),
        max_position_embeddings=opt_int(model, w, t, "max_position_embeddings"),
        derived_context_length=context_length_as_sglang(model, w, t),
        vocab_size=opt_int(model, w, t, "vocab_size"),
        auto_maps=tuple(m for m in (auto_map(model, "config.json", config),
                                    auto_map(model, "tokenizer_config.json", tokenizer_config)) if m is not None),
        extra=extra)
