"""Recipe flags per model family: what SGLang's own pages launch a model with.

The ``recipes`` section of ``sglang_deploy/data/model_rules.yaml`` (its header documents the
format) keys each family by what the checkpoint's ``config.json`` says (``architectures``,
``model_type``) and, where the family is not in the config, by a pattern on the model's id; the
first recipe that matches wins. :func:`for_model` turns the matching recipe into intents for the
planner's ``model`` layer, each with its reason and source, checked against the installed
version: a parser name the version's catalog does not list among the option's choices is left
out with a warning naming the version, never emitted; speculative decoding is planned only when
the checkpoint carries the draft layers the version loads from the model itself
(``catalog.model_support``), with SGLang's defaults for steps, top-k and draft tokens where the
recipe names none.

Pure: reads the packaged YAML once.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Mapping

from sglang_deploy.plan import constraints
from sglang_deploy.plan.catalog import Catalog
from sglang_deploy.plan.modelfacts import ModelFacts
from sglang_deploy.plan.profiles import DataError
from sglang_deploy.shipped import load_shipped_yaml

ORIGIN = "data/model_rules.yaml recipes"
_PARSERS = {"tool_call_parser": "--tool-call-parser", "reasoning_parser": "--reasoning-parser"}
_MATCH_KEYS = {"architectures", "model_type", "name"}
_KEYS = {"id", "match", "source", "speculative", "chat_template", *_PARSERS}
_SPEC_KEYS = {"algorithm", "reason", "source", "steps", "eagle_topk", "draft_tokens", "layers_without_config_key"}

#: (intent, value, reason, source): one value the recipe sets.
Change = tuple[str, Any, str, "str | None"]


@dataclass(frozen=True)
class Value:
    value: Any
    reason: str
    source: str
    #: SGLang version -> how that version spells the value, where it differs (a renamed parser)
    by_version: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def spelled(self, version: str) -> Any:
        """The value as SGLang ``version`` names it."""
        return self.by_version.get(version, self.value)


@dataclass(frozen=True)
class Speculative:
    algorithm: str
    steps: int
    eagle_topk: int
    draft_tokens: int
    reason: str
    source: str
    numbers_source: str               # the recipe's own, or SGLang's defaults where it names none
    layers_without_config_key: bool = False


@dataclass(frozen=True)
class Recipe:
    id: str
    architectures: frozenset[str]
    model_type: str | None
    name: re.Pattern[str] | None
    parsers: Mapping[str, Value]      # intent -> value
    speculative: Speculative | None
    chat_template: Value | None       # value: the note
    source: str

    def matches(self, model: str, architectures: tuple[str, ...], model_type: str | None) -> bool:
        if self.architectures and not self.architectures.intersection(architectures):
            return False
        if self.model_type is not None and model_type != self.model_type:
            return False
        return self.name is None or self.name.search(model) is not None


@dataclass(frozen=True)
class Result:
    recipe: Recipe | None
    changes: tuple[Change, ...]
    warnings: tuple[str, ...]


def _text(raw: Mapping[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: needs {key} (a non-empty string)")
    return value


def _value(raw: Any, where: str) -> Value:
    if (not isinstance(raw, dict) or set(raw) - {"value", "reason", "source", "by_version"}
            or not isinstance(raw.get("value"), str)):
        raise DataError(f"{where}: expected {{value, reason, source}} with a string value (and by_version)")
    by_version = raw.get("by_version") or {}
    if not isinstance(by_version, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in by_version.items()):
        raise DataError(f"{where}: by_version maps an SGLang version to its spelling of the value")
    return Value(raw["value"], _text(raw, "reason", where), _text(raw, "source", where), dict(by_version))


def _speculative(raw: Any, defaults: Mapping[str, Any], where: str) -> Speculative:
    if not isinstance(raw, dict) or set(raw) - _SPEC_KEYS:
        raise DataError(f"{where}: expected a mapping with keys among {sorted(_SPEC_KEYS)}")
    algo = str(raw.get("algorithm", "")).upper()
    if algo not in constraints.SELF_DRAFT_ALGORITHMS:
        raise DataError(f"{where}: algorithm must be one of {sorted(constraints.SELF_DRAFT_ALGORITHMS)} "
                        "(a draft from the model's own MTP/NextN layers)")
    numbers = {k: raw.get(k, defaults[k]) for k in ("steps", "eagle_topk", "draft_tokens")}
    for k, n in numbers.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise DataError(f"{where}: {k} must be a positive integer")
    if numbers["eagle_topk"] == 1 and numbers["draft_tokens"] != numbers["steps"] + 1:
        raise DataError(f"{where}: with top-k 1 SGLang verifies steps + 1 draft tokens")
    source = _text(raw, "source", where)
    stated = all(k in raw for k in numbers)
    return Speculative(algo, numbers["steps"], numbers["eagle_topk"], numbers["draft_tokens"],
                       _text(raw, "reason", where), source,
                       source if stated else f"SGLang's default: {defaults['source']}",
                       bool(raw.get("layers_without_config_key", False)))


def parse(data: Mapping[str, Any]) -> tuple[Recipe, ...]:
    """The recipes of a model_rules.yaml document (DataError naming the entry when malformed)."""
    defaults = data.get("speculative_defaults")
    if not isinstance(defaults, dict) or not {"steps", "eagle_topk", "draft_tokens", "source"} <= set(defaults):
        raise DataError(f"{ORIGIN}: speculative_defaults needs steps, eagle_topk, draft_tokens and source")
    out: list[Recipe] = []
    for i, raw in enumerate(data.get("recipes") or []):
        where = f"{ORIGIN} {raw.get('id', i) if isinstance(raw, dict) else i}"
        if not isinstance(raw, dict) or set(raw) - _KEYS or "id" not in raw:
            raise DataError(f"{where}: needs id; keys among {sorted(_KEYS)}")
        match = raw.get("match")
        if not isinstance(match, dict) or not match or set(match) - _MATCH_KEYS or not (
                match.get("architectures") or match.get("model_type")):
            raise DataError(f"{where}: match needs architectures or model_type (name only narrows them)")
        if any(r.id == raw["id"] for r in out):
            raise DataError(f"{where}: duplicate id")
        parsers = {k: _value(raw[k], f"{where} {k}") for k in _PARSERS if k in raw}
        out.append(Recipe(
            id=str(raw["id"]),
            architectures=frozenset(match.get("architectures") or ()),
            model_type=match.get("model_type"),
            name=re.compile(match["name"], re.IGNORECASE) if match.get("name") else None,
            parsers=parsers,
            speculative=_speculative(raw["speculative"], defaults, f"{where} speculative")
            if "speculative" in raw else None,
            chat_template=Value(_text(raw["chat_template"], "note", where), "",
                                _text(raw["chat_template"], "source", where)) if "chat_template" in raw else None,
            source=_text(raw, "source", where),
        ))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def load() -> tuple[Recipe, ...]:
    path = resources.files("sglang_deploy").joinpath("data").joinpath("model_rules.yaml")
    with path.open("r", encoding="utf-8") as fh:
        return parse(load_shipped_yaml(fh))


def find(model: str, architectures: tuple[str, ...], model_type: str | None,
         recipes: tuple[Recipe, ...] | None = None) -> Recipe | None:
    """The first recipe whose match holds for this model, or None."""
    for recipe in load() if recipes is None else recipes:
        if recipe.matches(model, architectures, model_type):
            return recipe
    return None


def _choices(catalog: Catalog, option: str) -> tuple[str, ...] | None:
    """The option's choices in this version (None: no such option; () : any value)."""
    spec = catalog.options.get(option)
    if spec is None:
        return None
    return tuple(str(c) for c in (spec.choices or ()))


