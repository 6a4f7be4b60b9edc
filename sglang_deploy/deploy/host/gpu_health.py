#!/usr/bin/env python3
"""sglang-deploy GPU health: what NVML and the kernel log say is wrong with this host's GPUs.

A standalone script for the GPU host (standard library, plus NVIDIA's NVML bindings,
nvidia-ml-py, imported as ``pynvml`` where installed); ``sglang-deploy status`` runs it
with the service's MainPID, and the continuous check imports it. It changes nothing.

    python3 gpu_health.py [--server-pid PID] [--kernel-log auto|none|FILE]

prints one JSON line, schema 1::

    {"schema": 1, "error": null | "why NVML could not be read",
     "gpus": [{"index": 0, "uuid": "GPU-...", "name": "...", "bus_id": "00000000:18:00.0",
       "ecc": {"uncorrected": int, "corrected": int} | null,
       "retired_pages": {"single_bit": int, "double_bit": int, "pending": bool} | null,
       "remapped_rows": {"correctable": int, "uncorrectable": int, "pending": bool, "failure": bool} | null,
       "clocks_event_reasons": ["hw_slowdown", ...],
       "foreign_processes": [{"pid": int, "used_bytes": int | null}], "foreign_memory_bytes": int,
       "xid": {"count": int, "last": int | null} | null}]}

``null`` where NVML answers NVML_ERROR_NOT_SUPPORTED (nvml.h: ECC off or absent, page
retirement on Ampere and later, row remapping before Ampere), or where the kernel log cannot
be read. Exit status 0 whenever the JSON line is printed (also with ``error`` set), 2 on bad
arguments. Imported: ``read_health(nvml, server_pids, kernel_log_lines) -> dict`` (same shape).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import warnings
from typing import Any, Iterable

SCHEMA = 1

# NVML error codes and constants (nvml.h; nvidia-ml-py's NVML_* names). The bindings' own
# values are used when present.
_ERR_NOT_SUPPORTED = 3
_ERR_FUNCTION_NOT_FOUND = 13
_VOLATILE_ECC = 0  # NVML_VOLATILE_ECC: counts since the driver loaded
_CORRECTED, _UNCORRECTED = 0, 1  # NVML_MEMORY_ERROR_TYPE_*
_SINGLE_BIT, _DOUBLE_BIT = 0, 1  # NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, _DOUBLE_BIT_ECC_ERROR
_FEATURE_ENABLED = 1  # NVML_FEATURE_ENABLED

#: Clocks event (throttle) reason bits, nvml.h nvmlClocksEventReason* (the older
#: nvmlClocksThrottleReason* have the same values); the last two only in nvidia-ml-py's
#: nvmlClocksThrottleReason* list. An unknown bit is named ``bit_0x...``.
CLOCKS_EVENT_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)

#: Bounds on what is read from the host.
MAX_PROC_ENTRIES = 100_000  # /proc/<pid> entries scanned for the server's children
MAX_SERVER_PIDS = 4096  # the server and its descendants
MAX_KERNEL_LOG_LINES = 20_000
MAX_KERNEL_LOG_BYTES = 4 * 1024 * 1024
MAX_LINE_BYTES = 4096
MAX_PROCESSES_PER_GPU = 256
JOURNAL_TIMEOUT_S = 20
#: The kernel log's XID lines, as journalctl gives them (``-o cat``: the message alone).
JOURNAL_COMMAND = ["journalctl", "-k", "-b", "--no-pager", "-o", "cat", "-g", "NVRM: Xid"]

# The NVIDIA driver's XID line (NVIDIA's "XID Errors" and "GPU Memory Error Management" documents):
#   NVRM: Xid (PCI:0000:18:00): 79, pid=..., GPU has fallen off the bus.
#   NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). ...
_XID = re.compile(r"NVRM: Xid \(PCI:(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.[0-7])?"
                  r"(?:\s[^)]{0,64})?\):\s*(\d{1,5})\b")
_BUS = re.compile(r"\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.[0-7]\s*")


def _one_line(text: object, limit: int = 300) -> str:
    return " ".join(str(text).split())[:limit]


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


class _Absent(Exception):
    """NVML says the device does not support the call (or the bindings lack it)."""


def _call(nvml: Any, name: str, *args: Any) -> Any:
    """An NVML wrapper's answer; :class:`_Absent` for NVML_ERROR_NOT_SUPPORTED, a missing
    wrapper, or NVML_ERROR_FUNCTION_NOT_FOUND (a driver older than the call)."""
    fn = getattr(nvml, name, None)
    if fn is None:
        raise _Absent(name)
    try:
        return fn(*args)
    except nvml.NVMLError as exc:
        code = getattr(exc, "value", None)
        if code in (getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", _ERR_NOT_SUPPORTED),
                    getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", _ERR_FUNCTION_NOT_FOUND)):
            raise _Absent(name) from None
        raise


def _const(nvml: Any, name: str, default: int) -> int:
    value = getattr(nvml, name, default)
    if isinstance(value, tuple) and len(value) == 1:  # nvidia-ml-py writes a few as `0,`
        value = value[0]
    return value if isinstance(value, int) else default


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"not a count: {value!r}")
    return value


def bus_key(bus_id: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI address as NVML writes it (``00000000:18:00.0``)."""
    m = _BUS.fullmatch(bus_id or "")
    if not m:
        return None
    return int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16)


