"""What is wrong with a host's GPUs, from ``gpu_health.py``'s JSON (schema 1, one object per GPU):
one list of findings, each with a kind (the alert rules' ``problem`` label), a short tag (the GPU
column of ``status``), a sentence and a severity. ``status``, the continuous check and the alert
rules all judge by this module, so a fact reads the same in each.

The counters are NVML's and the kernel log's as the host reports them: volatile ECC counts since
the driver loaded, XID events since boot. A point-in-time reader (``status``, the check) cannot
tell "in the last hour" from them, so every judge uses the same reading: a count above zero stands
until the driver reloads or the host reboots (a GPU reset clears them), which is also what an
operator must do about it. The alerts add only their ``for:`` hold times.

Reads what it is given defensively (a value of the wrong type is no finding), so the check can hand
it the host script's output as parsed, and ``status`` its validated copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

#: Memory held on a GPU by processes other than the server above this is a problem: the next
#: restart may not fit its memory fraction. 512 MiB leaves a desktop's display server alone.
FOREIGN_MEMORY_BYTES = 512 * 1024 * 1024
#: Clocks event reasons that mean the hardware or the driver slowed the GPU down for heat or power
#: (nvml.h nvmlClocksEventReasonHwSlowdown, ...HwThermalSlowdown, ...HwPowerBrakeSlowdown,
#: ...SwThermalSlowdown); idle, application clocks, the software power cap and sync boost are normal.
SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")

PROBLEM, WARNING = "problem", "warning"
#: The kinds of finding, each with the PromQL expression of its alert over the check's metrics
#: (docs/monitoring.md): the alert fires exactly when the rule here finds it.
ALERT_EXPRESSIONS = {
    "ecc_uncorrected": "sglang_deploy_gpu_ecc_uncorrected_errors_total > 0",
    "xid": "sglang_deploy_gpu_xid_errors_total > 0",
    "row_remap_failure": "sglang_deploy_gpu_row_remap_failure == 1",
    "reset_pending": "sglang_deploy_gpu_row_remap_pending == 1 or sglang_deploy_gpu_retired_pages_pending == 1",
    "hw_slowdown": ('sglang_deploy_gpu_clocks_event_active{reason=~"' + "|".join(SLOWDOWN_REASONS) + '"} == 1'),
    "foreign_memory": f"sglang_deploy_gpu_foreign_memory_bytes > {FOREIGN_MEMORY_BYTES}",
}


@dataclass(frozen=True)
class Finding:
    kind: str  # a key of ALERT_EXPRESSIONS for a problem; a warning's own word otherwise
    gpu: int | None  # None: about the host, not one GPU
    tag: str  # short, for a table's column: "gpu0 ecc"
    text: str  # the sentence
    severity: str  # PROBLEM | WARNING

    @property
    def key(self) -> str:
        """What stays the same while the finding stands (its counts may change): ``gpu0 ecc_uncorrected``."""
        return f"gpu{self.gpu} {self.kind}" if self.gpu is not None else self.kind


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _obj(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def gpu_findings(gpu: Mapping[str, Any]) -> list[Finding]:
    """One GPU's findings, problems and warnings, in a fixed order."""
    index = gpu.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        return []
    at, g = f"gpu{index}", f"gpu {index}"
    out: list[Finding] = []

    def add(kind: str, tag: str, text: str, severity: str = PROBLEM) -> None:
        out.append(Finding(kind, index, f"{at} {tag}", f"{g}: {text}", severity))

    ecc = _obj(gpu.get("ecc"))
    uncorrected, corrected = _count(ecc.get("uncorrected")), _count(ecc.get("corrected"))
    if uncorrected:
        add("ecc_uncorrected", "ecc", f"{uncorrected} uncorrected ECC error(s) since the driver loaded "
                                      "(nvmlDeviceGetTotalEccErrors, volatile)")
    elif corrected:
        add("ecc_corrected", "ecc corrected", f"{corrected} corrected ECC error(s) since the driver loaded", WARNING)
    pages = _obj(gpu.get("retired_pages"))
    if pages.get("pending") is True:
        add("reset_pending", "page-retirement pending",
            "a page retirement waits for a GPU reset (nvmlDeviceGetRetiredPagesPendingStatus)")
    elif _count(pages.get("single_bit")) or _count(pages.get("double_bit")):
        add("retired_pages", "retired pages", f"{_count(pages.get('single_bit'))} single-bit and "
                                              f"{_count(pages.get('double_bit'))} double-bit retired page(s)", WARNING)
    rows = _obj(gpu.get("remapped_rows"))
    if rows.get("failure") is True:
        add("row_remap_failure", "row-remap failure", "a row remap failed: its memory can no longer repair itself "
                                                      "(nvmlDeviceGetRemappedRows failureOccurred)")
    if rows.get("pending") is True:
        add("reset_pending", "row-remap pending", "a row remap waits for a GPU reset "
                                                  "(nvmlDeviceGetRemappedRows isPending)")
    if rows.get("pending") is not True and rows.get("failure") is not True and (
            _count(rows.get("correctable")) or _count(rows.get("uncorrectable"))):
        add("remapped_rows", "remapped rows", f"{_count(rows.get('correctable'))} correctable and "
                                              f"{_count(rows.get('uncorrectable'))} uncorrectable row(s) remapped",
            WARNING)
    reasons = gpu.get("clocks_event_reasons")
    slow = [r for r in reasons if r in SLOWDOWN_REASONS] if isinstance(reasons, list) else []
    if slow:
        add("hw_slowdown", slow[-1].replace("_", "-"), f"clocks slowed down: {', '.join(slow)} "
                                                       "(nvmlDeviceGetCurrentClocksEventReasons)")
    xid = gpu.get("xid")
    if isinstance(xid, Mapping) and _count(xid.get("count")):
        last = xid.get("last") if isinstance(xid.get("last"), int) else None
        add("xid", f"xid {last}", f"{_count(xid.get('count'))} XID event(s) in the kernel log since boot, "
                                  f"the last XID {last}")
    foreign = _count(gpu.get("foreign_memory_bytes"))
    procs = [p for p in gpu.get("foreign_processes") or [] if isinstance(p, Mapping)] \
        if isinstance(gpu.get("foreign_processes"), list) else []
    if foreign > FOREIGN_MEMORY_BYTES:
        pids = ", ".join(str(p.get("pid")) for p in procs[:5])
        add("foreign_memory", f"foreign {_gib(foreign)}", f"{_gib(foreign)} used by processes other than the server"
                                                          + (f" (pid {pids})" if pids else ""))
    elif any(p.get("used_bytes") is None for p in procs):
        unknown = ", ".join(str(p.get("pid")) for p in procs if p.get("used_bytes") is None)
        add("foreign_unknown", "foreign ?", f"a process other than the server runs on it (pid {unknown}; "
                                            "NVML cannot tell its memory)", WARNING)
    return out


def findings(health: Mapping[str, Any], limit: int = 64) -> list[Finding]:
    """Every GPU's findings (the first ``limit`` GPUs), then the host's: an unreadable kernel log
    (every ``xid`` null) is a warning, never a problem."""
    gpus = [g for g in health.get("gpus") or [] if isinstance(g, Mapping)][:limit] \
        if isinstance(health.get("gpus"), list) else []
    out = [f for gpu in gpus for f in gpu_findings(gpu)]
    if gpus and any(g.get("xid") is None for g in gpus):
        out.append(Finding("xid_unknown", None, "xid ?", "XID events unknown: the kernel log could not be read",
                           WARNING))
    return out


def problems(found: list[Finding]) -> list[Finding]:
    return [f for f in found if f.severity == PROBLEM]
