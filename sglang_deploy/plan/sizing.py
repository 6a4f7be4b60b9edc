"""Memory arithmetic from model facts: per-GPU weights, KV bytes per token, SGLang's reserve.

Pure functions; ``facts_layer`` turns them into decisions with reasons and
``constraints`` into refusals. Every formula mirrors the SGLang code cited
beside it (the released 0.5.x wheels; the names are 0.5.23's, older releases
compute the same in ``model_executor/model_runner.py``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from sglang_deploy.plan import hybrid_state
from sglang_deploy.plan.modelfacts import ModelFacts

GIB = 1024 ** 3
MIB = 1024 ** 2

#: This project's policy, not SGLang's (SGLang starts with any KV pool and caps each request:
#: managers/tp_worker.py TpModelWorker, max_req_len = min(context_len - 1, max_total_num_tokens - 1)).
#: The KV cache the TP choice prefers: one request of the model's full context, up to this many
#: tokens. Less lowers the context with a warning ...
MIN_KV_TOKENS = 32768
#: ... down to this floor; a KV cache below it (or below the model's positions, if fewer) is refused.
FLOOR_KV_TOKENS = 4096

#: Bytes per element of a KV cache dtype (SGLang: torch._utils._element_size(kv_cache_dtype)).
_KV_DTYPE_BYTES = {"auto": None, "bf16": 2, "bfloat16": 2, "float16": 2, "fp16": 2,
                   "fp8_e4m3": 1, "fp8_e5m2": 1, "fp4_e2m1": 0.5}
_MODEL_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
#: The quantization methods whose config SGLang reads an FP8 KV cache from (kv_dtype_bytes): ModelOpt's
#: in every supported release, fp8's and compressed-tensors' from 0.5.19.
FP8_KV_METHODS = frozenset({"modelopt_fp8", "modelopt_fp4"})
FP8_KV_METHODS_0519 = FP8_KV_METHODS | {"fp8", "compressed-tensors"}

#: SGLang's default swa_full_tokens_ratio: a sliding-window layer's pool holds this share of
#: the full-attention pool's tokens (server_args.py ServerArgs.swa_full_tokens_ratio = 0.8;
#: model_executor/pool_configurator.py, the hybrid SWA configurator).
SWA_FULL_TOKENS_RATIO = 0.8

#: Multimodal architectures 0.5.23 keeps the breakable prefill CUDA graph for (configs/model_config.py
#: multimodal_breakable_cuda_graph_supported_model_archs); any other multimodal model runs prefill
#: eagerly (arg_groups/cuda_graph_hook.py disable_breakable_cudagraph_if_incompatible, "multimodal model").
MULTIMODAL_PREFILL_GRAPH_ARCHS_0523 = frozenset({
    "MiniMaxM3SparseForConditionalGeneration", "Cohere2VisionForConditionalGeneration",
    "Glm5NextForConditionalGeneration", "InternS2MobiusForConditionalGeneration",
    "PaddleOCRVLForConditionalGeneration", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Qwen4ExpForConditionalGeneration", "MuseGlimmerForConditionalGeneration", "MuseSparkForConditionalGeneration",
    "KimiK3ForConditionalGeneration", "KimiK25ForConditionalGeneration", "MiniMaxM3SparseForCausalLM"})


#: Multimodal architectures SGLang serves text-only, without their vision tower, unless
#: --enable-multimodal is given (configs/model_config.py ModelConfig.__init__, mm_disabled_models: the
#: same three in 0.5.9 and 0.5.15, InklingForConditionalGeneration added in 0.5.19 and kept in 0.5.23;
#: 0.5.15 on also skip the list under --model-impl transformers, which no plan sets). Such a model's
#: ModelConfig.is_multimodal is False, so neither the VLM reduction of mem_fraction_static
#: (adjust_mem_fraction_for_vlm) nor the multimodal prefill-graph rule applies to it.
MM_DISABLED_ARCHS = frozenset({"Gemma3ForConditionalGeneration", "Llama4ForConditionalGeneration",
                               "Step3VLForConditionalGeneration"})
MM_DISABLED_ARCHS_0519 = MM_DISABLED_ARCHS | {"InklingForConditionalGeneration"}


def multimodal_by_default(architecture: str | None, version: str | None) -> bool:
    """Whether SGLang ``version`` serves a multimodal checkpoint of ``architecture`` with its vision
    tower when --enable-multimodal is not given (MM_DISABLED_ARCHS; the first architecture decides)."""
    listed = MM_DISABLED_ARCHS_0519 if release(version) >= (0, 5, 19) else MM_DISABLED_ARCHS
    return architecture not in listed


def release(version: str | None) -> tuple[int, ...]:
    """A release as a tuple for comparison; None (no version known) reads as the newest supported, 0.5.23."""
    if not version:
        return (0, 5, 23)
    parts = []
    for p in version.split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or (0, 5, 23)


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """The prefill CUDA graph's captured token counts up to ``max_bs`` (0.5.23
    arg_groups/cuda_graph_hook.py generate_prefill_cuda_graph_batch_sizes; 0.5.19 the same;
    0.5.15 server_args.py, the same ranges)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1024 + 1, 64)) + list(range(1280, 4096 + 1, 256)) + list(range(4608, max_bs + 1, 512)))
    return [s for s in sizes if s <= max_bs]


