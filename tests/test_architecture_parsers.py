"""A recipe agrees with the parsers SGLang 0.5.23 itself picks from the architecture, or says why
not (tests/fixtures/sglang/architecture_parsers-0.5.23.yaml: template_detection.py
_architecture_parser_defaults and _architecture_auto_parsers, python_chat_template.py).

Every architecture a rule names, and every recorded checkpoint (tests/fixtures/checkpoints, the
Hub stand-in's recordings, the cookbook index's models) a rule matches, is looked up in the
recipes: where a recipe answers, its parsers (as 0.5.23 spells them) must be the rule's or be
listed in DIFFERS with the reason; where none answers, the plan passes `auto`, which is SGLang's
own choice, except for a default SGLang applies only to a parser left out (`auto` skips it):
that needs a recipe.

Not checked here: what `auto` picks from a checkpoint's chat template (template_detection.py
REASONING_PARSER_RULES / TOOL_CALL_PARSER_RULES): no chat template is recorded in this repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sglang_deploy.plan import recipes

FIXTURES = Path(__file__).parent / "fixtures"
RULES = yaml.safe_load((FIXTURES / "sglang" / "architecture_parsers-0.5.23.yaml").read_text())
SECTIONS = {s["id"]: s for s in RULES["sections"]}
PARSERS = ("tool_call_parser", "reasoning_parser")

_TEMPLATE_DECIDES = ("SGLang's fallback answers only when the checkpoint has no readable chat template; "
                     "the published checkpoints ship one, and the row follows the family's own page")

#: (recipe id, section id, intent) -> why the recipe's value is not the rule's.
DIFFERS: dict[tuple[str, str, str], str] = {
    **{(rid, "no-template", intent): _TEMPLATE_DECIDES
       for rid, intents in {
           "deepseek-r1": PARSERS,              # page: deepseek-r1 reasoning, tool parser not set
           "deepseek-v3.1": ("tool_call_parser",),   # page: deepseekv31 tools
           "deepseek-v3": PARSERS,              # page: deepseekv3 tools, does not think
           "deepseek-v3.2-exp": ("tool_call_parser",),   # page: V3.1's deepseekv31 tools
           "deepseek-v3.2-speciale": ("tool_call_parser",),  # page: no tool calling
           "kimi-k2": PARSERS,                  # DeepseekV3ForCausalLM with model_type kimi_k2: Kimi's parsers
           "kimi-k2-thinking": PARSERS,
       }.items() for intent in intents},
    ("minimax-m2", "no-template", "reasoning_parser"):
        "SGLang's MiniMax-M2 page launches minimax-append-think (the thinking stays in the answer's history, as "
        "MiniMax-M2 expects for multi-turn); the fallback's minimax splits it out",
}


def _matches(rule: dict, arch: str, model_type: str | None) -> bool:
    return (arch in rule.get("architectures", ())
            or (bool(rule.get("architecture_contains")) and rule["architecture_contains"] in arch)
            or (model_type is not None and model_type in rule.get("model_types", ())))


def _rule_for(section: dict, arch: str, model_type: str | None) -> dict | None:
    return next((r for r in section["rules"] if _matches(r, arch, model_type)), None)


def _recorded() -> list[tuple[str, tuple[str, ...], str | None]]:
    """(model, architectures, model_type) of every recorded config.json, and of every model the
    cookbook index (tests/fixtures/cookbook/index.yaml) gives an architecture."""
    from sglang_deploy.simulator.facts_matrix import checkpoints
    out = []
    for d in sorted((FIXTURES / "checkpoints").iterdir()):
        if (d / "config.json").is_file():
            config = json.loads((d / "config.json").read_text())
            model = json.loads((d / "provenance.json").read_text())["model"]
            out.append((model, tuple(config.get("architectures") or ()), config.get("model_type")))
    out += [(m, f.architectures, f.model_type) for m, f in sorted(checkpoints().items())]
    cookbook = yaml.safe_load((FIXTURES / "cookbook" / "index.yaml").read_text())
    out += [(m, tuple(f["architectures"]), f.get("model_type"))
            for f in cookbook["families"] if f.get("architectures") for m in f["models"]]
    return out


def _subjects(section: dict) -> list[tuple[str, tuple[str, ...], str | None, dict]]:
    """Each checkpoint the section decides for: the recorded ones, and one per named architecture."""
    out: list[tuple[str, tuple[str, ...], str | None, dict]] = []
    for model, archs, model_type in _recorded():
        rule = _rule_for(section, archs[0] if archs else "", model_type)
        if rule is not None:
            out.append((model, archs, model_type, rule))
    for named in section["rules"]:
        for arch in named.get("architectures", ()):
            first = _rule_for(section, arch, None)
            if first is not None and first is named:  # not shadowed by an earlier rule
                out.append((f"(any {arch} checkpoint)", (arch,), None, first))
    return out


def test_the_fixture_names_its_source_and_each_rule_both_parsers():
    assert RULES["sglang_version"] == "0.5.23"
    for s in RULES["sections"]:
        assert s["file"].startswith("sglang/srt/") and s["function"] and s["applies"], s["id"]
        for r in s["rules"]:
            assert r.get("architectures") or r.get("architecture_contains") or r.get("model_types"), r
            assert all(r.get(p) for p in PARSERS), r


@pytest.mark.parametrize("section_id", sorted(SECTIONS))
def test_a_recipe_gives_the_parsers_sglang_picks_from_the_architecture_or_says_why_not(section_id):
    section = SECTIONS[section_id]
    seen = set()
    for model, archs, model_type, rule in _subjects(section):
        recipe = recipes.find(model, archs, model_type)
        if recipe is None:
            # the plan passes `auto` (plan/recipes.py _no_recipe), which SGLang resolves itself, except
            # that `auto` skips a default kept for a parser left out
            assert section_id != "omitted", (
                f"{model} ({archs[0]}): no recipe, so the plan passes auto, which skips SGLang's "
                f"{section['function']} ({rule['tool_call_parser']}/{rule['reasoning_parser']})")
            continue
        for intent in PARSERS:
            v = recipe.parsers.get(intent)
            got = v.spelled(RULES["sglang_version"]) if v is not None else None
            key = (recipe.id, section_id, intent)
            if key in DIFFERS:
                seen.add(key)
                assert got != rule[intent], f"{key}: the recipe now agrees; drop it from DIFFERS"
                continue
            assert got == rule[intent], (
                f"{model} ({archs[0]}): recipe {recipe.id} sets {intent} {got!r}; SGLang "
                f"{RULES['sglang_version']} {section['function']} picks {rule[intent]!r}")
    stale = {k for k in DIFFERS if k[1] == section_id} - seen
    assert not stale, f"DIFFERS names cases no checkpoint reaches: {sorted(stale)}"


def test_a_muse_spark_checkpoint_is_planned_with_sglangs_own_default_not_auto():
    # `auto` would skip _architecture_parser_defaults and leave Muse Spark to template detection,
    # whose rules name no muse parser
    recipe = recipes.find("example/muse-spark", ("MuseSparkForConditionalGeneration",), None)
    assert recipe is not None
    assert {k: v.spelled("0.5.23") for k, v in recipe.parsers.items()} == {
        "tool_call_parser": "muse", "reasoning_parser": "muse"}
