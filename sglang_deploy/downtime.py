"""The serving gap of one restart, and the phases inside it. Pure: the stamps are gathered by
the glue (``sglang_deploy/deploy/operations.restart_service`` writes them on the host,
``sglang_deploy/deploy/gating`` adds the load and readiness moments).

Stamps, in the host's clock (seconds since the epoch):

- ``last_answer``: the old server's last answer the deploy saw: its ``/health`` probed just
  before the stop (absent when nothing answered: no old server was serving);
- ``stopping`` / ``stopped``: around ``systemctl stop``;
- ``gpus_free``: none of the old processes alive or holding a GPU;
- ``started``: ``systemctl start`` returned (the process runs);
- ``loaded``: the new server's log says the weights are loaded (SGLang's ``Load weight end``,
  sglang/srt/model_executor/model_runner.py, load_model); absent when the log does not say;
- ``ready``: the gate's first healthy answer (its poll backs off to at most 1 s).

The gap is ``ready - last_answer``; the phases split it: stop, GPUs free, start, load, ready.
"""

from __future__ import annotations

from typing import Any, Mapping

STAMPS = ("last_answer", "stopping", "stopped", "gpus_free", "started", "loaded", "ready")
PHASES = (("stop", "stopping", "stopped"), ("gpus_free", "stopped", "gpus_free"), ("start", "gpus_free", "started"),
          ("load", "started", "loaded"), ("ready", "loaded", "ready"))


def parse_stamps(text: str) -> dict[str, float]:
    """``name seconds`` lines (as the host writes them) -> {name: seconds}; unknown or bad lines are skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in STAMPS:
            try:
                out[parts[0]] = float(parts[1])
            except ValueError:
                continue
    return out


def measure(stamps: Mapping[str, float]) -> dict[str, Any]:
    """The gap and its phases (seconds, 3 decimals); a phase whose ends are unknown is None,
    and ``ready`` then counts from the process start."""
    s = dict(stamps)
    phases: dict[str, float | None] = {}
    for name, start, end in PHASES:
        if name == "ready" and "loaded" not in s:
            start = "started"
        phases[name] = round(s[end] - s[start], 3) if start in s and end in s else None
    gap = round(s["ready"] - s["last_answer"], 3) if "ready" in s and "last_answer" in s else None
    return {"serving_gap_s": gap, "phases": phases, "last_answer": s.get("last_answer"), "ready": s.get("ready"),
            "old_server_answered": "last_answer" in s}


def summary(downtime: Mapping[str, Any] | None) -> str:
    """One line: ``serving gap 3.21 s (stop 0.40, GPUs free 0.10, start 0.05, load 1.50, ready 1.16)``."""
    if not downtime:
        return "serving gap not measured"
    labels = {"stop": "stop", "gpus_free": "GPUs free", "start": "start", "load": "load", "ready": "ready"}
    parts = ", ".join(f"{labels[k]} {v:.2f}" for k, v in (downtime.get("phases") or {}).items() if v is not None)
    gap = downtime.get("serving_gap_s")
    head = f"serving gap {gap:.2f} s" if gap is not None else "serving gap unknown (no old server answered)"
    return f"{head} ({parts})" if parts else head
