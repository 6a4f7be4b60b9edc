"""The facts matrix: every checkpoint x the 13 hardware layouts of tests/test_matrix.py x every
supported SGLang version, planned with the checkpoint's facts. Shared by the matrix test,
scripts/check_plans_against_real_parsers.py and benchmarks/plan_facts_table.py."""

from __future__ import annotations

import itertools
from typing import Iterator

from sglang_deploy.catalog import SUPPORTED_VERSIONS
from sglang_deploy.errors import PlanError
from sglang_deploy.modelfacts import ModelFacts
from sglang_deploy.planner import Plan, plan_host
from sglang_deploy.spec import build_spec
from tests import model_cards
from tests.test_matrix import HARDWARE


def checkpoints() -> dict[str, ModelFacts]:
    """Facts per checkpoint, keyed by the id the server loads."""
    cards = [v for v in vars(model_cards).values() if isinstance(v, ModelFacts)]
    return {f.model: f for f in cards}


def cases() -> list[tuple[str, str, str]]:
    return list(itertools.product(sorted(checkpoints()), sorted(HARDWARE), SUPPORTED_VERSIONS))


def plan_case(model: str, hardware: str, version: str, facts: ModelFacts | None = None) -> Plan | PlanError:
    facts = facts or checkpoints()[model]
    data = {"sglang_model": model, "sglang_gpus": HARDWARE[hardware],
            "sglang_secrets": {"api_key": {"env": "SGLANG_API_KEY"}}}
    try:
        return plan_host(build_spec("m", {}, data), sglang_version=version, facts=facts)
    except PlanError as exc:
        return exc


def plans(version: str | None = None) -> Iterator[tuple[tuple[str, str, str], Plan | PlanError]]:
    facts = checkpoints()
    for case in cases():
        if version is None or case[2] == version:
            yield case, plan_case(*case, facts=facts[case[0]])
