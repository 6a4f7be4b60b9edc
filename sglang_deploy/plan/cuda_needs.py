"""Whether a host's NVIDIA driver and GPUs can run the SGLang version a plan installs.

``data/cuda_needs.yaml`` records, per supported SGLang version and each with its source, the torch
its wheel pins, the CUDA build of that torch the default install gets, the GPU architectures that
build carries kernels for, and the CUDA major of its kernel wheels. :func:`judge` holds the GPU
probe's ``cuda_driver_version`` (NVML ``nvmlSystemGetCudaDriverVersion_v2``, e.g. ``"12.4"``: the
newest CUDA the driver runs; untrusted, so :func:`parse_cuda_version` checks and bounds it) and the
GPUs' compute capability against that, before anything is installed or stopped:

* a driver of an older CUDA major family than the build: refused (``PlanError`` naming the host,
  ``cuda_driver_version``, both versions and the driver branch needed). NVIDIA's minor version
  compatibility lets a CUDA X.y build run on any X.z driver of the family, never on an older major
  ("Minor Version Compatibility", docs.nvidia.com/deploy/cuda-compatibility/);
* a driver of the same family but older than the build: planned, with a warning (minor version
  compatibility runs it "with limited feature-set": no JIT of PTX newer than the driver);
* a GPU whose compute capability no cubin of the build runs on (a cubin for X.y runs on X.z, z >= y,
  only: CUDA C++ Programming Guide, "Binary Compatibility"): refused, naming ``compute_capability``;
* unknown (declared hardware, a probe that could not read the version, an install from another
  index than the default, a version without an entry): not refused; the plan says why it was not
  judged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.spec_checks import shown
from sglang_deploy.shipped import load_shipped_yaml

DATA_FILE = "cuda_needs.yaml"

#: A CUDA version as the probe writes it: "<major>.<minor>" (nvidia-smi's banner may give "<major>").
#: Bounded: CUDA's majors are one or two digits, a minor two (the probe writes (v % 1000) // 10).
_CUDA_RE = re.compile(r"([0-9]{1,2})(?:\.([0-9]{1,2}))?", re.ASCII)
_CC_RE = re.compile(r"([0-9]{1,2})\.([0-9])", re.ASCII)
MAX_TEXT = 16  # longer than any CUDA version; a longer value is refused without being parsed

Version = tuple[int, int]


class NeedsDataError(ValueError):
    """data/cuda_needs.yaml is malformed (a bug in the package's data, not the user's input)."""


@dataclass(frozen=True)
class Sourced:
    value: Any
    source: str


@dataclass(frozen=True)
class VersionNeeds:
    """What the default install of one SGLang version needs (data/cuda_needs.yaml)."""

    sglang: str
    torch: Sourced            # "2.14.1"
    torch_cuda: Sourced       # (13, 0)
    cubin: Sourced            # ((7, 5), (8, 0), ...)
    kernels_cuda_major: Sourced  # 13

    @property
    def family(self) -> int:
        """The CUDA major family the driver must belong to (or be newer than)."""
        return max(int(self.torch_cuda.value[0]), int(self.kernels_cuda_major.value))


@dataclass(frozen=True)
class Needs:
    versions: dict[str, VersionNeeds]
    families: dict[int, int]  # CUDA major -> the lowest driver branch of the family
    families_source: str


@dataclass(frozen=True)
class DriverCheck:
    """The plan's word on the driver and GPUs: ``status`` is ``ok``, ``minor-compat`` (planned, with a
    warning) or ``not-judged``; a refusal is a PlanError instead."""

    status: str
    summary: str
    lines: tuple[str, ...] = ()  # --explain: the rule applied and its sources
    cuda_driver_version: str | None = None
    needs_cuda: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "summary": self.summary, "cuda_driver_version": self.cuda_driver_version,
                "needs_cuda": self.needs_cuda}


def _text(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise NeedsDataError(f"{DATA_FILE}: {where}: must be a non-empty string")
    return raw.strip()


def _version(raw: Any, where: str) -> Version:
    m = _CUDA_RE.fullmatch(_text(raw, where))
    if m is None:
        raise NeedsDataError(f"{DATA_FILE}: {where}: {raw!r} is not a CUDA version")
    return int(m.group(1)), int(m.group(2) or 0)


def _capability(raw: Any, where: str) -> Version:
    m = _CC_RE.fullmatch(_text(raw, where))
    if m is None:
        raise NeedsDataError(f"{DATA_FILE}: {where}: {raw!r} is not a compute capability")
    return int(m.group(1)), int(m.group(2))


def _entry(raw: Any, where: str, *keys: str) -> Mapping[str, Any]:
    if not isinstance(raw, dict):
        raise NeedsDataError(f"{DATA_FILE}: {where}: must be a mapping")
    missing = [k for k in (*keys, "source") if k not in raw]
    if missing:
        raise NeedsDataError(f"{DATA_FILE}: {where}: missing {', '.join(missing)}")
    _text(raw["source"], f"{where}.source")
    return raw


def load_needs(raw: Any) -> Needs:
    """data/cuda_needs.yaml's content, checked: every entry has its ``source``."""
    if not isinstance(raw, dict) or not isinstance(raw.get("versions"), dict) or not raw["versions"]:
        raise NeedsDataError(f"{DATA_FILE}: needs a `versions` mapping")
    fam = _entry(raw.get("driver_families"), "driver_families", "families")
    if not isinstance(fam["families"], dict) or not fam["families"]:
        raise NeedsDataError(f"{DATA_FILE}: driver_families.families: must be a non-empty mapping")
    families: dict[int, int] = {}
    for major, entry in fam["families"].items():
        branch = entry.get("min_driver_branch") if isinstance(entry, dict) else None
        if not str(major).isdigit() or not isinstance(branch, int) or isinstance(branch, bool) or branch <= 0:
            raise NeedsDataError(f"{DATA_FILE}: driver_families.families.{major}: needs a min_driver_branch")
        families[int(major)] = branch
    versions: dict[str, VersionNeeds] = {}
    for version, entry in raw["versions"].items():
        where = f"versions.{version}"
        if not isinstance(entry, dict):
            raise NeedsDataError(f"{DATA_FILE}: {where}: must be a mapping")
        torch = _entry(entry.get("torch"), f"{where}.torch", "version")
        cuda = _entry(entry.get("torch_cuda"), f"{where}.torch_cuda", "version")
        archs = _entry(entry.get("torch_archs"), f"{where}.torch_archs", "cubin")
        kernels = _entry(entry.get("kernels"), f"{where}.kernels", "cuda_major")
        if not isinstance(archs["cubin"], list) or not archs["cubin"]:
            raise NeedsDataError(f"{DATA_FILE}: {where}.torch_archs.cubin: must be a non-empty list")
        major = kernels["cuda_major"]
        if not isinstance(major, int) or isinstance(major, bool) or major not in families:
            raise NeedsDataError(f"{DATA_FILE}: {where}.kernels.cuda_major: must be one of the driver families")
        torch_cuda = _version(cuda["version"], f"{where}.torch_cuda.version")
        if torch_cuda[0] not in families:
            raise NeedsDataError(f"{DATA_FILE}: {where}.torch_cuda.version: CUDA {torch_cuda[0]} has no driver family")
        versions[str(version)] = VersionNeeds(
            sglang=str(version),
            torch=Sourced(_text(torch["version"], f"{where}.torch.version"), torch["source"]),
            torch_cuda=Sourced(torch_cuda, cuda["source"]),
            cubin=Sourced(tuple(sorted(_capability(c, f"{where}.torch_archs.cubin") for c in archs["cubin"])),
                          archs["source"]),
            kernels_cuda_major=Sourced(major, kernels["source"]),
        )
    return Needs(versions=versions, families=families, families_source=fam["source"])


