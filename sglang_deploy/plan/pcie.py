"""Peer transfers over PCIe only where the bridges let them through: the ACS control of the bridges
between the GPUs a server uses, and their IOMMU domains, as the GPU probe read them from sysfs.

NVML's P2P status (``nvmlDeviceGetP2PStatus``) says what the GPUs and the driver support; it does
not see PCIe Access Control Services on the bridges between them. A bridge with ACS P2P Request
Redirect, Completion Redirect or Egress Control on sends peer requests up to the root complex
instead of across: the Linux kernel counts exactly those three bits as "ACS redirect" for
peer-to-peer DMA (drivers/pci/p2pdma.c ``pci_bridge_has_acs_redir``: PCI_ACS_RR | PCI_ACS_CR |
PCI_ACS_EC; drivers/pci/pci.c ``pci_disable_acs_redir`` clears the same bits). NCCL's user guide
(troubleshooting.html, "PCI Access Control Services (ACS)") warns that this redirection costs
"a significant performance reduction or even a hang"; NVIDIA/nccl#2079 is such a hang on 2x RTX
5880 Ada, whose GPP bridges read ``ACSCtl: 0x001d`` (SrcValid+ ReqRedir+ CmpltRedir+
UpstreamFwd+), cured by clearing ACS control or by ``NCCL_P2P_DISABLE=1``. Pure: the probe's words
in, a judgement out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.spec_checks import shown

# ACS control bits (include/uapi/linux/pci_regs.h PCI_ACS_*), lspci's names for them.
ACS_BITS = (
    (0x0001, "SrcValid"), (0x0002, "TransBlk"), (0x0004, "ReqRedir"), (0x0008, "CmpltRedir"),
    (0x0010, "UpstreamFwd"), (0x0020, "EgressCtrl"), (0x0040, "DirectTrans"),
)
#: The bits that redirect peer requests away from the direct path (p2pdma.c, module docstring).
ACS_REDIRECT = 0x0004 | 0x0008 | 0x0020
UNREADABLE = "UNREADABLE"
#: IOMMU domain types that translate the GPUs' DMA (Documentation/ABI/testing/sysfs-kernel-iommu_groups).
TRANSLATED = ("DMA", "DMA-FQ")
IOMMU_TYPES = ("none", "identity", "auto", "blocked", "unmanaged", *TRANSLATED)

_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_MAX_DEPTH = 16      # the probe's own bound on the bridges above one GPU
_MAX_BRIDGES = 1024  # ACS entries a probe may carry (64 GPUs x 16 bridges)
_SHOWN = 3           # bridges or GPUs named in a reason before "and N more"
_MAX_TEST_FILES = 16  # SGLang P2P test results a probe may carry (host/pcie_paths.py's own bound)
_MAX_TEST_PAIRS = 64 * 63
#: SGLang's P2P test result (custom_all_reduce_utils.py gpu_p2p_access_check),
#: gpu_p2p_access_cache_for_<CUDA_VISIBLE_DEVICES>.json: in its version's cache directory
#: (SGLANG_CACHE_DIR, 0.5.15 and later), or in the service user's ~/.cache/sglang (0.5.9 writes
#: there, expanduser("~/.cache/sglang")).
HOME_TESTS = "~/.cache/sglang"
_TEST_FILE = re.compile(r"(?:sglang-[0-9A-Za-z.+_-]{1,64}|" + re.escape(HOME_TESTS) + r")/"
                        r"gpu_p2p_access_cache_for_([0-9]{1,3}(?:,[0-9]{1,3}){0,63})\.json")
_TEST_PAIR = re.compile(r"([0-9]{1,3})->([0-9]{1,3})")

CLEAR, BROKEN, UNKNOWN, UNUSED = "clear", "broken", "unknown", "unused"


@dataclass(frozen=True)
class GpuPath:
    bridges: tuple[str, ...] | None  # root port first; None: sysfs did not know the GPU
    iommu: str | None                # an IOMMU_TYPES value, None where unread
    numa_node: int | None = None     # the kernel's; None where it has none (plan/rdma.py reads it)


@dataclass(frozen=True)
class Pcie:
    """The probe's ``pcie``: each GPU's path and IOMMU domain, and each bridge's ACS control (an int;
    None: no ACS capability; UNREADABLE: configuration space past 64 bytes needs root)."""

    gpus: tuple[GpuPath, ...]
    acs: dict[str, int | str | None]
    # SGLang's own P2P test, as its result files since the last boot say (for_gpus): the pairs of GPUs
    # (NVML indices, either direction) it found failing and passing, and the files that said so.
    test_failed: frozenset[tuple[int, int]] = frozenset()
    test_passed: frozenset[tuple[int, int]] = frozenset()
    test_files: tuple[str, ...] = ()


def acs_words(control: int) -> str:
    """``0x001d`` as lspci prints it: ``SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+`` (set bits only)."""
    on = [name + "+" for bit, name in ACS_BITS if control & bit]
    return " ".join(on) or "none set"


def _address(bus_id: Any) -> str | None:
    """NVML's bus id (``00000000:41:00.0``) as sysfs names the device (``0000:41:00.0``)."""
    if not isinstance(bus_id, str):
        return None
    m = re.fullmatch(r"\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\s*", bus_id)
    if not m:
        return None
    return "%04x:%02x:%02x.%s" % (int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16), m.group(4))


