"""Simulated failures (the ``faults`` object of the behaviour file), so that
tests can drive every branch of a post-deploy gate.  The keys, their types
and meaning are ``config.FAULTS``; this module keeps their run-time state
(request counters, the seeded draws) and the crash.

Counting: a *generation request* is a POST to ``/v1/chat/completions``,
``/v1/completions`` or ``/generate`` that got past the API key, readiness
(503) and JSON checks, in arrival order (warm-up requests count too)."""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from typing import Any, Dict, Mapping, Optional, Tuple


def process_age() -> float:
    """Seconds since this process started (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


class Faults:
    def __init__(self, cfg: Mapping[str, Any]):
        self.f: Dict[str, Any] = dict(cfg.get("faults") or {})
        self.lock = threading.Lock()
        self.generation_requests = 0  # counted at the 500 check
        self.planned = 0  # requests that got a token plan (slow first token)
        self.rng = random.Random(int(self.f.get("seed", cfg.get("seed", 0)) or 0))
        self.planted: Optional[Tuple[float, str]] = None  # the performance model's crash_when

    def plant_crash(self, after_s: float, message: str) -> None:
        """A crash the performance model plants for this config (perf.PerfModel.crash_after_s)."""
        self.planted = (float(after_s), message)

    # -- readiness --------------------------------------------------------------

    @property
    def never_ready(self) -> bool:
        return bool(self.f.get("never_ready"))

    def health_status(self, ready: bool) -> int:
        if not ready:
            return 503
        return 500 if self.f.get("health_500") else 200

    # -- the crash --------------------------------------------------------------

    def crash_at(self) -> float:
        """Monotonic time of the simulated crash (inf when none)."""
        after = self._after()
        if after is None:
            return float("inf")
        return time.monotonic() - process_age() + float(after)

    def _after(self) -> Optional[float]:
        times = [float(t) for t in (self.f.get("crash_after_s"), self.planted and self.planted[0])
                 if t is not None and t is not False]
        return min(times) if times else None

    def _planted_first(self) -> bool:
        fault = self.f.get("crash_after_s")
        return self.planted is not None and (fault is None or self.planted[0] < float(fault))

    def crash(self) -> None:
        """Print the fatal lines SGLang prints when a scheduler dies."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        if self.planted is not None and self._planted_first():
            first, *rest = self.planted[1].splitlines()
            print(f"[{stamp} TP0] {first}\n" + "\n".join(rest[:-1])
                  + f"\n[{stamp}] {rest[-1]}", file=sys.stderr, flush=True)
            return
        after = self.f.get("crash_after_s")
        print(
            f"[{stamp} TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "sglang/srt/managers/scheduler.py", line 2900, in run_scheduler_process\n'
            "    scheduler.event_loop_overlap()\n"
            "RuntimeError: CUDA error: an illegal memory access was encountered "
            f"(SIMULATED fault crash_after_s={after})\n"
            f"[{stamp}] Received sigquit from a child process. It usually means the child failed.",
            file=sys.stderr, flush=True,
        )

    # -- per request ----------------------------------------------------------------

    def http_500(self) -> Optional[str]:
        """Count one generation request; the error message when it must fail."""
        every = self.f.get("http_500_every")
        rate = self.f.get("http_500_rate")
        with self.lock:
            self.generation_requests += 1
            n = self.generation_requests
            draw = self.rng.random() if rate is not None else 1.0
        if every and n % int(every) == 0:
            return f"Internal server error (SIMULATED fault http_500_every={every}: request {n})"
        if rate is not None and draw < float(rate):
            return f"Internal server error (SIMULATED fault http_500_rate={rate}: request {n})"
        return None

    def extra_ttft(self) -> float:
        """Seconds added to this request's TTFT (slow_first_token_s)."""
        slow = self.f.get("slow_first_token_s")
        with self.lock:
            self.planned += 1
            first = self.planned == 1
        if slow is None or not (first or self.f.get("slow_first_token_every")):
            return 0.0
        return float(slow)

    def model_name(self, default: Any) -> Any:
        return self.f.get("wrong_model_name") or default

    def stall(self) -> Dict[str, Any]:
        """Plan fields: stall_after, stall_s, hang_after."""
        return {
            "stall_after": self.f.get("stall_after_tokens"),
            "stall_s": float(self.f.get("stall_s") or 0.0),
            "hang_after": self.f.get("stall_forever_after_tokens"),
        }
