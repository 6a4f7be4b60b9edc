"""The whole gate, step by step: check the options, wait for the server to be ready, read
and compare what it resolved, warm up, measure one stream then concurrent ones with the
unit watched, decide the verdict, and assemble the report (``report.py``).
``run_check`` never raises for a gate failure: a server that cannot be measured gives a
report with verdict ``error`` (exit 2), never a slow one.

Top floor of the gate: it ties the HTTP client, the unit watch and NVML (with ``--nvml``)
to the pure ``measure.py``, ``verdict.py`` and ``report.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import httpx

from sglang_deploy.gate.predicted import (PredictedDecode, predicted_decode, predicted_figure, predicted_prefill_tokens,
                                          prediction_rule)
from sglang_deploy.gate import figures, load, measure, prom, verdict
from sglang_deploy.gate.client import (Progress, RequestShape, StreamCancelled, Unauthorized, list_models, negotiate,
                                       read_metrics, read_server_info, run_concurrent, run_single, wait_ready)
from sglang_deploy.gate.errors import GateError, ServiceDown
from sglang_deploy.gate.files import append_baseline, load_expect, load_prompts, read_baseline
from sglang_deploy.gate.measure import RequestFigures
from sglang_deploy.gate.nvml import NvmlSampler
from sglang_deploy.gate.options import CheckOptions, validate
from sglang_deploy.gate.prefill import PREFILL_REQUESTS, PrefillFigures, measure_prefill
from sglang_deploy.gate.report import (dedupe, error_report, explain_slow, fill_verdict, hardware_from_plan, ordered,
                                       service_down_report)
from sglang_deploy.gate.scrub import Scrubber, redact_url, url_secrets
from sglang_deploy.gate.watch import WatchThread

WARMUP_MAX_TOKENS = 32
PREFILL_REQUESTS_NOTE = f"a warm-up and {PREFILL_REQUESTS} requests"
#: With ``added_budget_s``: the share of it the concurrency levels may take; prefill has the rest.
CONCURRENCY_SHARE = 0.75
CONCURRENT_ROUNDS_MAX = 3


@dataclass
class ServerConfig:
    """What the server resolved, and how it compares with the plan."""

    info: dict[str, Any] | None
    model: str | None
    server: dict[str, Any]
    comparison: verdict.ConfigComparison


@dataclass
class Measured:
    shape: RequestShape
    single: list[RequestFigures]
    rounds: list[list[RequestFigures]]  # the highest level's (none when it is 1)
    measure_s: float
    levels: dict[int, list[list[RequestFigures]]] = field(default_factory=dict)  # every level above 1
    abandoned: dict[str, Any] | None = None
    prefill: list[PrefillFigures] = field(default_factory=list)
    # seconds each addition to the single-stream run took (the serving gap's share of the gate)
    concurrency_s: float = 0.0
    prefill_s: float = 0.0


def run_check(opts: CheckOptions, progress: Progress = lambda msg: None,
              transport: httpx.BaseTransport | None = None) -> dict[str, Any]:
    """The whole gate against ``opts.url``; returns the report (never raises a
    GateError). ``transport`` replaces the network (tests). The API key and a URL's
    password are masked in the report and the progress lines, whatever the server
    echoed back."""
    partial: dict[str, Any] = {}
    scrub = Scrubber([opts.api_key, *url_secrets(opts.url)])

    def scrubbed(msg: str) -> None:
        progress(scrub.text(msg))

    try:
        report = _run(opts, scrubbed, partial, transport)
    except GateError as exc:
        report = error_report(opts, exc, partial)
    except ServiceDown as exc:
        report = service_down_report(opts, exc, partial)
    report["url"] = redact_url(opts.url)
    scrubbed_report: dict[str, Any] = scrub.deep(report)
    if scrubbed_report.get("verdict") in ("pass", "fail") and "service_failure" not in scrubbed_report:
        _record(opts, scrubbed_report)  # scrubbed first: the baseline file is a report too
    return scrubbed_report


def _run(opts: CheckOptions, progress: Progress, report: dict[str, Any],
         transport: httpx.BaseTransport | None = None) -> dict[str, Any]:
    t_start = time.perf_counter()
    validate(opts)
    warnings: list[str] = []
    plan: dict[str, Any] | None
    if opts.expect_plan is not None:
        plan = opts.expect_plan
    else:
        plan = load_expect(opts.expect, opts.expect_host) if opts.expect else None
    prompts = list(opts.prompts) if opts.prompts else load_prompts()
    report.update({"url": redact_url(opts.url), "target_tok_s": opts.target_tok_s,
                   "tolerance": opts.tolerance})
    with _http_client(opts, transport) as client:
        ready = _ready(client, opts, progress)
        t_ready = time.perf_counter()
        report["ready"] = ready
        config = _server_config(client, opts, plan, warnings, report)
        sampler = _start_sampler(opts, plan, warnings)
        hardware = opts.hardware or hardware_from_plan(plan) or (sampler.hardware if sampler else None)
        # The plan's model id when there is a plan: a staged snapshot's path changes with every
        # commit, and the baseline is the model's on this hardware.
        model_id = (plan or {}).get("model") or config.server["model_path"] or config.model
        key = verdict.make_key(hardware, model_id, config.server["version"])
        report["key"] = key
        try:
            measured = _measure(client, opts, config.model, prompts, warnings, progress)
        finally:
            if sampler is not None:
                sampler.stop()
        info_after = _info_after(client) if config.info is not None else None
        server_metrics = prom.server_metrics(read_metrics(client))
    predicted = predicted_decode(plan)
    result, baseline, extra = _judge(opts, measured, key, config.comparison, warnings, predicted, plan)
    t_done = time.perf_counter()
    fill_verdict(report, single=measured.single, rounds=measured.rounds, concurrency=opts.levels[-1],
                 levels=measured.levels, slo=opts.slo, server_metrics=server_metrics,
                 abandoned=measured.abandoned,
                 accept=measure.mean_accept_length(info_after), result=result,
                 warnings=dedupe(warnings + config.comparison.notes), baseline=baseline,
                 settings=_settings(opts, measured.shape, len(prompts)),
                 timing=_timing(t_start, t_ready, t_done, measured, ready))
    report.update(extra)
    explain_slow(report, sampler.samples if sampler is not None else None, plan, config.info)
    if predicted is not None and report["decode_tok_s"] is not None:  # what the plan said the hardware allows
        report["predicted_decode_tok_s"] = predicted.as_dict()
        report["measured_over_predicted"] = round(report["decode_tok_s"] / predicted.expected, 3)
    return ordered(report)


def _http_client(opts: CheckOptions, transport: httpx.BaseTransport | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
    n = opts.levels[-1]
    timeout = httpx.Timeout(connect=10.0, read=opts.stall_timeout, write=30.0, pool=30.0)
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    return httpx.Client(base_url=opts.url.rstrip("/"), headers=headers, timeout=timeout, limits=limits,
                        trust_env=False, transport=transport)


def _ready(client: httpx.Client, opts: CheckOptions, progress: Progress) -> dict[str, Any]:
    """Step 1: the server answers its health endpoint (the unit watched meanwhile)."""
    progress(f"waiting for {opts.url} to be ready (up to {opts.ready_timeout:g} s)")
    return wait_ready(client, opts.ready_timeout, progress,
                      watch=opts.watch.check if opts.watch is not None else None)


def _server_config(client: httpx.Client, opts: CheckOptions, plan: dict[str, Any] | None,
                   warnings: list[str], report: dict[str, Any]) -> ServerConfig:
    """Step 2: the version and model the server resolved, and its settings against the plan.
    Without ``--expect``, /server_info is optional; with ``--model``, /v1/models is: a server
    that fails them is measured all the same, with a warning (401/403 stay fatal)."""
    noted = len(warnings)
    info, info_path = _server_info(client, plan is not None, warnings)
    info_failed = len(warnings) > noted
    model = _pick_model(opts, _models(client, opts, warnings), info, warnings)
    server = {
        "version": _info_text(info, "version", warnings),
        "model": model,
        "model_path": _info_text(info, "model_path", warnings),
        "server_info_path": info_path,
    }
    report["server"] = server
    comparison = verdict.ConfigComparison()
    if plan is not None:
        if info is None:
            raise GateError("server_info", "the server answers neither /server_info nor /get_server_info: "
                                           "cannot compare its configuration with --expect")
        try:
            comparison = verdict.compare_config(plan, info, opts.fail_on)
        except (TypeError, ValueError, AttributeError, KeyError, ArithmeticError) as exc:
            raise GateError("server_info", f"unexpected answer from {info_path}: {exc}") from None
    elif info is None and not info_failed:
        warnings.append("the server exposes no /server_info: version and accept length unknown")
    report["server_config_diffs"] = [d.as_dict() for d in comparison.diffs]
    return ServerConfig(info, model, server, comparison)


def _server_info(client: httpx.Client, required: bool, warnings: list[str]
                 ) -> tuple[dict[str, Any] | None, str | None]:
    try:
        return read_server_info(client)
    except Unauthorized:
        raise
    except GateError as exc:
        if required:
            raise
        warnings.append(f"{exc.message}: version and accept length unknown")
        return None, None


def _info_after(client: httpx.Client) -> dict[str, Any] | None:
    """/server_info after the measurement (for the accept length); None if it fails now."""
    try:
        return read_server_info(client)[0]
    except GateError:
        return None


def _info_text(info: dict[str, Any] | None, name: str, warnings: list[str]) -> str | None:
    value = (info or {}).get(name)
    if value is None or isinstance(value, str):
        return value or None
    warnings.append(f"unexpected answer from /server_info: {name} is a {type(value).__name__}, not a string; "
                    "ignored")
    return None


def _models(client: httpx.Client, opts: CheckOptions, warnings: list[str]) -> list[str] | None:
    """The served models; with ``--model`` the gate can do without the list."""
    try:
        return list_models(client)
    except Unauthorized:
        raise
    except GateError as exc:
        if not opts.model:
            raise GateError(exc.step, f"{exc.message} (name the model with --model to measure without "
                                      "the list)") from None
        warnings.append(f"{exc.message}: the model name {opts.model!r} is not checked")
        return None


def _pick_model(opts: CheckOptions, models: list[str] | None, info: dict[str, Any] | None,
                warnings: list[str]) -> str | None:
    if opts.model:
        if models is not None and opts.model not in models:
            warnings.append(f"the server does not list {opts.model!r} (it lists: {', '.join(models) or 'nothing'}); "
                            "measured all the same (a server may load models on demand)")
        return opts.model
    if models:
        if len(models) > 1:
            warnings.append(f"the server lists {len(models)} models; measured {models[0]!r} (pick with --model)")
        return models[0]
    served = (info or {}).get("served_model_name")
    return served if isinstance(served, str) and served else None


def _start_sampler(opts: CheckOptions, plan: dict[str, Any] | None, warnings: list[str]) -> NvmlSampler | None:
    """With ``--nvml``: GPU samples through the measurement (a warning when NVML is missing)."""
    if not opts.nvml:
        return None
    sampler = NvmlSampler((plan or {}).get("gpus", {}).get("indices"))
    if not sampler.start():
        warnings.append(f"--nvml: {sampler.error}; no GPU samples")
        return None
    return sampler


def _measure(client: httpx.Client, opts: CheckOptions, model: str | None, prompts: Sequence[str],
             warnings: list[str], progress: Progress) -> Measured:
    """Step 3: warm up (finding what the server accepts), then one stream, then each higher
    concurrency level in ascending order, with the unit watched throughout: a stream broken
    because the server died reads as the crash, not as the gate's error. With
    ``abandon_below``, the measurement stops once the objective's optimistic bound is below it."""
    levels = opts.levels
    top = levels[-1]
    by_level: dict[int, list[list[RequestFigures]]] = {}
    state: dict[str, Any] = {"abandoned": None, "single": []}

    def measured_so_far() -> int:
        return len(state["single"]) + sum(len(rd) for rounds in by_level.values() for rd in rounds)

    def stop_single(single: list[RequestFigures]) -> bool:
        state["single"] = single
        top_rounds = [[r] for r in single] if top == 1 else []
        state["abandoned"] = _abandon(opts, single, top_rounds, measured_so_far())
        return state["abandoned"] is not None

    def stop_top(rounds: list[list[RequestFigures]]) -> bool:
        by_level[top] = rounds
        state["abandoned"] = _abandon(opts, state["single"], rounds, measured_so_far())
        return state["abandoned"] is not None

    with WatchThread(opts.watch) as watcher:
        try:
            progress(f"warm-up ({model or 'default model'})")
            shape = negotiate(client, model, prompts[0], min(WARMUP_MAX_TOKENS, opts.max_tokens), warnings,
                              fake_bootstrap=opts.role is not None)
            t_measure = time.perf_counter()
            # a prefill server answers one token: nothing to decode, its prefill alone is measured
            prefill_only = opts.role == "prefill"
            single = [] if prefill_only else run_single(client, shape, prompts, opts.repeats, opts.max_tokens,
                                                        progress, watcher.cancel,
                                                        stop=stop_single if opts.abandon_below else None)
            state["single"] = single
            t_levels = time.perf_counter()
            budget = opts.added_budget_s
            level_deadline = t_levels + budget * CONCURRENCY_SHARE if budget is not None else None
            for n in levels[1:] if not prefill_only else ():
                if state["abandoned"] is not None:
                    break

                def stop_level(rounds: list[list[RequestFigures]], n: int = n) -> bool:
                    if opts.abandon_below and n == top and stop_top(rounds):
                        return True
                    # another round only while one more like the last still ends within the budget's share
                    return level_deadline is not None and (
                        time.perf_counter() + load.round_duration_s(rounds[-1]) > level_deadline)

                by_level[n] = run_concurrent(client, shape, prompts, n, min(opts.repeats, CONCURRENT_ROUNDS_MAX),
                                             opts.max_tokens, progress, watcher.cancel,
                                             stop=stop_level if opts.abandon_below or budget is not None else None)
            t_prefill = time.perf_counter()
            prefill: list[PrefillFigures] = []
            if opts.prefill_tokens > 0 and state["abandoned"] is None:
                progress(f"prefill: {PREFILL_REQUESTS_NOTE} of about {opts.prefill_tokens} prompt tokens")
                prefill = measure_prefill(client, shape, prompts, opts.prefill_tokens, warnings, watcher.cancel,
                                          deadline=t_levels + budget if budget is not None else None)
            t_end = time.perf_counter()
            measure_s = t_end - t_measure
        except (GateError, StreamCancelled):
            watcher.final_check()
            raise
    watcher.final_check()
    if state["abandoned"] is not None:
        a = state["abandoned"]
        progress(f"abandoned: the {a['objective']} bound {a['bound']:g} is below {a['threshold']:g} "
                 f"after {a['after_requests']} request(s)")
    return Measured(shape, single, by_level.get(top, []) if top > 1 else [], measure_s, by_level,
                    state["abandoned"], prefill, concurrency_s=t_prefill - t_levels, prefill_s=t_end - t_prefill)


