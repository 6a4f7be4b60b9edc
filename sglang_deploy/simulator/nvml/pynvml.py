"""Stand-in for NVIDIA's NVML Python bindings (nvidia-ml-py, imported as `pynvml`).

A GPU stands in at the NVML boundary: code that imports `pynvml` (the deploy's
GPU probe, roles/probe/gpu_probe.py) runs unchanged, and this module answers
from a *device profile* (JSON) instead of the driver. Put this directory first
on PYTHONPATH to use it. Standard library only.

Only what the probe (and the later "no process holds the GPUs" check) uses is
implemented, with nvidia-ml-py's names, signatures, constant values, exception
classes and return types: strings come back as `str`, memory info as a ctypes
`c_nvmlMemory_t` (`.total/.free/.used` in bytes), PCI info as a ctypes
`nvmlPciInfo_t` (`.busId` is `bytes`), compute capability as `(major, minor)`,
processes as objects with `.pid` and `.usedGpuMemory`. Device handles are
opaque objects (the real ones are ctypes pointers). nvidia-ml-py's quirk
``NVML_P2P_CAPS_INDEX_READ = 0,`` (a one-element tuple, which ctypes refuses as
an argument) is reproduced on purpose, so callers must cope with it here too.

Which profile
-------------
The path is in ``$SGLANG_TESTBED_NVML`` (default ``/etc/sglang-testbed/nvml.json``),
read at `nvmlInit`. No file there means no driver: `nvmlInit` raises
`NVMLError_LibraryNotFound`, like the real bindings on a host without
``libnvidia-ml.so.1``.

Device profile format
---------------------
::

    {
      "about": "free text: what board this describes, where the values come from",
      "driver_loaded": true,                 # false: nvmlInit raises NVMLError_DriverNotLoaded
      "driver_version": "550.127.05",        # nvmlSystemGetDriverVersion
      "cuda_driver_version": 12040,          # nvmlSystemGetCudaDriverVersion[_v2]: 1000*major + 10*minor
      "gpus": [                              # in NVML index order; [] = driver but no GPU
        {
          "name": "NVIDIA RTX A6000",        # nvmlDeviceGetName
          "uuid": "GPU-...",                 # nvmlDeviceGetUUID
          "cc": [8, 6],                      # nvmlDeviceGetCudaComputeCapability
          "memory_total_bytes": 51527024640, # nvmlDeviceGetMemoryInfo(...).total
          "memory_used_bytes": 0,            # optional: used by the driver itself; process memory is added
          "pci_bus_id": "00000000:01:00.0",  # nvmlDeviceGetPciInfo(...).busId
          "pci_device_id": "0x223010DE",     # optional: .pciDeviceId (device << 16 | vendor)
          "brand": "NVML_BRAND_NVIDIA_RTX",  # nvmlDeviceGetBrand: an NVML_BRAND_* name
          "cpu_affinity": "0-63",            # optional: nvidia-smi topo -m columns
          "numa_node": 0,                    # optional
          "nvlinks": [                       # null/absent: no NVLink (every NVLink call: NotSupported)
            {"remote_bus_id": "00000000:21:00.0", "remote_type": "GPU", "count": 4, "active": true}
          ]
        }
      ],
      "topology": [[null, "SYSTEM"], ["SYSTEM", null]],   # nvmlDeviceGetTopologyCommonAncestor:
                                             # NVML_TOPOLOGY_* names without the prefix
                                             # (INTERNAL, SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM)
      "p2p": {"READ": [[null, "OK"], ["OK", null]]},      # nvmlDeviceGetP2PStatus: per
                                             # NVML_P2P_CAPS_INDEX_* name (READ, WRITE, NVLINK, ...),
                                             # NVML_P2P_STATUS_* names without the prefix; an index
                                             # not given answers UNKNOWN; null (diagonal): InvalidArgument
      "processes": [],                       # see below; absent = no process on any GPU
      "processes_must_be_alive": false,      # true: hide entries whose pid is not a live process
      "errors": {"nvmlDeviceGetBrand": "NOT_SUPPORTED"},  # optional: this call always raises the
                                             # NVMLError of that NVML_ERROR_* name (e.g. FUNCTION_NOT_FOUND
                                             # = a driver too old for the call)
      "absent_functions": ["nvmlDeviceGetNvLinkRemoteDeviceType"]  # optional: removed from this module
                                             # at import, like an older nvidia-ml-py without the wrapper
    }

An ``nvlinks`` entry stands for ``count`` links (default 1), numbered in list
order from link 0; ``remote_type`` is ``GPU``, ``SWITCH`` or ``IBMNPU``
(NVML_NVLINK_DEVICE_TYPE_*); ``active`` defaults to true. A link number past
the listed links answers NVMLError_InvalidArgument, as NVML does for a link
the device does not have.

Processes (``nvmlDeviceGetComputeRunningProcesses``)
----------------------------------------------------
``processes`` is either a list of entries inline, or a path (relative to the
profile's directory, or absolute) to

* a JSON file holding such a list, or
* a directory in which every ``*.json`` file holds one entry (or a list): a
  process stand-in registers itself by writing ``<pid>.json`` and leaves by
  deleting it.

It is read again on every call, so a test can change it while code runs; a
path that does not exist means no processes. An entry::

    {"pid": 4242, "gpus": [0, 1], "used_memory_bytes": 1073741824}

``gpus`` lists GPU indices or UUIDs (absent: every GPU); ``used_memory_bytes``
absent gives ``usedGpuMemory = None`` (as NVML does when it cannot tell).
"""

