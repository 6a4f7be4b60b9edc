"""Recipe flags per model family (data/model_rules.yaml `recipes`, plan/recipes.py), and the
recipes table: SGLang's own docs pages' launch lines, each planned on its hardware from a
recorded config.json (tests/fixtures/checkpoints with provenance.json, or the Hub stand-in's
sglang_deploy/simulator/hub/checkpoints), must give the page's parsers and speculative
settings, and the page's layout or a plan that says why its layout differs.

Left out for want of a recorded config.json: GLM-4.5/4.6/4.7 (docs/basic_usage/glm45.md) and
Qwen3-Next (docs/basic_usage/qwen3.md); their recipes are still checked against the catalogs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sglang_deploy.plan import recipes
from sglang_deploy.plan.catalog import SUPPORTED_VERSIONS, load_catalog
from sglang_deploy.plan.modelfacts import facts_from_metadata
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.profiles import DataError
from sglang_deploy.plan.spec import build_spec
from tests.recorded_facts import DEEPSEEK_V3, GPT_OSS_120B, QWEN3_30B_A3B, QWEN3_32B, QWEN3_235B_FP8

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"
SPEC_KEYS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
             "speculative_num_draft_tokens")


def recorded(folder: str):
    d = FIXTURES / folder
    prov = json.loads((d / "provenance.json").read_text())
    return facts_from_metadata(prov["model"], None, f"recorded {folder}", json.loads((d / "config.json").read_text()))


def plan(facts, gpus, version="0.5.23", **data):
    data = {"sglang_model": facts.model, "sglang_gpus": gpus, **data}
    return plan_host(build_spec("gpu-1", {}, data), sglang_version=version, facts=facts)


# ---- the data -----------------------------------------------------------------------------------

def test_every_recipe_names_parsers_its_sources_say_sglang_0_5_23_knows():
    catalog = load_catalog("0.5.23")
    for recipe in recipes.load():
        for intent, v in recipe.parsers.items():
            option = "--tool-call-parser" if intent == "tool_call_parser" else "--reasoning-parser"
            assert v.value in catalog.options[option].choices, (recipe.id, v.value)
            # what launches it so: SGLang's docs or its cookbook (sgl-cookbook) at a commit, or SGLang's
            # own default for the architecture in a release
            assert "sglang srt/" in v.source and "@ " in v.source, recipe.id
            assert ("SGLang docs page" in v.source or "sgl-cookbook" in v.source
                    or "_architecture_parser_defaults" in v.source), recipe.id
        assert "@ " in recipe.source, recipe.id


def test_a_malformed_recipe_is_refused_naming_it():
    base = {"speculative_defaults": {"steps": 3, "eagle_topk": 1, "draft_tokens": 4, "source": "s"}}
    with pytest.raises(DataError, match="r1: match needs architectures or model_type"):
        recipes.parse({**base, "recipes": [{"id": "r1", "match": {"name": "x"}, "source": "s"}]})
    with pytest.raises(DataError, match="r2 speculative: with top-k 1"):
        recipes.parse({**base, "recipes": [{"id": "r2", "match": {"model_type": "x"}, "source": "s",
                                            "speculative": {"algorithm": "EAGLE", "steps": 3, "eagle_topk": 1,
                                                            "draft_tokens": 5, "reason": "r", "source": "s"}}]})


def test_a_parser_the_version_does_not_know_is_left_out_with_a_warning_naming_the_version():
    catalog = load_catalog("0.5.23")
    option = catalog.options["--tool-call-parser"]
    without = dataclasses.replace(option, choices=tuple(c for c in option.choices if c != "gpt-oss"))
    older = dataclasses.replace(catalog, version="0.0.1", options={**catalog.options, "--tool-call-parser": without})
    result = recipes.for_model(GPT_OSS_120B.model, GPT_OSS_120B, None, older, "0.0.1")
    assert [c[:2] for c in result.changes] == [("reasoning_parser", "gpt-oss")]
    assert any("--tool-call-parser gpt-oss left out: SGLang 0.0.1" in w for w in result.warnings)
    # with the real catalog both are there
    real = recipes.for_model(GPT_OSS_120B.model, GPT_OSS_120B, None, catalog, "0.5.23")
    assert {c[0]: c[1] for c in real.changes} == {"reasoning_parser": "gpt-oss", "tool_call_parser": "gpt-oss"}


# ---- families, through the planner ---------------------------------------------------------------

def test_kimi_k2_is_told_from_deepseek_v3_by_its_model_type():
    # Kimi-K2-Instruct's config.json: architectures DeepseekV3ForCausalLM, model_type kimi_k2, no NextN layer
    p = plan(recorded("moonshotai--Kimi-K2-Instruct"), {"model": "H200", "count": 8}, sglang_trust_remote_code=True)
    assert p.intents["tool_call_parser"].value == "kimi_k2"
    assert p.intents["reasoning_parser"].value is None
    assert p.intents["speculative_algorithm"].value is None
    d = plan(DEEPSEEK_V3, {"model": "H200", "count": 8})
    assert d.intents["tool_call_parser"].value == "deepseekv3"
    assert d.intents["speculative_algorithm"].value == "EAGLE"


def test_qwen3_coder_by_name_and_qwen3_moe_without_mtp_weights_gets_no_speculative_decoding():
    coder = plan(recorded("Qwen--Qwen3-Coder-480B-A35B-Instruct"), {"model": "H200", "count": 8})
    assert coder.intents["tool_call_parser"].value == "qwen3_coder"
    assert coder.intents["reasoning_parser"].value is None
    # SGLang 0.5.23 would assume one MTP layer for Qwen3MoeForCausalLM, but Qwen3-30B-A3B ships none
    moe = plan(QWEN3_30B_A3B, {"model": "H100 SXM", "count": 2})
    assert (moe.intents["tool_call_parser"].value, moe.intents["reasoning_parser"].value) == ("qwen", "qwen3")
    assert moe.intents["speculative_algorithm"].value is None


def test_a_qwen3_2507_instruct_model_gets_the_tool_parser_and_no_reasoning_parser():
    # Qwen3-*-Instruct-2507 answer without thinking (their model card): no <think> block to parse
    instruct = plan(QWEN3_235B_FP8, {"model": "H100 SXM", "count": 8})
    assert (instruct.intents["tool_call_parser"].value, instruct.intents["reasoning_parser"].value) == ("qwen", None)
    thinking = plan(QWEN3_32B, {"model": "H100 SXM", "count": 1})
    assert thinking.intents["reasoning_parser"].value == "qwen3"


def test_the_inventory_overrides_a_recipe_and_the_layer_and_source_are_kept():
    p = plan(QWEN3_32B, {"model": "H100 SXM", "count": 2},
             sglang_intents={"tool_call_parser": "hermes", "reasoning_parser": None})
    assert p.intents["tool_call_parser"].value == "hermes" and p.intents["tool_call_parser"].layer == "host"
    assert "--reasoning-parser" not in p.argv
    q = plan(QWEN3_32B, {"model": "H100 SXM", "count": 2})
    r = q.intents["reasoning_parser"]
    assert (r.value, r.layer) == ("qwen3", "model") and r.reason.startswith("recipe qwen3:")
    assert "reasoning_parser.py" in r.source


def test_speculative_numbers_fall_back_to_sglangs_defaults_and_say_so():
    d = plan(DEEPSEEK_V3, {"model": "H200", "count": 8})
    steps = d.intents["speculative_num_steps"]
    assert (steps.value, d.intents["speculative_eagle_topk"].value,
            d.intents["speculative_num_draft_tokens"].value) == (3, 1, 4)
    assert "_auto_choose_speculative_params" in steps.source
    off = plan(DEEPSEEK_V3, {"model": "H200", "count": 8}, sglang_intents={"speculative_algorithm": None})
    assert not any(a.startswith("--speculative") for a in off.argv)


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_recipes_plan_on_every_version(version):
    for facts in (DEEPSEEK_V3, GPT_OSS_120B, recorded("MiniMaxAI--MiniMax-M2.5")):
        p = plan(facts, {"model": "H200", "count": 8}, version)
        assert p.intents["tool_call_parser"].value is not None, (facts.model, version)


# ---- the recipes table ---------------------------------------------------------------------------
# Each row: a launch line from SGLang's docs (page and commit of the copy read), the hardware it
# names, the recorded config.json it is planned from, and the flags it sets. Layout in intents:
# tp_size, dp_size (replicas), attn_dp_size (--dp N --enable-dp-attention inside one TP group).

DOCS = "https://github.com/sgl-project/sglang/blob/{commit}/{page}"


@dataclasses.dataclass(frozen=True)
class Row:
    page: str
    commit: str
    line: str                 # the launch line, as the page prints it (flags that matter here)
    checkpoint: str           # fixtures folder, or "hub:<model>" for the Hub stand-in's recordings
    gpus: dict
    parsers: dict             # intent -> value the line sets
    speculative: tuple | None  # (algorithm, steps, topk, draft tokens) the line sets
    layout: dict              # tp_size / dp_size / attn_dp_size the line sets
    data: tuple = ()          # inventory keys the line implies (--trust-remote-code)

    @property
    def url(self) -> str:
        return DOCS.format(commit=self.commit, page=self.page)


H200X8 = {"model": "H200", "count": 8}
H100X8 = {"model": "H100 SXM", "count": 8}
TRUST = (("sglang_trust_remote_code", True),)

RECIPES = {
    "deepseek-v3-mtp": Row(
        "docs/basic_usage/deepseek_v3.md", "0f4513c2f46be5ae1e0d9bf0a8f7b5471a8b3d16",
        "--model-path deepseek-ai/DeepSeek-V3-0324 --speculative-algorithm EAGLE --trust-remote-code --tp 8 "
        "(default 3/1/4 per the page); 8 x H200 recommended", "hub:deepseek-ai/DeepSeek-V3", H200X8,
        {}, ("EAGLE", 3, 1, 4), {"tp_size": 8}),
    "deepseek-v3-tools": Row(
        "docs/basic_usage/deepseek_v3.md", "0f4513c2f46be5ae1e0d9bf0a8f7b5471a8b3d16",
        "--model deepseek-ai/DeepSeek-V3-0324 --tp 8 --tool-call-parser deepseekv3 --chat-template "
        "./examples/chat_template/tool_chat_template_deepseekv3.jinja", "hub:deepseek-ai/DeepSeek-V3", H200X8,
        {"tool_call_parser": "deepseekv3"}, None, {"tp_size": 8}),
    "deepseek-r1-mtp": Row(
        "docs/basic_usage/deepseek_v3.md", "0f4513c2f46be5ae1e0d9bf0a8f7b5471a8b3d16",
        "DeepSeek V3/V3.1/R1 page, 8 x H200: --speculative-algorithm EAGLE --tp 8; reasoning parser deepseek-r1 "
        "(docs/advanced_features/separate_reasoning.ipynb @ 0be831a540af60953787cc703f302e9526bf8b2e)",
        "deepseek-ai--DeepSeek-R1", H200X8, {"reasoning_parser": "deepseek-r1"}, ("EAGLE", 3, 1, 4),
        {"tp_size": 8}),
    "deepseek-v3.2": Row(
        "docs/basic_usage/deepseek_v32.md", "01253e4ea51103f00cff2b055ee92ffc9fdf0bc7",
        "--model-path deepseek-ai/DeepSeek-V3.2 --trust-remote-code --tp-size 8 --dp-size 8 --enable-dp-attention "
        "--tool-call-parser deepseekv32 --reasoning-parser deepseek-v3", "deepseek-ai--DeepSeek-V3.2", H200X8,
        {"tool_call_parser": "deepseekv32", "reasoning_parser": "deepseek-v3"}, None,
        {"tp_size": 8, "dp_size": 1, "attn_dp_size": 8}),
    "gpt-oss-120b": Row(
        "docs/basic_usage/gpt_oss.md", "0351c1fafe4c53c91c331dea205af48b018af559",
        "--model-path openai/gpt-oss-120b --tool-server demo --tp 2 (hardware not stated: 2 x H100 here); parsers "
        "gpt-oss per the tool and reasoning parser pages it points to", "hub:openai/gpt-oss-120b",
        {"model": "H100 SXM", "count": 2}, {"tool_call_parser": "gpt-oss", "reasoning_parser": "gpt-oss"}, None,
        {"tp_size": 2}),
    "kimi-k2.5": Row(
        "docs/basic_usage/kimi_k2_5.md", "3772f89420dc5ba7558ac058f3db6f74525370ee",
        "--model-path moonshotai/Kimi-K2.5 --tp 8 --trust-remote-code --tool-call-parser kimi_k2 "
        "--reasoning-parser kimi_k2 (TP8 on H200)", "moonshotai--Kimi-K2.5", H200X8,
        {"tool_call_parser": "kimi_k2", "reasoning_parser": "kimi_k2"}, None, {"tp_size": 8}, TRUST),
    "minimax-m2.5-8gpu": Row(
        "docs/basic_usage/minimax_m2.md", "0d7634708757ccb8a1f8db2584211bbbf5638a9f",
        "--model-path MiniMaxAI/MiniMax-M2 (the page: only the model name changes for M2.5) --tp-size 8 --ep-size 8 "
        "--tool-call-parser minimax-m2 --reasoning-parser minimax-append-think --trust-remote-code "
        "--mem-fraction-static 0.85; 8x 144GB GPUs", "MiniMaxAI--MiniMax-M2.5", H200X8,
        {"tool_call_parser": "minimax-m2", "reasoning_parser": "minimax-append-think"}, None,
        {"tp_size": 8}),
    "qwen3.5-397b": Row(
        "docs/basic_usage/qwen3_5.md", "369fa46b1151bb3e8b73ddd17fee059fad72dd2f",
        "--model-path Qwen/Qwen3.5-397B-A17B --tp 8 --trust-remote-code --reasoning-parser qwen3 "
        "--tool-call-parser qwen3_coder (8 GPUs: H200 here)", "Qwen--Qwen3.5-397B-A17B", H200X8,
        {"reasoning_parser": "qwen3", "tool_call_parser": "qwen3_coder"}, None, {"tp_size": 8}),
    "qwen3-vl-235b-bf16": Row(
        "docs/basic_usage/qwen3_vl.md", "2257966d871aadfaa75ac878d14d762163379137",
        "--model-path Qwen/Qwen3-VL-235B-A22B-Instruct --tp 8 --ep 8 (BF16 on A100/H100)",
        "Qwen--Qwen3-VL-235B-A22B-Instruct", H100X8, {}, None, {"tp_size": 8}),
    "llama-4-scout": Row(
        "docs/basic_usage/llama4.md", "14327294fc930b37ad8c757ad9f615586dc7742a",
        "--model-path meta-llama/Llama-4-Scout-17B-16E-Instruct --tp 8 --mem-fraction-static 0.8 "
        "--context-length 65536 (8xH100/H200)", "meta-llama--Llama-4-Scout-17B-16E-Instruct", H100X8, {}, None,
        {"tp_size": 8}),
    "llama-4-maverick": Row(
        "docs/basic_usage/llama4.md", "14327294fc930b37ad8c757ad9f615586dc7742a",
        "--model-path meta-llama/Llama-4-Maverick-17B-128E-Instruct --tp 8 --mem-fraction-static 0.8 "
        "--context-length 65536 (8xH100/H200)", "meta-llama--Llama-4-Maverick-17B-128E-Instruct", H200X8, {}, None,
        {"tp_size": 8}),
}


def _facts(row: Row):
    if row.checkpoint.startswith("hub:"):
        from sglang_deploy.simulator.facts_matrix import checkpoints
        return checkpoints()[row.checkpoint[4:]]
    return recorded(row.checkpoint)


def test_the_table_has_at_least_ten_recipes_from_sglangs_pages():
    assert len(RECIPES) >= 10
    for row in RECIPES.values():
        assert row.url.startswith("https://github.com/sgl-project/sglang/blob/") and len(row.commit) == 40


def layout_difference(plan_, row: Row) -> list[str]:
    """Each layout intent where the plan differs from the page, with what the plan says about it
    (the intent's layer and reason, and any warning naming it); empty: the same layout."""
    out = []
    for key, want in row.layout.items():
        got = plan_.intents[key]
        if got.value != want:
            named = [w for w in plan_.warnings if key.split("_")[0].upper() in w or key in w]
            out.append(f"{key} {got.value} (page {want}; {got.layer} layer: {got.reason}"
                       + (f"; warning: {named[0]}" if named else "") + ")")
    return out


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_a_published_launch_line_is_reproduced(name):
    row = RECIPES[name]
    p = plan(_facts(row), row.gpus, **dict(row.data))
    # its parsers, each from the family's recipe with a source
    for intent, want in row.parsers.items():
        got = p.intents[intent]
        assert got.value == want, f"{name} ({row.url}): {intent} {got.value!r}, the page sets {want!r}"
        assert got.reason.startswith("recipe ") and got.source
    # its speculative settings; where the page sets none, the plan's come from the model's own layers
    planned = tuple(p.intents[k].value for k in SPEC_KEYS)
    if row.speculative is not None:
        assert planned == row.speculative, f"{name} ({row.url}): speculative {planned}, the page {row.speculative}"
    elif planned[0] is not None:
        assert p.intents["speculative_algorithm"].reason.startswith("recipe "), name
        assert _facts(row).mtp_layers > 0, name
    # its layout, or the plan says why it differs: the differing intent was chosen by a layer
    # above SGLang's defaults with a reason of its own
    for diff in layout_difference(p, row):
        key = diff.split(" ", 1)[0]
        got = p.intents[key]
        assert got.layer != "sglang-default" and got.reason, f"{name} ({row.url}): {diff}"
    # and what it sets is what SGLang accepts (the catalog's own check passed while planning)
    for intent, want in row.parsers.items():
        flag = "--tool-call-parser" if intent == "tool_call_parser" else "--reasoning-parser"
        assert p.argv[p.argv.index(flag) + 1] == want
