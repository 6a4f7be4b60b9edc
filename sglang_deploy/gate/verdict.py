"""The gate's judgements, from plain data (pure: no I/O).

* ``compare_config``: what the server resolved (``/server_info``) against the
  plan's intents (the per-host object of ``sglang-deploy plan --json``); each
  difference reads "planned X, server resolved Y" and belongs to a group that
  ``--fail-on`` can make fatal (default: speculative settings, TP, prefill graph).
* ``summarize_baseline``: the best recent passing result for the same key
  (hardware, model, SGLang version) among a baseline file's entries.
* ``summarize_baseline_across_versions``: the same, and when this SGLang version has no
  passing result yet, the best recent passing result of the most recent other version on
  the same hardware and model (an upgrade keeps its baseline); what the gate and ``status`` use.
* ``decide``: pass or fail, with one reason per failed rule saying by how much; an operator's
  reason (``accept_slower``) lets a baseline rule that would fail pass, named in its detail.

Why a measurement may be slow (NVML summary, likely causes) is ``causes.py``.
"""

from __future__ import annotations


import json
import re
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable, Mapping, Sequence

from sglang_deploy.gate.predicted import PredictedDecode, prediction_rule

# ---------------------------------------------------------------------------
# configured as planned
# ---------------------------------------------------------------------------

DIFF_GROUPS = ("speculative", "tp", "prefill_graph", "custom_all_reduce", "nvls", "attention_backend",
               "mem_fraction_static", "model", "version", "parsers")
DEFAULT_FAIL_ON = frozenset({"speculative", "tp", "prefill_graph"})

_OFF_BACKENDS = {None, "", "disabled", "disable", "none", "off", "false"}


@dataclass(frozen=True)
class ConfigDiff:
    field: str  # the intent (or server field) compared
    group: str  # one of DIFF_GROUPS
    planned: Any
    resolved: Any
    fails: bool  # whether this difference fails the gate (--fail-on)

    @property
    def message(self) -> str:
        return f"{self.field}: planned {fmt(self.planned)}, server resolved {fmt(self.resolved)}"

    def as_dict(self) -> dict[str, Any]:
        return dict(asdict(self), message=self.message)


