"""Every shipped model profile x topology x supported version: the argv is accepted.

The planner already refuses an argv its catalog rejects; this test checks the
catalog verdict again explicitly, for every combination, plus variants of the
version-sensitive intents, so a dialect change that emits an unknown flag, a
bad choice, a missing value or an ambiguous prefix fails here.
"""

from __future__ import annotations

import itertools

import pytest

from sglang_deploy.plan.catalog import SUPPORTED_VERSIONS, load_catalog
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.profiles import load_knowledge
from sglang_deploy.plan.spec import build_spec

HARDWARE = {
    "a100x8-nvswitch": {"model": "A100 SXM", "count": 8},
    "a6000x1": {"model": "RTX A6000", "count": 1},
    "a6000x2-bridge": {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"},
    "a6000x4-pcie": {"model": "RTX A6000", "count": 4, "topology": "pcie"},
    "rtx3090x2-pcie": {"model": "RTX 3090", "count": 2},
    "l40sx4-pcie": {"model": "L40S", "count": 4},
    "rtx4090x2-pcie": {"model": "RTX 4090", "count": 2},
    "h100x2-pcie": {"model": "H100 PCIe", "count": 2},
    "h100x8-nvswitch": {"model": "H100 SXM", "count": 8},
    "h200x4-nvswitch": {"model": "H200", "count": 4},
    "b200x8-nvswitch": {"model": "B200", "count": 8},
    "rtxpro6000x2-pcie": {"model": "RTX PRO 6000", "count": 2},
    "rtx5090x4-pcie": {"model": "RTX 5090", "count": 4},
}
MODELS = {p.key: p.models[0] for p in load_knowledge().models.values()}
VARIANTS = {
    "profile": {},
    "prefill-off-bs": {"prefill_cuda_graph": "off", "cuda_graph_max_bs_decode": 64, "text_only": True},
    "prefill-default": {"prefill_cuda_graph": "default", "attn_dp_size": 2, "kv_cache_dtype": "fp8_e4m3"},
    "graphs-off-sbo": {"cuda_graph": False, "single_batch_overlap": True, "p2p_check": True,
                       "speculative_algorithm": "NGRAM"},
}
CASES = list(itertools.product(sorted(MODELS), sorted(HARDWARE), SUPPORTED_VERSIONS, sorted(VARIANTS)))


def test_the_matrix_covers_every_profile_and_architecture():
    knowledge = load_knowledge()
    assert set(MODELS) == set(knowledge.models)
    declared = {knowledge.gpus.lookup(h["model"]).compute_capability for h in HARDWARE.values()}
    assert {knowledge.arch_of_capability[cc] for cc in declared} == set(knowledge.archs)
    assert SUPPORTED_VERSIONS == ("0.5.9", "0.5.15", "0.5.19", "0.5.23")
    assert len(CASES) == len(MODELS) * len(HARDWARE) * 4 * len(VARIANTS)


@pytest.mark.parametrize("model,hardware,version,variant", CASES)
def test_planned_argv_is_accepted_by_the_catalog(model, hardware, version, variant):
    data = {"sglang_model": MODELS[model], "sglang_gpus": HARDWARE[hardware],
            "sglang_intents": VARIANTS[variant],
            "sglang_secrets": {"api_key": {"env": "SGLANG_API_KEY"}}}
    plan = plan_host(build_spec("m", {}, data), sglang_version=version)
    assert load_catalog(version).check(plan.argv) == []
    assert plan.argv[:2] == ["--model-path", MODELS[model]]
