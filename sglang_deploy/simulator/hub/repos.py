"""The repositories the Hub stand-in serves, and the files in each: THE place a repo's files are listed.

A repository is its recorded metadata files (``checkpoints/<org>--<name>/``: the real
``config.json``, the index with its derived ``total_size``; see each provenance.json)
plus, for a checkpoint the Hub ships as one ``model.safetensors``, that file with a
header rebuilt from the config (tensors.py) and zeros for the data: the planner
reads headers, never weights. A test (or the weight-staging work) adds files by
building ``HubFile`` objects (``HubFile.from_bytes``, or any ``size`` + ``read``) and
passing them in ``extra_files`` to ``recorded_repos``.

Revisions: each repository has one commit, branch ``main`` and tag ``recorded``
point at it. No real Hub commit id is recorded for these snapshots, so the commit
id is derived from the files' content (stable while the files are unchanged).
"""

from __future__ import annotations

import functools
import hashlib
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

from sglang_deploy.simulator.hub import derive, tensors

CHECKPOINTS = derive.CHECKPOINTS
METADATA_FILES = ("config.json", "model.safetensors.index.json", "generation_config.json")
TAG = "recorded"
#: The Hub gates these (license acceptance): files answer 401/403 without a granted token.
GATED = {"meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.1-8B"}


def git_blob_sha1(data: bytes) -> str:
    """The id git (and the Hub's ETag for a non-LFS file) gives a file's content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class HubFile:
    size: int
    read: Callable[[int, int], bytes]         # (start, end exclusive) -> bytes
    lfs: bool = False
    digest: Callable[[], str] | None = None   # sha256 (LFS) or git blob sha1; computed on first use

    @classmethod
    def from_bytes(cls, data: bytes, lfs: bool | None = None) -> "HubFile":
        is_lfs = lfs if lfs is not None else len(data) > 10 * 1024 * 1024
        digest = (lambda: hashlib.sha256(data).hexdigest()) if is_lfs else (lambda: git_blob_sha1(data))
        return cls(size=len(data), read=lambda start, end: data[start:end], lfs=is_lfs,
                   digest=functools.lru_cache(maxsize=1)(digest))

    def etag(self) -> str:
        return self.digest() if self.digest else ""

    def blob_id(self) -> str:
        """The git blob id: of the content, or for an LFS file of its pointer file."""
        return git_blob_sha1(self.lfs_pointer() if self.lfs else self.read(0, self.size))

    def lfs_pointer(self) -> bytes:
        return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.etag()}\n"
                f"size {self.size}\n").encode()


@dataclass
class HubRepo:
    repo_id: str
    files: dict[str, HubFile]
    gated: bool = False
    tags: tuple[str, ...] = (TAG,)
    commit: str = ""
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.commit:
            h = hashlib.sha1(self.repo_id.encode())
            for name in sorted(self.files):
                f = self.files[name]
                h.update(f"\n{name} {f.size} ".encode() + f.read(0, min(f.size, 1 << 20)))
            self.commit = h.hexdigest()

    def resolve(self, revision: str) -> str | None:
        """A branch, a tag or the full commit id -> the commit; None for an unknown revision."""
        if revision in ("main", self.commit, *self.tags):
            return self.commit
        return None


def safetensors_file(tensor_list: list[tensors.Tensor]) -> HubFile:
    """A ``model.safetensors`` whose header lists the real tensors (names, dtypes, shapes,
    offsets in the order safetensors writes them) and whose data bytes are zeros."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape in sorted(tensor_list, key=lambda t: t[0]):
        size = tensors.nbytes((name, dtype, shape))
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    head = struct.pack("<Q", len(raw)) + raw
    total = len(head) + offset

    def read(start: int, end: int) -> bytes:
        end = min(end, total)
        prefix = head[start:end] if start < len(head) else b""
        return prefix + bytes(max(0, end - max(start, len(head))))

    def sha256() -> str:
        h = hashlib.sha256(head)
        zeros = bytes(1 << 24)
        left = offset
        while left:
            chunk = min(left, len(zeros))
            h.update(zeros[:chunk])
            left -= chunk
        return h.hexdigest()

    return HubFile(size=total, read=read, lfs=True, digest=functools.lru_cache(maxsize=1)(sha256))


def _checkpoint_files(directory: Path) -> dict[str, HubFile]:
    files = {name: HubFile.from_bytes((directory / name).read_bytes(), lfs=False)
             for name in METADATA_FILES if (directory / name).is_file()}
    if derive.LAYOUT.get(directory.name, {}).get("single_file"):
        files["model.safetensors"] = safetensors_file(derive.checkpoint_tensors(directory.name))
    return files


@functools.lru_cache(maxsize=None)
def _recorded(directory: Path) -> tuple[str, dict[str, HubFile]]:
    return directory.name.replace("--", "/", 1), _checkpoint_files(directory)


def recorded_repos(extra_files: Mapping[str, Mapping[str, HubFile]] | None = None,
                   only: Iterable[str] | None = None) -> dict[str, HubRepo]:
    """Every recorded checkpoint as a repository, keyed by repo id (``only`` to pick some),
    with ``extra_files`` (repo id -> {filename: HubFile}) added to it."""
    extra_files = extra_files or {}
    wanted = set(only) if only is not None else None
    repos = {}
    for directory in sorted(p for p in CHECKPOINTS.iterdir() if (p / "config.json").is_file()):
        repo_id, files = _recorded(directory)
        if wanted is not None and repo_id not in wanted:
            continue
        repos[repo_id] = HubRepo(repo_id, {**files, **extra_files.get(repo_id, {})}, gated=repo_id in GATED)
    return repos
