"""Stand-in for NVIDIA's NVML Python bindings (nvidia-ml-py, imported as `pynvml`).

A GPU stands in at the NVML boundary: code that imports `pynvml` (the deploy's
GPU probe, sglang_deploy/deploy/host/gpu_probe.py) runs unchanged, and this package answers
from a *device profile* (JSON) instead of the driver. Put the directory holding
it (``sglang_deploy/simulator/nvml``) first on PYTHONPATH, or copy the package
where Python finds ``pynvml``, to use it. Standard library only.

Only what the probe (and the later "no process holds the GPUs" check) uses is
implemented, with nvidia-ml-py's names, signatures, constant values, exception
classes and return types: strings come back as `str`, memory info as a ctypes
`c_nvmlMemory_t` (`.total/.free/.used` in bytes), PCI info as a ctypes
`nvmlPciInfo_t` (`.busId` is `bytes`), compute capability as `(major, minor)`,
processes as objects with `.pid` and `.usedGpuMemory`. Device handles are
opaque objects (the real ones are ctypes pointers). nvidia-ml-py's quirk
``NVML_P2P_CAPS_INDEX_READ = 0,`` (a one-element tuple, which ctypes refuses as
an argument) is reproduced on purpose, so callers must cope with it here too.

Layout
------
The calls live in submodules by concern; this package puts them all in one
namespace, as nvidia-ml-py's single module has them:

* ``_constants``: NVML's constants (``NVML_*``)
* ``_errors``: ``NVMLError`` and its generated ``NVMLError_*`` subclasses
* ``_structs``: returned structures and the opaque device handle
* ``_profile``: finding, reading and checking the device profile
* ``_state``: the profile between ``nvmlInit`` and ``nvmlShutdown``
* ``_system``: init, shutdown, driver and CUDA versions
* ``_device``: device handles, name, UUID, brand, memory, PCI info
* ``_topology``: NVLink, PCIe topology, P2P status
* ``_fabric``: the GPU's registration with the NVLink fabric
* ``_processes``: processes on the GPUs

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
          "health": {                        # see "Health" below; absent: every health call NotSupported
            "ecc": null,                     # or {"volatile": {"corrected": 0, "uncorrected": 0}, "aggregate": {...}}
            "retired_pages": null,           # or {"single_bit": ["0x1f2e3000"], "double_bit": [], "pending": false}
            "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": false, "failure": false},
            "clocks_event_reasons": ["GpuIdle"]   # nvmlClocksEventReason* names without the prefix
          },
          "nvlinks": [                       # null/absent: no NVLink (every NVLink call: NotSupported)
            {"remote_bus_id": "00000000:21:00.0", "remote_type": "GPU", "count": 4, "active": true}
          ],
          "fabric": {                        # nvmlDeviceGetGpuFabricInfo[V]; null/absent: NotSupported
            "state": "COMPLETED",            # an NVML_GPU_FABRIC_STATE_* name without the prefix
            "status": "SUCCESS",             # SUCCESS or an NVML_ERROR_* name (default SUCCESS)
            "clique_id": 0,                  # optional, default 0
            "cluster_uuid": "00000000-0000-0000-0000-000000000000",  # optional, default all zero
            "health_mask": 0                 # optional (v2 structure only), default 0
          }
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
      "graphics_processes": [],              # nvmlDeviceGetGraphicsRunningProcesses, same entries
      "faults": "gpu-faults.json",           # optional: a faults file laid over ``health`` (below)
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

Health (``nvmlDeviceGetTotalEccErrors``, ``nvmlDeviceGetRetiredPages``,
``nvmlDeviceGetRetiredPagesPendingStatus``, ``nvmlDeviceGetRemappedRows``,
``nvmlDeviceGetCurrentClocksEventReasons`` / ``...ThrottleReasons``)
-------------------------------------------------------------------------
Each GPU's ``health`` gives what those calls answer; a ``null`` member makes its calls raise
``NVMLError_NotSupported`` (nvidia-smi prints ``N/A``): ``ecc`` where ECC is off or absent,
``retired_pages`` on Ampere and later (row remapping replaces it), ``remapped_rows`` before
Ampere. The profile's ``faults`` file (relative to the profile's directory, or absolute) is read
again on every call, so a test injects a fault while code runs and removes it by deleting the
file::

    {"about": "where these values come from",
     "gpus": {"1": {"remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": false,
                                      "failure": true}}},     # by index or UUID, over ``health``
     "processes": [{"pid": 4242, "gpus": [0], "used_memory_bytes": 2147483648}]}   # added

``sglang_deploy/simulator/boards/faults/`` holds such files.
"""


