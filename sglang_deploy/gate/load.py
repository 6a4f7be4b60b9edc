"""The gate under load (pure: no I/O, no clock): concurrency levels, latency percentiles per
level, service-level objectives (SLOs) and goodput, and the optimistic bound that lets a
tuning trial stop early.

* ``parse_levels("1,8,32")`` and ``parse_slo("ttft_p90=2s,itl_p90=60ms")`` read ``check``'s
  ``--concurrency`` and ``--slo``; ValueError names the item that is wrong.
* ``level_figures(c, rounds, slo)`` is one level's entry of ``report["load"]``: TTFT, ITL,
  TPOT and end-to-end latency at p50/p90/p99, aggregate output tok/s (median over rounds),
  and with SLOs the goodput (requests per second meeting every SLO), the fraction that met
  them and, per limit, whether the level's own percentile is within it.
* ``abandon_bound`` is the optimistic bound of an objective from the requests so far.

A request meets the SLOs when its own TTFT, its own ITL at the named percentile, its own
mean TPOT ((e2e - TTFT) / (tokens - 1)) and its end-to-end latency are within the limits.
Level 1 is the single-stream run: its "rounds" are the single requests, one each.
A level's ``failed`` is 0 in every report the gate writes today: a request that fails ends
the whole gate with verdict ``error`` (a server that cannot serve a level is not measured
as slow), so only completed requests ever reach these figures.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

from sglang_deploy.gate.measure import RequestFigures, aggregate_tok_s, percentile

SLO_METRICS = ("ttft", "itl", "tpot", "e2e")
SLO_QUANTILES = (50, 90, 99)
SLO_KEYS = tuple(f"{m}_p{q}" for m in SLO_METRICS for q in SLO_QUANTILES)
OBJECTIVES = ("decode", "throughput", "goodput")
QUANTILES = (50, 90, 99)
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s)\s*$")


# ---------------------------------------------------------------------------
# options
# ---------------------------------------------------------------------------


def parse_levels(text: str) -> int | tuple[int, ...]:
    """``--concurrency``: one whole number (as before) or a comma-separated list of them."""
    items = [t.strip() for t in str(text).split(",")]
    if not any(items):
        raise ValueError("names no concurrency level")
    levels = []
    for item in items:
        if not item:
            raise ValueError(f"{text!r} has an empty item")
        try:
            levels.append(int(item))
        except ValueError:
            raise ValueError(f"{item!r} is not a whole number") from None
    return levels[0] if len(levels) == 1 else tuple(levels)


def levels(concurrency: int | Sequence[int]) -> tuple[int, ...]:
    """The levels measured, ascending, level 1 (the single-stream run) always among them."""
    given = [concurrency] if isinstance(concurrency, int) else list(concurrency)
    return tuple(sorted({1, *(int(c) for c in given)}))


def parse_duration(item: str, text: str) -> float:
    """``2s``, ``60ms``, ``0.5s`` -> seconds; a unit is required."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"{item!r}: {text.strip()!r} is not a duration with a unit (e.g. 2s or 60ms)")
    value = float(m.group(1)) * (0.001 if m.group(2) == "ms" else 1.0)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{item!r}: the limit must be a duration above zero")
    return value


def parse_slo(text: str) -> dict[str, float]:
    """``ttft_p90=2s,itl_p90=60ms`` -> {"ttft_p90": 2.0, "itl_p90": 0.06} (seconds)."""
    out: dict[str, float] = {}
    items = [t.strip() for t in str(text).split(",")]
    if not any(items):
        raise ValueError("names no objective; give e.g. ttft_p90=2s,itl_p90=60ms")
    for item in items:
        if not item:
            raise ValueError(f"{text!r} has an empty item")
        key, eq, value = item.partition("=")
        key = key.strip().lower()
        if not eq:
            raise ValueError(f"{item!r} is not METRIC_pQ=LIMIT (e.g. ttft_p90=2s)")
        if key not in SLO_KEYS:
            raise ValueError(f"{item!r}: unknown objective {key!r}; known: metric {', '.join(SLO_METRICS)} "
                             f"at p{', p'.join(map(str, SLO_QUANTILES))} (e.g. itl_p90)")
        if key in out:
            raise ValueError(f"{item!r}: {key} is given twice")
        out[key] = parse_duration(item, value)
    return out


def check_slo(slo: Mapping[str, Any]) -> None:
    """ValueError naming the key when a SLO dict (CheckOptions.slo) is not usable."""
    for key, value in slo.items():
        if key not in SLO_KEYS:
            raise ValueError(f"unknown objective {key!r}; known: {', '.join(SLO_KEYS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{key}: the limit must be a number of seconds above zero, got {value!r}")


# ---------------------------------------------------------------------------
# one request
# ---------------------------------------------------------------------------


def e2e_s(r: RequestFigures) -> float:
    """Request sent -> last token."""
    return r.t_last - r.t_sent


def tpot_s(r: RequestFigures) -> float:
    """Mean time per output token after the first: (e2e - TTFT) / (tokens - 1)."""
    return (e2e_s(r) - r.ttft_s) / max(1, r.completion_tokens - 1)


