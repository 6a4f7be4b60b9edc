"""Every shipped model profile x topology x supported version: the argv is accepted.

The planner already refuses an argv its catalog rejects; this test checks the
catalog verdict again explicitly, for every combination, plus variants of the
version-sensitive intents, so a dialect change that emits an unknown flag, a
bad choice, a missing value or an ambiguous prefix fails here.
"""

from __future__ import annotations

import pytest

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.catalog import SUPPORTED_VERSIONS, load_catalog
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.profiles import load_knowledge
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.simulator.plan_matrix import CASES, HARDWARE, MODELS, VARIANTS


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
    try:
        plan = plan_host(build_spec("m", {}, data), sglang_version=version)
    except PlanError as exc:
        # DP attention runs inside the TP group: SGLang asserts tp_size % attn_dp_size == 0
        # (the variant's attn_dp_size 2 on a host whose TP is 1).
        assert exc.field == "sglang_intents.attn_dp_size" and "does not divide TP 1" in exc.message
        assert VARIANTS[variant].get("attn_dp_size", 1) > 1
        return
    assert load_catalog(version).check(plan.argv) == []
    assert plan.argv[:2] == ["--model-path", MODELS[model]]
