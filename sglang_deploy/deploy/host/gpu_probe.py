#!/usr/bin/env python3
"""sglang-deploy GPU probe: what GPUs this host has and how they are connected.

The deploy uploads this one file to each GPU host and runs it with the host's
own ``python3`` (3.9 or newer). It needs nothing but the standard library;
NVIDIA's NVML bindings (nvidia-ml-py, imported as ``pynvml``) are used when
importable, else ``nvidia-smi``. It prints the probe JSON, schema 1 (defined in
``sglang_deploy/plan/hardware.py`` of sglang-deploy), on stdout.

Exit status:
  0  the JSON is on stdout
  3  no NVIDIA driver, or a driver but no GPU: one line on stderr
  4  anything else went wrong: one line on stderr
"""

from __future__ import annotations

import csv
import ctypes
import json
import re
import shutil
import socket
import subprocess
import sys
import warnings

SCHEMA = 1
EXIT_NO_GPU = 3
EXIT_FAILED = 4
MIB = 1024 * 1024
SMI_TIMEOUT_S = 60
SYSTEMCTL_TIMEOUT_S = 10

# NVML error codes (nvml.h); the bindings' own constants are used when present.
_ERR_INVALID_ARGUMENT = 2
_ERR_NOT_SUPPORTED = 3
_ERR_NOT_FOUND = 6
_ERR_DRIVER_NOT_LOADED = 9
_ERR_LIBRARY_NOT_FOUND = 12
_ERR_FUNCTION_NOT_FOUND = 13
_ERR_ARGUMENT_VERSION_MISMATCH = 25

# nvmlGpuTopologyLevel_t -> the vocabulary of `nvidia-smi topo -m`.
_TOPOLOGY_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_PCIE_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")

# nvmlBrandType_t names, for bindings too old to define them all.
_BRANDS = {
    0: "UNKNOWN", 1: "QUADRO", 2: "TESLA", 3: "NVS", 4: "GRID", 5: "GEFORCE", 6: "TITAN",
    7: "NVIDIA_VAPPS", 8: "NVIDIA_VPC", 9: "NVIDIA_VCS", 10: "NVIDIA_VWS",
    11: "NVIDIA_CLOUD_GAMING", 12: "QUADRO_RTX", 13: "NVIDIA_RTX", 14: "NVIDIA",
    15: "GEFORCE_RTX", 16: "TITAN_RTX",
}

_MAX_GPU_NVLINKS = 18  # NVLinks of one GPU: V100 6, A100 12, H100/H200/B200 18

# nvmlGpuFabricState_t (nvml.h NVML_GPU_FABRIC_STATE_*; nvidia-ml-py pynvml.py defines the same
# values), for bindings too old to define them.
_FABRIC_STATES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}
_FABRIC_COMPLETED = 3

_MISSING = object()  # the bindings or the driver lack the call
_ABSENT = object()   # the call says: no such thing here (e.g. NVLink on a PCIe card)


class ProbeExit(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


# ---------------------------------------------------------------------------
# NVML


def _import_pynvml():
    try:
        import pynvml  # noqa: PLC0415 (optional on the host)
    except ImportError:
        return None, "pynvml not installed"
    except Exception as exc:  # a broken install
        return None, _one_line(f"pynvml not importable ({type(exc).__name__}: {exc})")
    return pynvml, None


def _error_code(nvml, exc: BaseException):
    if isinstance(exc, nvml.NVMLError):
        return getattr(exc, "value", None)
    return None


def _nvml_error_text(exc: BaseException) -> str:
    try:
        return _one_line(exc) or type(exc).__name__
    except Exception:
        return type(exc).__name__


def _call(nvml, name: str, *args, absent=(_ERR_NOT_SUPPORTED,)):
    """Call an NVML wrapper; _MISSING when the call is unavailable, _ABSENT for `absent` errors."""
    fn = getattr(nvml, name, None)
    if fn is None:
        return _MISSING
    try:
        return fn(*args)
    except nvml.NVMLError as exc:
        code = _error_code(nvml, exc)
        if code == _ERR_FUNCTION_NOT_FOUND:
            return _MISSING
        if code in absent:
            return _ABSENT
        raise


def _bus_key(bus_id: str | None):
    """A PCI address in a comparable form: NVML writes domains 8 or 4 digits wide."""
    if not bus_id:
        return None
    m = re.fullmatch(r"\s*(?:([0-9a-fA-F]+):)?([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-7])\s*", bus_id)
    if not m:
        return bus_id.strip().lower()
    return (int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4)))


