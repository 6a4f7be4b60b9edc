"""How SGLang splits a hybrid linear-attention model's memory after the weights between the
recurrent-state slots, speculative decoding's intermediate states and the KV cache, release by
release, and how many running requests those slots allow.

The ratio split itself (mamba_full_memory_ratio, state : KV) is the same in every supported
release; what differs is what the state share must also hold:

- the slots a running request needs (``slots_per_request``): 3, plus the extra_buffer strategy's
  tracking slots; 1 when the radix cache is off;
- the draft steps' intermediate states under speculative decoding, one per draft token of each
  running request, which 0.5.9 takes before the split and 0.5.15 on take out of the state share
  (``pool``).

Pure: numbers in, numbers out (sizing.Budget reads them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from sglang_deploy.plan.modelfacts import ModelFacts
from sglang_deploy.plan.request_cap import SPEC_REQUEST_CAP as SPEC_REQUEST_CAP  # sizing.Budget's default too

#: SGLang's default mamba_full_memory_ratio, the same in every supported release (0.5.9, 0.5.15,
#: 0.5.19: server_args.py ServerArgs.mamba_full_memory_ratio = 0.9; 0.5.23:
#: arg_groups/fields/schedule.py, fallback=0.9). A hybrid linear-attention model's memory after
#: the weights is split between its recurrent state and its KV cache in this ratio, state : KV
#: (0.5.9/0.5.15: model_executor/model_runner_kv_cache_mixin.py handle_max_mamba_cache; 0.5.19/0.5.23:
#: mem_cache/kv_cache_configurator.py _handle_max_mamba_cache, the ratio-based branch:
#: mamba_budget = rest x ratio / (1 + ratio), max_mamba_cache_size = that over the per-request
#: state, and the KV cache gets the rest less those states, rest / (1 + ratio) to within one
#: request's state). Under speculative decoding the share also holds the draft steps'
#: intermediate states (pool).
MAMBA_FULL_MEMORY_RATIO = 0.9

#: Slots per running request with the radix cache and no extra buffer (MAMBA_CACHE_SIZE_MAX_RUNNING_
#: REQUESTS_RATIO = 3: 0.5.9/0.5.15 model_executor/model_runner_kv_cache_mixin.py, 0.5.19/0.5.23
#: mem_cache/kv_cache_configurator.py).
BASE_SLOTS = 3

#: Architectures whose strategy SGLang resolves to extra_buffer when it is left to it (auto), the
#: overlap schedule on and the linear-attention backend triton, both the defaults (arg_groups/
#: overrides.py _mamba_radix_cache_resolution and supports_mamba_cache_extra_buffer:
#: _MAMBA_EXTRA_BUFFER_ARCHS; no linear_attn_model_registry spec opts in through
#: support_mamba_cache_extra_buffer in these releases). 0.5.9's auto is no_buffer.
_EXTRA_BUFFER_0515 = frozenset({
    "BailingMoeV2_5ForCausalLM", "FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM",
    "InternS2PreviewForConditionalGeneration", "MiniCPMV4_6ForConditionalGeneration", "NemotronHForCausalLM",
    "NemotronHPuzzleForCausalLM", "Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration"})
_EXTRA_BUFFER_0519 = _EXTRA_BUFFER_0515 | {
    "BailingMoeV3ForCausalLM", "KimiK3ForConditionalGeneration", "KimiLinearForCausalLM", "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForCausalLM"}
_EXTRA_BUFFER_0523 = _EXTRA_BUFFER_0519 | {
    "BailingMoeV3VLForConditionalGeneration", "Glm5NextForConditionalGeneration", "InklingForConditionalGeneration",
    "InklingForConditionalGenerationMTP", "MiniCPMV4_7ForConditionalGeneration", "NemotronH_Omni_Reasoning_V3",
    "Qwen4ExpForConditionalGeneration"}
EXTRA_BUFFER_ARCHS = {(0, 5, 15): _EXTRA_BUFFER_0515, (0, 5, 19): _EXTRA_BUFFER_0519, (0, 5, 23): _EXTRA_BUFFER_0523}


def _state_shape(facts: ModelFacts) -> tuple[int, int, int, int, int, int] | None:
    """A hybrid's recurrent mixer as SGLang's Mamba2StateShape.create takes it (configs/mamba_utils.py):
    (intermediate, groups, heads, head_dim, state_size, conv_kernel). NemotronH's Mamba2 mixers
    (configs/nemotron_h.py mamba2_cache_params), and Qwen3-Next's and Qwen3.5's Gated DeltaNet
    (configs/qwen3_next.py mamba2_cache_params: value heads x value head dim, key heads as the
    groups, the key head dim as the state); None for anything else."""
    e = facts.extra
    m = e.get("mamba")
    if m:
        return (m["mamba_num_heads"] * m["mamba_head_dim"], m["n_groups"], m["mamba_num_heads"], m["mamba_head_dim"],
                m["ssm_state_size"], m["conv_kernel"])
    keys = ("linear_num_value_heads", "linear_value_head_dim", "linear_num_key_heads", "linear_key_head_dim",
            "linear_conv_kernel_dim")
    if all(isinstance(e.get(k), int) and not isinstance(e.get(k), bool) and 0 < e[k] <= 1 << 16 for k in keys):
        heads, head_dim, groups, key_dim, kernel = (e[k] for k in keys)
        return heads * head_dim, groups, heads, head_dim, key_dim, kernel
    return None


def recurrent_state_per_request(facts: ModelFacts, tp: int) -> int:
    """Bytes of recurrent state one request holds on one GPU of TP ``tp`` (SGLang's
    BaseLinearStateParams.mamba_cache_per_req, configs/mamba_utils.py): per linear layer the conv
    state, (intermediate + 2 x groups x state) / tp channels x (kernel - 1) in bfloat16
    (SGLANG_MAMBA_CONV_DTYPE's default), and the SSM state, heads / tp x head_dim x state in the
    config's mamba_ssm_dtype, else float32 (mamba2_state_dtype). 0 when the shape is not known."""
    if not facts.linear_attention_layers:
        return 0
    kda = facts.extra.get("kda")
    if kda:
        return _kda_state_per_request(kda, tp) * facts.linear_attention_layers
    shape = _state_shape(facts)
    if shape is None:
        return 0
    inter, groups, heads, head_dim, state, kernel = shape
    if groups % tp:
        groups += tp - groups  # extra_groups_for_head_shards: the groups replicated to match the heads' shards
    conv = (inter + 2 * groups * state) // tp * (kernel - 1) * 2
    ssm = max(1, heads // tp) * head_dim * state * (2 if facts.extra.get("mamba_ssm_dtype") in ("bfloat16",
                                                                                                 "float16") else 4)
    return (conv + ssm) * facts.linear_attention_layers


