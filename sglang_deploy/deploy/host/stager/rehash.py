"""A complete snapshot re-hashed against the manifest its completion marker recorded (the weight
stager's ``--verify`` and ``--verify-served``): only the snapshot's blobs are read, streamed,
within a deadline; nothing changes. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import stat
import time

from sglang_deploy.deploy.host.stager.inputs import HEX40, marker_entry_problem
from sglang_deploy.deploy.host.stager.messages import CONTROLS, fail
from sglang_deploy.deploy.host.stager.store import CHUNK, DIR_FLAGS, MARKS, Store, open_dir, read_marker

VERIFY_RATE = 32 << 20  # bytes/s the default --verify deadline allows for reading and hashing (far below a disk's)


def _open_link_dir(store: Store, snaps: int, dirs: list[str]) -> int | None:
    """The snapshot's subfolder holding a file's link, every folder opened without following a link."""
    fd = os.dup(snaps)
    for d in dirs:
        sub = open_dir(fd, d)
        os.close(fd)
        if sub is None:
            return None
        fd = sub
    return fd


def _check_one(store: Store, snaps: int, blobs: int, path: str, size: int, blob: str, deadline: float) -> str | None:
    """None when ``path`` of the snapshot is the link to its blob and the blob has ``size`` bytes and
    hashes to ``blob``; else what is wrong. TimeoutError when the deadline passes while hashing."""
    *dirs, name = path.split("/")
    fd = _open_link_dir(store, snaps, dirs)
    if fd is None:
        return "missing"
    try:
        target = os.readlink(name, dir_fd=fd)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "not the link to its blob"
    finally:
        os.close(fd)
    if target != "../" * (len(dirs) + 2) + "blobs/" + blob:
        return "not the link to its blob"
    try:
        bfd = os.open(blob, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), dir_fd=blobs)
    except FileNotFoundError:
        return "missing (its blob is gone)"
    except OSError:
        return "its blob is not a plain file"
    try:
        st = os.fstat(bfd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return "its blob is not a plain file this script wrote"
        if st.st_size != size:
            return f"size {st.st_size}, expected {size}"
        os.set_blocking(bfd, True)
        h = hashlib.sha256() if len(blob) == 64 else hashlib.sha1(b"blob %d\0" % size)
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError
            block = os.read(bfd, CHUNK)
            if not block:
                break
            h.update(block)
        digest = h.hexdigest()
    finally:
        os.close(bfd)
    if digest != blob:
        return f"{'sha256' if len(blob) == 64 else 'git blob id'} {digest}, expected {blob}"
    return None


def verify_snapshot(store: Store, deadline_s: float | None = None, start: str = "",
                    budget_bytes: int | None = None) -> dict:
    """Re-hash every file of a complete snapshot against the manifest its marker recorded, reading
    only the snapshot's blobs (streamed) and stopping at the deadline (default: 60 s plus the
    snapshot's bytes at VERIFY_RATE). Changes nothing. The answer: ``files`` and ``bytes`` checked,
    ``seconds``, ``bad`` ([path, problem] for each mismatch or missing file), ``finished`` (False:
    the deadline passed, or nothing could be checked) and ``error`` (why nothing could be checked).

    A slice (the continuous check, sglang_deploy/deploy/host/watch.py): the files in name order
    from the first at or after ``start``, whole files until ``budget_bytes`` are read (at least
    one); ``checked`` lists them and ``next`` names the file the next slice starts at ("" once
    the last file was checked: the next slice starts over), so a snapshot of S bytes is covered
    in about S / budget runs."""
    t0 = time.monotonic()
    out: dict = {"files": 0, "bytes": 0, "seconds": 0.0, "bad": [], "finished": False, "error": None}
    if budget_bytes is not None:
        out.update(checked=[], next="")
    try:
        recorded = read_marker(store)
    except ValueError as exc:
        out["error"] = "the snapshot has no completion marker" if str(exc) == "no marker" else str(exc)
        return out
    entries = []
    for path, value in recorded.items():
        problem = marker_entry_problem(path, value)
        if problem is not None:
            out["error"] = f"the marker is not one this script wrote ({problem})"
            return out
        if len(value) != 3:
            out["error"] = "the marker records no hashes (the snapshot was staged by an older deploy)"
            return out
        entries.append((path, value[0], value[2]))
    entries.sort()
    if budget_bytes is not None:
        entries = [e for e in entries if e[0] >= start] or entries
        read = 0
        for i, (_, size, _) in enumerate(entries):
            if i and read + size > budget_bytes:
                out["next"] = entries[i][0]
                entries = entries[:i]
                break
            read += size
    total = sum(size for _, size, _ in entries)
    deadline = t0 + (deadline_s if deadline_s is not None else 60 + total / VERIFY_RATE)
    repo = snaps_parent = blobs = snaps = None
    try:
        try:  # the store's root is the inventory's path; below it, no link is followed
            root = os.open(store.root, DIR_FLAGS & ~os.O_NOFOLLOW)
        except OSError:
            root = None
        if root is not None:
            repo = open_dir(root, store.name)
            os.close(root)
        if repo is not None:
            snaps_parent, blobs = open_dir(repo, "snapshots"), open_dir(repo, "blobs")
            snaps = open_dir(snaps_parent, store.commit) if snaps_parent is not None else None
        if snaps is None or blobs is None:
            out["bad"] = [[p, "missing"] for p, _, _ in entries]
            if budget_bytes is not None:
                out["checked"] = [p for p, _, _ in entries]
            out["finished"] = True
            return out
        for path, size, blob in sorted(entries):
            try:
                problem = _check_one(store, snaps, blobs, path, size, blob, deadline)
            except TimeoutError:
                out["error"] = (f"the {deadline - t0:.0f} s deadline passed after {out['files']} of {len(entries)} "
                                "files")
                return out
            out["files"] += 1
            out["bytes"] += size
            if budget_bytes is not None:
                out["checked"].append(path)
            if problem is not None:
                out["bad"].append([path, problem])
        out["finished"] = True
        return out
    finally:
        for fd in (repo, snaps_parent, blobs, snaps):
            if fd is not None:
                os.close(fd)
        out["seconds"] = round(time.monotonic() - t0, 3)


def served_store(state_dir: str) -> Store | None:
    """The store snapshot the running revision serves: the ``--model-path`` of the ``current``
    revision's argv.json when it is ``<store>/models--<name>/snapshots/<commit>``, else None."""
    try:
        current = _read_small_path(os.path.join(state_dir, "current")).strip()
        if not re.fullmatch(r"[0-9a-f]{16}", current):
            return None
        with open(os.path.join(state_dir, "revisions", current, "argv.json"), "rb") as fh:
            argv = json.loads(fh.read(1 << 20))
        path = argv[argv.index("--model-path") + 1]
    except (OSError, ValueError, IndexError, TypeError, AttributeError, RecursionError):
        return None
    if not isinstance(path, str) or CONTROLS.search(path) or not path.startswith("/"):
        return None
    snaps, commit = os.path.split(path.rstrip("/"))
    repo_dir, word = os.path.split(snaps)
    root, name = os.path.split(repo_dir)
    if word != "snapshots" or not HEX40.match(commit) or not name.startswith("models--") or not root:
        return None
    store = Store(root, "x", commit, (-1, -1))
    store.name, store.repo_dir = name, repo_dir
    store.blobs, store.snapshot = os.path.join(repo_dir, "blobs"), path.rstrip("/")
    store.marker = os.path.join(repo_dir, MARKS, commit)
    return store


def _read_small_path(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return os.read(fd, 256).decode("ascii", "replace")
    finally:
        os.close(fd)


def verify_served(args: argparse.Namespace) -> None:
    """``--verify-served``: one JSON line, the :func:`verify_snapshot` of the running revision's
    snapshot (``served``: its path, null when it serves none from a store); changes nothing."""
    store = served_store(args.state_dir or "")
    if store is None:
        print(json.dumps({"served": None}))
        return
    budget = args.verify_budget_bytes
    if budget is not None and budget <= 0:
        fail(2, f"{args.host}: --verify-budget-bytes must be > 0")
    result = verify_snapshot(store, args.verify_deadline_s, args.verify_from or "", budget)
    print(json.dumps({"served": store.snapshot, **result}))
