"""The hardware model: what GPUs a host has and how they are connected.

Two inputs give the same `HostHardware`:

* the GPU probe's JSON (`PROBE_SCHEMA`), emitted on the host by the deploy's
  probe from NVML (or nvidia-smi), and
* hardware declared in inventory data (``sglang_gpus: {model, count,
  topology}``) for offline planning, completed from ``data/gpus.yaml``.

`select_gpus` then derives what the planner needs for the GPUs SGLang will
use: architecture key, topology class, P2P, GeForce or not, memory tier.

Probe JSON, version 1 (every field but ``gpus`` may be null or absent)::

    {
      "schema": 1,
      "source": "nvml" | "nvidia-smi",
      "hostname": "gpu-a6000-1",
      "driver_version": "550.127.05",
      "cuda_driver_version": "12.4",
      "gpus": [
        {"index": 0, "name": "NVIDIA RTX A6000", "uuid": "GPU-...",
         "compute_capability": "8.6", "memory_total_mib": 49140,
         "pci_bus_id": "00000000:01:00.0", "brand": "NVIDIA_RTX",
         "fabric": null}
      ],
      "topology": {
        "links": [["X", "NV4"], ["NV4", "X"]],
        "p2p_read": [[null, true], [true, null]],
        "nvswitch": false
      },
      "fabric_manager": null
    }

``links`` uses the vocabulary of ``nvidia-smi topo -m``: ``X`` on the
diagonal, ``NV<n>`` for n NVLinks between the pair, else the closest common
PCIe ancestor (``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``). ``p2p_read`` is
NVML's peer-to-peer read capability per pair (``nvmlDeviceGetP2PStatus``).
``brand`` is NVML's brand name without its ``NVML_BRAND_`` prefix.
``fabric`` is the GPU's registration with the NVLink fabric, from NVML's
``nvmlDeviceGetGpuFabricInfo[V]``: ``{"state": "COMPLETED", "status": "SUCCESS"}``,
the state an NVML_GPU_FABRIC_STATE_* name without its prefix (``NOT_STARTED``,
``IN_PROGRESS``, ``COMPLETED``; ``UNKNOWN_<n>`` for a value the bindings do not
name, ``UNREADABLE`` where the call failed), the status the nvmlReturn_t NVML
fills in once the state is COMPLETED (``SUCCESS`` or an NVML_ERROR_* name
without its prefix, null before). Null or absent: the GPU is on no fabric (NVML
answered NOT_SUPPORTED), or the probe could not or did not ask (older probes,
bindings without the call, the nvidia-smi fallback). ``fabric_manager`` is what
``systemctl is-active nvidia-fabricmanager.service`` answered, asked only where
a GPU reports a fabric; null where it was not asked or not answered.
``pcie`` (absent where sysfs knows none of the GPUs) is read from sysfs: per GPU
in NVML order ``{"index", "bridges", "iommu"}``, the bridges above it from the
root port down (null where sysfs has no NVIDIA device at its address) and its
IOMMU group's domain type (``none`` without an IOMMU); ``acs`` maps each bridge
to its ACS control register, null where it has no ACS capability,
``UNREADABLE`` where the probe could not read past 64 bytes of configuration
space (plan/pcie.py judges them)::

      "pcie": {"gpus": [{"index": 0, "bridges": ["0000:40:03.1"], "iommu": "identity"}],
               "acs": {"0000:40:03.1": 29}}
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.fabric import Fabric, parse_fabric, parse_service_state
from sglang_deploy.plan.pcie import Pcie, parse_pcie
from sglang_deploy.plan.rdma import RdmaDevice, parse_rdma
from sglang_deploy.plan.spec_checks import key_text, shown

PROBE_SCHEMA = 1

TOPOLOGY_CLASSES = ("pcie", "nvlink-pairs", "nvlink-partial", "nvlink-all", "nvswitch")
"""Topology classes of the GPUs a server uses.

pcie: no NVLink between any two of them.
nvlink-pairs: NVLink bridges join GPUs two by two (each GPU has at most one
  NVLink peer), e.g. 2x RTX A6000 with a bridge, or 4 cards as two bridged pairs.
