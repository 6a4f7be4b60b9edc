"""The continuous check's bounded I/O on the GPU host (a module of deploy/host/watch.py, shipped
beside it: deploy/watching.py SCRIPTS): plain files read with a size cap and without following a
final link, JSON without NaN or Infinity, commands run with a timeout and a bounded output, and
files written whole or not at all. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile

MAX_FILE = 16 << 20  # a live or staged file hashed (a unit is kilobytes)
MAX_JSON = 16 << 20  # a gate report, an options file


# -- small bounded readers -------------------------------------------------------


def read_bytes(path: str, limit: int) -> bytes | None:
    """A plain file's bytes (not following a final link), None if missing or not plain; at most ``limit``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        import stat
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], limit + 1
        while left > 0:
            block = os.read(fd, min(left, 1 << 20))
            if not block:
                break
            chunks.append(block)
            left -= len(block)
        data = b"".join(chunks)
        return None if len(data) > limit else data
    finally:
        os.close(fd)


def read_small(path: str, limit: int = 256) -> str | None:
    data = read_bytes(path, limit)
    return None if data is None else data.decode("utf-8", "replace").strip()


def sha256_of(path: str) -> str | None:
    data = read_bytes(path, MAX_FILE)
    return None if data is None else hashlib.sha256(data).hexdigest()


def load_json_file(path: str, limit: int = MAX_JSON) -> object:
    data = read_bytes(path, limit)
    if data is None:
        raise ValueError(f"{path}: missing, not a plain file or over {limit} bytes")
    return json.loads(data.decode("utf-8"), parse_constant=_no_constant)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


# -- commands -------------------------------------------------------------------------


def run(argv: list[str], timeout: float, limit: int = 1 << 20) -> tuple[int | None, str]:
    """(exit code or None on timeout/failure to start, stdout text bounded to ``limit`` bytes)."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                              timeout=max(timeout, 0.1))
    except (OSError, subprocess.TimeoutExpired):
        return None, ""
    return proc.returncode, proc.stdout[:limit].decode("utf-8", "replace")


# -- writing -------------------------------------------------------------------------


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """``data`` at ``path`` whole or not at all: a temp file in the same directory, fsync, rename."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
