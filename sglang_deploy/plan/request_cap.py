"""The running-request cap SGLang chooses by itself where the plan must choose it instead: under
speculative decoding with DP attention, where the cap of one server is divided across its ranks."""

from __future__ import annotations

from typing import Any, Callable

from sglang_deploy.plan import layers
from sglang_deploy.plan.intents import Resolved

#: What SGLang sets max_running_requests to under speculative decoding when nothing sets it: one cap
#: for the whole server (sglang 0.5.9 server_args.py ServerArgs._handle_speculative_decoding; 0.5.15,
#: 0.5.19 and 0.5.23 arg_groups/speculative_hook.py _handle_eagle_family and _handle_ngram), which
#: DP attention then divides across its ranks (0.5.9 model_executor/model_runner.py
#: ModelRunner.initialize: max_running_requests // dp_size with DP attention; 0.5.15
#: model_executor/model_runner_kv_cache_mixin.py _resolve_max_num_reqs; 0.5.19 and 0.5.23
#: mem_cache/kv_cache_configurator.py KVCacheConfigurator.resolve_max_num_reqs:
#: requested_per_worker = max_running_requests // attn_dp_size).
SPEC_REQUEST_CAP = 48
#: The algorithms those functions cap (NEXTN is EAGLE by another name in every release).
SPEC_CAPPED_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"})
SPEC_CAP_SOURCE = (
    "sglang 0.5.9 server_args.py ServerArgs._handle_speculative_decoding and model_executor/model_runner.py "
    "ModelRunner.initialize; 0.5.15 arg_groups/speculative_hook.py _handle_eagle_family and "
    "model_executor/model_runner_kv_cache_mixin.py _resolve_max_num_reqs; 0.5.19, 0.5.23 "
    "arg_groups/speculative_hook.py _handle_eagle_family and mem_cache/kv_cache_configurator.py "
    "KVCacheConfigurator.resolve_max_num_reqs")


def under_speculative_decoding(resolved: dict[str, Resolved], layer: str) -> None:
    """DP attention with speculative decoding and no max_running_requests: SGLang would cap the
    server at 48 running requests and give each DP-attention rank 48 // ranks (6 of 8 ranks), which
    throttles the batch DP attention is for; ``layer`` sets 48 per rank instead (SPEC_REQUEST_CAP).
    A value any layer set, None included, stands; SGLang still bounds each rank by its KV cache."""
    algo = str(resolved["speculative_algorithm"].value or "").upper()
    attn_dp = resolved["attn_dp_size"].value
    cap = resolved["max_running_requests"]
    if (algo not in SPEC_CAPPED_ALGORITHMS or not isinstance(attn_dp, int) or attn_dp <= 1
            or cap.value is not None or cap.layer != layers.DEFAULT):
        return
    value = SPEC_REQUEST_CAP * attn_dp
    resolved["max_running_requests"] = Resolved(
        "max_running_requests", value, layer,
        f"speculative decoding ({algo}) with DP attention over {attn_dp} ranks: unset, SGLang would cap the "
        f"server at {SPEC_REQUEST_CAP} running requests and DP attention would divide them, "
        f"{SPEC_REQUEST_CAP // attn_dp} per rank; set to {SPEC_REQUEST_CAP} per rank x {attn_dp} = {value} for "
        "throughput, the batch DP attention is for, with both kept (SGLang still bounds each rank by its KV "
        "cache; set sglang_intents.max_running_requests to choose another)", SPEC_CAP_SOURCE)


#: Where SGLang 0.5.9 keeps a hybrid model's draft states for every allowed request first.
DRAFT_STATES_SOURCE = "sglang 0.5.9 model_executor/model_runner_kv_cache_mixin.py handle_max_mamba_cache"


def for_draft_states(resolved: dict[str, Resolved], layer: str, budget_at: Callable[[int | None], Any]) -> None:
    """A hybrid linear-attention model under speculative decoding on SGLang 0.5.9, whose memory
    keeps every allowed request's draft states (48 unless set) before it sizes the recurrent state:
    where the slots left then allow fewer requests, ``layer`` sets the cap they allow, so that the
    memory of states no request can use goes to the state slots and the KV cache instead.
    ``budget_at(cap)``: the sizing.Budget at that max_running_requests (its ``draft_cap``). A value
    another layer set, None included, stands."""
    cap = resolved["max_running_requests"]
    if not ((cap.value is None and cap.layer == layers.DEFAULT) or cap.layer == layer):
        return
    ranks = resolved["attn_dp_size"].value
    ranks = ranks if isinstance(ranks, int) and ranks > 1 else 1
    before = budget_at(cap.value if cap.value is not None else SPEC_REQUEST_CAP * ranks)
    fit = before.draft_cap if before is not None else None
    if fit is None or fit < 1:
        return
    after = budget_at(fit * ranks)
    per_rank = before.running_cap
    resolved["max_running_requests"] = Resolved(
        "max_running_requests", fit * ranks, layer,
        f"SGLang 0.5.9 keeps speculative decoding's {before.draft_tokens} draft states per request for "
        f"{per_rank} running requests per rank before it sizes the recurrent state: their "
        f"{before.state_per_request * before.draft_tokens * per_rank / 2 ** 30:.1f} GiB leave state slots for "
        f"{before.max_requests} requests and a KV cache of ~{before.kv_tokens:,} tokens; at {fit} per rank the "
        f"slots hold {after.max_requests} and the KV cache ~{after.kv_tokens:,}", DRAFT_STATES_SOURCE)

