"""What a host sent `status`, checked: the status fact's lines (:func:`parse_observed`), the
weights re-hash's answer, the history's gate lines; the limits the fact reads within, and the
state words a row can have. Pure; every value is untrusted until checked here."""

from __future__ import annotations

import base64
import binascii
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from sglang_deploy import downtime
from sglang_deploy.gate.verdict import ACCEPT_SLOWER_MAX, summarize_baseline_across_versions
from sglang_deploy.untrusted import UntrustedInput, load_json, printable, shown
from sglang_deploy.status.gpus import GPU_HEALTH_BYTES, GpuHealth, _text, parse_gpu_health


SCHEMA = 1
FILE_KEYS = ("unit", "env", "nccl_conf")
#: Hosts connected and read at once by ``status`` (``--parallel``), by default and at most.
READ_PARALLEL = 100
READ_PARALLEL_MAX = 2000
#: The history the fact reads: within its last HISTORY_SCAN_BYTES, the last HISTORY_LINES lines
#: that are not the continuous check's and its last WATCH_LINES lines (the check writes one line
#: per interval, which would soon push the last gate out of a plain tail), at most HISTORY_BYTES
#: sent in all.
HISTORY_SCAN_BYTES = 16 << 20
HISTORY_LINES = 100
WATCH_LINES = 10
HISTORY_BYTES = 256 * 1024
#: One history line is at most this long (a gate's line is a few KiB); longer ones are skipped.
HISTORY_LINE_BYTES = 64 * 1024
#: A drifted file is shown by ``--diff`` up to this many bytes of each side.
DIFF_BYTES = 256 * 1024

UNREACHABLE, ERROR, NEVER, HALF, DRIFTED, DOWN, DEGRADED, GATE_FAILED, VERSION, PENDING, OK = (
    "unreachable", "error", "never-deployed", "half-deployed", "drifted", "down", "degraded", "gate-failed",
    "version", "pending", "ok")
STATES = (UNREACHABLE, ERROR, NEVER, HALF, DRIFTED, DOWN, DEGRADED, GATE_FAILED, VERSION, PENDING, OK)
#: What a row is about: an SGLang server host, or a host that runs the SGLang Model Gateway.
KIND_SERVER, KIND_GATEWAY = "server", "gateway"
#: A worker in one of its gateways: listed healthy, listed unhealthy, not listed, or not known
#: (the gateway could not be read).
LISTED, UNHEALTHY, MISSING, UNKNOWN = "listed", "unhealthy", "missing", "unknown"
MEMBERSHIPS = (LISTED, UNHEALTHY, MISSING, UNKNOWN)
#: How long the controller waits for one gateway's worker list (connect, then the whole answer).
GATEWAY_READ_TIMEOUT_S = 10.0
#: Workers a gateway lists that no host of the inventory names: named up to this many (then a count).
OTHERS_SHOWN = 5
#: What the host sends of the running server's argv (/proc/MAINPID/cmdline), the deployed
#: revision's staged unit, and the GPU health line (sglang_deploy/deploy/host/gpu_health.py).
CMDLINE_BYTES = 128 * 1024
STAGED_UNIT_BYTES = 256 * 1024

# A revision is 16 hex digits (sglang_deploy/lifecycle/revision.py revision_id); a version is PEP 440-ish.
_REVISION = re.compile(r"[0-9a-f]{16}")
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+!-]{0,63}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_VERDICTS = ("pass", "fail", "error")


# ---- what the host sent -------------------------------------------------------------------------

@dataclass(frozen=True)
class UnitShow:
    """``systemctl show`` of the service (systemd.exec(5)/org.freedesktop.systemd1(5) properties)."""

    load_state: str | None = None
    active_state: str | None = None
    sub_state: str | None = None
    main_pid: int | None = None
    n_restarts: int | None = None
    active_enter_us: int | None = None  # ActiveEnterTimestampMonotonic: CLOCK_MONOTONIC, microseconds
    exec_main_start_us: int | None = None  # ExecMainStartTimestampMonotonic


