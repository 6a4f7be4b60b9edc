"""Where a host's compile caches live: one directory per SGLang version under the cache root
(``sglang_cache_dir``), named in the service's environment for every cache the version and the
libraries it pins read. Pure: the setting, the per-version table and the disk allowance; the deploy
creates the directory before the restart and prunes those of versions whose venv is gone
(``sglang_deploy/deploy/caches.py``).

Why one directory per version: SGLang (and the Triton, torch, DeepGEMM, FlashInfer and TileLang it
pins) compile kernels at first start; the caches are only valid for the version that wrote them, so
a new version starts cold beside the old one's, and a rollback to the previous version finds its own
still warm. The directory is outside the revisions (a rollback swaps files, never caches) and owned
by the service user (the server writes it).

What each version reads (the released wheels, ``sglang/srt/environ.py`` unless named):

- ``SGLANG_CACHE_DIR``: declared in 0.5.15 and later (``Envs.SGLANG_CACHE_DIR``, default
  ``~/.cache/sglang``); FlashInfer's autotune results go under it
  (``srt/model_executor/runner/flashinfer_autotune.py``, ``flashinfer_autotune_cache_path``). 0.5.9
  has no such variable.
- ``SGLANG_DG_CACHE_DIR``: every version; ``srt/layers/deep_gemm_wrapper/compile_utils.py`` sets
  DeepGEMM's ``DG_JIT_CACHE_DIR`` from it at import. Default ``~/.cache/deep_gemm`` in 0.5.9 and
  0.5.15, ``<SGLANG_CACHE_DIR>/deep_gemm`` from 0.5.19 (``_default_cache_subdir``).
- ``TRITON_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``, ``CUDA_CACHE_PATH``, ``FLASHINFER_WORKSPACE_BASE``:
  read by Triton (``triton/knobs.py``), torch inductor (``torch/_inductor/runtime/cache_dir_utils.py``),
  the CUDA driver and FlashInfer, which every version pins (METADATA ``Requires-Dist: torch``,
  ``flashinfer_python``). 0.5.19 and 0.5.23 set them under ``SGLANG_CACHE_DIR`` themselves
  (``third_party_cache_defaults``, applied by ``redirect_third_party_caches`` from
  ``sglang/__init__.py``, with ``setdefault``); 0.5.9 and 0.5.15 leave each at its library's default
  in the home directory. The plan names them for every version, with 0.5.23's sub-directories.
- ``TILELANG_CACHE_DIR``: 0.5.23's ``third_party_cache_defaults`` sets it for ``tilelang==0.1.12``;
  0.5.19 pins the same TileLang (METADATA) without redirecting it. 0.5.15 pins ``tilelang==0.1.11``
  and 0.5.9 none: not named there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.settings import DEFAULTS
from sglang_deploy.plan.spec_checks import shown
from sglang_deploy.plan.weights import store_problem

KEY = "sglang_cache_dir"
#: The deploy's own state (root-only revisions, markers): never a cache root, nor inside one.
STATE_ROOT = "/var/lib/sglang-deploy"  # sglang_deploy.lifecycle.revision.STATE_ROOT (a floor above)

#: Room the disk check keeps for a version's caches before its first start (the deploy's own
#: allowance, not a figure any release states): what is already in the version's directory counts
#: against it, so a warm cache needs none. It covers a DeepGEMM JIT cache of an FP8 MoE and the
#: Triton/inductor/FlashInfer kernels of one model on one architecture with room to spare; a host
#: that compiles more sets a larger ``sglang_model_disk_margin_mib``.
ALLOWANCE_BYTES = 4 << 30


def _v(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


#: name: (first version that reads it, sub-directory of the version's directory ("" itself), why)
_TABLE: tuple[tuple[str, str, str, str], ...] = (
    ("SGLANG_CACHE_DIR", "0.5.15", "",
     "SGLang's own cache (srt/environ.py SGLANG_CACHE_DIR): FlashInfer autotune results "
     "(srt/model_executor/runner/flashinfer_autotune.py flashinfer_autotune_cache_path)"),
    ("SGLANG_DG_CACHE_DIR", "0.5.9", "deep_gemm",
     "DeepGEMM's JIT cache: srt/layers/deep_gemm_wrapper/compile_utils.py sets DG_JIT_CACHE_DIR from it"),
    ("TRITON_CACHE_DIR", "0.5.9", "triton",
     "Triton's kernel cache (triton/knobs.py; srt/environ.py third_party_cache_defaults from 0.5.19)"),
    ("TORCHINDUCTOR_CACHE_DIR", "0.5.9", "inductor",
     "torch inductor's cache (torch/_inductor/runtime/cache_dir_utils.py; third_party_cache_defaults from "
     "0.5.19)"),
    ("CUDA_CACHE_PATH", "0.5.9", "nv",
     "the CUDA driver's PTX JIT cache (srt/environ.py third_party_cache_defaults from 0.5.19)"),
    ("FLASHINFER_WORKSPACE_BASE", "0.5.9", "",
     "FlashInfer's JIT cache goes to <base>/.cache/flashinfer (srt/environ.py third_party_cache_defaults "
     "from 0.5.19)"),
    ("TILELANG_CACHE_DIR", "0.5.19", "tilelang",
     "TileLang's kernel cache (srt/environ.py third_party_cache_defaults in 0.5.23; tilelang==0.1.12 is "
     "pinned from 0.5.19)"),
)

#: Every variable some supported version gets (spec_checks.OWNED_ENV refuses them in sglang_env).
CACHE_VARIABLES = tuple(name for name, *_ in _TABLE)


@dataclass(frozen=True)
class Caches:
    """The compile caches of one host's SGLang version."""

    root: str  # sglang_cache_dir
    version: str

    @property
    def dir(self) -> str:
        """The version's own directory: created before the restart, kept across restarts and rollbacks."""
        return f"{self.root}/sglang-{self.version}"

    def env(self) -> list[tuple[str, str, str]]:
        """(name, value, why) of every cache variable this version reads, in the table's order."""
        return [(name, f"{self.dir}/{sub}" if sub else self.dir, why)
                for name, first, sub, why in _TABLE if _v(self.version) >= _v(first)]

    def as_dict(self) -> dict[str, Any]:
        return {"root": self.root, "dir": self.dir, "allowance_bytes": ALLOWANCE_BYTES,
                "env": {name: value for name, value, _ in self.env()}}

    def explain(self) -> str:
        return (f"{self.dir}: one directory for SGLang {self.version}'s compile caches "
                f"({', '.join(name for name, _, _ in self.env())}), owned by the service user, kept across "
                f"restarts and rollbacks, removed once the version's venv is gone; "
                f"{ALLOWANCE_BYTES >> 30} GiB of it counted in the weights' disk check")


def cache_root(host: str, data: Mapping[str, Any], others: Mapping[str, str]) -> str:
    """``sglang_cache_dir`` from a host's merged data: an absolute directory of its own (the model
    store's rules: no system directory, none above one, nothing inside /etc, /usr, ...), not the
    deploy's state, and neither equal to, inside nor above any of ``others`` (setting name: path,
    e.g. the model store and the venvs); PlanError names the host and the key."""
    value = data.get(KEY, DEFAULTS[KEY])
    if problem := store_problem(value):
        raise PlanError(host, KEY, f"{problem.replace('the store', 'the cache root')}, got {shown(value)}")
    path = value.rstrip("/")
    for name, other in {"the deploy's state": STATE_ROOT, **others}.items():
        other = other.rstrip("/")
        if path == other or path.startswith(other + "/") or other.startswith(path + "/"):
            raise PlanError(host, KEY, f"must be a directory of its own, not {name} ({other}), inside it or "
                                       f"above it, got {shown(value)}")
    return str(path)
