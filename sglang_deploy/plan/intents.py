"""The plan's stable vocabulary: what an operator wants, not how a version spells it.

Each intent has a kind, the value SGLang itself would use (the lowest layer,
``sglang-default``) and why. Profiles, rules and inventory data set intents by
these names; the dialects compile them to argv for one SGLang version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sglang_deploy.errors import PlanError

# RDMA device names (the kernel's ib_device names: letters, digits, '_', '-', '.'), at most 16 of them
_IB_DEVICES = re.compile(r"[A-Za-z0-9_.-]{1,64}(,[A-Za-z0-9_.-]{1,64}){0,15}\Z")

@dataclass(frozen=True)
class IntentDef:
    name: str
    kind: str  # bool | int | float | str | choice | tp
    default: Any
    default_reason: str
    doc: str
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    nullable: bool = False


@dataclass(frozen=True)
class Resolved:
    """One intent's final value, the layer that set it and why."""

    name: str
    value: Any
    layer: str  # the name of one of layers.LAYERS (sglang-default ... trial): lowest first, a later one wins
    reason: str
    source: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "value": self.value, "layer": self.layer, "reason": self.reason}
        if self.source:
            out["source"] = self.source
        return out


def _d(name: str, kind: str, default: Any, reason: str, doc: str, **kw: Any) -> IntentDef:
    return IntentDef(name=name, kind=kind, default=default, default_reason=reason, doc=doc, **kw)


SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")

