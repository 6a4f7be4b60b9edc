"""A checkpoint's metadata as typed model facts: what the planner sizes and checks against.

Pure: the I/O that fetches ``config.json``, the safetensors index and
``generation_config.json`` (a local directory, the Hub, the controller's cache)
lives in glue (``roles/model_metadata.py``); this module only reads the dicts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class MoeFacts:
    num_experts: int                 # routed experts
    experts_per_token: int
    moe_intermediate_size: int       # per expert
    shared_experts: int = 0
    first_dense_layers: int = 0      # leading layers with a dense MLP (DeepSeek's first_k_dense_replace)


@dataclass(frozen=True)
class QuantFacts:
    method: str                                # quantization_config.quant_method: fp8, mxfp4, awq, ...
    fmt: str | None = None                     # e.g. "e4m3", "float-quantized"
    weight_block_size: tuple[int, int] | None = None   # (block_n, block_k) of block-wise FP8
    modules_not_converted: tuple[str, ...] = ()


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
    max_position_embeddings: int | None = None
    vocab_size: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FactsUnavailable:
    """No source answered for the model: the plan says why in one line and falls back to
    the model profile (it never guesses sizes)."""

    model: str
    reason: str


#: What the glue hands the planner for one host: the facts, or why there are none.
FactsLookup = ModelFacts | FactsUnavailable