def _abandon(opts: CheckOptions, single: Sequence[RequestFigures], top_rounds: Sequence[Sequence[RequestFigures]],
             after: int) -> dict[str, Any] | None:
    """``report["abandoned"]`` once the objective's optimistic bound is below the threshold."""
    if opts.abandon_below is None:
        return None
    objective, threshold = opts.abandon_below
    bound = load.abandon_bound(objective, single, top_rounds, opts.slo)
    if bound is None or bound >= threshold:
        return None
    return {"objective": objective, "bound": round(bound, 6), "threshold": threshold, "after_requests": after}


def _judge(opts: CheckOptions, measured: Measured, key: dict[str, str], comparison: verdict.ConfigComparison,
           warnings: list[str], predicted: PredictedDecode | None = None, plan: dict[str, Any] | None = None
           ) -> tuple[verdict.Verdict, dict[str, Any] | None, dict[str, Any]]:
    """Step 4: the verdict from the median decode rate, the target, the baseline and the
    configuration, then the prefill and the highest concurrency level's aggregate against the
    baseline's and the prediction (``gate.figures``); the requests' and the baseline file's
    warnings join ``warnings``. Also the report's prefill and prediction figures."""
    for r in measured.single + [r for rounds in measured.levels.values() for rd in rounds for r in rd]:
        warnings.extend(r.warnings)
    summary = None
    if opts.baseline:
        entries, bw = read_baseline(opts.baseline)
        warnings.extend(bw)
        # this SGLang version's own results, else the version's before it on this hardware and model
        summary = verdict.summarize_baseline_across_versions(entries, key)
        if entries and summary.best_tok_s is None:
            warnings.append(f"baseline file {opts.baseline} has no passing result for this hardware and "
                            f"model ({key['hardware']}, {key['model']}) in any SGLang version")
    # a prefill server (opts.role) has no decode rate: its prefill figure below is what is judged
    decode = measure.spread([r.decode_tok_s for r in measured.single]).median if measured.single else None
    if decode is None and opts.target_tok_s is not None:
        warnings.append(f"target {opts.target_tok_s:g} tok/s is a decode rate: a prefill server has none; "
                        "judged by its prefill")
    result = verdict.decide(decode, opts.target_tok_s, summary, tolerance=opts.tolerance,
                            config_diffs=comparison.diffs, accept_slower=opts.accept_slower,
                            predicted=predicted, prediction_floor=opts.prediction_floor)
    if predicted is not None and decode is not None:
        warning = prediction_rule(decode, predicted, opts.prediction_floor, False)[1]
        if warning:
            warnings.append(warning)
    extra, judged = _extra_figures(opts, measured, summary, plan)
    rules, notes = figures.judge(judged, summary, tolerance=opts.tolerance, accept_slower=opts.accept_slower,
                                 prediction_floor=opts.prediction_floor)
    result = figures.with_rules(result, rules)
    warnings.extend(notes)
    baseline = dict(summary.as_dict(), file=opts.baseline, tolerance=opts.tolerance) if summary else None
    if baseline is not None:
        baseline.update({f"best_{f.label.split(' ')[0]}_tok_s": f.baseline_best for f in judged})
    return result, baseline, extra