INTENTS: dict[str, IntentDef] = {
    d.name: d
    for d in [
        # parallelism
        _d("tp_size", "tp", 1, "SGLang runs tensor parallel size 1 unless told",
           "tensor parallel size; 'all' = every GPU the server uses", minimum=1),
        _d("dp_size", "int", 1, "SGLang runs one replica of the model unless told",
           "data-parallel replicas in one server (--dp-size), each over tp_size GPUs: tp_size x dp_size GPUs "
           "serve", minimum=1),
        _d("attn_dp_size", "int", 1, "SGLang runs attention without data parallelism",
           "data-parallel attention size (1 = off), inside the TP group (no more GPUs); for MLA models at high "
           "concurrency", minimum=1),
        _d("nnodes", "int", 1, "SGLang runs on one node unless told",
           "hosts the instance spans (from sglang_tp_group, never set directly)", minimum=1),
        _d("node_rank", "int", 0, "SGLang's single node is rank 0",
           "this host's rank in its tp group (inventory order; from sglang_tp_group)"),
        _d("dist_init_addr", "str", None, "a single-node SGLang rendezvous stays on this host",
           "rank 0's HOST:PORT where the tp group's members meet (from sglang_tp_group)", nullable=True),
        # prefill/decode disaggregation (every supported release: the catalogs list these four options
        # with these defaults; srt/server_args.py ServerArgs, 0.5.23 srt/arg_groups/pd_disaggregation_hook.py)
        _d("disaggregation_mode", "choice", None, "SGLang serves prefill and decode in one server unless told",
           "this server's role behind a prefill/decode gateway (from sglang_role, never set directly)",
           choices=("prefill", "decode"), nullable=True),
        _d("disaggregation_transfer_backend", "choice", "mooncake", "SGLang moves the KV cache with Mooncake unless "
           "told (--disaggregation-transfer-backend's default)", "how a prefill server's KV cache reaches its "
           "decode server: mooncake (RDMA), mooncake_tcp (from 0.5.15: Mooncake over TCP) or nixl",
           choices=("mooncake", "mooncake_tcp", "nixl")),
        _d("disaggregation_bootstrap_port", "int", 8998, "SGLang's prefill server takes KV transfer requests on "
           "port 8998 unless told", "the port a prefill server's bootstrap server listens on (the gateway "
           "sends it to decode with every request)", minimum=1),
        _d("disaggregation_ib_device", "str", None, "Mooncake picks the RDMA devices itself",
           "RDMA device(s) for the KV transfer, e.g. mlx5_0 or mlx5_0,mlx5_1", nullable=True),
        _d("ep_size", "int", 1, "SGLang runs MoE experts without expert parallelism",
           "expert parallel size for MoE models (1 = off)", minimum=1),
        # memory and batching
        _d("mem_fraction_static", "float", None, "SGLang sizes the static memory pool from GPU memory at start",
           "fraction of GPU memory for weights + KV cache, 0 < x < 1", nullable=True),
        _d("context_length", "int", None, "SGLang takes the model's own context length",
           "maximum context length", nullable=True, minimum=1),
        _d("chunked_prefill_size", "int", None,
           "SGLang picks it from GPU memory (server_args.py _handle_gpu_memory_settings)",
           "prefill chunk size in tokens", nullable=True, minimum=1),
        _d("max_running_requests", "int", None, "SGLang derives it from the KV cache size",
           "maximum concurrently running requests", nullable=True, minimum=1),
        # CUDA graphs
        _d("cuda_graph", "bool", True, "SGLang captures CUDA graphs by default",
           "false turns every CUDA graph off (debugging only)"),
        _d("cuda_graph_max_bs_decode", "int", None,
           "SGLang picks it from GPU memory and TP (server_args.py _handle_gpu_memory_settings)",
           "largest decode batch captured as a CUDA graph", nullable=True, minimum=1),
        _d("prefill_cuda_graph", "choice", "default", "left to SGLang: opt-in in 0.5.9, on by default from 0.5.15 "
           "except models it auto-disables", "piecewise/prefill CUDA graph: default | on (even where SGLang "
           "would auto-disable it) | off", choices=("default", "on", "off")),
        # communication
        _d("custom_all_reduce", "bool", True, "SGLang uses its custom allreduce kernel by default",
           "SGLang's custom allreduce (false: NCCL only)"),
        _d("p2p_check", "bool", False, "SGLang skips the real GPU P2P test unless asked (distributed/bootstrap.py)",
           "run SGLang's GPU peer-to-peer test before using custom allreduce"),
        _d("nvls", "bool", False, "SGLang sets NCCL_NVLS_ENABLE=0 unless --enable-nccl-nvls (entrypoints/engine.py)",
           "NCCL NVLink SHARP (needs Hopper+ and NVSwitch)"),
        _d("nccl_p2p_disable", "bool", False, "NCCL uses peer-to-peer transfers where the hardware offers them",
           "NCCL_P2P_DISABLE=1 in /etc/nccl.conf"),
        _d("nccl_debug", "choice", None, "NCCL logs only errors unless NCCL_DEBUG is set",
           "NCCL_DEBUG level", choices=("VERSION", "WARN", "INFO", "TRACE"), nullable=True),
        # scheduling and model features
        _d("single_batch_overlap", "bool", False, "SGLang runs without single-batch overlap by default",
           "overlap MoE communication with compute inside one batch (MoE + DeepEP only)"),
        _d("text_only", "bool", False, "SGLang loads every part of a multimodal model",
           "serve a vision-language model for text only, without loading its vision tower"),
        _d("enable_multimodal", "bool", False, "SGLang serves Llama 4, Gemma 3 and Step3-VL (and Inkling from "
           "0.5.19) text-only unless --enable-multimodal (configs/model_config.py mm_disabled_models)",
           "serve the vision tower of a multimodal model SGLang would serve text-only (--enable-multimodal)"),
        _d("mamba_cache_strategy", "choice", "default", "left to SGLang (0.5.9: auto = no_buffer, which turns the "
           "radix cache off under speculative decoding; 0.5.15+: auto picks extra_buffer where it can)",
           "prefix-cache strategy for hybrid linear-attention models: default | no_buffer | extra_buffer",
           choices=("default", "no_buffer", "extra_buffer")),
        _d("speculative_algorithm", "choice", None, "SGLang decodes without speculation unless told",
           "speculative decoding algorithm (NEXTN = the model's own MTP heads)",
           choices=SPEC_ALGORITHMS, nullable=True),
        _d("speculative_num_steps", "int", None, "SGLang's speculative default is 3 steps",
           "draft steps per verify", nullable=True, minimum=1),
        _d("speculative_eagle_topk", "int", None, "SGLang's speculative default is top-k 1",
           "draft branches per step", nullable=True, minimum=1),
        _d("speculative_num_draft_tokens", "int", None, "SGLang's speculative default is 4 (steps + 1 at top-k 1)",
           "draft tokens verified per step", nullable=True, minimum=1),
        _d("attention_backend", "str", None, "SGLang picks the attention backend per architecture "
           "(arg_groups/model_override_base.py)", "attention backend, e.g. flashinfer, fa3, triton", nullable=True),
        _d("kv_cache_dtype", "str", "auto", "SGLang stores the KV cache in the model's dtype",
           "KV cache dtype: auto, fp8_e4m3, fp8_e5m2, bf16 ..."),
        _d("quantization", "str", None, "SGLang uses the checkpoint's own quantization config",
           "online quantization method, e.g. fp8", nullable=True),
        _d("trust_remote_code", "bool", False, "SGLang does not run code shipped with a model unless told",
           "allow the model repository's own Python code"),
        _d("reasoning_parser", "str", None, "SGLang returns reasoning text inline", "reasoning parser name",
           nullable=True),
        _d("tool_call_parser", "str", None, "SGLang does not parse tool calls unless told", "tool-call parser name",
           nullable=True),
        _d("enable_metrics", "bool", False, "SGLang serves /metrics only with --enable-metrics",
           "Prometheus metrics at /metrics"),
        _d("served_model_name", "str", None, "SGLang names the model by its path", "name in /v1/models",
           nullable=True),
        _d("host", "str", "127.0.0.1", "SGLang binds to loopback by default", "address to listen on"),
        _d("port", "int", 30000, "SGLang listens on port 30000 by default", "TCP port", minimum=1),
        _d("log_level", "choice", "info", "SGLang logs at info", "log level",
           choices=("debug", "info", "warning", "error", "critical")),
    ]
}