@lru_cache(maxsize=1)
def needs() -> Needs:
    """The package's data/cuda_needs.yaml."""
    path = resources.files("sglang_deploy").joinpath("data").joinpath(DATA_FILE)
    with path.open("r", encoding="utf-8") as fh:
        return load_needs(load_shipped_yaml(fh))


def parse_cuda_version(host: str, value: Any, field: str = "probe.cuda_driver_version") -> Version | None:
    """The probe's CUDA driver version, checked: None stays unknown; anything but a short
    "<major>[.<minor>]" string of ASCII digits (no spaces) with a major of 1 to 99 is refused, naming the field."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise PlanError(host, field, f"must be a CUDA version string such as '12.4' (or null), got {shown(value)}")
    m = _CUDA_RE.fullmatch(value) if len(value) <= MAX_TEXT else None
    if m is None:
        raise PlanError(host, field, f"{shown(value)} is not a CUDA version (<major>.<minor>, e.g. '12.4')")
    version = int(m.group(1)), int(m.group(2) or 0)
    if version[0] < 1:
        raise PlanError(host, field, f"{shown(value)} is not a CUDA version: the major is 1 or more")
    return version


def _dotted(v: Version) -> str:
    return f"{v[0]}.{v[1]}"


def _runs_on(cubin: tuple[Version, ...], cc: Version) -> bool:
    # A cubin for X.y runs on X.z with z >= y, never across majors (CUDA C++ Programming Guide,
    # "Binary Compatibility").
    return any(major == cc[0] and minor <= cc[1] for major, minor in cubin)


def _not_judged(why: str) -> DriverCheck:
    return DriverCheck("not-judged", f"not judged: {why}")


def judge(host: str, sglang_version: str, cuda_driver_version: Any, compute_capability: str, gpu_model: str,
          source: str, custom_index: bool, warnings: list[str], data: Needs | None = None) -> DriverCheck:
    """The driver and GPU check for one host's plan (see the module's docstring). Refusals raise
    PlanError; a planned host with a limit gets a warning appended to ``warnings``."""
    data = data or needs()
    have = parse_cuda_version(host, cuda_driver_version) if source != "declared" else None
    need = data.versions.get(sglang_version)
    if need is None:
        check = _not_judged(f"no recorded needs for SGLang {sglang_version} (data/{DATA_FILE})")
        warnings.append(f"driver: {check.summary}")
        return check
    if custom_index:
        return _not_judged("sglang_pip_index_url / sglang_pip_extra_index_urls / sglang_pip_find_links choose "
                           f"where torch comes from; the default install of SGLang {sglang_version} gets torch "
                           f"{need.torch.value} built for CUDA {_dotted(need.torch_cuda.value)}")
    built = _dotted(need.torch_cuda.value)
    what = f"SGLang {sglang_version} installs torch {need.torch.value} built for CUDA {built}"
    family = need.family
    branch = data.families[family]
    cc_match = _CC_RE.fullmatch(str(compute_capability))
    if cc_match is not None:
        cc = int(cc_match.group(1)), int(cc_match.group(2))
        if not _runs_on(need.cubin.value, cc):
            archs = ", ".join(_dotted(c) for c in need.cubin.value)
            raise PlanError(host, "compute_capability",
                            f"the {gpu_model} is compute capability {_dotted(cc)}; {what}, with kernels for compute "
                            f"capability {archs} only, none of which runs on it (a kernel built for X.y runs on X.z, "
                            "z >= y): plan an SGLang version whose torch is built for it")
    lines = (f"needs: {what} ({need.torch.source}; {need.torch_cuda.source}); its kernels are CUDA "
             f"{need.kernels_cuda_major.value} builds ({need.kernels_cuda_major.source})",
             f"rule: a CUDA {family}.x build runs on a driver of CUDA {family}.0 or newer (R{branch}+)"
             + (f", one older than CUDA {built} through minor version compatibility"
                if need.torch_cuda.value > (family, 0) else "") + f" ({data.families_source})",
             f"GPUs: kernels for compute capability {', '.join(_dotted(c) for c in need.cubin.value)} "
             f"({need.cubin.source})")
    if have is None:
        why = ("declared hardware: the deploy checks the GPU probe's driver before installing" if source == "declared"
               else "the GPU probe could not read the driver's CUDA version")
        check = DriverCheck("not-judged", f"not judged ({why}); {what}, which needs a driver of CUDA {family}.0 or "
                            f"newer (R{branch}+)", lines, None, built)
        if source != "declared":
            warnings.append(f"driver: {check.summary}")
        return check
    shown_have = _dotted(have)
    if have[0] < family:
        runs = [v for v, n in data.versions.items()
                if n.family <= have[0] and (cc_match is None or _runs_on(n.cubin.value, cc))]
        hint = (f"; SGLang {', '.join(runs)} runs on this driver" if runs else "")
        raise PlanError(host, "cuda_driver_version",
                        f"the driver supports CUDA {shown_have}; {what}, which needs a driver of CUDA {family}.0 or "
                        f"newer (R{branch}+: NVIDIA's minor version compatibility does not cross CUDA majors): "
                        f"upgrade the driver{hint}")
    if have < need.torch_cuda.value:
        check = DriverCheck("minor-compat", f"the driver supports CUDA {shown_have}, older than CUDA {built}, the "
                            f"build of torch {need.torch.value} that SGLang {sglang_version} installs: it runs through "
                            "CUDA minor version compatibility, with a limited feature set (no JIT of PTX newer than "
                            "the driver)", lines, shown_have, built)
        warnings.append(f"driver: {check.summary}")
        return check
    return DriverCheck("ok", f"the driver supports CUDA {shown_have}; {what}: ok", lines, shown_have, built)


__all__ = ["DriverCheck", "Needs", "NeedsDataError", "VersionNeeds", "judge", "load_needs", "needs",
           "parse_cuda_version"]