def for_model(model: str, facts: ModelFacts | None, architecture: str | None, catalog: Catalog,
              version: str, recipes: tuple[Recipe, ...] | None = None) -> Result:
    """The recipe's intents for this model on this SGLang version, and what was left out.

    ``facts``: the checkpoint's (None: planning from a model profile, whose ``architecture``
    then keys the recipe, and speculative decoding, which needs the checkpoint's layers, is
    left to the profile)."""
    archs = facts.architectures if facts is not None else ((architecture,) if architecture else ())
    recipe = find(model, archs, facts.model_type if facts is not None else None, recipes)
    if recipe is None:
        return _no_recipe(facts, catalog, version) if facts is not None else Result(None, (), ())
    changes: list[Change] = []
    warnings: list[str] = []
    label = f"recipe {recipe.id}"
    for intent, v in recipe.parsers.items():
        option = _PARSERS[intent]
        choices = _choices(catalog, option)
        value = v.spelled(version)
        if choices is None or (choices and value not in choices):
            why = "has no such option" if choices is None else "does not list it among its choices"
            warnings.append(f"{label}: {option} {value} left out: SGLang {version} {why} ({v.source})")
            continue
        spelled = f" (SGLang {version} names it {value})" if value != v.value else ""
        changes.append((intent, value, f"{label}: {v.reason}{spelled}", v.source))
    spec = recipe.speculative
    if spec is not None and facts is not None:
        problem = constraints.self_draft_problem(facts, catalog.model_support, version)
        if problem is None and not facts.mtp_layers and not spec.layers_without_config_key:
            # SGLang would assume one draft layer (model_support.assumed_one_layer), but the
            # recipe does not say this family's weights carry it.
            problem = f"{facts.model} names no MTP/NextN layers in its config.json"
        if problem is not None:
            warnings.append(f"{label}: no speculative decoding from the model's own layers: {problem}")
        else:
            numbers = (f"{label}: {spec.steps} steps, top-k {spec.eagle_topk}, {spec.draft_tokens} draft tokens "
                       + ("as the recipe's page launches it" if spec.numbers_source == spec.source
                          else "(SGLang's own default for this architecture)"))
            changes += [("speculative_algorithm", spec.algorithm, f"{label}: {spec.reason}", spec.source),
                        ("speculative_num_steps", spec.steps, numbers, spec.numbers_source),
                        ("speculative_eagle_topk", spec.eagle_topk, numbers, spec.numbers_source),
                        ("speculative_num_draft_tokens", spec.draft_tokens, numbers, spec.numbers_source)]
    if recipe.chat_template is not None:
        warnings.append(f"{label}: {recipe.chat_template.value} ({recipe.chat_template.source})")
    return Result(recipe, tuple(changes), tuple(warnings))


