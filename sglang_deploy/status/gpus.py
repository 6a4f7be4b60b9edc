"""The GPUs' health as the host's ``gpu_health.py`` reports it, checked for shape (:class:`GpuHealth`),
and judged by the rules `status`, the continuous check and the alerts share
(``sglang_deploy.hostrules.gpu``). Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from sglang_deploy.hostrules import gpu as gpu_rules
from sglang_deploy.untrusted import UntrustedInput, load_json, printable


GPU_HEALTH_BYTES = 1024 * 1024


def _text(value: Any, limit: int) -> str | None:
    if not isinstance(value, str):
        return None
    text = printable(value).strip()
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ---- the GPUs' health (sglang_deploy/deploy/host/gpu_health.py) ---------------------------------

# What is wrong with them is judged in sglang_deploy/hostrules/gpu.py (with the continuous check and the alerts).
_REASON = re.compile(r"[a-z0-9_]{1,40}")
_MAX_GPUS = 64


@dataclass(frozen=True)
class Gpu:
    """One GPU's health, checked for shape; None where NVML (or the kernel log) could not tell."""

    index: int
    name: str
    uuid: str
    bus_id: str
    ecc: tuple[int, int] | None = None  # (uncorrected, corrected), volatile
    retired_pages: tuple[int, int, bool] | None = None  # (single bit, double bit, pending)
    remapped_rows: tuple[int, int, bool, bool] | None = None  # (correctable, uncorrectable, pending, failure)
    reasons: tuple[str, ...] = ()
    foreign: tuple[tuple[int, int | None], ...] = ()  # (pid, bytes)
    foreign_bytes: int = 0
    xid: tuple[int, int | None] | None = None  # (count since boot, last XID)

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index, "name": self.name, "uuid": self.uuid, "bus_id": self.bus_id,
            "ecc": None if self.ecc is None else {"uncorrected": self.ecc[0], "corrected": self.ecc[1]},
            "retired_pages": None if self.retired_pages is None else dict(zip(
                ("single_bit", "double_bit", "pending"), self.retired_pages)),
            "remapped_rows": None if self.remapped_rows is None else dict(zip(
                ("correctable", "uncorrectable", "pending", "failure"), self.remapped_rows)),
            "clocks_event_reasons": list(self.reasons),
            "foreign_processes": [{"pid": p, "used_bytes": b} for p, b in self.foreign],
            "foreign_memory_bytes": self.foreign_bytes,
            "xid": None if self.xid is None else {"count": self.xid[0], "last": self.xid[1]}}


@dataclass(frozen=True)
class GpuHealth:
    error: str | None
    gpus: tuple[Gpu, ...] = ()


def _n(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63:
        raise ValueError("not a count")
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("not a boolean")
    return value


def _gpu(doc: Any, position: int) -> Gpu:
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    ecc, pages, rows, xid = doc.get("ecc"), doc.get("retired_pages"), doc.get("remapped_rows"), doc.get("xid")
    reasons = doc.get("clocks_event_reasons")
    foreign = doc.get("foreign_processes")
    if not isinstance(reasons, list) or not isinstance(foreign, list):
        raise ValueError("clocks_event_reasons and foreign_processes must be lists")
    procs = []
    for p in foreign[:256]:
        if not isinstance(p, dict):
            raise ValueError("a foreign process is not an object")
        used = p.get("used_bytes")
        procs.append((_n(p.get("pid")), None if used is None else _n(used)))
    return Gpu(
        index=_n(doc.get("index")), name=_text(doc.get("name"), 100) or "?", uuid=_text(doc.get("uuid"), 100) or "?",
        bus_id=_text(doc.get("bus_id"), 40) or "?",
        ecc=None if ecc is None else (_n(ecc["uncorrected"]), _n(ecc["corrected"])),
        retired_pages=None if pages is None else (_n(pages["single_bit"]), _n(pages["double_bit"]),
                                                  _flag(pages["pending"])),
        remapped_rows=None if rows is None else (_n(rows["correctable"]), _n(rows["uncorrectable"]),
                                                 _flag(rows["pending"]), _flag(rows["failure"])),
        reasons=tuple(r for r in reasons[:32] if isinstance(r, str) and _REASON.fullmatch(r)),
        foreign=tuple(procs), foreign_bytes=_n(doc.get("foreign_memory_bytes")),
        xid=None if xid is None else (_n(xid["count"]), None if xid.get("last") is None else _n(xid["last"])))


def parse_gpu_health(text: str | None) -> GpuHealth:
    """The host script's JSON line (its last line) as :class:`GpuHealth`; a line that does not
    have the contract's shape is an error naming the field, never shown."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return GpuHealth(error="the GPU health check printed nothing")
    try:
        doc = load_json(lines[-1], "the GPU health line", max_bytes=GPU_HEALTH_BYTES, max_depth=8)
    except UntrustedInput as exc:
        return GpuHealth(error=printable(str(exc))[:200])
    if not isinstance(doc, dict) or doc.get("schema") != 1 or not isinstance(doc.get("gpus"), list):
        return GpuHealth(error="the GPU health line is not schema 1")
    if doc.get("error") is not None:
        return GpuHealth(error=_text(doc.get("error"), 200) or "NVML could not be read")
    gpus = []
    for position, item in enumerate(doc["gpus"][:_MAX_GPUS]):
        try:
            gpus.append(_gpu(item, position))
        except (KeyError, TypeError, ValueError) as exc:
            return GpuHealth(error=f"the GPU health line's gpus[{position}] is malformed ({printable(str(exc))[:80]})")
    return GpuHealth(error=None, gpus=tuple(gpus))


def gpu_findings(health: GpuHealth) -> list[gpu_rules.Finding]:
    """What is wrong with the GPUs, problems and warnings, as the one judge of GPU facts rules
    (``sglang_deploy.hostrules.gpu``, which the continuous check and the alert rules share). A
    finding's tag is what the GPU column shows."""
    return gpu_rules.findings({"gpus": [g.as_dict() for g in health.gpus]})


def gpu_summary(health: GpuHealth | None, tags: Sequence[str]) -> str:
    """The GPU column: ``2x RTX A6000 ok``, ``8x H100 80GB HBM3: gpu3 row-remap failure``."""
    if health is None:
        return "-"
    if health.error is not None:
        return "? (not read)"
    names: dict[str, int] = {}
    for g in health.gpus:
        short = g.name[len("NVIDIA "):] if g.name.startswith("NVIDIA ") else g.name
        names[short] = names.get(short, 0) + 1
    what = " + ".join(f"{n}x {name}" for name, n in names.items()) or "no GPU"
    if not tags:
        return f"{what} ok"
    shown_tags = list(tags[:2]) + ([f"+{len(tags) - 2} more"] if len(tags) > 2 else [])
    return f"{what}: {', '.join(shown_tags)}"
