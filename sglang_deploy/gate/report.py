"""The gate's report (pure): what a run measured and decided, as one ordered dict (the
JSON of ``check --json`` and of the baseline file), the short reports of a gate that ended
before its verdict, the likely causes of a slow server, and the plain-text table."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Sequence

from . import causes, measure, verdict
from .errors import GateError, ServiceDown
from .measure import RequestFigures
from .options import CheckOptions

# the keys a reader looks for first, in this order; the rest follow in the order they were set
_FIRST = ("verdict", "exit_code", "reasons", "decode_tok_s", "ttft_s", "target_tok_s", "aggregate_tok_s",
          "accept_length", "server_config_diffs", "likely_causes", "warnings", "key", "server", "url")


def ordered(report: dict[str, Any]) -> dict[str, Any]:
    out = {k: report[k] for k in _FIRST if k in report}
    out.update((k, v) for k, v in report.items() if k not in out)
    return out


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def dedupe(items: Sequence[str]) -> list[str]:
    seen: list[str] = []
    for x in items:
        if x not in seen:
            seen.append(x)
    return seen


def hardware_from_plan(plan: dict[str, Any] | None) -> str | None:
    g = (plan or {}).get("gpus") or {}
    if g.get("model") and g.get("count"):
        return f"{g['count']}x {g['model']}"
    return None


def request_records(single: Sequence[RequestFigures], rounds: Sequence[Sequence[RequestFigures]]
                    ) -> list[dict[str, Any]]:
    """Every measured request, single-stream ones first, each with its phase and index."""
    requests = [dict(r.as_dict(), phase="single", index=i) for i, r in enumerate(single)]
    for k, rd in enumerate(rounds):
        requests += [dict(r.as_dict(), phase="concurrent", round=k, index=i) for i, r in enumerate(rd)]
    return requests


def fill_verdict(report: dict[str, Any], *, single: Sequence[RequestFigures],
                 rounds: Sequence[Sequence[RequestFigures]], concurrency: int, accept: float | None,
                 result: verdict.Verdict, warnings: list[str], baseline: dict[str, Any] | None,
                 settings: dict[str, Any], timing: dict[str, Any]) -> None:
    """Put the figures of a measured run and its verdict into ``report``."""
    decode = measure.spread([r.decode_tok_s for r in single])
    ttft = measure.spread([r.ttft_s for r in single])
    aggregate = concurrent_decode = None
    if rounds:
        aggregate = measure.spread([measure.aggregate_tok_s(rd) for rd in rounds])
        concurrent_decode = measure.spread([r.decode_tok_s for rd in rounds for r in rd])
    report.update({
        "verdict": result.verdict,
        "exit_code": 0 if result.passed else 1,
        "decode_tok_s": round(decode.median, 4),
        "decode_tok_s_spread": decode.as_dict(),
        "ttft_s": round(ttft.median, 6),
        "ttft_s_spread": ttft.as_dict(6),
        "itl_ms": measure.itl_summary_ms(single),
        "aggregate_tok_s": round(aggregate.median, 3) if aggregate else None,
        "aggregate_tok_s_spread": aggregate.as_dict(3) if aggregate else None,
        "concurrent_decode_tok_s": round(concurrent_decode.median, 4) if concurrent_decode else None,
        "concurrency": concurrency,
        "accept_length": round(accept, 4) if accept is not None else None,
        "reasons": result.reasons,
        "rules": result.rules,
        "likely_causes": [],
        "warnings": warnings,
        "baseline": baseline,
        "requests": request_records(single, rounds),
        "settings": settings,
        "nvml": None,
        "timing": timing,
        "created": now_iso(),
    })


def explain_slow(report: dict[str, Any], samples: Sequence[dict[str, Any]] | None,
                 plan: dict[str, Any] | None = None, info: dict[str, Any] | None = None) -> None:
    """Put the NVML summary of ``samples`` into the report and, when the target or the
    baseline rule failed, the likely causes. Also used by the deploy, whose GPU samples
    come from the host while the gate measured from the controller."""
    nvml_summary = causes.summarize_nvml(samples) if samples is not None else None
    report["nvml"] = nvml_summary
    slow = any(not r["ok"] for r in report.get("rules") or [] if r["rule"] in ("target", "baseline"))
    if not slow:
        report["likely_causes"] = []
        return
    planned = verdict.plan_intents(plan) if plan else {}
    draft = planned.get("speculative_num_draft_tokens") or (info or {}).get("speculative_num_draft_tokens")
    diffs = [verdict.ConfigDiff(d["field"], d["group"], d["planned"], d["resolved"], d["fails"])
             for d in report.get("server_config_diffs") or []]
    report["likely_causes"] = causes.likely_causes(nvml_summary, report.get("accept_length"),
                                                   draft if isinstance(draft, int) else None, diffs,
                                                   report.get("warnings") or [])


# ---------------------------------------------------------------------------
# a gate that ended before the verdict of its figures
# ---------------------------------------------------------------------------


def _short_report(opts: CheckOptions, partial: dict[str, Any] | None, verdict_: str, reason: str,
                  **extra: Any) -> dict[str, Any]:
    """A report that ends before the verdict of the figures: what was gathered, plus why."""
    report = dict(partial or {})
    report.update({"verdict": verdict_, "exit_code": 2 if verdict_ == "error" else 1, "url": opts.url,
                   "reasons": [reason], **extra})
    for k, v in (("decode_tok_s", None), ("ttft_s", None), ("target_tok_s", opts.target_tok_s),
                 ("server_config_diffs", []), ("warnings", []), ("requests", []), ("itl_ms", None),
                 ("accept_length", None), ("key", None), ("server", None)):
        report.setdefault(k, v)
    report.setdefault("created", now_iso())
    return ordered(report)


def error_report(opts: CheckOptions, exc: GateError, partial: dict[str, Any] | None = None) -> dict[str, Any]:
    """The gate could not measure: verdict ``error`` (exit 2)."""
    return _short_report(opts, partial, "error", f"could not measure: {exc}",
                         error={"step": exc.step, "message": exc.message})


def service_down_report(opts: CheckOptions, exc: ServiceDown, partial: dict[str, Any] | None = None
                        ) -> dict[str, Any]:
    """The watched unit failed or restarted: verdict ``fail`` (exit 1) with the journal tail."""
    return _short_report(opts, partial, "fail", f"the server did not stay up: {exc.unit}: {exc.reason}",
                         service_failure={"unit": exc.unit, "reason": exc.reason, "journal": exc.journal})


# ---------------------------------------------------------------------------
# human output
# ---------------------------------------------------------------------------


def _f(x: Any, nd: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def _service_down_lines(down: dict[str, Any]) -> list[str]:
    lines = [f"FAIL: the server did not stay up: {down['unit']}: {down['reason']}"]
    if (down.get("journal") or "").strip():
        lines.append("  last journal lines:")
        lines.extend(f"    {line}" for line in down["journal"].rstrip().splitlines())
    return lines


def _figure_rows(report: dict[str, Any]) -> list[str]:
    d, t, itl = report.get("decode_tok_s_spread") or {}, report.get("ttft_s_spread") or {}, report.get("itl_ms")
    rows = [("", "median", "min", "max")]
    rows.append((f"decode tok/s (1 stream, n={d.get('n')})", _f(d.get("median")), _f(d.get("min")),
                 _f(d.get("max"))))
    rows.append(("TTFT ms", _f((t.get("median") or 0) * 1000), _f((t.get("min") or 0) * 1000),
                 _f((t.get("max") or 0) * 1000)))
    if itl:
        rows.append(("ITL ms (p50, p10, p90)", _f(itl["p50"], 2), _f(itl["p10"], 2), _f(itl["p90"], 2)))
    agg = report.get("aggregate_tok_s_spread")
    if agg:
        rows.append((f"aggregate tok/s ({report.get('concurrency')} streams)", _f(agg["median"]),
                     _f(agg["min"]), _f(agg["max"])))
    w0 = max(len(r[0]) for r in rows)
    return [f"  {r[0].ljust(w0)}  {r[1].rjust(9)}  {r[2].rjust(9)}  {r[3].rjust(9)}" for r in rows]


def _notes(report: dict[str, Any]) -> list[str]:
    extra = []
    if report.get("accept_length") is not None:
        extra.append(f"accept length {report['accept_length']:.2f}")
    if report.get("target_tok_s") is not None:
        extra.append(f"target {report['target_tok_s']:g} tok/s")
    b = report.get("baseline")
    if b:
        extra.append(f"baseline best {_f(b.get('best_tok_s'))} tok/s ({b.get('passing')} passing of last "
                     f"{b.get('considered')})")
    lines = ["  " + "; ".join(extra)] if extra else []
    for diff in report.get("server_config_diffs") or []:
        lines.append(f"  config: {diff['message']}{'  [fails the gate]' if diff.get('fails') else ''}")
    lines.extend(f"  warning: {w}" for w in report.get("warnings") or [])
    return lines


def format_report(report: dict[str, Any]) -> str:
    """A short plain-text table."""
    srv = report.get("server") or {}
    head = f"sglang-deploy check {report.get('url', '')}"
    if srv:
        head += f"  (SGLang {srv.get('version') or '?'}, model {srv.get('model') or '?'})"
    lines = [head]
    if report.get("verdict") == "error":
        lines.extend(f"  warning: {w}" for w in report.get("warnings") or [])
        lines.append("ERROR (could not measure)")
        lines.extend(f"  - {r}" for r in report.get("reasons") or [])
    elif report.get("service_failure"):
        lines.extend(_service_down_lines(report["service_failure"]))
    else:
        lines.extend(_figure_rows(report))
        lines.extend(_notes(report))
        if report.get("verdict") == "pass":
            lines.append("PASS")
        else:
            lines.append("FAIL")
            lines.extend(f"  - {r}" for r in report.get("reasons") or [])
            lines.extend(f"  likely cause: {c}" for c in report.get("likely_causes") or [])
    return "\n".join(lines) + "\n"
