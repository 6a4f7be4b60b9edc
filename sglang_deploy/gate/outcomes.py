"""What the gate saw, as one outcome: pure, no I/O.

After a restart the deploy gates the new revision (``gate.run.run_check``) while watching the
unit in systemd (``gate.unit``). ``classify`` turns the report and the unit's state into one
of: ``pass``; ``fail`` (slow, or configured differently from the plan); ``crashed`` (the unit
failed or systemd restarted it); ``not-ready`` (it answered but never became ready);
``unreachable`` (nothing ever answered the controller while the unit kept running); ``error``
(it broke mid-measurement). What the deploy does next is its own policy
(``sglang_deploy.lifecycle.rollback_policy``). ``history_entry`` is the line a gate adds to the
host's history, which later gates read as the baseline.

The gate's own failures always read "gate could not measure: ...", never as a slow server.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Mapping

PASS, FAIL, CRASHED, NOT_READY, UNREACHABLE, ERROR = "pass", "fail", "crashed", "not-ready", "unreachable", "error"


@dataclass(frozen=True)
class Outcome:
    kind: str  # PASS FAIL CRASHED NOT_READY UNREACHABLE ERROR
    summary: str  # one line: what happened

    @property
    def passed(self) -> bool:
        return self.kind == PASS


def classify(report: Mapping[str, Any] | None, failure: str | None = None, journal: str = "",
             on_host: bool = False) -> Outcome:
    """The gate's outcome from its report and what systemd said (``failure``
    from :func:`unit_failure`, which wins: a crashed server is not a slow one).
    Unreachable from the controller is the gate's own failure; unreachable from
    the host itself (``on_host``) means the server never listened: not ready."""
    tail = f"; last journal lines:\n{journal.rstrip()}" if journal.strip() else ""
    if failure:
        return Outcome(CRASHED, f"the server did not stay up: {failure}{tail}")
    report = report or {}
    verdict = report.get("verdict")
    if verdict == "pass":
        return Outcome(PASS, "; ".join(r["detail"] for r in report.get("rules") or []) or "ready and as planned")
    if verdict == "fail":
        return Outcome(FAIL, "gate failed: " + "; ".join(report.get("reasons") or ["no reason given"]))
    err = report.get("error") or {}
    step, message = err.get("step", "gate"), err.get("message") or "; ".join(report.get("reasons") or ["unknown"])
    unreachable = message.startswith("the server is unreachable") or message.startswith("cannot resolve")
    if step == "ready" and unreachable and on_host:
        return Outcome(NOT_READY, f"gate on the host could not reach the server there: {message}{tail}")
    if step == "ready" and unreachable:
        return Outcome(UNREACHABLE, f"gate could not measure: {message} (from the controller, while the unit "
                                    f"kept running: the server may be fine, the gate cannot tell)")
    if step == "ready" and "never became ready" in message:
        return Outcome(NOT_READY, f"gate could not measure: {message}{tail}")
    return Outcome(ERROR, f"gate could not measure: {step}: {message}{tail}")


def hardware_key(count: int, model: str, compute_capability: str | None) -> str:
    """The gate's key hardware, e.g. ``2x NVIDIA RTX A6000 (sm86)``."""
    sm = f" (sm{compute_capability.replace('.', '')})" if compute_capability else ""
    return f"{count}x {model}{sm}"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def history_entry(kind: str, rev: str, outcome: Outcome, report: Mapping[str, Any] | None,
                  plan_summary: Mapping[str, Any], sglang_version: str) -> dict[str, Any]:
    """One line of the host's history.jsonl. ``kind`` is ``gate`` (a measured
    revision; its ``verdict`` and ``decode_tok_s`` feed the gate's baseline) or
    ``rollback`` (readiness of the restored revision; never a baseline pass)."""
    report = report or {}
    server = report.get("server") or {}
    entry = {
        "created": now_iso(),
        "kind": kind,
        "revision": rev,
        "verdict": outcome.kind if kind == "gate" and outcome.kind in (PASS, FAIL) else
                   ("error" if kind == "gate" else ("ready" if outcome.passed else "not-ready")),
        "outcome": outcome.kind,
        "summary": outcome.summary.splitlines()[0] if outcome.summary else "",
        "sglang_version": server.get("version") or sglang_version,
        "plan": dict(plan_summary),
        "key": report.get("key"),
        "decode_tok_s": report.get("decode_tok_s") if kind == "gate" else None,
        "ttft_s": report.get("ttft_s"),
        "target_tok_s": report.get("target_tok_s"),
        "reasons": list(report.get("reasons") or []),
        "server_config_diffs": list(report.get("server_config_diffs") or []),
        "warnings": list(report.get("warnings") or []),
        "likely_causes": list(report.get("likely_causes") or []),
        "nvml": report.get("nvml"),
        "gate_ran_on": report.get("gate_ran_on"),
        "timing": report.get("timing"),
        # what the baseline rule compared with (this SGLang version's results or the one's before
        # it), and the operator's reason when it let a slower result pass: later reads show both
        "baseline": _baseline_of(report.get("baseline")),
        "accepted_slower": report.get("accepted_slower") if kind == "gate" else None,
        # what the plan predicted this hardware allows (gate.predicted) and how close the gate came
        "predicted_tok_s": (report.get("predicted_decode_tok_s") or {}).get("expected") if kind == "gate" else None,
        "measured_over_predicted": report.get("measured_over_predicted") if kind == "gate" else None,
        # prefill and the concurrency level, so that later gates compare them too (gate.figures);
        # a line without them (older, or not measured) gives no baseline for them
        "prefill_tok_s": report.get("prefill_tok_s") if kind == "gate" else None,
        "prefill_prompt_tokens": report.get("prefill_prompt_tokens") if kind == "gate" else None,
        "aggregate_tok_s": report.get("aggregate_tok_s") if kind == "gate" else None,
        "concurrency": report.get("concurrency") if kind == "gate" and report.get("aggregate_tok_s") else None,
        "aggregate_max_tokens": report.get("aggregate_max_tokens") if kind == "gate" and report.get("aggregate_tok_s")
        else None,
        "predicted_prefill_tok_s": (report.get("predicted_prefill_tok_s") or {}).get("expected")
        if kind == "gate" else None,
        "predicted_output_tok_s": (report.get("predicted_output_tok_s") or {}).get("expected")
        if kind == "gate" else None,
    }
    return entry


def _baseline_of(baseline: Any) -> dict[str, Any] | None:
    """The report's baseline without the file it was read from (a temporary copy)."""
    if not isinstance(baseline, Mapping):
        return None
    return {k: v for k, v in baseline.items() if k != "file"}


