"""What NVML calls return: ctypes structures with nvidia-ml-py's field layout,
its plain-attribute objects, and an opaque device handle."""

from __future__ import annotations

from ctypes import Structure, c_char, c_uint, c_uint8, c_uint32, c_ulonglong

from ._constants import (
    NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE, NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE, NVML_GPU_FABRIC_UUID_LEN,
)


class nvmlPciInfo_t(Structure):
    _fields_ = [
        ("busIdLegacy", c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE),
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("pciDeviceId", c_uint),
        ("pciSubSystemId", c_uint),
        ("busId", c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE),
    ]


class c_nvmlMemory_t(Structure):
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class c_nvmlMemory_v2_t(Structure):
    _fields_ = [
        ("version", c_uint),
        ("total", c_ulonglong),
        ("reserved", c_ulonglong),
        ("free", c_ulonglong),
        ("used", c_ulonglong),
    ]


# nvmlGpuFabricInfo_t and nvmlGpuFabricInfo_v2_t (nvml.h), laid out as nvidia-ml-py's
# c_nvmlGpuFabricInfo_t and c_nvmlGpuFabricInfo_v2_t (alias c_nvmlGpuFabricInfoV_t): ``status`` is an
# nvmlReturn_t, ``state`` an nvmlGpuFabricState_t (both c_uint there).
class c_nvmlGpuFabricInfo_t(Structure):
    _fields_ = [
        ("clusterUuid", c_uint8 * NVML_GPU_FABRIC_UUID_LEN),
        ("status", c_uint),
        ("cliqueId", c_uint32),
        ("state", c_uint),
    ]


#: nvidia-ml-py's value: sizeof(nvmlGpuFabricInfo_v2_t) | 2 << 24
nvmlGpuFabricInfo_v2 = 0x02000024


class c_nvmlGpuFabricInfo_v2_t(Structure):
    _fields_ = [
        ("version", c_uint),
        ("clusterUuid", c_uint8 * NVML_GPU_FABRIC_UUID_LEN),
        ("status", c_uint),
        ("cliqueId", c_uint32),
        ("state", c_uint),
        ("healthMask", c_uint32),
    ]

    def __init__(self):
        super().__init__(version=nvmlGpuFabricInfo_v2)


c_nvmlGpuFabricInfoV_t = c_nvmlGpuFabricInfo_v2_t


class nvmlFriendlyObject(object):
    """What nvidia-ml-py returns for processes: plain attributes."""

    def __init__(self, dictionary):
        for x in dictionary:
            setattr(self, x, dictionary[x])

    def __str__(self):
        return self.__dict__.__str__()


class c_nvmlDevice_t(object):
    """Opaque device handle (the real one is a ctypes pointer)."""

    __slots__ = ("_index",)

    def __init__(self, index: int) -> None:
        self._index = index

    def __repr__(self) -> str:
        return f"<stand-in nvmlDevice {self._index}>"
