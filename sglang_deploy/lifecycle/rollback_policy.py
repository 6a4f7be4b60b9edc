"""What the deploy does after the post-restart gate, beside the revisions it moves between: pure
decisions, no I/O.

The gate classifies what it saw (``sglang_deploy.gate.outcomes``); this module turns the outcome into
the deploy's next step:

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

and keeps the record of what became of each host (``host_result``) for the rollout's summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from sglang_deploy.gate.outcomes import FAIL, PASS, UNREACHABLE, Outcome, now_iso
from sglang_deploy.lifecycle.revision import Actions, HostState

MARK_DEPLOYED, ROLLBACK, STOP, KEEP_UNPROVEN = "mark-deployed", "rollback", "stop", "keep-unproven"


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
# Where the run context names a results file (sglang_deploy.runcontext, set by the rollout for each
# wave), the deploy appends every host's record there as one JSON line.
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
        "created": now_iso(),
    }


# From the best to the worst: a host's record when its replicas (plan.replicas) each wrote one.
_SEVERITY = (UNCHANGED, PASSED, UNPROVEN, ROLLED_BACK, STOPPED, ROLLBACK_FAILED, FAILED)
_FINE = (UNCHANGED, PASSED)


def host_records(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """One record per host from a deploy's records, in their order. A host whose data-parallel
    replicas are servers of their own writes one per replica (``replica``, ``replicas``): the worst
    result is the host's (a failed replica fails the host; a passed one makes an unchanged host
    passed), and a host whose replicas all did well but not all wrote one failed: a replica's
    deploy stopped before its record (its swap, say), leaving it out of its gateways."""
    def rank(r: Mapping[str, Any]) -> int:
        result = r.get("result")
        return _SEVERITY.index(result) if result in _SEVERITY else len(_SEVERITY)

    worst: dict[str, dict[str, Any]] = {}
    seen: dict[str, set[Any]] = {}
    for record in records:
        host = record["host"]
        seen.setdefault(host, set()).add(record.get("replica"))
        if host not in worst or rank(record) > rank(worst[host]):
            worst[host] = dict(record)
    for host, record in worst.items():
        expected = record.get("replicas")
        if record.get("result") in _FINE and isinstance(expected, int) and len(seen[host]) < expected <= 4096:
            missing = sorted(set(range(expected)) - seen[host])
            record.update(result=FAILED, running_revision=None,
                          summary=f"replica(s) {', '.join(map(str, missing))} of {expected} wrote no result: "
                                  "their deploy stopped before their gate (the run's output says where)")
    return worst


def gateway_result(host: str, *, old_revision: str | None, new_revision: str | None, restarted: bool,
                   why: str | None = None, gated: str | None = None, rolled_back: bool | None = None,
                   error: str | None = None) -> dict[str, Any]:
    """The record of a gateway host's deploy (``sglang_gateway``), in :func:`host_result`'s shape, so
    the rollout counts a gateway host like any other. ``why``: why its gate failed (None: passed,
    with ``gated`` what it proved); ``rolled_back``: after a failed gate, whether the previous
    revision came back ready (None: there was none, and the new revision stays live, unmarked);
    ``error``: it failed before anything changed (its data, systemd)."""
    if error is not None or not restarted:
        return host_result(host, old_revision=old_revision, new_revision=new_revision, restarted=restarted,
                           error=error)
    if why is None:
        return host_result(host, old_revision=old_revision, new_revision=new_revision, restarted=True,
                           outcome=Outcome(PASS, gated or "the gateway passed its gate"))
    failed = Outcome(FAIL, f"the gateway's gate failed: {why}")
    if rolled_back is None:
        record = host_result(host, old_revision=old_revision, new_revision=new_revision, restarted=True,
                             error=f"{failed.summary}; no previous revision to roll back to: revision "
                                   f"{new_revision} stays live, not marked deployed")
        record["running_revision"] = new_revision
        return record
    return host_result(host, old_revision=old_revision, new_revision=new_revision, restarted=True, outcome=failed,
                       step=ROLLBACK, rollback_ok=rolled_back)
