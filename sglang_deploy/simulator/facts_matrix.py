"""SIMULATOR ONLY: the facts matrix: every recorded checkpoint x the hardware layouts of
``plan_matrix.FACTS_HARDWARE`` x every supported SGLang version, planned with the checkpoint's
facts. Shared by the matrix tests (tests/test_facts_matrix.py, tests/recorded_facts.py),
scripts/check_plans_against_real_parsers.py and benchmarks/plan_facts_table.py, plan_time.py
and plan_scale.py.

The recorded checkpoints: the Hub stand-in's (``hub/checkpoints``: config.json and a recorded or
derived safetensors index) and, in a source checkout, the published configs of
``tests/fixtures/checkpoints`` (config.json with provenance.json, no index). A fixture's total
weight size is derived from its config's shapes by ``hub/tensors.py`` only where the Hub
stand-in derives it for the same family (llama, qwen3, qwen3_moe, mixtral; unquantized, so no
scale dtype is assumed); otherwise it stays unknown and the planner says it cannot check memory.

``python -m sglang_deploy.simulator.facts_matrix [VERSION]`` prints the checkpoint x layout
table: TP x DP (DP attention), GPUs serving / present, context, the weight size's source, the
refusal or idle reason; ``python -m tests.test_facts_matrix [VERSION]`` adds the published
recipe's layout where the recipes table (tests/test_recipes.py) has one for that model and
hardware, with the difference."""

from __future__ import annotations

import functools
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from sglang_deploy.plan.catalog import SUPPORTED_VERSIONS
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.modelfacts import ModelFacts, facts_from_metadata
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.simulator.hub import derive, tensors
from sglang_deploy.simulator.plan_matrix import FACTS_HARDWARE

HARDWARE = FACTS_HARDWARE
CHECKPOINTS = Path(__file__).resolve().parent / "hub" / "checkpoints"
FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "checkpoints"
#: Families whose tensor listing hub/tensors.py rebuilds and checks against a recorded listing
#: (tests/test_hub_checkpoints.py), for unquantized configs.
DERIVED_FAMILIES = ("llama", "qwen3", "qwen3_moe", "mixtral")


def _fixture_index(config: dict[str, Any]) -> dict | None:
    """The derived index of a fixture whose family the Hub stand-in derives, else None."""
    if config.get("model_type") not in DERIVED_FAMILIES or config.get("quantization_config") is not None:
        return None
    return {"metadata": {"total_size": tensors.total_size(tensors.tensors_for(config))}}


@functools.lru_cache(maxsize=1)
def _recorded() -> tuple[dict[str, ModelFacts], dict[str, str]]:
    out, weights = {}, {}
    for d in sorted(p for p in CHECKPOINTS.iterdir() if (p / "config.json").is_file()):
        model = d.name.replace("--", "/", 1)
        config = json.loads((d / "config.json").read_text())
        index_file = d / "model.safetensors.index.json"
        index = json.loads(index_file.read_text()) if index_file.is_file() else None
        # A single-file checkpoint (no index on the Hub): the size its safetensors header gives.
        headers = None if index else [tensors.total_size(derive.checkpoint_tensors(d.name))]
        out[model] = facts_from_metadata(model, None, f"recorded checkpoint {d.name}", config, index,
                                         safetensors_header_sizes=headers)
        weights[model] = "hub"
    if FIXTURES.is_dir():
        for d in sorted(p for p in FIXTURES.iterdir() if (p / "provenance.json").is_file()):
            model = json.loads((d / "provenance.json").read_text())["model"]
            config = json.loads((d / "config.json").read_text())
            tok, quant = d / "tokenizer_config.json", d / "hf_quant_config.json"
            index = _fixture_index(config)
            out[model] = facts_from_metadata(model, None, f"recorded config {d.name}", config, index,
                                             tokenizer_config=json.loads(tok.read_text()) if tok.is_file() else None,
                                             hf_quant_config=json.loads(quant.read_text()) if quant.is_file() else None)
            weights[model] = "derived" if index else "unknown"
    return out, weights


