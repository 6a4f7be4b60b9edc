"""One tuning trial as the deploy sees it, and what its outcome means to the search (pure).

The tuner (`sglang-deploy tune`, roles/tuning_run.py) runs the ordinary deploy on one host
for every trial, with ``SGLANG_DEPLOY_TRIAL`` naming a JSON trial file: the intents of the
"trial" layer, how the gate measures (concurrency levels, SLOs, the early-abandon
threshold) and where the deploy leaves the gate's whole report. Nothing else about the
deploy changes: it stages, proves with the installed parser, swaps, restarts and gates as
always, and a trial that fails its gate is rolled back like any revision.

What a trial's result record and gate report say is turned here into the search's
``TrialResult`` (sglang_deploy/tuning/search.py): feasible with its objective, abandoned (the gate stopped early: it could
not win), or infeasible with its cause, out-of-memory recognised from SGLang's own messages
in the journal.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..gate.load import OBJECTIVES, check_slo
from .objective import ABANDONED, INFEASIBLE, OK, objective as objective_of
from .search import TrialResult

TRIAL_ENV = "SGLANG_DEPLOY_TRIAL"
#: The deploy writes every host's state and plan to this file and changes nothing (the tuner's precheck).
STATE_ENV = "SGLANG_DEPLOY_STATE_ONLY"
#: A deploy that leaves the host's revision unchanged gates it all the same (the tuner's restore).
REGATE_ENV = "SGLANG_DEPLOY_REGATE"
TUNING_FILE_ENV = "SGLANG_DEPLOY_TUNING_FILE"
#: The tuner's --space file, applied by the precheck to the host's default space.
SPACE_ENV = "SGLANG_DEPLOY_TUNE_SPACE"


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

    concurrency: tuple[int, ...] = (1,)
    slo: Mapping[str, float] = field(default_factory=dict)  # "ttft_p90" -> seconds
    abandon_below: tuple[str, float] | None = None  # (objective, value)

    def as_dict(self) -> dict[str, Any]:
        return {"concurrency": list(self.concurrency), "slo": dict(self.slo),
                "abandon_below": list(self.abandon_below) if self.abandon_below else None}


@dataclass(frozen=True)
class TrialFile:
    """What ``SGLANG_DEPLOY_TRIAL`` names: one trial on one host."""

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


def load_trial(text: str, where: str) -> TrialFile:
    """The trial file's JSON; ``TrialFileError`` naming ``where`` and the field when it is not one."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise TrialFileError(f"{where}: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise TrialFileError(f"{where}: expected a JSON object")
    hosts = _need(doc, "hosts", list, where)
    if not hosts or not all(isinstance(h, str) and h for h in hosts):
        raise TrialFileError(f"{where}: hosts: expected a list of host names, got {hosts!r}")
    number = _need(doc, "trial", int, where)
    intents = _need(doc, "intents", dict, where)
    reason = doc.get("reason", "")
    if not isinstance(reason, str):
        raise TrialFileError(f"{where}: reason: expected a string, got {reason!r}")
    g = doc.get("gate") or {}
    if not isinstance(g, dict):
        raise TrialFileError(f"{where}: gate: expected an object")
    levels = g.get("concurrency") or [1]
    if not isinstance(levels, list) or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1
                                               for c in levels):
        raise TrialFileError(f"{where}: gate.concurrency: expected a list of whole numbers >= 1, got {levels!r}")
    slo = g.get("slo") or {}
    if not isinstance(slo, dict):
        raise TrialFileError(f"{where}: gate.slo: expected an object of limits in seconds, got {slo!r}")
    try:
        check_slo(slo)
    except ValueError as exc:
        raise TrialFileError(f"{where}: gate.slo: {exc}") from None
    abandon = g.get("abandon_below")
    if abandon is not None:
        if (not isinstance(abandon, list) or len(abandon) != 2 or abandon[0] not in OBJECTIVES
                or not isinstance(abandon[1], (int, float)) or isinstance(abandon[1], bool)):
            raise TrialFileError(f"{where}: gate.abandon_below: expected [objective, value], got {abandon!r}")
        abandon = (abandon[0], float(abandon[1]))
    report_file = doc.get("report_file")
    if report_file is not None and not isinstance(report_file, str):
        raise TrialFileError(f"{where}: report_file: expected a path, got {report_file!r}")
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
    r = report or {}
    keep = ("verdict", "decode_tok_s", "ttft_s", "aggregate_tok_s", "accept_length", "load", "slo",
            "server_metrics", "abandoned", "timing")
    out = {k: r.get(k) for k in keep if r.get(k) is not None}
    spread = r.get("decode_tok_s_spread")
    if isinstance(spread, dict):
        out["decode_tok_s_spread"] = {k: spread.get(k) for k in ("min", "max", "n") if k in spread}
    return out


def outcome_of(result: Mapping[str, Any] | None, dump: Mapping[str, Any] | None, objective: str) -> TrialResult:
    """The trial's outcome from the deploy's result record (``roles/results.py``) and the
    dump the trial's gate left (``{"outcome", "summary", "report"}``). A host whose deploy
    failed before the gate (plan, proof, install) is infeasible with that error."""
    result = result or {}
    dump = dump or {}
    report = dump.get("report") or {}
    text = "\n".join(str(x) for x in (dump.get("summary"), result.get("summary"),
                                       (report.get("service_failure") or {}).get("journal"),
                                       (report.get("error") or {}).get("message")) if x)
    mem = memory_failure(text)
    kind = dump.get("outcome")
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
    if report.get("abandoned"):
        a = report["abandoned"]
        return TrialResult(ABANDONED, value, f"stopped early: {objective} bound {_g(a.get('bound'))} below "
                                         f"{_g(a.get('threshold'))} after {a.get('after_requests')} request(s)",
                       False, figs)
    return TrialResult(OK, value, None, False, figs)


def _g(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0][:300] if (text or "").strip() else ""


_ERROR_LINE = re.compile(r"(Error|Exception|exception|error:|Traceback|Killed|signal)")


def _last_error_line(text: str) -> str | None:
    """The journal's last line that says what went wrong (its syslog prefix dropped)."""
    for line in reversed((text or "").splitlines()):
        if _ERROR_LINE.search(line):
            return re.sub(r"^\w{3} +\d+ [\d:]+ \S+ [^:]+: ", "", line.strip())[:200]
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


def _key(config: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in config.items()))


def evidence(rows: Sequence[Mapping[str, Any]], best: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Why each intent of the winning config won, for the record's reasons: the winner's mean
    objective and the runner-up's, the best measured config with another value of that intent,
    preferring one that differs in that intent only. Only fully measured (ok) trials count."""
    sums: dict[tuple, list[float]] = {}
    configs: dict[tuple, Mapping[str, Any]] = {}
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
