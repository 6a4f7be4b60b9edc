"""The model store of the weight stager, reached only through directories opened without following
links: a link planted in the store leads nowhere outside it, and only what this run created gets
``--owner``. The store is a Hugging Face cache directory (huggingface_hub/file_download.py:
``blobs/<etag>``, ``snapshots/<commit>/<file>`` a relative symlink to the blob,
``refs/<revision>``); a snapshot's completion marker records what was verified. A file is put
there verified (an LFS file against its sha256, any other against its git blob id) and linked
into its snapshot. Standard library only.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat

from sglang_deploy.deploy.host.stager.inputs import MAX_FILES, MAX_LISTING, marker_entry_problem
from sglang_deploy.deploy.host.stager.messages import Refused, fail, say, shown

CHUNK = 1 << 20
PARTIAL = ".sglang-deploy-partial"
MARKS = ".sglang-deploy-complete"
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def open_dir(parent: int, name: str) -> int | None:
    """A folder in ``parent``, never through a link (None: absent, a link or not a folder)."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError:
        return None


def _lexists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


class Store:
    """The repo's folders in the store, opened (made when missing) from the store root down with
    O_NOFOLLOW; what this run makes goes to ``owner``, nothing that was there changes owner."""

    def __init__(self, root: str, repo: str, commit: str, ids: tuple[int, int]):
        self.root, self.commit, self.ids = root, commit, ids
        self.name = "models--" + repo.replace("/", "--")
        self.repo_dir = os.path.join(root, self.name)
        self.blobs = os.path.join(self.repo_dir, "blobs")
        self.snapshot = os.path.join(self.repo_dir, "snapshots", commit)
        self.marker = os.path.join(self.repo_dir, MARKS, commit)
        self.fds: dict[str, int] = {}

    def open(self) -> None:
        made = not os.path.lexists(self.root)
        os.makedirs(self.root, exist_ok=True)
        root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        if made:
            os.fchown(root, *self.ids)
        repo = self.subdir(root, self.name, self.root)
        self.fds = {"repo": repo, "blobs": self.subdir(repo, "blobs", self.repo_dir),
                    "snaps": self.subdir(self.subdir(repo, "snapshots", self.repo_dir), self.commit,
                                         os.path.join(self.repo_dir, "snapshots"))}
        os.close(root)

    def subdir(self, parent: int, name: str, where: str) -> int:
        """The folder ``name`` in ``parent`` (made, and given to the owner, when missing)."""
        try:
            return os.open(name, DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            os.mkdir(name, 0o755, dir_fd=parent)
            fd = os.open(name, DIR_FLAGS, dir_fd=parent)
            os.fchown(fd, *self.ids)
            return fd
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise Refused(8, f"{os.path.join(where, name)} is a link or not a folder; the store holds "
                                 "something this script did not make; nothing outside the store was touched") from None
            raise

    def kind(self, dir_fd: int, name: str, where: str) -> str | None:
        """None (absent) or "file" (a regular file with one link); anything else is refused."""
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise Refused(8, f"{os.path.join(where, name)} is not a plain file this script wrote (a link, a folder "
                             "or a hard link); remove it and deploy again; nothing outside the store was touched")
        return "file"

    def open_file(self, dir_fd: int, name: str, where: str, write: bool = False) -> int:
        """A regular file with one link, opened without following a link (made when ``write``)."""
        flags = (os.O_RDWR | os.O_CREAT if write else os.O_RDONLY) | os.O_NOFOLLOW | os.O_NONBLOCK | \
            getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
                self.kind(dir_fd, name, where)  # raises the one line
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            self.kind(dir_fd, name, where)
        os.set_blocking(fd, True)
        return fd

    def write_file(self, dir_fd: int, name: str, data: bytes, where: str) -> None:
        """``name`` replaced, atomically, by a new file holding ``data`` (given to the owner)."""
        tmp = f".{name}.tmp"
        if self.kind(dir_fd, tmp, where):
            os.unlink(tmp, dir_fd=dir_fd)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
        try:
            write_all(fd, data)
            os.fchown(fd, *self.ids)
        finally:
            os.close(fd)
        self.kind(dir_fd, name, where)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}


