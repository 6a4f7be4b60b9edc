"""Tuning records: the best launch settings `sglang-deploy tune` measured, per hardware class.

A record holds the winning intents of one tuning run, the measured evidence behind
each of them, every trial's figures, and when and on which host it was measured. It
applies to a host only when the host's hardware class matches it field for field:
architecture, GPU model and count, topology, SGLang version, model and the model's
resolved revision. A record measured on another SGLang version or another revision
of the weights says nothing reliable about this one, so it is not applied, and the
plan says why.

The file sits next to the inventory (``records_path``)::

    format: 1
    records:
    - hardware: {arch: sm86, gpu_model: RTX A6000, gpu_count: 2, topology: nvlink-pairs,
                 sglang_version: 0.5.23, model: Qwen/Qwen3.6-27B, revision: 0123abcd...}
      objective: decode
      concurrency: [1]
      slo: {}
      intents: {speculative_num_steps: 3, ...}
      evidence: {speculative_num_steps: {value: 3, objective: 57.1, runner_up: {value: 2, objective: 49.8}}}
      measured_on: a6000-1
      measured_at: '2026-11-30T20:00:00+00:00'
      trial_count: 12
      tool_version: 0.1.0
      trials: [{number: 1, config: {...}, status: ok, objective: 49.8, cause: null, figures: {...}}, ...]

It is data the planner reads; ``load_records`` refuses a malformed file with the file
and the field at fault, ``save_record`` replaces the record of the same class and
keeps the others, writing atomically.

A record is trusted only for what it is for: its intents (and every trial's config) may
name only what the tuner varies, the dimensions of the tuning space (``space.TUNABLE``);
a record naming ``trust_remote_code``, ``host``, ``extra_args`` or anything else is refused,
naming the field. The file is read through the bounded readers of ``sglang_deploy.untrusted``
(a regular file of at most 16 MiB, YAML without aliases, nesting capped); every string in it
is free of control characters and bounded, every number finite, every list bounded, so what
``plan --explain`` shows of it cannot drive the terminal.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence


from sglang_deploy.plan.hardware import same_gpu_model
from sglang_deploy.untrusted import printable
from sglang_deploy.plan.weights import facts_commit
from sglang_deploy.gate.load import levels as gate_levels
from sglang_deploy.gate.options import default as gate_default

#: The intents the tuner varies (the tuning space's dimensions, sglang_deploy/tuning/space.py):
#: all a record or a trial file may set.
TUNABLE = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
           "speculative_num_draft_tokens", "mem_fraction_static", "cuda_graph_max_bs_decode",
           "chunked_prefill_size", "max_running_requests", "prefill_cuda_graph", "custom_all_reduce",
           "tp_size", "dp_size", "attn_dp_size")
#: The layout intents: a record or a trial sets them together (TP and DP, DP attention optional),
#: as whole numbers whose GPUs fit the record's own class (gpu_count); the plan checks them again
#: against the host's GPUs and model when it applies the record.
LAYOUT = ("tp_size", "dp_size", "attn_dp_size")
#: A trial's status: measured in full, found infeasible (it did not start, crashed, ran out of
#: memory or missed the gate), or stopped early by the gate once it could not win.
STATUSES = OK, INFEASIBLE, ABANDONED = ("ok", "infeasible", "abandoned")
#: The concurrency levels a tuning run measures its trials at unless told others (``tune
#: --concurrency``, a trial file's gate.concurrency, a record's concurrency): the levels the
#: gate measures by default (sglang_deploy/gate/options.py), so that a trial is measured as the
#: deploy's own gate measures the revision it tunes.
DEFAULT_CONCURRENCY: tuple[int, ...] = gate_levels(gate_default("concurrency"))

FORMAT = 1
TRIAL_STATUSES = STATUSES

#: Bounds of what a record file may hold (a tune runs tens of trials; these are far above any real one).
MAX_RECORDS = 1000
MAX_TRIALS = 10000
MAX_LEVELS = 64  # concurrency levels of one record
MAX_NAME = 256  # a hardware field, a host name, a version
MAX_TEXT = 4096  # a trial's cause, any other string
#: A host name as an inventory names it (a DNS name, an address, pyinfra's @local/@ssh/...):
#: visible characters only, at most 253 (RFC 1035's limit for a DNS name).
_HOST = re.compile(r"^[A-Za-z0-9@\[][A-Za-z0-9@._:/\[\]-]{0,252}$")
HOST_NAME = _HOST


class TuningError(ValueError):
    """A tuning record file that cannot be read: names the file and the field at fault."""

    def __init__(self, path: str | os.PathLike[str], where: str, message: str) -> None:
        # one line without terminal controls: a key or value of a hostile file is quoted here
        self.path = str(path)
        self.where = printable(where)[:200]
        self.message = printable(message)[:400]
        super().__init__(f"tuning records {self.path}: {self.where}: {self.message}" if self.where else
                         f"tuning records {self.path}: {self.message}")


@dataclass(frozen=True)
class HardwareClass:
    """What a measurement depends on; a record applies only to the same class."""

    arch: str  # architecture key, e.g. sm86
    gpu_model: str  # e.g. RTX A6000 (without the "NVIDIA " prefix the probe reports)
    gpu_count: int  # GPUs the server uses
    topology: str  # the GPUs' interconnect class (hardware.topology_class): pcie, nvlink-pairs, nvswitch, ...
    sglang_version: str
    model: str  # the model's id (or path), as the inventory names it
    revision: str | None  # the resolved commit of the weights; None when it was not known

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def differences(self, other: "HardwareClass") -> list[str]:
        """The fields that differ (GPU model names compared as the probe and the GPU database spell them)."""
        out = []
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            same = same_gpu_model(mine, theirs) if f.name == "gpu_model" else mine == theirs
            if not same:
                out.append(f.name)
        return out

    def describe(self) -> str:
        rev = f" at {self.revision[:12]}" if self.revision else ""
        return (f"{self.gpu_count}x {self.gpu_model} ({self.arch}, {self.topology}), SGLang {self.sglang_version}, "
                f"{self.model}{rev}")


def _gpu_model_name(name: str) -> str:
    return re.sub(r"^NVIDIA\s+", "", name.strip(), flags=re.IGNORECASE)


def class_of(gpus: Any, sglang_version: str, model: str, facts: Any = None, weights: Any = None) -> HardwareClass:
    """The hardware class of a server on ``gpus`` (hardware.GpuSet). The revision is the commit the
    model's facts were read at, else the commit the weights were resolved to, else None."""
    revision = facts_commit(facts) or (getattr(weights, "commit", None) if weights is not None else None)
    return HardwareClass(arch=gpus.arch, gpu_model=_gpu_model_name(gpus.model), gpu_count=gpus.count,
                         topology=gpus.topology, sglang_version=sglang_version, model=model, revision=revision)


