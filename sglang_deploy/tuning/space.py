"""The tuner's search space: which intents it varies, over which values, in which order.

The space is data (``data/tuning/space.yaml``): dimensions with candidate values and a
sensitivity rank, and rules that adapt them to the model family and the hardware (speculative
dimensions only where the model has a draft, custom allreduce only with tensor parallelism,
batch and chunk sizes by GPU memory). :func:`default_space` applies those rules, then keeps
only values the SGLang version can express: each candidate is compiled with the version's
dialect and its argv checked against the version's catalog; a value the dialect refuses or
cannot render, the catalog rejects, or that renders the same command line as an earlier value
is dropped with a note (the check: sglang_deploy/tuning/version_check.py). :func:`load_space`
applies an operator's ``--space FILE``.

A space's dimensions, the rules between them (dependent dimensions: the speculative shape) and
config keys are sglang_deploy/tuning/dimensions.py; the names stay importable from here.

Pure: reads only its data file and the file an operator names.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.intents import check_value
from sglang_deploy.plan.profiles import DataError, _match
from sglang_deploy.shipped import load_shipped_yaml
from sglang_deploy.untrusted import UntrustedInput, load_yaml, printable, read_text_file, shown
from sglang_deploy.plan.tuning_record import LAYOUT, TUNABLE
from sglang_deploy.tuning.dimensions import (SPEC_DEFAULTS, SPEC_SHAPE, Dimension, Layout, Space, _sort_key,
                                             config_key, max_draft_tokens)
from sglang_deploy.tuning.objective import OBJECTIVES
from sglang_deploy.tuning.version_check import VersionCheck, version_checker

if TYPE_CHECKING:
    from sglang_deploy.plan.profiles import ModelProfile


#: Candidates one --space entry may list (the shipped space has at most six per dimension).
MAX_SPACE_VALUES = 256
#: A --space file: a few lines (read as a regular file, YAML without aliases, nesting capped).
MAX_SPACE_BYTES = 1 << 20

REQUIRES = ("speculative", "speculative_tree")


class SpaceError(ValueError):
    """A space file (shipped or given with --space) that cannot be used; names the file and key."""


# ---- the shipped data ---------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _shipped() -> dict[str, Any]:
    path = resources.files("sglang_deploy").joinpath("data").joinpath("tuning").joinpath("space.yaml")
    with path.open("r", encoding="utf-8") as fh:
        data = load_shipped_yaml(fh)
    if not isinstance(data, dict):
        raise DataError(f"data/tuning/space.yaml: expected a mapping, got {type(data).__name__}")
    return data


def _dimensions(raw: Mapping[str, Any], origin: str) -> dict[str, Dimension]:
    out = {}
    for name, spec in (raw.get("dimensions") or {}).items():
        where = f"{origin}: dimensions.{name}"
        if name not in TUNABLE:
            raise DataError(f"{where}: not a tunable intent ({', '.join(TUNABLE)})")
        unknown = set(spec) - {"rank", "ordered", "values", "requires", "reason"}
        if unknown or "values" not in spec or "rank" not in spec or not spec.get("reason"):
            raise DataError(f"{where}: needs rank, values and reason; unknown keys: {sorted(unknown)}")
        rank = spec["rank"]
        rank = {o: rank for o in OBJECTIVES} if isinstance(rank, int) else dict(rank)
        if set(rank) != set(OBJECTIVES):
            raise DataError(f"{where}: rank needs one number or one per objective ({', '.join(OBJECTIVES)})")
        if spec.get("requires") not in (None, *REQUIRES):
            raise DataError(f"{where}: requires must be one of {', '.join(REQUIRES)}")
        values = tuple(_checked(name, v, where) for v in spec["values"])
        out[name] = Dimension(name, values, rank, bool(spec.get("ordered", False)), spec["reason"],
                              spec.get("requires"))
    return out


def _checked(intent: str, value: Any, where: str) -> Any:
    if isinstance(value, float) and not math.isfinite(value):  # NaN passes every range check
        raise SpaceError(f"{where}: {intent} must be a finite number, got {value}")
    try:
        return check_value("space", where, intent, value)
    except PlanError as exc:
        raise SpaceError(f"{where}: {printable(exc.message)[:200]}") from None


# ---- building the space ------------------------------------------------------------


def facts_for(start: Mapping[str, Any], model: "ModelProfile | None", arch: str | None,
              gpu_memory_gib: float | None) -> dict[str, Any]:
    facts = dict(model.facts) if model else {}
    tp = start.get("tp_size", 1)
    return {
        "arch": arch,
        "mtp": bool(facts.get("mtp")),
        "moe": bool(facts.get("moe")),
        "multimodal": bool(facts.get("multimodal")),
        "hybrid_attention": bool(facts.get("hybrid_attention")),
        "tp_size": tp if isinstance(tp, int) else 1,
        "gpu_memory_gib": gpu_memory_gib,
        "model_family": model.key if model else None,
        "spec_algorithm": start.get("speculative_algorithm"),
    }


def default_space(version: str | None, start: Mapping[str, Any], *, model: "ModelProfile | None" = None,
                  arch: str | None = None, gpu_memory_gib: float | None = None, model_path: str = "model",
                  data: Mapping[str, Any] | None = None, layouts: tuple[Layout, ...] = (),
                  layout_notes: tuple[str, ...] = ()) -> Space:
    """The shipped space for this model, hardware and start config, with only values SGLang
    ``version`` accepts (no version check when ``version`` is None). ``layouts``: the (tp, dp,
    attn_dp) the host's plan accepts (:func:`layout_candidates`; the plan has checked them against
    the version, the GPUs and the model); none: the layout is not tuned (``layout_notes`` say why)."""
    raw = data if data is not None else _shipped()
    origin = "data/tuning/space.yaml" if data is None else "space data"
    dims = _dimensions(raw, origin)
    notes: list[str] = []
    facts = facts_for(start, model, arch, gpu_memory_gib)
    for rule in raw.get("rules") or ():
        where = f"{origin} rule {rule.get('id')}"
        if not _match(rule.get("when") or {}, facts, where):
            continue
        for name, values in (rule.get("values") or {}).items():
            if name not in dims:
                raise DataError(f"{where}: unknown dimension {name!r}")
            values = [start.get("speculative_algorithm") if v == "start" else v for v in values]
            dims[name] = replace(dims[name], values=tuple(_checked(name, v, where) for v in values))
        for name in rule.get("drop") or ():
            if dims.pop(name, None) is not None:
                notes.append(f"{name}: not tuned: {rule['reason']}")
    checker = version_checker(version, start, model, model_path) if version else None
    layouts = tuple(sorted(set(layouts)))
    for name in LAYOUT:
        if name in dims:
            values = sorted({lay[LAYOUT.index(name)] for lay in layouts})
            dims[name] = replace(dims[name], values=tuple(values))
    notes.extend(layout_notes)
    kept = []
    for dim in dims.values():
        values = list(dim.values)
        if dim.intent in LAYOUT:
            if len(values) < 2:
                if dim.intent == "tp_size" and layouts:
                    notes.append("tp_size: not tuned: the plan accepts no other TP on this host")
                elif layouts:
                    notes.append(f"{dim.intent}: not tuned: one value in the layouts the plan accepts")
                continue
            kept.append(replace(dim, values=tuple(values)))
            continue
        if checker is not None:
            values = _accepted(dim, values, checker, version, notes)
        if dim.requires and not _has_speculation(dims, start):
            notes.append(f"{dim.intent}: not tuned: no speculative algorithm is available for this model")
            continue
        if len(values) < 2:
            if dim.intent == "speculative_algorithm":
                notes.append("speculative_algorithm: not tuned: the model has no MTP/NextN draft layers and the "
                             "plan names no draft model")
            else:
                notes.append(f"{dim.intent}: not tuned: SGLang {version} leaves fewer than two distinct values")
            continue
        kept.append(replace(dim, values=tuple(values)))
    return Space(tuple(kept), tuple(notes), version, couplings=_couplings(raw, origin, kept), checker=checker,
                 layouts=layouts if any(d.intent in LAYOUT for d in kept) else ())


def _couplings(raw: Mapping[str, Any], origin: str, kept: list[Dimension]) -> tuple[tuple[str, str], ...]:
    ordered = {d.intent for d in kept if d.ordered}
    out = []
    for entry in raw.get("couplings") or ():
        pair = entry.get("intents") if isinstance(entry, Mapping) else None
        if not (isinstance(pair, list) and len(pair) == 2 and all(p in TUNABLE for p in pair)
                and entry.get("reason")):
            raise DataError(f"{origin}: couplings: each needs intents (two tunable intents) and a reason")
        if all(p in ordered for p in pair):
            out.append((pair[0], pair[1]))
    return tuple(out)


def _has_speculation(dims: Mapping[str, Dimension], start: Mapping[str, Any]) -> bool:
    algo = dims.get("speculative_algorithm")
    return bool(algo and any(v is not None for v in algo.values)) or start.get("speculative_algorithm") is not None


def _accepted(dim: Dimension, values: list[Any], checker: VersionCheck, version: str | None,
              notes: list[str]) -> list[Any]:
    kept: list[Any] = []
    argvs: dict[tuple[str, ...], Any] = {}
    for value in values:
        why = checker(dim.intent, value)
        if why is not None:
            notes.append(f"{dim.intent}={value!r}: dropped: {why}")
            continue
        if dim.intent not in SPEC_SHAPE and dim.intent != "speculative_algorithm":
            argv = tuple(checker.argv(dim.intent, value))
            if argv in argvs:
                notes.append(f"{dim.intent}={value!r}: dropped: SGLang {version} renders it the same as "
                             f"{argvs[argv]!r}")
                continue
            argvs[argv] = value
        kept.append(value)
    return kept


def space_for_plan(plan: Any, replan: Callable[[Mapping[str, Any]], Any] | None = None) -> Space:
    """The default space for a host's plan (plan.Plan, not imported: the plan imports the tuning
    record, which takes the tunable intents from here): its version, model, GPUs and current intents.
    ``replan``: the host planned again with a layout as its trial (PlanError when the planner
    refuses it); without it the layout is not tuned."""
    from sglang_deploy.plan.facts_layer import dialect_model
    from sglang_deploy.plan.profiles import load_knowledge

    knowledge = load_knowledge()
    profile = knowledge.models.get(plan.model_profile) if plan.model_profile else None
    model = dialect_model(profile, plan.facts) if plan.facts is not None else profile
    start = {k: r.value for k, r in plan.intents.items()}
    layouts, notes = layout_candidates(plan, replan)
    return default_space(plan.sglang_version, start, model=model, arch=plan.arch,
                         gpu_memory_gib=plan.gpus.memory_gib, model_path=plan.model_path, layouts=layouts,
                         layout_notes=notes)


def layout_candidates(plan: Any, replan: Callable[[Mapping[str, Any]], Any] | None) -> tuple[tuple[Layout, ...],
                                                                                               tuple[str, ...]]:
    """The layouts (tp, dp, attn_dp) the tuner may try on this host, and why others are not tried.

    Candidates: the TPs the planner itself considers on this host (facts_layer._candidates: powers
    of two up to the GPU count, and the count), each with the replicas that fill the GPUs
    (fill_layout's rule), and for an MLA model TP x 1 with DP attention over the TP group (the
    planner's DP attention rule, facts_layer.DP_ATTENTION_SOURCE). Each is planned (``replan``) with
    the layout as the trial layer: a layout the plan refuses (heads, memory, the KV floor, the
    version's catalog, ...) is never tried, nor one whose plan serves a shorter context than the
    plan's own (a layout is tuned for speed, never by cutting what the server serves). None when
    the inventory declares the layout, on a member of a multi-node tp group, or without ``replan``."""
    from sglang_deploy.errors import PlanError
    from sglang_deploy.plan import layers
    from sglang_deploy.plan.facts_layer import _candidates
    from sglang_deploy.plan.tuning_record import layout_words

    r = plan.intents
    start: Layout = (r["tp_size"].value, r["dp_size"].value, r["attn_dp_size"].value)
    if plan.tp_node is not None:
        return (), ("tp_size: not tuned: a member of a multi-node tp group (its TP spans the group's nodes)",)
    declared = [f"{n} ({r[n].layer} layer)" for n in LAYOUT if r[n].layer in layers.INVENTORY]
    if declared:
        return (), (f"tp_size: not tuned: the inventory declares the layout: {', '.join(declared)}",)
    if replan is None:
        return (), ("tp_size: not tuned: no planner to check the layouts against",)
    count, mla = plan.gpus.count, bool(plan.facts is not None and getattr(plan.facts, "mla", False))
    context = r["context_length"].value if "context_length" in r else None
    out, notes = [start], []
    for tp in _candidates(plan.gpus, 1):
        for attn in ((1, tp) if mla and tp > 1 else (1,)):
            layout = (tp, 1 if attn > 1 else max(1, count // tp), attn)
            if layout in out:
                continue
            words = layout_words(dict(zip(LAYOUT, layout)))
            try:
                other = replan(dict(zip(LAYOUT, layout)))
            except PlanError as exc:
                notes.append(f"layout {words}: not tried: the plan refuses it: {printable(exc.field)}: "
                             f"{printable(exc.message)[:300]}")
                continue
            theirs = other.intents["context_length"].value if "context_length" in other.intents else None
            if context and (theirs is None or theirs < context):
                notes.append(f"layout {words}: not tried: its plan serves a context of {theirs} tokens, "
                             f"the plan's own {context}")
                continue
            out.append(layout)
    return tuple(sorted(out)), tuple(notes)


# ---- --space FILE ---------------------------------------------------------------------


def load_space(source: str | Path | Mapping[str, Any], default: Space) -> Space:
    """``default`` with the operator's space applied: a mapping intent -> list of values (or
    ``{values: [...]}``). A named intent's candidates replace the default ones (one value pins
    it; an empty list removes the dimension); intents not named keep their defaults. An unknown
    intent, a value of the wrong type, or one the SGLang version cannot take is a SpaceError
    naming the file and the key."""
    if isinstance(source, Mapping):
        origin, raw = "--space", source
    else:
        origin = printable(str(source))
        try:  # a regular file (a FIFO is refused, not read), YAML without aliases, nesting capped
            raw = load_yaml(read_text_file(source, origin, MAX_SPACE_BYTES), origin, MAX_SPACE_BYTES, max_depth=8)
        except UntrustedInput as exc:
            raise SpaceError(str(exc)) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise SpaceError(f"{origin}: expected a mapping of intent -> list of values, got {type(raw).__name__}")
    shipped = _dimensions(_shipped(), "data/tuning/space.yaml")
    dims = {d.intent: d for d in default.dimensions}
    notes = list(default.notes)
    for key, spec in raw.items():
        where = f"{origin}: {printable(str(key))[:80]}"
        if key not in TUNABLE:
            known = ", ".join(TUNABLE)
            raise SpaceError(f"{where}: unknown intent {shown(key)}; the tuner varies: {known}")
        if isinstance(spec, Mapping):
            extra = set(spec) - {"values"}
            if extra or "values" not in spec:
                raise SpaceError(f"{where}: expected a list of values or {{values: [...]}}, "
                                 f"unknown keys: {sorted(map(str, extra))}")
            spec = spec["values"]
        if not isinstance(spec, list) or len(spec) > MAX_SPACE_VALUES:
            raise SpaceError(f"{where}: expected a list of at most {MAX_SPACE_VALUES} values, got {shown(spec)}")
        if key == "dp_size":
            raise SpaceError(f"{where}: dp_size follows tp_size (the replicas that fill the GPUs); list tp_size")
        values = []
        for value in spec:
            value = _checked(key, value, where)
            if key in LAYOUT:
                accepted = sorted({lay[LAYOUT.index(key)] for lay in default.layouts})
                if value not in accepted:
                    raise SpaceError(f"{where}: {shown(value)}: not a layout this host's plan accepts "
                                     f"({'accepted: ' + ', '.join(map(str, accepted)) if accepted else 'none tuned'})")
            elif default.checker is not None:
                why = default.checker(key, value)
                if why is not None:
                    raise SpaceError(f"{where}: {shown(value)}: {printable(str(why))[:200]}")
            if value not in values:
                values.append(value)
        if not values:
            dims.pop(key, None)
            notes.append(f"{key}: not tuned: removed by {origin}")
            continue
        template = dims.get(key) or shipped[key]
        if template.ordered:
            values.sort(key=_sort_key)
        dims[key] = replace(template, values=tuple(values))
    order = [n for n in TUNABLE if n in dims]
    kept = [dims[n] for n in order]
    layouts = tuple(lay for lay in default.layouts
                    if all(lay[LAYOUT.index(d.intent)] in d.values for d in kept if d.intent in LAYOUT))
    return Space(tuple(kept), tuple(notes), default.version, checker=default.checker,
                 couplings=_couplings(_shipped(), "data/tuning/space.yaml", kept),
                 layouts=layouts if any(d.intent in LAYOUT for d in kept) else ())


def describe(space: Space, objective: str) -> list[str]:
    """One line per dimension, search order, then the notes (for the CLI and the record)."""
    lines = [f"{d.intent}: {', '.join('default' if v is None else str(v) for v in d.values)}"
             + (f" (when {d.requires})" if d.requires else "") for d in space.order(objective)]
    return lines + [f"note: {n}" for n in space.notes]


__all__ = ["Dimension", "LAYOUT", "Space", "SpaceError", "TUNABLE", "SPEC_DEFAULTS", "config_key", "default_space",
           "describe", "layout_candidates", "load_space", "max_draft_tokens", "space_for_plan", "version_checker"]


# ---- across processes -----------------------------------------------------------------


def space_as_dict(space: Space) -> dict[str, Any]:
    """The space as JSON data: the deploy's precheck computes it from the host's own plan (its
    probed GPUs, its version's catalog), the tuner searches it. The version checker stays
    behind: every value in the space has passed it already."""
    return {"version": space.version, "notes": list(space.notes), "couplings": [list(c) for c in space.couplings],
            "layouts": [list(lay) for lay in space.layouts],
            "dimensions": [{"intent": d.intent, "values": list(d.values), "rank": dict(d.rank),
                            "ordered": d.ordered, "reason": d.reason, "requires": d.requires}
                           for d in space.dimensions]}


def space_from_dict(data: Mapping[str, Any]) -> Space:
    """The inverse of :func:`space_as_dict` (without the checker)."""
    dims = tuple(Dimension(intent=d["intent"], values=tuple(d["values"]), rank=dict(d["rank"]),
                           ordered=bool(d["ordered"]), reason=d["reason"], requires=d.get("requires"))
                 for d in data["dimensions"])
    return Space(dims, tuple(data.get("notes") or ()), data.get("version"),
                 couplings=tuple(tuple(c) for c in data.get("couplings") or ()),
                 layouts=tuple((int(t), int(d), int(a)) for t, d, a in data.get("layouts") or ()))
