"""What speed a plan should reach, pure: a roofline model of one SGLang server from the checkpoint's
facts, the GPUs' datasheet figures (data/gpus.yaml) and the plan's layout, as bands (low, expected,
high), with the derivation in words.

Decode is memory bound at small batches: each step reads the weights a token activates (all of a
dense model's; the attention, shared and routed-expert weights a token uses in an MoE model) and
the KV cache of the sequence, spread over the TP group, at the HBM bandwidth times an efficiency,
plus a fixed per-step cost (scheduler, sampling, kernel launches under a CUDA graph) and the TP
group's two all-reduces per layer, latency bound at small batches. A batch of ``c`` reads the
weights once and ``c`` sequences' KV cache, and needs ``c`` tokens' FLOPs: the step takes the
longer of the two. Prefill of the gate's prompt is compute bound (2 FLOPs per active parameter
per token) at the tensor throughput for the weights' dtype. Speculative decoding multiplies a
step's tokens by its expected accepted length (a measured one from the tuning record when there
is one, else a prior stated as such) and adds the draft steps' cost.

The efficiency bands are this model's calibration, stated in EFFICIENCY; benchmarks/predict_published.py
prints the model against published SGLang measurements (tests/fixtures/perf/published.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from sglang_deploy.plan.modelfacts import ModelFacts
from sglang_deploy.plan.sizing import SWA_FULL_TOKENS_RATIO, dsa_index_bytes, kv_dtype_bytes

#: Fraction of the datasheet's HBM bandwidth a decode step reaches (low, expected, high), of its
#: dense tensor throughput a prefill reaches, and the fixed cost of one decode step in seconds
#: (the scheduler's loop, sampling, launching the step's CUDA graph). Calibrated against the
#: published measurements of tests/fixtures/perf/published.yaml (benchmarks/predict_published.py).
EFFICIENCY: Mapping[str, tuple[float, float, float]] = {
    "memory": (0.65, 0.80, 0.90),
    "compute": (0.40, 0.55, 0.70),
    # a decode batch's matrix products are thin (one row per sequence): far from the datasheet's rate
    "decode_compute": (0.12, 0.20, 0.30),
    "step_s": (0.0020, 0.0010, 0.0005),
    # one layer's fixed cost in a decode step (its kernels under the step's CUDA graph): a dense
    # layer's, and an MoE layer's (routing, the fused expert kernels, their dispatch)
    "dense_layer_s": (40e-6, 20e-6, 10e-6),
    "moe_layer_s": (130e-6, 85e-6, 45e-6),
    # what one request spends outside its forward passes before its first token: HTTP, the chat
    # template and tokenizer (TokenizerManager), the hops to the scheduler and back through the
    # detokenizer (srt/managers/tokenizer_manager.py, scheduler.py, detokenizer_manager.py). This
    # model's calibration, wide on purpose: it matters only where the prompt's compute is short (a
    # small model), whose predicted prefill rate would otherwise be far above any real server's.
    "request_s": (0.030, 0.012, 0.004),
}
#: The share of GPU memory SGLang's static pool takes (weights and KV cache), for the KV capacity
#: that bounds how many sequences decode at once (its mem_fraction_static is 0.8 to 0.9 by GPU size).
POOL_FRACTION = 0.85
#: One all-reduce of a decode step's activations (a few KiB): its latency in seconds, by the link
#: between the TP group's GPUs (NCCL's small-message latency: NVLink/NVSwitch a few microseconds,
#: PCIe peer-to-peer tens, through host memory more); (low-speed, expected, high-speed) as above.
ALLREDUCE_S: Mapping[str, tuple[float, float, float]] = {
    "nvswitch": (12e-6, 8e-6, 5e-6),
    "nvlink": (15e-6, 10e-6, 6e-6),
    "pcie_p2p": (40e-6, 25e-6, 15e-6),
    "pcie": (80e-6, 50e-6, 30e-6),
    "network": (150e-6, 80e-6, 40e-6),
}
#: The share of a link's one-way datasheet bandwidth an all-reduce of a large decode batch reaches
#: (NCCL's bus bandwidth; low, expected, high speed), and the one-way GB/s assumed for a link the
#: datasheet does not give: through the host (no peer-to-peer, a copy each way) half the PCIe
#: figure, between nodes one 200 Gb/s adapter per GPU.
LINK_EFFICIENCY = (0.5, 0.7, 0.85)
NETWORK_GBPS = 25.0


def link_gbps(gpu: GpuPerf, link: str) -> float | None:
    """One-way GB/s of the TP group's link per GPU (None: not known, no bandwidth term)."""
    if link in ("nvswitch", "nvlink"):
        return gpu.nvlink_gbps / 2 if gpu.nvlink_gbps else None
    if link == "pcie_p2p":
        return gpu.pcie_gbps / 2 if gpu.pcie_gbps else None
    if link == "pcie":
        return gpu.pcie_gbps / 4 if gpu.pcie_gbps else None
    return NETWORK_GBPS