def hardware_class(plan: Any) -> HardwareClass:
    """The hardware class of a plan (plan.Plan): what a record measured on it applies to."""
    return class_of(plan.gpus, plan.sglang_version, plan.model_path, plan.facts, plan.weights)


@dataclass
class TuningRecord:
    """The outcome of one tuning run on one hardware class."""

    hardware: HardwareClass
    objective: str  # decode | throughput | goodput (sglang_deploy/tuning/objective.py)
    intents: dict[str, Any]  # the winning configuration: intent -> value
    measured_on: str  # the host the trials ran on
    measured_at: str  # ISO 8601 time the run finished
    trial_count: int  # trials run (including infeasible and abandoned ones)
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    slo: dict[str, float] = field(default_factory=dict)
    # intent -> {"value", "objective", "runner_up": {"value", "objective"} | None}: why this value won
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)
    trials: list[dict[str, Any]] = field(default_factory=list)  # number, config, status, objective, cause, figures
    tool_version: str = ""
    # intent -> {"value", "prior", "proposed", "moved", "reason", "gain", "spread", "worse"}: for every
    # setting the best measured configuration had off its prior, whether it moved and why
    # (sglang_deploy/tuning/settle.py)
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain data in the file's key order."""
        return {
            "hardware": self.hardware.as_dict(),
            "objective": self.objective,
            "concurrency": list(self.concurrency),
            "slo": _plain(self.slo),
            "intents": _plain(self.intents),
            "evidence": _plain(self.evidence),
            **({"decisions": _plain(self.decisions)} if self.decisions else {}),
            "measured_on": self.measured_on,
            "measured_at": self.measured_at,
            "trial_count": self.trial_count,
            "tool_version": self.tool_version,
            "trials": [_trial_dict(t) for t in self.trials],
        }

    def summary(self) -> dict[str, Any]:
        """What a plan shows of the record it applied (the trials stay in the file)."""
        out = self.as_dict()
        del out["trials"]
        return out

    @property
    def date(self) -> str:
        return self.measured_at[:10]

    def unit(self) -> str:
        """The objective's unit, for reasons."""
        top = max(self.concurrency) if self.concurrency else 1
        if self.objective == "decode":
            return "tok/s"
        if self.objective == "throughput":
            return f"output tok/s at concurrency {top}"
        return f"req/s within the SLOs at concurrency {top}"

    def reason(self, intent: str, context: Mapping[str, Any] | None = None) -> str:
        """Why the record sets ``intent``: its measured objective against the runner-up's.
        ``context``: the plan's other intents, for what the record does not set itself (which
        speculative algorithm its steps are for)."""
        value = self.intents[intent]
        intents = {**(context or {}), **self.intents}
        where = f"measured on {self.measured_on}, {self.trial_count} trials (tuning record {self.date})"
        decision = self.decisions.get(intent)
        if isinstance(decision, Mapping) and isinstance(decision.get("reason"), str):
            where = f"{decision['reason']}; {where}"
        ev = self.evidence.get(intent)
        if not ev or not _number(ev.get("objective")):
            return printable(f"{_phrase(intent, value, intents)}: part of the best configuration found, {where}")
        text = f"{_phrase(intent, value, intents)}: {_num(ev['objective'])} {self.unit()}"
        runner = ev.get("runner_up")
        if isinstance(runner, Mapping) and _number(runner.get("objective")):
            text += f" vs {_num(runner['objective'])} {_at(intent, runner.get('value'))}"
        return printable(f"{text}, {where}")


