"""Device calls: count and handles, name, UUID, brand, compute capability,
memory and PCI info."""

from __future__ import annotations

from ._constants import NVML_DEVICE_PCI_BUS_ID_FMT, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, NVML_ERROR_INVALID_ARGUMENT
from ._errors import NVMLError
from ._processes import _used_bytes
from ._profile import bus_fields
from ._state import gpu as _gpu
from ._state import profile, state
from ._structs import c_nvmlDevice_t, c_nvmlMemory_t, c_nvmlMemory_v2_t, nvmlPciInfo_t


def pci_info(bus_id: str, device_id: int = 0, subsystem_id: int = 0) -> nvmlPciInfo_t:
    """The PCI info NVML gives for a device at ``bus_id``."""
    domain, bus, device = bus_fields(bus_id)
    info = nvmlPciInfo_t()
    info.busIdLegacy = (NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT % (domain, bus, device)).encode()
    info.busId = (NVML_DEVICE_PCI_BUS_ID_FMT % (domain, bus, device)).encode()
    info.domain, info.bus, info.device = domain, bus, device
    info.pciDeviceId = device_id
    info.pciSubSystemId = subsystem_id
    return info


def nvmlDeviceGetCount():
    return len(profile("nvmlDeviceGetCount")["gpus"])


def nvmlDeviceGetHandleByIndex(index):
    data = profile("nvmlDeviceGetHandleByIndex")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(data["gpus"]):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return c_nvmlDevice_t(index)


def nvmlDeviceGetIndex(handle):
    _gpu("nvmlDeviceGetIndex", handle)
    return handle._index


def nvmlDeviceGetName(handle):
    return str(_gpu("nvmlDeviceGetName", handle)["name"])


def nvmlDeviceGetUUID(handle):
    return str(_gpu("nvmlDeviceGetUUID", handle)["uuid"])


def nvmlDeviceGetBrand(handle):
    return _gpu("nvmlDeviceGetBrand", handle)["_brand"]


def nvmlDeviceGetCudaComputeCapability(handle):
    major, minor = _gpu("nvmlDeviceGetCudaComputeCapability", handle)["cc"]
    return (int(major), int(minor))


def nvmlDeviceGetMemoryInfo(handle, version=None):
    gpu = _gpu("nvmlDeviceGetMemoryInfo", handle)
    total = int(gpu["memory_total_bytes"])
    used = _used_bytes(state["profile"], handle._index)
    if not version:
        return c_nvmlMemory_t(total=total, free=total - used, used=used)
    return c_nvmlMemory_v2_t(version=version, total=total, reserved=0, free=total - used, used=used)


def nvmlDeviceGetPciInfo_v3(handle):
    gpu = _gpu("nvmlDeviceGetPciInfo_v3", handle)
    return pci_info(gpu["pci_bus_id"], int(str(gpu.get("pci_device_id", "0")), 0),
                    int(str(gpu.get("pci_subsystem_id", "0")), 0))


def nvmlDeviceGetPciInfo(handle):
    profile("nvmlDeviceGetPciInfo")
    return nvmlDeviceGetPciInfo_v3(handle)
