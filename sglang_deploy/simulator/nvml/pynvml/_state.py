"""The loaded profile between nvmlInit and nvmlShutdown, and the checks every
call makes first: initialised, not failing by the profile's ``errors``, a valid handle."""

from __future__ import annotations

import threading
from typing import Any

from ._constants import NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_UNINITIALIZED
from ._errors import NVMLError
from ._profile import const
from ._structs import c_nvmlDevice_t

lock = threading.Lock()
state: dict[str, Any] = {"refcount": 0, "profile": None}


def raise_listed(data: dict[str, Any], fn: str) -> None:
    """Raise the NVMLError the profile's ``errors`` gives for call ``fn``, if any."""
    err = (data.get("errors") or {}).get(fn)
    if err is not None:
        raise NVMLError(const("NVML_ERROR_", err, "error"))


def profile(fn: str) -> dict[str, Any]:
    """The profile, for call ``fn``."""
    data = state["profile"]
    if data is None or state["refcount"] <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    raise_listed(data, fn)
    return data


def gpu(fn: str, handle: Any) -> dict[str, Any]:
    """The profile's entry of the GPU ``handle`` stands for, for call ``fn``."""
    data = profile(fn)
    if not isinstance(handle, c_nvmlDevice_t) or not 0 <= handle._index < len(data["gpus"]):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return data["gpus"][handle._index]