nvlink-partial: some NVLink, neither pairs nor all-to-all.
nvlink-all: direct NVLink between every pair, more than two GPUs, no switch.
nvswitch: every pair joined through NVSwitch (HGX/DGX boards).
"""

PCIE_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
_NV_RE = re.compile(r"^NV(\d+)$")

# (upper bound in GiB, tier name) as SGLang sizes chunked prefill and the
# decode CUDA graph batch (server_args.py _handle_gpu_memory_settings; arg_groups/memory_hook.py in 0.5.23).
MEMORY_TIERS = ((20, "lt20gb"), (35, "lt35gb"), (60, "lt60gb"), (160, "lt160gb"))
MEMORY_TIER_TOP = "ge160gb"


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_capability: str
    memory_mib: int
    brand: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    fabric: Fabric | None = None  # None: on no fabric, or not read (declared hardware, older probes)


@dataclass(frozen=True)
class HostHardware:
    """All GPUs of one host and their interconnect, as probed or declared."""

    gpus: tuple[Gpu, ...]
    links: tuple[tuple[str, ...], ...]
    p2p_read: tuple[tuple[bool | None, ...], ...]
    nvswitch: bool
    source: str  # "probe:nvml", "probe:nvidia-smi" or "declared"
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    fabric_manager: str | None = None  # `systemctl is-active nvidia-fabricmanager.service`, where asked
    pcie: Pcie | None = None  # the GPUs' PCIe paths, their bridges' ACS and IOMMU domains (plan/pcie.py)
    rdma: tuple[RdmaDevice, ...] = ()  # the host's RDMA devices (plan/rdma.py)


@dataclass(frozen=True)
class GpuSet:
    """The GPUs one SGLang server uses, with everything the planner derives."""

    indices: tuple[int, ...]
    model: str
    compute_capability: str
    arch: str
    memory_mib: int
    memory_tier: str
    geforce: bool
    topology: str
    p2p: bool
    nvswitch: bool
    source: str

    @property
    def count(self) -> int:
        return len(self.indices)

    @property
    def memory_gib(self) -> float:
        return round(self.memory_mib / 1024, 1)

    @property
    def sm_major(self) -> int | None:
        """The compute capability's major ("10.0" -> 10), as SGLang reads torch.cuda.get_device_capability()
        to pick kernels; None when the figure is not a number."""
        major = self.compute_capability.split(".", 1)[0]
        return int(major) if major.isdigit() else None


# ---------------------------------------------------------------------------
# GPU database (data/gpus.yaml)


def gpu_name(name: str) -> str:
    """A GPU model's name as one spelling of it, whoever reported it: without the probe's "NVIDIA "
    prefix, blanks, '_' and '-' folded to one blank ("NVIDIA H100 80GB HBM3" is "H100 80GB HBM3")."""
    name = name.strip()
    if name.lower().startswith("nvidia "):
        name = name[7:]
    return re.sub(r"[\s_-]+", " ", name).strip()


def _fold(name: str) -> str:
    return gpu_name(name).lower()


def same_gpu_model(a: str, b: str) -> bool:
    """Whether two GPU names are the same model ("NVIDIA H100 80GB HBM3" is "H100 80GB HBM3")."""
    return _fold(a) == _fold(b)


@dataclass(frozen=True)
class GpuModel:
    name: str
    aliases: tuple[str, ...]
    compute_capability: str
    memory_gib: int
    brand: str
    p2p: bool
    nvlink: str
    default_topology: str
    #: NVML's total (nvmlDeviceGetMemoryInfo, nvml.h), MiB, from a recorded or published output
    #: (data/gpus.yaml memory_source); None: only the marketed memory_gib is known
    memory_mib: int | None = None
    #: Datasheet performance figures (data/gpus.yaml, each named in perf_source), for the speed model;
    #: None: not published for this model (FP8 before Ada, FP4 before Blackwell, NVLink where it has none).
    #: Memory bandwidth, GB/s (decimal, as datasheets state)
    hbm_gbps: float | None = None
    #: Dense BF16 tensor-core TFLOPS (not the "with sparsity" figure)
    bf16_tflops: float | None = None
    #: Dense FP8 tensor-core TFLOPS
    fp8_tflops: float | None = None
    #: Dense FP4 tensor-core TFLOPS
    fp4_tflops: float | None = None
    #: NVLink (or NVLink bridge) bandwidth per GPU, total bidirectional GB/s
    nvlink_gbps: float | None = None
    #: Host interface bandwidth, bidirectional GB/s (PCIe 4.0 x16: 64, PCIe 5.0 x16: 128)
    pcie_gbps: float | None = None
    #: The datasheet(s) the figures above come from, and any figure derived
    perf_source: str | None = None

    @property
    def planned_mib(self) -> int:
        """The memory a declared GPU of this model is planned with: NVML's total where known."""
        return self.memory_mib if self.memory_mib is not None else self.memory_gib * 1024