def _brand_name(nvml, value) -> str | None:
    if not isinstance(value, int):
        return None
    for key, const in vars(nvml).items():  # definition order: the current name before deprecated aliases
        if key.startswith("NVML_BRAND_") and key != "NVML_BRAND_COUNT" and const == value:
            return key[len("NVML_BRAND_"):]
    return _BRANDS.get(value, "UNKNOWN")


def _cuda_version(value) -> str | None:
    if not isinstance(value, int) or value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def probe_nvml(nvml) -> dict:
    count = nvml.nvmlDeviceGetCount()
    if count == 0:
        raise ProbeExit(EXIT_NO_GPU, "NVIDIA driver present but no GPU")
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    gpus = []
    for index, handle in enumerate(handles):
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        brand = _call(nvml, "nvmlDeviceGetBrand", handle)
        gpus.append({
            "index": index,
            "name": _text(nvml.nvmlDeviceGetName(handle)),
            "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
            "compute_capability": f"{major}.{minor}",
            "memory_total_mib": int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // MIB,
            "pci_bus_id": _text(nvml.nvmlDeviceGetPciInfo(handle).busId),
            "brand": _brand_name(nvml, brand),
            "fabric": _fabric(nvml, handle),
        })
    cuda = _call(nvml, "nvmlSystemGetCudaDriverVersion_v2")
    if cuda is _MISSING or cuda is _ABSENT:
        cuda = _call(nvml, "nvmlSystemGetCudaDriverVersion")
    return {
        "schema": SCHEMA,
        "source": "nvml",
        "hostname": socket.gethostname() or None,
        "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
        "cuda_driver_version": _cuda_version(cuda),
        "gpus": gpus,
        "topology": _nvml_topology(nvml, handles, [g["pci_bus_id"] for g in gpus]),
        # Asked only where a GPU is on an NVLink fabric: a PCIe box has no Fabric Manager to ask about.
        "fabric_manager": _fabric_manager() if any(g["fabric"] for g in gpus) else None,
    }


def _constant_name(nvml, prefix: str, value, fallback: dict) -> str:
    """The name (without ``prefix``) the bindings give ``value``, else the fallback table's, else
    ``UNKNOWN_<value>`` (a newer driver's value the bindings do not know yet)."""
    for key, const in vars(nvml).items():  # definition order: the current name before deprecated aliases
        if key.startswith(prefix) and isinstance(const, int) and not isinstance(const, bool) and const == value:
            return key[len(prefix):]
    return fallback.get(value, f"UNKNOWN_{value}")


