"""A stand-in sysfs PCI tree: the GPUs, the bridges above them, their configuration space and
IOMMU groups, laid out as the Linux kernel lays them out, for the GPU probe's PCIe reader
(``sglang_deploy/deploy/host/pcie_paths.py``). SIMULATOR ONLY (the tests).

The layout is the kernel's ABI: ``bus/pci/devices/<address>`` is a link to the device's
directory under ``devices/pci<domain>:<bus>/``, nested under each bridge above it
(Documentation/ABI/testing/sysfs-bus-pci); ``config`` is the configuration space (4096 bytes
for a PCIe device, extended capabilities from 0x100, each with a 32-bit header: id, version,
next offset; PCI Express Base Specification 7.6, include/uapi/linux/pci_regs.h), ``vendor`` the
vendor id, ``class`` the class code, ``numa_node`` the NUMA node, ``iommu_group`` a link to
``kernel/iommu_groups/<n>`` whose ``type`` is the domain type (Documentation/ABI/testing/sysfs-kernel-iommu_groups).
An RDMA device is ``class/infiniband/<name>``, a link to ``<its PCI device>/infiniband/<name>``,
whose ``device`` links back to the PCI device and whose ``ports/<n>/state`` ("4: ACTIVE") and
``ports/<n>/link_layer`` say each port's (Documentation/ABI/stable/sysfs-class-infiniband).

What a tree holds comes from recordings: :data:`RECORDED` names each with its source.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from sglang_deploy.plan.pcie import ACS_BITS

NVIDIA = 0x10DE
AMD = 0x1022
_EXT_CAP_AER = 0x0001  # Advanced Error Reporting: the first extended capability of most ports
_EXT_CAP_ACS = 0x000D


@dataclass(frozen=True)
class Gpu:
    address: str                 # 0000:41:00.0
    bridges: tuple[str, ...]     # root port first
    iommu: str | None = None     # the group's domain type; None: no IOMMU group
    numa_node: int | None = None


@dataclass(frozen=True)
class Nic:
    """An RDMA device (one port) on the PCI tree."""

    name: str                    # mlx5_2
    address: str
    bridges: tuple[str, ...]     # root port first
    numa_node: int | None
    state: str = "4: ACTIVE"     # as the kernel writes it (drivers/infiniband/core/sysfs.c)
    link_layer: str = "InfiniBand"


@dataclass(frozen=True)
class Tree:
    """One host's PCI tree: its GPUs and each bridge's ACS control (None: no ACS capability;
    ``"conventional"``: a bridge with 256 bytes of configuration space, no extended capabilities)."""

    gpus: tuple[Gpu, ...]
    acs: dict[str, int | str | None]
    source: str
    nics: tuple[Nic, ...] = ()


def _h20x8() -> Tree:
    """deepseek-ai/DeepEP#223's node (RECORDED): GPU i below root port r(i), a switch (upstream port
    u(i), downstream ports d(i) for the GPU and d(i)+1 for its NIC, mlx5_<i+2>)."""
    def bus(i: int, k: int) -> str:
        return f"{k + 0x10 * (i % 4) + (0x80 if i >= 4 else 0):02x}"

    def path(i: int, last: str) -> tuple[str, ...]:
        return (f"0000:{'00' if i < 4 else '80'}:{i % 4 + 1:02x}.0", f"0000:{bus(i, 1)}:00.0", last)

    gpus = tuple(Gpu(f"0000:{bus(i, 3)}:00.0", path(i, f"0000:{bus(i, 2)}:00.0"), "DMA", i // 4) for i in range(8))
    nics = tuple(Nic(f"mlx5_{i + 2}", f"0000:{bus(i, 4)}:00.0", path(i, f"0000:{bus(i, 2)}:01.0"), i // 4)
                 for i in range(8))
    acs: dict[str, int | str | None] = {b: None for g in gpus for b in g.bridges}
    return Tree(gpus=gpus, acs=acs, source="deepseek-ai/DeepEP#223",
                nics=(Nic("mlx5_0", "0000:e1:00.0", ("0000:00:05.0",), 0, link_layer="Ethernet"),
                      Nic("mlx5_1", "0000:e1:00.1", ("0000:00:05.0",), 0, state="1: DOWN", link_layer="Ethernet"),
                      *nics))


#: Trees from recordings of real machines.
RECORDED = {
    # NVIDIA/nccl#2079 (2026-03-30, 2026-04-04): 2x RTX 5880 Ada at 0000:41:00.0 and 0000:61:00.0,
    # `nvidia-smi topo -m` NODE, each below an AMD Starship/Matisse GPP bridge whose ACS control read
    # 0x001d (SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+); NCCL's allreduce hung until ACS was
    # cleared or NCCL_P2P_DISABLE=1 was set. The report does not print the bridges' addresses: the
    # root ports of buses 0x41 and 0x61 are written here as 0000:40:01.1 and 0000:60:01.1 (AMD
    # numbers its GPP bridges device 01 function 1 and up); the ACS values are the recorded ones.
    "nccl-2079-acs-redirect": Tree(
        gpus=(Gpu("0000:41:00.0", ("0000:40:01.1",), "DMA"), Gpu("0000:61:00.0", ("0000:60:01.1",), "DMA")),
        acs={"0000:40:01.1": 0x001D, "0000:60:01.1": 0x001D},
        source="NVIDIA/nccl#2079"),
    # The same machine after the reporter's fix (`setpci -s <bdf> ECAP_ACS+6.w=0000` on each bridge).
    "nccl-2079-acs-cleared": Tree(
        gpus=(Gpu("0000:41:00.0", ("0000:40:01.1",), "DMA"), Gpu("0000:61:00.0", ("0000:60:01.1",), "DMA")),
        acs={"0000:40:01.1": 0x0000, "0000:60:01.1": 0x0000},
        source="NVIDIA/nccl#2079 (after ECAP_ACS+6.w=0000)"),
    # deepseek-ai/DeepEP#223 (2025-06-18): 8x H20 per node, `nvidia-smi topo -m` and `ibv_devinfo`.
    # GPU i of 0-3 is PIX with NIC i+2, GPU i of 4-7 with NIC i+2; NIC0 and NIC1 are NODE to GPUs 0-3
    # (NUMA node 0, no GPU below their switch); GPUs 0-3 on NUMA node 0, 4-7 on 1. ibv_devinfo:
    # mlx5_0 Ethernet PORT_ACTIVE, mlx5_1 Ethernet PORT_DOWN, mlx5_2 InfiniBand PORT_ACTIVE. What the
    # report does not print is written here: the PCI addresses (one root port per GPU and its NIC, a
    # switch below it: upstream port, then one downstream port each), NIC<i> as mlx5_<i> (the legend
    # is not in the part read), and mlx5_3 to mlx5_9 as InfiniBand PORT_ACTIVE like mlx5_2.
    "deepep-223-h20x8": _h20x8(),
}


def acs_control(words: str) -> int:
    """The control register from lspci's ``ACSCtl:`` line (``SrcValid+ TransBlk- ReqRedir+ ...``),
    the form public recordings print it in (bits: plan/pcie.py ACS_BITS)."""
    bits = {name: bit for bit, name in ACS_BITS}
    value = 0
    for word in words.replace("ACSCtl:", "").split():
        name, flag = word[:-1], word[-1]
        if name not in bits or flag not in "+-":
            raise ValueError(f"not an lspci ACSCtl word: {word!r}")
        value |= bits[name] if flag == "+" else 0
    return value


def config_space(vendor: int, acs: int | str | None) -> bytes:
    """A device's configuration space: 4096 bytes with AER at 0x100 and, where ``acs`` is a
    value, ACS after it at 0x148 (ACS capability register 0, control ``acs``); 256 bytes for a
    ``"conventional"`` bridge."""
    space = bytearray(256 if acs == "conventional" else 4096)
    space[0:2] = vendor.to_bytes(2, "little")
    if acs == "conventional":
        return bytes(space)
    next_offset = 0x148 if isinstance(acs, int) else 0
    space[0x100:0x104] = (_EXT_CAP_AER | 1 << 16 | next_offset << 20).to_bytes(4, "little")
    if isinstance(acs, int):
        space[0x148:0x14C] = (_EXT_CAP_ACS | 1 << 16).to_bytes(4, "little")
        space[0x14E:0x150] = acs.to_bytes(2, "little")
    return bytes(space)


#: Where a throwaway host sees a tree (:func:`binds`): its links point there.
ON_HOST = "/opt/sglang-testbed-sysfs"


def binds(root: Path) -> list[tuple[Path, str]]:
    """A tree built with ``mounted_at=ON_HOST``, as a throwaway host's binds: the tree at ON_HOST
    and its device links over the host's own ``/sys/bus/pci/devices`` (systemd-nspawn mounts binds
    after /sys), so a reader of /sys there finds the tree's devices and nothing else of this machine's."""
    return [(root, ON_HOST), (root / "bus" / "pci" / "devices", "/sys/bus/pci/devices")]


def build(root: Path, tree: Tree, gpu_vendor: int = NVIDIA, mounted_at: str | None = None) -> Path:
    """Lay ``tree`` out under ``root`` (``root`` stands for ``/sys``); return ``root``. With
    ``mounted_at``, the device links are absolute, to where the tree is mounted (:func:`binds`)."""
    devices = root / "bus" / "pci" / "devices"
    devices.mkdir(parents=True, exist_ok=True)
    groups = root / "kernel" / "iommu_groups"
    for n, gpu in enumerate(tree.gpus):
        chain: Sequence[str] = (*gpu.bridges, gpu.address)
        domain, bus = chain[0].split(":")[:2]
        where = root / "devices" / f"pci{domain}:{bus}"
        for k, address in enumerate(chain):
            where = where / address
            where.mkdir(parents=True, exist_ok=True)
            is_gpu = k == len(chain) - 1
            # the reader reads vendor and class of the GPUs only; a bridge's vendor is not judged
            (where / "vendor").write_text(f"0x{gpu_vendor if is_gpu else AMD:04x}\n")
            (where / "class").write_text("0x030000\n" if is_gpu else "0x060400\n")  # VGA; PCI-to-PCI bridge
            (where / "config").write_bytes(config_space(gpu_vendor if is_gpu else AMD,
                                                        None if is_gpu else tree.acs.get(address)))
            link = devices / address
            if not link.is_symlink():
                target = os.path.relpath(where, devices)
                if mounted_at is not None:
                    target = f"{mounted_at}/{where.relative_to(root).as_posix()}"
                link.symlink_to(target)
        if gpu.numa_node is not None:
            (where / "numa_node").write_text(f"{gpu.numa_node}\n")
        if gpu.iommu is not None:
            group = groups / str(n)
            group.mkdir(parents=True, exist_ok=True)
            (group / "type").write_text(gpu.iommu + "\n")
            (where / "iommu_group").symlink_to(os.path.relpath(group, where))
    for nic in tree.nics:
        _nic(root, nic)
    return root


def _nic(root: Path, nic: Nic) -> None:
    """An RDMA device as the kernel lays it out: its PCI device (Mellanox's vendor id, an InfiniBand
    controller's class), the device's ``infiniband/<name>`` and the class link to it."""
    chain = (*nic.bridges, nic.address)
    domain, bus = chain[0].split(":")[:2]
    where = root / "devices" / f"pci{domain}:{bus}"
    for address in chain:
        where = where / address
        where.mkdir(parents=True, exist_ok=True)
    (where / "vendor").write_text("0x15b3\n")
    (where / "class").write_text("0x020700\n")
    (where / "numa_node").write_text(f"{nic.numa_node if nic.numa_node is not None else -1}\n")
    ib = where / "infiniband" / nic.name
    (ib / "ports" / "1").mkdir(parents=True, exist_ok=True)
    (ib / "ports" / "1" / "state").write_text(nic.state + "\n")
    (ib / "ports" / "1" / "link_layer").write_text(nic.link_layer + "\n")
    (ib / "device").symlink_to(os.path.relpath(where, ib))
    cls = root / "class" / "infiniband"
    cls.mkdir(parents=True, exist_ok=True)
    (cls / nic.name).symlink_to(os.path.relpath(ib, cls))
