"""The continuous check's last history line (:func:`last_watch`), and its failure held against
status's own read of the host, finding by finding (:func:`judge_watch`). Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Mapping, Sequence

from sglang_deploy.hostrules import gpu as gpu_rules
from sglang_deploy.hostrules.metrics import DRIFT_KEYS
from sglang_deploy.untrusted import UntrustedInput, load_json
from sglang_deploy.status.gpus import _text
from sglang_deploy.status.model import HISTORY_LINE_BYTES, Observed, _REVISION, _rate


# ---- the continuous check's last line -----------------------------------------------------------

_WATCH_VERDICTS = ("pass", "fail", "error", "skipped")
_GPU_KEY = re.compile(r"(?:gpu[0-9]{1,4} )?[a-z_]{1,40}")


@dataclass(frozen=True)
class LastWatch:
    verdict: str  # pass | fail | error | skipped | unknown
    time: str | None
    age_s: float | None  # now - time, on the controller's clock
    revision: str | None
    why: str | None
    decode_tok_s: float | None
    baseline_tok_s: float | None
    target_tok_s: float | None
    drift: tuple[str, ...]
    gpu_problems: tuple[str, ...]
    # What the failure rests on, beside drift: each GPU problem's key (hostrules.gpu Finding.key), and
    # the measurement's own verdict (pass | fail | error; None: a line of an older check).
    gpu_keys: tuple[str, ...] = ()
    measured: str | None = None
    # Judged against status's own read (judge_watch): the findings it no longer sees, those that stand.
    resolved: tuple[str, ...] = ()
    standing: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "time": self.time, "age_s": self.age_s, "revision": self.revision,
                "why": self.why, "decode_tok_s": self.decode_tok_s, "baseline_tok_s": self.baseline_tok_s,
                "target_tok_s": self.target_tok_s, "drift": list(self.drift), "gpu_problems": list(self.gpu_problems),
                "measured": self.measured, "resolved": list(self.resolved), "standing": list(self.standing)}


def last_watch(lines: Sequence[str], now: datetime | None = None) -> LastWatch | None:
    """The last ``"kind": "watch"`` line of the history (the continuous check's), checked field by
    field (what does not fit is null or dropped); lines that are not JSON are counted by
    :func:`last_gate`."""
    for line in reversed(lines):
        try:
            doc = load_json(line, "history line", max_bytes=HISTORY_LINE_BYTES, max_depth=16)
        except UntrustedInput:
            continue
        if not isinstance(doc, dict) or doc.get("kind") != "watch":
            continue
        verdict = doc.get("verdict")
        when = _text(doc.get("time"), 40)
        age = None
        if when is not None and now is not None:
            try:
                stamp = datetime.fromisoformat(when.replace("Z", "+00:00"))
                if stamp.tzinfo is not None:
                    age = round(max(0.0, (now - stamp).total_seconds()), 1)
            except ValueError:
                when = None
        rev = doc.get("revision")
        drift = doc.get("drift")
        gp = doc.get("gpu_problems")
        keys = doc.get("gpu_keys")
        measured = doc.get("measured")
        return LastWatch(
            gpu_keys=tuple(k for k in keys[:20] if isinstance(k, str) and _GPU_KEY.fullmatch(k))
            if isinstance(keys, list) else (),
            measured=measured if measured in ("pass", "fail", "error") else None,
            verdict=verdict if isinstance(verdict, str) and verdict in _WATCH_VERDICTS else "unknown",
            time=when, age_s=age, revision=rev if isinstance(rev, str) and _REVISION.fullmatch(rev) else None,
            why=_text(doc.get("why"), 200), decode_tok_s=_rate(doc.get("decode_tok_s")),
            baseline_tok_s=_rate(doc.get("baseline_tok_s")), target_tok_s=_rate(doc.get("target_tok_s")),
            drift=tuple(d for d in drift if d in DRIFT_KEYS) if isinstance(drift, list) else (),
            gpu_problems=tuple(t for t in (_text(x, 200) for x in gp[:20]) if t) if isinstance(gp, list) else ())
    return None


def judge_watch(watch: LastWatch, drift: Mapping[str, str], seen: Observed,
                gpu_found: Sequence[gpu_rules.Finding] | None) -> LastWatch:
    """The continuous check's failure held against status's own read of the host now: each of its
    findings is ``resolved`` (status reads the same fact and no longer finds it: a file as deployed
    again, the deployed SGLang installed, a GPU problem gone) or ``standing`` (status finds it too,
    or cannot check it: a slow measurement, a GPU health it could not read, the weights unless
    verified, a line of an older check that does not say what it rests on). ``drift``: status's
    own drift verdicts; ``gpu_found``: its GPU findings (None: not read)."""
    resolved: list[str] = []
    standing: list[str] = []
    for key in watch.drift:
        if key == "sglang_version":
            gone = bool(seen.staged_version) and seen.installed_version == seen.staged_version
        else:
            gone = drift.get(key) == "same"
        (resolved if gone else standing).append(f"drift: {key}")
    now = {f.key for f in gpu_found or ()}
    for key in watch.gpu_keys:
        (resolved if gpu_found is not None and key not in now else standing).append(key)
    if watch.gpu_problems and not watch.gpu_keys:
        standing.append("GPU problems")
    if watch.measured != "pass":  # slow, or a line that does not say: status cannot measure
        standing.append("measurement")
    return replace(watch, resolved=tuple(resolved), standing=tuple(standing))
