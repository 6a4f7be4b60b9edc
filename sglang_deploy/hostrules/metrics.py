"""The continuous check's metrics (node_exporter's textfile collector), the contract of
docs/monitoring.md that the shipped alert rules read: each metric's name, type and help
(:data:`METRICS`), the drift kinds (:data:`DRIFT_KEYS`, which `status` reads from the check's line
too) and the file's text (:func:`metrics_text`). Standard library only: the check writes it on the
host (``sglang_deploy/deploy/host/watch.py``); `tests/test_alert_rules.py` holds the rules to it.
"""

from __future__ import annotations

import re
from typing import Any

#: What the check compares with the deployed revision, in the order it reports them (its history
#: line's ``drift``, the ``what`` label of ``sglang_deploy_drift``).
DRIFT_KEYS = ("unit", "env", "nccl_conf", "argv", "sglang_version", "weights")
#: The textfile the check writes, per service.
PROM_NAME = "sglang_deploy_{service}.prom"


def obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (what a host wrote is read defensively)."""
    return value if isinstance(value, dict) else {}


def obj_or_none(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def number(value: object) -> float | None:
    """A finite JSON number as a float, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:  # an int of hundreds of digits (JSON has no bound on them)
        return None
    return value if value == value and abs(value) != float("inf") else None


def _label(value: object) -> str:
    """A label value in the text exposition format (backslash, double quote and newline escaped).
    What a host wrote may hold any character JSON can spell: one that is not printable (a lone
    surrogate, which UTF-8 cannot encode, a control character) reads as ``?``, so the file is
    always written and always printable."""
    text = "".join(c if c.isprintable() or c == "\n" else "?" for c in str(value)[:200])
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _fmt(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value)) if abs(value) < 1e15 else \
        repr(float(value))


#: name -> (type, help): the metrics of docs/monitoring.md, in its order.
METRICS = {
    "sglang_deploy_watch_last_run_timestamp_seconds": ("gauge", "Unix time the last check that ran ended."),
    "sglang_deploy_watch_last_skip_timestamp_seconds": ("gauge", "Unix time the last run was skipped because a "
                                                                 "deploy held the host's lock."),
    "sglang_deploy_watch_interval_seconds": ("gauge", "The configured interval of the check."),
    "sglang_deploy_watch_duration_seconds": ("gauge", "Wall time of the last check."),
    "sglang_deploy_watch_check_success": ("gauge", "1 when the last measurement passed, else 0."),
    "sglang_deploy_service_up": ("gauge", "1 when the unit is active and running, else 0."),
    "sglang_deploy_decode_tokens_per_second": ("gauge", "Single-stream decode rate measured by the last check."),
    "sglang_deploy_prefill_tokens_per_second": ("gauge", "Prefill rate (input tokens / TTFT of a long prompt) "
                                                         "measured by the last check, where it measures prefill."),
    "sglang_deploy_baseline_decode_tokens_per_second": ("gauge", "The host's own baseline for the deployed "
                                                                 "revision's hardware, model and version."),
    "sglang_deploy_target_decode_tokens_per_second": ("gauge", "The target decode rate."),
    "sglang_deploy_throughput_tolerance_ratio": ("gauge", "Allowed fraction below the baseline."),
    "sglang_deploy_drift": ("gauge", "1 when that thing differs from the deployed revision, else 0."),
    "sglang_deploy_revision_info": ("gauge", "The deployed and running revisions and the installed SGLang."),
    "sglang_deploy_gpu_info": ("gauge", "One per GPU."),
    "sglang_deploy_gpu_ecc_uncorrected_errors_total": ("counter", "NVML volatile uncorrected ECC errors."),
    "sglang_deploy_gpu_ecc_corrected_errors_total": ("counter", "NVML volatile corrected ECC errors."),
    "sglang_deploy_gpu_retired_pages": ("gauge", "Pages retired, by cause."),
    "sglang_deploy_gpu_retired_pages_pending": ("gauge", "1 when a page retirement waits for a reset."),
    "sglang_deploy_gpu_remapped_rows": ("gauge", "Rows remapped, by kind."),
    "sglang_deploy_gpu_row_remap_pending": ("gauge", "1 when a row remap waits for a reset."),
    "sglang_deploy_gpu_row_remap_failure": ("gauge", "1 when a row remap failed."),
    "sglang_deploy_gpu_xid_errors_total": ("counter", "XID events in the kernel log since boot."),
    "sglang_deploy_gpu_clocks_event_active": ("gauge", "1 for each active NVML clocks event reason."),
    "sglang_deploy_gpu_foreign_memory_bytes": ("gauge", "GPU memory used by processes other than the server's."),
}
#: Reasons always written (0 when inactive): NVML's clocks event reasons (nvml.h nvmlClocksEventReason*).
CLOCK_REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
                 "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clock_setting")


