"""Knowledge as data: architecture profiles, topology rules, model profiles.

The YAML files under ``sglang_deploy/data`` hold what we know; this module
loads and checks them, and applies rules. Adding an architecture or a model is
adding a file (see docs/extending.md, "Adding an architecture or a model").

A model profile's ``intents`` are tuned knowledge (measured or chosen for the
model, e.g. speculative settings); its ``facts``, ``fallback_intents`` and
``rules`` size the plan only when the checkpoint's own metadata is unavailable
(with it, the model-facts layer decides: facts_layer.py).

A rule is ``{id, when, unless, set, enforce, reason, source}``:
  when / unless  conditions on facts (all must hold); a condition value is a
                 scalar (equal), a list (one of) or ``{gt|ge|lt|le|ne: x}``
  set            intent defaults at the rule's layer
  enforce        intents forced after every layer, even over host data: the
                 hardware cannot do otherwise (a warning says so when a higher
                 layer asked for something else)
  reason         why; ``{fact}`` in it is replaced by that fact's value
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, Iterable

from sglang_deploy.plan.hardware import GpuDatabase
from sglang_deploy.plan.intents import INTENTS
from sglang_deploy.shipped import load_shipped_yaml

if TYPE_CHECKING:
    from importlib.abc import Traversable  # importlib.resources.abc from 3.11 on

_OPS = {
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "ne": lambda a, b: a != b,
}


def fill_reason(reason: str, facts: dict[str, Any]) -> str:
    """A rule's reason with ``{fact}`` replaced by that fact's value (``{fabric_detail}`` in
    data/topology.yaml); a name that is no fact is left as written."""
    return re.sub(r"\{([a-z_][a-z0-9_]*)\}",
                  lambda m: str(facts[m.group(1)]) if m.group(1) in facts else m.group(0), reason)


class DataError(Exception):
    """A shipped or added data file is malformed (a bug in the data, not user input)."""


@dataclass(frozen=True)
class Setting:
    intent: str
    value: Any
    reason: str
    source: str | None = None


@dataclass(frozen=True)
class Rule:
    id: str
    layer: str
    when: dict[str, Any]
    unless: dict[str, Any]
    set: tuple[Setting, ...]
    enforce: tuple[Setting, ...]
    origin: str

    def applies(self, facts: dict[str, Any]) -> bool:
        if not _match(self.when, facts, self.origin):
            return False
        return not (self.unless and _match(self.unless, facts, self.origin))


def _match(conds: dict[str, Any], facts: dict[str, Any], origin: str) -> bool:
    for key, want in conds.items():
        if key not in facts:
            raise DataError(f"{origin}: condition on unknown fact {key!r} (facts: {', '.join(sorted(facts))})")
        have = facts[key]
        if isinstance(want, dict):
            for op, arg in want.items():
                if op not in _OPS:
                    raise DataError(f"{origin}: unknown operator {op!r}")
                if have is None or not _OPS[op](have, arg):
                    return False
        elif isinstance(want, list):
            if have not in want:
                return False
        elif have != want:
            return False
    return True


@dataclass(frozen=True)
class ArchProfile:
    key: str
    name: str
    compute_capabilities: tuple[str, ...]
    examples: tuple[str, ...]
    capabilities: dict[str, Any]
    settings: tuple[Setting, ...]
    rules: tuple[Rule, ...]


@dataclass(frozen=True)
class ModelProfile:
    key: str
    models: tuple[str, ...]
    architecture: str
    description: str
    facts: dict[str, Any]
    service: dict[str, Any]
    settings: tuple[Setting, ...]
    rules: tuple[Rule, ...] = field(default=())
    # Sizing a profile states for when no checkpoint metadata answers (its ``facts`` table
    # likewise): with the checkpoint's own facts, the model-facts layer decides these.
    fallback: tuple[Setting, ...] = field(default=())


def _settings(raw: Any, origin: str) -> tuple[Setting, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise DataError(f"{origin}: expected a mapping of intent -> {{value, reason}}")
    out = []
    for name, spec in raw.items():
        if name not in INTENTS:
            raise DataError(f"{origin}: unknown intent {name!r}")
        if not isinstance(spec, dict) or "value" not in spec or not spec.get("reason"):
            raise DataError(f"{origin}: intent {name} needs a value and a reason")
        out.append(Setting(name, spec["value"], spec["reason"], spec.get("source")))
    return tuple(out)


def _rule_settings(r: Any, key: str, where: str) -> tuple[Setting, ...]:
    """A rule's ``set`` or ``enforce`` table, each carrying the rule's reason and source."""
    values = r.get(key) or {}
    for name in values:
        if name not in INTENTS:
            raise DataError(f"{where}: unknown intent {name!r}")
    return tuple(Setting(n, v, r["reason"], r.get("source")) for n, v in values.items())


def _rules(raw: Any, layer: str, origin: str) -> tuple[Rule, ...]:
    out = []
    for i, r in enumerate(raw or []):
        where = f"{origin} rule {r.get('id', i)}"
        unknown = set(r) - {"id", "when", "unless", "set", "enforce", "reason", "source"}
        if unknown or "id" not in r or "reason" not in r:
            raise DataError(f"{where}: needs id and reason; unknown keys: {sorted(unknown)}")
        out.append(Rule(id=r["id"], layer=layer, when=r.get("when") or {}, unless=r.get("unless") or {},
                        set=_rule_settings(r, "set", where), enforce=_rule_settings(r, "enforce", where),
                        origin=where))
    return tuple(out)


def _load_yaml(path: Traversable) -> Any:
    with path.open("r", encoding="utf-8") as fh:
        return load_shipped_yaml(fh)


def _data_dir() -> Traversable:
    return resources.files("sglang_deploy").joinpath("data")


@dataclass(frozen=True)
class Knowledge:
    archs: dict[str, ArchProfile]
    models: dict[str, ModelProfile]
    topology_rules: tuple[Rule, ...]
    model_rules: tuple[Rule, ...]
    gpus: GpuDatabase

    @property
    def arch_of_capability(self) -> dict[str, str]:
        return {cc: a.key for a in self.archs.values() for cc in a.compute_capabilities}

    def model_for(self, model_path: str) -> ModelProfile | None:
        folded = model_path.rstrip("/").lower()
        for profile in self.models.values():
            if any(folded == m.lower() for m in profile.models):
                return profile
        return None


def load_arch(raw: dict[str, Any], origin: str) -> ArchProfile:
    for key in ("arch", "name", "compute_capabilities", "capabilities"):
        if key not in raw:
            raise DataError(f"{origin}: missing {key}")
    return ArchProfile(
        key=raw["arch"],
        name=raw["name"],
        compute_capabilities=tuple(str(c) for c in raw["compute_capabilities"]),
        examples=tuple(raw.get("examples") or ()),
        capabilities=dict(raw["capabilities"]),
        settings=_settings(raw.get("intents"), origin),
        rules=_rules(raw.get("rules"), "arch", origin),
    )


def load_model(raw: dict[str, Any], origin: str) -> ModelProfile:
    for key in ("key", "models", "architecture", "facts"):
        if key not in raw:
            raise DataError(f"{origin}: missing {key}")
    return ModelProfile(
        key=raw["key"],
        models=tuple(raw["models"]),
        architecture=raw["architecture"],
        description=raw.get("description", ""),
        facts=dict(raw["facts"]),
        service=dict(raw.get("service") or {}),
        settings=_settings(raw.get("intents"), origin),
        rules=_rules(raw.get("rules"), "model", origin),
        fallback=_settings(raw.get("fallback_intents"), origin),
    )


def _yaml_files(folder: Any) -> Iterable[Any]:
    return sorted((p for p in folder.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name)


@functools.lru_cache(maxsize=1)
def load_knowledge() -> Knowledge:
    data = _data_dir()
    archs: dict[str, ArchProfile] = {}
    for path in _yaml_files(data.joinpath("arch")):
        arch = load_arch(_load_yaml(path), f"data/arch/{path.name}")
        if arch.key in archs:
            raise DataError(f"data/arch/{path.name}: duplicate architecture {arch.key}")
        archs[arch.key] = arch
    seen: dict[str, str] = {}
    for arch in archs.values():
        for cc in arch.compute_capabilities:
            if cc in seen:
                raise DataError(f"compute capability {cc} in both {seen[cc]} and {arch.key}")
            seen[cc] = arch.key
    models: dict[str, ModelProfile] = {}
    for path in _yaml_files(data.joinpath("models")):
        model = load_model(_load_yaml(path), f"data/models/{path.name}")
        models[model.key] = model
    topo = _load_yaml(data.joinpath("topology.yaml"))
    return Knowledge(
        archs=archs,
        models=models,
        topology_rules=_rules(topo.get("rules"), "topology", "data/topology.yaml"),
        model_rules=_rules(_load_yaml(data.joinpath("model_rules.yaml")).get("rules"), "model",
                           "data/model_rules.yaml"),
        gpus=GpuDatabase(_load_yaml(data.joinpath("gpus.yaml"))),
    )