def reason_names(mask: int) -> list[str]:
    """The names of the bits set in a clocks event reasons mask."""
    names = [name for bit, name in CLOCKS_EVENT_REASONS if mask & bit]
    known = 0
    for bit, _ in CLOCKS_EVENT_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest and bit <= rest:
        if rest & bit:
            names.append(f"bit_{bit:#x}")
        bit <<= 1
    return names


# ---- the kernel log: XID events ----------------------------------------------------------------

def parse_xids(lines: Iterable[str]) -> dict[tuple[int, int, int], dict[str, Any]]:
    """XID events per GPU (domain, bus, device): ``{"count": n, "last": code}``, at most
    MAX_KERNEL_LOG_LINES lines and MAX_KERNEL_LOG_BYTES read."""
    found: dict[tuple[int, int, int], dict[str, Any]] = {}
    size = 0
    for n, line in enumerate(lines):
        if n >= MAX_KERNEL_LOG_LINES or size > MAX_KERNEL_LOG_BYTES:
            break
        line = line[:MAX_LINE_BYTES]
        size += len(line)
        m = _XID.search(line)
        if not m:
            continue
        key = (int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16))
        entry = found.setdefault(key, {"count": 0, "last": None})
        entry["count"] += 1
        entry["last"] = int(m.group(4))
    return found


def journal_xid_lines(timeout: float = JOURNAL_TIMEOUT_S) -> list[str] | None:
    """The XID lines of this boot's kernel log (``journalctl -k -b -g 'NVRM: Xid'``), bounded;
    None when they cannot be read (no journalctl, no pattern support, not permitted, too slow)."""
    if os.geteuid() != 0 and not _journal_reader():
        return None  # journalctl would show this user's own journal only: no kernel lines, no error
    try:
        done = subprocess.run(JOURNAL_COMMAND, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = done.stdout[:MAX_KERNEL_LOG_BYTES].decode("utf-8", "replace")
    if done.returncode != 0:
        # journalctl -g exits 1 when nothing matched; "-- No entries --" (or nothing) is all it printed then
        if done.returncode == 1 and not [x for x in out.splitlines() if x.strip() and not x.startswith("-- ")] \
                and not done.stderr.strip():
            return []
        return None
    return out.splitlines()[:MAX_KERNEL_LOG_LINES]


def _journal_reader() -> bool:
    """This user may read the system journal (journalctl(1): root, or the groups
    systemd-journal, adm and wheel)."""
    try:
        import grp  # noqa: PLC0415 (POSIX only)

        groups = {grp.getgrgid(g).gr_name for g in os.getgroups()}
    except (ImportError, KeyError, OSError):
        return False
    return bool(groups & {"systemd-journal", "adm", "wheel"})


def read_kernel_log(source: str) -> list[str] | None:
    """``auto``: the journal; ``none``: not read (None); else a file's last lines, bounded."""
    if source == "none":
        return None
    if source == "auto":
        return journal_xid_lines()
    try:
        with open(source, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - MAX_KERNEL_LOG_BYTES))
            data = f.read(MAX_KERNEL_LOG_BYTES)
    except OSError:
        return None
    lines = data.decode("utf-8", "replace").splitlines()
    if size > MAX_KERNEL_LOG_BYTES and lines:
        lines = lines[1:]  # cut at the byte bound: the first line is a part of one
    return lines[-MAX_KERNEL_LOG_LINES:]


