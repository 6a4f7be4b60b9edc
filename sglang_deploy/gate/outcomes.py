"""What the deploy does after the post-restart gate: pure decisions, no I/O.

After a restart the deploy gates the new revision (``gate.run.run_check``
from the controller) while watching the unit in systemd. This module turns
what it saw into a step:

* ``pass``                          -> mark the revision deployed
* ``fail`` (slow, or configured differently from the plan),
  ``crashed`` (the unit failed or systemd restarted it),
  ``not-ready`` (it answered but never became ready),
  ``error`` (it broke mid-measurement)  -> roll back to the previous revision,
  or, with none, stop the service
* ``unreachable`` (nothing ever answered the controller while the unit kept
  running)                        -> no rollback: the server may well be
  serving; the gate could not tell. The revision stays running, not marked
  deployed (the next deploy restarts and gates it again), and the host fails
  saying so.

The gate's own failures always read "gate could not measure: ...", never as
a slow server.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Mapping

from ..revision import Actions, HostState

PASS, FAIL, CRASHED, NOT_READY, UNREACHABLE, ERROR = "pass", "fail", "crashed", "not-ready", "unreachable", "error"
MARK_DEPLOYED, ROLLBACK, STOP, KEEP_UNPROVEN = "mark-deployed", "rollback", "stop", "keep-unproven"
UNIT_PROPERTIES = ("ActiveState", "SubState", "Result", "NRestarts", "MainPID")
JOURNAL_LINES = 20


@dataclass(frozen=True)
class UnitStatus:
    active_state: str
    sub_state: str = ""
    result: str = ""
    n_restarts: int | None = None
    main_pid: int | None = None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None


def parse_unit_status(text: str) -> UnitStatus:
    """``systemctl show -p ActiveState -p SubState -p Result -p NRestarts -p MainPID`` output."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return UnitStatus(active_state=values.get("ActiveState", "unknown"), sub_state=values.get("SubState", ""),
                      result=values.get("Result", ""), n_restarts=_int(values.get("NRestarts")),
                      main_pid=_int(values.get("MainPID")) or None)


def unit_failure(first: UnitStatus, now: UnitStatus) -> str | None:
    """Why the unit is not the one that was started (None while it still is)."""
    result = f", result {now.result}" if now.result and now.result != "success" else ""
    if now.active_state == "failed":
        return f"the unit failed{result}"
    if now.sub_state == "auto-restart":
        return f"the server exited and systemd is about to restart it{result}"
    if now.active_state in ("inactive", "deactivating"):
        return f"the unit stopped ({now.active_state}{result})"
    if first.n_restarts is not None and now.n_restarts is not None and now.n_restarts > first.n_restarts:
        return f"systemd restarted it {now.n_restarts - first.n_restarts} time(s) since the deploy started it"
    if first.main_pid and now.main_pid and now.main_pid != first.main_pid:
        return f"its main process changed (PID {first.main_pid} -> {now.main_pid}): it restarted"
    return None


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


def next_step(outcome: Outcome, can_roll_back: bool) -> str:
    """What follows the gate: for one host, ``can_roll_back`` when a previous revision is
    staged on it; for a multi-node tp group, when one is staged on every member."""
    if outcome.passed:
        return MARK_DEPLOYED
    if outcome.kind == UNREACHABLE:
        return KEEP_UNPROVEN
    return ROLLBACK if can_roll_back else STOP


@dataclass(frozen=True)
class RollbackPlan:
    target: str  # the revision restored
    previous: str | None  # the previous marker after the rollback (None: removed)


def rollback_plan(state: HostState, actions: Actions, rev: str) -> RollbackPlan | None:
    """Where a failed gate of ``rev`` rolls back to: the revision this deploy
    replaces, when its files are staged on the host; markers as before the deploy."""
    target = actions.new_previous
    if not target or target == rev or target not in state.staged:
        return None
    previous = state.previous if state.previous not in (None, target, rev) and state.previous in state.staged else None
    return RollbackPlan(target=target, previous=previous)


