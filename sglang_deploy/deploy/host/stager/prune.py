"""Old snapshots pruned from the model store (the weight stager's ``--prune``): never one a staged
revision serves; unlinked blobs go too, partial downloads stay. Every folder is entered without
following a link. Standard library only.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import stat

from sglang_deploy.deploy.host.stager.inputs import HEX40
from sglang_deploy.deploy.host.stager.messages import say
from sglang_deploy.deploy.host.stager.store import MARKS, PARTIAL, open_dir

def _model_paths(state_dir: str) -> set[str]:
    """The --model-path of every revision staged on the host (the current and the previous one)."""
    paths = set()
    for name in glob.glob(os.path.join(state_dir, "revisions", "*", "argv.json")):
        try:
            with open(name, encoding="utf-8") as fh:
                argv = json.load(fh)
            paths.add(os.path.realpath(argv[argv.index("--model-path") + 1]))
        except (OSError, ValueError, IndexError, TypeError, AttributeError, RecursionError):
            continue
    return paths


def _entries(dir_fd: int) -> list[os.DirEntry]:
    with os.scandir(dir_fd) as it:
        return sorted(it, key=lambda e: e.name)


def _remove_tree(parent: int, name: str) -> None:
    """``name`` in ``parent`` and what it holds, links removed as links, never followed."""
    fd = open_dir(parent, name)
    if fd is None:
        os.unlink(name, dir_fd=parent)
        return
    try:
        for entry in _entries(fd):
            if entry.is_dir(follow_symlinks=False):
                _remove_tree(fd, entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _link_targets(fd: int, out: set[str]) -> None:
    """The blob names the links under ``fd`` point at (the last segment of each link's target)."""
    for entry in _entries(fd):
        if entry.is_symlink():
            out.add(os.readlink(entry.name, dir_fd=fd).rstrip("/").rsplit("/", 1)[-1])
        elif entry.is_dir(follow_symlinks=False):
            sub = open_dir(fd, entry.name)
            if sub is not None:
                try:
                    _link_targets(sub, out)
                finally:
                    os.close(sub)


def prune(args: argparse.Namespace) -> None:
    """Per model folder of the store keep the ``--keep`` newest verified snapshots, and always
    those a staged revision serves (the running and the previous one); remove the rest, their
    markers and refs, and the blobs no remaining snapshot links to (partial downloads stay).
    Only real folders ``models--*`` are entered, never through a link; only snapshots and markers
    named by a commit (40 hex), refs (plain files) naming a removed commit, and plain files in
    ``blobs`` are removed."""
    protected = _model_paths(args.state_dir)
    try:
        root = os.open(args.store, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    real_root = os.path.realpath(args.store)
    try:
        for top in _entries(root):
            if top.name.startswith("models--") and top.is_dir(follow_symlinks=False):
                repo = open_dir(root, top.name)
                if repo is not None:
                    try:
                        _prune_repo(args, repo, top.name, os.path.join(real_root, top.name), protected)
                    finally:
                        os.close(repo)
    finally:
        os.close(root)


def _prune_repo(args: argparse.Namespace, repo: int, name: str, real: str, protected: set[str]) -> None:
    snaps, marks, refs, blobs = (open_dir(repo, d) for d in ("snapshots", MARKS, "refs", "blobs"))
    try:
        if snaps is None:
            return
        commits = [e.name for e in _entries(snaps) if HEX40.match(e.name) and e.is_dir(follow_symlinks=False)]

        def age(commit: str) -> float:
            for fd in (marks, snaps):
                if fd is not None:
                    try:
                        st = os.stat(commit, dir_fd=fd, follow_symlinks=False)
                        if fd == snaps or stat.S_ISREG(st.st_mode):
                            return st.st_mtime
                    except OSError:
                        continue
            return 0.0

        kept = [c for c in commits if os.path.join(real, "snapshots", c) in protected]
        for commit in sorted(commits, key=age, reverse=True):
            if commit in kept:
                continue
            if len(kept) < args.keep:
                kept.append(commit)
                continue
            _remove_tree(snaps, commit)
            if marks is not None and _is_file(marks, commit):
                os.unlink(commit, dir_fd=marks)
            if refs is not None:
                for ref in _entries(refs):
                    if ref.is_file(follow_symlinks=False) and _read_small(refs, ref.name).strip() == commit:
                        os.unlink(ref.name, dir_fd=refs)
            say(f"pruned {name} snapshot {commit}")
        linked: set[str] = set()
        for commit in kept:
            fd = open_dir(snaps, commit)
            if fd is not None:
                try:
                    _link_targets(fd, linked)
                finally:
                    os.close(fd)
        for blob in _entries(blobs) if blobs is not None else []:
            if not blob.name.endswith(PARTIAL) and blob.is_file(follow_symlinks=False) and blob.name not in linked:
                os.unlink(blob.name, dir_fd=blobs)
    finally:
        for fd in (snaps, marks, refs, blobs):
            if fd is not None:
                os.close(fd)


def _is_file(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _read_small(dir_fd: int, name: str) -> str:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return ""
    try:
        return os.read(fd, 256).decode("ascii", "replace")
    finally:
        os.close(fd)