@dataclass(frozen=True)
class Observed:
    """One host as the status fact read it, already checked for shape."""

    systemd: bool
    state_dir: bool = False
    current: str | None = None
    previous: str | None = None
    deployed: str | None = None
    reference: str | None = None  # the revision whose staged copies the live files were compared with
    staged: tuple[str, ...] = ()  # complete revision folders
    staging: tuple[str, ...] = ()  # revision folders without their ``complete`` mark
    leftover_tmp: tuple[str, ...] = ()  # live files with a swap's temporary file beside them
    live_sha256: Mapping[str, str | None] = field(default_factory=dict)
    staged_sha256: Mapping[str, str | None] = field(default_factory=dict)
    staged_version: str | None = None  # the running revision's SGLang version, as staged
    installed_version: str | None = None  # SGLang installed in that version's venv
    enabled: str | None = None
    unit: UnitShow = field(default_factory=UnitShow)
    now_us: int | None = None  # the host's CLOCK_MONOTONIC when read
    lock: bool = False  # a deploy's lock file is on the host (sglang_deploy/deploy/watching.py)
    lock_started: int | None = None  # its started= and expires= (the host's clock, Unix seconds)
    lock_expires: int | None = None
    now_s: int | None = None  # the host's clock when read, beside the lock
    history: tuple[str, ...] = ()  # raw lines, oldest first
    history_truncated: bool = False
    diffs: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # key -> (live, staged) text
    warnings: tuple[str, ...] = ()  # what the host sent that was refused
    cmdline: tuple[str, ...] | None = None  # the running MainPID's argv (None: not read, or cut at the bound)
    staged_unit: str | None = None  # the reference revision's staged unit text
    live_unit: str | None = None  # the live unit file's text
    gpu_health: "GpuHealth | None" = None  # None: the host sent no health line


def _int(text: str | None) -> int | None:
    if text is None or not re.fullmatch(r"[0-9]{1,20}", text):
        return None
    return int(text)


def _b64_bytes(text: str | None) -> bytes | None:
    """A base64 field of the host's answer, decoded; None when absent or not base64."""
    if text is None:
        return None
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None


def _b64(text: str | None, cap: int) -> str | None:
    raw = _b64_bytes(text)
    return None if raw is None else raw[:cap].decode("utf-8", errors="replace")


def parse_observed(lines: Iterable[str]) -> Observed:
    """The status fact's ``key=value`` lines as :class:`Observed`; whatever does not have the
    shape it must have is dropped with a warning (a marker) or ignored (an unknown key)."""
    values: dict[str, list[str]] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep:
            values.setdefault(key.strip(), []).append(value.strip())
    warnings: list[str] = []

    def one(key: str) -> str | None:
        got = values.get(key)
        return got[-1] if got and got[-1] else None

    def revision(key: str) -> str | None:
        value = one(key)
        if value is None:
            return None
        if not _REVISION.fullmatch(value):
            warnings.append(f"the {key} marker holds {shown(value, 40)}, not a revision; ignored")
            return None
        return value

    def version(key: str) -> str | None:
        value = one(key)
        if value is not None and not _VERSION.fullmatch(value):
            warnings.append(f"{key} {shown(value, 40)} is not a version; ignored")
            return None
        return value

    def sha(key: str) -> str | None:
        value = one(key)
        return value if value is not None and _SHA256.fullmatch(value) else None

    unit = UnitShow(
        load_state=_word(one("unit_LoadState")), active_state=_word(one("unit_ActiveState")),
        sub_state=_word(one("unit_SubState")), main_pid=_int(one("unit_MainPID")),
        n_restarts=_int(one("unit_NRestarts")), active_enter_us=_int(one("unit_ActiveEnterTimestampMonotonic")),
        exec_main_start_us=_int(one("unit_ExecMainStartTimestampMonotonic")))
    history_text = _b64(one("history"), HISTORY_BYTES) or ""
    history_bytes = _int(one("history_bytes")) or 0
    selected = _int(one("history_selected")) or 0
    history = history_text.split("\n")
    if selected > len(history_text.encode("utf-8", errors="replace")) and len(history) > 1:
        history = history[1:]  # cut off at the byte cap: the first line is a part of one
    truncated = history_bytes > HISTORY_SCAN_BYTES
    diffs: dict[str, tuple[str, str]] = {}
    for key in FILE_KEYS:
        live, staged = _b64(one(f"difflive_{key}"), DIFF_BYTES), _b64(one(f"diffstaged_{key}"), DIFF_BYTES)
        if live is not None or staged is not None:
            diffs[key] = (live or "", staged or "")
    return Observed(
        systemd=one("systemd") == "yes",
        state_dir=one("state_dir") == "yes",
        current=revision("current"), previous=revision("previous"), deployed=revision("deployed"),
        reference=revision("reference"),
        staged=tuple(sorted(v for v in values.get("staged", []) if _REVISION.fullmatch(v))),
        staging=tuple(sorted(v for v in values.get("staging", []) if _REVISION.fullmatch(v))),
        leftover_tmp=tuple(k for k in FILE_KEYS if one(f"tmp_{k}") == "yes"),
        live_sha256={k: sha(f"live_{k}") for k in FILE_KEYS},
        staged_sha256={k: sha(f"staged_{k}") for k in FILE_KEYS},
        staged_version=version("staged_version"), installed_version=version("installed_version"),
        enabled=_word(one("enabled")), unit=unit, now_us=_int(one("now_us")),
        lock=one("lock") == "yes", lock_started=_int(one("lock_started")), lock_expires=_int(one("lock_expires")),
        now_s=_int(one("now_s")),
        history=tuple(line for line in history if line.strip()), history_truncated=truncated,
        diffs=diffs, warnings=tuple(warnings), cmdline=_cmdline(one("cmdline")),
        staged_unit=_b64(one("unittext_staged"), STAGED_UNIT_BYTES),
        live_unit=_b64(one("unittext_live"), STAGED_UNIT_BYTES),
        gpu_health=parse_gpu_health(_b64(one("gpu_health"), GPU_HEALTH_BYTES)) if one("gpu_health") else None)