#: A trial's keys, in the order a record lists them (its other keys after them, sorted).
_TRIAL_KEYS = ("number", "config", "status", "objective", "cause", "figures")


def _plain(value: Any) -> Any:
    """YAML-safe plain data: tuples as lists, mappings with their keys sorted (a stable file)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value

def _trial_dict(trial: Mapping[str, Any]) -> dict[str, Any]:
    first = {k: _plain(trial[k]) for k in _TRIAL_KEYS if k in trial}
    rest = {str(k): _plain(trial[k]) for k in sorted(trial, key=str) if k not in _TRIAL_KEYS}
    return {**first, **rest}


# ---------------------------------------------------------------------------
# Reasons in words

_ALGORITHM_WORDS = {"NEXTN": "MTP", "EAGLE": "EAGLE", "EAGLE3": "EAGLE-3", "STANDALONE": "draft-model",
                    "NGRAM": "n-gram"}


#: The speculative shape in words: (the value as a setting, the runner-up's value), {algo} the
#: algorithm's name, {v} the value.
_SHAPE_WORDS = {"speculative_num_steps": ("{algo} {v} steps", "at {v} steps"),
                "speculative_eagle_topk": ("{algo} top-k {v}", "at top-k {v}"),
                "speculative_num_draft_tokens": ("{algo} {v} draft tokens", "at {v} draft tokens")}


def _onoff(value: Any) -> str:
    return "on" if value else "off"


def _phrase(intent: str, value: Any, intents: Mapping[str, Any]) -> str:
    if intent in LAYOUT:
        return layout_words(intents)
    if intent == "speculative_algorithm":
        return "speculative decoding off" if value is None else f"speculative decoding {value}"
    if intent in _SHAPE_WORDS:
        algo = _ALGORITHM_WORDS.get(str(intents.get("speculative_algorithm")), "speculative")
        return _SHAPE_WORDS[intent][0].format(algo=algo, v=value)
    if isinstance(value, bool):
        return f"{intent} {_onoff(value)}"
    return f"{intent} {'-' if value is None else value}"


_LAYOUT_WORDS = {"tp_size": "TP", "dp_size": "DP", "attn_dp_size": "DP attention"}


def layout_words(intents: Mapping[str, Any]) -> str:
    """TP x DP (x DP attention) in words, e.g. "TP 2 x DP 4"."""
    text = f"TP {intents.get('tp_size', 1)} x DP {intents.get('dp_size', 1)}"
    attn = intents.get("attn_dp_size") or 1
    return text + (f" with DP attention over {attn}" if attn > 1 else "")


def _at(intent: str, value: Any) -> str:
    if intent in LAYOUT:
        return f"at {_LAYOUT_WORDS[intent]} {value}"
    if intent == "speculative_algorithm":
        return "with speculative decoding off" if value is None else f"with {value}"
    if intent in _SHAPE_WORDS:
        return _SHAPE_WORDS[intent][1].format(v=value)
    if isinstance(value, bool):
        return f"with it {_onoff(value)}"
    return f"at {'-' if value is None else value}"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _num(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 10 else f"{round(value, 1):g}"


# ---------------------------------------------------------------------------
# Matching


_FIELD_WORDS = {
    "arch": (lambda v: f"{v}", lambda v: f"is {v}"),
    "gpu_model": (lambda v: f"{v}", lambda v: f"has {v}"),
    "gpu_count": (lambda v: f"{v} GPU(s)", lambda v: f"uses {v} GPU(s)"),
    "topology": (lambda v: f"topology {v}", lambda v: f"has topology {v}"),
    "sglang_version": (lambda v: f"SGLang {v}", lambda v: f"runs {v}"),
    "model": (lambda v: f"model {v}", lambda v: f"serves {v}"),
    "revision": (lambda v: f"revision {v}" if v else "an unknown revision",
                 lambda v: f"serves revision {v}" if v else "serves a revision not known when planning"),
}


def mismatch_note(record: TuningRecord, hw: HardwareClass) -> str | None:
    """Why ``record`` does not apply to a host of class ``hw`` (None: it applies)."""
    diff = record.hardware.differences(hw)
    if not diff:
        return None
    theirs = ", ".join(_FIELD_WORDS[f][0](getattr(record.hardware, f)) for f in diff)
    ours = ", ".join(_FIELD_WORDS[f][1](getattr(hw, f)) for f in diff)
    return printable(f"tuning record for {theirs} not applied: this host {ours} (measured on {record.measured_on}, "
                     f"{record.date})")


def match(records: Sequence[TuningRecord], hw: HardwareClass) -> tuple[TuningRecord | None, list[str]]:
    """The record for ``hw`` (None: none applies) and, for the records of the same model that do
    not apply, why not. Records for other models are about other deployments: one note counts them."""
    found: TuningRecord | None = None
    notes: list[str] = []
    others = 0
    for record in records:
        if record.hardware.model != hw.model:
            others += 1
            continue
        note = mismatch_note(record, hw)
        if note is None:
            found = found or record
        else:
            notes.append(note)
    if found is None and others and not notes:
        notes.append(f"no tuning record for {hw.model}: the {others} record(s) given are for other models")
    return found, notes
