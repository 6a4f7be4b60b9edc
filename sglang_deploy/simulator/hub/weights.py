"""Weight files for the Hub stand-in: a checkpoint of a configurable size, generated deterministically.

The recorded checkpoints (repos.py) carry real metadata; their weights are what the staging
of weights on a host downloads, and nobody needs real numerics for that: only sizes, bytes
that differ between files and shards (so a corrupted or swapped file is noticed) and the
sha256 the Hub lists for every LFS file. Each shard is a valid safetensors file (an 8-byte
header length, a JSON header naming one U8 tensor, then the data; the safetensors format as
documented in huggingface/safetensors, README "Format") whose data is a seeded pseudo-random
stream: ``random.Random(seed).randbytes`` per 1 MiB block, the same bytes on every run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import struct

from sglang_deploy.simulator.hub.repos import HubFile

BLOCK = 1 << 20


def tensor_name(seed: str) -> str:
    return "filler." + hashlib.sha256(seed.encode()).hexdigest()[:12]


def _shard(seed: str, size: int) -> HubFile:
    name = tensor_name(seed)[len("filler."):]
    raw = json.dumps({"__metadata__": {"format": "pt"}, f"filler.{name}": {"dtype": "U8", "shape": [0],
                      "data_offsets": [0, 0]}}, separators=(",", ":")).encode()
    # The tensor covers the data bytes: its shape is fixed once the header's own length is known.
    data_len = max(0, size - 8 - len(raw) - 16)
    raw = json.dumps({"__metadata__": {"format": "pt"}, f"filler.{name}": {
        "dtype": "U8", "shape": [data_len], "data_offsets": [0, data_len]}}, separators=(",", ":")).encode()
    raw += b" " * ((size - 8 - data_len - len(raw)) if size - 8 - data_len >= len(raw) else 0)
    head = struct.pack("<Q", len(raw)) + raw
    total = len(head) + data_len

    @functools.lru_cache(maxsize=8)
    def block(i: int) -> bytes:
        return random.Random(f"{seed}/{i}").randbytes(BLOCK)

    def read(start: int, end: int) -> bytes:
        end = min(end, total)
        out = bytearray(head[start:end] if start < len(head) else b"")
        pos = max(start, len(head))
        while pos < end:
            off = pos - len(head)
            i, j = divmod(off, BLOCK)
            take = min(BLOCK - j, end - pos)
            out += block(i)[j:j + take]
            pos += take
        return bytes(out)

    def sha256() -> str:
        h = hashlib.sha256()
        for pos in range(0, total, 1 << 22):
            h.update(read(pos, min(total, pos + (1 << 22))))
        return h.hexdigest()

    return HubFile(size=total, read=read, lfs=True, digest=functools.lru_cache(maxsize=1)(sha256))


def weight_files(repo_id: str, total_bytes: int, shards: int = 2, salt: str = "") -> dict[str, HubFile]:
    """``model-0000k-of-0000n.safetensors`` shards adding up to ``total_bytes`` (each at least
    the header), plus their ``model.safetensors.index.json``. ``salt`` makes another commit's bytes."""
    per = total_bytes // shards
    files: dict[str, HubFile] = {}
    weight_map = {}
    for k in range(1, shards + 1):
        name = f"model-{k:05d}-of-{shards:05d}.safetensors"
        size = per if k < shards else total_bytes - per * (shards - 1)
        files[name] = _shard(f"{repo_id}/{salt}/{name}", size)
        weight_map[tensor_name(f"{repo_id}/{salt}/{name}")] = name
    index = {"metadata": {"total_size": sum(f.size for f in files.values())}, "weight_map": weight_map}
    files["model.safetensors.index.json"] = HubFile.from_bytes(json.dumps(index, indent=2).encode(), lfs=False)
    return files