PERF_FIELDS = ("hbm_gbps", "bf16_tflops", "fp8_tflops", "fp4_tflops", "nvlink_gbps", "pcie_gbps")
"""The datasheet figures of a `GpuModel`: each a positive finite number, or null where not published."""


def _perf_figure(entry: dict[str, Any], key: str) -> float | None:
    """A datasheet figure of a gpus.yaml entry: a positive finite number, or None (null or absent)."""
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"GPU model {entry.get('name')!r}: {key} must be a positive finite number or null, "
                         f"got {value!r}")
    return float(value)


def _perf_source(entry: dict[str, Any]) -> str | None:
    value = entry.get("perf_source")
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"GPU model {entry.get('name')!r}: perf_source must be a non-empty string naming "
                         f"the datasheet, or null, got {value!r}")
    return value


class GpuDatabase:
    def __init__(self, entries: Iterable[dict[str, Any]]) -> None:
        self._by_name: dict[str, GpuModel] = {}
        self.models: list[GpuModel] = []
        for entry in entries:
            model = GpuModel(
                name=entry["name"],
                aliases=tuple(entry.get("aliases") or ()),
                compute_capability=str(entry["compute_capability"]),
                memory_gib=int(entry["memory_gib"]),
                brand=entry["brand"],
                p2p=bool(entry["p2p"]),
                nvlink=entry["nvlink"],
                default_topology=entry["default_topology"],
                memory_mib=int(entry["memory_mib"]) if entry.get("memory_mib") is not None else None,
                hbm_gbps=_perf_figure(entry, "hbm_gbps"),
                bf16_tflops=_perf_figure(entry, "bf16_tflops"),
                fp8_tflops=_perf_figure(entry, "fp8_tflops"),
                fp4_tflops=_perf_figure(entry, "fp4_tflops"),
                nvlink_gbps=_perf_figure(entry, "nvlink_gbps"),
                pcie_gbps=_perf_figure(entry, "pcie_gbps"),
                perf_source=_perf_source(entry),
            )
            self.models.append(model)
            for key in (model.name, *model.aliases):
                self._by_name[_fold(key)] = model

    def lookup(self, name: str) -> GpuModel | None:
        return self._by_name.get(_fold(name))


# ---------------------------------------------------------------------------
# Probe JSON


