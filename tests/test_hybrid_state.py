"""A hybrid linear-attention model's recurrent-state share as SGLang sizes it, release by release
(sglang_deploy/plan/hybrid_state.py): the slots a request takes, speculative decoding's draft
states, and the cap 0.5.9 needs for them. Worked against SGLang's own formulas, then as properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_deploy.plan import hybrid_state, sizing
from sglang_deploy.plan.hybrid_state import budget_args, draft_cap, pool, slots_per_request
from tests.recorded_facts import QWEN36_27B

V09, V15, V19, V23 = (0, 5, 9), (0, 5, 15), (0, 5, 19), (0, 5, 23)
MIB, GIB = 1 << 20, 1 << 30
QWEN35 = "Qwen3_5ForConditionalGeneration"


def test_the_slots_a_request_takes_follow_the_strategy_sglang_runs():
    # 0.5.9: auto is no_buffer; under speculative decoding it turns the radix cache off (1 slot)
    assert [slots_per_request(QWEN35, V09, s, spec) for s in (None, "no_buffer", "extra_buffer")
            for spec in (False, True)] == [3, 1, 3, 1, 5, 4]
    # 0.5.15 on: auto picks extra_buffer for the architectures SGLang lists, with the overlap
    # schedule's two tracking slots, speculative decoding or not
    for release in (V15, V19, V23):
        assert slots_per_request(QWEN35, release, None, True) == 5
        assert slots_per_request(QWEN35, release, "no_buffer", True) == 3
        assert slots_per_request("SomeHybridForCausalLM", release, "default", False) == 3
    # Kimi Linear joins the list in 0.5.19, Qwen4Exp in 0.5.23
    assert [slots_per_request("KimiLinearForCausalLM", r, None, False) for r in (V15, V19, V23)] == [3, 5, 5]
    assert [slots_per_request("Qwen4ExpForConditionalGeneration", r, None, False) for r in (V19, V23)] == [3, 5]


def test_each_release_sizes_the_draft_states_its_own_way():
    rest, p, d, q = 20 * GIB, 64 * MIB, 4, 5
    share = rest * 0.9 / 1.9
    # 0.5.9: 48 requests' draft states first, then the ratio's share of what is left, whole slots
    s = pool(rest, 0.9, p, V09, 4, d)
    taken = p * 48 * d
    assert s.taken_first == taken and s.slots == int((rest - taken) * 0.9 / 1.9 // p)
    assert s.max_requests == s.slots // 4 and s.state_bytes == s.slots * p
    # 0.5.15: slots and draft states out of the share together
    s = pool(rest, 0.9, p, V15, q, d)
    assert s.slots == int(share // (p * (1 + d / q))) and s.taken_first == 0
    assert s.state_bytes == s.slots * p + p * min(48, s.slots // q) * d
    # 0.5.19 and 0.5.23: the same with each pool's padding slot
    for release in (V19, V23):
        s = pool(rest, 0.9, p, release, q, d)
        assert s.slots == int((share - p * (1 + d)) // (p * (1 + d / q)))
        assert s.state_bytes == (s.slots + 1) * p + p * (min(48, s.slots // q) + 1) * d
    # without speculative decoding: whole slots of the share (one for padding from 0.5.19)
    assert pool(rest, 0.9, p, V15, 3).slots == int(share // p)
    assert pool(rest, 0.9, p, V23, 3).slots == int((share - p) // p)


@settings(max_examples=200, deadline=None)
@given(rest=st.integers(1 * GIB, 200 * GIB), per_request=st.integers(1 * MIB, 512 * MIB),
       release=st.sampled_from([V09, V15, V19, V23]), q=st.sampled_from([1, 3, 4, 5]), d=st.integers(1, 16))
def test_draft_states_never_add_requests_and_never_hold_more_than_the_pool(rest, per_request, release, q, d):
    without, with_ = pool(rest, 0.9, per_request, release, q), pool(rest, 0.9, per_request, release, q, d)
    assert with_.max_requests <= without.max_requests
    # the slots and the draft states kept with them stay within the ratio's share, to the padding
    # slots (0.5.9's draft states come first, whatever they take: more than the rest fails there)
    share = max(0, rest - with_.taken_first) * 0.9 / 1.9
    assert with_.state_bytes <= share + per_request * (1 + d)
    more = pool(rest, 0.9, per_request, release, q, d + 1)
    assert more.max_requests <= with_.max_requests


@settings(max_examples=200, deadline=None)
@given(rest=st.integers(1 * GIB, 100 * GIB), per_request=st.integers(1 * MIB, 256 * MIB),
       q=st.sampled_from([1, 4, 5]), d=st.integers(1, 8))
def test_the_0_5_9_cap_is_the_most_requests_the_slots_it_leaves_allow(rest, per_request, q, d):
    cap = draft_cap(rest, 0.9, per_request, V09, q, d)
    at = pool(rest, 0.9, per_request, V09, q, d, 48)
    if cap is None:
        assert at.max_requests >= 48  # the 48 SGLang keeps them for already fit
        return
    assert pool(rest, 0.9, per_request, V09, q, d, cap).max_requests >= cap
    assert pool(rest, 0.9, per_request, V09, q, d, cap + 1).max_requests < cap + 1
    for release in (V15, V19, V23):  # sized together there: nothing to cap
        assert draft_cap(rest, 0.9, per_request, release, q, d) is None


def test_the_plans_values_give_the_draft_tokens_the_strategy_and_the_cap_per_rank():
    assert budget_args({}) == {"draft_tokens": 0, "mamba_strategy": None, "running_cap": None}
    assert budget_args({"speculative_algorithm": "NEXTN", "speculative_num_steps": 3})["draft_tokens"] == 4
    assert budget_args({"speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 6,
                        "speculative_num_steps": 3})["draft_tokens"] == 6
    assert budget_args({"speculative_algorithm": "NEXTN"})["draft_tokens"] == 4  # SGLang's 3 steps
    assert budget_args({"speculative_algorithm": None, "speculative_num_steps": 3})["draft_tokens"] == 0
    args = budget_args({"max_running_requests": 384, "attn_dp_size": 8, "mamba_cache_strategy": "extra_buffer"})
    assert (args["running_cap"], args["mamba_strategy"]) == (48, "extra_buffer")
    assert budget_args({"max_running_requests": True})["running_cap"] is None  # not a count


def test_qwen36_27b_on_two_a6000s_under_mtp_on_0_5_9():
    # The reference host at the inventory's mem_fraction_static 0.88: 16.4 GiB after the weights per
    # GPU, 73.4 MiB of state per request at TP 2, MTP's 4 draft tokens. SGLang 0.5.9 keeps them for
    # 48 requests first: 13.8 GiB, leaving slots for 4 requests and ~45,000 KV tokens; at the 18 the
    # slots then allow, ~195,000.
    at48 = sizing.budget(QWEN36_27B, 2, 49140, 0.88, version="0.5.9", draft_tokens=4,
                         mamba_strategy="extra_buffer", running_cap=48)
    assert at48 is not None and round(at48.state_per_request / MIB, 1) == 73.4
    assert (at48.slots_per_request, at48.max_requests, at48.draft_cap) == (4, 4, 18)
    assert 44_000 < at48.kv_tokens < 46_000
    planned = sizing.budget(QWEN36_27B, 2, 49140, 0.88, version="0.5.9", draft_tokens=4,
                            mamba_strategy="extra_buffer")
    assert planned is not None and planned.running_cap == 18 and planned.max_requests >= 18
    assert 190_000 < planned.kv_tokens < 200_000
    # 0.5.23 sizes the two together: no cap to set, and the draft states cost slots, not KV
    new = sizing.budget(QWEN36_27B, 2, 49140, 0.88, version="0.5.23", draft_tokens=4)
    plain = sizing.budget(QWEN36_27B, 2, 49140, 0.88, version="0.5.23")
    assert new is not None and plain is not None and new.draft_cap is None
    assert new.max_requests < plain.max_requests and new.kv_tokens >= plain.kv_tokens
    assert "4 draft states for speculative decoding" in new.describe()
    assert hybrid_state.SPEC_REQUEST_CAP == new.running_cap == 48


def test_the_layout_and_the_context_are_sized_with_the_model_layers_strategy_and_drafts():
    # Qwen3.6-27B's profile (data/models/qwen3.6-27b.yaml) sets MTP 3 steps and extra_buffer, a layer
    # above the checkpoint's facts. On 0.5.9 the facts layer sized the layout and cut the context with
    # neither: 97,280 tokens on 2x A6000, while the plan's own budget with the cap it sets
    # (max_running_requests 17) holds ~181,900. The context now comes from that same budget.
    from sglang_deploy.plan.planner import plan_host
    from sglang_deploy.plan.spec import build_spec

    data = {"sglang_model": QWEN36_27B.model, "sglang_gpus": {"model": "RTX A6000", "count": 2}}
    p = plan_host(build_spec("gpu-1", {}, data), sglang_version="0.5.9", facts=QWEN36_27B)
    values = {k: r.value for k, r in p.intents.items()}
    assert values["mamba_cache_strategy"] == "extra_buffer" and values["speculative_num_steps"] == 3
    final = sizing.planned_budget(QWEN36_27B, p.gpus.memory_mib, values, None, "0.5.9", p.gpus.sm_major)
    assert final is not None and values["max_running_requests"] == 17
    assert final.kv_tokens - 1024 < values["context_length"] <= final.kv_tokens
    assert f"~{final.kv_tokens:,} tokens" in p.intents["tp_size"].reason
