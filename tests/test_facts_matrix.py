"""Every checkpoint x hardware layout x SGLang version, planned from the checkpoint's facts:
each plan satisfies every constraint and its argv passes the version's catalog, or it is
refused with the constraint (or the sizing) named. No traceback, no plan the checker refuses."""

from __future__ import annotations

import pytest

from sglang_deploy import constraints
from sglang_deploy.catalog import load_catalog
from sglang_deploy.errors import PlanError
from sglang_deploy.planner import constraint_view
from tests.facts_matrix import cases, checkpoints, plan_case
from tests.test_matrix import HARDWARE

CASES = cases()


def test_the_facts_matrix_covers_every_checkpoint_and_layout():
    assert len(HARDWARE) == 13
    assert len(CASES) == len(checkpoints()) * 13 * 4


@pytest.mark.parametrize("model,hardware,version", CASES)
def test_plan_is_accepted_or_refused_by_name(model, hardware, version):
    result = plan_case(model, hardware, version)
    if isinstance(result, PlanError):
        named = "constraint " in result.message or result.field == "tp_size (model-facts)"
        assert named, f"refused without naming a constraint: {result}"
        return
    facts = checkpoints()[model]
    errors = [v for v in constraints.check(facts, constraint_view(result)) if v.constraint.severity == "error"]
    assert errors == []
    assert load_catalog(version).check(result.argv) == []
    assert result.intents["tp_size"].value * 1 <= HARDWARE[hardware]["count"]
    assert result.facts is facts


def test_some_plans_are_accepted_and_some_refused():
    results = [plan_case(*c) for c in CASES if c[2] == "0.5.23"]
    assert any(isinstance(r, PlanError) for r in results)
    assert sum(not isinstance(r, PlanError) for r in results) >= len(results) // 3
