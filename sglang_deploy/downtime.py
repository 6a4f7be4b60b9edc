"""The serving gap of one restart, and the phases inside it. Pure: the stamps are gathered by
the glue (``sglang_deploy/deploy/operations.restart_service`` writes them on the host,
``sglang_deploy/deploy/gating`` adds the server's own log lines and the readiness moment).

Stamps, in the host's clock (seconds since the epoch):

- ``last_answer``: the old server's last answer the deploy saw: its ``/health`` probed just
  before the stop (absent when nothing answered: no old server was serving);
- ``stopping`` / ``stopped``: around ``systemctl stop``;
- ``gpus_free``: none of the old processes alive or holding a GPU;
- ``started``: ``systemctl start`` returned (the process runs);
- ``loaded``, ``kv_ready``, ``graphs_captured``, ``fired_up``: the new server's own log lines
  (``LOG_MARKS``), the last rank's line of each (a start is as slow as its slowest rank);
- ``ready``: the gate's first healthy answer (its poll backs off to at most 1 s).

The gap is ``ready - last_answer``; the phases split it: stop, GPUs free, start, load, KV cache,
CUDA graphs, warm-up, ready. A phase whose own start stamp is missing (a log line SGLang did not
write, a graph capture turned off) counts from the latest stamp before it, so the phases of a
start always add up to its time. Kernel JIT (DeepGEMM, FlashInfer, Triton, torch.compile) runs
at the first forward passes, which are the CUDA graph capture and the warm-up: a cold compile
cache shows there.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

#: The server's log lines that end a phase of its start, the same in every supported release
#: (0.5.9, 0.5.15, 0.5.19, 0.5.23), each matched anywhere in a journal line:
#: - "Load weight end.": srt/model_executor/model_runner.py, ModelRunner.load_model;
#: - "Memory pool end.": srt/model_executor/model_runner_kv_cache_mixin.py (0.5.9, 0.5.15),
#:   srt/mem_cache/kv_cache_configurator.py, configure (0.5.19, 0.5.23);
#: - a graph capture's end: "Capture cuda graph end." (0.5.9: model_runner.py, init_device_graphs),
#:   "Capture target decode CUDA graph end." and the prefill, verify and draft captures' "Capture
#:   <name> CUDA graph end." (0.5.15: model_runner.py; 0.5.19, 0.5.23:
#:   model_runner_components/cuda_graph_setup.py; the draft's in srt/speculative/): the last one;
#: - "The server is fired up and ready to roll!": srt/entrypoints/http_server.py, _wait_and_warmup,
#:   after the warm-up request.
LOG_MARKS = (("loaded", "Load weight end"), ("kv_ready", "Memory pool end"),
             ("graphs_captured", r"Capture [^.]*[Gg]raph end"), ("fired_up", "fired up and ready to roll"))
#: The journal lines the glue asks for (``grep -E``), bounded there in number and length.
LOG_PATTERN = "|".join(p for _, p in LOG_MARKS)
LOG_LINES_MAX = 400
LOG_LINE_CHARS = 400

STAMPS = ("last_answer", "stopping", "stopped", "gpus_free", "started", "loaded", "kv_ready", "graphs_captured",
          "fired_up", "ready")
#: (phase, the stamp that ends it, what the server does in it)
PHASES = (("stop", "stopped", "the old server stopping"),
          ("gpus_free", "gpus_free", "the old processes leaving the GPUs"),
          ("start", "started", "systemd starting the process"),
          ("load", "loaded", "reading the weights"),
          ("kv_cache", "kv_ready", "allocating the KV cache"),
          ("cuda_graphs", "graphs_captured", "capturing CUDA graphs, compiling kernels where the caches are cold"),
          ("warmup", "fired_up", "the warm-up request"),
          ("ready", "ready", "answering the health check"))
#: The log line that ends each of the server's own phases (its absence names a stalled one).
ENDS = {"load": "Load weight end", "kv_cache": "Memory pool end", "cuda_graphs": "Capture ... graph end",
        "warmup": "The server is fired up and ready to roll!"}
LABELS = {"stop": "stop", "gpus_free": "GPUs free", "start": "start", "load": "load", "kv_cache": "KV cache",
          "cuda_graphs": "CUDA graphs", "warmup": "warm-up", "ready": "ready"}
#: Phases of the new server's own start, from ``started`` to ``ready``.
START_PHASES = ("load", "kv_cache", "cuda_graphs", "warmup", "ready")
_MARKS = [(name, re.compile(p)) for name, p in LOG_MARKS]


def parse_stamps(text: str) -> dict[str, float]:
    """``name seconds`` lines (as the host writes them) -> {name: seconds}; unknown or bad lines are skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in STAMPS:
            try:
                value = float(parts[1])
            except ValueError:
                continue
            if value == value and abs(value) < 1e12:  # not NaN, not absurd
                out[parts[0]] = value
    return out


