"""A GPU's health as NVML reports it: ECC error counts, retired pages, remapped rows, clocks
event (throttle) reasons and graphics processes, answered from the GPU's ``health`` entry in
the profile, with the profile's ``faults`` file (read again on every call) laid over it.

Return shapes are nvidia-ml-py's (pynvml.py): ``nvmlDeviceGetTotalEccErrors`` an int,
``nvmlDeviceGetRetiredPages`` a list of page addresses (ints), ``nvmlDeviceGetRetiredPagesPendingStatus``
an int (``NVML_FEATURE_ENABLED`` when a retirement waits for a reset),
``nvmlDeviceGetRemappedRows`` a 4-tuple ``(corrRows, uncRows, isPending, failureOccurred)`` of
ints, ``nvmlDeviceGetCurrentClocksEventReasons`` (and the older ``...ThrottleReasons``) an int
bit mask. What a board does not support raises ``NVMLError_NotSupported``, as NVML does (nvidia-smi
prints ``N/A`` for those).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import _constants
from ._constants import (
    NVML_AGGREGATE_ECC, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED, NVML_FEATURE_DISABLED,
    NVML_FEATURE_ENABLED, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
    NVML_VALUE_NOT_AVAILABLE_uint, NVML_VOLATILE_ECC,
)
from ._errors import NVMLError
from ._state import gpu as _gpu
from ._state import state
from ._structs import nvmlFriendlyObject

_FAULT_KEYS = ("ecc", "retired_pages", "remapped_rows", "clocks_event_reasons")


def faults(data: dict[str, Any]) -> dict[str, Any]:
    """The profile's ``faults`` file, read now: ``{"gpus": {index or uuid: {...}}, "processes": [...]}``;
    no key, no file or a file being written: no faults."""
    where = data.get("faults")
    if not where:
        return {}
    path = Path(where)
    if not path.is_absolute():
        path = Path(data["_dir"]) / path
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def fault_processes(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Processes the faults file adds (same entries as the profile's ``processes``)."""
    extra = faults(data).get("processes")
    return [p for p in extra if isinstance(p, dict)] if isinstance(extra, list) else []


def health(fn: str, handle: Any) -> dict[str, Any]:
    """The health of the GPU ``handle`` stands for: its profile entry with the faults laid over."""
    gpu = _gpu(fn, handle)
    merged = dict(gpu.get("health") or {})
    by_gpu = faults(state["profile"]).get("gpus") or {}
    for key in (str(handle._index), gpu["uuid"]):
        over = by_gpu.get(key)
        if isinstance(over, dict):
            merged.update({k: v for k, v in over.items() if k in _FAULT_KEYS})
    return merged


def _supported(value: Any) -> Any:
    if value is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return value


def nvmlDeviceGetTotalEccErrors(handle, errorType, counterType):
    ecc = _supported(health("nvmlDeviceGetTotalEccErrors", handle).get("ecc"))
    counter = {NVML_VOLATILE_ECC: "volatile", NVML_AGGREGATE_ECC: "aggregate"}.get(counterType)
    kind = {NVML_MEMORY_ERROR_TYPE_CORRECTED: "corrected", NVML_MEMORY_ERROR_TYPE_UNCORRECTED: "uncorrected"}.get(
        errorType)
    if counter is None or kind is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return int(ecc[counter][kind])


def nvmlDeviceGetRetiredPages(device, sourceFilter):
    pages = _supported(health("nvmlDeviceGetRetiredPages", device).get("retired_pages"))
    key = {NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: "single_bit",
           NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: "double_bit"}.get(sourceFilter)
    if key is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return [int(str(address), 0) for address in pages[key]]


def nvmlDeviceGetRetiredPagesPendingStatus(device):
    pages = _supported(health("nvmlDeviceGetRetiredPagesPendingStatus", device).get("retired_pages"))
    return NVML_FEATURE_ENABLED if pages.get("pending") else NVML_FEATURE_DISABLED


def nvmlDeviceGetRemappedRows(device):
    rows = _supported(health("nvmlDeviceGetRemappedRows", device).get("remapped_rows"))
    return (int(rows["correctable"]), int(rows["uncorrectable"]), int(bool(rows["pending"])),
            int(bool(rows["failure"])))


def _reasons(fn: str, handle: Any) -> int:
    names = _supported(health(fn, handle).get("clocks_event_reasons"))
    mask = 0
    for name in names:
        value = getattr(_constants, "nvmlClocksEventReason" + str(name), None)
        if not isinstance(value, int):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        mask |= value
    return mask


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return _reasons("nvmlDeviceGetCurrentClocksEventReasons", handle)


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    return _reasons("nvmlDeviceGetCurrentClocksThrottleReasons", handle)


def nvmlDeviceGetGraphicsRunningProcesses_v3(handle):
    """Graphics processes: the profile's ``graphics_processes`` (same entries as ``processes``)."""
    gpu = _gpu("nvmlDeviceGetGraphicsRunningProcesses_v3", handle)
    out = []
    for proc in state["profile"].get("graphics_processes") or ():
        where = proc.get("gpus")
        if where is None or handle._index in where or gpu["uuid"] in where:
            used = proc.get("used_memory_bytes")
            out.append(nvmlFriendlyObject({
                "pid": int(proc["pid"]), "usedGpuMemory": None if used is None else int(used),
                "gpuInstanceId": NVML_VALUE_NOT_AVAILABLE_uint.value,
                "computeInstanceId": NVML_VALUE_NOT_AVAILABLE_uint.value}))
    return out


def nvmlDeviceGetGraphicsRunningProcesses_v2(handle):
    return nvmlDeviceGetGraphicsRunningProcesses_v3(handle)


def nvmlDeviceGetGraphicsRunningProcesses(handle):
    return nvmlDeviceGetGraphicsRunningProcesses_v3(handle)