def request_value(r: RequestFigures, metric: str, q: float) -> float | None:
    """The request's own figure that a ``<metric>_p<q>`` limit is compared with (None: its
    stream had no inter-token gap)."""
    if metric == "ttft":
        return r.ttft_s
    if metric == "itl":
        return percentile(r.itl_s, q) if r.itl_s else None
    if metric == "tpot":
        return tpot_s(r)
    if metric == "e2e":
        return e2e_s(r)
    raise ValueError(f"unknown metric {metric!r}")


def _split(key: str) -> tuple[str, int]:
    metric, _, q = key.rpartition("_p")
    return metric, int(q)


def meets(r: RequestFigures, slo: Mapping[str, float]) -> bool:
    """Whether one request is within every limit."""
    for key, limit in slo.items():
        metric, q = _split(key)
        value = request_value(r, metric, q)
        if value is None or value > limit:
            return False
    return True


# ---------------------------------------------------------------------------
# one level
# ---------------------------------------------------------------------------


def _pcts(values: Sequence[float], ndigits: int = 6) -> dict[str, float | None]:
    if not values:
        return {f"p{q}": None for q in QUANTILES}
    return {f"p{q}": round(percentile(values, q), ndigits) for q in QUANTILES}


def level_values(requests: Sequence[RequestFigures], metric: str) -> list[float]:
    """The values a level's percentile of ``metric`` is taken over: per request, except ITL,
    which is every inter-token gap of every request."""
    if metric == "itl":
        return [g for r in requests for g in r.itl_s]
    return [float(request_value(r, metric, 50)) for r in requests]  # type: ignore[arg-type]


def round_duration_s(rd: Sequence[RequestFigures]) -> float:
    """Wall time of one round: first request sent -> last token received."""
    return max(r.t_last for r in rd) - min(r.t_sent for r in rd)


def goodput(rounds: Sequence[Sequence[RequestFigures]], slo: Mapping[str, float]) -> tuple[float, float]:
    """(requests per second meeting every SLO over the rounds' wall time, fraction met)."""
    requests = [r for rd in rounds for r in rd]
    if not requests:
        raise ValueError("no requests")
    duration = sum(round_duration_s(rd) for rd in rounds if rd)
    good = sum(1 for r in requests if meets(r, slo))
    return (good / duration if duration > 0 else 0.0), good / len(requests)


def level_figures(concurrency: int, rounds: Sequence[Sequence[RequestFigures]],
                  slo: Mapping[str, float] | None = None, failed: int = 0) -> dict[str, Any]:
    """One entry of ``report["load"]`` (see the module's docstring)."""
    rounds = [rd for rd in rounds if rd]
    requests = [r for rd in rounds for r in rd]
    if not requests:
        raise ValueError("a level with no requests")
    duration = sum(round_duration_s(rd) for rd in rounds)
    per_round = [aggregate_tok_s(rd) for rd in rounds]
    out: dict[str, Any] = {
        "concurrency": concurrency,
        "requests": len(requests),
        "failed": failed,
        "rounds": len(rounds),
        "duration_s": round(duration, 6),
        "output_tok_s": round(percentile(per_round, 50), 4),
        "request_s": round(len(requests) / duration, 6) if duration > 0 else None,
    }
    for metric in SLO_METRICS:
        out[f"{metric}_s"] = _pcts(level_values(requests, metric))
    slo = dict(slo or {})
    if slo:
        rate, met = goodput(rounds, slo)
        out["goodput_req_s"] = round(rate, 6)
        out["slo_met"] = round(met, 6)
        ok = {}
        for key, limit in slo.items():
            metric, q = _split(key)
            values = level_values(requests, metric)
            ok[key] = bool(values) and percentile(values, q) <= limit
        out["slo_ok"] = ok
    else:
        out.update(goodput_req_s=None, slo_met=None, slo_ok={})
    return out


# ---------------------------------------------------------------------------
# stopping a trial early
# ---------------------------------------------------------------------------


def abandon_bound(objective: str, single: Sequence[RequestFigures],
                  top_rounds: Sequence[Sequence[RequestFigures]], slo: Mapping[str, float] | None = None
                  ) -> float | None:
    """An optimistic bound of ``objective`` from the requests so far, or None while there are
    too few to bound it. decode: the best single-stream decode rate so far, after at least 2
    requests (the reported figure is their median, never above the best). throughput /
    goodput: the best round so far at the highest level (the reported figure is the median
    over rounds, never above the best round)."""
    if objective == "decode":
        return max(r.decode_tok_s for r in single) if len(single) >= 2 else None
    rounds = [rd for rd in top_rounds if rd]
    if not rounds:
        return None
    if objective == "throughput":
        return max(aggregate_tok_s(rd) for rd in rounds)
    if objective == "goodput":
        return max(goodput([rd], slo or {})[0] for rd in rounds)
    raise ValueError(f"unknown objective {objective!r}; known: {', '.join(OBJECTIVES)}")
