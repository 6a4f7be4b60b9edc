"""Which settings of the best configuration move off their prior value (pure).

The search (sglang_deploy/tuning/search.py) finds the configuration with the best mean objective.
Among its settings some differ from the prior (the plan's value the tune started from) only by
the luck of the draw: a setting whose effect on the objective is within the noise of the
measurement, or one that buys a little of the objective with a lot of something else the trials
measured (time to first token, say). A setting moves off its prior value only when, compared
with the same configuration with that one setting put back (``counterfactual``):

(a) the gain in the objective's own figure (relative, of the means) exceeds the measured
    spread: Z = 1 standard error of the difference of the two means, sd * sqrt(1/n_a +
    1/n_b), sd the relative standard deviation of one trial pooled over every configuration
    the run measured more than once (``pooled_sd``); with nothing measured twice no spread is
    known and nothing moves; and
(b) no other figure of the objective that the trials measured gets worse by more than the
    tolerance: the gate's own (sglang_deploy/gate/options.py ``default("tolerance")``, 10%),
    comparing the means. A throughput or goodput objective is about the server under load, so
    the single stream's figures are not its own: more replicas of a smaller TP serve more at
    once while each stream gets slower, which is the trade such a tune is for.

Otherwise the prior stays, and the decision says why, e.g. ``kept: gain 0.04% within spread
1.2%`` or ``kept: ttft +17.6% beyond tolerance 10%``.

Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from sglang_deploy.gate.options import default as gate_default

#: How much worse another measured figure may get before a gain in the objective stops counting:
#: the gate's tolerance (a revision slower than its baseline by more than this fails the gate).
TOLERANCE: float = gate_default("tolerance")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


def _top_level(figures: Mapping[str, Any]) -> Mapping[str, Any] | None:
    levels = [lv for lv in figures.get("load") or () if isinstance(lv, Mapping)
              and (_number(lv.get("concurrency")) or 0) > 1]
    return max(levels, key=lambda lv: lv["concurrency"]) if levels else None


def _pct(level: Mapping[str, Any], metric: str, q: str) -> float | None:
    values = level.get(f"{metric}_s")
    return _number(values.get(q)) if isinstance(values, Mapping) else None


def secondary(figures: Mapping[str, Any], objective: str) -> dict[str, tuple[float, bool]]:
    """The figures of a trial's gate report, besides the objective's own, that a move must not
    make worse: label -> (value, higher is better). Single stream (not for a throughput or
    goodput objective, see the module's (b)): decode rate and time to first token (the gate's
    medians); at the highest concurrency above 1: output tok/s, TTFT and ITL at p90, goodput
    (the gate's load figures, sglang_deploy/gate/load.py)."""
    out: dict[str, tuple[float, bool]] = {}
    under_load = objective in ("throughput", "goodput")
    decode = _number(figures.get("decode_tok_s"))
    if decode is not None and objective != "decode" and not under_load:
        out["decode"] = (decode, True)
    ttft = _number(figures.get("ttft_s"))
    if ttft is not None and not under_load:
        out["ttft"] = (ttft, False)
    top = _top_level(figures)
    if top is not None:
        c = int(top["concurrency"])
        tput = _number(top.get("output_tok_s"))
        if tput is not None and objective != "throughput":
            out[f"throughput at {c}"] = (tput, True)
        for metric in ("ttft", "itl"):
            value = _pct(top, metric, "p90")
            if value is not None:
                out[f"{metric} p90 at {c}"] = (value, False)
        good = _number(top.get("goodput_req_s"))
        if good is not None and objective != "goodput":
            out[f"goodput at {c}"] = (good, True)
    return out


#: How many standard errors of the difference a gain must exceed: 1, about 84% one-sided
#: confidence that a move with no real effect is not taken for one (normal noise); 2 could not
#: show a 3% gain at 3% noise within five trials a side (docs/tuning.md has the figures).
Z = 1.0


@dataclass(frozen=True)
class Measured:
    """One configuration's feasible measurements: its objective and the gate's figures per trial."""

    values: tuple[float, ...]
    figures: tuple[Mapping[str, Any], ...] = ()

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)


def pooled_sd(measured: Sequence[Measured]) -> float | None:
    """The relative standard deviation of one trial, pooled over every configuration measured
    more than once: sqrt(sum of squared deviations from each one's mean, relative to that mean,
    over the sum of (repeats - 1)). One host's noise is one noise: pooling gives it from all the
    repeats of the run rather than from the two of one configuration. None: nothing was repeated."""
    sq, df = 0.0, 0
    for m in measured:
        if len(m.values) < 2 or m.mean == 0:
            continue
        sq += sum((v / m.mean - 1.0) ** 2 for v in m.values)
        df += len(m.values) - 1
    return math.sqrt(sq / df) if df else None