def _fabric(nvml, handle) -> dict | None:
    """The GPU's registration with the NVLink fabric, or None where it is on none.

    NVML's nvmlDeviceGetGpuFabricInfoV (nvmlGpuFabricInfo_v2_t; nvidia-ml-py pynvml.py
    ``nvmlDeviceGetGpuFabricInfoV`` with ``c_nvmlGpuFabricInfoV_t``), else the deprecated
    nvmlDeviceGetGpuFabricInfo (nvmlGpuFabricInfo_t; ``c_nvmlGpuFabricInfo_t``), both filling a
    structure the caller passes. ``state`` is NVML_GPU_FABRIC_STATE_* (NOT_SUPPORTED, NOT_STARTED,
    IN_PROGRESS, COMPLETED); ``status`` an nvmlReturn_t that NVML says to read "only if state
    returns complete" (NVML API reference, nvmlGpuFabricInfo_t / nvmlGpuFabricInfo_v2_t), so it is
    None otherwise, as `nvidia-smi -q` prints N/A. NVML answers NOT_SUPPORTED before Hopper and
    on GPUs outside an NVSwitch fabric (nvmlDeviceGetGpuFabricInfo: "For Hopper or newer fully
    supported devices"): None, as for bindings or a driver without either call. Any other NVML
    error gives the state ``UNREADABLE`` with the error's name as the status."""
    info = None
    for name, struct in (("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
                         ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t")):
        make = getattr(nvml, struct, None)
        if make is None or getattr(nvml, name, None) is None:
            continue
        candidate = make()  # the V structure's constructor sets its version (nvmlGpuFabricInfo_v2)
        try:
            got = _call(nvml, name, handle, ctypes.byref(candidate))
        except nvml.NVMLError as exc:
            # NVML could not say the fabric is ready: say so, for the planner to judge, rather than
            # lose the whole probe or read it as a GPU on no fabric.
            code = _error_code(nvml, exc)
            if code == _ERR_ARGUMENT_VERSION_MISMATCH:
                continue  # a driver that knows no nvmlGpuFabricInfo_v2: the unversioned call
            named = _constant_name(nvml, "NVML_ERROR_", code, {}) if isinstance(code, int) else None
            return {"state": "UNREADABLE", "status": named or _nvml_error_text(exc)[:64]}
        if got is _ABSENT:
            return None
        if got is not _MISSING:
            info = candidate
            break
    if info is None:
        return None
    state = getattr(info, "state", None)
    if not isinstance(state, int):
        return None
    named = _constant_name(nvml, "NVML_GPU_FABRIC_STATE_", state, _FABRIC_STATES)
    if named == "NOT_SUPPORTED":
        return None
    status = None
    if state == _FABRIC_COMPLETED:
        code = getattr(info, "status", None)
        if isinstance(code, int):
            status = "SUCCESS" if code == 0 else _constant_name(nvml, "NVML_ERROR_", code, {})
    return {"state": named, "status": status}


def _fabric_manager() -> str | None:
    """What systemd says of NVIDIA's Fabric Manager service (`systemctl is-active`: active,
    inactive, failed, activating, ...), bounded in time; None where systemctl is missing, does
    not answer or answers something else. The unit name is the one NVIDIA's fabric manager
    packages install (Fabric Manager User Guide: ``nvidia-fabricmanager.service``)."""
    exe = shutil.which("systemctl")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "is-active", "nvidia-fabricmanager.service"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, timeout=SYSTEMCTL_TIMEOUT_S, check=False)
    except (subprocess.TimeoutExpired, OSError):
        return None
    said = _first_line(_text(done.stdout[:200]))
    return said if re.fullmatch(r"[a-z-]{1,32}", said) else None


def _nvml_topology(nvml, handles: list, bus_ids: list) -> dict:
    n = len(handles)
    gpu_at = {_bus_key(b): i for i, b in enumerate(bus_ids)}
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    t_gpu = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_GPU", 0)
    t_switch = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    link_absent = (_ERR_NOT_SUPPORTED, _ERR_INVALID_ARGUMENT, _ERR_NOT_FOUND)
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))

    direct = [[0] * n for _ in range(n)]  # links from GPU i whose far end is GPU j
    fabric = [0] * n                      # links from GPU i into a switch fabric
    typed_switch = False                  # NVML named a far end NVSwitch
    type_missing = False                  # no nvmlDeviceGetNvLinkRemoteDeviceType here
    untyped_non_gpu = False               # without it, a far end that is no GPU of ours
    for i, handle in enumerate(handles):
        for link in range(max_links):
            state = _call(nvml, "nvmlDeviceGetNvLinkState", handle, link, absent=link_absent)
            if state is _MISSING:
                break
            if state is _ABSENT or state != enabled:
                continue
            remote = _call(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link, absent=link_absent)
            far = None
            if remote is not _MISSING and remote is not _ABSENT:
                far = _bus_key(_text(remote.busId))
            kind = _call(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link, absent=link_absent)
            if kind is _MISSING:
                type_missing = True
                kind = None
            elif kind is _ABSENT:
                kind = None
            peer = gpu_at.get(far) if far is not None else None
            if kind == t_switch:
                typed_switch = True
                fabric[i] += 1
            elif peer is not None and peer != i and kind in (None, t_gpu):
                direct[i][peer] += 1
            elif kind is None and far is not None and peer is None:
                untyped_non_gpu = True  # most likely an NVSwitch; counted as fabric below
                fabric[i] += 1

    links = [["X" if i == j else "" for j in range(n)] for i in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            nv = max(direct[i][j], direct[j][i])
            if fabric[i] and fabric[j]:
                nv += min(fabric[i], fabric[j])
            if nv:
                value = f"NV{nv}"
            else:
                level = _call(nvml, "nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
                value = _TOPOLOGY_LEVELS.get(level, "SYS") if isinstance(level, int) else "SYS"
            links[i][j] = links[j][i] = value

    all_nvlink = n > 2 and all(links[i][j].startswith("NV") for i in range(n) for j in range(n) if i != j)
    nvswitch = typed_switch or (type_missing and untyped_non_gpu and all_nvlink)

    read_index = getattr(nvml, "NVML_P2P_CAPS_INDEX_READ", 0)
    if isinstance(read_index, tuple):  # nvidia-ml-py defines it as `0,`
        read_index = read_index[0]
    status_ok = getattr(nvml, "NVML_P2P_STATUS_OK", 0)
    p2p: list[list[bool | None]] = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i != j:
                status = _call(nvml, "nvmlDeviceGetP2PStatus", handles[i], handles[j], read_index,
                               absent=(_ERR_NOT_SUPPORTED, _ERR_INVALID_ARGUMENT))
                if isinstance(status, int):
                    p2p[i][j] = status == status_ok
    return {"links": links, "p2p_read": p2p, "nvswitch": nvswitch}


# ---------------------------------------------------------------------------
# nvidia-smi


_NO_DRIVER_MARKS = (
    "couldn't communicate with the nvidia driver",
    "driver not loaded",
    "nvml shared library not found",
    "unable to determine the device handle",
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _smi(exe: str, *args: str):
    try:
        done = subprocess.run([exe, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=SMI_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise ProbeExit(EXIT_FAILED, f"nvidia-smi {' '.join(args)} did not answer in {SMI_TIMEOUT_S}s") from None
    except OSError as exc:
        raise ProbeExit(EXIT_FAILED, f"cannot run {exe}: {_one_line(exc)}") from None
    return done.returncode, _text(done.stdout), _text(done.stderr)


def _first_line(*texts: str) -> str:
    for text in texts:
        for line in text.splitlines():
            if line.strip():
                return _one_line(line)
    return ""


def _brand_from_name(name: str) -> str:
    low = name.lower()
    if "geforce" in low:
        return "GEFORCE"
    if "titan" in low:
        return "TITAN"
    if "quadro rtx" in low:
        return "QUADRO_RTX"
    if "quadro" in low:
        return "QUADRO"
    if "tesla" in low:
        return "TESLA"
    if re.search(r"\brtx\b", low):  # RTX A6000, RTX 6000 Ada Generation, RTX PRO 6000
        return "NVIDIA_RTX"
    if low.startswith("grid "):
        return "GRID"
    return "NVIDIA"  # data-centre boards (A100, H100, L40S, ...)


def probe_nvidia_smi(nvml_reason: str) -> dict:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise ProbeExit(EXIT_NO_GPU, f"no NVIDIA driver on this host (NVML: {nvml_reason}; nvidia-smi: not found)")
    fields = "index,name,uuid,compute_cap,memory.total,pci.bus_id"
    rc, out, err = _smi(exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits")
    said = _first_line(out, err)
    if rc != 0 or "no devices were found" in said.lower():
        if "no devices were found" in said.lower():
            raise ProbeExit(EXIT_NO_GPU, "NVIDIA driver present but no GPU")
        if any(mark in said.lower() for mark in _NO_DRIVER_MARKS):
            raise ProbeExit(EXIT_NO_GPU, f"no NVIDIA driver on this host (NVML: {nvml_reason}; nvidia-smi: {said})")
        raise ProbeExit(EXIT_FAILED, f"nvidia-smi --query-gpu={fields} failed (exit {rc}): {said}")
    listed: list[tuple[int, dict[str, object]]] = []
    for row in csv.reader(line for line in out.splitlines() if line.strip()):
        cells = [c.strip() for c in row]
        if len(cells) != 6:
            raise ProbeExit(EXIT_FAILED, f"nvidia-smi --query-gpu: cannot read the line {', '.join(cells)!r}")
        index, name, uuid, cc, mem, bus = cells
        try:
            memory = int(float(mem))
            index_n = int(index)
        except ValueError:
            raise ProbeExit(EXIT_FAILED, f"nvidia-smi --query-gpu: cannot read the line {', '.join(cells)!r}") from None
        listed.append((index_n, {"index": index_n, "name": name, "uuid": uuid or None, "compute_capability": cc,
                                 "memory_total_mib": memory, "pci_bus_id": bus or None,
                                 "brand": _brand_from_name(name), "fabric": None}))
    if not listed:
        raise ProbeExit(EXIT_NO_GPU, "NVIDIA driver present but no GPU")
    gpus = [gpu for _, gpu in sorted(listed, key=lambda pair: pair[0])]

    rc, out, _err = _smi(exe, "--query-gpu=driver_version", "--format=csv,noheader")
    driver = _first_line(out) if rc == 0 else ""
    rc, out, _err = _smi(exe)
    m = re.search(r"CUDA Version:\s*([0-9]+(?:\.[0-9]+)?)", out) if rc == 0 else None
    rc, out, _err = _smi(exe, "topo", "-m")
    links = parse_topo_matrix(out, len(gpus)) if rc == 0 else None
    return {
        "schema": SCHEMA,
        "source": "nvidia-smi",
        "hostname": socket.gethostname() or None,
        "driver_version": driver or None,
        "cuda_driver_version": m.group(1) if m else None,
        "gpus": gpus,
        "topology": {
            "links": links,
            "p2p_read": None,  # nvidia-smi's query interface does not give it; unknown
            "nvswitch": False if links is None else _smi_nvswitch(links),
        },
        "fabric_manager": None,  # the fabric state is NVML's alone here; nothing to judge the service by
    }


def _smi_nvswitch(links: list[list[str]]) -> bool:
    """NVSwitch, judged from `topo -m` alone: NVLink between every pair of more than two GPUs,
    and more links counted on a GPU than any GPU has (18 to date): NV18 to each of 7 peers on
    HGX H100 is 18 links into switches, where a direct mesh (4x A100 HGX: NV4) adds up."""
    n = len(links)
    if n <= 2 or not all(links[i][j].startswith("NV") for i in range(n) for j in range(n) if i != j):
        return False
    return any(sum(int(links[i][j][2:]) for j in range(n) if j != i) > _MAX_GPU_NVLINKS for i in range(n))


def parse_topo_matrix(text: str, n: int) -> list[list[str]] | None:
    """The GPU-by-GPU part of `nvidia-smi topo -m`, or None when it cannot be read."""
    header = None
    rows: dict[int, list[str]] = {}
    for raw in _ANSI.sub("", text).splitlines():
        cells = raw.split()
        if not cells:
            if rows:
                break
            continue
        is_row = (len(cells) > 1 and re.fullmatch(r"GPU\d+", cells[0]) is not None
                  and re.fullmatch(r"X|NV\d+|SOC|" + "|".join(_PCIE_LEVELS), cells[1]) is not None)
        if header is None:
            if not is_row and any(re.fullmatch(r"GPU\d+", c) for c in cells):
                header = cells  # the column names: no row label in front of them
            continue
        if is_row:
            rows[int(cells[0][3:])] = cells
        elif rows:
            break
    if header is None:
        return None
    column = {int(c[3:]): k + 1 for k, c in enumerate(header) if re.fullmatch(r"GPU\d+", c)}
    if sorted(rows) != list(range(n)) or sorted(column) != list(range(n)):
        return None
    links = []
    for i in range(n):
        row = []
        for j in range(n):
            cells = rows[i]
            if column[j] >= len(cells):
                return None
            value = {"SOC": "SYS"}.get(cells[column[j]], cells[column[j]])
            if i == j:
                if value != "X":
                    return None
            elif value not in _PCIE_LEVELS and not re.fullmatch(r"NV\d+", value):
                return None
            row.append(value)
        links.append(row)
    return links


# ---------------------------------------------------------------------------


def probe() -> dict:
    nvml, reason = _import_pynvml()
    if nvml is not None:
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            code = _error_code(nvml, exc)
            if code not in (_ERR_LIBRARY_NOT_FOUND, _ERR_DRIVER_NOT_LOADED):
                raise ProbeExit(EXIT_FAILED, f"NVML failed to start: {_nvml_error_text(exc)}") from None
            reason = _nvml_error_text(exc)
        else:
            try:
                return probe_nvml(nvml)
            except nvml.NVMLError as exc:
                raise ProbeExit(EXIT_FAILED, f"NVML: {_nvml_error_text(exc)} ({type(exc).__name__})") from None
            finally:
                try:
                    nvml.nvmlShutdown()
                except Exception:
                    pass
    return probe_nvidia_smi(reason or "unavailable")


def main() -> int:
    warnings.simplefilter("ignore")  # e.g. the deprecated `pynvml` package warns on import
    try:
        result = probe()
    except ProbeExit as exc:
        sys.stderr.write(_one_line(exc.message) + "\n")
        return exc.code
    except Exception as exc:  # noqa: BLE001 (one line, never a traceback)
        sys.stderr.write(_one_line(f"gpu probe failed: {type(exc).__name__}: {exc}") + "\n")
        return EXIT_FAILED
    sys.stdout.write(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