def log_stamps(lines: Iterable[str], since: float | None = None) -> dict[str, float]:
    """The server's journal lines (``journalctl -o short-unix``: the time first) -> the log stamps:
    for each mark, the last line's time up to the first "fired up" (later lines are not this start's);
    lines before ``since`` (the process start) are skipped."""
    out: dict[str, float] = {}
    for line in lines:
        head, _, rest = line.strip().partition(" ")
        try:
            at = float(head)
        except ValueError:
            continue
        if not (at == at and abs(at) < 1e12) or (since is not None and at < since):
            continue
        for name, pattern in _MARKS:
            if pattern.search(rest):
                if name == "fired_up":
                    out.setdefault(name, at)
                elif "fired_up" not in out:
                    out[name] = max(at, out.get(name, at))
                break
    return out


def measure(stamps: Mapping[str, float]) -> dict[str, Any]:
    """The gap and its phases (seconds, 3 decimals). Each phase runs from the latest known stamp
    before its end to its end; a phase whose end is unknown is None. ``start_s``: from the process
    start to ready (the new server's own start)."""
    s = dict(stamps)
    phases: dict[str, float | None] = {}
    for i, (name, end, _) in enumerate(PHASES):
        begin = "stopping" if name == "stop" else next((e for _, e, _ in reversed(PHASES[:i]) if e in s), None)
        phases[name] = round(s[end] - s[begin], 3) if begin in s and end in s else None
    gap = round(s["ready"] - s["last_answer"], 3) if "ready" in s and "last_answer" in s else None
    start = round(s["ready"] - s["started"], 3) if "ready" in s and "started" in s else None
    return {"serving_gap_s": gap, "start_s": start, "phases": phases, "last_answer": s.get("last_answer"),
            "ready": s.get("ready"), "old_server_answered": "last_answer" in s}


def stalled_in(stamps: Mapping[str, float], now: float) -> str:
    """For a start that never became ready: the phase it was in, in one sentence, from the stamps
    it left (``now`` in the host's clock)."""
    s = dict(stamps)
    if "started" not in s:
        return "no stamp of the process start was found (restart-stamps in the state directory)"
    reached = [(name, end) for name, end, _ in PHASES if end in s and end != "ready"]
    last_name, last_end = reached[-1]
    order = [name for name, _, _ in PHASES]
    nxt = next(((n, e, what) for n, e, what in PHASES[order.index(last_name) + 1:]), None)
    if nxt is None:
        return "the server said it was ready; the gate never saw it answer"
    name, _, what = nxt
    since = max(0.0, now - s[last_end])
    done = ("the process started" if last_name == "start"
            else f"{LABELS[last_name]} done {s[last_end] - s['started']:.0f} s after the start")
    missing = f", no '{ENDS[name]}' in its log" if name in ENDS else ""
    return f"stalled in {LABELS[name]} ({what}): {done}, nothing after it for {since:.0f} s{missing}"


def summary(downtime: Mapping[str, Any] | None) -> str:
    """One line: ``serving gap 3.21 s (stop 0.40, GPUs free 0.10, start 0.05, load 1.50, ...)``."""
    if not downtime:
        return "serving gap not measured"
    parts = ", ".join(f"{LABELS.get(k, k)} {v:.2f}" for k, v in (downtime.get("phases") or {}).items()
                      if v is not None)
    gap = downtime.get("serving_gap_s")
    head = f"serving gap {gap:.2f} s" if gap is not None else "serving gap unknown (no old server answered)"
    return f"{head} ({parts})" if parts else head