def _extra_figures(opts: CheckOptions, measured: Measured, summary: verdict.BaselineSummary | None,
                   plan: dict[str, Any] | None) -> tuple[dict[str, Any], list[figures.Figure]]:
    """The report's prefill figures and predicted bands beyond decode, and the figures to judge."""
    entries = summary.entries if summary is not None else ()
    extra: dict[str, Any] = {"prefill_tok_s": None, "prefill_prompt_tokens": None}
    judged: list[figures.Figure] = []
    if measured.prefill:
        rate = measure.spread([p.tok_s for p in measured.prefill])
        tokens = int(measure.percentile([p.prompt_tokens for p in measured.prefill], 50))
        band = predicted_figure(plan, "prefill_tok_s")
        planned = predicted_prefill_tokens(plan)
        if band is not None and planned and not (0.5 <= tokens / planned <= 2):
            band = None  # predicted for another prompt length: shown, not judged
        extra.update(prefill_tok_s=round(rate.median, 3), prefill_prompt_tokens=tokens,
                     prefill_tok_s_spread=rate.as_dict(3), prefill=[p.as_dict() for p in measured.prefill])
        judged.append(figures.Figure("prefill", rate.median, figures.best_prefill(entries, tokens), band, tokens))
    prefill_band = predicted_figure(plan, "prefill_tok_s")
    extra["predicted_prefill_tok_s"] = prefill_band.as_dict() if prefill_band else None
    top = opts.levels[-1]
    output_band = predicted_figure(plan, "output_tok_s", top) if top > 1 else None
    extra["predicted_output_tok_s"] = output_band.as_dict() if output_band else None
    if measured.rounds and measured.abandoned is None:
        aggregate = measure.spread([measure.aggregate_tok_s(rd) for rd in measured.rounds]).median
        extra["aggregate_max_tokens"] = opts.max_tokens
        judged.append(figures.Figure(f"aggregate at {top} streams", aggregate,
                                     figures.best_aggregate(entries, top, opts.max_tokens), output_band))
        if output_band is not None:
            extra["aggregate_over_predicted"] = round(aggregate / output_band.expected, 3)
    if measured.prefill and prefill_band is not None:
        extra["prefill_over_predicted"] = round(extra["prefill_tok_s"] / prefill_band.expected, 3)
    return extra, judged


