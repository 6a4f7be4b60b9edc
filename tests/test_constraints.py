"""The constraint checker: every constraint in data/constraints.yaml fires on the case SGLang
refuses, stays quiet on the one it loads, and names its SGLang source."""

from __future__ import annotations

import dataclasses

import pytest

from sglang_deploy.plan import constraints
from sglang_deploy.plan.catalog import load_catalog
from sglang_deploy.plan.constraints import PlanView
from sglang_deploy.plan.modelfacts import MoeFacts, QuantFacts
from tests.recorded_facts import DEEPSEEK_V3, LLAMA_70B, QWEN3_30B_A3B, QWEN3_32B, QWEN3_235B_FP8, QWEN36_27B

H100 = dict(gpu_mib=81920, compute_capability=90)
SUPPORT = load_catalog("0.5.23").model_support


def view(**kw) -> PlanView:
    base = dict(tp=1, ep=1, **H100, mem_fraction=None, context_length=None, speculative_algorithm=None,
                draft_model=False, text_only=False, sglang_version="0.5.23", support=SUPPORT)
    base.update(kw)
    return PlanView(**base)


def ids(facts, v) -> list[str]:
    return [x.constraint.id for x in constraints.check(facts, v)]


# (constraint id, facts, a plan SGLang refuses, the nearest plan it loads)
CASES = [
    ("heads-divisible-by-tp", QWEN36_27B, view(tp=16, gpu_mib=143360), view(tp=8)),
    ("kv-heads-vs-tp", dataclasses.replace(QWEN3_32B, num_key_value_heads=12, num_attention_heads=48),
     view(tp=8), view(tp=4)),
    ("ep-within-tp", QWEN3_30B_A3B, view(tp=2, ep=4), view(tp=4, ep=4)),
    ("experts-divisible-by-ep",
     dataclasses.replace(QWEN3_30B_A3B, moe=MoeFacts(num_experts=60, experts_per_token=4, moe_intermediate_size=1408)),
     view(tp=8, ep=8), view(tp=8, ep=4)),
    ("moe-intermediate-divisible-by-moe-tp",
     dataclasses.replace(QWEN3_30B_A3B, moe=MoeFacts(num_experts=64, experts_per_token=4, moe_intermediate_size=1404)),
     view(tp=8), view(tp=4)),
    ("moe-block-n", QWEN3_235B_FP8, view(tp=8), view(tp=8, ep=2)),
    ("dense-block-n", dataclasses.replace(LLAMA_70B, intermediate_size=28672 + 128,
                                          quantization=QuantFacts("fp8", "e4m3", (128, 128))),
     view(tp=8), view(tp=1, gpu_mib=400000)),
    ("weights-fit", LLAMA_70B, view(tp=1), view(tp=4)),
    # project policy: below 4,096 KV tokens (TP 2 at 0.825); TP 2 at 0.85 holds ~15k and plans (SGLang's own
    # fraction, its prefill graph reserved, leaves ~3k: sizing.prefill_graph_mib)
    ("kv-cache-holds-one-request", LLAMA_70B, view(tp=2, mem_fraction=0.825), view(tp=2, mem_fraction=0.85)),
    ("context-within-max-positions", QWEN3_32B, view(tp=2, context_length=65536), view(tp=2, context_length=40960)),
    ("speculative-needs-draft-layers", QWEN3_32B, view(tp=2, speculative_algorithm="NEXTN"),
     view(tp=2, speculative_algorithm="NGRAM")),
    # Qwen3MoeForCausalLM: SGLang 0.5.23 assumes one MTP layer the config does not name (a warning)
    ("speculative-assumed-draft-layer", QWEN3_30B_A3B, view(tp=2, speculative_algorithm="EAGLE"),
     view(tp=2, speculative_algorithm="EAGLE", draft_model=True)),
    ("quantization-method-known", dataclasses.replace(LLAMA_70B, quantization=QuantFacts("fbgemm_fp8")),
     view(tp=4), view(tp=4, support=load_catalog("0.5.15").model_support)),
    ("text-only-needs-vision-tower", QWEN3_32B, view(tp=2, text_only=True), view(tp=2)),
    ("quantization-capability", dataclasses.replace(QWEN3_32B, quantization=QuantFacts("w8a8_fp8")),
     view(tp=2, compute_capability=86), view(tp=2, compute_capability=89)),
]


def test_every_constraint_is_exercised():
    assert {c.id for c in constraints.load_constraints()} == {case[0] for case in CASES}


@pytest.mark.parametrize("cid,facts,refused,loads", CASES, ids=[c[0] for c in CASES])
def test_constraint_fires_on_what_sglang_refuses(cid, facts, refused, loads):
    assert cid in ids(facts, refused)
    assert cid not in ids(facts, loads)


def test_every_constraint_names_an_sglang_source_file_or_is_a_stated_policy():
    for c in constraints.load_constraints():
        if c.kind == "policy":
            assert "sglang srt/" not in c.source and "SGLang" not in c.source, c.id
            continue
        assert c.source.startswith("sglang srt/") and ".py" in c.source, c.id


def test_a_policy_is_never_attributed_to_sglang():
    (v,) = [x for x in constraints.check(LLAMA_70B, view(tp=2, mem_fraction=0.825))
            if x.constraint.id == "kv-cache-holds-one-request"]
    assert "project policy" in v.message and "SGLang refuses" not in v.message
    assert "less than this project's floor of 4,096 tokens" in v.message


def test_messages_carry_the_numbers():
    (v,) = [x for x in constraints.check(QWEN3_235B_FP8, view(tp=8)) if x.constraint.id == "moe-block-n"]
    assert "1536 / (TP 8 / EP 1) = 192 columns per rank is not a multiple of block_n 128" in v.message
    assert "EP 2 would split it" in v.message


def test_mla_has_no_kv_head_split_and_a_shared_expert_width():
    assert "kv-heads-vs-tp" not in ids(DEEPSEEK_V3, view(tp=16, gpu_mib=200000))
    # DeepSeek-V3's dense layers (18432) and shared expert (2048) split into 128-blocks at TP 8 and 16.
    assert "dense-block-n" not in ids(DEEPSEEK_V3, view(tp=16, gpu_mib=200000))
    assert "dense-block-n" in ids(DEEPSEEK_V3, view(tp=32, gpu_mib=200000))  # 2048 / 32 = 64 columns


def test_a_draft_model_path_satisfies_eagle():
    assert "speculative-needs-draft-layers" in ids(QWEN3_32B, view(tp=2, speculative_algorithm="EAGLE3"))
    assert "speculative-needs-draft-layers" not in ids(QWEN3_32B, view(tp=2, speculative_algorithm="EAGLE3",
                                                                         draft_model=True))
