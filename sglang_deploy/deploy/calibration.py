"""The fleet's calibration samples on the controller (``sglang_deploy.plan.calibration``): read
beside the inventory for every plan, one line appended for every passing gate of a deploy.

The file is ``<inventory stem>.calibration.jsonl`` beside the inventory file. Reading it is
bounded (a regular file of at most ``calibration.MAX_BYTES``; a bad line is skipped and counted)
and never stops a plan: a file that cannot be read plans with the roofline alone and says why.
Appending is one ``write`` of one line with ``O_APPEND`` (the deploy's hosts gate in one process,
each line whole), through a descriptor opened without following a link; a failure to write is a
warning, never the host's failure.
"""

from __future__ import annotations

import datetime
import os
import stat
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from sglang_deploy.deploy.inventory import inventory_file
from sglang_deploy.deploy.tuning import file_version
from sglang_deploy.plan import calibration
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.untrusted import UntrustedInput, read_text_file


def samples_file(groups: Iterable[str], argv: Sequence[str] | None = None) -> Path | None:
    """Where a host's inventory keeps its samples (None: the inventory file is not known)."""
    inventory = inventory_file(groups, argv)
    return calibration.samples_path(inventory) if inventory is not None else None


@lru_cache(maxsize=16)
def _read(path: str, version: tuple[int, ...] | None) -> calibration.Samples:
    if version is None:
        return calibration.Samples(source=Path(path).name)
    try:
        text = read_text_file(path, "calibration samples", calibration.MAX_BYTES)
    except UntrustedInput as exc:
        return calibration.Samples(source=f"{Path(path).name} (not read: {exc})")
    return calibration.parse_samples(text, Path(path).name)


def load(path: str | os.PathLike[str] | None) -> calibration.Samples | None:
    """The samples at ``path`` (read once per content of the file); None without a path."""
    if path is None:
        return None
    p = str(Path(path).absolute())
    return _read(p, file_version(p))


def record(path: Path | None, plan: Plan, report: Mapping[str, Any], host: str,
           warn: Any = None) -> bool:
    """Append one passing gate's sample of ``plan`` to ``path``; False (and ``warn(text)``) when it
    could not be written, True when written or when the gate measured nothing to calibrate."""
    if path is None or plan.predicted is None:
        return True
    at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    line = calibration.sample_line(calibration.plan_key(plan), report, plan.predicted.calibration, host, at)
    if line is None:
        return True
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if warn is not None:
            warn(f"calibration sample not recorded in {path.name}: {exc.strerror or exc}")
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device there is not written to
            raise OSError(0, "not a regular file")
        os.write(fd, (line + "\n").encode("utf-8"))
    except OSError as exc:
        if warn is not None:
            warn(f"calibration sample not recorded in {path.name}: {exc.strerror or exc}")
        return False
    finally:
        os.close(fd)
    _read.cache_clear()
    return True

