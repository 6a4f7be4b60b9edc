"""What NVML calls return: ctypes structures with nvidia-ml-py's field layout,
its plain-attribute objects, and an opaque device handle."""

from __future__ import annotations

from ctypes import Structure, c_char, c_uint, c_ulonglong

from ._constants import NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE, NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE


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