def _cmdline(text: str | None) -> tuple[str, ...] | None:
    """/proc/PID/cmdline (proc(5): NUL-terminated words), base64; None when absent, empty (a
    kernel thread or a process exiting) or cut at CMDLINE_BYTES."""
    raw = _b64_bytes(text)
    if not raw or len(raw) >= CMDLINE_BYTES:
        return None
    return tuple(w.decode("utf-8", errors="replace") for w in raw.rstrip(b"\0").split(b"\0"))


WEIGHTS_ANSWER_BYTES = 1 << 20  # the stager's --verify-served line
WEIGHTS_BAD_SHOWN = 20  # mismatches named per host (the count says how many more)


@dataclass(frozen=True)
class WeightsCheck:
    """``--verify-weights``: the host's re-hash of the snapshot its running revision serves
    (``stage_weights.py --verify-served``), checked for shape."""

    served: str | None = None  # the snapshot's path; None: the running revision serves none from a store
    bad: tuple[tuple[str, str], ...] = ()  # (file, what is wrong)
    finished: bool = False
    error: str | None = None  # why it did not finish (the deadline, no marker, a hostile one, no answer)
    files: int = 0
    bytes: int = 0
    seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"served": self.served, "finished": self.finished, "files": self.files, "bytes": self.bytes,
                "seconds": self.seconds, "bad": [{"file": f, "problem": p} for f, p in self.bad],
                "error": self.error}