#: Prior acceptance of one speculative draft token when nothing was measured (MTP/EAGLE on natural
#: text); the expected accepted length of ``k`` draft steps is 1 + a + a^2 + ... + a^k.
ACCEPT_PRIOR = (0.60, 0.78, 0.88)
#: A draft step's cost relative to a full decode step (one draft layer and the LM head).
DRAFT_STEP_COST = 0.08

#: Quantization methods whose weights run on the FP8 tensor cores.
FP8_METHODS = frozenset({"fp8", "w8a8_fp8", "modelopt", "modelopt_fp8", "mxfp8", "compressed-tensors"})

_BYTES_PER_PARAM = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0, "fp8": 1.0, "mxfp4": 0.53, "awq": 0.56,
                    "gptq": 0.56, "compressed-tensors": 1.0, "modelopt_fp4": 0.56, "w4afp8": 0.56,
                    "modelopt_mixed": 0.56, "modelopt_fp8": 1.0, "mxfp8": 1.03}


@dataclass(frozen=True)
class GpuPerf:
    """One GPU model's datasheet figures (data/gpus.yaml)."""

    name: str
    hbm_gbps: float
    bf16_tflops: float
    fp8_tflops: float | None = None
    fp4_tflops: float | None = None
    source: str = ""
    memory_gib: float | None = None
    nvlink_gbps: float | None = None  # per GPU, bidirectional, as the datasheet states it
    pcie_gbps: float | None = None  # the host interface, bidirectional


@dataclass(frozen=True)
class ModelCost:
    """What one token costs, from the checkpoint's facts."""

    total_params: float
    active_params: float  # per token: all of a dense model's; the routed experts a token uses in an MoE
    bytes_per_param: float  # the checkpoint's bytes over its parameters (its dtype and quantization)
    kv_bytes_per_token: float  # every layer's KV cache of one token, whole model
    layers: int
    how: str
    moe_layers: int = 0
    hidden: int = 0  # the activations' width one all-reduce carries per token
    # an MoE's routed experts: the parameters of those one token uses (part of active_params), and
    # the share of the routed experts that is (experts_per_token / num_experts); 0 for a dense model
    routed_params: float = 0.0
    routed_share: float = 0.0
    # the attention layers' parameters (part of active_params): under DP attention they are split
    # over the attention TP group alone; and the KV heads one token's cache keeps (MLA: one latent)
    attention_params: float = 0.0
    kv_heads: int = 0
    # the sliding-window layers' KV of one token (whole model, their own heads): a step reads at most
    # ``sliding_window`` tokens of it per sequence; 0 without such layers (kv_bytes_per_token: the others)
    swa_kv_bytes_per_token: float = 0.0
    swa_kv_heads: int = 0
    sliding_window: int = 0
    # DeepSeek Sparse Attention: each decode token attends to at most ``sparse_topk`` tokens'
    # latent (kv_bytes_per_token), picked by an indexer that reads its own keys of every token of
    # the context (index_kv_bytes_per_token, whole model); 0 for dense attention
    sparse_topk: int = 0
    index_kv_bytes_per_token: float = 0.0

    @property
    def active_bytes(self) -> float:
        return self.active_params * self.bytes_per_param


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    dp: int = 1
    ep: int = 1
    link: str = "nvlink"  # ALLREDUCE_S key of the TP group's links
    spec_steps: int = 0  # speculative draft steps (0: none)
    accept_length: float | None = None  # measured accepted tokens per step (tuning record), if any
    attn_dp: int = 1  # DP attention: the TP group's attention in this many ranks of tp // attn_dp GPUs

    @property
    def attn_tp(self) -> int:
        """The GPUs one request's attention runs on (srt/layers/dp_attention.py
        compute_dp_attention_world_info, 0.5.9 to 0.5.23: attn_tp_size = tp_size // dp_size)."""
        return max(1, self.tp // max(1, self.attn_dp))


@dataclass(frozen=True)
class Band:
    low: float
    expected: float
    high: float

    def as_dict(self, digits: int = 1) -> dict[str, float]:
        return {"low": round(self.low, digits), "expected": round(self.expected, digits),
                "high": round(self.high, digits)}

    def text(self, unit: str) -> str:
        return f"{self.expected:.0f} {unit} ({self.low:.0f} to {self.high:.0f})"


@dataclass(frozen=True)
class Prediction:
    decode_tok_s: Band
    ttft_ms: Band
    output_tok_s: dict[int, Band]
    basis: str
    lines: tuple[str, ...] = field(default=())
    # input tok/s of one request of ``prefill_tokens`` prompt tokens (the deploy gate's prefill)
    prefill_tok_s: Band | None = None
    prefill_tokens: int | None = None
    # the fleet's factors applied, figure -> {factor, samples} (plan/calibration.py); None: the roofline alone
    calibration: dict[str, dict[str, Any]] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"decode_tok_s": self.decode_tok_s.as_dict(), "ttft_ms": self.ttft_ms.as_dict(),
                               "output_tok_s": {str(c): b.as_dict() for c, b in sorted(self.output_tok_s.items())}}
        if self.prefill_tok_s is not None:
            out.update(prefill_tok_s=self.prefill_tok_s.as_dict(), prefill_tokens=self.prefill_tokens)
        if self.calibration is not None:
            out["calibration"] = self.calibration
        out["basis"] = self.basis
        return out


