"""The speed model calibrated by the fleet's own history, pure.

The roofline (``plan.perf``) predicts from datasheets and a stated efficiency; what a class of
hardware and kernels really reaches is measured by every gate. Each passing gate of a deploy
leaves a sample (``sample_line``): what it measured over what the roofline alone predicted,
for single-stream decode, prefill and the concurrency level, under a key of what the efficiency
depends on (:class:`Key`: the GPU model, the weights' kind, dense or MoE, speculative decoding
on or off). A later plan of the same key scales its predicted bands by the median ratio of the
newest MAX_SAMPLES samples, once there are MIN_SAMPLES, and says so with the count it rests on
(``calibrate``). The gate's own figures (``measured_over_predicted``) are then against the
calibrated band; a sample always records the ratio to the uncalibrated roofline, so a factor
never feeds on itself.

The samples are a JSON-lines file beside the inventory (``samples_path``), written by the deploy
on the controller (``sglang_deploy.deploy.calibration``). It is data: ``parse_samples`` reads a
bounded number of lines and keeps only well-formed ones (a bad line is counted and skipped, never
a reason to stop a plan), each number bounded.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from sglang_deploy.plan.hardware import gpu_name
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.perf import FP8_METHODS, Band, Prediction

FORMAT = 1
#: Samples a factor needs before a plan uses it (fewer: the roofline alone, said so).
MIN_SAMPLES = 3
#: The newest samples of a key a factor is the median of: recent enough to follow the fleet's
#: upgrades, enough that one odd gate moves it little.
MAX_SAMPLES = 20
#: A factor is kept within these: beyond them the roofline, not the efficiency, is wrong for the
#: class, and a plan should not silently promise (or excuse) a fourfold difference.
FACTOR_BOUNDS = (0.25, 4.0)
#: A sample's ratio outside these is not a measurement of this model's error but of something
#: else (a broken gate, a clock): skipped.
RATIO_BOUNDS = (0.01, 100.0)
#: The lines read from the end of the file, and its size cap: a year of deploys of a large fleet
#: is far below either.
MAX_LINES = 100_000
MAX_BYTES = 32 << 20
#: The figures a sample carries (the gate report's ``*_over_predicted``) and what each scales.
FIGURES = ("decode", "prefill", "output")
MAX_TEXT = 200


@dataclass(frozen=True)
class Key:
    """What the roofline's efficiency depends on: the GPU model, the weights' kind (the
    quantization method, else the dtype), whether the model is MoE, and speculative decoding."""

    gpu_model: str
    weights: str
    moe: bool
    speculative: bool

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def text(self) -> str:
        return (f"{self.gpu_model}, {self.weights} {'MoE' if self.moe else 'dense'}, "
                f"speculative {'on' if self.speculative else 'off'}")


@dataclass(frozen=True)
class Sample:
    key: Key
    ratios: Mapping[str, float]  # figure -> measured / the uncalibrated roofline's expected
    host: str
    at: str


@dataclass(frozen=True)
class Factor:
    value: float
    count: int  # samples it rests on (at most MAX_SAMPLES)


@dataclass(frozen=True)
class Samples:
    samples: tuple[Sample, ...] = ()
    skipped: int = 0  # lines that were not a well-formed sample
    source: str = ""


def samples_path(inventory_path: str | os.PathLike[str]) -> Path:
    """Where an inventory's samples live: ``<dir>/<stem>.calibration.jsonl``."""
    p = Path(inventory_path)
    return p.with_name(f"{p.stem}.calibration.jsonl")


def key_of(gpu_model: str, quantization: str | None, dtype: str | None, moe: bool, speculative: bool) -> Key:
    weights = (quantization or dtype or "bfloat16").lower()
    return Key(gpu_model=gpu_name(gpu_model), weights="fp8" if weights in FP8_METHODS else weights, moe=moe,
               speculative=speculative)


def plan_key(plan: Plan) -> Key:
    """A plan's key: its GPUs' model, its checkpoint's quantization (else the quantization it
    plans, else the checkpoint's dtype), MoE or dense, speculative decoding planned or not."""
    facts, intents = plan.facts, plan.intents

    def value(name: str) -> Any:
        r = intents.get(name)
        return getattr(r, "value", r)

    quant = (facts.quantization.method if facts is not None and facts.quantization else None) or value("quantization")
    return key_of(plan.gpus.model, quant if isinstance(quant, str) else None, facts.dtype if facts else None,
                  bool(facts is not None and facts.moe is not None), bool(value("speculative_algorithm")))


def calibrate_plan(plan: Plan, samples: Samples | None) -> Plan:
    """``plan`` with its prediction calibrated by ``samples`` (None: as it is)."""
    if samples is None or plan.predicted is None:
        return plan
    return dataclasses.replace(plan, predicted=calibrate(plan.predicted, samples, plan_key(plan)))


# ---- reading ------------------------------------------------------------------------------------

def _text(value: Any) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= MAX_TEXT and value.isprintable():
        return value
    return None


