"""Prefill (input tok/s on a long prompt) and the aggregate output of one concurrency level,
judged like decode (pure: no I/O).

Each figure the run measured is compared with
* the baseline's: the best such figure among the baseline's passing entries (the same entries the
  decode rule's best comes from, ``verdict.BaselineSummary.entries``), only where they carry one
  that is comparable (a prefill of a prompt length within ``PREFILL_LENGTH_RATIO``; an aggregate
  at the same concurrency): within the run's tolerance passes, and ``accept_slower`` lets a
  failing one pass as it does decode's;
* the plan's predicted band (``predicted.prefill_tok_s`` at its ``prefill_tokens``;
  ``predicted.output_tok_s`` at the level): shown, and with no comparable baseline figure it fails
  a result below ``prediction_floor`` of the band's low end (no target exists for these figures).

An old history line without these figures still reads: it simply gives no baseline for them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from sglang_deploy.gate import verdict
from sglang_deploy.gate.predicted import PredictedDecode, prediction_rule

#: A baseline prefill counts when its prompt length is within this ratio of the run's: the input
#: rate of a long prompt changes little with its length, but a changed setting is not a regression.
PREFILL_LENGTH_RATIO = 1.5
#: A prefill drop fails only when the prompt's TTFT also grew by more than this: a 2,048-token prompt
#: takes tens of milliseconds on a fast GPU, and a busy controller, the network or the scheduler's
#: loop move one request's first token by several (measured: 7 ms on a loaded test machine, 15% of
#: a 50 ms TTFT); a real regression of the prefill path costs far more.
PREFILL_RESOLUTION_S = 0.025


@dataclass(frozen=True)
class Figure:
    """One measured figure to judge: its label in the rules, its value, and how a baseline entry's
    own figure is read (``best``) and the band the plan predicted."""

    label: str  # "prefill" | "aggregate at N streams"
    value: float
    baseline_best: float | None
    predicted: PredictedDecode | None
    prompt_tokens: int | None = None  # prefill: a drop must also lengthen the TTFT beyond PREFILL_RESOLUTION_S


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        x = float(v)
    except OverflowError:
        return None
    return x if math.isfinite(x) and x > 0 else None


def best_prefill(entries: Sequence[Mapping[str, Any]], prompt_tokens: int) -> float | None:
    """The best prefill tok/s among ``entries`` whose prompt length is comparable with ``prompt_tokens``."""
    rates = []
    for e in entries:
        rate, n = _number(e.get("prefill_tok_s")), _number(e.get("prefill_prompt_tokens"))
        if rate is not None and n is not None and 1 / PREFILL_LENGTH_RATIO <= n / prompt_tokens <= PREFILL_LENGTH_RATIO:
            rates.append(rate)
    return max(rates) if rates else None


def best_aggregate(entries: Sequence[Mapping[str, Any]], concurrency: int, max_tokens: int) -> float | None:
    """The best aggregate output tok/s among ``entries`` measured at ``concurrency`` streams of
    requests of ``max_tokens`` output tokens: the first token's wait is a larger share of a shorter
    request, so another length is no baseline (a line that does not say its length, written before
    the history recorded it, is none either)."""
    rates = [r for e in entries if e.get("concurrency") == concurrency and e.get("aggregate_max_tokens") == max_tokens
             and (r := _number(e.get("aggregate_tok_s"))) is not None]
    return max(rates) if rates else None


def judge(figures: Sequence[Figure], baseline: verdict.BaselineSummary | None, *, tolerance: float,
          accept_slower: str | None, prediction_floor: float) -> tuple[list[dict[str, Any]], list[str]]:
    """(rules, warnings) for ``figures``: a baseline rule where the baseline has a comparable figure,
    a prediction rule where the plan predicted one (judging only without the baseline's)."""
    rules: list[dict[str, Any]] = []
    warnings: list[str] = []
    for f in figures:
        if f.baseline_best is not None and baseline is not None:
            rule = verdict.baseline_rule(f.value, f.baseline_best, baseline, tolerance, f.label)
            if not rule["ok"] and f.prompt_tokens:
                longer = f.prompt_tokens / f.value - f.prompt_tokens / f.baseline_best
                if longer <= PREFILL_RESOLUTION_S:
                    rule.update(ok=True, detail=f"{rule['detail']}; within the gate's timing resolution: the "
                                                f"TTFT grew {longer * 1000:.0f} ms (at most "
                                                f"{PREFILL_RESOLUTION_S * 1000:g} ms passes)")
            if not rule["ok"] and f.predicted is not None:  # what the hardware should reach, beside it
                p = f.predicted
                rule["detail"] += (f"; the plan predicts {p.low:.1f} to {p.high:.1f} tok/s, expected "
                                   f"{p.expected:.1f}")
            if not rule["ok"] and accept_slower:
                rule.update(ok=True, accepted=accept_slower, detail=f"{rule['detail']}; accepted: {accept_slower}")
            rules.append(rule)
        if f.predicted is not None:
            rule, warning = prediction_rule(f.value, f.predicted, prediction_floor, f.baseline_best is None, f.label)
            rules.append(rule)
            if warning:
                warnings.append(warning)
    return rules, warnings


def with_rules(result: verdict.Verdict, rules: Sequence[dict[str, Any]]) -> verdict.Verdict:
    """``result`` with ``rules`` added (before its configuration rule): a failing one is a reason."""
    if not rules:
        return result
    head = [r for r in result.rules if r["rule"] != "configuration"]
    tail = [r for r in result.rules if r["rule"] == "configuration"]
    reasons = list(result.reasons) + [r["detail"] for r in rules if not r["ok"]]
    accepted = result.accepted_slower or next((r["accepted"] for r in rules if r.get("accepted")), None)
    return verdict.Verdict("fail" if reasons else "pass", reasons, head + list(rules) + tail, accepted)
