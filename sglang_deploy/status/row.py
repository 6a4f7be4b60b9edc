"""One row per host: its state, problems and figures (:func:`build_row`), and the command's exit
code (:func:`exit_code`). Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from sglang_deploy.hostrules import gpu as gpu_rules
from sglang_deploy.unitsyntax import ExecStartError, parse_exec_start
from sglang_deploy.untrusted import Scrubber, printable
from sglang_deploy.status.model import (DEGRADED, DOWN, DRIFTED, ERROR, FILE_KEYS, GATE_FAILED, HALF,
                                        HISTORY_SCAN_BYTES, KIND_SERVER, LastGate, NEVER, OK, Observed, PENDING,
                                        SCHEMA, STATES, UNREACHABLE, UnitShow, VERSION, WEIGHTS_BAD_SHOWN,
                                        WeightsCheck, last_gate)
from sglang_deploy.status.gpus import GpuHealth, gpu_findings, gpu_summary
from sglang_deploy.status.redact import argv_changes, unified_diff
from sglang_deploy.status.watch import LastWatch, judge_watch, last_watch


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


# ---- one row per host ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Planned:
    """What the inventory plans for a host today."""

    revision: str | None = None
    sglang_version: str | None = None
    paths: Mapping[str, str] = field(default_factory=dict)  # unit/env/nccl_conf -> live path
    error: str | None = None  # the host cannot be planned: its data is wrong (exit 2)
    unknown: str | None = None  # planned, but the revision cannot be known here (a secret not set)
    # What the preflight's checks of the probed hardware found (plan/pcie.py), said as the deploy says it
    findings: tuple[str, ...] = ()


@dataclass
class Row:
    host: str
    state: str
    problems: list[str]
    reachable: bool
    error: str | None
    revision: dict[str, Any]
    server: dict[str, Any]
    sglang: dict[str, Any]
    drift: dict[str, str]  # unit/env/nccl_conf -> same | differs | missing | unknown
    diff: dict[str, str]
    last_gate: LastGate | None
    warnings: list[str]
    gpu_health: GpuHealth | None = None
    gpu_tags: list[str] = field(default_factory=list)  # each GPU problem, short: the GPU column
    last_watch: LastWatch | None = None
    kind: str = KIND_SERVER  # server | gateway
    gateways: dict[str, str] = field(default_factory=dict)  # a worker's gateways: name -> MEMBERSHIPS word
    gateway: dict[str, Any] | None = None  # a gateway host's own view (gateway_row)
    # The server's unit when the host runs several (its data-parallel replicas behind a gateway,
    # sglang_deploy.plan.replicas: one row each); None: the host's one server.
    service: str | None = None

    @property
    def label(self) -> str:
        """The row's name in the table: the host, and the unit when the host has several."""
        return self.host if self.service is None else f"{self.host}:{self.service}"

    def gpus(self) -> dict[str, Any] | None:
        h = self.gpu_health
        if h is None:
            return None
        return {"summary": gpu_summary(h, self.gpu_tags), "count": len(h.gpus), "error": h.error,
                "problems": list(self.gpu_tags), "devices": [g.as_dict() for g in h.gpus]}

    def as_dict(self, with_diff: bool = False) -> dict[str, Any]:
        doc = {"schema": SCHEMA, "host": self.host, "kind": self.kind, "state": self.state,
               "problems": list(self.problems), "reachable": self.reachable, "error": self.error,
               "revision": dict(self.revision), "server": dict(self.server), "sglang": dict(self.sglang),
               "drift": dict(self.drift),
               "last_gate": self.last_gate.as_dict() if self.last_gate else None, "warnings": list(self.warnings),
               "gpus": self.gpus(), "last_watch": self.last_watch.as_dict() if self.last_watch else None,
               "gateways": dict(self.gateways), "gateway": _copy(self.gateway), "service": self.service}
        if with_diff:
            doc["diff"] = dict(self.diff)
        return doc