def metrics_text(state: dict[str, Any]) -> str:
    """The textfile-collector file for ``state`` (what the last run and skip found)."""
    service = state["service"]
    samples: dict[str, list[tuple[dict[str, object], float]]] = {name: [] for name in METRICS}

    def add(metric: str, value: object, **labels: object) -> None:
        figure = number(value)  # the state is the check's last.json: whatever the host's file held
        if figure is not None:
            samples[metric].append(({"service": service, **labels}, figure))

    add("sglang_deploy_watch_last_run_timestamp_seconds", state.get("last_run"))
    add("sglang_deploy_watch_last_skip_timestamp_seconds", state.get("last_skip"))
    add("sglang_deploy_watch_interval_seconds", state["interval_s"])
    add("sglang_deploy_watch_duration_seconds", state.get("duration_s"))
    if state.get("last_run") is not None:
        add("sglang_deploy_watch_check_success", 1 if state.get("check_success") else 0)
        add("sglang_deploy_service_up", 1 if state.get("service_up") else 0)
    add("sglang_deploy_decode_tokens_per_second", state.get("decode_tok_s"))
    add("sglang_deploy_prefill_tokens_per_second", state.get("prefill_tok_s"))
    add("sglang_deploy_baseline_decode_tokens_per_second", state.get("baseline_tok_s"))
    add("sglang_deploy_target_decode_tokens_per_second", state.get("target_tok_s"))
    add("sglang_deploy_throughput_tolerance_ratio", state.get("tolerance"))
    if state.get("last_run") is not None:
        drift: list[Any] = state["drift"] if isinstance(state.get("drift"), list) else []
        for what in DRIFT_KEYS:
            add("sglang_deploy_drift", 1 if what in drift else 0, what=what)
        add("sglang_deploy_revision_info", 1, deployed=state.get("deployed") or "", running=state.get("running") or "",
            sglang_version=state.get("sglang_version") or "")
    gpus = obj(state.get("health")).get("gpus")
    for gpu in gpus[:64] if isinstance(gpus, list) else []:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("index"), int) or not 0 <= gpu["index"] < 1024:
            continue
        g = str(gpu["index"])
        add("sglang_deploy_gpu_info", 1, gpu=g, uuid=gpu.get("uuid") or "", name=gpu.get("name") or "")
        ecc = obj(gpu.get("ecc"))
        add("sglang_deploy_gpu_ecc_uncorrected_errors_total", number(ecc.get("uncorrected")), gpu=g)
        add("sglang_deploy_gpu_ecc_corrected_errors_total", number(ecc.get("corrected")), gpu=g)
        pages = obj_or_none(gpu.get("retired_pages"))
        if pages is not None:
            for cause in ("single_bit", "double_bit"):
                add("sglang_deploy_gpu_retired_pages", number(pages.get(cause)), gpu=g, cause=cause)
            add("sglang_deploy_gpu_retired_pages_pending", 1 if pages.get("pending") is True else 0, gpu=g)
        rows = obj_or_none(gpu.get("remapped_rows"))
        if rows is not None:
            for kind in ("correctable", "uncorrectable"):
                add("sglang_deploy_gpu_remapped_rows", number(rows.get(kind)), gpu=g, kind=kind)
            add("sglang_deploy_gpu_row_remap_pending", 1 if rows.get("pending") is True else 0, gpu=g)
            add("sglang_deploy_gpu_row_remap_failure", 1 if rows.get("failure") is True else 0, gpu=g)
        xid = obj(gpu.get("xid"))
        add("sglang_deploy_gpu_xid_errors_total", number(xid.get("count")), gpu=g)
        reasons = gpu.get("clocks_event_reasons")
        active = {r for r in (reasons[:64] if isinstance(reasons, list) else []) if isinstance(r, str)}
        for reason in sorted(set(CLOCK_REASONS) | {r for r in active if re.fullmatch(r"[a-z0-9_]{1,64}", r)}):
            add("sglang_deploy_gpu_clocks_event_active", 1 if reason in active else 0, gpu=g, reason=reason)
        add("sglang_deploy_gpu_foreign_memory_bytes", number(gpu.get("foreign_memory_bytes")), gpu=g)
    lines: list[str] = []
    for name, (kind, text) in METRICS.items():
        if not samples[name]:
            continue
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
        for labels, value in samples[name]:
            body = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{body}}} {_fmt(value)}")
    return "\n".join(lines) + "\n"
