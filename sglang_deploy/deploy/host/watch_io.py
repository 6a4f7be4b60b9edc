"""The continuous check's bounded I/O on the GPU host (a module of deploy/host/watch.py, shipped
beside it: deploy/watching.py SCRIPTS): plain files read with a size cap and without following a
final link, JSON without NaN or Infinity, commands run with a timeout and a bounded output, and
files written whole or not at all, never through a link. Standard library only.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import stat
import subprocess

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


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_dir(path: str, create: bool = False) -> int:
    """A directory's descriptor, opened part by part from ``/`` with O_DIRECTORY | O_NOFOLLOW: a part
    that is a symbolic link or not a directory is refused (OSError saying which), so nothing is
    written through a link the path was given; missing parts are made 0755 when ``create``."""
    path = os.path.abspath(path)
    fd = os.open("/", _DIR_FLAGS)
    done = ""
    try:
        for part in (p for p in path.split("/") if p):
            done += "/" + part
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                child = _open_part(part, fd, done)
                os.fchmod(child, 0o755)  # the umask (the check's 077) would leave it unreadable to node_exporter
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                child = _open_part(part, fd, done)
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_part(part: str, parent: int, shown: str) -> int:
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        try:
            link = stat.S_ISLNK(os.stat(part, dir_fd=parent, follow_symlinks=False).st_mode)
        except OSError:
            link = False
        what = "a symbolic link" if link else "not a directory"
        raise OSError(exc.errno, f"{shown} is {what}; nothing is written through it") from None


def write_atomic(path: str, data: bytes, mode: int = 0o644, create_dir: bool = False) -> None:
    """``data`` at ``path`` whole or not at all: a temp file (O_CREAT | O_EXCL | O_NOFOLLOW) in the
    same directory, fsync, rename, both relative to the directory opened without following a link
    (``open_dir``, made when missing with ``create_dir``). A ``path`` that is a symbolic link or not
    a plain file is refused (OSError), not replaced."""
    directory, name = os.path.split(os.path.abspath(path))
    dfd = open_dir(directory, create_dir)
    try:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a plain file"
            raise OSError(errno.EEXIST, f"{path} is {what}; not replaced")
        tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as fh:
                os.fchmod(fh.fileno(), mode)
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
    finally:
        os.close(dfd)
