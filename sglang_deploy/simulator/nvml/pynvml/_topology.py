"""How GPUs connect: NVLink state and remote ends, the PCIe topology's common
ancestor, and P2P status."""

from __future__ import annotations

import ctypes
from typing import Any

from . import _constants
from ._constants import (
    NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED, NVML_FEATURE_DISABLED, NVML_FEATURE_ENABLED,
    NVML_NVLINK_DEVICE_TYPE_UNKNOWN, NVML_NVLINK_MAX_LINKS, NVML_P2P_STATUS_UNKNOWN, NVML_TOPOLOGY_INTERNAL,
)
from ._device import pci_info
from ._errors import NVMLError
from ._profile import const
from ._state import gpu as _gpu
from ._state import state


def _link(fn: str, device: Any, link: Any) -> tuple[bool, str, int]:
    """(active, remote bus id, remote device type) of NVLink ``link`` of ``device``."""
    gpu = _gpu(fn, device)
    links = gpu["_links"]
    if links is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if isinstance(link, bool) or not isinstance(link, int) or not 0 <= link < min(len(links), NVML_NVLINK_MAX_LINKS):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return links[link]


def nvmlDeviceGetNvLinkState(device, link):
    active, _bus, _kind = _link("nvmlDeviceGetNvLinkState", device, link)
    return NVML_FEATURE_ENABLED if active else NVML_FEATURE_DISABLED


def nvmlDeviceGetNvLinkRemotePciInfo(device, link):
    active, bus, _kind = _link("nvmlDeviceGetNvLinkRemotePciInfo", device, link)
    if not active:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return pci_info(bus)


def nvmlDeviceGetNvLinkRemoteDeviceType(handle, link):
    active, _bus, kind = _link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
    return kind if active else NVML_NVLINK_DEVICE_TYPE_UNKNOWN


def nvmlDeviceGetTopologyCommonAncestor(device1, device2):
    _gpu("nvmlDeviceGetTopologyCommonAncestor", device1)
    data = state["profile"]
    _gpu("nvmlDeviceGetTopologyCommonAncestor", device2)
    i, j = device1._index, device2._index
    if i == j:
        return NVML_TOPOLOGY_INTERNAL
    rows = data.get("topology")
    if rows is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return const("NVML_TOPOLOGY_", rows[i][j], "topology level")


def nvmlDeviceGetP2PStatus(device1, device2, p2pIndex):
    if isinstance(p2pIndex, bool) or not isinstance(p2pIndex, int):
        # what ctypes says when handed nvidia-ml-py's tuple NVML_P2P_CAPS_INDEX_READ
        raise ctypes.ArgumentError("argument 3: TypeError: Don't know how to convert parameter 3")
    _gpu("nvmlDeviceGetP2PStatus", device1)
    _gpu("nvmlDeviceGetP2PStatus", device2)
    data = state["profile"]
    known = {const("NVML_P2P_CAPS_INDEX_", k, "") for k in _constants.names("NVML_P2P_CAPS_INDEX_")}
    for key, rows in (data.get("p2p") or {}).items():
        if const("NVML_P2P_CAPS_INDEX_", key, "P2P caps index") == p2pIndex:
            status = rows[device1._index][device2._index]
            if status is None:
                raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
            return const("NVML_P2P_STATUS_", status, "P2P status")
    if p2pIndex not in known:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return NVML_P2P_STATUS_UNKNOWN
