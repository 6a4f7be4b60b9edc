"""The GPU's registration with the NVLink fabric: nvmlDeviceGetGpuFabricInfo and its versioned
successor nvmlDeviceGetGpuFabricInfoV, answered from the profile's per-GPU ``fabric``.

As in nvidia-ml-py (pynvml.py), the caller makes the structure (``c_nvmlGpuFabricInfo_t`` or
``c_nvmlGpuFabricInfoV_t``, whose constructor sets ``version`` to ``nvmlGpuFabricInfo_v2``) and
passes it with ``ctypes.byref``; the call fills it and returns NVML_SUCCESS. A GPU without
``fabric`` (null or absent) answers NVMLError_NotSupported, as NVML does before Hopper and on
GPUs outside an NVSwitch fabric (NVML API reference, nvmlDeviceGetGpuFabricInfo: "For Hopper or
newer fully supported devices")."""

from __future__ import annotations

import ctypes
from typing import Any

from ._constants import (
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED, NVML_SUCCESS,
)
from ._errors import NVMLError
from ._state import gpu as _gpu
from ._structs import c_nvmlGpuFabricInfo_t, c_nvmlGpuFabricInfo_v2_t, nvmlGpuFabricInfo_v2


def _target(arg: Any, kind: type) -> Any:
    """The structure a call fills: passed with ctypes.byref, as a pointer, or (leniently) as is."""
    obj = getattr(arg, "_obj", None)  # ctypes.byref(...)
    if obj is None and isinstance(arg, ctypes._Pointer):
        obj = arg.contents
    if obj is None:
        obj = arg
    if not isinstance(obj, kind):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return obj


def _fill(fn: str, device: Any, info: Any) -> int:
    entry = _gpu(fn, device).get("_fabric")
    if entry is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    info.state = entry["state"]
    info.status = entry["status"]
    info.cliqueId = entry["clique_id"]
    for i, byte in enumerate(entry["cluster_uuid"]):
        info.clusterUuid[i] = byte
    if hasattr(info, "healthMask"):
        info.healthMask = entry["health_mask"]
    return NVML_SUCCESS


def nvmlDeviceGetGpuFabricInfo(device, gpuFabricInfo):
    return _fill("nvmlDeviceGetGpuFabricInfo", device, _target(gpuFabricInfo, c_nvmlGpuFabricInfo_t))


def nvmlDeviceGetGpuFabricInfoV(device, gpuFabricInfo):
    info = _target(gpuFabricInfo, c_nvmlGpuFabricInfo_v2_t)
    if info.version != nvmlGpuFabricInfo_v2:
        raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    return _fill("nvmlDeviceGetGpuFabricInfoV", device, info)
