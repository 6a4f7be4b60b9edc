"""A checkpoint of a family no recipe names is said, not guessed (sglang_deploy/plan/recipes.py):
from SGLang 0.5.15 its parsers are left to SGLang's own detection at start (``auto``, which every
catalog from 0.5.15 lists among the choices), in 0.5.9 none is set; either way the plan warns,
naming the family and how to set them. Published configs of families the recipes do not name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_deploy.plan.modelfacts import facts_from_metadata
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.spec import build_spec

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "checkpoints"


def facts(name: str):
    return facts_from_metadata(name, None, "published config.json",
                               json.loads((FIXTURES / name.replace("/", "--") / "config.json").read_text()))


def plan(model: str, version: str, gpus: dict, **intents):
    data = {"sglang_model": model, "sglang_gpus": gpus, "sglang_version": version,
            **({"sglang_intents": intents} if intents else {})}
    return plan_host(build_spec("gpu-1", {}, data), facts=facts(model))


@pytest.mark.parametrize("model, gpus", [("google/gemma-4-26B-A4B", {"model": "H100 SXM", "count": 2}),
                                         ("mistralai/Mixtral-8x22B-v0.1", {"model": "H200", "count": 8})])
def test_from_0_5_15_the_parsers_are_sglangs_detection_and_the_plan_says_so(model, gpus):
    for version in ("0.5.15", "0.5.23"):
        p = plan(model, version, gpus)
        assert p.intents["tool_call_parser"].value == "auto" and p.intents["reasoning_parser"].value == "auto"
        assert "template_detection.py" in (p.intents["tool_call_parser"].source or "")
        assert "--tool-call-parser" in p.argv and p.argv[p.argv.index("--tool-call-parser") + 1] == "auto"
        said = [w for w in p.warnings if w.startswith("no recipe for")]
        assert said and "sglang_intents.tool_call_parser" in said[0], p.warnings


def test_in_0_5_9_no_parser_is_set_and_the_plan_says_so():
    p = plan("google/gemma-4-26B-A4B", "0.5.9", {"model": "H100 SXM", "count": 2})
    assert p.intents["tool_call_parser"].value is None and "--tool-call-parser" not in p.argv
    assert any("has no auto detection" in w for w in p.warnings), p.warnings


def test_the_inventory_still_chooses():
    p = plan("google/gemma-4-26B-A4B", "0.5.23", {"model": "H100 SXM", "count": 2}, tool_call_parser="pythonic")
    assert p.intents["tool_call_parser"].value == "pythonic"
    assert p.intents["reasoning_parser"].value == "auto"
