"""The tuner's search space: which intents it varies, over which values, in which order.

The space is data (``data/tuning/space.yaml``): dimensions with candidate values and a
sensitivity rank, and rules that adapt them to the model family and the hardware (speculative
dimensions only where the model has a draft, custom allreduce only with tensor parallelism,
batch and chunk sizes by GPU memory). :func:`default_space` applies those rules, then keeps
only values the SGLang version can express: each candidate is compiled with the version's
dialect and its argv checked against the version's catalog; a value the dialect refuses or
cannot render, the catalog rejects, or that renders the same command line as an earlier value
is dropped with a note. :func:`load_space` applies an operator's ``--space FILE``.

Dependent dimensions: the speculative shape (steps, top-k, draft tokens) exists only while a
speculative algorithm is on, and at top-k 1 the draft tokens are steps + 1 (SGLang forces it:
server_args.py ServerArgs._handle_speculative_decoding in 0.5.9-0.5.19,
arg_groups/speculative_hook.py _handle_eagle_family in 0.5.23).

Pure: reads only its data file and the file an operator names.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

import yaml

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.intents import INTENTS, check_value
from sglang_deploy.plan.profiles import DataError, _match
from sglang_deploy.untrusted import UntrustedInput, load_yaml, printable, read_text_file, shown
from sglang_deploy.plan.tuning_record import LAYOUT, TUNABLE
from sglang_deploy.tuning.objective import OBJECTIVES

if TYPE_CHECKING:
    from sglang_deploy.plan.profiles import ModelProfile


SPEC_SHAPE = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
#: Candidates one --space entry may list (the shipped space has at most six per dimension).
MAX_SPACE_VALUES = 256
#: A --space file: a few lines (read as a regular file, YAML without aliases, nesting capped).
MAX_SPACE_BYTES = 1 << 20

#: SGLang's speculative shape when none is given: 3 steps, top-k 1, 4 draft tokens
#: (server_args.py auto_choose_speculative_params for most architectures).
SPEC_DEFAULTS = {"speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
REQUIRES = ("speculative", "speculative_tree")
#: A layout the plan accepts: (tp_size, dp_size, attn_dp_size).
Layout = tuple[int, int, int]


class SpaceError(ValueError):
    """A space file (shipped or given with --space) that cannot be used; names the file and key."""


#: A config as the search keys it: its (intent, value) pairs, sorted.
ConfigKey = tuple[tuple[str, Any], ...]


class VersionCheck(Protocol):
    """What :func:`version_checker` returns: called, why SGLang cannot take ``intent = value``
    (None: it can); ``argv``, the command line that value renders on top of the start config."""

    def __call__(self, intent: str, value: Any) -> str | None: ...

    def argv(self, intent: str, value: Any) -> list[str]: ...


def max_draft_tokens(steps: int, topk: int) -> int:
    """The most draft tokens an EAGLE tree of this shape can verify: the root plus the
    ``topk + (steps - 1) * topk**2`` scored candidates SGLang picks the best ``draft - 1`` from
    (speculative/eagle_utils.py organize_draft_results, torch.topk over the score list)."""
    return 1 + topk + (steps - 1) * topk * topk


def _sort_key(value: Any) -> tuple[int, Any]:
    return (0, 0) if value is None else (1, value)


@dataclass(frozen=True)
class Dimension:
    intent: str
    values: tuple[Any, ...]
    rank: Mapping[str, int]
    ordered: bool
    reason: str
    requires: str | None = None

    def rank_for(self, objective: str) -> int:
        return self.rank[objective]


@dataclass(frozen=True)
class Space:
    """Dimensions (file order) and why anything was left out."""

    dimensions: tuple[Dimension, ...]
    notes: tuple[str, ...] = ()
    version: str | None = None
    # ordered dimensions that interact: the search also moves them together
    couplings: tuple[tuple[str, str], ...] = ()
    # value -> None (acceptable) or why the version cannot take it; None: no version check
    checker: Callable[[str, Any], str | None] | None = field(default=None, compare=False, repr=False)
    # the layouts (tp, dp, attn_dp) the host's plan accepts (layout_candidates): the tp_size and
    # attn_dp_size dimensions range over these only, and dp_size follows them
    layouts: tuple[Layout, ...] = ()

    def __contains__(self, intent: object) -> bool:
        return any(d.intent == intent for d in self.dimensions)

    def dimension(self, intent: str) -> Dimension:
        for d in self.dimensions:
            if d.intent == intent:
                return d
        raise KeyError(intent)

    @property
    def intents(self) -> tuple[str, ...]:
        """The intents a config of this space sets: its dimensions, plus the whole speculative
        shape when any part of it is tuned (they are set together)."""
        names = [d.intent for d in self.dimensions]
        if any(n in names for n in ("speculative_algorithm", *SPEC_SHAPE)):
            names += [n for n in ("speculative_algorithm", *SPEC_SHAPE) if n not in names]
        if any(n in names for n in LAYOUT):
            names += [n for n in LAYOUT if n not in names]
        return tuple(n for n in TUNABLE if n in names)

    def order(self, objective: str) -> list[Dimension]:
        """Most sensitive first for this objective; ties keep file order."""
        return sorted(self.dimensions, key=lambda d: d.rank_for(objective))

    # ---- dependencies -------------------------------------------------------------

    @staticmethod
    def active(dim: Dimension, config: Mapping[str, Any]) -> bool:
        if dim.requires is None:
            return True
        if config.get("speculative_algorithm") is None:
            return False
        return dim.requires == "speculative" or (config.get("speculative_eagle_topk") or 1) > 1

    def allowed(self, dim: Dimension, config: Mapping[str, Any]) -> tuple[Any, ...]:
        """The dimension's values that fit the rest of ``config``."""
        if not self.active(dim, config):
            return ()
        if dim.intent == "tp_size" and self.layouts:
            return tuple(v for v in dim.values if any(t == v for t, _, _ in self.layouts))
        if dim.intent == "attn_dp_size" and self.layouts:
            tp = config.get("tp_size")
            return tuple(v for v in dim.values if (tp, v) in {(t, a) for t, _, a in self.layouts})
        if dim.intent == "speculative_num_draft_tokens":
            steps = config.get("speculative_num_steps") or SPEC_DEFAULTS["speculative_num_steps"]
            topk = config.get("speculative_eagle_topk") or 1
            return tuple(v for v in dim.values if steps + 1 <= v <= max_draft_tokens(steps, topk))
        return dim.values

    def _layout(self, config: Mapping[str, Any], start: Mapping[str, Any] | None) -> dict[str, Any]:
        """``config`` with its layout one the plan accepts: the TP it names, with the DP attention it
        names where that layout exists (else the start's, else none), and that layout's replicas."""
        out = dict(config)
        if not self.layouts or "tp_size" not in out:
            return out
        same_tp = [lay for lay in self.layouts if lay[0] == out["tp_size"]]
        if not same_tp:
            return out
        wanted = [out.get("attn_dp_size") or 1, (start or {}).get("attn_dp_size") or 1, 1]
        tp, dp, attn = min(same_tp, key=lambda lay: (wanted.index(lay[2]) if lay[2] in wanted else 3, lay[2]))
        out.update(tp_size=tp, dp_size=dp, attn_dp_size=attn)
        return out

    def normalize(self, config: Mapping[str, Any], start: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``config`` with its dependent intents made consistent, as SGLang would resolve them:
        no speculative shape without an algorithm; a shape (the start's, else SGLang's default)
        when one is turned on; draft tokens = steps + 1 at top-k 1; at top-k > 1 the draft
        tokens kept within what the tree can hold."""
        out = self._layout(config, start)
        if not any(n in out for n in ("speculative_algorithm", *SPEC_SHAPE)):
            return out
        if out.get("speculative_algorithm") is None:
            for n in SPEC_SHAPE:
                out[n] = None
            return out
        for n in SPEC_SHAPE[:2]:
            if out.get(n) is None:
                fallback = (start or {}).get(n)
                out[n] = fallback if fallback is not None else SPEC_DEFAULTS[n]
        steps, topk = out["speculative_num_steps"], out["speculative_eagle_topk"]
        if topk == 1:
            out["speculative_num_draft_tokens"] = steps + 1
            return out
        lo, hi = steps + 1, max_draft_tokens(steps, topk)
        draft = out.get("speculative_num_draft_tokens")
        if draft is None or not lo <= draft <= hi:
            fits = [v for v in (self.dimension("speculative_num_draft_tokens").values
                                if "speculative_num_draft_tokens" in self else ()) if lo <= v <= hi]
            target = draft if draft is not None else lo
            out["speculative_num_draft_tokens"] = (min(fits, key=lambda v: (abs(v - target), v)) if fits
                                                   else min(max(target, lo), hi))
        return out

    def grid(self, start: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every distinct consistent config of the space (tests and benchmarks compare against it)."""
        base = {n: start.get(n) for n in self.intents}
        free = [d for d in self.dimensions]
        seen: set[ConfigKey] = set()
        out = []
        for combo in itertools.product(*(d.values for d in free)):
            config = dict(base)
            config.update({d.intent: v for d, v in zip(free, combo)})
            inactive = [d for d in free if not self.active(d, config)]
            if any(config[d.intent] != d.values[0] for d in inactive):
                continue  # the same config as with the inactive dimension at its first value
            config = self.normalize(config, start)
            if any(d.intent == "speculative_num_draft_tokens" and self.active(d, config)
                   and config[d.intent] not in self.allowed(d, config) for d in free):
                continue
            key = config_key(config)
            if key not in seen:
                seen.add(key)
                out.append(config)
        return out


def config_key(config: Mapping[str, Any]) -> ConfigKey:
    return tuple(sorted(config.items()))


# ---- the shipped data ---------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _shipped() -> dict[str, Any]:
    path = resources.files("sglang_deploy").joinpath("data").joinpath("tuning").joinpath("space.yaml")
    with path.open("r", encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
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


# ---- version check -------------------------------------------------------------------


def _base_intents(start: Mapping[str, Any]) -> dict[str, Any]:
    base = {n: d.default for n, d in INTENTS.items()}
    base.update({k: v for k, v in start.items() if k in INTENTS})
    if base.get("tp_size") == "all":
        base["tp_size"] = 1
    return base


class _VersionCheck:
    """A VersionCheck from its two functions (closures over one version and start config)."""

    def __init__(self, check: Callable[[str, Any], str | None], argv: Callable[[str, Any], list[str]]) -> None:
        self._check = check
        self._argv = argv

    def __call__(self, intent: str, value: Any) -> str | None:
        return self._check(intent, value)

    def argv(self, intent: str, value: Any) -> list[str]:
        return self._argv(intent, value)


def version_checker(version: str, start: Mapping[str, Any], model: "ModelProfile | None",
                    model_path: str = "model") -> VersionCheck:
    """A function telling why SGLang ``version`` cannot take ``intent = value`` on top of the
    start config (None: it can), by compiling with the version's dialect and parsing the argv
    with the version's catalog."""
    from sglang_deploy.plan.catalog import load_catalog
    from sglang_deploy.plan.dialects import DialectError, compile_intents

    catalog = load_catalog(version)
    base = _base_intents(start)
    algo = base.get("speculative_algorithm")

    def compiled(intents: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        out = compile_intents(version, catalog, intents, model_path, model)
        return out.argv, out.warnings

    def check(intent: str, value: Any) -> str | None:
        intents = dict(base)
        intents[intent] = value
        if intent in SPEC_SHAPE and intents.get("speculative_algorithm") is None:
            intents["speculative_algorithm"] = algo or "NEXTN"
        if intent == "speculative_algorithm" or intent in SPEC_SHAPE:
            intents = Space((), ()).normalize(intents, start)
            if intent in SPEC_SHAPE:
                intents[intent] = value
        try:
            argv, warnings = compiled(intents)
        except DialectError as exc:
            return str(exc)
        mine = [w for w in warnings if w.startswith(intent) and "not rendered" in w]
        if mine:
            return mine[0]
        rejections = catalog.check(argv)
        if rejections:
            return f"SGLang {version}'s parser refuses it: {rejections[0]}"
        return None

    def argv(intent: str, value: Any) -> list[str]:
        return compiled({**base, intent: value})[0]

    return _VersionCheck(check, argv)


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