from __future__ import annotations

import ctypes
import json
import os
import string
import sys
import threading
from ctypes import Structure, c_char, c_uint, c_ulonglong
from pathlib import Path
from typing import Any

PROFILE_ENV = "SGLANG_TESTBED_NVML"
DEFAULT_PROFILE = "/etc/sglang-testbed/nvml.json"

# ---------------------------------------------------------------------------
# Constants (values as in nvidia-ml-py)

NVML_SUCCESS = 0
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1

NVML_BRAND_UNKNOWN = 0
NVML_BRAND_QUADRO = 1
NVML_BRAND_TESLA = 2
NVML_BRAND_NVS = 3
NVML_BRAND_GRID = 4
NVML_BRAND_GEFORCE = 5
NVML_BRAND_TITAN = 6
NVML_BRAND_NVIDIA_VAPPS = 7
NVML_BRAND_NVIDIA_VPC = 8
NVML_BRAND_NVIDIA_VCS = 9
NVML_BRAND_NVIDIA_VWS = 10
NVML_BRAND_NVIDIA_CLOUD_GAMING = 11
NVML_BRAND_NVIDIA_VGAMING = NVML_BRAND_NVIDIA_CLOUD_GAMING
NVML_BRAND_QUADRO_RTX = 12
NVML_BRAND_NVIDIA_RTX = 13
NVML_BRAND_NVIDIA = 14
NVML_BRAND_GEFORCE_RTX = 15
NVML_BRAND_TITAN_RTX = 16
NVML_BRAND_COUNT = 20

NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF

NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_CPU = NVML_TOPOLOGY_NODE
NVML_TOPOLOGY_SYSTEM = 50

# nvidia-ml-py really defines this one as a tuple (trailing comma); kept as is.
NVML_P2P_CAPS_INDEX_READ = 0,
NVML_P2P_CAPS_INDEX_WRITE = 1
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_CAPS_INDEX_ATOMICS = 3
NVML_P2P_CAPS_INDEX_PROP = 4
NVML_P2P_CAPS_INDEX_PCI = 4
NVML_P2P_CAPS_INDEX_UNKNOWN = 5

NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED = 1
NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED
NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2
NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3
NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4
NVML_P2P_STATUS_NOT_SUPPORTED = 5
NVML_P2P_STATUS_UNKNOWN = 6

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_UNKNOWN = 999

NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32
NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16
NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT = "%04X:%02X:%02X.0"
NVML_DEVICE_PCI_BUS_ID_FMT = "%08X:%02X:%02X.0"
NVML_VALUE_NOT_AVAILABLE_uint = c_uint(-1)


# ---------------------------------------------------------------------------
# Exceptions: the same class hierarchy nvidia-ml-py generates