def read_answer(text: str) -> dict[str, Any]:
    """What host/pcie_paths.py printed (``text``, untrusted), as its JSON object: anything else, or
    over 1 MB, is an empty one."""
    if len(text) > 1_000_000:
        return {}
    try:
        read = json.loads(text)
    except ValueError:
        return {}
    return read if isinstance(read, dict) else {}


def for_gpus(text: str | dict[str, Any], bus_ids: Sequence[Any]) -> dict[str, Any] | None:
    """The probe's ``pcie`` from what host/pcie_paths.py printed (``text``, untrusted: anything but
    its one JSON object is no answer; or that object, :func:`read_answer`'s) and the probe's GPUs'
    bus ids, in NVML order: each GPU's entry of the devices sysfs listed at its address (null where
    none), and the ACS of the bridges on those paths. None where sysfs knew none of the GPUs.
    parse_pcie checks what it carries."""
    read = read_answer(text) if isinstance(text, str) else text
    if not isinstance(read.get("devices"), dict) or not isinstance(read.get("acs"), dict):
        return None
    devices, acs = read["devices"], read["acs"]
    gpus: list[dict[str, Any]] = []
    used: dict[str, Any] = {}
    for index, bus_id in enumerate(bus_ids):
        entry = devices.get(_address(bus_id) or "")
        if not isinstance(entry, dict):
            gpus.append({"index": index, "bridges": None, "iommu": None})
            continue
        bridges = entry.get("bridges")
        gpus.append({"index": index, "bridges": bridges, "iommu": entry.get("iommu"),
                     **({"numa_node": entry["numa_node"]} if type(entry.get("numa_node")) is int else {})})
        for bridge in bridges if isinstance(bridges, list) else ():
            if isinstance(bridge, str) and bridge in acs and len(used) < _MAX_BRIDGES:
                used[bridge] = acs[bridge]
    tests = _p2p_tests(read.get("sglang_p2p"), read.get("boot_time"), len(bus_ids))
    if all(g["bridges"] is None for g in gpus) and tests is None:
        return None
    return {"gpus": gpus, "acs": used, **({"sglang_p2p_test": tests} if tests else {})}


