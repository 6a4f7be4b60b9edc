#!/usr/bin/env python3
"""sglang-deploy PCIe paths: what the bridges between this host's NVIDIA GPUs do to peer transfers.

A standalone script for the GPU host (standard library only, Python 3.9 or newer); the deploy
runs it beside the GPU probe (sglang_deploy/deploy/facts.py GpuProbe) and changes nothing. It
reads sysfs, not NVML: NVML's P2P status does not see PCIe Access Control Services on the
bridges, nor the IOMMU. It prints one JSON line::

    {"devices": {"0000:41:00.0": {"bridges": ["0000:40:01.1"], "iommu": "DMA"}},
     "acs": {"0000:40:01.1": 29}}

``devices``: every NVIDIA display or 3D controller sysfs lists (vendor 0x10de, class 0x03xxxx),
at most 64, with the bridges above it from the root port down (at most 16, the device's sysfs
path) and its IOMMU group's domain type (``none`` where it is in no group: no IOMMU; null where
unreadable). ``acs``: each of those bridges' ACS control register, null where the bridge has
no ACS capability, ``UNREADABLE`` where configuration space past 64 bytes could not be read
(it needs root). Exit status 0 whenever the line is printed.

``rdma``: every RDMA device ``/sys/class/infiniband`` lists (at most 32, Documentation/ABI/stable/
sysfs-class-infiniband), with its PCI address and the bridges above it (as a GPU's), its NUMA node
(null where the kernel has none: -1) and its ports' state and link layer (``ACTIVE``,
``InfiniBand``); a GPU's entry gets its NUMA node too. The planner picks a prefill or decode server's
KV transfer devices from them (plan/rdma.py).

With ``--cache-root DIR`` (the plan's ``sglang_cache_dir``) it also reports what SGLang's own P2P
test found: each ``<DIR>/<version>/gpu_p2p_access_cache_for_<CUDA_VISIBLE_DEVICES>.json`` (written
by custom_all_reduce_utils.py gpu_p2p_access_check under SGLANG_CACHE_DIR, keys ``"i->j"`` over
the visible devices, values true or false), and with ``--home-cache DIR`` (the service user's
``~/.cache/sglang``, where 0.5.9 writes the same file: it has no SGLANG_CACHE_DIR) each one there,
named ``~/.cache/sglang/<file>``; at most 16 in all of at most 64 KiB, with its modification time,
and the kernel's boot time (/proc/stat ``btime``), under ``sglang_p2p`` and ``boot_time``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys

# include/uapi/linux/pci_regs.h: the ACS extended capability's id and the offset of its control
# register (what `setpci ECAP_ACS+6.w` reads), where extended capabilities start, and the size of
# the configuration space a device without them has.
PCI_EXT_CAP_ID_ACS = 0x0D
PCI_ACS_CTRL = 0x06
PCI_EXT_CAP_START = 0x100
PCI_CFG_SPACE_SIZE = 256
PCI_CFG_SPACE_EXP_SIZE = 4096
PCI_VENDOR_NVIDIA = "0x10de"
PCI_CLASS_DISPLAY = "0x03"  # PCI_BASE_CLASS_DISPLAY (include/linux/pci_ids.h): VGA, 3D controllers
ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
MAX_DEVICES = 64
MAX_DEPTH = 16
# The IOMMU domain types the kernel names (Documentation/ABI/testing/sysfs-kernel-iommu_groups).
IOMMU_TYPES = ("DMA", "DMA-FQ", "identity", "auto", "blocked", "unmanaged")


def _text(path: str, limit: int = 64):
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(limit).strip()
    except OSError:
        return None


def acs_in_config(data: bytes, size: int):
    """The ACS control register in a device's configuration space as read (``data``) from a file
    of ``size`` bytes; None where its extended capability list holds no ACS. Fewer bytes than the
    file holds is "UNREADABLE": the kernel serves the first 64 bytes to a reader without
    CAP_SYS_ADMIN (drivers/pci/pci-sysfs.c pci_read_config), and the capability lies past 256."""
    if len(data) < min(size, PCI_CFG_SPACE_EXP_SIZE):
        return "UNREADABLE"
    pos, seen = PCI_EXT_CAP_START, set()
    while PCI_EXT_CAP_START <= pos <= len(data) - 8 and pos not in seen:  # a looping list ends too
        seen.add(pos)
        header = int.from_bytes(data[pos:pos + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == PCI_EXT_CAP_ID_ACS:
            return int.from_bytes(data[pos + PCI_ACS_CTRL:pos + PCI_ACS_CTRL + 2], "little")
        pos = (header >> 20) & 0xFFC
    return None


def acs_control(device: str):
    """A bridge's ACS control register, None (no ACS capability, or no extended configuration
    space) or "UNREADABLE"."""
    path = os.path.join(device, "config")
    try:
        size = os.stat(path).st_size
        if size <= PCI_CFG_SPACE_SIZE:
            return None
        with open(path, "rb") as f:
            data = f.read(PCI_CFG_SPACE_EXP_SIZE)
    except OSError:
        return "UNREADABLE"
    return acs_in_config(data, size)


def iommu(device: str):
    group = os.path.join(device, "iommu_group")
    if not os.path.lexists(group):
        return "none"
    value = _text(os.path.join(group, "type"))
    return value if value in IOMMU_TYPES else None


MAX_RDMA = 32
MAX_PORTS = 8
RDMA_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
PORT_STATE = re.compile(r"[0-9]+: *([A-Z_]{1,32})")  # "4: ACTIVE" (drivers/infiniband/core/sysfs.c)


def numa_node(device: str):
    value = _text(os.path.join(device, "numa_node"))
    return int(value) if value is not None and value.isdigit() and int(value) < 1024 else None


def rdma(sysfs: str = "/sys") -> list:
    """Every RDMA device with its PCI path, NUMA node and ports."""
    root = os.path.join(sysfs, "class", "infiniband")
    try:
        names = sorted(n for n in os.listdir(root) if RDMA_NAME.fullmatch(n))[:MAX_RDMA]
    except OSError:
        return []
    out = []
    for name in names:
        device = os.path.join(root, name, "device")
        path = [p for p in os.path.realpath(device).split(os.sep) if ADDRESS.fullmatch(p)]
        ports = []
        try:
            numbers = sorted(n for n in os.listdir(os.path.join(root, name, "ports")) if n.isdigit())[:MAX_PORTS]
        except OSError:
            numbers = []
        for n in numbers:
            state = PORT_STATE.fullmatch(_text(os.path.join(root, name, "ports", n, "state")) or "")
            layer = _text(os.path.join(root, name, "ports", n, "link_layer"))
            ports.append({"port": int(n), "state": state.group(1) if state else None,
                          "link_layer": layer if layer in ("InfiniBand", "Ethernet") else None})
        out.append({"name": name, "pci": path[-1] if path else None, "bridges": path[:-1][-MAX_DEPTH:],
                    "numa_node": numa_node(device), "ports": ports})
    return out


def read(sysfs: str = "/sys") -> dict:
    devices_dir = os.path.join(sysfs, "bus", "pci", "devices")
    try:
        names = sorted(n for n in os.listdir(devices_dir) if ADDRESS.fullmatch(n))
    except OSError:
        names = []
    devices: dict = {}
    acs: dict = {}
    for name in names:
        device = os.path.join(devices_dir, name)
        cls = _text(os.path.join(device, "class")) or ""
        if _text(os.path.join(device, "vendor")) != PCI_VENDOR_NVIDIA or not cls.startswith(PCI_CLASS_DISPLAY):
            continue
        if len(devices) == MAX_DEVICES:
            break
        path = [p for p in os.path.realpath(device).split(os.sep) if ADDRESS.fullmatch(p)]
        bridges = path[:-1][-MAX_DEPTH:]
        devices[name] = {"bridges": bridges, "iommu": iommu(device), "numa_node": numa_node(device)}
        for bridge in bridges:
            if bridge not in acs:
                acs[bridge] = acs_control(os.path.join(devices_dir, bridge))
    return {"devices": devices, "acs": acs, "rdma": rdma(sysfs)}


P2P_TEST = re.compile(r"gpu_p2p_access_cache_for_[0-9]{1,3}(?:,[0-9]{1,3}){0,63}\.json")
VERSION_DIR = re.compile(r"sglang-[0-9A-Za-z.+_-]{1,64}")  # plan/caches.py: one directory per version
P2P_PAIR = re.compile(r"[0-9]{1,3}->[0-9]{1,3}")
MAX_P2P_FILES = 16
MAX_P2P_BYTES = 64 * 1024
MAX_VERSIONS = 64


def boot_time(path: str = "/proc/stat"):
    """The kernel's boot time (``btime``, seconds since the epoch): after the cpu and intr lines,
    which run long on a large machine, so the file is read line by line up to it."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for _ in range(100_000):
                line = f.readline(1 << 22)
                if not line:
                    break
                if line.startswith("btime "):
                    value = line.split()[1] if len(line.split()) > 1 else ""
                    return int(value) if value.isdigit() else None
    except OSError:
        pass
    return None