def spread_of(a: Measured, b: Measured, sd: float | None) -> float | None:
    """What a relative gain of ``a`` over ``b`` must exceed: Z standard errors of the difference
    of their means, Z * sd * sqrt(1/n_a + 1/n_b) (None when no spread was measured)."""
    if sd is None:
        return None
    return Z * sd * math.sqrt(1.0 / len(a.values) + 1.0 / len(b.values))


@dataclass(frozen=True)
class Decision:
    intent: str
    value: Any  # what the record sets
    prior: Any  # the plan's value the tune started from
    proposed: Any  # what the best measured configuration had
    moved: bool
    reason: str
    gain: float | None = None  # relative gain of the objective over the counterfactual
    spread: float | None = None  # the spread the gain had to exceed
    worse: dict[str, float] = field(default_factory=dict)  # figure -> relative worsening beyond tolerance

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "prior": self.prior, "proposed": self.proposed, "moved": self.moved,
                "reason": self.reason,
                "gain": None if self.gain is None else round(self.gain, 6),
                "spread": None if self.spread is None else round(self.spread, 6),
                "worse": {k: round(v, 6) for k, v in sorted(self.worse.items())}}


def _p(x: float) -> str:
    """A relative figure in percent: two significant digits below 1%, one decimal above."""
    x *= 100
    return f"{x:.2g}%" if abs(x) < 1 else f"{x:.1f}".rstrip("0").rstrip(".") + "%"


def _signed(x: float) -> str:
    return ("+" if x >= 0 else "-") + _p(abs(x))


def gain_of(best: Measured, other: Measured) -> float:
    """The relative gain of ``best``'s mean over ``other``'s."""
    base = other.mean
    return (best.mean - base) / abs(base) if base else (0.0 if best.mean == base else math.inf)


Judgement = tuple[bool, str, "float | None", "float | None", dict[str, float]]


def judge(best: Measured, other: Measured, objective: str, sd: float | None,
          tolerance: float = TOLERANCE) -> Judgement:
    """Whether ``best`` beats ``other`` (the same configuration with one setting at its prior)
    by more than the measured spread (``spread_of`` with the run's pooled ``sd``) without
    another figure worse beyond ``tolerance``: (moves, reason, gain, spread, figures worse
    beyond tolerance)."""
    gain = gain_of(best, other)
    spread = spread_of(best, other, sd)
    if spread is None:
        return False, f"kept: gain {_signed(gain)} with no spread measured (no configuration was measured twice)", \
            gain, None, {}
    if not gain > spread:
        return False, f"kept: gain {_signed(gain)} within spread {_p(spread)}", gain, spread, {}
    worse: dict[str, float] = {}
    mine = _means([secondary(f, objective) for f in best.figures])
    theirs = _means([secondary(f, objective) for f in other.figures])
    for label, (value, higher) in mine.items():
        if label not in theirs or not theirs[label][0]:
            continue
        ref = theirs[label][0]
        change = (value - ref) / abs(ref)
        bad = -change if higher else change
        if bad > tolerance:
            worse[label] = change
    if worse:
        shown = ", ".join(f"{label} {_signed(change)}" for label, change in sorted(worse.items()))
        return False, f"kept: {shown} beyond tolerance {_p(tolerance)} (gain {_signed(gain)})", gain, spread, worse
    return True, f"moved: {objective} {_signed(gain)} beyond spread {_p(spread)}", gain, spread, {}


def _means(rows: Sequence[Mapping[str, tuple[float, bool]]]) -> dict[str, tuple[float, bool]]:
    sums: dict[str, list[float]] = {}
    higher: dict[str, bool] = {}
    for row in rows:
        for label, (value, up) in row.items():
            sums.setdefault(label, []).append(value)
            higher[label] = up
    return {k: (sum(v) / len(v), higher[k]) for k, v in sums.items()}


def describe(decisions: Mapping[str, Decision]) -> list[str]:
    """One line per setting the best configuration had off its prior: what the record sets and why."""
    out = []
    for intent, d in sorted(decisions.items()):
        out.append(f"{intent}: {d.value} (prior {d.prior}, best measured {d.proposed}): {d.reason}")
    return out
