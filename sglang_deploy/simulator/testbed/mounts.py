"""A host's root filesystem on this machine: the tmpfs + overlay mounts, and unmounting them.

The overlay's lower layer is this machine's ``/``, its upper layer a tmpfs, so
every write lands in memory. Only the overlay is ever booted, never ``/``.
"""

from __future__ import annotations

import logging
import re
import subprocess
import time
from pathlib import Path

from .errors import run

log = logging.getLogger(__name__)


def mount_overlay(name: str, upper: Path, merged: Path, mounted: list[Path]) -> None:
    """Mount a tmpfs on ``upper`` and the overlay of ``/`` on ``merged``.

    Each mount point is appended to ``mounted`` as soon as it is mounted, so
    that teardown unmounts what is there even when the second mount fails.
    """
    merged.mkdir(parents=True)
    upper.mkdir()

    run("mount", "-t", "tmpfs", "-o", "mode=0755", f"testbed-{name}", upper)
    mounted.append(upper)
    (upper / "u").mkdir()
    (upper / "w").mkdir()
    run(
        "mount", "-t", "overlay", f"testbed-{name}",
        "-o", f"lowerdir=/,upperdir={upper}/u,workdir={upper}/w", merged,
    )  # fmt: skip
    mounted.append(merged)


def mount_points_under(directory: Path) -> list[str]:
    """Mount points at or below ``directory`` in this process's mount namespace."""
    prefix = str(directory).rstrip("/")
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            point = unescape_mountinfo(line.split()[4])
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return found


def unescape_mountinfo(field_: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_)


def _is_mounted(path: Path) -> bool:
    return str(path).rstrip("/") in mount_points_under(path)


def umount(mount_point: Path) -> str | None:
    """Unmount; retry while busy; lazy unmount only as the last resort. Return an error or None."""
    if not _is_mounted(mount_point):
        return None
    last = ""
    for _ in range(20):
        proc = subprocess.run(["umount", str(mount_point)], check=False, capture_output=True, text=True)
        if proc.returncode == 0 or not _is_mounted(mount_point):
            return None
        last = proc.stderr.strip()
        time.sleep(0.25)
    log.warning("umount %s kept failing (%s); detaching it lazily", mount_point, last)
    proc = subprocess.run(["umount", "-l", str(mount_point)], check=False, capture_output=True, text=True)
    if proc.returncode == 0 and not _is_mounted(mount_point):
        return None
    return f"could not unmount {mount_point}: {last} / lazy: {proc.stderr.strip()}"
