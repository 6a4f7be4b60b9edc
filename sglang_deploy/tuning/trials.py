"""One tuning trial as the deploy sees it, and what its outcome means to the search (pure).

The tuner (`sglang-deploy tune`, sglang_deploy/commands/tune.py) runs the ordinary deploy on one host
for every trial, with its run context's ``trial_file`` (``sglang_deploy.runcontext``) naming a
JSON trial file: the intents of the "trial" layer, how the gate measures (concurrency levels, SLOs, the early-abandon
threshold) and where the deploy leaves the gate's whole report. Nothing else about the
deploy changes: it stages, proves with the installed parser, swaps, restarts and gates as
always, and a trial that fails its gate is rolled back like any revision.

What a trial's result record and gate report say is turned here into the search's
``TrialResult`` (sglang_deploy/tuning/search.py): feasible with its objective, abandoned (the
gate stopped early: it could not win), or infeasible with its cause, out-of-memory recognised
from SGLang's own messages in the journal.

A trial file is trusted only for what it is for: its intents may name only the tuning
space's dimensions (``space.TUNABLE``), its ``report_file`` only a path inside the tuner's
own state directory (the ``sglang-tune-*`` folder sglang_deploy/commands/tune.py creates in the system's
temporary directory, which also holds the trial file), and every other key is refused.
It is read as strict, bounded JSON (sglang_deploy/untrusted.py).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from sglang_deploy.gate.load import OBJECTIVES, check_slo
from sglang_deploy.gate.options import LIMITS
from sglang_deploy.plan.intents import INTENTS
from sglang_deploy.untrusted import UntrustedInput, load_json, printable, shown
from sglang_deploy.tuning.objective import ABANDONED, INFEASIBLE, OK, objective as objective_of
from sglang_deploy.plan.tuning_record import DEFAULT_CONCURRENCY, HOST_NAME
from sglang_deploy.tuning.search import TrialResult
from sglang_deploy.tuning.space import LAYOUT, TUNABLE

#: What a trial is called in errors (PlanError's field, the reader's messages); the run context's
#: ``trial_file`` (sglang_deploy.runcontext) names the file.
TRIAL = "trial"
#: The tuner's state directory: ``tempfile.TemporaryDirectory(prefix=STATE_DIR_PREFIX)`` in the
#: system's temporary directory; it holds the trial files, the gate's dumps and the precheck's state.
STATE_DIR_PREFIX = "sglang-tune-"
#: A trial file: a few hundred bytes as the tuner writes it.
MAX_TRIAL_BYTES = 1 << 20
_TRIAL_KEYS = ("hosts", "trial", "intents", "reason", "gate", "report_file")
_GATE_KEYS = ("concurrency", "slo", "abandon_below")
MAX_HOSTS = 1024


# SGLang's own words for memory it could not get. A start-up above what the GPU holds fails in
# torch's allocator while the CUDA graphs are captured ("CUDA out of memory. Tried to allocate",
# torch.OutOfMemoryError, raised through sglang/srt/model_executor/cuda_graph_runner.py
# CudaGraphRunner.capture); a fraction too small for the weights fails in
# sglang/srt/model_executor/model_runner.py ModelRunner.init_memory_pool ("Not enough memory.
# Please try to increase --mem-fraction-static.").
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory", re.IGNORECASE)
_TOO_LOW = re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static", re.IGNORECASE)


class TrialFileError(ValueError):
    """A trial file that is not what the tuner writes: the deploy refuses it, naming the field."""


@dataclass(frozen=True)
class TrialGate:
    """How a trial's gate measures."""

    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    slo: Mapping[str, float] = field(default_factory=dict)  # "ttft_p90" -> seconds
    abandon_below: tuple[str, float] | None = None  # (objective, value)

    def as_dict(self) -> dict[str, Any]:
        return {"concurrency": list(self.concurrency), "slo": dict(self.slo),
                "abandon_below": list(self.abandon_below) if self.abandon_below else None}


