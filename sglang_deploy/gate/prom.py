"""SGLang's Prometheus ``/metrics`` text, read for the two figures the gate reports (pure).

A small parser of the Prometheus text exposition format (version 0.0.4), not the
``prometheus_client`` package: that package is no dependency of this project and the
gate needs one gauge value per series, nothing of its registry, so a forty-line reader
keeps the dependency list as it is. It takes what the format allows: ``# HELP`` /
``# TYPE`` and other comment lines, metric lines with or without ``{labels}`` (quoted
values with ``\\"``, ``\\\\`` and ``\\n`` escapes, commas and braces inside them), values
``NaN``, ``+Inf``, ``-Inf`` or any float, an optional timestamp. A line it cannot read is
skipped, never fatal.

The metric names are SGLang's (class SchedulerMetricsCollector in
python/sglang/srt/metrics/collector.py in 0.5.9, python/sglang/srt/observability/metrics_collector.py
in 0.5.23: the gauges ``sglang:gen_throughput`` "The generation throughput
(token/s)" and ``sglang:spec_accept_length`` "The average acceptance length of speculative
decoding"). Each scheduler (per TP/DP rank, and a draft engine) exports its own series,
labelled by model_name, engine_type, tp_rank, pp_rank, dp_rank...: the gate reports the
mean of the finite values.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

GEN_THROUGHPUT = "sglang:gen_throughput"
SPEC_ACCEPT_LENGTH = "sglang:spec_accept_length"

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*\"")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


@dataclass(frozen=True)
class Sample:
    name: str
    value: float
    labels: dict[str, str] = field(default_factory=dict, hash=False)


def _labels(line: str, i: int) -> tuple[dict[str, str], int] | None:
    """Parse ``{a="x",b="y"}`` starting at ``line[i] == "{"``: (labels, index after ``}``)."""
    labels: dict[str, str] = {}
    i += 1
    while True:
        while i < len(line) and line[i] in " \t,":
            i += 1
        if i < len(line) and line[i] == "}":
            return labels, i + 1
        m = _LABEL_NAME.match(line, i)
        if not m:
            return None
        i = m.end()
        value = []
        while True:
            if i >= len(line):
                return None
            ch = line[i]
            if ch == "\\" and i + 1 < len(line):
                value.append(_ESCAPES.get(line[i + 1], "\\" + line[i + 1]))
                i += 2
            elif ch == '"':
                i += 1
                break
            else:
                value.append(ch)
                i += 1
        labels[m.group(1)] = "".join(value)


def _number(text: str) -> float | None:
    low = text.lower()
    if low in ("nan", "+nan", "-nan"):
        return math.nan
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    try:
        return float(text)
    except ValueError:
        return None


def parse(text: str) -> list[Sample]:
    """Every sample line of an exposition text, in order."""
    out: list[Sample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _NAME.match(line)
        if not m:
            continue
        i = m.end()
        labels: dict[str, str] = {}
        if i < len(line) and line[i] == "{":
            parsed = _labels(line, i)
            if parsed is None:
                continue
            labels, i = parsed
        rest = line[i:].split()
        if not rest or len(rest) > 2:
            continue
        value = _number(rest[0])
        if value is None:
            continue
        out.append(Sample(m.group(), value, labels))
    return out


def mean_of(samples: list[Sample], name: str, minimum: float = -math.inf) -> float | None:
    """Mean of the finite values of ``name``'s series that are at least ``minimum`` (None: none)."""
    values = [s.value for s in samples if s.name == name and math.isfinite(s.value) and s.value >= minimum]
    return sum(values) / len(values) if values else None


def server_metrics(text: str | None) -> dict[str, Any] | None:
    """``report["server_metrics"]`` from a /metrics body; None when the server did not answer."""
    if text is None:
        return None
    samples = parse(text)
    # SGLang sets spec_accept_length on every stats log, 0.0 without speculative decoding
    # (the collector module above, SchedulerStats.spec_accept_length defaults to 0.0; log_stats sets the
    # gauge unconditionally); a real accept length counts the bonus token, so it is >= 1.
    accept = mean_of(samples, SPEC_ACCEPT_LENGTH, minimum=1.0)
    gen = mean_of(samples, GEN_THROUGHPUT, minimum=0.0)
    return {"spec_accept_length": round(accept, 4) if accept is not None else None,
            "gen_throughput": round(gen, 3) if gen is not None else None,
            "source": "/metrics"}