def fmt(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def parse_fail_on(text: str | None) -> frozenset[str]:
    """``--fail-on`` value: comma-separated groups, ``all``, ``none``, or None for the default."""
    if text is None:
        return DEFAULT_FAIL_ON
    names = {t.strip() for t in text.split(",") if t.strip()}
    if names == {"none"}:
        return frozenset()
    if "all" in names:
        return frozenset(DIFF_GROUPS)
    unknown = names - set(DIFF_GROUPS)
    if unknown:
        raise ValueError(f"unknown --fail-on group(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(DIFF_GROUPS)}, all, none")
    return frozenset(names)


def plan_intents(plan: Mapping[str, Any]) -> dict[str, Any]:
    """{intent name: value} from a plan object (``intents`` as a list of
    ``{name, value, ...}`` as ``plan --json`` prints it, or a plain mapping)."""
    intents = plan.get("intents") or {}
    if isinstance(intents, Mapping):
        return {k: (v.get("value") if isinstance(v, Mapping) and "value" in v else v) for k, v in intents.items()}
    return {i["name"]: i.get("value") for i in intents if isinstance(i, Mapping) and "name" in i}


def spec_algorithm(value: Any) -> str | None:
    """SGLang's own spelling: upper-case, NEXTN is EAGLE, none is None."""
    if value is None:
        return None
    text = str(value).strip().upper()
    if text in ("", "NONE", "NULL"):
        return None
    return "EAGLE" if text == "NEXTN" else text


def _cuda_graph_config(info: Mapping[str, Any]) -> Any:
    cfg = info.get("cuda_graph_config")
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except ValueError:
            return None
    return cfg if isinstance(cfg, Mapping) else None


def resolved_prefill_graph(info: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """("on" | "off" | None when the server does not say, what it said)."""
    if info.get("disable_cuda_graph") is True:
        return "off", "disabled (disable_cuda_graph)"
    cfg = _cuda_graph_config(info)
    if cfg is not None:  # 0.5.15+
        prefill = cfg.get("prefill")
        backend = prefill.get("backend") if isinstance(prefill, Mapping) else prefill
        shown = "disabled" if backend is None else str(backend)
        return ("off" if str(backend).lower() in _OFF_BACKENDS or backend is None else "on"), shown
    if "enable_piecewise_cuda_graph" in info:  # 0.5.9
        on = bool(info.get("enable_piecewise_cuda_graph"))
        return ("on" if on else "off"), ("enabled" if on else "disabled") + " (enable_piecewise_cuda_graph)"
    return None, None


def _int(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return value


@dataclass
class ConfigComparison:
    diffs: list[ConfigDiff] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be compared, or is worth a look

    @property
    def failing(self) -> list[ConfigDiff]:
        return [d for d in self.diffs if d.fails]


class _Comparison(ConfigComparison):
    """A ConfigComparison being filled: ``diff`` and ``missing`` record what one check found."""

    def __init__(self, fail_on: frozenset[str]):
        super().__init__()
        self.fail_on = fail_on

    def diff(self, name: str, group: str, planned: Any, resolved: Any) -> None:
        self.diffs.append(ConfigDiff(name, group, planned, resolved, group in self.fail_on))

    def missing(self, name: str) -> None:
        self.notes.append(f"server_info reports no {name}: not compared")

    def result(self) -> ConfigComparison:
        return ConfigComparison(self.diffs, self.notes)


def compare_config(plan: Mapping[str, Any], info: Mapping[str, Any],
                   fail_on: Iterable[str] = DEFAULT_FAIL_ON) -> ConfigComparison:
    """Differences between the plan's intents and the server's resolved arguments."""
    intents = plan_intents(plan)
    out = _Comparison(frozenset(fail_on))
    _compare_prefill_graph(out, intents, info)
    _compare_speculative(out, intents, info)
    _compare_parallel(out, plan, intents, info)
    _compare_backend_and_memory(out, intents, info)
    _compare_model_and_version(out, plan, intents, info)
    _compare_parsers(out, intents, info)
    return out.result()


def _compare_parsers(out: _Comparison, intents: Mapping[str, Any], info: Mapping[str, Any]) -> None:
    """The tool-call and reasoning parsers. A plan of ``auto`` leaves them to SGLang's detection
    from the chat template and the architecture, which 0.5.23 runs before it publishes its
    arguments (entrypoints/engine.py -> srt/parser/template_detection.py resolve_auto_parsers), so
    /server_info names what it picked: said in a note, or that it found none (tool calls then come
    back as plain text). A plan of a name: a different resolved one is a difference."""
    for name in ("tool_call_parser", "reasoning_parser"):
        planned = intents.get(name)
        if planned is None:
            continue
        if name not in info:
            out.missing(name)
            continue
        resolved = info.get(name)
        if planned != "auto":
            if resolved != planned:
                out.diff(name, "parsers", planned, resolved)
        elif resolved in (None, ""):
            out.notes.append(f"{name}: planned auto, SGLang's detection found none: set sglang_intents.{name} "
                             "if the model needs one")
        elif resolved == "auto":
            out.notes.append(f"{name}: planned auto, the server reports auto (it shows no detection)")
        else:
            out.notes.append(f"{name}: planned auto, SGLang's detection picked {fmt(resolved)}")


def _compare_prefill_graph(out: _Comparison, intents: Mapping[str, Any], info: Mapping[str, Any]) -> None:
    planned_pg = intents.get("prefill_cuda_graph", "default")
    if intents.get("cuda_graph") is False:
        planned_pg = "off"
    state, shown = resolved_prefill_graph(info)
    if state is None:
        if planned_pg in ("on", "off"):
            out.missing("prefill CUDA graph setting (cuda_graph_config / enable_piecewise_cuda_graph)")
    elif planned_pg in ("on", "off") and planned_pg != state:
        out.diff("prefill_cuda_graph", "prefill_graph", planned_pg, shown)
    elif planned_pg in (None, "default") and state == "off" and _cuda_graph_config(info) is not None:
        out.notes.append(f"prefill_cuda_graph: planned default (left to SGLang), server resolved {shown}")


def _compare_speculative(out: _Comparison, intents: Mapping[str, Any], info: Mapping[str, Any]) -> None:
    p_alg = spec_algorithm(intents.get("speculative_algorithm"))
    if "speculative_algorithm" not in info:
        if p_alg is not None:
            out.missing("speculative_algorithm")
        return
    r_alg = spec_algorithm(info.get("speculative_algorithm"))
    if p_alg != r_alg:
        out.diff("speculative_algorithm", "speculative", intents.get("speculative_algorithm"),
                 info.get("speculative_algorithm"))
    elif p_alg is not None:
        for name in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"):
            planned = intents.get(name)
            if planned is None:
                continue
            if name not in info:
                out.missing(name)
            elif _int(info.get(name)) != planned:
                out.diff(name, "speculative", planned, info.get(name))


def _compare_parallel(out: _Comparison, plan: Mapping[str, Any], intents: Mapping[str, Any],
                      info: Mapping[str, Any]) -> None:
    """Tensor parallel size and the communication settings."""
    p_tp = intents.get("tp_size")
    if p_tp == "all":
        p_tp = (plan.get("gpus") or {}).get("count")
    if p_tp is not None:
        if "tp_size" not in info:
            out.missing("tp_size")
        elif _int(info.get("tp_size")) != _int(p_tp):
            out.diff("tp_size", "tp", p_tp, info.get("tp_size"))
    if "custom_all_reduce" in intents:
        if "disable_custom_all_reduce" not in info:
            out.missing("disable_custom_all_reduce")
        else:
            resolved = not bool(info.get("disable_custom_all_reduce"))
            if bool(intents["custom_all_reduce"]) != resolved:
                out.diff("custom_all_reduce", "custom_all_reduce", bool(intents["custom_all_reduce"]), resolved)
    if "nvls" in intents:
        if "enable_nccl_nvls" not in info:
            out.missing("enable_nccl_nvls")
        elif bool(intents["nvls"]) != bool(info.get("enable_nccl_nvls")):
            out.diff("nvls", "nvls", bool(intents["nvls"]), bool(info.get("enable_nccl_nvls")))


def _compare_backend_and_memory(out: _Comparison, intents: Mapping[str, Any], info: Mapping[str, Any]) -> None:
    """The attention backend and the static memory fraction, each only when planned."""
    if intents.get("attention_backend") is not None:
        if "attention_backend" not in info:
            out.missing("attention_backend")
        elif str(info.get("attention_backend")) != str(intents["attention_backend"]):
            out.diff("attention_backend", "attention_backend", intents["attention_backend"],
                     info.get("attention_backend"))
    if intents.get("mem_fraction_static") is not None:
        r = info.get("mem_fraction_static")
        if r is None:
            out.missing("mem_fraction_static")
        elif not _close(r, float(intents["mem_fraction_static"])):
            out.diff("mem_fraction_static", "mem_fraction_static", float(intents["mem_fraction_static"]), r)


def _close(resolved: Any, planned: float) -> bool:
    """A resolved number equal to the planned one (anything but a finite number is not)."""
    if not isinstance(resolved, (int, float)) or isinstance(resolved, bool):
        return False
    try:
        return abs(float(resolved) - planned) <= 1e-6
    except OverflowError:
        return False


def _compare_model_and_version(out: _Comparison, plan: Mapping[str, Any], intents: Mapping[str, Any],
                               info: Mapping[str, Any]) -> None:
    """The served model name, the model path and the SGLang version."""
    p_model = plan.get("model") or plan.get("model_path")
    # What --model-path names: a staged snapshot in the model store, served under the model's id.
    weights = plan.get("weights")
    p_path = (plan.get("model_path") or (weights.get("model_path") if isinstance(weights, Mapping) else None)
              or p_model)
    p_served = intents.get("served_model_name") or p_model
    r_served = info.get("served_model_name") or info.get("model_path")
    if p_served is not None:
        if r_served is None:
            out.missing("served_model_name")
        elif str(r_served) != str(p_served):
            out.diff("served_model_name", "model", p_served, r_served)
    if p_path is not None and info.get("model_path") is not None and str(info["model_path"]) != str(p_path):
        out.diff("model_path", "model", p_path, info["model_path"])
    p_ver = plan.get("sglang_version")
    r_ver = info.get("version")
    if p_ver is not None and r_ver is not None and str(p_ver) != str(r_ver):
        out.diff("sglang_version", "version", p_ver, r_ver)


def select_plan(expect: Any, host: str | None) -> dict[str, Any]:
    """The per-host plan object out of ``plan --json`` output (an object, or an
    array of them plus a host name). ValueError says what is wrong."""
    if isinstance(expect, Mapping):
        if host is not None and expect.get("host") not in (None, host):
            raise ValueError(f"the plan is for host {expect.get('host')!r}, not {host!r}")
        return dict(expect)
    if isinstance(expect, list) and all(isinstance(p, Mapping) for p in expect):
        hosts = [p.get("host") for p in expect]
        if host is not None:
            found = [p for p in expect if p.get("host") == host]
            if not found:
                raise ValueError(f"host {host!r} is not in the plan (hosts: {', '.join(map(str, hosts))})")
            return dict(found[0])
        if len(expect) == 1:
            return dict(expect[0])
        raise ValueError(f"the plan has {len(expect)} hosts ({', '.join(map(str, hosts))}): pick one with --host")
    raise ValueError("expected the JSON of 'sglang-deploy plan --json' (an object or an array of objects)")


# ---------------------------------------------------------------------------
# baseline and verdict
# ---------------------------------------------------------------------------

RECENT = 20


def _norm_hw(text: Any) -> str:
    s = " ".join(str(text or "").split()).lower()
    return s.replace("nvidia ", "")


# A snapshot in a Hugging Face cache: .../models--{org}--{name}/snapshots/{commit}
# (huggingface_hub/file_download.py, repo_folder_name and the snapshots/ layout).
_SNAPSHOT = re.compile(r"(?:^|/)models--([^/]+?)--([^/]+)/snapshots/[^/]+/?$")


def model_id(model: str | None) -> str | None:
    """The model's id for a snapshot path in a Hugging Face cache (staged weights), else as given:
    the host's history follows the model, not the directory one commit of it was staged in."""
    m = _SNAPSHOT.search(model) if model else None
    return f"{m.group(1)}/{m.group(2)}" if m else model


def make_key(hardware: str | None, model: str | None, sglang_version: str | None) -> dict[str, str]:
    return {"hardware": hardware or "unknown", "model": model_id(model) or "unknown",
            "sglang_version": sglang_version or "unknown"}


def same_target(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """The same hardware and model, whatever the SGLang version."""
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return False
    return (_norm_hw(a.get("hardware")) == _norm_hw(b.get("hardware"))
            and str(a.get("model")) == str(b.get("model")))


def same_key(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    return (same_target(a, b) and isinstance(a, Mapping) and isinstance(b, Mapping)
            and str(a.get("sglang_version")) == str(b.get("sglang_version")))


@dataclass
class BaselineSummary:
    matching: int  # entries with the same key (all of them)
    considered: int  # the most recent of those (at most RECENT)
    passing: int  # passing entries among the considered
    best_tok_s: float | None
    version: str | None = None  # the SGLang version whose results these are
    from_previous_version: bool = False  # another version's: this one has no passing result yet
    # the passing entries among the considered: their prefill and aggregate figures (gate.figures)
    entries: tuple[Mapping[str, Any], ...] = field(default=(), repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "entries"}


def _passing_rate(e: Mapping[str, Any]) -> float | None:
    """A passing entry's decode tok/s (finite), else None."""
    rate = e.get("decode_tok_s")
    if e.get("verdict") != "pass" or isinstance(rate, bool) or not isinstance(rate, (int, float)):
        return None
    try:
        value = float(rate)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def _summary(matching: Sequence[Mapping[str, Any]], window: Sequence[Mapping[str, Any]], version: Any,
             from_previous: bool = False) -> BaselineSummary:
    passing = [e for e in window if _passing_rate(e) is not None]
    rates = [r for r in map(_passing_rate, passing) if r is not None]
    return BaselineSummary(matching=len(matching), considered=len(window), passing=len(rates),
                           best_tok_s=max(rates) if rates else None,
                           version=None if version is None else str(version), from_previous_version=from_previous,
                           entries=tuple(passing))


def summarize_baseline(entries: Sequence[Mapping[str, Any]], key: Mapping[str, Any],
                       recent: int = RECENT) -> BaselineSummary:
    """Best decode tok/s among the passing entries within the last ``recent``
    entries for the same key (oldest first in ``entries``); this key's alone."""
    matching = [e for e in entries if isinstance(e, Mapping) and same_key(e.get("key"), key)]
    window = matching[-recent:] if recent > 0 else []
    return _summary(matching, window, key.get("sglang_version"))


def summarize_baseline_across_versions(entries: Sequence[Mapping[str, Any]], key: Mapping[str, Any],
                                       recent: int = RECENT) -> BaselineSummary:
    """The gate's baseline: :func:`summarize_baseline` when this key (hardware, model, SGLang
    version) has a passing result among its last ``recent`` entries. Otherwise the version of
    the latest passing entry of the same hardware and model with another SGLang version (a first
    deploy of a new version is compared with the one before it, not let through at any speed),
    and the best passing result among that version's last ``recent`` entries up to and including
    it (``from_previous_version``). When no other version ever passed, this version's own latest
    passing result beyond the window is used the same way: a baseline exists whenever a passing
    result of the same hardware and model does."""
    own = summarize_baseline(entries, key, recent)
    if own.best_tok_s is not None or recent <= 0:
        return own
    target = [e for e in entries if isinstance(e, Mapping) and same_target(e.get("key"), key)]
    version = str(key.get("sglang_version"))
    anchor = None
    for i in range(len(target) - 1, -1, -1):  # the latest passing entry of another version
        if _passing_rate(target[i]) is not None and str(target[i]["key"].get("sglang_version")) != version:
            anchor = i
            break
    if anchor is None:  # none: this version's own latest pass, older than its window
        anchor = next((i for i in range(len(target) - 1, -1, -1) if _passing_rate(target[i]) is not None), None)
    if anchor is None:
        return own
    chosen = target[anchor]["key"].get("sglang_version")
    of_version = [e for e in target if str(e["key"].get("sglang_version")) == str(chosen)]
    upto = [e for e in target[:anchor + 1] if str(e["key"].get("sglang_version")) == str(chosen)]
    return _summary(of_version, upto[-recent:], chosen, from_previous=str(chosen) != version)


@dataclass
class Verdict:
    verdict: str  # pass | fail
    reasons: list[str]
    rules: list[dict[str, Any]]  # every rule applied: {rule, ok, detail} (and ``accepted`` when it was)
    accepted_slower: str | None = None  # the operator's reason, when it let a failing baseline rule pass

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


#: ``accept_slower``, the operator's reason to let a result slower than its baseline pass: one
#: line of at most this many printable characters (it is shown in reports, history and status).
ACCEPT_SLOWER_MAX = 500


def accept_slower_problem(value: Any) -> str | None:
    """What is wrong with an ``accept_slower`` reason (untrusted text), or None when it is fine:
    a string, not blank, at most ACCEPT_SLOWER_MAX characters, every one printable
    (``str.isprintable``: no line break, tab, terminal control or invisible format character)."""
    if not isinstance(value, str):
        return f"must be a string (the reason), got {type(value).__name__}"
    if not value.strip():
        return "must be a non-empty reason"
    if len(value) > ACCEPT_SLOWER_MAX:
        return f"must be at most {ACCEPT_SLOWER_MAX} characters, got {len(value)}"
    bad = next((i for i, ch in enumerate(value) if not ch.isprintable()), None)
    if bad is not None:
        return (f"must be printable text on one line: character {bad + 1} is {value[bad]!r} "
                "(a line break, tab, control or format character)")
    return None


def _r(x: float) -> str:
    """A measured rate: one decimal (three significant digits below 1)."""
    return f"{x:.1f}" if abs(x) >= 1 else f"{x:.3g}"


def _t(x: float) -> str:
    """A rate someone chose (a target): as given."""
    return f"{x:g}"


def decide(decode_tok_s: float | None, target_tok_s: float | None = None, baseline: BaselineSummary | None = None, *,
           tolerance: float, config_diffs: Sequence[ConfigDiff] = (), accept_slower: str | None = None,
           predicted: PredictedDecode | None = None, prediction_floor: float = 0.0) -> Verdict:
    """Pass or fail with reasons; ``tolerance`` is the run's (its default: ``options.CheckOptions``).
    ``accept_slower`` (the operator's reason) lets a failing baseline rule pass, its detail ending
    "accepted: <reason>"; never a missed target or a configuration difference. ``predicted`` (the
    plan's band): shown as a rule; with no target and no baseline it fails a result below
    ``prediction_floor`` of its low end (``gate.predicted.prediction_rule``). ``decode_tok_s`` None (a
    prefill server, which decodes nothing): the configuration alone; its prefill is ``gate.figures``'."""
    reasons: list[str] = []
    rules: list[dict[str, Any]] = []
    accepted = None
    if target_tok_s is not None and decode_tok_s is not None:
        ok = decode_tok_s >= target_tok_s
        short = (target_tok_s - decode_tok_s) / target_tok_s * 100 if target_tok_s > 0 else 0.0
        detail = (f"decode {_r(decode_tok_s)} tok/s reaches target {_t(target_tok_s)}" if ok else
                  f"decode {_r(decode_tok_s)} tok/s is {short:.1f}% below target {_t(target_tok_s)}")
        rules.append({"rule": "target", "ok": ok, "detail": detail})
        if not ok:
            reasons.append(detail)
    if baseline is not None and baseline.best_tok_s is not None and decode_tok_s is not None:
        rule = _baseline_rule(decode_tok_s, baseline.best_tok_s, baseline, tolerance)
        if not rule["ok"] and accept_slower:
            accepted = accept_slower
            rule.update(ok=True, accepted=accept_slower, detail=f"{rule['detail']}; accepted: {accept_slower}")
        rules.append(rule)
        if not rule["ok"]:
            reasons.append(rule["detail"])
    if predicted is not None and decode_tok_s is not None:
        judged = target_tok_s is None and (baseline is None or baseline.best_tok_s is None)
        rule, _ = prediction_rule(decode_tok_s, predicted, prediction_floor, judged)
        rules.append(rule)
        if not rule["ok"]:
            reasons.append(rule["detail"])
    failing = [d for d in config_diffs if d.fails]
    if config_diffs:
        rules.append({"rule": "configuration", "ok": not failing,
                      "detail": "; ".join(d.message for d in config_diffs)})
    for d in failing:
        reasons.append(f"configuration differs from the plan: {d.message}")
    return Verdict("fail" if reasons else "pass", reasons, rules, accepted)


def _baseline_rule(decode_tok_s: float, best: float, baseline: BaselineSummary, tolerance: float,
                   label: str = "decode") -> dict[str, Any]:
    """The baseline rule: within ``tolerance`` of ``best``, the best recent passing result (of this
    SGLang version, or of the one before it: the detail names which). ``label`` names the figure
    (decode; prefill, aggregate at N streams: ``gate.figures``) and the rule (``baseline`` for
    decode, else ``<label> baseline``)."""
    ok = decode_tok_s >= best * (1 - tolerance)
    below = (best - decode_tok_s) / best * 100 if best > 0 else 0.0
    if baseline.from_previous_version:
        source = (f"{_r(best)} tok/s, the best recent passing result of SGLang {baseline.version} on this "
                  "hardware and model")
        detail = (f"{label} {_r(decode_tok_s)} tok/s is within {tolerance * 100:g}% of {source}" if ok else
                  f"{label} {_r(decode_tok_s)} tok/s is {below:.1f}% below {source} (tolerance "
                  f"{tolerance * 100:g}%)")
    elif ok:
        detail = (f"{label} {_r(decode_tok_s)} tok/s is within {tolerance * 100:g}% of the best recent "
                  f"passing result {_r(best)} tok/s")
    else:
        detail = (f"{label} {_r(decode_tok_s)} tok/s is {below:.1f}% below the best recent passing result "
                  f"{_r(best)} tok/s for this hardware, model and SGLang version (tolerance "
                  f"{tolerance * 100:g}%)")
    rule = "baseline" if label == "decode" else f"{label.split(' ')[0]} baseline"
    return {"rule": rule, "ok": ok, "detail": detail}


baseline_rule = _baseline_rule