HOME_LABEL = "~/.cache/sglang"  # plan/pcie.py HOME_TESTS


def sglang_p2p_tests(cache_root, home_cache=None) -> list:
    """SGLang's P2P test results: each version's directory under ``cache_root`` (None: none), then
    ``home_cache`` (0.5.9's place), at most MAX_P2P_FILES in all."""
    out: list = []
    places = []
    if cache_root:
        try:
            versions = sorted(n for n in os.listdir(cache_root) if VERSION_DIR.fullmatch(n))[:MAX_VERSIONS]
        except OSError:
            versions = []
        places += [(version, os.path.join(cache_root, version)) for version in versions]
    if home_cache:
        places.append((HOME_LABEL, home_cache))
    for label, directory in places:
        try:
            names = sorted(n for n in os.listdir(directory) if P2P_TEST.fullmatch(n))
        except OSError:
            continue
        for name in names:
            if len(out) == MAX_P2P_FILES:
                return out
            path = os.path.join(directory, name)
            try:
                # the directory is the service user's: no link followed, no FIFO waited on
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as f:
                    st = os.fstat(f.fileno())
                    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_P2P_BYTES:
                        continue
                    doc = json.loads(f.read(MAX_P2P_BYTES).decode("utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(doc, dict):
                pairs = {k: v for k, v in doc.items() if isinstance(k, str) and P2P_PAIR.fullmatch(k)
                         and isinstance(v, bool)}
                out.append({"file": f"{label}/{name}", "mtime": int(st.st_mtime), "pairs": pairs})
    return out


def main(argv: list) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sysfs", default="/sys")
    parser.add_argument("--cache-root")
    parser.add_argument("--home-cache")
    args = parser.parse_args(argv[1:])
    result = read(args.sysfs)
    if args.cache_root or args.home_cache:
        result["sglang_p2p"] = sglang_p2p_tests(args.cache_root, args.home_cache)
        result["boot_time"] = boot_time()
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