def parse_weights_check(text: str) -> WeightsCheck:
    """The stager's one JSON line (its last line) as :class:`WeightsCheck`; what does not fit is an error."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return WeightsCheck(error="the re-hash printed nothing")
    try:
        doc = load_json(lines[-1], "the re-hash's answer", max_bytes=WEIGHTS_ANSWER_BYTES)
    except UntrustedInput as exc:
        return WeightsCheck(error=printable(str(exc))[:200])
    if not isinstance(doc, dict):
        return WeightsCheck(error="the re-hash's answer is not a JSON object")
    served = doc.get("served")
    if served is None:
        return WeightsCheck(served=None, finished=True)
    if not isinstance(served, str):
        return WeightsCheck(error="the re-hash's answer names no snapshot")
    bad: list[tuple[str, str]] = []
    raw_bad = doc.get("bad")
    for item in raw_bad if isinstance(raw_bad, list) else []:
        if isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item):
            bad.append((printable(item[0])[:300], printable(item[1])[:200]))
    files, size, seconds = doc.get("files"), doc.get("bytes"), doc.get("seconds")
    error = doc.get("error")
    return WeightsCheck(
        served=printable(served)[:300], bad=tuple(bad), finished=doc.get("finished") is True,
        error=printable(error)[:300] if isinstance(error, str) else None,
        files=files if type(files) is int and files >= 0 else 0,
        bytes=size if type(size) is int and size >= 0 else 0,
        seconds=float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
        and math.isfinite(seconds) and seconds >= 0 else None)


def _word(value: str | None) -> str | None:
    """A systemd state word (``active``, ``running``, ``enabled``...): letters, digits and dashes."""
    return value if value is not None and re.fullmatch(r"[A-Za-z0-9-]{1,32}", value) else None


# ---- the host's last gate -----------------------------------------------------------------------

@dataclass(frozen=True)
class LastGate:
    verdict: str  # pass | fail | error | unknown
    time: str | None
    revision: str | None
    decode_tok_s: float | None
    target_tok_s: float | None
    baseline_tok_s: float | None  # the best passing result of the same key before it (the gate's baseline)
    summary: str
    # the SGLang version whose results baseline_tok_s is, when not the gate's own (an upgrade's first gate)
    baseline_version: str | None = None
    accepted_slower: str | None = None  # the operator's reason, when it let a slower result pass
    predicted_tok_s: float | None = None  # what the plan predicted this hardware allows (gate.predicted)
    # prefill (input tok/s of the gate's long prompt) and the concurrency level's aggregate output,
    # each with the plan's prediction (gate/figures.py; None: not measured, or a line from before)
    prefill_tok_s: float | None = None
    predicted_prefill_tok_s: float | None = None
    aggregate_tok_s: float | None = None
    concurrency: int | None = None
    predicted_output_tok_s: float | None = None
    # the restart before it (sglang_deploy/downtime.py): the serving gap, the new server's start
    # (process start to ready) and each phase's seconds; None/{}: not measured, or a line from before
    serving_gap_s: float | None = None
    start_s: float | None = None
    phases: Mapping[str, float] = field(default_factory=dict)

    @property
    def slowest_phase(self) -> tuple[str, float] | None:
        """The start's longest phase (of its own: load to ready), where one was recorded."""
        own = [(k, v) for k, v in self.phases.items() if k in downtime.START_PHASES]
        return max(own, key=lambda kv: kv[1]) if own else None

    @property
    def measured_over_predicted(self) -> float | None:
        return _ratio(self.decode_tok_s, self.predicted_tok_s)

    @property
    def prefill_over_predicted(self) -> float | None:
        return _ratio(self.prefill_tok_s, self.predicted_prefill_tok_s)

    @property
    def aggregate_over_predicted(self) -> float | None:
        return _ratio(self.aggregate_tok_s, self.predicted_output_tok_s)

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "time": self.time, "revision": self.revision,
                "decode_tok_s": self.decode_tok_s, "target_tok_s": self.target_tok_s,
                "baseline_tok_s": self.baseline_tok_s, "baseline_version": self.baseline_version,
                "accepted_slower": self.accepted_slower, "predicted_tok_s": self.predicted_tok_s,
                "measured_over_predicted": self.measured_over_predicted,
                "prefill_tok_s": self.prefill_tok_s, "predicted_prefill_tok_s": self.predicted_prefill_tok_s,
                "prefill_over_predicted": self.prefill_over_predicted,
                "aggregate_tok_s": self.aggregate_tok_s, "concurrency": self.concurrency,
                "predicted_output_tok_s": self.predicted_output_tok_s,
                "aggregate_over_predicted": self.aggregate_over_predicted, "serving_gap_s": self.serving_gap_s,
                "start_s": self.start_s, "phases": dict(self.phases), "summary": self.summary}


def _ratio(measured: float | None, predicted: float | None) -> float | None:
    if measured is None or not predicted:
        return None
    return round(measured / predicted, 3)