def prefill_graph_mib(version: str | None, chunk: int, mla: bool = False, vision: bool = False,
                      architecture: str | None = None, attn_dp: int = 1) -> float:
    """What SGLang reserves for its prefill CUDA graph, per release.

    0.5.9: the piecewise prefill graph is off by default (server_args.py
    enable_piecewise_cuda_graph = False), nothing reserved. 0.5.15 on: the breakable prefill graph
    is the default on CUDA (model_executor/cuda_graph_config.py default_prefill_backend), and the
    reserve is 1.5 GiB for an MLA model ("MLA backend overhead is much higher than expected with
    fa3"), else 8 MiB per captured size up to the chunked prefill size (0.5.23
    arg_groups/memory_hook.py reserve_for_graph_mb; 0.5.19 the same function; 0.5.15 server_args.py
    _handle_gpu_memory_settings). The graph is turned off before the reserve is counted (and then
    nothing is reserved) for: a multimodal model (0.5.15, 0.5.19; in 0.5.23 unless its
    architecture is allow-listed), DP attention (0.5.15, 0.5.19), MLA (0.5.15)
    (disable_breakable_cudagraph_if_incompatible: server_args.py in 0.5.15,
    arg_groups/cuda_graph_hook.py in 0.5.19 and 0.5.23)."""
    rel = release(version)
    if rel < (0, 5, 15):
        return 0.0
    if vision and (rel < (0, 5, 23) or architecture not in MULTIMODAL_PREFILL_GRAPH_ARCHS_0523):
        return 0.0
    if attn_dp > 1 and rel < (0, 5, 23):
        return 0.0
    if mla:
        return 0.0 if rel < (0, 5, 19) else 1.5 * 1024
    return len(prefill_graph_sizes(chunk)) * 8.0


def vlm_fraction(fraction: float, vision_layers: int | None, vision_hidden: int | None) -> float:
    """mem_fraction_static of a served vision model: the text model's fraction times 0.95 times a
    factor of the vision tower's size against ViT-L/14 (24 layers x 1024 hidden), 10% less per
    100% more, clamped to [0.8, 1.05]; a vision_config without num_hidden_layers / hidden_size
    counts as 24 / 1024 (getattr defaults). The same in every supported release (0.5.23 and 0.5.19
    arg_groups/memory_hook.py adjust_mem_fraction_for_vlm; 0.5.9 and 0.5.15 server_args.py
    ServerArgs.adjust_mem_fraction_for_vlm); 0.5.23's fixed 8 GiB branch applies only under
    SGLANG_ENABLE_POST_CAPTURE_KV_SIZING, off by default (environ.py)."""
    layers = vision_layers if vision_layers is not None else 24
    hidden = vision_hidden if vision_hidden is not None else 1024
    ratio = layers * hidden ** 2 / (24 * 1024 ** 2)
    factor = max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
    return fraction * 0.95 * factor


