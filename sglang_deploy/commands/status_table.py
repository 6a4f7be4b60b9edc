"""`sglang-deploy status`'s output: the table (:func:`render_table`) and the JSON
(:func:`rows_json`) of the rows ``sglang_deploy.status`` judged."""

from __future__ import annotations

import json
from typing import Sequence

from sglang_deploy import downtime
from sglang_deploy.untrusted import printable
from sglang_deploy.status.model import ERROR, KIND_GATEWAY, OK, PENDING, UNREACHABLE
from sglang_deploy.status.gpus import gpu_summary
from sglang_deploy.status.row import Row, _duration


# ---- output -------------------------------------------------------------------------------------

_COLOURS = {OK: "32", PENDING: "33", UNREACHABLE: "31", ERROR: "31"}


def _rate_text(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _gateway_cells(row: Row) -> list[str]:
    doc = row.gateway or {}
    router = doc.get("router") or {}
    planned, installed = router.get("planned"), router.get("installed")
    version = f"router {installed or planned}" if (installed or planned) else "-"
    if installed and planned and installed != planned:
        version += f" (plan {planned})"
    unit = doc.get("unit") or {}
    revision = unit.get("current") or "-"
    if not row.reachable or doc.get("healthy") is None:
        return [row.host, row.state, revision, "-", version, "-", "-", "-", "-"]
    server = f"gateway {doc['healthy']}/{doc['expected']} healthy"
    if doc.get("others_total"):
        server += f" (+{doc['others_total']} other)"
    return [row.host, row.state, revision, server, version, "-", "-", "-", "-"]


def _cells(row: Row) -> list[str]:
    rev, srv, sg = row.revision, row.server, row.sglang
    if row.kind == KIND_GATEWAY:
        return _gateway_cells(row)
    if not row.reachable:
        return [row.label, row.state, "-", "-", "-", "-", "-", "-", "-"]
    running, deployed, planned = rev["running"] or "none", rev["deployed"] or "none", rev["planned"] or "?"
    revision = running if running == deployed else f"{running} (deployed {deployed})"
    if rev["pending"]:
        revision += f" -> {planned}"
    server = srv["active_state"] or "?"
    if srv["main_pid"]:
        server += f" pid {srv['main_pid']}"
    if srv["uptime_s"] is not None:
        server += f" up {_duration(srv['uptime_s'])}"
    if srv["restarts"]:
        server += f" restarts {srv['restarts']}"
    version = sg["installed"] or "-"
    if sg["planned"] and sg["planned"] != sg["installed"]:
        version += f" (plan {sg['planned']})"
    drifted = [k for k, v in row.drift.items() if v in ("differs", "missing")]
    drift = ",".join(drifted) if drifted else ("-" if all(v == "unknown" for v in row.drift.values()) else "none")
    gpus = gpu_summary(row.gpu_health, row.gpu_tags)
    watch = "-"
    if row.last_watch is not None:
        w = row.last_watch
        watch = f"{w.verdict} {_rate_text(w.decode_tok_s)}"
        if w.baseline_tok_s is not None:
            watch += f"/{_rate_text(w.baseline_tok_s)}"
        watch += " tok/s"
        if w.age_s is not None:
            watch += f" {_duration(w.age_s)} ago"
    gate = "-"
    if row.last_gate is not None:
        g = row.last_gate
        gate = f"{g.verdict} {_rate_text(g.decode_tok_s)} tok/s"
        if g.target_tok_s is not None:
            gate += f" (target {_rate_text(g.target_tok_s)})"
        if g.baseline_tok_s is not None:
            of = f" of {g.baseline_version}" if g.baseline_version else ""
            gate += f" (baseline {_rate_text(g.baseline_tok_s)}{of})"
        if g.measured_over_predicted is not None:
            gate += f" ({g.measured_over_predicted * 100:.0f}% of predicted {_rate_text(g.predicted_tok_s)})"
        if g.prefill_tok_s is not None:
            gate += f", prefill {_rate_text(g.prefill_tok_s)}"
            if g.prefill_over_predicted is not None:
                gate += f" ({g.prefill_over_predicted * 100:.0f}% of predicted)"
        if g.aggregate_tok_s is not None and g.concurrency:
            gate += f", {g.concurrency} streams {_rate_text(g.aggregate_tok_s)}"
            if g.aggregate_over_predicted is not None:
                gate += f" ({g.aggregate_over_predicted * 100:.0f}% of predicted)"
        if g.start_s is not None:
            slowest = g.slowest_phase
            gate += f", start {g.start_s:.0f} s" + (
                f" ({downtime.LABELS.get(slowest[0], slowest[0])} {slowest[1]:.0f} s)" if slowest else "")
        if g.accepted_slower:
            gate += " accepted slower"
        if g.time:
            gate += f" {g.time}"
    return [row.label, row.state, revision, server, version, drift, gpus, gate, watch]


HEADER = ["HOST", "STATE", "REVISION", "SERVER", "SGLANG", "DRIFT", "GPUS", "LAST GATE", "LAST WATCH"]


def render_table(rows: Sequence[Row], colour: bool = False, with_diff: bool = False) -> str:
    """The table for people: one line per host, then each host's problems, warnings and diffs."""
    cells = [[printable(c) for c in _cells(r)] for r in rows]
    widths = [max(len(line[i]) for line in [HEADER, *cells]) for i in range(len(HEADER))]
    out = ["  ".join(h.ljust(w) for h, w in zip(HEADER, widths)).rstrip()]
    for row, line in zip(rows, cells):
        text = [c.ljust(w) for c, w in zip(line, widths)]
        if colour:
            code = _COLOURS.get(row.state, "31")
            text[1] = f"\x1b[{code}m{line[1]}\x1b[0m" + " " * (widths[1] - len(line[1]))
        out.append("  ".join(text).rstrip())
    notes = []
    for row in rows:
        for problem in row.problems:
            notes.append(f"{row.label}: {printable(problem)}")
        if row.last_gate is not None and row.last_gate.accepted_slower:
            notes.append(f"{row.label}: last gate accepted slower than its baseline: "
                         f"{printable(row.last_gate.accepted_slower)}")
        for warning in row.warnings:
            notes.append(f"{row.label}: warning: {printable(warning)}")
        if with_diff:
            for key, shown_diff in row.diff.items():
                notes.append(f"{row.label}: {key} diff:\n{printable(shown_diff, newlines=True).rstrip()}")
    if notes:
        out += ["", *notes]
    return "\n".join(out) + "\n"


def rows_json(rows: Sequence[Row], with_diff: bool = False) -> str:
    """``--json``: an array of host objects (docs/status.md has the schema)."""
    return json.dumps([r.as_dict(with_diff) for r in rows], indent=2) + "\n"
