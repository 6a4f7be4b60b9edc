"""NVML on the GPU host (``check --nvml``, ``sglang-deploy sample-gpus``): clocks, throttle
reasons, memory and the processes on each GPU, sampled in a thread while the gate measures.
pynvml is optional and imported only here; the samples go to the pure
``causes.summarize_nvml``."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Sequence

#: Seconds between two samples, and the longest ``sample-gpus`` runs when no file stops it.
EVERY_S = 0.5
MAX_SECONDS = 3600.0


class NvmlSampler:
    """Samples clocks, throttle reasons, memory and processes every ``every_s``
    in a thread while the measurement runs."""

    def __init__(self, indices: Sequence[int] | None = None, every_s: float = EVERY_S):
        self.indices = list(indices) if indices is not None else None
        self.every_s = every_s
        self.samples: list[dict[str, Any]] = []
        self.error: str | None = None
        self.names: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None

    def start(self) -> bool:
        try:
            import pynvml  # noqa: PLC0415  (optional: only with --nvml)

            pynvml.nvmlInit()
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, ...
            self.error = f"NVML unavailable ({type(exc).__name__}: {exc})"
            return False
        self._nvml = pynvml
        try:
            count = pynvml.nvmlDeviceGetCount()
        except Exception as exc:
            self.error = f"NVML: {exc}"
            return False
        if self.indices is None:
            self.indices = list(range(count))
        self.indices = [i for i in self.indices if 0 <= i < count]
        self.names = [str(self._call("nvmlDeviceGetName", self._handle(i)) or "?") for i in self.indices]
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()
        return True

    def _handle(self, i: int) -> Any:
        return self._call("nvmlDeviceGetHandleByIndex", i)

    def _call(self, name: str, *args: Any) -> Any:
        fn = getattr(self._nvml, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception:
            return None

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def sample(self) -> None:
        nv = self._nvml
        gpus = []
        for i in self.indices or []:
            h = self._handle(i)
            if h is None:
                continue
            sm = getattr(nv, "NVML_CLOCK_SM", 1)
            mask = self._call("nvmlDeviceGetCurrentClocksEventReasons", h)
            if mask is None:
                mask = self._call("nvmlDeviceGetCurrentClocksThrottleReasons", h)
            mem = self._call("nvmlDeviceGetMemoryInfo", h)
            procs = []
            for p in self._call("nvmlDeviceGetComputeRunningProcesses", h) or []:
                pid = getattr(p, "pid", None)
                cmd = _cmdline(pid)
                used = getattr(p, "usedGpuMemory", None)
                procs.append({"pid": pid, "name": cmd[:80] if cmd else None,
                              "memory_mib": (used or 0) / 2**20 if isinstance(used, int) else 0.0,
                              "server": "sglang" in cmd})
            gpus.append({
                "index": i,
                "name": self._call("nvmlDeviceGetName", h),
                "sm_clock_mhz": self._call("nvmlDeviceGetClockInfo", h, sm),
                "max_sm_clock_mhz": self._call("nvmlDeviceGetMaxClockInfo", h, sm),
                "throttle_mask": mask if isinstance(mask, int) else None,
                "memory_used_mib": mem.used / 2**20 if mem is not None else None,
                "memory_total_mib": mem.total / 2**20 if mem is not None else None,
                "temperature_c": self._call("nvmlDeviceGetTemperature", h, getattr(nv, "NVML_TEMPERATURE_GPU", 0)),
                "processes": procs,
            })
        self.samples.append({"t": time.perf_counter(), "gpus": gpus})

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._nvml is not None:
            self.sample()
            self._call("nvmlShutdown")

    @property
    def hardware(self) -> str | None:
        if not self.names:
            return None
        names = sorted(set(self.names))
        return " + ".join(f"{self.names.count(n)}x {n}" for n in names)


def _cmdline(pid: Any) -> str:
    if not isinstance(pid, int):
        return ""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def sample_gpus(out: str, indices: Sequence[int] | None = None, every_s: float = EVERY_S,
                until_file: str | None = None, max_seconds: float = MAX_SECONDS) -> int:
    """``sglang-deploy sample-gpus``: NVML samples until ``until_file`` exists (or
    ``max_seconds``), written as JSON ``{"samples": [...], "error": ...}`` to ``out``."""
    sampler = NvmlSampler(indices, every_s)
    started = sampler.start()
    t0 = time.monotonic()
    try:
        while started and time.monotonic() - t0 < max_seconds:
            if until_file and Path(until_file).exists():
                break
            time.sleep(0.1)
    finally:
        if started:
            sampler.stop()
    tmp = Path(out + ".tmp")
    tmp.write_text(json.dumps({"samples": sampler.samples, "error": sampler.error}), encoding="utf-8")
    tmp.replace(out)
    return 0 if started else 3