# ---- the server's processes --------------------------------------------------------------------

def _ppid(stat: str) -> int | None:
    """The parent pid from /proc/<pid>/stat (proc(5): ``pid (comm) state ppid ...``; comm may
    hold spaces and parentheses, so the fields start after the last ``)``)."""
    fields = stat.rpartition(")")[2].split()
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    return int(fields[1])


def server_pids(main_pid: int | None, proc: str = "/proc") -> set[int]:
    """``main_pid`` and all its descendants (walking every /proc/<pid>/stat's ppid), bounded."""
    if not main_pid or main_pid <= 0:
        return set()
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return {main_pid}
    for n, name in enumerate(names):
        if n >= MAX_PROC_ENTRIES:
            break
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat"), "rb") as f:
                stat = f.read(4096).decode("utf-8", "replace")
        except OSError:
            continue  # exited meanwhile
        parent = _ppid(stat)
        if parent is not None:
            children.setdefault(parent, []).append(int(name))
    found, todo = {main_pid}, [main_pid]
    while todo and len(found) < MAX_SERVER_PIDS:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


# ---- NVML ---------------------------------------------------------------------------------------

def _ecc(nvml: Any, handle: Any) -> dict[str, int] | None:
    volatile = _const(nvml, "NVML_VOLATILE_ECC", _VOLATILE_ECC)
    try:
        return {"uncorrected": _count(_call(nvml, "nvmlDeviceGetTotalEccErrors", handle,
                                            _const(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", _UNCORRECTED),
                                            volatile)),
                "corrected": _count(_call(nvml, "nvmlDeviceGetTotalEccErrors", handle,
                                          _const(nvml, "NVML_MEMORY_ERROR_TYPE_CORRECTED", _CORRECTED), volatile))}
    except _Absent:
        return None


def _retired_pages(nvml: Any, handle: Any) -> dict[str, Any] | None:
    try:
        single = _call(nvml, "nvmlDeviceGetRetiredPages", handle,
                       _const(nvml, "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", _SINGLE_BIT))
        double = _call(nvml, "nvmlDeviceGetRetiredPages", handle,
                       _const(nvml, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", _DOUBLE_BIT))
        pending = _call(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    except _Absent:
        return None
    return {"single_bit": len(list(single)), "double_bit": len(list(double)),
            "pending": pending == _const(nvml, "NVML_FEATURE_ENABLED", _FEATURE_ENABLED)}


def _remapped_rows(nvml: Any, handle: Any) -> dict[str, Any] | None:
    try:
        corr, unc, pending, failure = _call(nvml, "nvmlDeviceGetRemappedRows", handle)
    except _Absent:
        return None
    return {"correctable": _count(corr), "uncorrectable": _count(unc), "pending": bool(pending),
            "failure": bool(failure)}


def _reasons(nvml: Any, handle: Any) -> list[str]:
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        try:
            mask = _call(nvml, name, handle)
        except _Absent:
            continue
        if isinstance(mask, int) and not isinstance(mask, bool) and mask >= 0:
            return reason_names(mask)
    return []


def _processes(nvml: Any, handle: Any) -> dict[int, int | None]:
    """pid -> GPU memory used (bytes, None when NVML cannot tell) of every compute and graphics
    process on the GPU; a process in both lists counts once, with the larger figure."""
    found: dict[int, int | None] = {}
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            listed = _call(nvml, name, handle)
        except _Absent:
            continue
        for proc in list(listed or ())[:MAX_PROCESSES_PER_GPU]:
            pid, used = getattr(proc, "pid", None), getattr(proc, "usedGpuMemory", None)
            if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
                continue
            used = used if isinstance(used, int) and not isinstance(used, bool) and used >= 0 else None
            before = found.get(pid)
            found[pid] = max(before, used) if before is not None and used is not None else \
                (used if used is not None else before)
    return found


def read_health(nvml: Any, server_pids: Iterable[int] = (), kernel_log_lines: Iterable[str] | None = None
                ) -> dict[str, Any]:
    """The GPU health JSON (module docstring) as a dict. ``nvml`` is the ``pynvml`` module (or
    None: not installed); ``server_pids`` the server and its children, whose GPU memory is not
    foreign; ``kernel_log_lines`` the kernel log (None: not readable, every ``xid`` is null).
    Initialises and shuts down NVML itself; never raises for what NVML or the host answers."""
    if nvml is None:
        return {"schema": SCHEMA, "error": "pynvml not installed", "gpus": []}
    ours = {p for p in server_pids if isinstance(p, int)}
    xids = parse_xids(kernel_log_lines) if kernel_log_lines is not None else None
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return {"schema": SCHEMA, "error": _one_line(f"NVML failed to start: {exc}"), "gpus": []}
    try:
        gpus = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
            procs = _processes(nvml, handle)
            foreign = [{"pid": pid, "used_bytes": used} for pid, used in sorted(procs.items()) if pid not in ours]
            key = bus_key(bus_id)
            gpus.append({
                "index": index,
                "uuid": _one_line(_text(nvml.nvmlDeviceGetUUID(handle)), 100),
                "name": _one_line(_text(nvml.nvmlDeviceGetName(handle)), 100),
                "bus_id": _one_line(bus_id, 40),
                "ecc": _ecc(nvml, handle),
                "retired_pages": _retired_pages(nvml, handle),
                "remapped_rows": _remapped_rows(nvml, handle),
                "clocks_event_reasons": _reasons(nvml, handle),
                "foreign_processes": foreign,
                "foreign_memory_bytes": sum(p["used_bytes"] or 0 for p in foreign),
                "xid": None if xids is None else dict(xids.get(key, {"count": 0, "last": None})) if key else None,
            })
        return {"schema": SCHEMA, "error": None, "gpus": gpus}
    except Exception as exc:  # an NVMLError mid-way (GPU lost, ...) or an answer of the wrong shape
        return {"schema": SCHEMA, "error": _one_line(f"NVML: {type(exc).__name__}: {exc}"), "gpus": []}
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _import_pynvml() -> Any:
    try:
        import pynvml  # noqa: PLC0415 (optional on the host)
    except ImportError:
        return None
    return pynvml


def main(argv: list[str] | None = None) -> int:
    warnings.simplefilter("ignore")  # the deprecated `pynvml` package warns on import
    parser = argparse.ArgumentParser(description="GPU health as one JSON line (changes nothing).")
    parser.add_argument("--server-pid", type=int, default=None,
                        help="the server's MainPID: its and its children's GPU memory is not foreign")
    parser.add_argument("--kernel-log", default="auto",
                        help="auto: this boot's journal (journalctl -k); none: not read; else a file")
    args = parser.parse_args(argv)
    try:
        nvml = _import_pynvml()
        pids = server_pids(args.server_pid)
        lines = read_kernel_log(args.kernel_log)
        result = read_health(nvml, pids, lines)
    except Exception as exc:  # noqa: BLE001 (one JSON line, never a traceback)
        result = {"schema": SCHEMA, "error": _one_line(f"gpu health failed: {type(exc).__name__}: {exc}"),
                  "gpus": []}
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
