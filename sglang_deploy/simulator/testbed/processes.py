"""A container's processes as seen from this machine: its PID namespace and its cgroups.

Teardown uses these to find, kill and finally prove gone every process of a host.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

from .mounts import unescape_mountinfo


def proc_stats() -> Iterator[tuple[int, list[str]]]:
    """(pid, the fields of /proc/PID/stat after the command name: state, ppid, pgrp, ...) of
    every process; the command name (field 2) may contain spaces and parentheses."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        yield int(entry.name), stat[stat.rfind(")") + 2 :].split()


def children_of(ppid: int) -> list[int]:
    """Direct children of ``ppid`` (scans /proc; CONFIG_PROC_CHILDREN may be off)."""
    return [pid for pid, fields in proc_stats() if int(fields[1]) == ppid]


def pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def pids_in_namespace(ns: str) -> list[int]:
    """Every process (as seen from here) living in PID namespace ``ns``."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and pid_namespace(int(entry.name)) == ns:
            pids.append(int(entry.name))
    return pids


def systemd_cgroup_dirs() -> list[Path]:
    """This process's cgroup in each hierarchy a container's systemd manages.

    That is the cgroup2 (unified) hierarchy and, on a hybrid or legacy
    machine, the v1 ``name=systemd`` one. systemd-nspawn hands its own cgroup
    (in these hierarchies) to the container's systemd as the container's
    root cgroup, so two containers started from the same cgroup would share
    one tree and trip over each other's units ("Failed to attach to cgroup").
    """
    own: dict[str, str] = {}  # "0::" for cgroup2, "name=systemd" for v1
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hid, controllers, path = line.split(":", 2)
        if hid == "0" and controllers == "":
            own["unified"] = path
        elif "name=systemd" in controllers.split(","):
            own["systemd"] = path
    dirs = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            fstype, _source, options = post.split()[:3]
            point = unescape_mountinfo(pre.split()[4])
            if fstype == "cgroup2" and "unified" in own:
                dirs.append(Path(point + own["unified"]))
            elif fstype == "cgroup" and "name=systemd" in options.split(",") and "systemd" in own:
                dirs.append(Path(point + own["systemd"]))
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def cgroup_pids(cgroup: Path) -> list[int]:
    """Processes in ``cgroup`` and all its descendants."""
    pids = []
    for procs in cgroup.rglob("cgroup.procs"):
        try:
            pids += [int(p) for p in procs.read_text().split()]
        except OSError:
            pass
    return pids


def remove_cgroup(cgroup: Path) -> str | None:
    """rmdir a cgroup tree bottom-up (cgroupfs allows rmdir of empty groups only)."""
    if not cgroup.exists():
        return None
    for _ in range(20):
        for dirpath, _dirnames, _files in sorted(os.walk(cgroup), key=lambda w: -len(w[0])):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass
        if not cgroup.exists():
            return None
        time.sleep(0.1)
    return f"could not remove cgroup {cgroup} (processes left: {cgroup_pids(cgroup)})"