def _attention_params(f: ModelFacts) -> float:
    """One attention layer's parameters. MLA as SGLang builds it (srt/models/deepseek_v2.py
    DeepseekV2AttentionMLA): the query through its low-rank down and up projections where the
    config has a q_lora_rank (else one projection), the latent down-projection with the decoupled
    RoPE key, its up-projection to every head's key (no-RoPE part) and value, and o_proj from the
    values; DeepSeek-V3's 187M per layer. Else q, k, v and o over the heads."""
    if f.mla:
        x = f.extra
        rank, rope = f.kv_lora_rank or 0, f.qk_rope_head_dim or 0
        nope = x.get("qk_nope_head_dim") or max(0, f.head_dim - rope)
        v = x.get("v_head_dim") or f.head_dim
        q_lora = x.get("q_lora_rank")
        heads = f.num_attention_heads
        q = (f.hidden_size * q_lora + q_lora * heads * f.head_dim if q_lora
             else f.hidden_size * heads * f.head_dim)
        return (q + f.hidden_size * (rank + rope) + rank * heads * (nope + v) + heads * v * f.hidden_size
                + _indexer_params(f))
    q = f.hidden_size * f.num_attention_heads * f.head_dim
    kv = 2 * f.hidden_size * f.num_key_value_heads * f.head_dim
    return q + kv + f.num_attention_heads * f.head_dim * f.hidden_size


def _indexer_params(f: ModelFacts) -> int:
    """A DeepSeek Sparse Attention layer's indexer: wq_b from the query's low rank to its heads'
    keys, wk from the hidden state to one key, weights_proj to one weight per head (0.5.15 to 0.5.23
    srt/layers/attention/dsa/dsa_indexer.py Indexer.__init__, 0.5.9 layers/attention/nsa/
    nsa_indexer.py; DeepSeek-V3.2: 14M per layer beside the attention's 187M). 0 for any other model."""
    x = f.extra
    dim, heads, q_lora = x.get("dsa_index_head_dim"), x.get("dsa_index_n_heads"), x.get("q_lora_rank")
    if not (dsa_index_bytes(f) and isinstance(dim, int) and isinstance(heads, int) and isinstance(q_lora, int)):
        return 0
    return q_lora * heads * dim + f.hidden_size * (dim + heads)


def _mamba_params(f: ModelFacts) -> int:
    """One Mamba2 mixer's parameters as SGLang builds it (srt/layers/attention/mamba/mamba.py
    MambaMixer2): in_proj hidden -> 2 x intermediate + 2 x groups x state + heads, the causal
    conv over intermediate + 2 x groups x state channels, A, D and dt_bias per head, the gated
    norm, out_proj intermediate -> hidden. 0 without the widths (``ModelFacts.extra['mamba']``)."""
    m = f.extra.get("mamba")
    if not m:
        return 0
    inner = m["mamba_num_heads"] * m["mamba_head_dim"]
    groups = 2 * m["n_groups"] * m["ssm_state_size"]
    return int(f.hidden_size * (2 * inner + groups + m["mamba_num_heads"]) + m["conv_kernel"] * (inner + groups)
               + 3 * m["mamba_num_heads"] + inner + inner * f.hidden_size)


