"""A stand-in sysfs PCI tree: the GPUs, the bridges above them, their configuration space and
IOMMU groups, laid out as the Linux kernel lays them out, for the GPU probe's PCIe reader
(``sglang_deploy/deploy/host/pcie_paths.py``). SIMULATOR ONLY (the tests).

The layout is the kernel's ABI: ``bus/pci/devices/<address>`` is a link to the device's
directory under ``devices/pci<domain>:<bus>/``, nested under each bridge above it
(Documentation/ABI/testing/sysfs-bus-pci); ``config`` is the configuration space (4096 bytes
for a PCIe device, extended capabilities from 0x100, each with a 32-bit header: id, version,
next offset; PCI Express Base Specification 7.6, include/uapi/linux/pci_regs.h), ``vendor`` the
vendor id, ``class`` the class code, ``iommu_group`` a link to ``kernel/iommu_groups/<n>`` whose ``type`` is the domain
type (Documentation/ABI/testing/sysfs-kernel-iommu_groups).

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


@dataclass(frozen=True)
class Tree:
    """One host's PCI tree: its GPUs and each bridge's ACS control (None: no ACS capability;
    ``"conventional"``: a bridge with 256 bytes of configuration space, no extended capabilities)."""

    gpus: tuple[Gpu, ...]
    acs: dict[str, int | str | None]
    source: str


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
        if gpu.iommu is not None:
            group = groups / str(n)
            group.mkdir(parents=True, exist_ok=True)
            (group / "type").write_text(gpu.iommu + "\n")
            (where / "iommu_group").symlink_to(os.path.relpath(group, where))
    return root