@dataclass(frozen=True)
class TrialFile:
    """What the run context's ``trial_file`` names: one trial on one host."""

    hosts: tuple[str, ...]  # the host tuned, or every member of its multi-node tp group
    number: int
    intents: Mapping[str, Any]
    reason: str
    gate: TrialGate
    report_file: str | None = None  # where the deploy writes the gate's outcome and whole report

    def as_dict(self) -> dict[str, Any]:
        return {"hosts": list(self.hosts), "trial": self.number, "intents": dict(self.intents), "reason": self.reason,
                "gate": self.gate.as_dict(), "report_file": self.report_file}

    def dumps(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n"


def _need(doc: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, kind):  # a bool is an int to Python, not to a trial
        raise TrialFileError(f"{where}: {key}: expected {kind.__name__}, got {value!r}")
    return value


def state_dir(trial_path: str | os.PathLike[str]) -> Path | None:
    """The tuner's state directory holding the trial file at ``trial_path`` (symlinks resolved):
    its folder, when that is a ``sglang-tune-*`` folder of the system's temporary directory;
    else None (the file is not one the tuner wrote)."""
    folder = Path(trial_path).resolve().parent
    if folder.name.startswith(STATE_DIR_PREFIX) and folder.parent == Path(tempfile.gettempdir()).resolve():
        return folder
    return None


def check_report_file(report_file: str, trial_path: str | os.PathLike[str] | None, where: str) -> str:
    """``report_file`` when it names a path inside the tuner's state directory (the trial file's
    own ``sglang-tune-*`` folder), ``..`` and symlinks resolved; else TrialFileError: the deploy
    writes there, and a trial file must not make it write anywhere else."""
    folder = state_dir(trial_path) if trial_path is not None else None
    if folder is None:
        raise TrialFileError(f"{where}: report_file: the trial file is not in the tuner's state directory "
                             f"({tempfile.gettempdir()}/{STATE_DIR_PREFIX}*); no report is written for it")
    target = Path(report_file)
    target = (target if target.is_absolute() else folder / target).resolve()
    if target.parent != folder:
        raise TrialFileError(f"{where}: report_file: {shown(report_file)} is outside the tuner's state directory "
                             f"{folder}; refused")
    return str(target)


def _check_layout(intents: Mapping[str, Any], where: str) -> None:
    """A trial's layout is whole and in whole numbers: tp_size and dp_size together, attn_dp_size
    dividing the TP; whether the host's GPUs and model take it is the plan's check."""
    given = [n for n in LAYOUT if n in intents]
    if not given:
        return
    for name in ("tp_size", "dp_size"):
        if name not in intents:
            raise TrialFileError(f"{where}: intents.{name}: a layout sets tp_size and dp_size together")
    for name in given:
        value = intents[name]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
            raise TrialFileError(f"{where}: intents.{name}: expected a number of GPUs from 1 to 4096, got "
                                 f"{shown(value)}")
    attn = intents.get("attn_dp_size", 1)
    if intents["tp_size"] % attn:
        raise TrialFileError(f"{where}: intents.attn_dp_size: {attn} does not divide tp_size {intents['tp_size']}")


def load_trial(text: str | bytes, where: str, path: str | os.PathLike[str] | None = None) -> TrialFile:
    """The trial file's JSON; ``TrialFileError`` naming ``where`` and the field when it is not one.
    ``path``: where the file was read (its folder must be the tuner's state directory when it names
    a ``report_file``)."""
    where = printable(where)
    try:
        doc = load_json(text, where, MAX_TRIAL_BYTES)
    except UntrustedInput as exc:
        raise TrialFileError(str(exc)) from None
    if not isinstance(doc, dict):
        raise TrialFileError(f"{where}: expected a JSON object")
    unknown = sorted(set(doc) - set(_TRIAL_KEYS))
    if unknown:
        raise TrialFileError(f"{where}: {printable(unknown[0])[:80]}: not a trial setting (known: "
                             f"{', '.join(_TRIAL_KEYS)})")
    hosts = _need(doc, "hosts", list, where)
    if (not hosts or len(hosts) > MAX_HOSTS
            or not all(isinstance(h, str) and HOST_NAME.match(h) for h in hosts)):
        raise TrialFileError(f"{where}: hosts: expected a list of host names, got {shown(hosts)}")
    number = _need(doc, "trial", int, where)
    if not 0 <= number <= 10 ** 6:
        raise TrialFileError(f"{where}: trial: expected a trial number from 0 to 1000000, got {shown(number)}")
    intents = _need(doc, "intents", dict, where)
    for name in intents:
        if name not in TUNABLE:
            what = "not a tuned setting" if name in INTENTS else f"unknown intent {shown(name)}"
            raise TrialFileError(f"{where}: intents.{printable(str(name))[:80]}: {what}; a trial may "
                                 f"set only {', '.join(TUNABLE)}")
    _check_layout(intents, where)
    reason = doc.get("reason", "")
    if not isinstance(reason, str) or len(reason) > 1000 or printable(reason) != reason:
        raise TrialFileError(f"{where}: reason: expected one line of text (at most 1000 characters, no control "
                             f"characters), got {shown(reason)}")
    g = doc.get("gate") or {}
    if not isinstance(g, dict):
        raise TrialFileError(f"{where}: gate: expected an object")
    unknown = sorted(set(g) - set(_GATE_KEYS))
    if unknown:
        raise TrialFileError(f"{where}: gate.{printable(unknown[0])[:80]}: not a gate setting (known: "
                             f"{', '.join(_GATE_KEYS)})")
    levels = g.get("concurrency") or list(DEFAULT_CONCURRENCY)
    top = LIMITS["--concurrency"]
    if not isinstance(levels, list) or len(levels) > 64 or not all(
            isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= top for c in levels):
        raise TrialFileError(f"{where}: gate.concurrency: expected a list of whole numbers from 1 to {top}, "
                             f"got {shown(levels)}")
    slo = g.get("slo") or {}
    if not isinstance(slo, dict):
        raise TrialFileError(f"{where}: gate.slo: expected an object of limits in seconds, got {shown(slo)}")
    try:
        check_slo(slo)
    except ValueError as exc:
        raise TrialFileError(f"{where}: gate.slo: {printable(str(exc))[:200]}") from None
    abandon = g.get("abandon_below")
    if abandon is not None:
        if (not isinstance(abandon, list) or len(abandon) != 2 or abandon[0] not in OBJECTIVES
                or not isinstance(abandon[1], (int, float)) or isinstance(abandon[1], bool)
                or not math.isfinite(abandon[1])):
            raise TrialFileError(f"{where}: gate.abandon_below: expected [objective, value], got {shown(abandon)}")
        abandon = (abandon[0], float(abandon[1]))
    report_file = doc.get("report_file")
    if report_file is not None:
        if not isinstance(report_file, str) or not report_file or "\0" in report_file:
            raise TrialFileError(f"{where}: report_file: expected a path, got {shown(report_file)}")
        report_file = check_report_file(report_file, path, where)
    return TrialFile(hosts=tuple(hosts), number=number, intents=intents, reason=reason,
                     gate=TrialGate(tuple(sorted(set(levels))), {str(k): float(v) for k, v in slo.items()}, abandon),
                     report_file=report_file)


# ---------------------------------------------------------------------------
# a trial's outcome, for the search
# ---------------------------------------------------------------------------

def memory_failure(text: str) -> str | None:
    """'oom' when SGLang ran out of GPU memory, 'too-low' when the fraction left no room for
    the KV cache, None when ``text`` says neither."""
    if _TOO_LOW.search(text or ""):
        return "too-low"
    if _OOM.search(text or ""):
        return "oom"
    return None


def figures(report: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the tuning record keeps of a trial's gate report: the figures, not the requests."""
    r = report if isinstance(report, Mapping) else {}
    keep = ("verdict", "decode_tok_s", "ttft_s", "aggregate_tok_s", "accept_length", "load", "slo",
            "server_metrics", "abandoned", "timing")
    out = {k: r.get(k) for k in keep if r.get(k) is not None}
    spread = r.get("decode_tok_s_spread")
    if isinstance(spread, dict):
        out["decode_tok_s_spread"] = {k: spread.get(k) for k in ("min", "max", "n") if k in spread}
    return {printable(str(k))[:256]: _plain_figures(v) for k, v in out.items()}  # _plain_figures of a mapping


def _plain_figures(value: Any) -> Any:
    """Figures as the tuning record keeps them: strings without terminal controls (a report
    quotes a server and a journal), non-finite numbers as null (the record refuses NaN)."""
    if isinstance(value, Mapping):
        return {printable(str(k))[:256]: _plain_figures(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_figures(v) for v in value]
    if isinstance(value, str):
        return printable(value)[:4096]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return printable(str(value))[:4096]


def outcome_of(result: Mapping[str, Any] | None, dump: Mapping[str, Any] | None, objective: str) -> TrialResult:
    """The trial's outcome from the deploy's result record (``sglang_deploy/deploy/results.py``) and the
    dump the trial's gate left (``{"outcome", "summary", "report"}``). A host whose deploy
    failed before the gate (plan, proof, install) is infeasible with that error."""
    result = result if isinstance(result, Mapping) else {}
    dump = dump if isinstance(dump, Mapping) else {}
    report = _mapping_or_empty(dump.get("report"))
    failure = _mapping_or_empty(report.get("service_failure"))
    error = _mapping_or_empty(report.get("error"))
    text = "\n".join(str(x) for x in (dump.get("summary"), result.get("summary"), failure.get("journal"),
                                       error.get("message")) if x)
    mem = memory_failure(text)
    kind = dump.get("outcome")
    kind = printable(str(kind))[:80] if kind is not None else None
    figs = figures(report)
    if kind is None:
        cause = result.get("summary") or "the deploy ended before the gate (no report)"
        return TrialResult(INFEASIBLE, None, _first_line(cause), mem == "oom", figs)
    if kind != "pass":
        cause = dump.get("summary") or result.get("summary") or kind
        if mem == "oom":
            cause = "out of GPU memory at start-up: " + _first_line(_line_matching(text, _OOM) or cause)
        elif mem == "too-low":
            cause = "memory fraction too low: " + _first_line(_line_matching(text, _TOO_LOW) or cause)
        else:
            cause = _first_line(cause)
            said = _last_error_line(text)
            if said and said not in cause:
                cause = f"{cause.rstrip(':; ')}: {said}"
        return TrialResult(INFEASIBLE, None, f"{kind}: {_first_line(cause)}", mem == "oom", figs)
    value = objective_of(report, objective)
    if value is None:
        return TrialResult(INFEASIBLE, None, f"the gate passed but gave no {objective} figure", False, figs)
    if isinstance(report.get("abandoned"), Mapping):
        a = report["abandoned"]
        return TrialResult(ABANDONED, value, printable(f"stopped early: {objective} bound {_g(a.get('bound'))} "
                                                      f"below {_g(a.get('threshold'))} after "
                                                      f"{a.get('after_requests')} request(s)")[:300],
                       False, figs)
    return TrialResult(OK, value, None, False, figs)


def _mapping_or_empty(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _g(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)


def _first_line(text: Any) -> str:
    """The first line of a message, without terminal controls (it is printed and kept in the record)."""
    text = printable(str(text or ""), newlines=True).strip()
    return text.splitlines()[0][:300] if text else ""


_ERROR_LINE = re.compile(r"(Error|Exception|exception|error:|Traceback|Killed|signal)")


def _last_error_line(text: str) -> str | None:
    """The journal's last line that says what went wrong (its syslog prefix dropped)."""
    for line in reversed((text or "").splitlines()):
        if _ERROR_LINE.search(line):
            return printable(re.sub(r"^\w{3} +\d+ [\d:]+ \S+ [^:]+: ", "", line.strip()))[:200]
    return None


def _line_matching(text: str, pattern: re.Pattern[str]) -> str | None:
    for line in (text or "").splitlines():
        if pattern.search(line):
            return line.strip()
    return None


def describe(config: Mapping[str, Any], start: Mapping[str, Any] | None = None) -> str:
    """A trial's config in one line, only what differs from ``start`` when given."""
    items = [(k, v) for k, v in sorted(config.items()) if start is None or start.get(k) != v]
    if not items:
        return "the starting configuration"
    return ", ".join(f"{k}={v}" for k, v in items)


def levels_text(levels: Sequence[int]) -> str:
    return ",".join(str(c) for c in levels)


def _key(config: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in config.items()))


def evidence(rows: Sequence[Mapping[str, Any]], best: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Why each intent of the winning config won, for the record's reasons: the winner's mean
    objective and the runner-up's, the best measured config with another value of that intent,
    preferring one that differs in that intent only. Only fully measured (ok) trials count."""
    sums: dict[tuple[tuple[str, str], ...], list[float]] = {}
    configs: dict[tuple[tuple[str, str], ...], Mapping[str, Any]] = {}
    for r in rows:
        if r.get("status") == OK and isinstance(r.get("objective"), (int, float)):
            k = _key(r["config"])
            sums.setdefault(k, []).append(float(r["objective"]))
            configs[k] = r["config"]
    means = {k: sum(v) / len(v) for k, v in sums.items()}
    won = means.get(_key(best))
    out: dict[str, dict[str, Any]] = {}
    for intent, value in best.items():
        others = [k for k in means if configs[k].get(intent) != value]
        alike = [k for k in others if all(configs[k].get(n) == v for n, v in best.items() if n != intent)]
        pool = alike or others
        runner = max(pool, key=lambda k: means[k]) if pool else None
        out[intent] = {"value": value, "objective": round(won, 4) if won is not None else None,
                       "runner_up": {"value": configs[runner].get(intent), "objective": round(means[runner], 4)}
                       if runner is not None else None}
    return out