def read_marker(store: Store) -> dict:
    """The marker's ``files`` (path -> entry), read without following a link and size-capped;
    ValueError (one line) for anything this script would not have written."""
    try:
        repo = os.open(store.repo_dir, DIR_FLAGS)
    except OSError:
        raise ValueError("no marker") from None
    try:
        marks = open_dir(repo, MARKS)
        if marks is None:
            raise ValueError("no marker")
        try:
            fd = os.open(store.commit, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=marks)
        except OSError:
            raise ValueError("no marker") from None
        finally:
            os.close(marks)
    finally:
        os.close(repo)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_LISTING:
            raise ValueError("the marker is not a plain file of at most 64 MiB")
        chunks, total = [], 0
        while total <= MAX_LISTING:
            block = os.read(fd, CHUNK)
            if not block:
                break
            chunks.append(block)
            total += len(block)
    finally:
        os.close(fd)

    def no_constant(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    try:
        recorded = json.loads(b"".join(chunks), parse_constant=no_constant)["files"]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise ValueError("the marker is not one this script wrote") from None
    if not isinstance(recorded, dict) or len(recorded) > MAX_FILES:
        raise ValueError("the marker is not one this script wrote")
    return recorded


def quick_check(store: Store) -> str | None:
    """None when the marker's files are all there with the size and mtime they had when verified."""
    try:
        recorded = read_marker(store)
    except ValueError as exc:
        return "no marker" if str(exc) == "no marker" else "the marker is not one this script wrote"
    for path, value in recorded.items():
        if marker_entry_problem(path, value) is not None:
            return "the marker is not one this script wrote"
        size, mtime_ns = value[:2]
        try:
            st = os.stat(os.path.join(store.snapshot, path))
        except OSError:
            return f"{shown(path)} is missing"
        if st.st_size != size or st.st_mtime_ns != mtime_ns:
            return f"{shown(path)} changed since it was verified"
    return None


def digest_of(fd: int, entry: dict) -> str:
    """The sha256 of an LFS file, else its git blob id (git's object format: sha1 of
    ``b"blob <size>\\0"`` + content, as the Hub's blobId of a non-LFS file)."""
    if entry["sha256"]:
        h = hashlib.sha256()
    else:
        h = hashlib.sha1(b"blob %d\0" % entry["size"])
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        block = os.read(fd, CHUNK)
        if not block:
            return h.hexdigest()
        h.update(block)


def verify(fd: int, entry: dict) -> str | None:
    """None when the open file is the file the list describes, else what is wrong."""
    size = os.fstat(fd).st_size
    if size != entry["size"]:
        return f"size {size}, expected {entry['size']}"
    digest = digest_of(fd, entry)
    if digest != entry["blob"]:
        return f"{'sha256' if entry['sha256'] else 'git blob id'} {digest}, expected {entry['blob']}"
    return None


def ensure_file(store: Store, entry: dict, fetch, stats: dict) -> None:
    """The verified blob of ``entry``, linked into the snapshot. ``fetch`` fills its partial file
    (None: the controller uploaded it already; then an incomplete one stops the host)."""
    blobs, blob = store.fds["blobs"], entry["blob"]
    if store.kind(blobs, blob, store.blobs):
        fd = store.open_file(blobs, blob, store.blobs)
        try:
            problem = verify(fd, entry)
        finally:
            os.close(fd)
        if problem is None:
            link(store, entry)
            return
        say(f"{shown(entry['path'])}: the stored blob fails verification ({problem}): fetching it again")
        os.unlink(blob, dir_fd=blobs)
    partial = blob + PARTIAL
    for attempt in (1, 2):
        if fetch is None and not store.kind(blobs, partial, store.blobs):
            fail(7, f"{shown(entry['path'])}: 0 of {entry['size']} bytes arrived from the controller; deploy again "
                    "to resume")
        fd = store.open_file(blobs, partial, store.blobs, write=fetch is not None)
        try:
            if fetch is not None:
                os.fchown(fd, *store.ids)
                fetch(entry, fd, partial, stats)
            elif os.fstat(fd).st_size != entry["size"]:
                fail(7, f"{shown(entry['path'])}: {os.fstat(fd).st_size} of {entry['size']} bytes arrived from the "
                        "controller; deploy again to resume")
            problem = verify(fd, entry)
            if problem is None:
                os.fchown(fd, *store.ids)
        finally:
            os.close(fd)
        if problem is None:
            store.kind(blobs, blob, store.blobs)
            os.replace(partial, blob, src_dir_fd=blobs, dst_dir_fd=blobs)
            link(store, entry)
            return
        os.unlink(partial, dir_fd=blobs)
        say(f"{shown(entry['path'])}: the fetched file fails verification ({problem})" +
            (": fetching it again" if attempt == 1 and fetch is not None else ""))
        if fetch is None:
            break
    fail(4, f"{shown(entry['path'])} of {store.snapshot} failed verification; nothing is served from it")


def link(store: Store, entry: dict) -> None:
    """snapshots/<commit>/<path> -> ../../blobs/<blob>, relative, as huggingface_hub._create_symlink
    makes it; every folder on the way opened without following a link."""
    *dirs, name = entry["path"].split("/")
    fd, where, opened = store.fds["snaps"], store.snapshot, []
    try:
        for d in dirs:
            fd = store.subdir(fd, d, where)
            opened.append(fd)
            where = os.path.join(where, d)
        target = "../" * (len(dirs) + 2) + "blobs/" + entry["blob"]
        try:
            if os.readlink(name, dir_fd=fd) == target:
                return
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            store.kind(fd, name, where)  # a folder or other: refused; a plain file: replaced below
        tmp = f".{name[:200]}.sglang-deploy-link"
        if _lexists(fd, tmp):
            os.unlink(tmp, dir_fd=fd)
        os.symlink(target, tmp, dir_fd=fd)
        os.chown(tmp, *store.ids, dir_fd=fd, follow_symlinks=False)
        os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        for d in opened:
            os.close(d)