def model_cost(f: ModelFacts, kv_cache_dtype: str | None = None) -> ModelCost:
    """Parameters (total, per token) counted from the config's shapes; bytes per parameter from
    the checkpoint's size where it is known, else from its dtype or quantization."""
    layers = f.num_hidden_layers
    # A hybrid that names each layer's kind (NemotronH: Mamba2 mixers, attention, MLP or MoE, one
    # per layer) counts each layer once, as what it is; its MLPs and experts are not gated, an up
    # and a down projection (srt/models/nemotron_h.py NemotronHMLP, "Non-gated MoE"). Every other
    # model has attention and a gated MLP (gate, up, down) or MoE in every layer.
    kinds = f.extra.get("layer_kinds")
    mats = 2 if kinds else 3
    attn_layers = kinds["attention"] if kinds else layers
    attn = _attention_params(f) * attn_layers
    mixers = _mamba_params(f) * kinds["mamba"] if kinds else 0
    embed = 2 * (f.vocab_size or 0) * f.hidden_size  # embeddings and the LM head (read at every step)
    routed, share = 0.0, 0.0  # an MoE's routed experts (ModelCost.routed_params, routed_share)
    if f.moe is not None:
        m = f.moe
        moe_layers = kinds["moe"] if kinds else layers - m.first_dense_layers
        dense_layers = kinds["mlp"] if kinds else m.first_dense_layers
        latent = f.extra.get("moe_latent_size")  # latent MoE: experts in a narrower width (modelfacts)
        expert = mats * (latent or f.hidden_size) * m.moe_intermediate_size
        shared = m.shared_experts * mats * f.hidden_size * m.moe_intermediate_size
        if m.shared_expert_intermediate_size:
            shared = mats * f.hidden_size * m.shared_expert_intermediate_size
        if latent:
            shared += 2 * f.hidden_size * latent  # the projections into and out of the latent width
        dense_mlp = mats * f.hidden_size * (f.intermediate_size or m.moe_intermediate_size) * dense_layers
        fixed = attn + mixers + embed + dense_mlp
        total = fixed + moe_layers * (m.num_experts * expert + shared)
        active = fixed + moe_layers * (m.experts_per_token * expert + shared)
        routed, share = moe_layers * m.experts_per_token * expert, m.experts_per_token / max(1, m.num_experts)
        how = (f"MoE: {total / 1e9:.1f}B parameters, {active / 1e9:.1f}B per token "
               f"({m.experts_per_token} of {m.num_experts} experts)")
    elif (nas := f.extra.get("nas_blocks")) is not None:  # DeciLM: blocks without attention, MLPs of own widths
        total = active = (_attention_params(f) * nas["attention"] + embed
                          + mats * f.hidden_size * nas["mlp_intermediate"])
        how = (f"dense: {total / 1e9:.1f}B parameters ({nas['attention']} of {layers} blocks with attention, "
               f"MLP widths per block)")
    else:
        mlp_layers = kinds["mlp"] if kinds else layers
        total = active = (attn + mixers + embed
                          + mats * f.hidden_size * (f.intermediate_size or 4 * f.hidden_size) * mlp_layers)
        how = f"dense: {total / 1e9:.1f}B parameters"
    if kinds:
        how += (f" ({kinds['attention']} attention, {kinds['mamba']} Mamba2"
                + ("" if f.extra.get("mamba") else " (not counted: config.json lacks their widths)")
                + f", {kinds['moe']} MoE, {kinds['mlp']} MLP layers)")
    method = (f.quantization.method if f.quantization else (f.dtype or "bfloat16")).lower()
    if f.total_weight_bytes and total > 0:
        bpp = min(4.5, max(0.25, f.total_weight_bytes / total))
        how += f", {bpp:.2f} B/parameter (checkpoint {f.total_weight_bytes / 1e9:.1f} GB)"
    else:
        bpp = _BYTES_PER_PARAM.get(method, 2.0)
        how += f", {bpp:.2f} B/parameter ({method})"
    kv_size = kv_dtype_bytes(f, kv_cache_dtype)
    swa_kv, swa_heads = 0.0, 0
    index_kv, topk = 0.0, 0
    if f.mla:  # a hybrid's latent on its full-attention layers alone, as sizing.kv_cell
        kv = ((f.kv_lora_rank or 0) + (f.qk_rope_head_dim or 0)) * kv_size * f.kv_layers
        if dsa_index_bytes(f) and isinstance(f.extra.get("dsa_index_topk"), int):
            index_kv, topk = float(dsa_index_bytes(f) * f.kv_layers), f.extra["dsa_index_topk"]
    else:  # keys and values of their own widths, sliding-window layers with heads of their own (sizing.kv_cell)
        e = f.extra
        kv = f.num_key_value_heads * (f.head_dim + int(e.get("v_head_dim") or f.head_dim)) * kv_size * f.kv_layers
        if f.sliding_window_layers and f.sliding_window:
            swa_dim = int(e.get("swa_head_dim") or f.head_dim)
            swa_heads = int(e.get("swa_num_key_value_heads") or f.num_key_value_heads)
            swa_kv = (swa_heads * (swa_dim + int(e.get("swa_v_head_dim") or swa_dim)) * kv_size
                      * f.sliding_window_layers)
    return ModelCost(total_params=total, active_params=active, bytes_per_param=bpp, kv_bytes_per_token=kv,
                     layers=layers, how=how, moe_layers=layers - f.moe.first_dense_layers if f.moe else 0,
                     hidden=f.hidden_size, routed_params=routed, routed_share=share, attention_params=attn,
                     kv_heads=1 if f.mla else f.num_key_value_heads, swa_kv_bytes_per_token=swa_kv,
                     swa_kv_heads=swa_heads, sliding_window=(f.sliding_window or 0) if swa_kv else 0,
                     sparse_topk=topk, index_kv_bytes_per_token=index_kv)