def kv_dtype_bytes(facts: ModelFacts, kv_cache_dtype: str | None, version: str | None = None) -> float:
    """``auto`` stores the KV cache in the model's activation dtype: bf16 for FP8/MXFP4
    checkpoints too (model_config.py ModelConfig: kv_cache_dtype auto -> dtype). A config
    without torch_dtype (gpt-oss) loads as bf16/fp16, 2 bytes (configs/model_config.py
    _get_and_verify_dtype: float32 or missing -> a 16-bit dtype). Except where the model's
    quantization config names an FP8 KV cache: ``auto`` is then float8_e4m3fn, one byte
    (ModelRunner.configure_kv_cache_dtype in model_executor/model_runner.py, 0.5.9 and 0.5.15;
    mem_cache/kv_cache_dtype.py configure_kv_cache_dtype, 0.5.19 and 0.5.23, both reading the
    quantization config's kv_cache_quant_algo). ModelOpt's FP8 and FP4 configs carry it in every
    supported release; fp8's (layers/quantization/fp8.py Fp8Config.from_config) and
    compressed-tensors' (CompressedTensorsConfig.kv_cache_quant_algo) from 0.5.19 on, sized at the
    model's dtype before it. ``version`` None: the newest."""
    explicit = _KV_DTYPE_BYTES.get(kv_cache_dtype or "auto")
    if explicit:
        return explicit
    q = facts.quantization
    methods = FP8_KV_METHODS_0519 if release(version) >= (0, 5, 19) else FP8_KV_METHODS
    if q is not None and q.method in methods and (q.kv_cache_quant_algo or "").upper() == "FP8":
        return 1
    return _MODEL_DTYPE_BYTES.get((facts.dtype or "bfloat16").lower(), 2)


