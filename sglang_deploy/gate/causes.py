"""Why a measurement may be slow (pure: no I/O): the NVML samples summarised per GPU
(clocks, throttle reasons, memory, other processes) and the likely causes a user reads
when the target or the baseline rule failed."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from sglang_deploy.gate.verdict import ConfigDiff

THROTTLE_REASONS = {  # NVML clocks-event (throttle) reason bits
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
SLOWING = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
           "hw_power_brake_slowdown"}


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def summarize_nvml(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per GPU: SM clock median/min and maximum, throttle reasons with the share
    of samples they were active in, memory used, processes seen.

    A sample: ``{"t": s, "gpus": [{"index", "name", "sm_clock_mhz", "max_sm_clock_mhz",
    "throttle_mask", "memory_used_mib", "memory_total_mib", "temperature_c",
    "processes": [{"pid", "name", "memory_mib", "server": bool}]}]}``; any field may be None.
    """
    per: dict[int, dict[str, Any]] = {}
    for s in samples:
        for g in s.get("gpus") or []:
            _collect(per, g)
    return {"samples": len(samples), "gpus": [_gpu_summary(per[i]) for i in sorted(per)]}


def _collect(per: dict[int, dict[str, Any]], g: Mapping[str, Any]) -> None:
    """Add one GPU's reading of one sample to what ``per`` holds for that GPU."""
    i = int(g.get("index", 0))
    d = per.setdefault(i, {"index": i, "name": g.get("name"), "clocks": [], "max": None, "masks": [],
                           "mem": [], "total": None, "temps": [], "procs": {}})
    if isinstance(g.get("sm_clock_mhz"), (int, float)):
        d["clocks"].append(float(g["sm_clock_mhz"]))
    if isinstance(g.get("max_sm_clock_mhz"), (int, float)):
        d["max"] = float(g["max_sm_clock_mhz"])
    if isinstance(g.get("throttle_mask"), int):
        d["masks"].append(int(g["throttle_mask"]))
    if isinstance(g.get("memory_used_mib"), (int, float)):
        d["mem"].append(float(g["memory_used_mib"]))
    if isinstance(g.get("memory_total_mib"), (int, float)):
        d["total"] = float(g["memory_total_mib"])
    if isinstance(g.get("temperature_c"), (int, float)):
        d["temps"].append(float(g["temperature_c"]))
    for p in g.get("processes") or []:
        pid = p.get("pid")
        prev = d["procs"].get(pid, {})
        d["procs"][pid] = {"pid": pid, "name": p.get("name") or prev.get("name"),
                           "memory_mib": max(float(p.get("memory_mib") or 0), prev.get("memory_mib", 0.0)),
                           "server": bool(p.get("server"))}


def _gpu_summary(d: dict[str, Any]) -> dict[str, Any]:
    clocks = sorted(d["clocks"])
    reasons: dict[str, float] = {}
    for m in d["masks"]:
        for name in throttle_names(m):
            reasons[name] = reasons.get(name, 0) + 1
    n_masks = len(d["masks"]) or 1
    return {
        "index": d["index"],
        "name": d["name"],
        "sm_clock_mhz_median": clocks[len(clocks) // 2] if clocks else None,
        "sm_clock_mhz_min": clocks[0] if clocks else None,
        "max_sm_clock_mhz": d["max"],
        "throttle_reasons": {k: round(v / n_masks, 3) for k, v in sorted(reasons.items())},
        "memory_used_mib_max": max(d["mem"]) if d["mem"] else None,
        "memory_total_mib": d["total"],
        "temperature_c_max": max(d["temps"]) if d["temps"] else None,
        "processes": list(d["procs"].values()),
    }


def likely_causes(nvml: Mapping[str, Any] | None = None, accept_length: float | None = None,
                  draft_tokens: int | None = None, config_diffs: Sequence[ConfigDiff] = (),
                  warnings: Sequence[str] = ()) -> list[str]:
    """Plain-language suspects for a slow result, most specific first."""
    causes: list[str] = []
    if config_diffs:
        causes.append(f"the server runs differently from the plan in {len(config_diffs)} setting(s): "
                      + ", ".join(d.field for d in config_diffs))
    for g in (nvml or {}).get("gpus") or []:
        label = f"GPU {g.get('index')}" + (f" ({g['name']})" if g.get("name") else "")
        slow = sorted(((k, v) for k, v in (g.get("throttle_reasons") or {}).items() if k in SLOWING),
                      key=lambda kv: (-kv[1], kv[0]))
        if slow:
            parts = ", ".join(f"{k.replace('_', ' ')} ({v * 100:.0f}% of samples)" for k, v in slow)
            causes.append(f"{label} clocks were held back: {parts}")
        med, top = g.get("sm_clock_mhz_median"), g.get("max_sm_clock_mhz")
        if med and top and med < 0.85 * top:
            causes.append(f"{label} ran at a median SM clock of {med:.0f} MHz, {med / top * 100:.0f}% of its "
                          f"{top:.0f} MHz maximum")
        others = [p for p in g.get("processes") or [] if not p.get("server")]
        for p in others:
            causes.append(f"{label} is shared with another process: pid {p.get('pid')} ({p.get('name') or '?'}) "
                          f"using {p.get('memory_mib', 0):.0f} MiB")
    if accept_length is not None and accept_length < 1.5:
        limit = f" of up to {draft_tokens} draft tokens" if draft_tokens else ""
        causes.append(f"speculative accept length is {accept_length:.2f}{limit}: drafts are rarely accepted, "
                      "so speculative decoding gains little or costs time")
    for w in warnings:
        if "no usage" in w:
            causes.append("token counts are approximate (the server sent no usage)")
            break
    return causes