def accept_band(layout: Layout) -> tuple[Band, str]:
    """Expected tokens per decode step: 1 without speculative decoding; the measured accepted
    length when there is one; else the prior (ACCEPT_PRIOR), stated as such."""
    if layout.spec_steps <= 0:
        return Band(1.0, 1.0, 1.0), ""
    if layout.accept_length is not None:
        a = layout.accept_length
        return Band(a * 0.9, a, a * 1.05), f"accept length {a:.2f} (measured)"
    k = layout.spec_steps
    low, exp, high = (sum(p ** i for i in range(k + 1)) for p in ACCEPT_PRIOR)
    return Band(low, exp, high), (f"accept length {exp:.2f} (prior: {ACCEPT_PRIOR[1]:g} per draft token, "
                                  f"{k} steps; no measurement)")


def _weight_read_bytes(cost: ModelCost, layout: Layout, batch: int) -> float:
    """Weight bytes one GPU reads in one decode step of ``batch`` sequences: an MoE batch touches
    more experts than one token does. Each token picks experts_per_token of num_experts, so an
    expert is left out by all of them with probability (1 - share) ** batch, and the step reads the
    expected number of distinct experts, num_experts * (1 - (1 - share) ** batch), with routing
    taken as uniform (the routers' load balancing aims at it; a skewed one touches fewer). The
    published MoE measurements under load (MiniMax-M2.5 on 8x H100 at 100 streams, DeepSeek-R1 on
    8x H200 at 64: tests/fixtures/perf/published.yaml) were predicted 115% and 81% too fast when
    the batch was credited with half of that."""
    share = cost.routed_share
    touched = cost.routed_params
    if batch > 1 and 0 < share < 1 and cost.routed_params > 0:
        touched = cost.routed_params / share * (1 - (1 - share) ** batch)
    read = (cost.active_params - cost.routed_params + touched) / layout.tp
    return (read + _attention_replicated(cost, layout)) * cost.bytes_per_param


def _attention_replicated(cost: ModelCost, layout: Layout) -> float:
    """Attention parameters one GPU holds beyond its TP share: under DP attention each GPU holds
    its attention TP group's share (1 / attn_tp), not 1 / tp; 0 without DP attention."""
    return cost.attention_params * (layout.tp / layout.attn_tp - 1) / layout.tp