from __future__ import annotations

# Names nvidia-ml-py's module has as well (its `from ctypes import *` and imports).
import os, string, sys, threading  # noqa: E401, F401
from ctypes import Structure, c_char, c_uint, c_ulonglong  # noqa: F401

from . import _errors
from ._constants import *  # noqa: F403  (every NVML_* constant)
from ._device import (  # noqa: F401
    nvmlDeviceGetBrand, nvmlDeviceGetCount, nvmlDeviceGetCudaComputeCapability, nvmlDeviceGetHandleByIndex,
    nvmlDeviceGetIndex, nvmlDeviceGetMemoryInfo, nvmlDeviceGetName, nvmlDeviceGetPciInfo,
    nvmlDeviceGetPciInfo_v3, nvmlDeviceGetUUID,
)
from ._health import (  # noqa: F401
    nvmlDeviceGetCurrentClocksEventReasons, nvmlDeviceGetCurrentClocksThrottleReasons,
    nvmlDeviceGetGraphicsRunningProcesses, nvmlDeviceGetGraphicsRunningProcesses_v2,
    nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlDeviceGetRemappedRows, nvmlDeviceGetRetiredPages,
    nvmlDeviceGetRetiredPagesPendingStatus, nvmlDeviceGetTotalEccErrors,
)
from ._errors import NVMLError, NVMLLibraryMismatchError, _extractNVMLErrorsAsClasses, nvmlExceptionClass  # noqa: F401
from ._fabric import nvmlDeviceGetGpuFabricInfo, nvmlDeviceGetGpuFabricInfoV  # noqa: F401
from ._processes import (  # noqa: F401
    _on_gpu, _used_bytes, nvmlDeviceGetComputeRunningProcesses, nvmlDeviceGetComputeRunningProcesses_v2,
    nvmlDeviceGetComputeRunningProcesses_v3, processes,
)
from ._profile import (  # noqa: F401
    DEFAULT_PROFILE, PROFILE_ENV, ProfileError, load_profile, pair_nvlinks, profile_path,
)
from ._structs import (  # noqa: F401
    c_nvmlDevice_t, c_nvmlGpuFabricInfo_t, c_nvmlGpuFabricInfo_v2_t, c_nvmlGpuFabricInfoV_t, c_nvmlMemory_t,
    c_nvmlMemory_v2_t, nvmlFriendlyObject, nvmlGpuFabricInfo_v2, nvmlPciInfo_t,
)
from ._system import (  # noqa: F401
    nvmlErrorString, nvmlInit, nvmlInitWithFlags, nvmlShutdown, nvmlSystemGetCudaDriverVersion,
    nvmlSystemGetCudaDriverVersion_v2, nvmlSystemGetDriverVersion,
)
from ._topology import (  # noqa: F401
    nvmlDeviceGetNvLinkRemoteDeviceType, nvmlDeviceGetNvLinkRemotePciInfo, nvmlDeviceGetNvLinkState,
    nvmlDeviceGetP2PStatus, nvmlDeviceGetTopologyCommonAncestor,
)

globals().update(_errors.error_classes())  # NVMLError_Uninitialized, ... (generated)


def _one_module() -> None:
    """Classes and functions say they come from this module, as in nvidia-ml-py."""
    for value in list(globals().values()):
        if callable(value) and str(getattr(value, "__module__", "")).startswith(__name__ + "."):
            value.__module__ = __name__


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


_one_module()
_drop_absent_functions()