def _p2p_tests(files: Any, boot: Any, gpu_count: int) -> dict[str, Any] | None:
    """SGLang's P2P test results written since the kernel booted (an older one may describe other
    hardware or settings), as pairs of NVML indices: a file is named by the CUDA_VISIBLE_DEVICES the
    server ran with (the plan's, in PCI bus order: service_env.py) and keyed ``"i->j"`` over them."""
    if not isinstance(files, list) or type(boot) is not int:
        return None
    failed: set[tuple[int, int]] = set()
    passed: set[tuple[int, int]] = set()
    names: list[str] = []
    for entry in files[:_MAX_TEST_FILES]:
        if not isinstance(entry, dict) or not isinstance(entry.get("pairs"), dict):
            continue
        name, mtime = entry.get("file"), entry.get("mtime")
        m = _TEST_FILE.fullmatch(name) if isinstance(name, str) else None
        if m is None or type(mtime) is not int or mtime < boot:
            continue
        devices = [int(d) for d in m.group(1).split(",")]
        for key, ok in entry["pairs"].items():
            k = _TEST_PAIR.fullmatch(key) if isinstance(key, str) else None
            if k is None or not isinstance(ok, bool):
                continue
            a, b = int(k.group(1)), int(k.group(2))
            if a != b and a < len(devices) and b < len(devices) and max(devices[a], devices[b]) < gpu_count:
                (passed if ok else failed).add((devices[a], devices[b]))
        names.append(m.group(0))
    if not names:
        return None
    return {"failed": sorted([a, b] for a, b in failed), "passed": sorted([a, b] for a, b in passed), "files": names}


