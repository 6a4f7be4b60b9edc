"""The device profile: where it is, reading and checking it, and what
``nvidia-smi topo -m`` derives from it (format in the package docstring)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from . import _constants
from ._constants import NVML_NVLINK_DEVICE_TYPE_GPU, NVML_NVLINK_DEVICE_TYPE_SWITCH

PROFILE_ENV = "SGLANG_TESTBED_NVML"
DEFAULT_PROFILE = "/etc/sglang-testbed/nvml.json"


class ProfileError(ValueError):
    pass


def profile_path() -> Path:
    return Path(os.environ.get(PROFILE_ENV) or DEFAULT_PROFILE)


def bus_fields(bus_id: str) -> tuple[int, int, int]:
    """(domain, bus, device) of a PCI bus id such as ``00000000:01:00.0``."""
    try:
        domain, bus, rest = bus_id.split(":")
        device = rest.split(".")[0]
        return int(domain, 16), int(bus, 16), int(device, 16)
    except ValueError:
        raise ProfileError(f"bad PCI bus id {bus_id!r} (want 00000000:01:00.0)") from None


def const(prefix: str, name: Any, what: str) -> int:
    """The value of the NVML constant ``prefix + name`` (the prefix may be given)."""
    value = _constants.constant(prefix, name)
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
        _check_gpu(path, i, gpu)
    for key in ("topology",):
        rows = data.get(key)
        if rows is not None and (len(rows) != n or any(len(r) != n for r in rows)):
            raise ProfileError(f"{path}: {key} must be {n}x{n}")
    for index_name, rows in (data.get("p2p") or {}).items():
        const("NVML_P2P_CAPS_INDEX_", index_name, "P2P caps index")
        if len(rows) != n or any(len(r) != n for r in rows):
            raise ProfileError(f"{path}: p2p.{index_name} must be {n}x{n}")
    for name, err in (data.get("errors") or {}).items():
        const("NVML_ERROR_", err, f"error for {name}")
    return data


def _check_gpu(path: Path, i: int, gpu: dict[str, Any]) -> None:
    """Check ``gpus[i]`` and add what the calls answer from: ``_brand`` and ``_links``."""
    for key in ("name", "uuid", "cc", "memory_total_bytes", "pci_bus_id", "brand"):
        if key not in gpu:
            raise ProfileError(f"{path}: gpus[{i}] lacks {key!r}")
    bus_fields(gpu["pci_bus_id"])
    gpu["_brand"] = const("NVML_BRAND_", gpu["brand"], "brand")
    links = []
    for entry in gpu.get("nvlinks") or ():
        kind = const("NVML_NVLINK_DEVICE_TYPE_", entry.get("remote_type", "GPU"), "NVLink remote type")
        bus_fields(entry["remote_bus_id"])
        for _ in range(int(entry.get("count", 1))):
            links.append((bool(entry.get("active", True)), entry["remote_bus_id"], kind))
    gpu["_links"] = links if gpu.get("nvlinks") is not None else None
    gpu["_fabric"] = _fabric(path, i, gpu.get("fabric"))


def _fabric(path: Path, i: int, raw: Any) -> dict[str, Any] | None:
    """``gpus[i].fabric`` as nvmlGpuFabricInfo_v2_t's fields, or None (the GPU is on no fabric)."""
    if raw is None:
        return None
    where = f"{path}: gpus[{i}].fabric"
    if not isinstance(raw, dict) or "state" not in raw:
        raise ProfileError(f"{where} is null or an object with a 'state' (an NVML_GPU_FABRIC_STATE_* name)")
    status = raw.get("status", "SUCCESS")
    uuid = str(raw.get("cluster_uuid", "00000000-0000-0000-0000-000000000000")).replace("-", "")
    try:
        uuid_bytes = bytes.fromhex(uuid)
    except ValueError:
        uuid_bytes = b""
    if len(uuid_bytes) != _constants.NVML_GPU_FABRIC_UUID_LEN:
        raise ProfileError(f"{where}.cluster_uuid: a UUID of 16 bytes, got {raw.get('cluster_uuid')!r}")
    return {
        "state": const("NVML_GPU_FABRIC_STATE_", raw["state"], "fabric state"),
        "status": 0 if status == "SUCCESS" else const("NVML_ERROR_", status, "fabric status"),
        "clique_id": int(raw.get("clique_id", 0)),
        "cluster_uuid": uuid_bytes,
        "health_mask": int(raw.get("health_mask", 0)),
    }


def pair_nvlinks(data: dict[str, Any], i: int, j: int) -> int:
    """NVLinks between GPUs i and j as `nvidia-smi topo -m` counts them.

    Direct links to the peer, plus, when both GPUs reach NVSwitches, the
    smaller of their switch link counts (NV18 on HGX H100).
    """
    gpus = data["gpus"]
    if i == j:
        return 0

    def direct(a: int, b: int) -> int:
        want = bus_fields(gpus[b]["pci_bus_id"])
        return sum(1 for active, bus, kind in gpus[a]["_links"] or ()
                   if active and kind == NVML_NVLINK_DEVICE_TYPE_GPU and bus_fields(bus) == want)

    def switched(a: int) -> int:
        return sum(1 for active, _bus, kind in gpus[a]["_links"] or ()
                   if active and kind == NVML_NVLINK_DEVICE_TYPE_SWITCH)

    count = max(direct(i, j), direct(j, i))
    if switched(i) and switched(j):
        count += min(switched(i), switched(j))
    return count
