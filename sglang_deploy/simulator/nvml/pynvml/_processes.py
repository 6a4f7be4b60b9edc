"""Processes on the GPUs (``nvmlDeviceGetComputeRunningProcesses``), read from the
profile's ``processes`` on every call, and the memory they use."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ._constants import NVML_VALUE_NOT_AVAILABLE_uint
from ._errors import NVMLError_FunctionNotFound  # type: ignore[attr-defined]  (generated there)
from ._errors import NVMLLibraryMismatchError
from ._health import fault_processes
from ._state import gpu as _gpu
from ._state import state
from ._structs import nvmlFriendlyObject


def processes(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Process entries of the profile, read now (see the package docstring)."""
    spec = data.get("processes")
    if spec is None:
        entries = []
    elif isinstance(spec, list):
        entries = list(spec)
    else:
        entries = _read_entries(Path(data["_dir"]), Path(spec))
    entries += fault_processes(data)
    if data.get("processes_must_be_alive"):
        entries = [e for e in entries if _alive(int(e["pid"]))]
    return entries


def _read_entries(base: Path, where: Path) -> list[dict[str, Any]]:
    """Entries of a JSON file, or of every ``*.json`` file in a directory."""
    if not where.is_absolute():
        where = base / where
    entries: list[dict[str, Any]] = []
    if where.is_dir():
        files = sorted(where.glob("*.json"))
    elif where.is_file():
        files = [where]
    else:
        files = []
    for file in files:
        try:
            loaded = json.loads(file.read_text())
        except (OSError, ValueError):
            continue  # being written or removed right now: as if not there yet
        entries.extend(loaded if isinstance(loaded, list) else [loaded])
    return entries


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _on_gpu(proc: dict[str, Any], index: int, gpu: dict[str, Any]) -> bool:
    where = proc.get("gpus")
    return where is None or index in where or gpu["uuid"] in where


def _used_bytes(data: dict[str, Any], index: int) -> int:
    gpu = data["gpus"][index]
    used = int(gpu.get("memory_used_bytes", 0))
    for proc in processes(data):
        if _on_gpu(proc, index, gpu) and proc.get("used_memory_bytes") is not None:
            used += int(proc["used_memory_bytes"])
    return min(used, int(gpu["memory_total_bytes"]))


def nvmlDeviceGetComputeRunningProcesses_v3(handle):
    gpu = _gpu("nvmlDeviceGetComputeRunningProcesses_v3", handle)
    out = []
    for proc in processes(state["profile"]):
        if _on_gpu(proc, handle._index, gpu):
            used = proc.get("used_memory_bytes")
            out.append(nvmlFriendlyObject({
                "pid": int(proc["pid"]),
                "usedGpuMemory": None if used is None else int(used),
                "gpuInstanceId": NVML_VALUE_NOT_AVAILABLE_uint.value,
                "computeInstanceId": NVML_VALUE_NOT_AVAILABLE_uint.value,
            }))
    return out


def nvmlDeviceGetComputeRunningProcesses_v2(handle):
    return nvmlDeviceGetComputeRunningProcesses_v3(handle)


def nvmlDeviceGetComputeRunningProcesses(handle):
    try:
        return nvmlDeviceGetComputeRunningProcesses_v3(handle)
    except NVMLError_FunctionNotFound:
        raise NVMLLibraryMismatchError("Unversioned function called and the pyNVML version does not match "
                                       "the NVML lib version.") from None