def _ratio(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    return v if math.isfinite(v) and RATIO_BOUNDS[0] <= v <= RATIO_BOUNDS[1] else None


def _sample(raw: Any) -> Sample | None:
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        return None
    k = raw.get("key")
    if not isinstance(k, dict):
        return None
    gpu, weights = _text(k.get("gpu_model")), _text(k.get("weights"))
    moe, spec = k.get("moe"), k.get("speculative")
    if gpu is None or weights is None or not isinstance(moe, bool) or not isinstance(spec, bool):
        return None
    ratios_raw = raw.get("ratios")
    if not isinstance(ratios_raw, dict):
        return None
    ratios = {f: r for f in FIGURES if (r := _ratio(ratios_raw.get(f))) is not None}
    host, at = _text(raw.get("host")), _text(raw.get("at"))
    if not ratios or host is None or at is None:
        return None
    return Sample(Key(gpu_name(gpu), weights, moe, spec), ratios, host, at)


def parse_samples(text: str, source: str = "<text>") -> Samples:
    """The well-formed samples of ``text`` (JSON lines), the newest MAX_LINES lines at most;
    every other line is counted in ``skipped``."""
    lines = text.splitlines()[-MAX_LINES:]
    out, skipped = [], 0
    for line in lines:
        if not line.strip():
            continue
        try:
            raw = json.loads(line) if len(line) <= 4096 else None
        except ValueError:
            raw = None
        sample = _sample(raw)
        if sample is None:
            skipped += 1
        else:
            out.append(sample)
    return Samples(tuple(out), skipped, source)


# ---- the factor and the calibrated prediction ---------------------------------------------------

def factor(samples: Iterable[Sample], key: Key, figure: str) -> tuple[Factor | None, int]:
    """(the factor for ``figure`` at ``key``, or None below MIN_SAMPLES; the samples found)."""
    ratios = [s.ratios[figure] for s in samples if s.key == key and figure in s.ratios][-MAX_SAMPLES:]
    if len(ratios) < MIN_SAMPLES:
        return None, len(ratios)
    value = min(FACTOR_BOUNDS[1], max(FACTOR_BOUNDS[0], statistics.median(ratios)))
    return Factor(round(value, 3), len(ratios)), len(ratios)


def _scaled(band: Band, by: float) -> Band:
    return Band(band.low * by, band.expected * by, band.high * by)


def calibrate(prediction: Prediction, samples: Samples, key: Key) -> Prediction:
    """``prediction`` with each figure the samples calibrate scaled by its factor (TTFT by the
    prefill factor's inverse), the factors in ``calibration`` and a line for ``--explain``;
    unchanged but for that line when none applies."""
    found: dict[str, Factor] = {}
    counts: dict[str, int] = {}
    for figure in FIGURES:
        f, n = factor(samples.samples, key, figure)
        counts[figure] = n
        if f is not None:
            found[figure] = f
    if not found:
        have = max(counts.values(), default=0)
        line = (f"not calibrated: {have} passing gate(s) of {key.text()} in {samples.source or 'the samples'}, "
                f"{MIN_SAMPLES} needed" if samples.source else "not calibrated: no samples of the fleet's gates")
        return dataclasses.replace(prediction, lines=(*prediction.lines, line))
    by = {f: found[f].value if f in found else 1.0 for f in FIGURES}
    words = ", ".join(f"{f} x{v.value:g} ({v.count} gates)" for f, v in found.items())
    line = (f"calibrated by the fleet's passing gates of {key.text()} (median measured / roofline of the newest "
            f"{MAX_SAMPLES} at most): {words}")
    # one stream's output is its decode; the gate measures one concurrency level, whose factor
    # stands for every level above one
    output = {c: _scaled(b, by["decode"] if c == 1 else by["output"]) for c, b in prediction.output_tok_s.items()}
    prefill = prediction.prefill_tok_s
    return dataclasses.replace(
        prediction, decode_tok_s=_scaled(prediction.decode_tok_s, by["decode"]),
        ttft_ms=_scaled(prediction.ttft_ms, 1 / by["prefill"]), output_tok_s=output,
        prefill_tok_s=_scaled(prefill, by["prefill"]) if prefill is not None else None,
        basis=f"{prediction.basis}; calibrated: {words}", lines=(*prediction.lines, line),
        calibration={f: {"factor": v.value, "samples": v.count} for f, v in found.items()})


# ---- writing ------------------------------------------------------------------------------------

def sample_line(key: Key, report: Mapping[str, Any], calibration: Mapping[str, Mapping[str, Any]] | None,
                host: str, at: str) -> str | None:
    """One passing gate's sample as a JSON line, or None when the report measured nothing the
    roofline predicted. ``calibration``: the factors the gated plan's prediction carried, undone
    so the sample is against the roofline alone."""
    applied = calibration or {}
    ratios = {}
    for figure, field in (("decode", "measured_over_predicted"), ("prefill", "prefill_over_predicted"),
                          ("output", "aggregate_over_predicted")):
        r = _ratio(report.get(field))
        if r is None:
            continue
        by = (applied.get(figure) or {}).get("factor")
        r = r * by if isinstance(by, (int, float)) and not isinstance(by, bool) and by > 0 else r
        if _ratio(r) is not None:
            ratios[figure] = round(r, 4)
    if not ratios:
        return None
    return json.dumps({"format": FORMAT, "key": key.as_dict(), "ratios": ratios, "host": host[:MAX_TEXT], "at": at},
                      sort_keys=True, separators=(",", ":"))
