"""Library and system calls: init and shutdown (reading the profile), driver and
CUDA versions."""

from __future__ import annotations

from ._constants import NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_UNINITIALIZED
from ._errors import NVMLError
from ._profile import load_profile
from ._state import lock, profile, raise_listed, state


def nvmlInitWithFlags(flags):
    with lock:
        if state["refcount"] <= 0:
            data = load_profile()
            if data is None:
                raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
            if data.get("driver_loaded", True) is False:
                raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
            state["profile"] = data
        raise_listed(state["profile"], "nvmlInit")
        state["refcount"] += 1
    return None


def nvmlInit():
    nvmlInitWithFlags(0)
    return None


def nvmlShutdown():
    with lock:
        if state["refcount"] <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        state["refcount"] -= 1
    return None


def nvmlErrorString(result):
    return NVMLError._errcode_to_string.get(result, "Unknown Error")


def nvmlSystemGetDriverVersion():
    return str(profile("nvmlSystemGetDriverVersion")["driver_version"])


def nvmlSystemGetCudaDriverVersion():
    return int(profile("nvmlSystemGetCudaDriverVersion")["cuda_driver_version"])


def nvmlSystemGetCudaDriverVersion_v2():
    return int(profile("nvmlSystemGetCudaDriverVersion_v2")["cuda_driver_version"])