def hardware_key(count: int, model: str, compute_capability: str | None) -> str:
    """The gate's key hardware, e.g. ``2x NVIDIA RTX A6000 (sm86)``."""
    sm = f" (sm{compute_capability.replace('.', '')})" if compute_capability else ""
    return f"{count}x {model}{sm}"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def history_entry(kind: str, rev: str, outcome: Outcome, report: Mapping[str, Any] | None,
                  plan_summary: Mapping[str, Any], sglang_version: str) -> dict[str, Any]:
    """One line of the host's history.jsonl. ``kind`` is ``gate`` (a measured
    revision; its ``verdict`` and ``decode_tok_s`` feed the gate's baseline) or
    ``rollback`` (readiness of the restored revision; never a baseline pass)."""
    report = report or {}
    server = report.get("server") or {}
    entry = {
        "created": _now(),
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
    }
    return entry


def failure_message(service: str, rev: str, outcome: Outcome, step: str, rollback_to: str | None,
                    rollback_result: str | None) -> str:
    """The line the deploy fails the host with."""
    what = f"revision {rev} of {service}: {outcome.summary}"
    if step == ROLLBACK:
        return f"{what}\n-> rolled back to revision {rollback_to}: {rollback_result or 'rollback did not finish'}"
    if step == STOP:
        return f"{what}\n-> no previous revision to roll back to: {service} was stopped"
    if step == KEEP_UNPROVEN:
        return (f"{what}\n-> not rolled back (the controller could not reach it; nothing says it is broken): "
                f"revision {rev} keeps running but is NOT marked deployed, so the next deploy restarts and gates "
                f"it again; set sglang_gate.url to an address the controller can reach")
    return what


# What became of one host in a deploy: one record per host, for the fleet rollout's summary.
# With RESULTS_ENV=FILE in the controller's environment (set by the rollout for each wave),
# the deploy appends every host's record to FILE as one JSON line.
RESULTS_ENV = "SGLANG_DEPLOY_RESULTS"
PASSED, UNCHANGED, ROLLED_BACK, ROLLBACK_FAILED, STOPPED, UNPROVEN, FAILED = (
    "passed", "unchanged", "rolled back", "failed to roll back", "stopped", "unproven", "failed")
HOST_RESULTS = (PASSED, UNCHANGED, ROLLED_BACK, ROLLBACK_FAILED, STOPPED, UNPROVEN, FAILED)


def host_result(host: str, *, old_revision: str | None, new_revision: str | None, restarted: bool,
                outcome: Outcome | None = None, step: str | None = None, rollback_ok: bool | None = None,
                report: Mapping[str, Any] | None = None, error: str | None = None,
                rollback_target: str | None = None, downtime: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The record of one host's deploy: which revision it ran before this deploy
    (``old_revision``; for a host left unchanged, the one it still runs), the one
    deployed, the one it runs now, the gate's figures, and the result (one of
    HOST_RESULTS). ``rollback_target``: the revision a rollback restored (by default
    ``old_revision``; it differs when the host ran an unproven revision before)."""
    report = report or {}
    baseline = report.get("baseline") or {}
    if error is not None:
        result, final, summary = FAILED, old_revision, error
    elif not restarted:
        result, final, summary = UNCHANGED, new_revision, "already deployed: not restarted"
        old_revision = new_revision
    elif outcome is not None and outcome.passed:
        result, final, summary = PASSED, new_revision, outcome.summary
    elif step == ROLLBACK:
        ok = bool(rollback_ok)
        result = ROLLED_BACK if ok else ROLLBACK_FAILED
        final = rollback_target if rollback_target is not None else old_revision
        summary = outcome.summary if outcome else "gate failed"
    elif step == STOP:
        result, final, summary = STOPPED, None, outcome.summary if outcome else "gate failed"
    elif step == KEEP_UNPROVEN:
        result, final, summary = UNPROVEN, new_revision, outcome.summary if outcome else "gate could not measure"
    else:
        result, final, summary = FAILED, None, outcome.summary if outcome else "the gate did not report"
    return {
        "host": host,
        "result": result,
        "old_revision": old_revision,
        "new_revision": new_revision,
        "running_revision": final,
        "summary": summary.splitlines()[0] if summary else "",
        "decode_tok_s": report.get("decode_tok_s"),
        "target_tok_s": report.get("target_tok_s"),
        "baseline_best_tok_s": baseline.get("best_tok_s"),
        # The restart's serving gap (old server's last answer -> new one ready) and its phases.
        "serving_gap_s": (downtime or {}).get("serving_gap_s"),
        "downtime": dict(downtime) if downtime else None,
        "created": _now(),
    }
