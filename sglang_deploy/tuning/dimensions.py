"""A search space's dimensions and the rules between them: :class:`Dimension`, :class:`Space` (which
values fit a config, how SGLang resolves the intents that depend on others), and the key a config is
known by. Building a space (the shipped data, the version check, ``--space FILE``) is
sglang_deploy/tuning/space.py.

Dependent dimensions: the speculative shape (steps, top-k, draft tokens) exists only while a
speculative algorithm is on, and at top-k 1 the draft tokens are steps + 1 (SGLang forces it:
server_args.py ServerArgs._handle_speculative_decoding in 0.5.9-0.5.19,
arg_groups/speculative_hook.py _handle_eagle_family in 0.5.23).

Pure: no I/O.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from sglang_deploy.plan.tuning_record import LAYOUT, TUNABLE

SPEC_SHAPE = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")

#: SGLang's speculative shape when none is given: 3 steps, top-k 1, 4 draft tokens
#: (server_args.py auto_choose_speculative_params for most architectures).
SPEC_DEFAULTS = {"speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
#: A layout the plan accepts: (tp_size, dp_size, attn_dp_size).
Layout = tuple[int, int, int]

#: A config as the search keys it: its (intent, value) pairs, sorted.
ConfigKey = tuple[tuple[str, Any], ...]


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
