"""The plan's predicted single-stream decode, as the gate judges a measurement against it (pure).

The plan (``sglang-deploy plan --json``, ``predicted``: sglang_deploy/plan/perf.py) says what the
hardware should reach as a band. With neither a target nor a baseline to compare with (a first
deploy, a new host), a result far below the band's low end fails: ``prediction_floor`` of the low
end (a setting, generous by default so that a noisy or busy machine does not fail it); below the
band itself is a warning that names the causes the plan can check. With a target or a baseline,
the figure is shown (measured / predicted) and judges nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

MAX_BASIS_CHARS = 500
#: What usually makes a server slower than its hardware allows, for the warning below the band.
CAUSES = ("speculative decoding off or accepting few drafts", "CUDA graphs (decode or prefill) off",
          "a small memory fraction", "clocks throttled (power, temperature)", "another process on the GPUs")


@dataclass(frozen=True)
class PredictedDecode:
    low: float
    expected: float
    high: float
    basis: str

    def as_dict(self) -> dict[str, Any]:
        return {"low": self.low, "expected": self.expected, "high": self.high, "basis": self.basis}


def _band(band: Any, basis: Any) -> PredictedDecode | None:
    """A band ``{low, expected, high}`` of finite positive numbers in order, else None."""
    if not isinstance(band, Mapping):
        return None
    values = [band.get(k) for k in ("low", "expected", "high")]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
               for v in values):
        return None
    low, expected, high = (float(v) for v in values)  # type: ignore[arg-type]
    if not low <= expected <= high:
        return None
    text = basis[:MAX_BASIS_CHARS] if isinstance(basis, str) and basis.isprintable() else ""
    return PredictedDecode(low, expected, high, text)


def predicted_figure(plan: Mapping[str, Any] | None, name: str, level: int | None = None
                     ) -> PredictedDecode | None:
    """The plan's ``predicted[name]`` band (for ``output_tok_s``, its band at concurrency ``level``),
    or None when the plan has none or it is not one (a plan file is the controller's, but the gate
    reads it as it reads any file)."""
    p = (plan or {}).get("predicted")
    if not isinstance(p, Mapping):
        return None
    band = p.get(name)
    if level is not None:
        band = band.get(str(level)) if isinstance(band, Mapping) else None
    return _band(band, p.get("basis"))


def predicted_decode(plan: Mapping[str, Any] | None) -> PredictedDecode | None:
    """The plan's ``predicted.decode_tok_s`` band (see ``predicted_figure``)."""
    return predicted_figure(plan, "decode_tok_s")


def predicted_prefill_tokens(plan: Mapping[str, Any] | None) -> int | None:
    """The prompt length the plan's ``prefill_tok_s`` band is for."""
    p = (plan or {}).get("predicted")
    n = p.get("prefill_tokens") if isinstance(p, Mapping) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def prediction_rule(decode_tok_s: float, p: PredictedDecode, floor: float, judged: bool, label: str = "decode"
                    ) -> tuple[dict[str, Any], str | None]:
    """(the rule, a warning or None). ``judged``: nothing else to compare with (no target, no
    baseline), so a result below ``floor`` of the band's low end fails. ``label`` names the figure
    (decode; prefill, aggregate at N streams: ``gate.figures``) and the rule (``prediction`` for
    decode, else ``<label> prediction``)."""
    rule = "prediction" if label == "decode" else f"{label.split(' ')[0]} prediction"
    ratio = decode_tok_s / p.expected
    band = f"{p.low:.1f} to {p.high:.1f} tok/s, expected {p.expected:.1f}"
    limit = floor * p.low
    if judged and floor > 0 and decode_tok_s < limit:
        detail = (f"{label} {decode_tok_s:.1f} tok/s is below {floor:g} of the predicted band's low end "
                  f"({limit:.1f} tok/s; the plan predicts {band}): with no target and no baseline to compare "
                  "with, a result this far below what the hardware allows fails")
        return {"rule": rule, "ok": False, "detail": detail}, None
    detail = f"{label} {decode_tok_s:.1f} tok/s is {ratio * 100:.0f}% of the predicted {p.expected:.1f} ({band})"
    warning = None
    if decode_tok_s < p.low:
        warning = (f"{label} {decode_tok_s:.1f} tok/s is below the predicted band ({band}); likely causes the "
                   f"plan can check: {'; '.join(CAUSES)}")
    return {"rule": rule, "ok": True, "detail": detail}, warning