def _settings(opts: CheckOptions, shape: RequestShape, n_prompts: int) -> dict[str, Any]:
    return {"endpoint": shape.path, "max_tokens": opts.max_tokens, "repeats": opts.repeats,
            "prefill_tokens": opts.prefill_tokens, "prefill_requests": PREFILL_REQUESTS if opts.prefill_tokens else 0,
            "concurrency_levels": list(opts.levels), "concurrent_rounds": min(opts.repeats, CONCURRENT_ROUNDS_MAX),
            "temperature": 0, "ignore_eos": shape.ignore_eos, "include_usage": shape.include_usage,
            "prompts": n_prompts, "fail_on": sorted(opts.fail_on)}


def _timing(t_start: float, t_ready: float, t_done: float, measured: Measured, ready: dict[str, Any]
            ) -> dict[str, Any]:
    """The gate's seconds; ``concurrency_s`` and ``prefill_s`` are what the levels above 1 and the
    prefill requests added to the measurement (and so to the serving gap after a restart)."""
    return {
        "ready_s": ready["ready_s"],
        "measure_s": round(measured.measure_s, 3),
        "concurrency_s": round(measured.concurrency_s, 3),
        "prefill_s": round(measured.prefill_s, 3),
        "ready_to_verdict_s": round(t_done - t_ready, 3),
        "overhead_s": round(t_done - t_ready - measured.measure_s, 3),
        "total_s": round(t_done - t_start, 3),
    }


def _record(opts: CheckOptions, report: dict[str, Any]) -> None:
    """With ``--record``: append the report to the baseline file (a warning if it cannot)."""
    if opts.record and opts.baseline:
        try:
            append_baseline(opts.baseline, report)
        except OSError as exc:
            report["warnings"].append(f"--record: cannot append to {opts.baseline}: {exc.strerror or exc}")
