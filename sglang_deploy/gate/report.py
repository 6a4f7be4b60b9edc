"""The gate's report (pure): what a run measured and decided, as one ordered dict (the
JSON of ``check --json`` and of the baseline file), the short reports of a gate that ended
before its verdict, the likely causes of a slow server, and the plain-text table."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Mapping, Sequence

from sglang_deploy.gate import causes, load, measure, verdict
from sglang_deploy.gate.errors import GateError, ServiceDown
from sglang_deploy.gate.measure import RequestFigures
from sglang_deploy.gate.options import CheckOptions

# the keys a reader looks for first, in this order; the rest follow in the order they were set
_FIRST = ("verdict", "exit_code", "reasons", "decode_tok_s", "ttft_s", "prefill_tok_s", "target_tok_s",
          "aggregate_tok_s", "accept_length", "abandoned", "server_config_diffs", "likely_causes", "warnings", "key",
          "server", "url")


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


def request_records(single: Sequence[RequestFigures], rounds: Sequence[Sequence[RequestFigures]],
                    levels: Mapping[int, Sequence[Sequence[RequestFigures]]] | None = None
                    ) -> list[dict[str, Any]]:
    """Every measured request, single-stream ones first, each with its phase and index (and,
    for concurrent ones, its level's concurrency when the levels are given)."""
    requests = [dict(r.as_dict(), phase="single", index=i) for i, r in enumerate(single)]
    by_level = dict(levels) if levels is not None else {0: rounds}
    for c in sorted(by_level):
        for k, rd in enumerate(by_level[c]):
            extra = {"concurrency": c} if levels is not None else {}
            requests += [dict(r.as_dict(), phase="concurrent", round=k, index=i, **extra) for i, r in enumerate(rd)]
    return requests


def load_report(single: Sequence[RequestFigures], levels: Mapping[int, Sequence[Sequence[RequestFigures]]],
                slo: Mapping[str, float] | None) -> list[dict[str, Any]]:
    """``report["load"]``: one entry per level measured, ascending; level 1 is the single-stream
    run (each request its own round)."""
    out = [load.level_figures(1, [[r] for r in single], slo)] if single else []
    out += [load.level_figures(c, rounds, slo) for c, rounds in sorted(levels.items()) if c > 1 and rounds]
    return out


def fill_verdict(report: dict[str, Any], *, single: Sequence[RequestFigures],
                 rounds: Sequence[Sequence[RequestFigures]], concurrency: int, accept: float | None,
                 result: verdict.Verdict, warnings: list[str], baseline: dict[str, Any] | None,
                 settings: dict[str, Any], timing: dict[str, Any],
                 levels: Mapping[int, Sequence[Sequence[RequestFigures]]] | None = None,
                 slo: Mapping[str, float] | None = None, server_metrics: dict[str, Any] | None = None,
                 abandoned: dict[str, Any] | None = None) -> None:
    """Put the figures of a measured run and its verdict into ``report``. ``rounds`` are the
    highest level's (``concurrency``); ``levels`` every level above 1."""
    # no single stream: a prefill server (options.role), measured by its prefill alone
    decode = measure.spread([r.decode_tok_s for r in single]) if single else None
    ttft = measure.spread([r.ttft_s for r in single]) if single else None
    aggregate = concurrent_decode = None
    if rounds:
        aggregate = measure.spread([measure.aggregate_tok_s(rd) for rd in rounds])
        concurrent_decode = measure.spread([r.decode_tok_s for rd in rounds for r in rd])
    if levels is None:
        levels = {concurrency: rounds} if rounds else {}
    report.update({
        "verdict": result.verdict,
        "exit_code": 0 if result.passed else 1,
        "decode_tok_s": round(decode.median, 4) if decode else None,
        "decode_tok_s_spread": decode.as_dict() if decode else None,
        "ttft_s": round(ttft.median, 6) if ttft else None,
        "ttft_s_spread": ttft.as_dict(6) if ttft else None,
        "itl_ms": measure.itl_summary_ms(single),
        "aggregate_tok_s": round(aggregate.median, 3) if aggregate else None,
        "aggregate_tok_s_spread": aggregate.as_dict(3) if aggregate else None,
        "concurrent_decode_tok_s": round(concurrent_decode.median, 4) if concurrent_decode else None,
        "concurrency": concurrency,
        "accept_length": round(accept, 4) if accept is not None else None,
        "load": load_report(single, levels, slo),
        "slo": dict(slo or {}),
        "server_metrics": server_metrics,
        "abandoned": abandoned,
        "reasons": result.reasons,
        "rules": result.rules,
        # the operator's reason (accept_slower), when it let a failing baseline rule pass
        "accepted_slower": result.accepted_slower,
        "likely_causes": [],
        "warnings": warnings,
        "baseline": baseline,
        "requests": request_records(single, rounds, levels),
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
    slow = any(not r["ok"] for r in report.get("rules") or []
               if r["rule"] == "target" or r["rule"].endswith("baseline"))
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
                 ("accept_length", None), ("key", None), ("server", None), ("load", []),
                 ("slo", dict(opts.slo) if isinstance(opts.slo, dict) else {}), ("server_metrics", None),
                 ("abandoned", None), ("prefill_tok_s", None), ("prefill_prompt_tokens", None)):
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
    pre = report.get("prefill_tok_s_spread")
    if pre:
        rows.append((f"prefill tok/s ({report.get('prefill_prompt_tokens')} prompt tokens, n={pre.get('n')})",
                     _f(pre.get("median")), _f(pre.get("min")), _f(pre.get("max"))))
    agg = report.get("aggregate_tok_s_spread")
    if agg:
        rows.append((f"aggregate tok/s ({report.get('concurrency')} streams)", _f(agg["median"]),
                     _f(agg["min"]), _f(agg["max"])))
    w0 = max(len(r[0]) for r in rows)
    return [f"  {r[0].ljust(w0)}  {r[1].rjust(9)}  {r[2].rjust(9)}  {r[3].rjust(9)}" for r in rows] \
        + _load_rows(report)


def _ms(seconds: object) -> float | None:
    """A latency in seconds as milliseconds; None for anything that is not a number."""
    return seconds * 1000 if isinstance(seconds, (int, float)) else None


def _ms3(p: dict[str, Any] | None, nd: int) -> str:
    p = p or {}
    return "/".join(_f(_ms(p.get(k)), nd) for k in ("p50", "p90", "p99"))


def _load_rows(report: dict[str, Any]) -> list[str]:
    """One row per concurrency level: TTFT and ITL p50/p90/p99, output tok/s, and with SLOs
    the goodput and the share of requests that met them."""
    levels = report.get("load") or []
    if not levels:
        return []
    slo = report.get("slo") or {}
    head = ["streams", "requests", "TTFT ms p50/p90/p99", "ITL ms p50/p90/p99", "output tok/s"]
    if slo:
        head += ["goodput req/s", "SLO met"]
    rows = [head]
    for lv in levels:
        row = [str(lv.get("concurrency")), str(lv.get("requests")), _ms3(lv.get("ttft_s"), 1),
               _ms3(lv.get("itl_s"), 2), _f(lv.get("output_tok_s"))]
        if slo:
            met = lv.get("slo_met")
            missed = [k for k, ok in (lv.get("slo_ok") or {}).items() if not ok]
            row += [_f(lv.get("goodput_req_s"), 3),
                    (f"{met * 100:.0f}%" if isinstance(met, (int, float)) else "-")
                    + (f" (missed {', '.join(missed)})" if missed else "")]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  load" + (": SLO " + ", ".join(f"{k} <= {v * 1000:g} ms" for k, v in slo.items()) if slo else "")]
    lines += ["    " + "  ".join(c.rjust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return lines


def _notes(report: dict[str, Any]) -> list[str]:
    extra = []
    if report.get("accept_length") is not None:
        extra.append(f"accept length {report['accept_length']:.2f}")
    sm = report.get("server_metrics") or {}
    if sm.get("spec_accept_length") is not None:
        extra.append(f"/metrics accept length {sm['spec_accept_length']:.2f}")
    if sm.get("gen_throughput") is not None:
        extra.append(f"/metrics gen throughput {sm['gen_throughput']:.1f} tok/s")
    a = report.get("abandoned")
    if a:
        extra.append(f"abandoned after {a['after_requests']} request(s): {a['objective']} bound {a['bound']:g} "
                     f"below {a['threshold']:g}")
    timing = report.get("timing") or {}
    added = [f"{name} {timing[f'{name}_s']:.1f} s" for name in ("concurrency", "prefill") if timing.get(f"{name}_s")]
    if added:
        extra.append("added to the gate: " + ", ".join(added))
    if report.get("target_tok_s") is not None:
        extra.append(f"target {report['target_tok_s']:g} tok/s")
    b = report.get("baseline")
    if b:
        of = f" of SGLang {b.get('version')}" if b.get("from_previous_version") else ""
        extra.append(f"baseline best {_f(b.get('best_tok_s'))} tok/s{of} ({b.get('passing')} passing of last "
                     f"{b.get('considered')})")
    lines = ["  " + "; ".join(extra)] if extra else []
    if report.get("accepted_slower"):
        lines.append(f"  accepted slower than the baseline: {report['accepted_slower']}")
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