def parse_pcie(host: str, raw: Any, gpu_count: int) -> Pcie | None:
    """The probe's ``pcie``: null or absent is none (an older probe, no sysfs); malformed is refused,
    naming the field."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise PlanError(host, "probe.pcie", f"must be an object {{gpus, acs}} or null, got {shown(raw)}")
    gpus_raw, acs_raw = raw.get("gpus"), raw.get("acs")
    if not isinstance(gpus_raw, list) or len(gpus_raw) != gpu_count:
        raise PlanError(host, "probe.pcie.gpus", f"must list the {gpu_count} GPUs in NVML order, got {shown(gpus_raw)}")
    if not isinstance(acs_raw, dict) or len(acs_raw) > _MAX_BRIDGES:
        raise PlanError(host, "probe.pcie.acs", f"must map at most {_MAX_BRIDGES} bridge addresses to their ACS "
                                                f"control, got {shown(acs_raw)}")
    acs: dict[str, int | str | None] = {}
    for address, value in acs_raw.items():
        field = f"probe.pcie.acs[{shown(address)}]"
        if not isinstance(address, str) or not _ADDRESS.fullmatch(address):
            raise PlanError(host, "probe.pcie.acs", f"{shown(address)} is not a PCI address such as 0000:40:03.1")
        ok = value is None or value == UNREADABLE or (type(value) is int and 0 <= value <= 0xFFFF)
        if not ok:
            raise PlanError(host, field, f"must be the 16-bit ACS control register, null or {UNREADABLE}, "
                                         f"got {shown(value)}")
        acs[address] = value
    paths = []
    for i, g in enumerate(gpus_raw):
        field = f"probe.pcie.gpus[{i}]"
        if not isinstance(g, dict) or g.get("index") != i:
            raise PlanError(host, field, f"must be an object with index {i}, got {shown(g)}")
        bridges, iommu = g.get("bridges"), g.get("iommu")
        if bridges is not None:
            if not isinstance(bridges, list) or len(bridges) > _MAX_DEPTH or not all(
                    isinstance(b, str) and _ADDRESS.fullmatch(b) for b in bridges):
                raise PlanError(host, f"{field}.bridges", f"must be at most {_MAX_DEPTH} PCI addresses, root port "
                                                          f"first, or null, got {shown(bridges)}")
            missing = [b for b in bridges if b not in acs]
            if missing:
                raise PlanError(host, f"{field}.bridges", f"bridge {missing[0]} has no entry in probe.pcie.acs")
        if iommu is not None and iommu not in IOMMU_TYPES:
            raise PlanError(host, f"{field}.iommu", f"must be one of {', '.join(IOMMU_TYPES)} or null, "
                                                    f"got {shown(iommu)}")
        numa = g.get("numa_node")
        if numa is not None and (type(numa) is not int or not 0 <= numa < 1024):
            raise PlanError(host, f"{field}.numa_node", f"must be a NUMA node number or null, got {shown(numa)}")
        paths.append(GpuPath(tuple(bridges) if bridges is not None else None, iommu, numa))
    test = raw.get("sglang_p2p_test")
    if test is None:
        return Pcie(tuple(paths), acs)
    field = "probe.pcie.sglang_p2p_test"
    if not isinstance(test, dict):
        raise PlanError(host, field, f"must be an object {{failed, passed, files}} or null, got {shown(test)}")
    pairs: dict[str, frozenset[tuple[int, int]]] = {}
    for key in ("failed", "passed"):
        value = test.get(key)
        ok = isinstance(value, list) and len(value) <= _MAX_TEST_PAIRS and all(
            isinstance(p, list) and len(p) == 2 and all(type(i) is int and 0 <= i < gpu_count for i in p)
            and p[0] != p[1] for p in value)
        if not ok or not isinstance(value, list):
            raise PlanError(host, f"{field}.{key}", f"must list pairs [i, j] of GPU indices below {gpu_count}, "
                                                    f"got {shown(value)}")
        pairs[key] = frozenset((p[0], p[1]) for p in value)
    files = test.get("files")
    if not isinstance(files, list) or not 0 < len(files) <= _MAX_TEST_FILES or not all(
            isinstance(f, str) and _TEST_FILE.fullmatch(f) for f in files):
        raise PlanError(host, f"{field}.files", "must name at most 16 result files such as "
                                                "sglang-0.5.23/gpu_p2p_access_cache_for_0,1.json, "
                                                f"got {shown(files)}")
    return Pcie(tuple(paths), acs, pairs["failed"], pairs["passed"], tuple(files))


@dataclass(frozen=True)
class PcieCheck:
    """Peer transfers over PCIe between the GPUs a server uses: ``status`` (the rule fact
    ``pcie_p2p``: clear, broken, unknown or unused) and one line saying why (``pcie_p2p_detail``);
    ``warnings``: what the plan says without deciding on it (an IOMMU that translates)."""

    status: str
    detail: str
    warnings: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "detail": self.detail, "warnings": list(self.warnings)}


def between(a: Sequence[str], b: Sequence[str]) -> tuple[str, ...]:
    """The bridges a peer request between two GPUs crosses: each side's below their lowest common
    bridge, and that bridge (p2pdma.c ``calc_map_type_and_dist`` checks the same ones). GPUs under
    different root ports share none: every bridge of both paths."""
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    shared = (a[common - 1],) if common else ()
    return (*a[common:], *b[common:], *shared)


def _more(items: Sequence[str]) -> str:
    more = f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return ", ".join(items[:_SHOWN]) + more


def _things(noun: str, items: Sequence[str]) -> str:
    """``bridge 0000:40:01.1`` or ``bridges 0000:40:01.1, 0000:60:01.1`` (bounded by _more)."""
    return f"{noun}{'s' if len(items) > 1 else ''} {_more(items)}"


def judge(indices: Sequence[int], links: Sequence[Sequence[str]], p2p_read: Sequence[Sequence[bool | None]],
          pcie: Pcie | None, source: str) -> PcieCheck:
    """``indices``: the GPUs the server uses; ``links``/``p2p_read``: the probe's matrices. Only pairs
    that talk over PCIe (no NVLink between them) and that NVML does not already call P2P-less
    count: NVLink bypasses the bridges, and a pair without P2P is planned without it already."""
    pairs = [(a, b) for k, a in enumerate(indices) for b in indices[k + 1:]
             if not str(links[a][b]).startswith("NV") and p2p_read[a][b] is not False]
    if not pairs:
        return PcieCheck(UNUSED, "no pair of this server's GPUs relies on peer transfers over PCIe (NVLink between "
                                 "them, a single GPU, or NVML reports no P2P)")
    if source == "declared":
        return PcieCheck(UNKNOWN, "declared hardware: ACS and the IOMMU are not read, so the plan goes by NVML's "
                                  "P2P status alone")
    if pcie is None:
        return PcieCheck(UNKNOWN, "the probe read no PCIe paths (sysfs did not know the GPUs, an older probe), so "
                                  "the plan goes by NVML's P2P status alone")
    translated = sorted({i for pair in pairs for i in pair if pcie.gpus[i].iommu in TRANSLATED})
    warnings = tuple([f"IOMMU translates the DMA of {_things('GPU', [str(i) for i in translated])} (iommu group type "
                      f"{pcie.gpus[translated[0]].iommu}): NCCL's troubleshooting guide names IOMMU translation as "
                      "a cause of slow or hanging peer transfers; iommu=pt on the kernel command line gives the "
                      "GPUs identity domains"] if translated else [])
    redirect: dict[str, int] = {}
    unread: list[str] = []
    unknown_gpus: list[int] = []
    broken_pairs: list[str] = []
    for a, b in pairs:
        pa, pb = pcie.gpus[a].bridges, pcie.gpus[b].bridges
        if pa is None or pb is None:
            unknown_gpus.extend(i for i, p in ((a, pa), (b, pb)) if p is None)
            continue
        hit = False
        for bridge in between(pa, pb):
            value = pcie.acs[bridge]
            if isinstance(value, int) and value & ACS_REDIRECT:
                redirect[bridge] = value
                hit = True
            elif value == UNREADABLE and bridge not in unread:
                unread.append(bridge)
        if hit:
            broken_pairs.append(f"{a}-{b}")
    if redirect:
        named = [f"{bridge} (ACS control 0x{value:04x}: {acs_words(value)})" for bridge, value in redirect.items()]
        return PcieCheck(BROKEN, f"ACS redirects peer requests on {_things('bridge', named)} between GPUs "
                                 f"{_more(broken_pairs)}", warnings)
    homes = sum(1 for name in pcie.test_files if name.startswith(HOME_TESTS + "/"))
    where = ("in the cache directory" if not homes else "in the service user's home" if homes == len(pcie.test_files)
             else "in the cache directory and the service user's home")
    tested = f"({_more(list(pcie.test_files))} {where}, written since the last boot)"
    failed = [f"{a}-{b}" for a, b in pairs if (a, b) in pcie.test_failed or (b, a) in pcie.test_failed]
    if failed:
        return PcieCheck(BROKEN, f"SGLang's own P2P test failed between GPUs {_more(failed)} {tested}; the deploy "
                                 "removes results older than the last boot, and deleting the file tests again",
                         warnings)
    if all((a, b) in pcie.test_passed and (b, a) in pcie.test_passed for a, b in pairs):
        return PcieCheck(CLEAR, f"SGLang's own P2P test passed between GPUs "
                                f"{_more([f'{a}-{b}' for a, b in pairs])} {tested}", warnings)
    if unknown_gpus:
        gpus = sorted(set(unknown_gpus))
        return PcieCheck(UNKNOWN, f"sysfs did not know {_things('GPU', [str(i) for i in gpus])}, so the plan goes by "
                                  "NVML's P2P status alone",
                         warnings)
    if unread:
        return PcieCheck(UNKNOWN, f"the ACS control of {_things('bridge', unread)} could "
                                  "not be read (configuration space past 64 bytes needs root), so the plan goes by "
                                  "NVML's P2P status alone", warnings)
    return PcieCheck(CLEAR, f"no ACS redirect on the bridges between GPUs {_more([f'{a}-{b}' for a, b in pairs])} "
                            "(ACS control read from sysfs)", warnings)