def checkpoints() -> dict[str, ModelFacts]:
    """Facts per recorded checkpoint (read by the real parser), keyed by the id the server loads."""
    return dict(_recorded()[0])


def weight_source(model: str) -> str:
    """Where a checkpoint's total weight size comes from: hub (the stand-in's recorded or derived
    index), derived (the fixture's config shapes, hub/tensors.py) or unknown."""
    return _recorded()[1][model]


def cases() -> list[tuple[str, str, str]]:
    return list(itertools.product(sorted(checkpoints()), sorted(HARDWARE), SUPPORTED_VERSIONS))


def plan_case(model: str, hardware: str, version: str, facts: ModelFacts | None = None,
              **data: Any) -> Plan | PlanError:
    facts = facts or checkpoints()[model]
    data = {"sglang_model": model, "sglang_gpus": HARDWARE[hardware],
            "sglang_secrets": {"api_key": {"env": "SGLANG_API_KEY"}}, **data}
    try:
        return plan_host(build_spec("m", {}, data), sglang_version=version, facts=facts)
    except PlanError as exc:
        return exc


def plans(version: str | None = None) -> Iterator[tuple[tuple[str, str, str], Plan | PlanError]]:
    facts = checkpoints()
    for case in cases():
        if version is None or case[2] == version:
            yield case, plan_case(*case, facts=facts[case[0]])


# ---- the layout table ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Recipe:
    """A published launch line's layout (tests/test_recipes.py RECIPES)."""

    name: str
    layout: dict[str, int]
    url: str


def recipes_by_layout(rows: Iterable[tuple[str, str, dict, dict, str]]) -> dict[tuple[str, str], Recipe]:
    """(model, hardware key) -> the published layout, from (name, model, gpus, layout, url) rows of
    a recipes table (tests/test_recipes.py RECIPES: the package never imports the tests); the
    first row for a model and hardware wins."""
    out: dict[tuple[str, str], Recipe] = {}
    for name, model, gpus, layout, url in rows:
        for key, hw in HARDWARE.items():
            if set(hw) == {"model", "count"} and (hw["model"], hw["count"]) == (gpus["model"], gpus["count"]):
                out.setdefault((model, key), Recipe(name, dict(layout), url))
    return out


def _shape(tp: int, dp: int, attn_dp: int) -> str:
    return f"TP {tp} x DP {dp}" + (f" (DP attention {attn_dp})" if attn_dp > 1 else "")


def recipe_difference(intents: dict[str, Any] | None, recipe: Recipe) -> str:
    """'same' where the plan has the page's layout, else what differs (plan vs page)."""
    page = {"tp_size": 1, "dp_size": 1, "attn_dp_size": 1, **recipe.layout}
    want = _shape(page["tp_size"], page["dp_size"], page["attn_dp_size"])
    if intents is None:
        return f"{recipe.name}: page {want}; plan refused"
    # A launch line that sets no --dp / --enable-dp-attention runs one replica without DP attention.
    names = {"tp_size": "TP", "dp_size": "DP", "attn_dp_size": "DP attention"}
    diff = [f"{names[k]} {intents[k]} vs {v}" for k, v in page.items() if intents[k] != v]
    return f"{recipe.name}: " + ("same" if not diff else f"page {want}; differs: {', '.join(diff)}")


@dataclass(frozen=True)
class Row:
    model: str
    hardware: str
    present: int
    weights: str                 # hub | derived | unknown
    serving: int = 0             # GPUs serving (0: refused)
    shape: str = "-"
    context: str = "-"
    plan: str = "ok"             # ok | idle: why | refused: why
    recipe: str = ""

    @property
    def refused(self) -> bool:
        return self.plan.startswith("refused")

    def cells(self) -> list[str]:
        used = "-" if self.refused else str(self.serving)
        return [self.model, self.hardware, self.shape, f"{used}/{self.present}", self.context, self.weights,
                self.plan, self.recipe]