class NVMLError(Exception):
    _valClassMapping: dict[int, type] = dict()
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
        NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_IN_USE: "In Use",
        NVML_ERROR_MEMORY: "Insufficient Memory",
        NVML_ERROR_NO_DATA: "No Data",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        return NVMLError._errcode_to_string.get(self.value, "NVML Error with code %d" % self.value)

    def __eq__(self, other):
        return self.value == other.value


class NVMLLibraryMismatchError(Exception):
    pass


def nvmlExceptionClass(nvmlErrorCode):
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError("nvmlErrorCode %s is not valid" % nvmlErrorCode)
    return NVMLError._valClassMapping[nvmlErrorCode]


def _extractNVMLErrorsAsClasses():
    this_module = sys.modules[__name__]
    for err_name in [x for x in dir(this_module) if x.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(err_name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        err_val = getattr(this_module, err_name)

        def gen_new(val):
            def new(typ, *args):
                return NVMLError.__new__(typ, val)
            return new

        new_error_class = type(class_name, (NVMLError,), {"__new__": gen_new(err_val)})
        new_error_class.__module__ = __name__
        setattr(this_module, class_name, new_error_class)
        NVMLError._valClassMapping[err_val] = new_error_class


_extractNVMLErrorsAsClasses()


# ---------------------------------------------------------------------------
# Structures (field layout as in nvidia-ml-py)


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


# ---------------------------------------------------------------------------
# Device profile


class ProfileError(ValueError):
    pass


def profile_path() -> Path:
    return Path(os.environ.get(PROFILE_ENV) or DEFAULT_PROFILE)


def _bus_fields(bus_id: str) -> tuple[int, int, int]:
    try:
        domain, bus, rest = bus_id.split(":")
        device = rest.split(".")[0]
        return int(domain, 16), int(bus, 16), int(device, 16)
    except ValueError:
        raise ProfileError(f"bad PCI bus id {bus_id!r} (want 00000000:01:00.0)") from None


def _const(prefix: str, name: Any, what: str) -> int:
    key = str(name)
    if not key.startswith(prefix):
        key = prefix + key
    value = globals().get(key)
    if isinstance(value, tuple) and len(value) == 1:  # NVML_P2P_CAPS_INDEX_READ
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProfileError(f"unknown {what} {name!r} (an {prefix}* name)")
    return value


def load_profile(path: Path | None = None) -> dict[str, Any] | None:
    """The profile as checked data, or None when there is no file (no driver)."""
    path = path or profile_path()
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ProfileError(f"{path}: not a readable JSON device profile: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        raise ProfileError(f"{path}: a device profile is an object with a 'gpus' list")
    data["_dir"] = str(path.parent)
    n = len(data["gpus"])
    for i, gpu in enumerate(data["gpus"]):
        for key in ("name", "uuid", "cc", "memory_total_bytes", "pci_bus_id", "brand"):
            if key not in gpu:
                raise ProfileError(f"{path}: gpus[{i}] lacks {key!r}")
        _bus_fields(gpu["pci_bus_id"])
        gpu["_brand"] = _const("NVML_BRAND_", gpu["brand"], "brand")
        links = []
        for entry in gpu.get("nvlinks") or ():
            kind = _const("NVML_NVLINK_DEVICE_TYPE_", entry.get("remote_type", "GPU"), "NVLink remote type")
            _bus_fields(entry["remote_bus_id"])
            for _ in range(int(entry.get("count", 1))):
                links.append((bool(entry.get("active", True)), entry["remote_bus_id"], kind))
        gpu["_links"] = links if gpu.get("nvlinks") is not None else None
    for key in ("topology",):
        rows = data.get(key)
        if rows is not None and (len(rows) != n or any(len(r) != n for r in rows)):
            raise ProfileError(f"{path}: {key} must be {n}x{n}")
    for index_name, rows in (data.get("p2p") or {}).items():
        _const("NVML_P2P_CAPS_INDEX_", index_name, "P2P caps index")
        if len(rows) != n or any(len(r) != n for r in rows):
            raise ProfileError(f"{path}: p2p.{index_name} must be {n}x{n}")
    for name, err in (data.get("errors") or {}).items():
        _const("NVML_ERROR_", err, f"error for {name}")
    return data


def pair_nvlinks(data: dict[str, Any], i: int, j: int) -> int:
    """NVLinks between GPUs i and j as `nvidia-smi topo -m` counts them.

    Direct links to the peer, plus, when both GPUs reach NVSwitches, the
    smaller of their switch link counts (NV18 on HGX H100).
    """
    gpus = data["gpus"]
    if i == j:
        return 0

    def direct(a: int, b: int) -> int:
        want = _bus_fields(gpus[b]["pci_bus_id"])
        return sum(1 for active, bus, kind in gpus[a]["_links"] or ()
                   if active and kind == NVML_NVLINK_DEVICE_TYPE_GPU and _bus_fields(bus) == want)

    def switched(a: int) -> int:
        return sum(1 for active, _bus, kind in gpus[a]["_links"] or ()
                   if active and kind == NVML_NVLINK_DEVICE_TYPE_SWITCH)

    count = max(direct(i, j), direct(j, i))
    if switched(i) and switched(j):
        count += min(switched(i), switched(j))
    return count


def processes(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Process entries of the profile, read now (see the module docstring)."""
    spec = data.get("processes")
    if spec is None:
        return []
    if isinstance(spec, list):
        entries = list(spec)
    else:
        where = Path(spec)
        if not where.is_absolute():
            where = Path(data["_dir"]) / where
        entries = []
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
    if data.get("processes_must_be_alive"):
        entries = [e for e in entries if _alive(int(e["pid"]))]
    return entries


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------------------
# NVML API

_lock = threading.Lock()
_state: dict[str, Any] = {"refcount": 0, "profile": None}


def _profile(fn: str) -> dict[str, Any]:
    data = _state["profile"]
    if data is None or _state["refcount"] <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    err = (data.get("errors") or {}).get(fn)
    if err is not None:
        raise NVMLError(_const("NVML_ERROR_", err, "error"))
    return data


def _gpu(fn: str, handle: Any) -> dict[str, Any]:
    data = _profile(fn)
    if not isinstance(handle, c_nvmlDevice_t) or not 0 <= handle._index < len(data["gpus"]):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return data["gpus"][handle._index]


def _pci_info(bus_id: str, device_id: int = 0, subsystem_id: int = 0) -> nvmlPciInfo_t:
    domain, bus, device = _bus_fields(bus_id)
    info = nvmlPciInfo_t()
    info.busIdLegacy = (NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT % (domain, bus, device)).encode()
    info.busId = (NVML_DEVICE_PCI_BUS_ID_FMT % (domain, bus, device)).encode()
    info.domain, info.bus, info.device = domain, bus, device
    info.pciDeviceId = device_id
    info.pciSubSystemId = subsystem_id
    return info


def nvmlInitWithFlags(flags):
    with _lock:
        if _state["refcount"] <= 0:
            data = load_profile()
            if data is None:
                raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
            if data.get("driver_loaded", True) is False:
                raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
            _state["profile"] = data
        err = (_state["profile"].get("errors") or {}).get("nvmlInit")
        if err is not None:
            raise NVMLError(_const("NVML_ERROR_", err, "error"))
        _state["refcount"] += 1
    return None


def nvmlInit():
    nvmlInitWithFlags(0)
    return None


def nvmlShutdown():
    with _lock:
        if _state["refcount"] <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        _state["refcount"] -= 1
    return None


def nvmlErrorString(result):
    return NVMLError._errcode_to_string.get(result, "Unknown Error")


def nvmlSystemGetDriverVersion():
    return str(_profile("nvmlSystemGetDriverVersion")["driver_version"])


def nvmlSystemGetCudaDriverVersion():
    return int(_profile("nvmlSystemGetCudaDriverVersion")["cuda_driver_version"])


def nvmlSystemGetCudaDriverVersion_v2():
    return int(_profile("nvmlSystemGetCudaDriverVersion_v2")["cuda_driver_version"])


def nvmlDeviceGetCount():
    return len(_profile("nvmlDeviceGetCount")["gpus"])


def nvmlDeviceGetHandleByIndex(index):
    data = _profile("nvmlDeviceGetHandleByIndex")
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


def _used_bytes(data: dict[str, Any], index: int) -> int:
    gpu = data["gpus"][index]
    used = int(gpu.get("memory_used_bytes", 0))
    for proc in processes(data):
        if _on_gpu(proc, index, gpu) and proc.get("used_memory_bytes") is not None:
            used += int(proc["used_memory_bytes"])
    return min(used, int(gpu["memory_total_bytes"]))


def nvmlDeviceGetMemoryInfo(handle, version=None):
    gpu = _gpu("nvmlDeviceGetMemoryInfo", handle)
    total = int(gpu["memory_total_bytes"])
    used = _used_bytes(_state["profile"], handle._index)
    if not version:
        return c_nvmlMemory_t(total=total, free=total - used, used=used)
    return c_nvmlMemory_v2_t(version=version, total=total, reserved=0, free=total - used, used=used)


def nvmlDeviceGetPciInfo_v3(handle):
    gpu = _gpu("nvmlDeviceGetPciInfo_v3", handle)
    return _pci_info(gpu["pci_bus_id"], int(str(gpu.get("pci_device_id", "0")), 0),
                     int(str(gpu.get("pci_subsystem_id", "0")), 0))


def nvmlDeviceGetPciInfo(handle):
    _profile("nvmlDeviceGetPciInfo")
    return nvmlDeviceGetPciInfo_v3(handle)


def _link(fn: str, device: Any, link: Any) -> tuple[bool, str, int]:
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
    return _pci_info(bus)


def nvmlDeviceGetNvLinkRemoteDeviceType(handle, link):
    active, _bus, kind = _link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
    return kind if active else NVML_NVLINK_DEVICE_TYPE_UNKNOWN


def nvmlDeviceGetTopologyCommonAncestor(device1, device2):
    _gpu("nvmlDeviceGetTopologyCommonAncestor", device1)
    data = _state["profile"]
    _gpu("nvmlDeviceGetTopologyCommonAncestor", device2)
    i, j = device1._index, device2._index
    if i == j:
        return NVML_TOPOLOGY_INTERNAL
    rows = data.get("topology")
    if rows is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return _const("NVML_TOPOLOGY_", rows[i][j], "topology level")


def nvmlDeviceGetP2PStatus(device1, device2, p2pIndex):
    if isinstance(p2pIndex, bool) or not isinstance(p2pIndex, int):
        # what ctypes says when handed nvidia-ml-py's tuple NVML_P2P_CAPS_INDEX_READ
        raise ctypes.ArgumentError("argument 3: TypeError: Don't know how to convert parameter 3")
    _gpu("nvmlDeviceGetP2PStatus", device1)
    _gpu("nvmlDeviceGetP2PStatus", device2)
    data = _state["profile"]
    known = {_const("NVML_P2P_CAPS_INDEX_", k, "") for k in globals() if k.startswith("NVML_P2P_CAPS_INDEX_")}
    for key, rows in (data.get("p2p") or {}).items():
        if _const("NVML_P2P_CAPS_INDEX_", key, "P2P caps index") == p2pIndex:
            status = rows[device1._index][device2._index]
            if status is None:
                raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
            return _const("NVML_P2P_STATUS_", status, "P2P status")
    if p2pIndex not in known:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return NVML_P2P_STATUS_UNKNOWN


def _on_gpu(proc: dict[str, Any], index: int, gpu: dict[str, Any]) -> bool:
    where = proc.get("gpus")
    return where is None or index in where or gpu["uuid"] in where


def nvmlDeviceGetComputeRunningProcesses_v3(handle):
    gpu = _gpu("nvmlDeviceGetComputeRunningProcesses_v3", handle)
    out = []
    for proc in processes(_state["profile"]):
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
    except NVMLError_FunctionNotFound:  # noqa: F821 (generated above)
        raise NVMLLibraryMismatchError("Unversioned function called and the pyNVML version does not match "
                                       "the NVML lib version.") from None


def _drop_absent_functions() -> None:
    """Apply the profile's ``absent_functions`` (only when imported as `pynvml`)."""
    if __name__ != "pynvml":
        return
    try:
        data = load_profile()
    except ProfileError:
        return  # reported at nvmlInit
    for name in (data or {}).get("absent_functions") or ():
        globals().pop(name, None)


_drop_absent_functions()
