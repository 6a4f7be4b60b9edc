"""A fleet compiles once per class: the compile caches of the first host of a hardware class to pass
its gate in a rollout (the canary) seed the other hosts of that class before their stop. Pure: the
seed's key, where it lies on the controller and its manifest; the deploy carries it
(``sglang_deploy/deploy/cache_seed.py``) and the rollout names the directory (``RunContext.cache_seed_dir``).

What a seed may be shared by: the kernels SGLang and the libraries it pins compile are keyed by the
GPU architecture, the SGLang version and the shapes the model and layout give them (DeepGEMM's
JIT cache per GEMM shape, FlashInfer's and Triton's per kernel and shape, torch inductor's per
graph). A seed is keyed by the hardware class (GPU model and count, architecture, topology,
SGLang version, model and its revision: ``plan.tuning_record.hardware_class``) and the launch
arguments without the ones that name only the host (``HOST_ONLY``); two hosts of the same key
compile the same kernels. The seed is the version's whole cache directory, as the canary left it
after its first start passed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Sequence

from sglang_deploy.plan.inventory_plan import argv_without
from sglang_deploy.plan.tuning_record import hardware_class
from sglang_deploy.untrusted import UntrustedInput, load_json

#: Launch arguments that differ between hosts of one class and change no kernel.
HOST_ONLY = frozenset({"--host", "--port", "--dist-init-addr", "--node-rank", "--served-model-name",
                       "--api-key", "--model-path", "--model", "--tokenizer-path", "--log-level",
                       "--enable-metrics", "--bootstrap-port"})
#: A seed larger than this is not copied (the disk check keeps caches.ALLOWANCE_BYTES for a cold
#: start's caches; a seed is what one start of one model compiled, far below it in practice).
MAX_SEED_BYTES = 16 << 30
MANIFEST_MAX_BYTES = 16 * 1024
_KEY = re.compile(r"[0-9a-f]{24}")
_SHA = re.compile(r"[0-9a-f]{64}")


def _class_argv(argv: Sequence[str]) -> list[str]:
    return argv_without(argv, HOST_ONLY)


def seed_key(plan: Any) -> str:
    """The key of the caches a plan's server compiles (the module's docstring)."""
    doc = {"class": hardware_class(plan).as_dict(), "argv": _class_argv(plan.argv)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]


def manifest_path(seed_dir: str, key: str) -> str:
    """The manifest of a key in the rollout's seed directory: written once (the first host of the
    class to pass claims it), naming the tar by its digest."""
    if not _KEY.fullmatch(key):
        raise ValueError(f"not a seed key: {key!r}")
    return os.path.join(seed_dir, f"{key}.json")


def tar_path(seed_dir: str, key: str, sha256: str) -> str:
    """The tar of a key, by its digest: two hosts of one class that pass in the same wave each
    write their own, and the manifest names the one that won."""
    if not _KEY.fullmatch(key) or not _SHA.fullmatch(sha256):
        raise ValueError(f"not a seed key and digest: {key!r} {sha256!r}")
    return os.path.join(seed_dir, f"{key}-{sha256}.tar")


@dataclass(frozen=True)
class Seed:
    key: str
    sha256: str
    bytes: int
    source_host: str
    sglang_version: str
    #: the source host's start that compiled these caches, process start to ready (downtime.measure's
    #: start_s); None when it was not measured
    start_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "sha256": self.sha256, "bytes": self.bytes, "source_host": self.source_host,
                "sglang_version": self.sglang_version, "start_s": self.start_s}

    def describe(self) -> str:
        size = f"{self.bytes / (1 << 20):.1f} MiB" if self.bytes >= 1 << 20 else f"{self.bytes} bytes"
        return f"{size} from {self.source_host} (sha256 {self.sha256[:12]})"


def parse_manifest(text: str | bytes, key: str, where: str) -> Seed:
    """A manifest's text as a Seed of ``key``; ValueError names what is wrong."""
    try:
        doc = load_json(text, where, MANIFEST_MAX_BYTES, max_depth=3)
    except UntrustedInput as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(doc, dict) or doc.get("key") != key:
        raise ValueError(f"{where}: not the manifest of seed {key}")
    sha, size = doc.get("sha256"), doc.get("bytes")
    host, version = doc.get("source_host"), doc.get("sglang_version")
    if not isinstance(sha, str) or not _SHA.fullmatch(sha):
        raise ValueError(f"{where}: sha256 must be 64 hex digits")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_SEED_BYTES:
        raise ValueError(f"{where}: bytes must be a whole number from 1 to {MAX_SEED_BYTES}")
    for name, value in (("source_host", host), ("sglang_version", version)):
        if not isinstance(value, str) or not value or len(value) > 253 or not value.isprintable():
            raise ValueError(f"{where}: {name} must be a short printable string")
    start = doc.get("start_s")
    if start is not None and (not isinstance(start, (int, float)) or isinstance(start, bool)
                              or not 0 < start < 86400):
        raise ValueError(f"{where}: start_s must be seconds between 0 and a day")
    return Seed(key=key, sha256=sha, bytes=size, source_host=str(host), sglang_version=str(version),
                start_s=float(start) if start is not None else None)


@dataclass(frozen=True)
class SeedPlan:
    """What a host does with its class's seed in this run: take it, offer its own, or neither."""

    key: str
    seed_dir: str
    take: Seed | None = None  # the seed to unpack before the stop
    offer: bool = False  # pack its caches after a passing gate (no seed of its key yet)
    note: str = ""  # why neither, when a seed is there but not taken