def _refusal(err: PlanError) -> str:
    if err.message.startswith("constraint "):
        return err.message.split(":", 1)[0]
    if err.field == "tp_size (model-facts)":
        return "no TP fits (weights and the KV floor)"
    return f"{err.field}: {err.message.split(':', 1)[0][:80]}"


def layout_rows(version: str = "0.5.23", recipes: Mapping[tuple[str, str], Recipe] | None = None) -> list[Row]:
    """Checkpoint x layout at ``version``: the plan's layout and GPUs serving, or its refusal, and
    how it differs from the published recipe for that model and hardware (``recipes``)."""
    recipes = recipes or {}
    rows = []
    for (model, hardware, _), result in plans(version):
        count, weights = HARDWARE[hardware]["count"], weight_source(model)
        recipe = recipes.get((model, hardware))
        if isinstance(result, PlanError):
            rows.append(Row(model, hardware, count, weights, plan=f"refused: {_refusal(result)}",
                            recipe=recipe_difference(None, recipe) if recipe else ""))
            continue
        i = {k: r.value for k, r in result.intents.items()}
        used = i["tp_size"] * i["dp_size"]
        idle = next((w.split(" stay idle: ", 1)[1] for w in result.warnings if " stay idle: " in w), None)
        rows.append(Row(model, hardware, count, weights, used, _shape(i["tp_size"], i["dp_size"], i["attn_dp_size"]),
                        str(i["context_length"]), f"idle: {idle}" if idle else "ok",
                        recipe_difference(i, recipe) if recipe else ""))
    return rows


def layout_table(version: str = "0.5.23") -> tuple[list[list[str]], int, int]:
    """The table's cells, and the GPUs serving and present over the plans that were not refused."""
    rows = layout_rows(version)
    planned = [r for r in rows if not r.refused]
    return [r.cells() for r in rows], sum(r.serving for r in planned), sum(r.present for r in planned)


def summary(rows: list[Row], version: str) -> list[str]:
    planned = [r for r in rows if not r.refused]
    known = [r for r in planned if r.weights != "unknown"]
    refused = [r for r in rows if r.refused]

    def share(rs: list[Row]) -> str:
        s, p = sum(r.serving for r in rs), sum(r.present for r in rs)
        return f"{s} of {p} GPUs serve ({s / max(p, 1):.0%}) over {len(rs)} plans"

    reasons: dict[str, int] = {}
    for r in refused:
        reasons[r.plan[len("refused: "):]] = reasons.get(r.plan[len("refused: "):], 0) + 1
    with_recipe = [r for r in rows if r.recipe]
    return [
        f"SGLang {version}: {len(rows)} plans ({len({r.model for r in rows})} checkpoints x "
        f"{len({r.hardware for r in rows})} layouts), {len(planned)} planned, {len(refused)} refused",
        f"not refused: {share(planned)}",
        f"wherever the weights fit (not refused, weight size known): {share(known)}",
        "weight size unknown (memory not checked, largest TP): "
        f"{share([r for r in planned if r.weights == 'unknown'])}",
        "refused: " + "; ".join(f"{n} x {why}" for why, n in sorted(reasons.items(), key=lambda x: -x[1])),
        f"published recipes on these layouts: {len(with_recipe)}, the same layout: "
        f"{sum(r.recipe.endswith(': same') for r in with_recipe)}",
    ]


def main(argv: list[str] | None = None, recipes: Mapping[tuple[str, str], Recipe] | None = None) -> int:
    import sys

    args = sys.argv[1:] if argv is None else argv
    version = args[0] if args else "0.5.23"
    rows = layout_rows(version, recipes)
    head = ["checkpoint", "hardware", "layout", "GPUs serving", "context", "weights", "plan", "published recipe"]
    cells = [r.cells() for r in rows]
    widths = [max(len(r[i]) for r in [head, *cells]) for i in range(len(head) - 2)]
    for r in [head, *cells]:
        print("  ".join([*(c.ljust(w) for c, w in zip(r, widths)), r[-2], r[-1]]).rstrip())
    print()
    print("\n".join(summary(rows, version)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
