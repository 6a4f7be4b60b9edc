"""What a trial scored: one number read from the gate's report, higher is better.

decode      report["decode_tok_s"]: single-stream median decode rate (tok/s)
throughput  output_tok_s at the highest concurrency measured (report["load"]); a report
            without load levels falls back to its aggregate_tok_s
goodput     goodput_req_s at the highest concurrency measured (requests/s meeting every SLO;
            None unless the gate was given SLOs)

Pure: no I/O.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from sglang_deploy.gate.load import OBJECTIVES
from sglang_deploy.plan.tuning_record import ABANDONED, INFEASIBLE, OK, STATUSES

# OBJECTIVES (the gate's) and the trial statuses (the record's) are re-exported: the tuner names
# them from here.
__all__ = ["ABANDONED", "INFEASIBLE", "NOISE_MARGIN", "OBJECTIVES", "OK", "STATUSES", "abandon_threshold",
           "better", "check_name", "objective"]

#: Relative difference below which two measurements count as the same: a move must beat the
#: incumbent by more than this, and an exploring trial is abandoned once it cannot reach
#: incumbent * (1 - margin).
NOISE_MARGIN = 0.02


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _top_level(report: Mapping[str, Any]) -> Mapping[str, Any] | None:
    levels = [lv for lv in report.get("load") or () if isinstance(lv, Mapping)
              and _number(lv.get("concurrency")) is not None]
    return max(levels, key=lambda lv: lv["concurrency"]) if levels else None


def check_name(name: str) -> str:
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; objectives: {', '.join(OBJECTIVES)}")
    return name


def objective(report: Mapping[str, Any], name: str) -> float | None:
    """The objective ``name`` of a gate report, or None when the report does not have it."""
    check_name(name)
    if name == "decode":
        return _number(report.get("decode_tok_s"))
    top = _top_level(report)
    if name == "throughput":
        if top is None:
            return _number(report.get("aggregate_tok_s"))
        return _number(top.get("output_tok_s"))
    return _number(top.get("goodput_req_s")) if top is not None else None


def better(a: float | None, b: float | None, margin: float = NOISE_MARGIN) -> bool:
    """Whether ``a`` beats ``b`` by more than the noise margin (anything beats nothing)."""
    if a is None:
        return False
    if b is None:
        return True
    return a > b + abs(b) * margin


def abandon_threshold(incumbent: float | None, margin: float = NOISE_MARGIN) -> float | None:
    """Below this a trial cannot win against ``incumbent``: the gate may stop measuring it."""
    if incumbent is None:
        return None
    return incumbent - abs(incumbent) * margin
