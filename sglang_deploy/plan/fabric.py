"""NVLS only on a ready NVLink fabric: each GPU's registration with the fabric, as the GPU probe
read it from NVML, judged for the GPUs a server uses.

On NVSwitch systems a GPU registers with the NVLink fabric (NVIDIA Fabric Manager) before CUDA
can use it across the switches; NVML reports the registration per GPU
(``nvmlDeviceGetGpuFabricInfo[V]``: ``state`` NVML_GPU_FABRIC_STATE_NOT_STARTED / IN_PROGRESS /
COMPLETED, and once COMPLETED a ``status``; NVML API reference, Device Queries and
nvmlGpuFabricInfo_t / nvmlGpuFabricInfo_v2_t; nvidia-ml-py pynvml.py). NCCL's NVLS binds its
buffers to a multicast object on the switches (NCCL src/transport/nvls.cc: cuMulticastCreate,
cuMulticastBindMem), which a fabric that is not ready cannot give. Pure: the probe's words in, a
judgement out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.spec_checks import shown

# The probe's words for a GPU's fabric (module docstring): NVML's NVML_GPU_FABRIC_STATE_* names
# (nvml.h; nvidia-ml-py pynvml.py), the probe's own UNREADABLE and UNKNOWN_<n>; a status is
# SUCCESS or an NVML_ERROR_* name. Bounded, so a hostile probe cannot carry text into a reason.
_FABRIC_STATE = re.compile(r"NOT_SUPPORTED|NOT_STARTED|IN_PROGRESS|COMPLETED|UNREADABLE|UNKNOWN_[0-9]{1,10}")
_FABRIC_STATUS = re.compile(r"[A-Z][A-Z0-9_]{0,47}")
_SERVICE_STATE = re.compile(r"[a-z][a-z-]{0,31}")


@dataclass(frozen=True)
class Fabric:
    """A GPU's registration with the NVLink fabric, as NVML reports it (nvmlGpuFabricInfo_t)."""

    state: str  # COMPLETED, IN_PROGRESS, NOT_STARTED, UNREADABLE or UNKNOWN_<n>
    status: str | None  # SUCCESS or an NVML_ERROR_* name once COMPLETED, else None

    @property
    def ready(self) -> bool:
        """Registered: NVML's state COMPLETED and its status NVML_SUCCESS (the status "must be
        checked only if state returns complete": NVML API reference, nvmlGpuFabricInfo_t)."""
        return self.state == "COMPLETED" and self.status == "SUCCESS"

    def __str__(self) -> str:
        if self.state == "UNREADABLE":
            return f"UNREADABLE (NVML error {self.status})" if self.status else "UNREADABLE"
        return f"{self.state} with status {self.status}" if self.state == "COMPLETED" else self.state



def parse_fabric(host: str, field: str, raw: Any) -> Fabric | None:
    """A GPU's ``fabric``: null, absent or NOT_SUPPORTED is none; anything malformed is refused."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise PlanError(host, field, f"must be an object {{state, status}} or null, got {shown(raw)}")
    state, status = raw.get("state"), raw.get("status")
    if not isinstance(state, str) or not _FABRIC_STATE.fullmatch(state):
        raise PlanError(host, f"{field}.state", "must be an NVML fabric state (NOT_STARTED, IN_PROGRESS, "
                                                f"COMPLETED, UNREADABLE or UNKNOWN_<n>), got {shown(state)}")
    if status is not None and (not isinstance(status, str) or not _FABRIC_STATUS.fullmatch(status)):
        raise PlanError(host, f"{field}.status", "must be SUCCESS, an NVML error name such as "
                                                 f"INSUFFICIENT_RESOURCES, or null, got {shown(status)}")
    if state == "NOT_SUPPORTED":
        return None
    if state == "COMPLETED" and status is None:
        raise PlanError(host, f"{field}.status", "missing: NVML fills the status in once the state is COMPLETED "
                                                 "(SUCCESS, or the error that ended the registration)")
    return Fabric(state, status if state in ("COMPLETED", "UNREADABLE") else None)


def parse_service_state(host: str, field: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _SERVICE_STATE.fullmatch(value):
        raise PlanError(host, field, "must be what `systemctl is-active` answers (active, "
                                                      f"inactive, failed, ...) or null, got {shown(value)}")
    return value




READY, NOT_READY, UNKNOWN = "ready", "not-ready", "unknown"
_SHOWN = 4  # GPUs named in a reason before "and N more"


@dataclass(frozen=True)
class FabricCheck:
    """The fabric of the GPUs a server uses: ``status`` (ready, not-ready or unknown, the rule fact
    ``fabric``) and one line saying why (the rule fact ``fabric_detail``)."""

    status: str
    detail: str
    #: what the probe read of nvidia-fabricmanager.service (None: not read), for a warning only: the
    #: reasons above are rendered into the host's files, and a service's state must not change a revision
    service: str | None = None


def _gpus(indices: Sequence[int]) -> str:
    return ("GPU " if len(indices) == 1 else "GPUs ") + ", ".join(map(str, indices))


def judge(gpus: Sequence[tuple[int, Fabric | None]], source: str, fabric_manager: str | None) -> FabricCheck:
    """``gpus``: (index, fabric) of each GPU the server uses; ``source``: the hardware's
    (``declared`` or ``probe:...``); ``fabric_manager``: `systemctl is-active` of
    nvidia-fabricmanager.service, where the probe read it (said, never judged: on GB200 NVL72 the
    fabric is managed off the host, and a Fabric Manager in a container is no host unit)."""
    if source == "declared":
        return FabricCheck(UNKNOWN, "declared hardware: NVML's fabric state is not read, so the plan goes by the "
                                    "topology alone")
    bad = [(i, f) for i, f in gpus if f is not None and not f.ready]
    if bad:
        named = ", ".join(f"GPU {i} {f}" for i, f in bad[:_SHOWN])
        more = f" and {len(bad) - _SHOWN} more GPUs not ready" if len(bad) > _SHOWN else ""
        return FabricCheck(NOT_READY, f"NVML reports {named}{more}", fabric_manager)
    unread = [i for i, f in gpus if f is None]
    if len(unread) == len(gpus):
        return FabricCheck(UNKNOWN, "the probe reports no fabric state (a probe from before it read one, bindings "
                                    "or a driver without nvmlDeviceGetGpuFabricInfo, or NVML answered NOT_SUPPORTED), "
                                    "so the plan goes by the topology alone")
    if unread:
        verb = "reports" if len(unread) == 1 else "report"
        return FabricCheck(UNKNOWN, f"{_gpus(unread)} {verb} no fabric state, the others COMPLETED with status "
                                    "SUCCESS, so the plan goes by the topology alone", fabric_manager)
    return FabricCheck(READY, f"NVML reports {_gpus([i for i, _ in gpus])} COMPLETED with status SUCCESS "
                              "(nvmlDeviceGetGpuFabricInfo)", fabric_manager)