def _req(host: str, field: str, obj: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in obj or obj[key] is None:
        raise PlanError(host, f"{field}.{key}", "missing")
    value = obj[key]
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise PlanError(host, f"{field}.{key}", f"expected {want}, got {value!r}")
    return value


def _capability(host: str, field: str, value: Any) -> str:
    text = str(value)
    if not re.fullmatch(r"\d+\.\d+", text):
        raise PlanError(host, field, f"compute capability must look like '8.6', got {value!r}")
    return text


def _square(host: str, field: str, rows: Any, n: int) -> list[list[Any]]:
    if not isinstance(rows, list) or len(rows) != n or any(not isinstance(r, list) or len(r) != n for r in rows):
        raise PlanError(host, field, f"must be a {n}x{n} matrix (one row and column per GPU)")
    return rows


def parse_probe(host: str, probe: Any) -> HostHardware:
    """Validate the probe's JSON (already decoded) and build `HostHardware`."""
    if not isinstance(probe, dict):
        raise PlanError(host, "probe", "must be a JSON object")
    if probe.get("schema") != PROBE_SCHEMA:
        raise PlanError(host, "probe.schema", f"expected {PROBE_SCHEMA}, got {probe.get('schema')!r}")
    gpus_raw = _req(host, "probe", probe, "gpus", list)
    if not gpus_raw:
        raise PlanError(host, "probe.gpus", "no NVIDIA GPU found on this host")
    gpus = []
    for i, raw in enumerate(gpus_raw):
        field = f"probe.gpus[{i}]"
        if not isinstance(raw, dict):
            raise PlanError(host, field, "must be an object")
        index = _req(host, field, raw, "index", int)
        if index != i:
            raise PlanError(host, f"{field}.index", f"expected {i} (GPUs in NVML order), got {index}")
        mem = _req(host, field, raw, "memory_total_mib", int)
        if mem <= 0:
            raise PlanError(host, f"{field}.memory_total_mib", f"must be positive, got {mem}")
        gpus.append(
            Gpu(
                index=index,
                name=_req(host, field, raw, "name", str),
                compute_capability=_capability(host, f"{field}.compute_capability",
                                               _req(host, field, raw, "compute_capability", (str, int, float))),
                memory_mib=mem,
                brand=str(raw.get("brand") or "UNKNOWN").upper(),
                uuid=raw.get("uuid"),
                pci_bus_id=raw.get("pci_bus_id"),
                fabric=parse_fabric(host, f"{field}.fabric", raw.get("fabric")),
            )
        )
    n = len(gpus)
    topo = probe.get("topology") or {}
    if not isinstance(topo, dict):
        raise PlanError(host, "probe.topology", "must be an object")
    if topo.get("links") is None:
        links = [["X" if i == j else "SYS" for j in range(n)] for i in range(n)]
    else:
        links = _square(host, "probe.topology.links", topo["links"], n)
    for i in range(n):
        for j in range(n):
            value = links[i][j]
            ok = value == "X" if i == j else (value in PCIE_LEVELS or bool(_NV_RE.match(str(value))))
            if not ok:
                raise PlanError(host, f"probe.topology.links[{i}][{j}]", f"unknown link {value!r}")
            if links[j][i] != value:
                raise PlanError(host, f"probe.topology.links[{i}][{j}]", "matrix is not symmetric")
    if topo.get("p2p_read") is None:
        p2p = [[None] * n for _ in range(n)]
    else:
        p2p = _square(host, "probe.topology.p2p_read", topo["p2p_read"], n)
        for i in range(n):
            for j in range(n):
                if p2p[i][j] not in (True, False, None):
                    raise PlanError(host, f"probe.topology.p2p_read[{i}][{j}]", "must be true, false or null")
    nvswitch = topo.get("nvswitch", False)
    if not isinstance(nvswitch, bool):
        raise PlanError(host, "probe.topology.nvswitch", f"must be true or false, got {nvswitch!r}")
    source = probe.get("source") or "nvml"
    return HostHardware(
        gpus=tuple(gpus),
        links=tuple(tuple(r) for r in links),
        p2p_read=tuple(tuple(r) for r in p2p),
        nvswitch=nvswitch,
        source=f"probe:{source}",
        driver_version=probe.get("driver_version"),
        cuda_driver_version=probe.get("cuda_driver_version"),
        fabric_manager=parse_service_state(host, "probe.fabric_manager", probe.get("fabric_manager")),
        pcie=parse_pcie(host, probe.get("pcie"), n),
        rdma=parse_rdma(host, probe.get("rdma")),
    )


# ---------------------------------------------------------------------------
# Declared hardware

# Bounds on declared hardware: beyond them a value is a typo, and a huge count would
# build a count x count link matrix. The largest boards today hold 16 GPUs (HGX-2).
MAX_GPUS = 64
MAX_MEMORY_GIB = 4096



def _default_topology(model: GpuModel, count: int) -> str:
    """The model's usual board topology; one GPU has no link to another, which is what
    `topology_class` calls ``pcie`` (a single SXM GPU is common in cloud instances)."""
    return model.default_topology if count >= 2 else "pcie"


def declared_hardware(host: str, declared: Any, db: GpuDatabase) -> HostHardware:
    """Hardware from inventory data: ``{model, count, topology?}``."""
    field = "sglang_gpus"
    if not isinstance(declared, dict):
        raise PlanError(host, field, "must be a mapping like {model: 'RTX A6000', count: 2}")
    unknown = set(declared) - {"model", "count", "topology", "memory_gib"}
    if unknown:
        raise PlanError(host, f"{field}.{sorted(map(key_text, unknown))[0]}",
                        "unknown key (known: model, count, topology, memory_gib)")
    name = declared.get("model")
    if not isinstance(name, str) or not name.strip():
        raise PlanError(host, f"{field}.model", "missing GPU model name, e.g. 'RTX A6000'")
    model = db.lookup(name)
    if model is None:
        known = ", ".join(m.name for m in db.models)
        raise PlanError(host, f"{field}.model", f"unknown GPU model {shown(name)}; known: {known}")
    count = declared.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise PlanError(host, f"{field}.count", f"must be a positive integer, got {shown(count)}")
    if count > MAX_GPUS:
        raise PlanError(host, f"{field}.count", f"{count} GPUs in one host? at most {MAX_GPUS} are planned for")
    topology = declared.get("topology") or _default_topology(model, count)
    if topology not in TOPOLOGY_CLASSES:
        raise PlanError(host, f"{field}.topology",
                        f"unknown topology {shown(topology)}; known: {', '.join(TOPOLOGY_CLASSES)}")
    if topology != "pcie" and model.nvlink == "none":
        raise PlanError(host, f"{field}.topology",
                        f"{model.name} has no NVLink, so topology {topology!r} is impossible")
    if topology == "nvswitch" and model.nvlink != "sxm":
        raise PlanError(host, f"{field}.topology", f"{model.name} is not an SXM board; NVSwitch needs SXM GPUs")
    if topology in ("nvlink-pairs", "nvlink-all", "nvswitch", "nvlink-partial") and count < 2:
        raise PlanError(host, f"{field}.topology", f"{topology!r} needs at least 2 GPUs, count is {count}: "
                        "one GPU has no links to another (leave topology out, or declare 'pcie')")
    # NVML's total of this model where recorded (data/gpus.yaml memory_mib), so an offline plan
    # sizes the GPU as the probe will find it; a declared memory_gib wins.
    mem_gib = declared.get("memory_gib", model.planned_mib / 1024)
    if (isinstance(mem_gib, bool) or not isinstance(mem_gib, (int, float)) or not math.isfinite(mem_gib)
            or not 1 / 1024 <= mem_gib <= MAX_MEMORY_GIB):
        raise PlanError(host, f"{field}.memory_gib",
                        f"must be a number of GiB between 1/1024 and {MAX_MEMORY_GIB}, got {shown(mem_gib)}")

    def link(i: int, j: int) -> str:
        if i == j:
            return "X"
        if topology == "nvswitch":
            return "NV18" if model.compute_capability.startswith("9") else "NV12"
        if topology == "nvlink-all" or (topology in ("nvlink-pairs", "nvlink-partial") and i // 2 == j // 2):
            return "NV4"
        return "SYS"

    links = tuple(tuple(link(i, j) for j in range(count)) for i in range(count))
    p2p_ok = model.p2p
    p2p = tuple(
        tuple(None if i == j else (p2p_ok or links[i][j].startswith("NV")) for j in range(count))
        for i in range(count)
    )
    brand = "GEFORCE" if model.brand == "geforce" else model.brand.upper()
    gpus = tuple(
        Gpu(index=i, name=model.name, compute_capability=model.compute_capability,
            memory_mib=int(mem_gib * 1024), brand=brand)
        for i in range(count)
    )
    return HostHardware(gpus=gpus, links=links, p2p_read=p2p, nvswitch=topology == "nvswitch", source="declared")


def check_declared_matches_probe(host: str, declared: HostHardware, probed: HostHardware, db: GpuDatabase) -> None:
    """Stop a host whose probed GPUs are not what its inventory declares."""
    want = declared.gpus[0]
    have = probed.gpus
    names = sorted({g.name for g in have})
    want_model = db.lookup(want.name)
    have_models = {db.lookup(g.name) for g in have}
    if want_model is None or have_models != {want_model}:
        raise PlanError(host, "sglang_gpus.model",
                        f"inventory declares {len(declared.gpus)}x {want.name}, "
                        f"the host has {len(have)}x {', '.join(names)}")
    if len(have) < len(declared.gpus):
        raise PlanError(host, "sglang_gpus.count",
                        f"inventory declares {len(declared.gpus)}x {want.name}, the host has {len(have)}")


# ---------------------------------------------------------------------------
# Deriving what the planner needs


def memory_tier(memory_mib: int) -> str:
    gib = memory_mib / 1024
    for bound, name in MEMORY_TIERS:
        if gib < bound:
            return name
    return MEMORY_TIER_TOP


def topology_class(links: Sequence[Sequence[str]], nvswitch: bool, indices: Sequence[int]) -> str:
    pairs = [(a, b) for k, a in enumerate(indices) for b in indices[k + 1:]]
    nv = {(a, b) for a, b in pairs if str(links[a][b]).startswith("NV")}
    if not nv:
        return "pcie"
    if len(nv) == len(pairs):
        if nvswitch:
            return "nvswitch"
        return "nvlink-all" if len(indices) > 2 else "nvlink-pairs"
    peers: dict[int, int] = {}
    for a, b in nv:
        peers[a] = peers.get(a, 0) + 1
        peers[b] = peers.get(b, 0) + 1
    return "nvlink-pairs" if max(peers.values()) == 1 else "nvlink-partial"


def is_geforce(gpu: Gpu) -> bool:
    return gpu.brand in ("GEFORCE", "TITAN") or "geforce" in gpu.name.lower()


def select_gpus(
    host: str,
    hw: HostHardware,
    arch_of: dict[str, str],
    indices: Sequence[int] | None = None,
) -> GpuSet:
    """The GPUs the server will use (all, or ``sglang_gpu_indices``), derived.

    ``arch_of`` maps compute capability ("8.6") to architecture key ("sm86");
    it comes from the architecture profiles, so a capability without a profile
    is an error here rather than a guess.
    """
    n = len(hw.gpus)
    if indices is None:
        chosen = list(range(n))
        field = "sglang_gpus" if hw.source == "declared" else "probe.gpus"
    else:
        field = "sglang_gpu_indices"
        if not isinstance(indices, (list, tuple)) or not indices:
            raise PlanError(host, field, "must be a non-empty list of GPU indices")
        for i in indices:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
                raise PlanError(host, field, f"index {i!r} is not a GPU of this host (0..{n - 1})")
        if len(set(indices)) != len(indices):
            raise PlanError(host, field, "an index appears twice")
        chosen = sorted(indices)
    gpus = [hw.gpus[i] for i in chosen]
    kinds = sorted({(g.name, g.compute_capability, g.memory_mib) for g in gpus})
    if len(kinds) > 1:
        listing = "; ".join(f"GPU {g.index}: {g.name} (sm {g.compute_capability}, {g.memory_mib} MiB)" for g in gpus)
        raise PlanError(host, field,
                        f"mixed GPUs ({listing}); one server needs identical GPUs: "
                        "set sglang_gpu_indices to the ones to use")
    first = gpus[0]
    arch = arch_of.get(first.compute_capability)
    if arch is None:
        known = ", ".join(f"{cc} ({a})" for cc, a in sorted(arch_of.items()))
        raise PlanError(host, f"{field}[{first.index}].compute_capability",
                        f"{first.name} has compute capability {first.compute_capability}, which no architecture "
                        f"profile covers (known: {known})")
    geforce = is_geforce(first)

    def pair_p2p(a: int, b: int) -> bool:
        known = hw.p2p_read[a][b]
        if known is not None:
            return known
        # Unknown (nvidia-smi fallback): GeForce cards have P2P only over an NVLink bridge.
        return not geforce or str(hw.links[a][b]).startswith("NV")

    p2p = all(pair_p2p(a, b) for k, a in enumerate(chosen) for b in chosen[k + 1:])
    return GpuSet(
        indices=tuple(chosen),
        model=first.name,
        compute_capability=first.compute_capability,
        arch=arch,
        memory_mib=first.memory_mib,
        memory_tier=memory_tier(first.memory_mib),
        geforce=geforce,
        topology=topology_class(hw.links, hw.nvswitch, chosen),
        p2p=p2p,
        nvswitch=hw.nvswitch,
        source=hw.source,
    )