def _rate(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        rate = float(value)
    except OverflowError:  # an int of hundreds of digits
        return None
    return rate if math.isfinite(rate) and rate >= 0 else None


def _level(value: Any) -> int | None:
    """A concurrency level: a whole number the gate could have measured (gate/options.py LIMITS)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1024 else None


def _key(value: Any) -> dict[str, str] | None:
    """The gate's key (hardware, model, SGLang version), strings only."""
    if not isinstance(value, dict):
        return None
    fields = ("hardware", "model", "sglang_version")
    if not all(isinstance(value.get(f), str) for f in fields):
        return None
    return {f: str(value[f])[:200] for f in fields}


def gate_entries(lines: Sequence[str]) -> tuple[list[dict[str, Any]], int]:
    """The gate lines of a history tail (``sglang_deploy/gate/outcomes.py`` ``history_entry``, kind
    ``gate``), each reduced to checked fields, oldest first; and how many lines were refused."""
    entries: list[dict[str, Any]] = []
    refused = 0
    for line in lines:
        try:
            doc = load_json(line, "history line", max_bytes=HISTORY_LINE_BYTES, max_depth=16)
        except UntrustedInput:
            refused += 1
            continue
        if not isinstance(doc, dict):
            refused += 1
            continue
        if doc.get("kind") != "gate":
            continue
        verdict = doc.get("verdict")
        rev = doc.get("revision")
        entries.append({
            "verdict": verdict if isinstance(verdict, str) and verdict in _VERDICTS else "unknown",
            "time": _text(doc.get("created"), 40),
            "revision": rev if isinstance(rev, str) and _REVISION.fullmatch(rev) else None,
            "decode_tok_s": _rate(doc.get("decode_tok_s")),
            "target_tok_s": _rate(doc.get("target_tok_s")),
            "summary": _text(doc.get("summary"), 200) or "",
            "key": _key(doc.get("key")),
            "accepted_slower": _text(doc.get("accepted_slower"), ACCEPT_SLOWER_MAX) or None,
            "predicted_tok_s": _rate(doc.get("predicted_tok_s")) or None,
            "prefill_tok_s": _rate(doc.get("prefill_tok_s")),
            "predicted_prefill_tok_s": _rate(doc.get("predicted_prefill_tok_s")) or None,
            "aggregate_tok_s": _rate(doc.get("aggregate_tok_s")),
            "concurrency": _level(doc.get("concurrency")),
            "predicted_output_tok_s": _rate(doc.get("predicted_output_tok_s")) or None,
            **_downtime(doc.get("downtime")),
        })
    return entries, refused


def _downtime(value: Any) -> dict[str, Any]:
    """A gate line's restart (``downtime.measure``): its gap, start and the phases it knows, numbers only."""
    down: dict[str, Any] = value if isinstance(value, dict) else {}
    raw = down.get("phases")
    phases: dict[Any, Any] = raw if isinstance(raw, dict) else {}
    known = {name for name, _, _ in downtime.PHASES}
    return {"serving_gap_s": _rate(down.get("serving_gap_s")), "start_s": _rate(down.get("start_s")),
            "phases": {k: v for k, v in ((k, _rate(v)) for k, v in phases.items() if k in known) if v is not None}}


def last_gate(lines: Sequence[str]) -> tuple[LastGate | None, int]:
    """The host's last gate, with the baseline it was judged against (the best passing decode
    rate of its key among the gates before it, else of the SGLang version before it on the same
    hardware and model: ``gate.verdict.summarize_baseline_across_versions``, the gate's own rule)
    and the operator's reason when one let it pass slower; and how many history lines were refused."""
    entries, refused = gate_entries(lines)
    if not entries:
        return None, refused
    last = entries[-1]
    baseline, version = None, None
    if last["key"] is not None:
        summary = summarize_baseline_across_versions([e for e in entries[:-1] if e["key"] is not None],
                                                     last["key"])
        baseline = summary.best_tok_s
        version = summary.version if summary.from_previous_version else None
    return LastGate(verdict=last["verdict"], time=last["time"], revision=last["revision"],
                    decode_tok_s=last["decode_tok_s"], target_tok_s=last["target_tok_s"],
                    baseline_tok_s=baseline, summary=last["summary"], baseline_version=version,
                    accepted_slower=last["accepted_slower"], predicted_tok_s=last["predicted_tok_s"],
                    prefill_tok_s=last["prefill_tok_s"], predicted_prefill_tok_s=last["predicted_prefill_tok_s"],
                    aggregate_tok_s=last["aggregate_tok_s"], concurrency=last["concurrency"],
                    predicted_output_tok_s=last["predicted_output_tok_s"], serving_gap_s=last["serving_gap_s"],
                    start_s=last["start_s"], phases=last["phases"]), refused
