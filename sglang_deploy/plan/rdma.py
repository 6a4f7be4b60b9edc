"""A prefill or decode server's RDMA devices for its KV transfer, pure: the probe's devices in, the
``--disaggregation-ib-device`` value and why out.

The GPU probe reads each RDMA device from sysfs (``deploy/host/pcie_paths.py``: its PCI address, the
bridges above it, its NUMA node, its ports' state and link layer). For each GPU of the server the
devices with an active port that sit closest to it on the PCIe tree are chosen: below the same
switch (the longest run of bridges shared with the GPU; ``nvidia-smi topo -m``'s PIX or PXB), else
on the GPU's NUMA node (NODE); a device on another socket (SYS), or with no active port, is left
out. The value is the comma list every supported release takes (0.5.23
``srt/distributed/device_communicators/mooncake_transfer_engine.py``, ``get_ib_devices_for_gpu``: "ib0,
ib1"); Mooncake then picks, for each GPU's memory, the closest of them. Without devices near the
server's GPUs nothing is set, and Mooncake picks from all of the host's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.spec_checks import shown

MAX_DEVICES = 32
MAX_DEPTH = 16
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


@dataclass(frozen=True)
class RdmaDevice:
    name: str
    pci: str | None
    bridges: tuple[str, ...]  # root port first
    numa_node: int | None
    active: bool  # a port in state ACTIVE
    link_layer: str | None  # its first active port's (InfiniBand, Ethernet)


def for_probe(raw: Any) -> list[dict[str, Any]] | None:
    """What ``pcie_paths.py`` printed under ``rdma`` (untrusted), as the probe carries it: at most
    MAX_DEVICES entries that are objects; parse_rdma checks each."""
    if not isinstance(raw, list):
        return None
    return [d for d in raw[:MAX_DEVICES] if isinstance(d, dict)]


def parse_rdma(host: str, raw: Any) -> tuple[RdmaDevice, ...]:
    """The probe's ``rdma``: null or absent is none; malformed is refused, naming the field."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_DEVICES:
        raise PlanError(host, "probe.rdma", f"must be a list of at most {MAX_DEVICES} devices, got {shown(raw)}")
    out = []
    for i, d in enumerate(raw):
        field = f"probe.rdma[{i}]"
        if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not _NAME.fullmatch(d["name"]):
            raise PlanError(host, field, f"must be a device with a name such as mlx5_0, got {shown(d)}")
        pci, bridges, numa, ports = d.get("pci"), d.get("bridges") or [], d.get("numa_node"), d.get("ports") or []
        if pci is not None and not (isinstance(pci, str) and _ADDRESS.fullmatch(pci)):
            raise PlanError(host, f"{field}.pci", f"must be a PCI address or null, got {shown(pci)}")
        if not isinstance(bridges, list) or len(bridges) > MAX_DEPTH or not all(
                isinstance(b, str) and _ADDRESS.fullmatch(b) for b in bridges):
            raise PlanError(host, f"{field}.bridges", f"must be at most {MAX_DEPTH} PCI addresses, got "
                                                      f"{shown(bridges)}")
        if numa is not None and (type(numa) is not int or not 0 <= numa < 1024):
            raise PlanError(host, f"{field}.numa_node", f"must be a NUMA node number or null, got {shown(numa)}")
        if not isinstance(ports, list) or len(ports) > 8 or not all(isinstance(p, dict) for p in ports):
            raise PlanError(host, f"{field}.ports", f"must be at most 8 ports, got {shown(ports)}")
        active = [p for p in ports if p.get("state") == "ACTIVE"]
        layer = active[0].get("link_layer") if active else None
        out.append(RdmaDevice(d["name"], pci, tuple(bridges), numa, bool(active),
                              layer if layer in ("InfiniBand", "Ethernet") else None))
    return tuple(out)


def _shared(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def choose(gpus: Sequence[tuple[int, Sequence[str] | None, int | None]],
           devices: Sequence[RdmaDevice]) -> tuple[str, str] | None:
    """(the ``--disaggregation-ib-device`` value, why) for a server on ``gpus`` ((NVML index, the
    bridges above it or None, its NUMA node) each); None when no active device is near any of them."""
    active = [d for d in devices if d.active]
    chosen: list[str] = []
    why: list[str] = []
    for index, bridges, numa in gpus:
        scored = []
        for d in active:
            shared = _shared(bridges or (), d.bridges)
            near = numa is not None and d.numa_node == numa
            if shared or near:
                scored.append(((shared, near), d))
        if not scored:
            continue
        best = max(score for score, _ in scored)
        names = [d.name for score, d in scored if score == best]
        chosen += [n for n in names if n not in chosen]
        where = f"below PCIe bridge {bridges[best[0] - 1]}" if best[0] and bridges else f"on NUMA node {numa}"
        why.append(f"GPU {index}: {', '.join(names)} ({where})")
    if not chosen:
        return None
    left = [f"{d.name} ({'no active port' if not d.active else 'not the nearest to any of its GPUs'})"
            for d in devices if d.name not in chosen]
    return ",".join(chosen), ("the probe's RDMA devices nearest to the server's GPUs: " + "; ".join(why)
                              + (f"; left out: {', '.join(left)}" if left else ""))