_EMPTY_REVISION = {"running": None, "deployed": None, "previous": None, "planned": None, "pending": None}
_EMPTY_SERVER = {"active_state": None, "sub_state": None, "main_pid": None, "uptime_s": None, "restarts": None,
                 "enabled": None}


def unreachable_row(host: str, why: str, planned: Planned | None = None) -> Row:
    """A host SSH could not reach (or whose read failed): nothing is known of it."""
    rev = dict(_EMPTY_REVISION, planned=planned.revision if planned else None)
    return Row(host=host, state=UNREACHABLE, problems=[f"unreachable: {printable(why)}"], reachable=False,
               error=printable(why), revision=rev, server=dict(_EMPTY_SERVER),
               sglang={"installed": None, "deployed": None, "planned": planned.sglang_version if planned else None},
               drift={k: "unknown" for k in (*FILE_KEYS, "argv")}, diff={}, last_gate=None, warnings=[])


def error_row(host: str, why: str, planned: Planned | None = None) -> Row:
    """A host that cannot be planned from the inventory (nothing of it was read): exit 2."""
    row = unreachable_row(host, why, planned)
    row.state, row.reachable, row.problems = ERROR, True, [f"cannot plan: {printable(why)}"]
    return row


def _copy(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if doc is None else json.loads(json.dumps(doc))


def _epoch(seconds: int | None) -> str:
    if seconds is None or not 0 <= seconds < 1 << 37:
        return "an unknown time"
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def lock_held(seen: Observed) -> bool:
    """A deploy holds the host's lock now (before the lock's ``expires=``): it is changing this host."""
    return seen.lock and seen.lock_expires is not None and seen.now_s is not None and seen.now_s < seen.lock_expires


def _lock_text(seen: Observed) -> str:
    """What the deploy's lock on the host says: a deploy changing it now, or one that died holding it."""
    since = f"since {_epoch(seen.lock_started)}"
    if lock_held(seen):
        return (f"a deploy holds the host's lock ({since}, until {_epoch(seen.lock_expires)} at most): it is "
                "changing this host now; read it again once that deploy ends")
    return (f"a deploy's lock is left on the host ({since}, past its deadline {_epoch(seen.lock_expires)}): "
            "that deploy died before it finished; deploy again")


def _uptime(unit: UnitShow, now_us: int | None) -> float | None:
    start = unit.active_enter_us or unit.exec_main_start_us
    if unit.active_state != "active" or not start or now_us is None or now_us < start:
        return None
    return round((now_us - start) / 1e6, 1)


def build_row(host: str, seen: Observed, planned: Planned, scrubber: Scrubber | None = None,
              with_diff: bool = False, weights: WeightsCheck | None = None, now: datetime | None = None) -> Row:
    """One host's row: its state, problems and figures (module docstring)."""
    problems: list[tuple[str, str]] = []  # (state, text)
    warnings = list(seen.warnings)
    warnings.extend(f"preflight: {printable(text)}" for text in planned.findings)
    error = None
    if planned.error:
        problems.append((ERROR, f"cannot plan: {printable(planned.error)}"))
        error = printable(planned.error)
    if not seen.systemd:
        problems.append((ERROR, "this host does not run systemd"))
        error = error or "this host does not run systemd"
    # revisions
    pending = None
    if planned.revision is not None and seen.deployed is not None:
        pending = planned.revision != seen.deployed
    if seen.current is None and seen.deployed is None:
        problems.append((NEVER, "never deployed: no revision was made live here"))
    else:
        if seen.current != seen.deployed:
            problems.append((HALF, f"revision {seen.current or 'none'} is live but {seen.deployed or 'none'} is "
                                   "marked deployed (a deploy is running, died, or its gate could not measure)"))
    if seen.lock:
        problems.append((HALF, _lock_text(seen)))
    if seen.staging:
        problems.append((HALF, f"revision {', '.join(seen.staging)} is being staged (or its staging died)"))
    if seen.leftover_tmp:
        problems.append((HALF, f"a swap's temporary file is left beside {', '.join(seen.leftover_tmp)}"))
    # drift: the live files against the deployed (else running) revision's staged copies
    drift: dict[str, str] = {}
    diff: dict[str, str] = {}
    for key in FILE_KEYS:
        live, staged = seen.live_sha256.get(key), seen.staged_sha256.get(key)
        if seen.reference is None:
            drift[key] = "unknown"
        elif live is None:
            drift[key] = "missing"
        elif staged is None:
            drift[key] = "unknown"
            warnings.append(f"{key}: revision {seen.reference} has no staged copy to compare with")
        else:
            drift[key] = "same" if live == staged else "differs"
        if drift[key] in ("differs", "missing"):
            path = planned.paths.get(key, key)
            what = "is missing" if live is None else f"differs from revision {seen.reference}'s copy"
            problems.append((DRIFTED, f"{key} drifted: {path} {what}"))
            if with_diff and key in seen.diffs:
                live_text, staged_text = seen.diffs[key]
                diff[key] = unified_diff(key, path, live_text, staged_text, seen.reference, scrubber)
    # the running server's argv against the deployed revision's ExecStart= and the live unit's
    drift["argv"] = _argv_drift(seen, problems, warnings, scrubber)
    # the served snapshot's files, re-hashed (--verify-weights)
    if weights is not None:
        if weights.served is None and weights.error is None:
            warnings.append("weights: the running revision serves no snapshot from a model store; nothing to verify")
        elif weights.bad:
            drift["weights"] = "differs"
            for name, why in weights.bad[:WEIGHTS_BAD_SHOWN]:
                problems.append((DRIFTED, f"weights drifted: {weights.served}/{name}: {why}"))
            if len(weights.bad) > WEIGHTS_BAD_SHOWN:
                problems.append((DRIFTED, f"weights drifted: {len(weights.bad) - WEIGHTS_BAD_SHOWN} more file(s)"))
        elif weights.finished and weights.error is None:
            drift["weights"] = "same"
        else:
            drift["weights"] = "unknown"
            warnings.append(f"weights: not verified whole: {weights.error or 'no answer'}")
    # the server
    unit = seen.unit
    server = {"active_state": unit.active_state, "sub_state": unit.sub_state,
              "main_pid": unit.main_pid or None, "uptime_s": _uptime(unit, seen.now_us),
              "restarts": unit.n_restarts, "enabled": seen.enabled}
    if seen.systemd and (seen.current or seen.deployed) and unit.active_state != "active":
        state_text = unit.active_state or "unknown"
        if unit.load_state == "not-found":
            state_text = "not loaded (no unit)"
        problems.append((DOWN, f"the service is not active: {state_text}"
                               + (f" ({unit.sub_state})" if unit.sub_state and unit.load_state != "not-found" else "")))
    # the version
    sglang = {"installed": seen.installed_version, "deployed": seen.staged_version,
              "planned": planned.sglang_version}
    if seen.staged_version and seen.installed_version != seen.staged_version:
        problems.append((VERSION, f"SGLang {seen.installed_version or 'is not installed'}"
                                  f"{' is installed' if seen.installed_version else ''} in the venv of the running "
                                  f"revision, which was deployed with {seen.staged_version}"))
    # the GPUs
    gpu_tags: list[str] = []
    gpu_found: list[gpu_rules.Finding] | None = None  # None: not read
    if seen.gpu_health is not None:
        if seen.gpu_health.error is not None:
            warnings.append(f"GPU health not read: {seen.gpu_health.error}")
        else:
            gpu_found = gpu_findings(seen.gpu_health)
            found = gpu_rules.problems(gpu_found)
            problems.extend((DEGRADED, f.text) for f in found)
            gpu_tags = [f.tag for f in found]
            warnings.extend(f.text for f in gpu_found if f.severity != gpu_rules.PROBLEM)
    # the continuous check's last run
    watch = last_watch(seen.history, now)
    if watch is not None and watch.verdict in ("fail", "error"):
        when = f"{_duration(watch.age_s)} ago" if watch.age_s is not None else (watch.time or "time unknown")
        text = f"the continuous check {'failed' if watch.verdict == 'fail' else 'could not measure'} ({when})" + \
            (f": {watch.why}" if watch.why else "")
        if watch.verdict == "fail" and watch.revision is not None and watch.revision == seen.deployed:
            # Held against this read: what it shows fixed no longer sets the state (or the exit code).
            watch = judge_watch(watch, drift, seen, gpu_found)
            if watch.standing:
                problems.append((DEGRADED, text + (f" (resolved since, by this read: {', '.join(watch.resolved)})"
                                                   if watch.resolved else "")))
            else:
                warnings.append(f"{text}; resolved: this read no longer finds {', '.join(watch.resolved)}")
        else:
            warnings.append(text + ("" if watch.verdict == "error" else " (another revision)"))
    # the last gate
    gate, refused = last_gate(seen.history)
    if refused:
        warnings.append(f"history: {refused} line(s) are not JSON objects; skipped")
    if seen.history_truncated:
        warnings.append(f"history: only its last {HISTORY_SCAN_BYTES >> 20} MiB read")
    if gate is not None and gate.verdict != "pass":
        problems.append((GATE_FAILED, f"the last gate ({gate.time or 'time unknown'}) did not pass: "
                                      f"{gate.verdict}{': ' + gate.summary if gate.summary else ''}"))
    if pending:
        problems.append((PENDING, f"the inventory plans revision {planned.revision}; {seen.deployed} is deployed"))
    if planned.unknown:
        warnings.append(f"planned revision unknown: {printable(planned.unknown)}")
    order = {s: i for i, s in enumerate(STATES)}
    state = min((s for s, _ in problems), key=order.__getitem__, default=OK)
    revision = {"running": seen.current, "deployed": seen.deployed, "previous": seen.previous,
                "planned": planned.revision, "pending": pending}
    return Row(host=host, state=state, problems=[text for _, text in problems], reachable=True, error=error,
               revision=revision, server=server, sglang=sglang, drift=drift, diff=diff, last_gate=gate,
               warnings=warnings, gpu_health=seen.gpu_health, gpu_tags=gpu_tags, last_watch=watch)


def _argv_drift(seen: Observed, problems: list[tuple[str, str]], warnings: list[str],
                scrubber: Scrubber | None) -> str:
    """``same`` | ``differs`` | ``unknown``: the running MainPID's argv (/proc/PID/cmdline) against
    the ExecStart= of the deployed revision's staged unit (started by hand, or from a unit changed
    since) and of the live unit (changed and reloaded, not restarted: a restart would change it)."""
    if seen.unit.active_state != "active" or not seen.unit.main_pid or seen.staged_unit is None:
        return "unknown"
    if seen.cmdline is None:
        warnings.append("argv: the running server's command line could not be read")
        return "unknown"
    running = list(seen.cmdline)
    verdict = "same"
    for what, text in ((f"revision {seen.reference}'s ExecStart=", seen.staged_unit),
                       ("the live unit's ExecStart= (changed, reloaded and not restarted?)", seen.live_unit)):
        if text is None:
            continue
        try:
            expected = parse_exec_start(text)
        except ExecStartError as exc:
            warnings.append(f"argv: {what} not compared: {printable(str(exc))}")
            verdict = "unknown" if verdict == "same" else verdict
            continue
        if expected != running:
            changes = "; ".join(argv_changes(expected, running, scrubber))
            problems.append((DRIFTED, f"argv drifted: pid {seen.unit.main_pid} runs another command line than "
                                      f"{what}: {changes}"))
            verdict = "differs"
    return verdict

def _worse(a: str, b: str) -> str:
    order = {s: i for i, s in enumerate(STATES)}
    return a if order[a] <= order[b] else b


def exit_code(rows: Sequence[Row]) -> int:
    """0 every host ok; 2 a host unreachable or in error; 1 any other state."""
    if any(r.state in (UNREACHABLE, ERROR) for r in rows):
        return 2
    return 0 if all(r.state == OK for r in rows) else 1