def _per_gpu(whole: float, heads: int, layout: Layout) -> float:
    """One token's KV of ``heads`` heads on one GPU. The attention TP group splits the KV heads, and
    fewer heads than ranks are replicated, one on each (configs/model_config.py get_num_kv_heads:
    max(1, total // tp)); MLA's latent is one head, whole on every rank (srt/mem_cache/memory_pool.py
    MLATokenToKVPool)."""
    if heads <= 0:
        return whole / layout.attn_tp
    return whole * max(1, heads // layout.attn_tp) / heads


def _kv_read_bytes(cost: ModelCost, layout: Layout, batch: int, context: int) -> float:
    """KV cache bytes one GPU reads in one decode step of ``batch`` sequences of ``context``
    tokens: every token's KV of the full-attention layers, the last ``sliding_window`` tokens' of
    the sliding-window layers; under DP attention each rank holds its own requests, ceil(batch /
    attn_dp) of them. Sparse attention reads the latent of its top-k tokens and the indexer's keys
    of all of them (srt/layers/attention/dsa: the indexer scores every cached token, the sparse
    MLA kernel gathers index_topk of them)."""
    latent_tokens = min(context, cost.sparse_topk) if cost.sparse_topk else context
    per_sequence = (latent_tokens * _per_gpu(cost.kv_bytes_per_token, cost.kv_heads, layout)
                    + context * _per_gpu(cost.index_kv_bytes_per_token, cost.kv_heads, layout))
    if cost.swa_kv_bytes_per_token:
        per_sequence += (min(context, cost.sliding_window)
                         * _per_gpu(cost.swa_kv_bytes_per_token, cost.swa_kv_heads, layout))
    return -(-batch // max(1, layout.attn_dp)) * per_sequence


def capacity(cost: ModelCost, gpu: GpuPerf, layout: Layout, tokens: int) -> int:
    """How many sequences of ``tokens`` one server's KV cache holds at once (at least 1; unbounded
    when the GPU's memory is not known): what one GPU's pool keeps beside its weights, over one
    token's KV cache on that GPU (a sliding-window layer's pool holds sizing.SWA_FULL_TOKENS_RATIO of
    the full pool's tokens), times the attention DP ranks (each holds its own requests)."""
    if not gpu.memory_gib or cost.kv_bytes_per_token <= 0:
        return 1 << 20
    weights = (cost.total_params / layout.tp + _attention_replicated(cost, layout)) * cost.bytes_per_param
    pool = POOL_FRACTION * gpu.memory_gib * 2 ** 30 - weights
    token = (_per_gpu(cost.kv_bytes_per_token + cost.index_kv_bytes_per_token, cost.kv_heads, layout)
             + SWA_FULL_TOKENS_RATIO * _per_gpu(cost.swa_kv_bytes_per_token, cost.swa_kv_heads, layout))
    return max(1, int(layout.attn_dp * pool / (token * tokens)))


def _collectives(cost: ModelCost, layout: Layout) -> int:
    """The TP group's collectives in one forward pass: two per layer (after attention and after
    the MLP or MoE); under DP attention the tokens are gathered into the whole group before the
    MoE and scattered back after it, and an attention TP group of more than one GPU adds its own
    all-reduce (srt/layers/dp_attention.py dp_gather_partial, dp_scatter, attn_tp_all_reduce, 0.5.9
    to 0.5.23; called from srt/layers/communicator.py LayerCommunicator to 0.5.19,
    srt/layers/layer_boundary/ops.py in 0.5.23)."""
    if layout.tp <= 1:
        return 0
    return (3 if layout.attn_dp > 1 and layout.attn_tp > 1 else 2) * cost.layers


def _tflops(gpu: GpuPerf, fp8_weights: bool) -> float:
    return (gpu.fp8_tflops if fp8_weights and gpu.fp8_tflops else gpu.bf16_tflops) * 1e12


def step_s(cost: ModelCost, gpu: GpuPerf, layout: Layout, batch: int, k: int, accept: float, prompt_tokens: int,
           output_tokens: int, fp8_weights: bool = False) -> float:
    """Seconds of one decode step of ``batch`` sequences at band ``k`` (0 low, 1 expected, 2 high
    speed), each ``accept`` tokens per step: the weights (and KV cache, at the sequences' mean
    length) read at the HBM rate or the batch's FLOPs, whichever takes longer, the prompts' share
    of compute under load, the fixed costs and the TP group's all-reduces."""
    tflops = _tflops(gpu, fp8_weights)
    context = prompt_tokens + output_tokens // 2
    comm_layers = _collectives(cost, layout)
    mem = EFFICIENCY["memory"][k] * gpu.hbm_gbps * 1e9
    read = _weight_read_bytes(cost, layout, batch) + _kv_read_bytes(cost, layout, batch, context)
    flops = batch * 2 * cost.active_params / layout.tp
    prefill = 0.0
    if batch > 1:  # under load, every request's prompt is computed too: its share per output token
        prefill = batch * accept * 2 * cost.active_params / layout.tp * prompt_tokens / max(1, output_tokens)
    fixed = (EFFICIENCY["step_s"][k] + cost.moe_layers * EFFICIENCY["moe_layer_s"][k]
             + (cost.layers - cost.moe_layers) * EFFICIENCY["dense_layer_s"][k])
    comm = comm_layers * ALLREDUCE_S[layout.link][k]
    one_way = link_gbps(gpu, layout.link) if comm_layers else None
    if one_way:  # a ring all-reduce moves 2 (tp - 1) / tp of the batch's bf16 activations per GPU
        comm += (comm_layers * batch * cost.hidden * 2 * 2 * (layout.tp - 1) / layout.tp
                 / (LINK_EFFICIENCY[k] * one_way * 1e9))
    t = (max(read / mem, flops / (EFFICIENCY["decode_compute"][k] * tflops))
         + prefill / (EFFICIENCY["compute"][k] * tflops) + fixed + comm)
    if layout.spec_steps > 0:  # the draft steps, then a verify step over the drafts
        t *= 1 + DRAFT_STEP_COST * layout.spec_steps
    return t


def ttft_s(cost: ModelCost, gpu: GpuPerf, layout: Layout, k: int, prompt_tokens: int, output_tokens: int,
           fp8_weights: bool = False) -> float:
    """Seconds to the first token of one request at band ``k``: its prompt's compute (bound by the
    tensor throughput) and one decode step."""
    return (prompt_tokens * 2 * cost.active_params / layout.tp / (EFFICIENCY["compute"][k] * _tflops(gpu, fp8_weights))
            + step_s(cost, gpu, layout, 1, k, 1.0, prompt_tokens, output_tokens, fp8_weights))


@dataclass(frozen=True)
class Served:
    """What one layout serves per GPU at a workload, expected band: the batch it runs, the
    aggregate output rate per GPU, one stream's rate at that batch and what bounds the batch."""

    tok_s_per_gpu: float
    batch: int
    tok_s_per_user: float
    bound: str
    meets_tpot: bool = True  # False: not even one stream is within the TPOT limit


#: The largest batch of decoding sequences one server is credited with (SGLang's default
#: cuda_graph_max_bs is at most 512 on the largest GPUs: srt/server_args.py _handle_gpu_memory_settings).
MAX_BATCH = 512


def served(cost: ModelCost, gpu: GpuPerf, layout: Layout, *, prompt_tokens: int, output_tokens: int,
           tpot_ms: float | None = None, fp8_weights: bool = False, kv_tokens: int | None = None,
           max_requests: int | None = None) -> Served:
    """Aggregate output tokens per second per GPU of ``layout`` (``dp`` replicas of TP ``tp``) at
    the largest batch that its KV cache holds, MAX_BATCH allows and, with ``tpot_ms``, that keeps
    one stream's time per output token within it (at least one sequence: a layout too slow for
    the limit is credited with its single stream, and its bound says so). ``kv_tokens``: the
    tokens one replica's KV cache holds as the planner sized it (else capacity()'s estimate);
    ``max_requests``: the running requests SGLang allows a replica besides (a hybrid's recurrent
    state: sizing.Budget.max_requests)."""
    accept = accept_band(layout)[0].expected
    held = (max(1, kv_tokens // (prompt_tokens + output_tokens)) if kv_tokens is not None
            else capacity(cost, gpu, layout, prompt_tokens + output_tokens))
    cap = min(held, MAX_BATCH)
    state_bound = max_requests is not None and max_requests < cap
    if max_requests is not None:
        cap = max(1, min(cap, max_requests))

    def per_token_s(batch: int) -> float:
        return step_s(cost, gpu, layout, batch, 1, accept, prompt_tokens, output_tokens, fp8_weights) / accept

    batch, bound = cap, ("the recurrent state" if state_bound else "the KV cache" if cap < MAX_BATCH
                         else f"the batch bound ({MAX_BATCH})")
    meets = True
    if tpot_ms is not None and per_token_s(cap) * 1000 > tpot_ms:
        lo, hi = 1, cap  # per_token_s grows with the batch: the largest batch within the limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if per_token_s(mid) * 1000 <= tpot_ms:
                lo = mid
            else:
                hi = mid - 1
        batch, meets = lo, per_token_s(lo) * 1000 <= tpot_ms
        bound = f"TPOT {tpot_ms:g} ms" if meets else f"TPOT {tpot_ms:g} ms, not met even by one stream"
    t = per_token_s(batch)
    return Served(tok_s_per_gpu=batch / t / layout.tp, batch=batch, tok_s_per_user=1 / t, bound=bound,
                  meets_tpot=meets)


def predict(cost: ModelCost, gpu: GpuPerf, layout: Layout, *, prompt_tokens: int = 80, output_tokens: int = 256,
            concurrency: Sequence[int] = (1,), fp8_weights: bool = False,
            prefill_tokens: int | None = None) -> Prediction:
    """The bands for one server of ``layout`` (``dp`` replicas multiply the aggregate figures);
    with ``prefill_tokens``, the input rate of one request of that many prompt tokens (one
    replica's: a request is served by one)."""
    accept, accept_note = accept_band(layout)
    tflops = _tflops(gpu, fp8_weights)
    comm_layers = _collectives(cost, layout)
    acc = (accept.low, accept.expected, accept.high)
    cap = capacity(cost, gpu, layout, prompt_tokens + output_tokens)

    def step(batch: int, k: int) -> float:
        return step_s(cost, gpu, layout, batch, k, acc[k], prompt_tokens, output_tokens, fp8_weights)

    decode = Band(*(acc[k] / step(1, k) for k in range(3)))
    ttft = Band(*(1000 * ttft_s(cost, gpu, layout, k, prompt_tokens, output_tokens, fp8_weights) for k in range(3)))
    ttft = Band(low=ttft.high, expected=ttft.expected, high=ttft.low)  # a band of times: low is the fastest
    output = {c: Band(*(layout.dp * min(c, cap) * acc[k] / step(min(c, cap), k) for k in range(3)))
              for c in sorted(set(concurrency))}
    prefill = None
    if prefill_tokens:  # compute bound, as the TTFT above, plus the request's own overhead
        prefill = Band(*(prefill_tokens / (prefill_tokens * 2 * cost.active_params / layout.tp
                                           / (EFFICIENCY["compute"][k] * tflops) + step(1, k)
                                           + EFFICIENCY["request_s"][k]) for k in range(3)))
    lines = (
        f"model: {cost.how}; KV {cost.kv_bytes_per_token / 1024:.0f} KiB/token"
        + (f" + {cost.swa_kv_bytes_per_token / 1024:.0f} KiB/token of the last {cost.sliding_window} tokens"
           if cost.swa_kv_bytes_per_token else ""),
        f"GPU: {gpu.name}, {gpu.hbm_gbps:g} GB/s HBM, {tflops / 1e12:g} TFLOPS dense"
        + (f" ({gpu.source})" if gpu.source else ""),
        f"decode: {_weight_read_bytes(cost, layout, 1) / 1e9:.2f} GB of weights per GPU per step at "
        f"{EFFICIENCY['memory'][1]:g} of HBM bandwidth + {EFFICIENCY['step_s'][1] * 1000:g} ms per step"
        + (f" + {comm_layers} all-reduces over {layout.link}" if comm_layers else "")
        + (f"; {accept_note}" if accept_note else ""),
    ) + ((f"prefill: {prefill_tokens} prompt tokens x {2 * cost.active_params / 1e9:.1f} GFLOP per token over "
          f"TP {layout.tp} at {EFFICIENCY['compute'][1]:g} of {tflops / 1e12:g} TFLOPS + "
          f"{EFFICIENCY['request_s'][1] * 1000:g} ms per request: {prefill.text('input tok/s')}",)
         if prefill is not None else ())
    basis = (f"roofline of {gpu.name} x{layout.tp} (TP {layout.tp}"
             + (f", DP attention {layout.attn_dp}" if layout.attn_dp > 1 else "")
             + (f", DP {layout.dp}" if layout.dp > 1 else "") + f"), {cost.how}"
             + (f"; {accept_note}" if accept_note else ""))
    return Prediction(decode_tok_s=decode, ttft_ms=ttft, output_tok_s=output, basis=basis, lines=lines,
                      prefill_tok_s=prefill, prefill_tokens=prefill_tokens if prefill is not None else None)