TP_GROUP_INTENTS = ("nnodes", "node_rank", "dist_init_addr")
"""Set by the planner from the host's tp group (sglang_tp_group), never by inventory intents:
a rank written by hand is a rank that disagrees with the others."""
ROLE_INTENTS = ("disaggregation_mode",)
"""Set by the planner from the host's ``sglang_role``: the gateway's mode and its registration of the
server follow the role, so the role is said once, where the gateway reads it too."""
DERIVED_INTENTS = TP_GROUP_INTENTS + ROLE_INTENTS


def check_value(host: str, field: str, name: str, value: Any) -> Any:
    """Validate (and normalise) one intent value; raise PlanError naming the field."""
    d = INTENTS.get(name)
    if d is None:
        known = ", ".join(sorted(n for n in INTENTS if n not in DERIVED_INTENTS))
        raise PlanError(host, field, f"unknown intent {name!r}; known intents: {known}")
    if name in TP_GROUP_INTENTS:
        raise PlanError(host, field, f"{name} is derived from the host's tp group: set sglang_tp_group (and "
                                     "sglang_dist_init_port / sglang_node_address) instead")
    if name in ROLE_INTENTS:
        raise PlanError(host, field, f"{name} is derived from the host's role: set sglang_role (prefill or decode) "
                                     "instead")
    if value is None:
        if d.nullable:
            return None
        raise PlanError(host, field, f"{name} cannot be null")
    kind = d.kind
    if kind == "tp":
        if value == "all":
            return value
        kind = "int"
    if kind == "bool":
        if not isinstance(value, bool):
            raise PlanError(host, field, f"{name} must be true or false, got {value!r}")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise PlanError(host, field, f"{name} must be an integer, got {value!r}")
        if d.minimum is not None and value < d.minimum:
            raise PlanError(host, field, f"{name} must be at least {int(d.minimum)}, got {value}")
        if name in ("port", "disaggregation_bootstrap_port") and value > 65535:
            raise PlanError(host, field, f"{name} must be at most 65535, got {value}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PlanError(host, field, f"{name} must be a number, got {value!r}")
        if name == "mem_fraction_static" and not 0 < value < 1:
            raise PlanError(host, field, f"mem_fraction_static must be between 0 and 1 (exclusive), got {value}")
        return float(value)
    if kind == "choice":
        if name == "speculative_algorithm" and isinstance(value, str):
            value = value.upper()
        if value not in d.choices:
            raise PlanError(host, field, f"{name} must be one of {', '.join(map(str, d.choices))}, got {value!r}")
        return value
    if kind == "str":
        if not isinstance(value, str) or not value:
            raise PlanError(host, field, f"{name} must be a non-empty string, got {value!r}")
        if name == "disaggregation_ib_device" and not _IB_DEVICES.match(value):
            raise PlanError(host, field, f"{name} must name RDMA devices as /sys/class/infiniband does, comma "
                                         f"separated (mlx5_0 or mlx5_0,mlx5_1), got {value[:80]!r}")
        return value
    raise AssertionError(kind)
