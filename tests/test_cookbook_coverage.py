"""Every family the sgl-cookbook has a recipe for (tests/fixtures/cookbook/index.yaml, read at one
commit) has a recipe in sglang_deploy/data/model_rules.yaml, or a reason here why not; and a
family with a recipe gets the cookbook's parsers and speculative settings, or a reason here why
not. A new cookbook family recorded in the index, or a recipe that drifts from the cookbook,
fails here until it is looked at."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from sglang_deploy.plan import recipes
from sglang_deploy.plan.catalog import load_catalog

INDEX = yaml.safe_load((Path(__file__).parent / "fixtures" / "cookbook" / "index.yaml").read_text())
FAMILIES = {f["id"]: f for f in INDEX["families"]}
PARSERS = {"tool_call_parser": "--tool-call-parser", "reasoning_parser": "--reasoning-parser"}

_SERVED_ELSEWHERE = ("served by SGLang's diffusion runtime (sglang.multimodal_gen, `sglang generate`), not the "
                     "LLM server this project deploys")
_PLACEHOLDER = "the cookbook page is a placeholder ('under development'): no launch line, no parser, no model"
_NO_ARCH = ("the cookbook does not name the architecture, and neither a recorded config.json nor an SGLang "
            "model file ties this model to one; a recipe keyed on a guessed architecture would be invented data")

#: Cookbook families with no row in model_rules.yaml, and why. A family planned without a row gets
#: SGLang's own detection (`auto`) from 0.5.15 and a warning naming what was left unset
#: (plan/recipes.py _no_recipe), so nothing here is a silent choice.
NOT_COVERED: dict[str, str] = {
    "deepseek-ocr": "the recipe sets no parser and no speculative decoding: SGLang's defaults are the recipe",
    "deepseek-ocr-2": "the recipe sets no parser and no speculative decoding",
    "ernie-4.5": "the recipe sets no parser and no speculative decoding: SGLang's defaults are the recipe",
    "ernie-4.5-vl": _PLACEHOLDER,
    "chroma-1.0": "a speech-to-speech model behind FlashLabs' own server, which drives SGLang for parts of it "
                  "(the page: 'rather than a direct SGLang deployment')",
    "glm-4.5v": _NO_ARCH,
    "glm-4.6v": _NO_ARCH,
    "glyph": _NO_ARCH,
    "glm-ocr": "the recipe sets no parser; its MTP draft (EAGLE 3/1/4) is an option of an OCR page, left to the "
               "inventory (sglang_intents.speculative_*)",
    "ring-2.5": _NO_ARCH + " (SGLang's bailing_moe_linear.py names Ling-2.5 configs, not Ring-2.5's)",
    "llada-2.1": "a diffusion language model (--dllm-algorithm): the recipe sets no parser",
    "internvl-3.5": _PLACEHOLDER,
    "jina-reranker-m0": _PLACEHOLDER + " (a reranker, not a chat model)",
    "minimax-m2": _PLACEHOLDER + "; MiniMax-M2's architecture is MiniMax-M2.5's, whose row covers it",
    "devstral-2": _NO_ARCH,
    "mistral-3": _PLACEHOLDER,
    "mistral-small-3": "the recipe (data file) sets no parser: SGLang's defaults are the recipe",
    "mistral-large-2": "the recipe (data file) sets no parser: SGLang's defaults are the recipe",
    "mistral-nemo": "the recipe (data file) sets no parser: SGLang's defaults are the recipe",
    "qwen3-coder-next": _NO_ARCH,
    "qwen2.5-vl": "the recipe sets no parser and no speculative decoding: SGLang's defaults are the recipe",
    "flux": _SERVED_ELSEWHERE,
    "mova": _SERVED_ELSEWHERE,
    "qwen-image": _SERVED_ELSEWHERE,
    "qwen-image-edit": _SERVED_ELSEWHERE,
    "wan-2.1": _SERVED_ELSEWHERE,
    "wan-2.2": _SERVED_ELSEWHERE,
    "z-image-turbo": _SERVED_ELSEWHERE,
    "s2-pro": "a text-to-speech model served by sglang_omni (`python -m sglang_omni.cli.cli serve`), not the "
              "LLM server",
}

#: Where a row's value differs from the cookbook's, and why. Keyed (family, field).
DIFFERS: dict[tuple[str, str], str] = {
    ("deepseek-v3", "reasoning_parser"): "DeepSeek-V3 does not think; the cookbook's reasoning parser is its "
                                         "generator's 'thinking' option, meant for the V3.1 hybrids (their own row)",
    ("glm-4.7", "reasoning_parser"): "the cookbook writes glm47, which no supported SGLang release lists among "
                                     "--reasoning-parser's choices (data/catalogs): the row keeps SGLang's GLM page's "
                                     "glm45",
    ("gpt-oss", "speculative"): "EAGLE3 from a separate draft checkpoint: the plan drafts only from the model's own "
                                "MTP/NextN layers; a draft model is set with sglang_extra_args",
    ("llama-3.1", "speculative"): "EAGLE3 from a separate draft checkpoint (see gpt-oss)",
    ("llama-4-scout", "speculative"): "EAGLE3 from a separate draft checkpoint (see gpt-oss)",
    ("qwen3-instruct-2507", "speculative"): "EAGLE3 from a separate draft checkpoint (see gpt-oss)",
    ("step-3.5", "speculative"): "the cookbook's MTP adds --enable-multi-layer-eagle, which the plan has no intent "
                                 "for: a draft without it is not the recipe's; set it with sglang_extra_args",
    ("mimo-v2-flash", "speculative"): "the cookbook's MTP adds --enable-multi-layer-eagle (see step-3.5)",
}

#: Flags a cookbook MTP line adds that the plan leaves to SGLang, and why (the draft itself is planned).
EXTRA_FLAGS_LEFT: dict[str, str] = {
    "nemotron-3-super": "--disable-radix-cache: the plan leaves a hybrid Mamba model's prefix cache to SGLang, "
                        "which handles it under speculative decoding itself (0.5.9 server_args.py: mamba no_buffer "
                        "turns the radix cache off; 0.5.23 arg_groups/model_hook.py handle_mamba_radix_cache); "
                        "sglang_intents.mamba_cache_strategy or sglang_extra_args set it otherwise",
}

#: Two names SGLang registers for one detector: the same parser, spelled otherwise.
SAME_PARSER = {("tool_call_parser", "qwen25"): "qwen"}  # function_call_parser.py: both Qwen25Detector


def _covered(family: dict) -> list[tuple[str, recipes.Recipe | None]]:
    archs = tuple(family.get("architectures") or ())
    return [(m, recipes.find(m, archs, family.get("model_type"))) for m in family["models"]]


def test_the_index_is_one_commit_of_the_cookbook_with_each_entry_named_by_its_file():
    assert INDEX["repository"] == "sgl-project/sgl-cookbook"
    assert re.fullmatch(r"[0-9a-f]{40}", INDEX["commit"])
    assert len(FAMILIES) == len(INDEX["families"]), "duplicate family id"
    for f in INDEX["families"]:
        assert f.get("doc") or f.get("recipe"), f["id"]
        for key in ("doc", "recipe"):
            assert f.get(key) is None or re.fullmatch(r"(docs|src|data)/[\w./-]+", f[key]), (f["id"], key)
        if f.get("architectures"):
            assert f.get("architectures_source"), f["id"]


@pytest.mark.parametrize("fid", sorted(FAMILIES))
def test_every_cookbook_family_has_a_recipe_or_a_reason(fid):
    family = FAMILIES[fid]
    found = _covered(family)
    if fid in NOT_COVERED:
        assert NOT_COVERED[fid].strip(), fid
        matched = [(m, r.id) for m, r in found if r is not None]
        assert not matched, f"{fid} is listed as not covered, but recipes match it now: {matched}"
        return
    assert family.get("architectures"), f"{fid}: no architecture recorded, so no recipe can key it"
    missing = [m for m, r in found if r is None]
    assert not missing, f"{fid} ({family['doc']}): no recipe in model_rules.yaml matches {missing}"


def _ours(recipe: recipes.Recipe, intent: str) -> str | None:
    v = recipe.parsers.get(intent)
    return v.spelled("0.5.23") if v is not None else None


@pytest.mark.parametrize("fid", sorted(f for f in FAMILIES if f not in NOT_COVERED))
def test_a_covered_family_gets_the_cookbooks_parsers_and_speculative_settings(fid):
    family = FAMILIES[fid]
    for model, recipe in _covered(family):
        assert recipe is not None
        for intent in PARSERS:
            want = family[intent]
            want = SAME_PARSER.get((intent, want), want)
            got = _ours(recipe, intent)
            if (fid, intent) in DIFFERS:
                assert got != want, f"{fid} {intent}: the row now agrees with the cookbook; drop it from DIFFERS"
                continue
            assert got == want, (f"{fid} ({model}): recipe {recipe.id} sets {intent} {got!r}, the cookbook "
                                 f"{family[intent]!r} ({family['recipe']} @ {INDEX['commit']})")
        want_spec = family.get("speculative")
        if want_spec and want_spec.get("extra") and (fid, "speculative") not in DIFFERS:
            assert EXTRA_FLAGS_LEFT.get(fid), f"{fid}: its MTP line adds {want_spec['extra']}: plan or explain"
            want_spec = {k: v for k, v in want_spec.items() if k != "extra"}
        spec = recipe.speculative
        got_spec = None if spec is None else {
            "algorithm": "EAGLE" if spec.algorithm == "NEXTN" else spec.algorithm,  # SGLang: NEXTN is EAGLE
            "steps": spec.steps, "eagle_topk": spec.eagle_topk, "draft_tokens": spec.draft_tokens}
        if (fid, "speculative") in DIFFERS:
            assert got_spec != want_spec, f"{fid}: the row's speculative settings now agree; drop it from DIFFERS"
            continue
        assert got_spec == want_spec, f"{fid} ({model}): recipe {recipe.id} {got_spec}, the cookbook {want_spec}"


def test_every_parser_the_cookbook_writes_is_one_sglang_0_5_23_knows_or_a_listed_difference():
    catalog = load_catalog("0.5.23")
    for f in INDEX["families"]:
        for intent, option in PARSERS.items():
            value = f[intent]
            if value is None:
                continue
            if value not in catalog.options[option].choices:
                assert (f["id"], intent) in DIFFERS or f["id"] in NOT_COVERED, (f["id"], option, value)


def test_each_listed_reason_names_a_recorded_family():
    assert set(NOT_COVERED) <= set(FAMILIES)
    assert {fid for fid, _ in DIFFERS} <= set(FAMILIES) - set(NOT_COVERED)


# ---- the rows added from the cookbook, planned from a recorded config.json ----------------------

@pytest.mark.parametrize("version", ["0.5.9", "0.5.15", "0.5.19", "0.5.23"])
def test_glm_5_plans_the_cookbooks_parsers_and_mtp_on_every_version(version):
    from tests.test_recipes import SPEC_KEYS, plan, recorded
    p = plan(recorded("zai-org--GLM-5-FP8"), {"model": "H200", "count": 8}, version)
    assert p.argv[p.argv.index("--tool-call-parser") + 1] == "glm47"
    assert p.argv[p.argv.index("--reasoning-parser") + 1] == "glm45"
    assert tuple(p.intents[k].value for k in SPEC_KEYS) == ("EAGLE", 3, 1, 4)
    assert p.intents["tool_call_parser"].reason.startswith("recipe glm-5:")
    assert not any("no recipe" in w for w in p.warnings), p.warnings


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_llama_3_1_gets_the_llama3_tool_parser_and_other_llama_architectures_do_not(version):
    from tests.test_recipes import plan, recorded
    p = plan(recorded("meta-llama--Meta-Llama-3.1-405B"), {"model": "H200", "count": 8}, version)
    assert p.argv[p.argv.index("--tool-call-parser") + 1] == "llama3"
    assert "--reasoning-parser" not in p.argv
    # the architecture alone does not name the family: another LlamaForCausalLM model keeps auto
    assert recipes.find("some-org/Llama-2-70b", ("LlamaForCausalLM",), "llama") is None


# ---- Nemotron 3 Super: MTP from the cookbook's recipe ----------------------------------------------

def _nemotron(model: str, **extra):
    """Nemotron 3 Nano's recorded config.json under another model id, with ``extra`` keys: a
    constructed stand-in (no Nemotron 3 Super config.json is recorded), same architecture."""
    import json

    from sglang_deploy.plan.modelfacts import facts_from_metadata
    folder = Path(__file__).parent / "fixtures" / "checkpoints" / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
    config = {**json.loads((folder / "config.json").read_text()), **extra}
    return facts_from_metadata(model, None, "constructed from the recorded Nemotron 3 Nano config.json", config)


SUPER = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16"


@pytest.mark.parametrize("version", ["0.5.9", "0.5.15", "0.5.19", "0.5.23"])
def test_nemotron_3_super_with_its_mtp_layer_plans_the_cookbooks_mtp_and_parsers(version):
    from tests.test_recipes import SPEC_KEYS, plan
    # NemotronHConfig.num_nextn_predict_layers (sglang srt/configs/nemotron_h.py): the MTP layers a checkpoint carries
    p = plan(_nemotron(SUPER, num_nextn_predict_layers=1), {"model": "H200", "count": 8}, version)
    assert tuple(p.intents[k].value for k in SPEC_KEYS) == ("EAGLE", 3, 1, 4)
    assert p.intents["speculative_algorithm"].reason.startswith("recipe nemotron-3-super:")
    assert p.argv[p.argv.index("--tool-call-parser") + 1] == "qwen3_coder"
    assert p.argv[p.argv.index("--reasoning-parser") + 1] == ("nano_v3" if version == "0.5.9" else "nemotron_3")


def test_nemotron_3_without_mtp_layers_gets_no_speculative_decoding():
    from tests.test_recipes import plan
    # a Super checkpoint whose config.json names no MTP layer: said, not assumed
    bare = plan(_nemotron(SUPER), {"model": "H200", "count": 8})
    assert bare.intents["speculative_algorithm"].value is None
    assert any("recipe nemotron-3-super: no speculative decoding" in w for w in bare.warnings), bare.warnings
    # Nano (its own row, no MTP in its recipe) plans neither MTP nor a warning about it
    nano = plan(_nemotron("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"), {"model": "H100 SXM", "count": 2})
    assert nano.intents["speculative_algorithm"].value is None
    assert nano.intents["tool_call_parser"].reason.startswith("recipe nemotron-3:")
    assert not any("speculative" in w for w in nano.warnings), nano.warnings


def test_deepseek_r1_gets_the_cookbooks_tool_parser_and_its_chat_template_note():
    from tests.test_recipes import plan, recorded
    p = plan(recorded("deepseek-ai--DeepSeek-R1"), {"model": "H200", "count": 8})
    assert p.argv[p.argv.index("--tool-call-parser") + 1] == "deepseekv3"
    assert p.argv[p.argv.index("--reasoning-parser") + 1] == "deepseek-r1"
    assert any("tool_chat_template_deepseekr1.jinja" in w for w in p.warnings), p.warnings