def kv_heads_per_rank(facts: ModelFacts, tp: int) -> int:
    """KV heads on one GPU: fewer heads than ranks replicate, one per GPU
    (configs/model_config.py ModelConfig.get_num_kv_heads: max(1, total // tp))."""
    return max(1, facts.num_key_value_heads // tp)


@dataclass(frozen=True)
class KvCell:
    """Bytes one token of KV cache costs on one GPU, and how it was counted."""

    bytes_per_token: float
    how: str


#: Architectures SGLang runs with DeepSeek Sparse Attention when the config names index_topk, in
#: every supported release (configs/model_config.py is_deepseek_nsa in 0.5.9, is_deepseek_dsa
#: from 0.5.15; later releases add more).
DSA_ARCHS = frozenset({"DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "MistralLarge3ForCausalLM",
                       "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM"})


def dsa_index_bytes(facts: ModelFacts) -> int:
    """Bytes per token and layer of a DSA model's indexer keys: FP8 with a float32 scale per 128,
    index_head_dim + index_head_dim / 128 x 4, whatever the KV cache's dtype (0.5.9
    model_executor/model_runner_kv_cache_mixin.py get_cell_size_per_token and 0.5.15
    model_executor/pool_configurator.py _compute_cell_size: NSATokenToKVPool/DSATokenToKVPool
    quant_block_size 128 and index_k_with_scale_buffer_dtype uint8; 0.5.19 and 0.5.23 the same in
    _compute_dsa_indexer_cell_size, with index_kpool 1 and every layer its own top-k, as
    DeepSeek-V3.2's and GLM-5's configs have it). 0 for any other model."""
    dim = facts.extra.get("dsa_index_head_dim")
    if facts.architecture not in DSA_ARCHS or not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0:
        return 0
    return dim + dim // 128 * 4


def dsa_fp8_by_default(facts: ModelFacts) -> bool:
    """Whether SGLang turns a KV cache left to it (auto) into FP8 for this model on SM100 and later
    GPUs: a DSA model without learnable attention sinks, which need bf16 (0.5.9 server_args.py
    ServerArgs._set_default_nsa_kv_cache_dtype; 0.5.15 to 0.5.23 arg_groups/overrides.py
    _dsa_kv_cache_dtype_default: fp8_e4m3 when the device's major is 10 or more; 0.5.23 refuses
    anything but bf16 with learnable sinks, read as bool(getattr(hf_config, "learnable_sink", False)))."""
    return dsa_index_bytes(facts) > 0 and not facts.extra.get("learnable_sink")


def dsa_default_kv_dtype(facts: ModelFacts, sm_major: int | None) -> str | None:
    """The KV cache dtype SGLang picks by itself for this model on a GPU of ``sm_major``: fp8_e4m3
    for a DSA model on SM100 and later (dsa_fp8_by_default; the topology rule
    dsa-fp8-kv-cache-on-sm100-and-later writes it down), else None (the model's dtype). The layout
    is ranked with it, so that it sizes the cache the plan resolves."""
    return "fp8_e4m3" if dsa_fp8_by_default(facts) and (sm_major or 0) >= 10 else None


def _dsa_fp8_latent(facts: ModelFacts) -> int:
    """A DSA model's latent in an FP8 KV cache from 0.5.19, where the cell size follows the pool:
    kv_lora_rank FP8 bytes, a float32 scale per 128 of them and the rope part in bf16
    (mem_cache/kv_cache_configurator.py calculate_mla_kv_cache_dim, every DSA backend on CUDA but
    trtllm and an all-tilelang pair). 0.5.9 and 0.5.15 size it as the plain latent."""
    rank, rope = facts.kv_lora_rank or 0, facts.qk_rope_head_dim or 0
    return rank + rank // 128 * 4 + rope * 2


def dsa_trtllm_by_default(facts: ModelFacts, sm_major: int | None) -> bool:
    """Whether SGLang's default DSA backends for an FP8 KV cache are trtllm, which reads the plain
    latent (kv_lora_rank + qk_rope_head_dim FP8 bytes, no scales): on compute capability 10 and
    later ("Blackwell FP8 defaults to trtllm; Hopper FP8 to flashmla_kv"), but for GLM-5's cache on
    SM120/SM121, which gets flashinfer_sparse_mla (0.5.19 and 0.5.23 arg_groups/overrides.py
    _dsa_split_backend_resolution; calculate_mla_kv_cache_dim returns the plain dimension when
    either backend is trtllm). ``sm_major`` None (the GPU is not known): False, the larger cell,
    so that the plan never counts more tokens than SGLang holds."""
    if sm_major is None or sm_major < 10:
        return False
    return not (facts.architecture == "GlmMoeDsaForCausalLM" and sm_major == 12)


def kv_cell(facts: ModelFacts, tp: int, kv_cache_dtype: str | None = None, version: str | None = None,
            sm_major: int | None = None) -> KvCell:
    """Per-token, per-GPU KV bytes as SGLang sizes its pool (``sm_major``: the GPU's compute
    capability major, which picks a DSA model's attention backends and so its FP8 cell).

    MLA: (kv_lora_rank + qk_rope_head_dim) x layers x dtype bytes, the latent is not split
    by TP (pool_configurator.py _compute_cell_size, use_mla_backend branch;
    mem_cache/kv_cache_configurator.py calculate_mla_kv_cache_dim).
    Others: KV heads per rank x (head_dim + v_head_dim) x layers x dtype bytes
    (same function, else branch). Hybrid linear-attention models count only their
    full-attention layers (the linear layers keep a fixed per-request state in the mamba
    pool, not per token: model_config.py hybrid layer ids). Sliding-window layers join a
    separate pool holding SWA_FULL_TOKENS_RATIO of the full pool's tokens."""
    if kv_cache_dtype in (None, "auto"):  # left to SGLang, which makes a DSA model's FP8 on SM100 and later
        kv_cache_dtype = dsa_default_kv_dtype(facts, sm_major) or kv_cache_dtype
    size = kv_dtype_bytes(facts, kv_cache_dtype, version)
    if facts.mla:
        # A hybrid's latent lives on its full-attention layers alone (0.5.23
        # mem_cache/kv_cache_configurator.py _full_host_spec: MLASubPoolSpec of
        # len(full_attention_layer_ids) layers; Kimi Linear's KDA layers keep a state instead).
        latent_layers = facts.kv_layers
        width = (facts.kv_lora_rank or 0) + (facts.qk_rope_head_dim or 0)
        total = width * latent_layers * size
        state = (f" (the {facts.linear_attention_layers} linear-attention layers keep a fixed state)"
                 if facts.linear_attention_layers else "")
        how = f"MLA: ({facts.kv_lora_rank} + {facts.qk_rope_head_dim}) x {latent_layers} layers x {size:g} B"
        index = dsa_index_bytes(facts)
        if index:
            if size == 1 and release(version) >= (0, 5, 19):
                if dsa_trtllm_by_default(facts, sm_major):
                    how += f" (FP8 as the trtllm DSA backend, SGLang's default on SM{sm_major}x, stores it)"
                else:
                    total = _dsa_fp8_latent(facts) * latent_layers
                    how = (f"MLA as DSA stores it in FP8: ({facts.kv_lora_rank} + {facts.kv_lora_rank} / 128 x 4 B "
                           f"of scales + {facts.qk_rope_head_dim} x 2 B) x {latent_layers} layers")
            total += index * latent_layers
            how += f" + the DSA indexer's keys, {index} B x {latent_layers} layers"
        return KvCell(total, f"{how}, not split by TP{state}")
    heads = kv_heads_per_rank(facts, tp)
    swa = facts.sliding_window_layers
    dense = facts.kv_layers
    # keys and values may differ in width, and sliding-window layers may have heads of their own:
    # full layers heads x (head_dim + v_head_dim), sliding ones swa heads x (swa_head_dim +
    # swa_v_head_dim), each defaulting as ModelConfig does (0.5.9 model_runner_kv_cache_mixin.py
    # cell size and full_tokens = memory / (F x full + ratio x S x swa); 0.5.23
    # mem_cache/kv_cache_configurator.py _unified_swa_head_geometry)
    e = facts.extra
    v_dim = int(e.get("v_head_dim") or facts.head_dim)
    swa_dim = int(e.get("swa_head_dim") or facts.head_dim)
    swa_v_dim = int(e.get("swa_v_head_dim") or swa_dim)
    swa_heads = max(1, int(e["swa_num_key_value_heads"]) // tp) if e.get("swa_num_key_value_heads") else heads
    full_layer = heads * (facts.head_dim + v_dim) * size
    swa_layer = swa_heads * (swa_dim + swa_v_dim) * size
    total = full_layer * dense + SWA_FULL_TOKENS_RATIO * swa_layer * swa
    kv_width = f"{facts.head_dim} x 2 (K, V)" if v_dim == facts.head_dim else f"({facts.head_dim} K + {v_dim} V)"
    counted = f"{dense} full-attention layers"
    if swa:
        same = (swa_heads, swa_dim, swa_v_dim) == (heads, facts.head_dim, v_dim)
        counted += f" + {swa} sliding-window layers x {SWA_FULL_TOKENS_RATIO:g}" + (
            "" if same else f" at {swa_heads} KV head(s)/GPU x ({swa_dim} K + {swa_v_dim} V)")
    if facts.linear_attention_layers:
        counted += f" (the {facts.linear_attention_layers} linear-attention layers keep a fixed state)"
    return KvCell(total, f"{heads} KV head(s)/GPU x {kv_width} x {size:g} B x {counted}")


def chunk_and_graph_bs(gpu_mib: int, tp: int, version: str | None = None) -> tuple[int, int]:
    """SGLang's GPU-memory tiers: default chunked prefill size and decode CUDA-graph batch
    (arg_groups/memory_hook.py handle_gpu_memory_settings; server_args.py _handle_gpu_memory_settings
    in 0.5.9 and 0.5.15; arg_groups/memory_hook.py in 0.5.19 too: until 0.5.23 the 20-35 GiB tier is
    2048 tokens and a decode batch of 24, 80 from TP 4)."""
    if gpu_mib < 20 * 1024:
        return 2048, 8
    if gpu_mib < 35 * 1024:
        if release(version) < (0, 5, 23):
            return 2048, 24 if tp < 4 else 80
        return 4096, 48 if tp < 4 else 160
    if gpu_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def reserve_mib(gpu_mib: int, tp: int, chunked_prefill: int | None = None, graph_bs: int | None = None,
                prefill_graph: bool = True, vision: bool = False, attn_dp: int = 1, *, mla: bool = False,
                version: str | None = None, architecture: str | None = None) -> float:
    """Activations + CUDA graphs, outside the static pool, as SGLang estimates them:
    512 + 1.5 x max(chunk, 2048) + tp/8 GiB + 2 x decode graph batch + the prefill graph's
    reserve (prefill_graph_mib: 1.5 GiB for MLA), at least 10 GiB on GPUs above 60 GiB
    (arg_groups/memory_hook.py handle_gpu_memory_settings and reserve_for_graph_mb). DP attention
    over ``attn_dp`` ranks pads more: 3 x decode graph batch x attn_dp, and 1.5 x more above a
    batch of 300 (reserve_for_graph_mb, the attn_dp_enabled_of branch; server_args.py
    _handle_gpu_memory_settings in 0.5.9, with dp_size). ``prefill_graph`` False: the plan turns
    the prefill graph off, nothing reserved for it; ``vision``: a served vision tower (its
    prefill graph is off unless allow-listed; its own share is taken from the fraction,
    vlm_fraction)."""
    chunk, bs = chunk_and_graph_bs(gpu_mib, tp, version)
    chunk = chunked_prefill or chunk
    bs = graph_bs or bs
    reserved = 512 + max(chunk, 2048) * 1.5 + tp / 8 * 1024 + bs * 2
    if attn_dp > 1:
        reserved += bs * attn_dp * 3
        if bs > 300:
            reserved += bs * attn_dp * 1.5
    if prefill_graph:
        reserved += prefill_graph_mib(version, chunk, mla, vision, architecture, attn_dp)
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return reserved


def sglang_mem_fraction(gpu_mib: int, reserved_mib: float) -> float:
    """mem_fraction_static = (GPU memory - reserve) / GPU memory, rounded to 3 places
    (arg_groups/memory_hook.py _handle_gpu_memory_settings)."""
    return round((gpu_mib - reserved_mib) / gpu_mib, 3)


def weights_per_gpu(facts: ModelFacts, tp: int) -> float | None:
    """Checkpoint bytes one rank holds: the total split over TP ranks (experts split over
    TP x EP the same way: every rank holds 1/TP of the expert weights)."""
    if not facts.total_weight_bytes:
        return None
    return facts.total_weight_bytes / tp


@dataclass(frozen=True)
class Budget:
    """One GPU at one TP size: what goes where, in bytes."""

    tp: int
    gpu_bytes: float
    fraction: float
    weights: float
    reserve: float
    kv: KvCell
    #: state : KV ratio of a hybrid linear-attention model (hybrid_state.recurrent_ratio), 0 for others
    recurrent: float = 0.0
    #: one request's recurrent state on one GPU (hybrid_state.recurrent_state_per_request), 0 when not known
    state_per_request: int = 0
    #: the state slots SGLang counts per running request (hybrid_state.slots_per_request)
    slots_per_request: int = hybrid_state.BASE_SLOTS
    #: speculative decoding's draft tokens per step, 0 without: SGLang keeps an intermediate state
    #: per draft token of each running request beside the slots
    draft_tokens: int = 0
    #: running requests per attention-DP rank that those intermediate states are kept for
    running_cap: int = hybrid_state.SPEC_REQUEST_CAP
    #: the SGLang release whose formulas apply
    release: tuple[int, ...] = (0, 5, 23)

    @property
    def pool(self) -> float:
        return self.gpu_bytes * self.fraction

    @property
    def _hybrid_rest(self) -> float | None:
        """The pool after the weights, where a hybrid's recurrent state of a known size shares it;
        None elsewhere."""
        rest = self.pool - self.weights
        return rest if self.recurrent and self.state_per_request and rest > 0 else None

    @property
    def _states(self) -> hybrid_state.StatePool | None:
        rest = self._hybrid_rest
        if rest is None:
            return None
        return hybrid_state.pool(rest, self.recurrent, self.state_per_request, self.release, self.slots_per_request,
                                 self.draft_tokens, self.running_cap)

    @property
    def state_bytes(self) -> float:
        """What the recurrent states take of the pool after the weights (hybrid_state.MAMBA_FULL_MEMORY_RATIO):
        the slots and the draft steps' intermediate states (hybrid_state.pool); the ratio's whole
        share when the state's size is not known."""
        rest = self.pool - self.weights
        states = self._states
        if states is not None:
            return states.state_bytes + states.taken_first
        return rest * self.recurrent / (1 + self.recurrent) if self.recurrent and rest > 0 else 0.0

    @property
    def max_requests(self) -> int | None:
        """The running requests the recurrent state holds (hybrid_state.pool), None when not known
        or not a hybrid."""
        states = self._states
        return states.max_requests if states is not None else None

    @property
    def draft_cap(self) -> int | None:
        """The running requests per rank whose draft states leave state slots for as many, where
        SGLang 0.5.9 keeps them for more (hybrid_state.draft_cap); None elsewhere."""
        rest = self._hybrid_rest
        if rest is None:
            return None
        return hybrid_state.draft_cap(rest, self.recurrent, self.state_per_request, self.release,
                                      self.slots_per_request, self.draft_tokens)

    @property
    def kv_bytes(self) -> float:
        return self.pool - self.weights - self.state_bytes

    @property
    def kv_tokens(self) -> int:
        return max(0, int(self.kv_bytes // self.kv.bytes_per_token)) if self.kv.bytes_per_token else 0

    def describe(self) -> str:
        return (f"per GPU {self.gpu_bytes / GIB:.1f} GiB x mem_fraction_static {self.fraction:g} = "
                f"{self.pool / GIB:.1f} GiB pool: weights {self.weights / GIB:.1f} GiB (1/{self.tp}), "
                + (f"recurrent state {self.state_bytes / GIB:.1f} GiB (SGLang's mamba_full_memory_ratio "
                   f"{self.recurrent:g}: state : KV" + (
                       f"; {self.state_per_request / MIB:,.1f} MiB per request: at most {self.max_requests:,} "
                       f"running, {self.slots_per_request} states each"
                       + (f" and {self.draft_tokens} draft states for speculative decoding" if self.draft_tokens
                          else "") if self.max_requests is not None else "")
                   + "), " if self.recurrent else "")
                + f"KV "
                f"{max(0.0, self.kv_bytes) / GIB:.1f} GiB at {self.kv.bytes_per_token:,.0f} B/token "
                f"({self.kv.how}) = ~{self.kv_tokens:,} tokens")


def budget(facts: ModelFacts, tp: int, gpu_mib: int, fraction: float | None = None,
           kv_cache_dtype: str | None = None, chunked_prefill: int | None = None,
           graph_bs: int | None = None, vision: bool = False, attn_dp: int = 1, *,
           version: str | None = None, prefill_graph: bool = True, draft_tokens: int = 0,
           mamba_strategy: str | None = None, running_cap: int | None = None,
           sm_major: int | None = None) -> Budget | None:
    """The per-GPU budget at ``tp``; ``fraction`` None takes SGLang's own default (``attn_dp``:
    the DP-attention ranks, whose padding SGLang reserves for; ``vision``: the vision tower is
    served, vlm_fraction; ``version``: the SGLang release whose formulas apply, None the newest;
    ``sm_major``: the GPU's compute capability major, kv_cell).
    A hybrid linear-attention model's KV cache gets its share after the recurrent state's, which
    also holds speculative decoding's ``draft_tokens`` per running request (``mamba_strategy``
    and ``running_cap``, the running requests per rank: hybrid_state.budget_args; None: as the
    plan sets them, SGLang's 48 or fewer where 0.5.9 could not run them, Budget.draft_cap)."""
    weights = weights_per_gpu(facts, tp)
    if weights is None:
        return None
    arch = facts.architecture
    reserved = reserve_mib(gpu_mib, tp, chunked_prefill, graph_bs, prefill_graph, vision, attn_dp,
                           mla=facts.mla, version=version, architecture=arch)
    if fraction is not None:
        frac = fraction
    else:
        frac = sglang_mem_fraction(gpu_mib, reserved)
        if vision:
            # SGLang keeps the product unrounded; 4 places keep the argv short (under 0.0001 of the GPU)
            frac = round(vlm_fraction(frac, facts.vision_layers, facts.vision_hidden_size), 4)
            reserved = gpu_mib * (1 - frac)  # what is left outside the pool, the tower's share included
    rel = release(version)
    b = Budget(tp=tp, gpu_bytes=gpu_mib * MIB, fraction=frac, weights=weights, reserve=reserved * MIB,
               kv=kv_cell(facts, tp, kv_cache_dtype, version, sm_major), recurrent=hybrid_state.recurrent_ratio(facts),
               state_per_request=hybrid_state.recurrent_state_per_request(facts, tp),
               slots_per_request=hybrid_state.slots_per_request(arch, rel, mamba_strategy, draft_tokens > 0),
               draft_tokens=draft_tokens, running_cap=running_cap or hybrid_state.SPEC_REQUEST_CAP, release=rel)
    fit = b.draft_cap if running_cap is None else None
    return dataclasses.replace(b, running_cap=fit) if fit else b


def planned_budget(facts: ModelFacts, gpu_mib: int, values: Mapping[str, Any], kv_cache_dtype: str | None,
                   version: str | None, sm_major: int | None = None) -> Budget | None:
    """The budget of a plan's resolved intent ``values``: its TP, memory fraction and speculative
    decoding's states (hybrid_state.budget_args)."""
    return budget(facts, values["tp_size"], gpu_mib, values["mem_fraction_static"], kv_cache_dtype, version=version,
                  sm_major=sm_major, **hybrid_state.budget_args(values))


def min_kv_tokens(facts: ModelFacts) -> int:
    """The KV tokens the plan prefers to hold (policy: MIN_KV_TOKENS)."""
    return min(MIN_KV_TOKENS, facts.context_limit or MIN_KV_TOKENS)


def floor_kv_tokens(facts: ModelFacts) -> int:
    """The fewest KV tokens a plan may hold (policy: FLOOR_KV_TOKENS)."""
    return min(FLOOR_KV_TOKENS, facts.context_limit or FLOOR_KV_TOKENS)


def heads_fit(facts: ModelFacts, tp: int) -> str | None:
    """Why ``tp`` cannot split the attention heads, or None. Query heads divide by TP
    (models/*.py Attention: assert total_num_heads % tp_size == 0); KV heads divide by TP,
    or TP by them when there are fewer (replicated: assert tp_size % total_num_kv_heads == 0).
    MLA has no separate KV heads to split."""
    if facts.num_attention_heads % tp:
        return f"{facts.num_attention_heads} attention heads do not divide by TP {tp}"
    kv = facts.num_key_value_heads
    if not facts.mla and kv and (kv % tp if kv >= tp else tp % kv):
        return f"{kv} KV heads and TP {tp}: neither divides the other"
    return None


def dense_split_problem(facts: ModelFacts, tp: int) -> str | None:
    """Why ``tp`` cannot split the dense MLP widths (dense_widths), or None: each divides by TP
    (srt/distributed/utils.py divide) and, block-quantized, each rank's share by block_n
    (layers/quantization/fp8.py Fp8LinearMethod.validate_block_quant_shapes)."""
    block = block_size(facts)
    for name, width in dense_widths(facts):
        if width % tp:
            return f"{name} {width} does not divide by TP {tp}"
        if block is not None and (width // tp) % block[0]:
            return (f"{name} {width} / TP {tp} = {width // tp} is not a multiple of the weight "
                    f"quantization block_n {block[0]}")
    return None


def moe_split_problem(facts: ModelFacts, tp: int, ep: int) -> str | None:
    """Why experts cannot be split at ``tp`` / ``ep``, or None: experts divide by EP
    (layers/moe/fused_moe_triton/layer.py FusedMoE.__init__: assert num_experts % ep == 0),
    moe_intermediate_size by the MoE TP width tp/ep (same: assert intermediate_size %
    moe_tp_size == 0), and, block-quantized, the per-rank width by block_n and block_k
    (layers/quantization/fp8.py Fp8MoEMethod.create_weights)."""
    moe = facts.moe
    if moe is None:
        return None
    if tp % ep:
        return f"EP {ep} does not divide TP {tp}"
    if moe.num_experts % ep:
        return f"{moe.num_experts} experts do not divide by EP {ep}"
    moe_tp = tp // ep
    if moe.moe_intermediate_size % moe_tp:
        return f"moe_intermediate_size {moe.moe_intermediate_size} does not divide by TP/EP = {moe_tp}"
    block = block_size(facts)
    per_rank = moe.moe_intermediate_size // moe_tp
    if block is not None:
        block_n, block_k = block
        if per_rank % block_n:
            return (f"moe_intermediate_size {moe.moe_intermediate_size} / (TP {tp} / EP {ep}) = {per_rank} is not "
                    f"a multiple of block_n {block_n}")
        if moe_tp > 1 and per_rank % block_k:
            return (f"moe_intermediate_size {moe.moe_intermediate_size} / (TP {tp} / EP {ep}) = {per_rank} is not "
                    f"a multiple of block_k {block_k}")
    return None


def block_size(facts: ModelFacts) -> tuple[int, int] | None:
    q = facts.quantization
    if q is None or not q.weight_block_size:
        return None
    return int(q.weight_block_size[0]), int(q.weight_block_size[1])


def dense_widths(facts: ModelFacts) -> list[tuple[str, int]]:
    """Dense MLP widths split by TP: the dense model's intermediate_size, an MoE model's
    leading dense layers, and its shared experts (one MLP of shared x moe_intermediate)."""
    out: list[tuple[str, int]] = []
    moe = facts.moe
    if moe is None or moe.first_dense_layers:
        if facts.intermediate_size:
            out.append(("intermediate_size", facts.intermediate_size))
    if moe is not None and moe.shared_expert_intermediate_size:
        # Qwen2-MoE style: one shared expert of its own width (models/qwen2_moe.py Qwen2MoeSparseMoeBlock)
        out.append(("shared_expert_intermediate_size", moe.shared_expert_intermediate_size))
    elif moe is not None and moe.shared_experts:
        # DeepSeek: n_shared_experts x moe_intermediate_size in one MLP (models/deepseek_v2.py DeepseekV2MoE)
        out.append(("shared experts' width", moe.shared_experts * moe.moe_intermediate_size))
    return out