def _kda_state_per_request(kda: dict[str, int], tp: int) -> int:
    """One Kimi Delta Attention layer's state of one request on one GPU, as SGLang sizes it
    (configs/mamba_utils.py KimiLinearStateShape.create, the same element counts 0.5.9 to 0.5.23):
    the short convolutions of q, k and v, 3 x heads x head_dim / tp channels x (kernel - 1) in
    bfloat16, and the recurrent state, heads / tp x head_dim x head_dim in float32
    (KimiLinearCacheParams takes mamba2_state_dtype's default: configs/kimi_linear.py passes no config)."""
    heads, head_dim, kernel = (int(kda[k]) for k in ("num_heads", "head_dim", "short_conv_kernel_size"))
    conv = 3 * (heads * head_dim // tp) * (kernel - 1) * 2
    return conv + max(1, heads // tp) * head_dim * head_dim * 4


def recurrent_ratio(facts: ModelFacts) -> float:
    """The state : KV ratio SGLang splits a hybrid linear-attention model's memory in
    (MAMBA_FULL_MEMORY_RATIO), 0 for a model without linear-attention layers."""
    return MAMBA_FULL_MEMORY_RATIO if facts.linear_attention_layers > 0 else 0.0


def extra_buffer(arch: str | None, release: tuple[int, ...], strategy: str | None) -> bool:
    """Whether SGLang runs the extra_buffer strategy: asked for, or left to it where it picks it."""
    if strategy == "extra_buffer":
        return True
    if strategy not in (None, "default") or release < (0, 5, 15):
        return False
    lists = [archs for since, archs in EXTRA_BUFFER_ARCHS.items() if since <= release]
    return arch in lists[-1]


def slots_per_request(arch: str | None, release: tuple[int, ...], strategy: str | None, spec: bool) -> int:
    """The state slots SGLang counts per running request (its mamba ratio: 0.5.9
    model_runner_kv_cache_mixin.py ModelRunner's max_num_reqs, 0.5.15 _calculate_mamba_ratio,
    0.5.19/0.5.23 mem_cache/kv_cache_configurator.py _calculate_mamba_ratio with
    allocation_sizing.py get_mamba_tracking_slots): 3, plus the extra buffer's tracking slots,
    2 with the overlap schedule (on by default) and, in 0.5.9, 1 under speculative decoding; 1 in
    all when 0.5.9's no_buffer turns the radix cache off under speculative decoding
    (server_args.py _handle_mamba_radix_cache)."""
    if extra_buffer(arch, release, strategy):
        return BASE_SLOTS + (1 if spec and release < (0, 5, 15) else 2)
    if spec and release < (0, 5, 15):
        return 1
    return BASE_SLOTS


@dataclass(frozen=True)
class StatePool:
    """The recurrent-state share of one GPU's pool, as SGLang sizes it."""

    #: max_mamba_cache_size: the slots
    slots: int
    #: bytes the slots and the intermediate states hold
    state_bytes: float
    #: bytes 0.5.9 takes for the intermediate states before the split (the KV share is after them)
    taken_first: float
    #: running requests the slots allow (slots // slots per request)
    max_requests: int


def pool(rest: float, ratio: float, per_request: int, release: tuple[int, ...], slots_per_req: int,
         draft_tokens: int = 0, running_cap: int = SPEC_REQUEST_CAP) -> StatePool:
    """The state share of ``rest`` bytes (the pool after the weights) at state : KV ``ratio`` for a
    state of ``per_request`` bytes, under ``draft_tokens`` per step of speculative decoding (0:
    none) with ``running_cap`` running requests per attention-DP rank (SGLang's 48 when unset).
    0.5.9 (model_runner_kv_cache_mixin.py handle_max_mamba_cache): the intermediate states of
    every allowed request first, then slots = the ratio's share // per request. 0.5.15 (the same
    file): slots = share // (per request x (1 + D / slots per request)), the intermediate states
    of min(cap, slots // slots per request) requests out of the share. 0.5.19 and 0.5.23
    (mem_cache/kv_cache_configurator.py _handle_max_mamba_cache, the ratio-based branch): the
    same with each pool's padding slot counted."""
    d, p = draft_tokens, per_request
    padded = release >= (0, 5, 19)
    taken = float(p * running_cap * d) if d and release < (0, 5, 15) else 0.0
    share = max(0.0, rest - taken) * ratio / (1 + ratio)
    if d and release >= (0, 5, 15):
        slots = int((share - (p * (1 + d) if padded else 0)) // (p * (1 + d / slots_per_req)))
    else:
        slots = int((share - (p if padded else 0)) // p)
    slots = max(0, slots)
    inter = p * (min(running_cap, slots // slots_per_req) + padded) * d if d and release >= (0, 5, 15) else 0
    held = (slots + padded) * p + inter
    return StatePool(slots=slots, state_bytes=float(held), taken_first=taken, max_requests=slots // slots_per_req)


def draft_cap(rest: float, ratio: float, per_request: int, release: tuple[int, ...], slots_per_req: int,
              draft_tokens: int) -> int | None:
    """0.5.9 only, under speculative decoding: the most running requests per attention-DP rank
    whose draft states, taken first (``pool``), leave state slots for as many requests; None
    where SGLang sizes the two together (0.5.15 on), without draft tokens, or when the 48 SGLang
    keeps them for already fit."""
    if not draft_tokens or release >= (0, 5, 15):
        return None
    lo, hi = 0, SPEC_REQUEST_CAP
    while lo < hi:  # the requests the slots allow fall as the cap rises
        mid = (lo + hi + 1) // 2
        if pool(rest, ratio, per_request, release, slots_per_req, draft_tokens, mid).max_requests >= mid:
            lo = mid
        else:
            hi = mid - 1
    return lo if lo < SPEC_REQUEST_CAP else None


def budget_args(values: Mapping[str, Any]) -> dict[str, Any]:
    """sizing.budget's speculative and state-strategy arguments from a plan's intent values (the
    declared ones while the layout is chosen, the resolved ones after): the draft tokens per step
    (speculative_num_draft_tokens, else steps + 1, a chain at top-k 1, with the steps SGLang's 3
    where none are set: layout_rank.draft_steps), the strategy, and the running requests per
    attention-DP rank (max_running_requests over the ranks; unset, None: what the plan sets,
    SGLang's 48 under speculative decoding or fewer, request_cap)."""
    algo = str(values.get("speculative_algorithm") or "").upper()
    draft = 0
    if algo and algo != "NONE":
        steps = _positive(values.get("speculative_num_steps")) or 3
        draft = _positive(values.get("speculative_num_draft_tokens")) or steps + 1
    cap, ranks = _positive(values.get("max_running_requests")), _positive(values.get("attn_dp_size")) or 1
    return {"draft_tokens": draft, "mamba_strategy": values.get("mamba_cache_strategy"),
            "running_cap": max(1, cap // ranks) if cap else None}


def _positive(value: Any) -> int:
    """``value`` when it is a positive int, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