#: Where SGLang resolves ``auto`` parsers at start, from the checkpoint's chat template and
#: tokenizer: 0.5.15 srt/managers/template_detection.py, 0.5.19 and 0.5.23
#: srt/parser/template_detection.py (resolve_auto_parsers, called by srt/entrypoints/engine.py).
AUTO_SOURCE = "sglang srt/parser/template_detection.py resolve_auto_parsers (0.5.15: srt/managers/)"


def _no_recipe(facts: ModelFacts, catalog: Catalog, version: str) -> Result:
    """A checkpoint of a family no recipe names: said, not guessed. Where the version takes
    ``auto`` for both parsers, SGLang picks them from the checkpoint at start; else none is set.
    Either way a warning names what was not set from a recipe and how to set it."""
    family = f"{'/'.join(facts.architectures) or '?'} (model_type {facts.model_type})"
    how = ("set sglang_intents.tool_call_parser, reasoning_parser and speculative_* to choose them "
           "(docs/planning.md)")
    autos = [intent for intent, option in _PARSERS.items() if "auto" in (_choices(catalog, option) or ())]
    if len(autos) == len(_PARSERS):
        reason = (f"no recipe for {family}: SGLang {version} detects the parser from the checkpoint's chat "
                  "template and tokenizer when the server starts")
        changes: list[Change] = [(intent, "auto", reason, AUTO_SOURCE) for intent in autos]
        warning = (f"no recipe for {family}: the tool-call and reasoning parsers are left to SGLang's detection "
                   f"at start (auto), and no speculative decoding is planned from a recipe; {how}")
        return Result(None, tuple(changes), (warning,))
    warning = (f"no recipe for {family}: no tool-call or reasoning parser is set (SGLang {version} has no auto "
               f"detection) and no speculative decoding is planned from a recipe; {how}")
    return Result(None, (), (warning,))
