"""`sglang-deploy status`: what every host runs against what it should run, pure.

The status fact (``sglang_deploy/deploy/status.py``) reads a host in one command and prints
``key=value`` lines; :func:`parse_observed` turns them into :class:`Observed`. Everything a
host sent is untrusted data: markers, revision names, versions and the gate's history are
checked for shape and type, bounded, and made printable before any of it is shown, and the
``--diff`` of a drifted file never shows a secret (:func:`redact`).

:func:`build_row` compares one host's :class:`Observed` with what the inventory plans today
(:class:`Planned`) and gives one :class:`Row`: a state word, the problems, and every figure.
:func:`exit_code`, :func:`render_table` and :func:`rows_json` make the command's output.

A host that runs the SGLang Model Gateway (``sglang_gateway``) is not an SGLang host: its row
(``kind`` ``gateway``, :func:`gateway_row`) comes from the gateway's own worker list
(``GET /workers``, read by the controller, :class:`GatewayRead`) against the workers the
inventory gives it (:func:`fleet_gateways`); a serving host's row gains its membership in each
of its gateways (:func:`add_gateways`).

States, most severe first (a row shows the first that holds; ``problems`` lists them all):

- ``unreachable``: SSH could not connect, or the read failed; a gateway did not answer its worker
  list (exit 2);
- ``error``: the host cannot be planned (its inventory data) or is not a systemd host (exit 2);
- ``never-deployed``: no revision was ever made live here;
- ``half-deployed``: a revision is live but not marked deployed (a deploy is running, died, or
  its gate could not measure: the deploy has no lock, so these look alike), a revision's files
  are being staged, or a swap left a temporary file;
- ``drifted``: a live file (unit, env file, nccl.conf) differs from the deployed revision's copy, or
  the running server's argv differs from the deployed revision's ExecStart=;
- ``down``: the unit is not active;
- ``degraded``: a GPU is unhealthy (uncorrected ECC errors, a retirement or row remap pending, a
  row remap failed, XID events since boot, hardware/thermal/power-brake slowdown, memory held by
  processes other than the server), the continuous check's last run of this revision failed, or
  one of its gateways does not list it healthy (and no deploy is draining it now); a gateway: a
  worker the inventory gives it is not listed, or listed unhealthy;
- ``gate-failed``: the host's last gate did not pass;
- ``version``: the SGLang installed in the running revision's venv is not the one it was deployed with;
- ``pending``: nothing is wrong, but the inventory now plans another revision (a deploy would change it);
- ``ok``.

Exit codes: 0 every host ``ok``; 1 any host in another state; 2 any host ``unreachable`` or
``error`` (and bad input, decided by the command before anything is read).
"""

from __future__ import annotations

import base64
import binascii
import difflib
import json
import math
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Collection, Iterable, Mapping, Sequence

from sglang_deploy.errors import PlanError
from sglang_deploy.gate.verdict import summarize_baseline
from sglang_deploy.hostrules import gpu as gpu_rules
from sglang_deploy.plan.gateway import (GatewaySettings, WorkerMembership, gateway_settings, gateway_url,
                                        gateway_workers, inventory_membership, tp_leaders, worker_membership)
from sglang_deploy.secrecy import CREDENTIAL_NAME
from sglang_deploy.unitsyntax import ExecStartError, parse_exec_start
from sglang_deploy.untrusted import MASK, Scrubber, UntrustedInput, load_json, printable, redact_url, shown

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
GPU_HEALTH_BYTES = 1024 * 1024

# A revision is 16 hex digits (sglang_deploy/lifecycle/revision.py revision_id); a version is PEP 440-ish.
_REVISION = re.compile(r"[0-9a-f]{16}")
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+!-]{0,63}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_VERDICTS = ("pass", "fail", "error")
# ``NAME=value`` (an env file's line, ``Environment=NAME=value`` in a unit) whose name says it holds a
# credential (sglang_deploy/secrecy.py CREDENTIAL_NAME): the value is masked, quotes and spaces in it too.
_ASSIGNMENT = re.compile(r"(?<![A-Za-z0-9_])(?P<name>[A-Za-z0-9_]*(?:" + CREDENTIAL_NAME.pattern + r")[A-Za-z0-9_]*)"
                         r"=(?P<value>\"(?:[^\"\\]|\\.)*\"?|'[^']*'?|\S*)", re.IGNORECASE)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")


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

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "time": self.time, "revision": self.revision,
                "decode_tok_s": self.decode_tok_s, "target_tok_s": self.target_tok_s,
                "baseline_tok_s": self.baseline_tok_s, "summary": self.summary}


def _rate(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        rate = float(value)
    except OverflowError:  # an int of hundreds of digits
        return None
    return rate if math.isfinite(rate) and rate >= 0 else None


def _text(value: Any, limit: int) -> str | None:
    if not isinstance(value, str):
        return None
    text = printable(value).strip()
    return text if len(text) <= limit else text[:limit - 3] + "..."


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
        })
    return entries, refused


def last_gate(lines: Sequence[str]) -> tuple[LastGate | None, int]:
    """The host's last gate, with the baseline it was judged against (the best passing decode
    rate of its key among the gates before it: ``gate.verdict.summarize_baseline``); and how many
    history lines were refused."""
    entries, refused = gate_entries(lines)
    if not entries:
        return None, refused
    last = entries[-1]
    baseline = None
    if last["key"] is not None:
        baseline = summarize_baseline([e for e in entries[:-1] if e["key"] is not None], last["key"]).best_tok_s
    return LastGate(verdict=last["verdict"], time=last["time"], revision=last["revision"],
                    decode_tok_s=last["decode_tok_s"], target_tok_s=last["target_tok_s"],
                    baseline_tok_s=baseline, summary=last["summary"]), refused


# ---- the GPUs' health (sglang_deploy/deploy/host/gpu_health.py) ---------------------------------

# What is wrong with them is judged in sglang_deploy/hostrules/gpu.py (with the continuous check and the alerts).
_REASON = re.compile(r"[a-z0-9_]{1,40}")
_MAX_GPUS = 64


@dataclass(frozen=True)
class Gpu:
    """One GPU's health, checked for shape; None where NVML (or the kernel log) could not tell."""

    index: int
    name: str
    uuid: str
    bus_id: str
    ecc: tuple[int, int] | None = None  # (uncorrected, corrected), volatile
    retired_pages: tuple[int, int, bool] | None = None  # (single bit, double bit, pending)
    remapped_rows: tuple[int, int, bool, bool] | None = None  # (correctable, uncorrectable, pending, failure)
    reasons: tuple[str, ...] = ()
    foreign: tuple[tuple[int, int | None], ...] = ()  # (pid, bytes)
    foreign_bytes: int = 0
    xid: tuple[int, int | None] | None = None  # (count since boot, last XID)

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index, "name": self.name, "uuid": self.uuid, "bus_id": self.bus_id,
            "ecc": None if self.ecc is None else {"uncorrected": self.ecc[0], "corrected": self.ecc[1]},
            "retired_pages": None if self.retired_pages is None else dict(zip(
                ("single_bit", "double_bit", "pending"), self.retired_pages)),
            "remapped_rows": None if self.remapped_rows is None else dict(zip(
                ("correctable", "uncorrectable", "pending", "failure"), self.remapped_rows)),
            "clocks_event_reasons": list(self.reasons),
            "foreign_processes": [{"pid": p, "used_bytes": b} for p, b in self.foreign],
            "foreign_memory_bytes": self.foreign_bytes,
            "xid": None if self.xid is None else {"count": self.xid[0], "last": self.xid[1]}}


@dataclass(frozen=True)
class GpuHealth:
    error: str | None
    gpus: tuple[Gpu, ...] = ()


def _n(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63:
        raise ValueError("not a count")
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("not a boolean")
    return value


def _gpu(doc: Any, position: int) -> Gpu:
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    ecc, pages, rows, xid = doc.get("ecc"), doc.get("retired_pages"), doc.get("remapped_rows"), doc.get("xid")
    reasons = doc.get("clocks_event_reasons")
    foreign = doc.get("foreign_processes")
    if not isinstance(reasons, list) or not isinstance(foreign, list):
        raise ValueError("clocks_event_reasons and foreign_processes must be lists")
    procs = []
    for p in foreign[:256]:
        if not isinstance(p, dict):
            raise ValueError("a foreign process is not an object")
        used = p.get("used_bytes")
        procs.append((_n(p.get("pid")), None if used is None else _n(used)))
    return Gpu(
        index=_n(doc.get("index")), name=_text(doc.get("name"), 100) or "?", uuid=_text(doc.get("uuid"), 100) or "?",
        bus_id=_text(doc.get("bus_id"), 40) or "?",
        ecc=None if ecc is None else (_n(ecc["uncorrected"]), _n(ecc["corrected"])),
        retired_pages=None if pages is None else (_n(pages["single_bit"]), _n(pages["double_bit"]),
                                                  _flag(pages["pending"])),
        remapped_rows=None if rows is None else (_n(rows["correctable"]), _n(rows["uncorrectable"]),
                                                 _flag(rows["pending"]), _flag(rows["failure"])),
        reasons=tuple(r for r in reasons[:32] if isinstance(r, str) and _REASON.fullmatch(r)),
        foreign=tuple(procs), foreign_bytes=_n(doc.get("foreign_memory_bytes")),
        xid=None if xid is None else (_n(xid["count"]), None if xid.get("last") is None else _n(xid["last"])))


def parse_gpu_health(text: str | None) -> GpuHealth:
    """The host script's JSON line (its last line) as :class:`GpuHealth`; a line that does not
    have the contract's shape is an error naming the field, never shown."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return GpuHealth(error="the GPU health check printed nothing")
    try:
        doc = load_json(lines[-1], "the GPU health line", max_bytes=GPU_HEALTH_BYTES, max_depth=8)
    except UntrustedInput as exc:
        return GpuHealth(error=printable(str(exc))[:200])
    if not isinstance(doc, dict) or doc.get("schema") != 1 or not isinstance(doc.get("gpus"), list):
        return GpuHealth(error="the GPU health line is not schema 1")
    if doc.get("error") is not None:
        return GpuHealth(error=_text(doc.get("error"), 200) or "NVML could not be read")
    gpus = []
    for position, item in enumerate(doc["gpus"][:_MAX_GPUS]):
        try:
            gpus.append(_gpu(item, position))
        except (KeyError, TypeError, ValueError) as exc:
            return GpuHealth(error=f"the GPU health line's gpus[{position}] is malformed ({printable(str(exc))[:80]})")
    return GpuHealth(error=None, gpus=tuple(gpus))


def gpu_findings(health: GpuHealth) -> list[gpu_rules.Finding]:
    """What is wrong with the GPUs, problems and warnings, as the one judge of GPU facts rules
    (``sglang_deploy.hostrules.gpu``, which the continuous check and the alert rules share). A
    finding's tag is what the GPU column shows."""
    return gpu_rules.findings({"gpus": [g.as_dict() for g in health.gpus]})


def gpu_summary(health: GpuHealth | None, tags: Sequence[str]) -> str:
    """The GPU column: ``2x RTX A6000 ok``, ``8x H100 80GB HBM3: gpu3 row-remap failure``."""
    if health is None:
        return "-"
    if health.error is not None:
        return "? (not read)"
    names: dict[str, int] = {}
    for g in health.gpus:
        short = g.name[len("NVIDIA "):] if g.name.startswith("NVIDIA ") else g.name
        names[short] = names.get(short, 0) + 1
    what = " + ".join(f"{n}x {name}" for name, n in names.items()) or "no GPU"
    if not tags:
        return f"{what} ok"
    shown_tags = list(tags[:2]) + ([f"+{len(tags) - 2} more"] if len(tags) > 2 else [])
    return f"{what}: {', '.join(shown_tags)}"


# ---- the running argv against the unit ----------------------------------------------------------

_CREDENTIAL_FLAG = re.compile(r"--?[A-Za-z0-9_-]*(?:" + CREDENTIAL_NAME.pattern + r")[A-Za-z0-9_-]*", re.IGNORECASE)


def _masked_words(words: Sequence[str], scrubber: Scrubber | None) -> list[str]:
    """argv words safe to show: a credential flag's value (``--api-key X``, ``--x-token=X``) and every
    secret the controller knows masked, controls removed, each word bounded."""
    out: list[str] = []
    hide_next = False
    for word in words:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        flag, eq, _ = word.partition("=")
        if _CREDENTIAL_FLAG.fullmatch(flag):
            if eq:
                out.append(f"{flag}={MASK}")
            else:
                out.append(word)
                hide_next = True
            continue
        text = scrubber.text(word) if scrubber is not None else word
        out.append(printable(text)[:80])
    return out


def argv_changes(expected: Sequence[str], running: Sequence[str], scrubber: Scrubber | None = None,
                 limit: int = 3) -> list[str]:
    """Where the running argv departs from the unit's, as ``unit 'A' -> running 'B'`` (masked)."""
    a, b = _masked_words(expected, scrubber), _masked_words(running, scrubber)
    changes = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag != "equal":
            changes.append(f"unit {' '.join(a[i1:i2])[:160]!r} -> running {' '.join(b[j1:j2])[:160]!r}")
    return changes[:limit] + ([f"{len(changes) - limit} more change(s)"] if len(changes) > limit else [])


# ---- the continuous check's last line -----------------------------------------------------------

_WATCH_VERDICTS = ("pass", "fail", "error", "skipped")
_WATCH_DRIFT = ("unit", "env", "nccl_conf", "argv", "sglang_version", "weights")
_GPU_KEY = re.compile(r"(?:gpu[0-9]{1,4} )?[a-z_]{1,40}")


@dataclass(frozen=True)
class LastWatch:
    verdict: str  # pass | fail | error | skipped | unknown
    time: str | None
    age_s: float | None  # now - time, on the controller's clock
    revision: str | None
    why: str | None
    decode_tok_s: float | None
    baseline_tok_s: float | None
    target_tok_s: float | None
    drift: tuple[str, ...]
    gpu_problems: tuple[str, ...]
    # What the failure rests on, beside drift: each GPU problem's key (hostrules.gpu Finding.key), and
    # the measurement's own verdict (pass | fail | error; None: a line of an older check).
    gpu_keys: tuple[str, ...] = ()
    measured: str | None = None
    # Judged against status's own read (judge_watch): the findings it no longer sees, those that stand.
    resolved: tuple[str, ...] = ()
    standing: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "time": self.time, "age_s": self.age_s, "revision": self.revision,
                "why": self.why, "decode_tok_s": self.decode_tok_s, "baseline_tok_s": self.baseline_tok_s,
                "target_tok_s": self.target_tok_s, "drift": list(self.drift), "gpu_problems": list(self.gpu_problems),
                "measured": self.measured, "resolved": list(self.resolved), "standing": list(self.standing)}


def last_watch(lines: Sequence[str], now: datetime | None = None) -> LastWatch | None:
    """The last ``"kind": "watch"`` line of the history (the continuous check's), checked field by
    field (what does not fit is null or dropped); lines that are not JSON are counted by
    :func:`last_gate`."""
    for line in reversed(lines):
        try:
            doc = load_json(line, "history line", max_bytes=HISTORY_LINE_BYTES, max_depth=16)
        except UntrustedInput:
            continue
        if not isinstance(doc, dict) or doc.get("kind") != "watch":
            continue
        verdict = doc.get("verdict")
        when = _text(doc.get("time"), 40)
        age = None
        if when is not None and now is not None:
            try:
                stamp = datetime.fromisoformat(when.replace("Z", "+00:00"))
                if stamp.tzinfo is not None:
                    age = round(max(0.0, (now - stamp).total_seconds()), 1)
            except ValueError:
                when = None
        rev = doc.get("revision")
        drift = doc.get("drift")
        gp = doc.get("gpu_problems")
        keys = doc.get("gpu_keys")
        measured = doc.get("measured")
        return LastWatch(
            gpu_keys=tuple(k for k in keys[:20] if isinstance(k, str) and _GPU_KEY.fullmatch(k))
            if isinstance(keys, list) else (),
            measured=measured if measured in ("pass", "fail", "error") else None,
            verdict=verdict if isinstance(verdict, str) and verdict in _WATCH_VERDICTS else "unknown",
            time=when, age_s=age, revision=rev if isinstance(rev, str) and _REVISION.fullmatch(rev) else None,
            why=_text(doc.get("why"), 200), decode_tok_s=_rate(doc.get("decode_tok_s")),
            baseline_tok_s=_rate(doc.get("baseline_tok_s")), target_tok_s=_rate(doc.get("target_tok_s")),
            drift=tuple(d for d in drift if d in _WATCH_DRIFT) if isinstance(drift, list) else (),
            gpu_problems=tuple(t for t in (_text(x, 200) for x in gp[:20]) if t) if isinstance(gp, list) else ())
    return None


def judge_watch(watch: LastWatch, drift: Mapping[str, str], seen: Observed,
                gpu_found: Sequence[gpu_rules.Finding] | None) -> LastWatch:
    """The continuous check's failure held against status's own read of the host now: each of its
    findings is ``resolved`` (status reads the same fact and no longer finds it: a file as deployed
    again, the deployed SGLang installed, a GPU problem gone) or ``standing`` (status finds it too,
    or cannot check it: a slow measurement, a GPU health it could not read, the weights unless
    verified, a line of an older check that does not say what it rests on). ``drift``: status's
    own drift verdicts; ``gpu_found``: its GPU findings (None: not read)."""
    resolved: list[str] = []
    standing: list[str] = []
    for key in watch.drift:
        if key == "sglang_version":
            gone = bool(seen.staged_version) and seen.installed_version == seen.staged_version
        else:
            gone = drift.get(key) == "same"
        (resolved if gone else standing).append(f"drift: {key}")
    now = {f.key for f in gpu_found or ()}
    for key in watch.gpu_keys:
        (resolved if gpu_found is not None and key not in now else standing).append(key)
    if watch.gpu_problems and not watch.gpu_keys:
        standing.append("GPU problems")
    if watch.measured != "pass":  # slow, or a line that does not say: status cannot measure
        standing.append("measurement")
    return replace(watch, resolved=tuple(resolved), standing=tuple(standing))


# ---- secrets out of a diff ----------------------------------------------------------------------

def _credentials(text: str) -> dict[str, list[str]]:
    """Every ``NAME=value`` of ``text`` whose name says it is a credential: name -> its values."""
    found: dict[str, list[str]] = {}
    for m in _ASSIGNMENT.finditer(text):
        found.setdefault(m.group("name"), []).append(m.group("value"))
    return found


def redact(text: str, scrubber: Scrubber | None = None, changed: Iterable[str] = ()) -> str:
    """A host's file made safe to show: every secret the controller knows (``scrubber``) masked,
    the value of every ``NAME=value`` whose name says it is a credential
    (``sglang_deploy/secrecy.py`` ``CREDENTIAL_NAME``) masked, credentials in URLs masked, and
    terminal controls removed. Applied line by line to both sides of a diff; a credential named in
    ``changed`` reads ``NAME=*** (changed)``, so a diff shows that a secret changed, never what to."""
    changed = set(changed)
    if scrubber is not None:
        text = scrubber.text(text)

    def assignment(m: re.Match[str]) -> str:
        name = m.group("name")
        return f"{name}={MASK} (changed)" if name in changed else f"{name}={MASK}"

    out = []
    for line in text.split("\n"):
        line = _ASSIGNMENT.sub(assignment, line)
        line = _URL.sub(lambda m: redact_url(m.group(0)), line)
        out.append(printable(line))
    return "\n".join(out)


def unified_diff(key: str, path: str, live: str, staged: str, rev: str | None,
                 scrubber: Scrubber | None = None) -> str:
    """The live file against the deployed revision's copy, both redacted first (:func:`redact`)."""
    before, after = _credentials(staged), _credentials(live)
    changed = {name for name in after if name in before and after[name] != before[name]}
    a = redact(staged, scrubber).splitlines(keepends=True)
    b = redact(live, scrubber, changed).splitlines(keepends=True)
    lines = difflib.unified_diff(a, b, fromfile=f"{path} (revision {rev or '?'})", tofile=f"{path} (live)")
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


# ---- one row per host ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Planned:
    """What the inventory plans for a host today."""

    revision: str | None = None
    sglang_version: str | None = None
    paths: Mapping[str, str] = field(default_factory=dict)  # unit/env/nccl_conf -> live path
    error: str | None = None  # the host cannot be planned: its data is wrong (exit 2)
    unknown: str | None = None  # planned, but the revision cannot be known here (a secret not set)


@dataclass
class Row:
    host: str
    state: str
    problems: list[str]
    reachable: bool
    error: str | None
    revision: dict[str, Any]
    server: dict[str, Any]
    sglang: dict[str, Any]
    drift: dict[str, str]  # unit/env/nccl_conf -> same | differs | missing | unknown
    diff: dict[str, str]
    last_gate: LastGate | None
    warnings: list[str]
    gpu_health: GpuHealth | None = None
    gpu_tags: list[str] = field(default_factory=list)  # each GPU problem, short: the GPU column
    last_watch: LastWatch | None = None
    kind: str = KIND_SERVER  # server | gateway
    gateways: dict[str, str] = field(default_factory=dict)  # a worker's gateways: name -> MEMBERSHIPS word
    gateway: dict[str, Any] | None = None  # a gateway host's own view (gateway_row)
    # The server's unit when the host runs several (its data-parallel replicas behind a gateway,
    # sglang_deploy.plan.replicas: one row each); None: the host's one server.
    service: str | None = None

    @property
    def label(self) -> str:
        """The row's name in the table: the host, and the unit when the host has several."""
        return self.host if self.service is None else f"{self.host}:{self.service}"

    def gpus(self) -> dict[str, Any] | None:
        h = self.gpu_health
        if h is None:
            return None
        return {"summary": gpu_summary(h, self.gpu_tags), "count": len(h.gpus), "error": h.error,
                "problems": list(self.gpu_tags), "devices": [g.as_dict() for g in h.gpus]}

    def as_dict(self, with_diff: bool = False) -> dict[str, Any]:
        doc = {"schema": SCHEMA, "host": self.host, "kind": self.kind, "state": self.state,
               "problems": list(self.problems), "reachable": self.reachable, "error": self.error,
               "revision": dict(self.revision), "server": dict(self.server), "sglang": dict(self.sglang),
               "drift": dict(self.drift),
               "last_gate": self.last_gate.as_dict() if self.last_gate else None, "warnings": list(self.warnings),
               "gpus": self.gpus(), "last_watch": self.last_watch.as_dict() if self.last_watch else None,
               "gateways": dict(self.gateways), "gateway": _copy(self.gateway), "service": self.service}
        if with_diff:
            doc["diff"] = dict(self.diff)
        return doc


_EMPTY_REVISION = {"running": None, "deployed": None, "previous": None, "planned": None, "pending": None}
_EMPTY_SERVER = {"active_state": None, "sub_state": None, "main_pid": None, "uptime_s": None, "restarts": None,
                 "enabled": None}


def unreachable_row(host: str, why: str, planned: Planned | None = None) -> Row:
    """A host SSH could not reach (or whose read failed): nothing is known of it."""
    rev = dict(_EMPTY_REVISION, planned=planned.revision if planned else None)
    return Row(host=host, state=UNREACHABLE, problems=[f"unreachable: {printable(why)}"], reachable=False,
               error=printable(why), revision=rev, server=dict(_EMPTY_SERVER),
               sglang={"installed": None, "deployed": None, "planned": planned.sglang_version if planned else None},
               drift={k: "unknown" for k in (*FILE_KEYS, "argv")}, diff={}, last_gate=None, warnings=[])


def error_row(host: str, why: str, planned: Planned | None = None) -> Row:
    """A host that cannot be planned from the inventory (nothing of it was read): exit 2."""
    row = unreachable_row(host, why, planned)
    row.state, row.reachable, row.problems = ERROR, True, [f"cannot plan: {printable(why)}"]
    return row


def _copy(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if doc is None else json.loads(json.dumps(doc))


def _epoch(seconds: int | None) -> str:
    if seconds is None or not 0 <= seconds < 1 << 37:
        return "an unknown time"
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def lock_held(seen: Observed) -> bool:
    """A deploy holds the host's lock now (before the lock's ``expires=``): it is changing this host."""
    return seen.lock and seen.lock_expires is not None and seen.now_s is not None and seen.now_s < seen.lock_expires


def _lock_text(seen: Observed) -> str:
    """What the deploy's lock on the host says: a deploy changing it now, or one that died holding it."""
    since = f"since {_epoch(seen.lock_started)}"
    if lock_held(seen):
        return (f"a deploy holds the host's lock ({since}, until {_epoch(seen.lock_expires)} at most): it is "
                "changing this host now; read it again once that deploy ends")
    return (f"a deploy's lock is left on the host ({since}, past its deadline {_epoch(seen.lock_expires)}): "
            "that deploy died before it finished; deploy again")


def _uptime(unit: UnitShow, now_us: int | None) -> float | None:
    start = unit.active_enter_us or unit.exec_main_start_us
    if unit.active_state != "active" or not start or now_us is None or now_us < start:
        return None
    return round((now_us - start) / 1e6, 1)


def build_row(host: str, seen: Observed, planned: Planned, scrubber: Scrubber | None = None,
              with_diff: bool = False, weights: WeightsCheck | None = None, now: datetime | None = None) -> Row:
    """One host's row: its state, problems and figures (module docstring)."""
    problems: list[tuple[str, str]] = []  # (state, text)
    warnings = list(seen.warnings)
    error = None
    if planned.error:
        problems.append((ERROR, f"cannot plan: {printable(planned.error)}"))
        error = printable(planned.error)
    if not seen.systemd:
        problems.append((ERROR, "this host does not run systemd"))
        error = error or "this host does not run systemd"
    # revisions
    pending = None
    if planned.revision is not None and seen.deployed is not None:
        pending = planned.revision != seen.deployed
    if seen.current is None and seen.deployed is None:
        problems.append((NEVER, "never deployed: no revision was made live here"))
    else:
        if seen.current != seen.deployed:
            problems.append((HALF, f"revision {seen.current or 'none'} is live but {seen.deployed or 'none'} is "
                                   "marked deployed (a deploy is running, died, or its gate could not measure)"))
    if seen.lock:
        problems.append((HALF, _lock_text(seen)))
    if seen.staging:
        problems.append((HALF, f"revision {', '.join(seen.staging)} is being staged (or its staging died)"))
    if seen.leftover_tmp:
        problems.append((HALF, f"a swap's temporary file is left beside {', '.join(seen.leftover_tmp)}"))
    # drift: the live files against the deployed (else running) revision's staged copies
    drift: dict[str, str] = {}
    diff: dict[str, str] = {}
    for key in FILE_KEYS:
        live, staged = seen.live_sha256.get(key), seen.staged_sha256.get(key)
        if seen.reference is None:
            drift[key] = "unknown"
        elif live is None:
            drift[key] = "missing"
        elif staged is None:
            drift[key] = "unknown"
            warnings.append(f"{key}: revision {seen.reference} has no staged copy to compare with")
        else:
            drift[key] = "same" if live == staged else "differs"
        if drift[key] in ("differs", "missing"):
            path = planned.paths.get(key, key)
            what = "is missing" if live is None else f"differs from revision {seen.reference}'s copy"
            problems.append((DRIFTED, f"{key} drifted: {path} {what}"))
            if with_diff and key in seen.diffs:
                live_text, staged_text = seen.diffs[key]
                diff[key] = unified_diff(key, path, live_text, staged_text, seen.reference, scrubber)
    # the running server's argv against the deployed revision's ExecStart= and the live unit's
    drift["argv"] = _argv_drift(seen, problems, warnings, scrubber)
    # the served snapshot's files, re-hashed (--verify-weights)
    if weights is not None:
        if weights.served is None and weights.error is None:
            warnings.append("weights: the running revision serves no snapshot from a model store; nothing to verify")
        elif weights.bad:
            drift["weights"] = "differs"
            for name, why in weights.bad[:WEIGHTS_BAD_SHOWN]:
                problems.append((DRIFTED, f"weights drifted: {weights.served}/{name}: {why}"))
            if len(weights.bad) > WEIGHTS_BAD_SHOWN:
                problems.append((DRIFTED, f"weights drifted: {len(weights.bad) - WEIGHTS_BAD_SHOWN} more file(s)"))
        elif weights.finished and weights.error is None:
            drift["weights"] = "same"
        else:
            drift["weights"] = "unknown"
            warnings.append(f"weights: not verified whole: {weights.error or 'no answer'}")
    # the server
    unit = seen.unit
    server = {"active_state": unit.active_state, "sub_state": unit.sub_state,
              "main_pid": unit.main_pid or None, "uptime_s": _uptime(unit, seen.now_us),
              "restarts": unit.n_restarts, "enabled": seen.enabled}
    if seen.systemd and (seen.current or seen.deployed) and unit.active_state != "active":
        state_text = unit.active_state or "unknown"
        if unit.load_state == "not-found":
            state_text = "not loaded (no unit)"
        problems.append((DOWN, f"the service is not active: {state_text}"
                               + (f" ({unit.sub_state})" if unit.sub_state and unit.load_state != "not-found" else "")))
    # the version
    sglang = {"installed": seen.installed_version, "deployed": seen.staged_version,
              "planned": planned.sglang_version}
    if seen.staged_version and seen.installed_version != seen.staged_version:
        problems.append((VERSION, f"SGLang {seen.installed_version or 'is not installed'}"
                                  f"{' is installed' if seen.installed_version else ''} in the venv of the running "
                                  f"revision, which was deployed with {seen.staged_version}"))
    # the GPUs
    gpu_tags: list[str] = []
    gpu_found: list[gpu_rules.Finding] | None = None  # None: not read
    if seen.gpu_health is not None:
        if seen.gpu_health.error is not None:
            warnings.append(f"GPU health not read: {seen.gpu_health.error}")
        else:
            gpu_found = gpu_findings(seen.gpu_health)
            found = gpu_rules.problems(gpu_found)
            problems.extend((DEGRADED, f.text) for f in found)
            gpu_tags = [f.tag for f in found]
            warnings.extend(f.text for f in gpu_found if f.severity != gpu_rules.PROBLEM)
    # the continuous check's last run
    watch = last_watch(seen.history, now)
    if watch is not None and watch.verdict in ("fail", "error"):
        when = f"{_duration(watch.age_s)} ago" if watch.age_s is not None else (watch.time or "time unknown")
        text = f"the continuous check {'failed' if watch.verdict == 'fail' else 'could not measure'} ({when})" + \
            (f": {watch.why}" if watch.why else "")
        if watch.verdict == "fail" and watch.revision is not None and watch.revision == seen.deployed:
            # Held against this read: what it shows fixed no longer sets the state (or the exit code).
            watch = judge_watch(watch, drift, seen, gpu_found)
            if watch.standing:
                problems.append((DEGRADED, text + (f" (resolved since, by this read: {', '.join(watch.resolved)})"
                                                   if watch.resolved else "")))
            else:
                warnings.append(f"{text}; resolved: this read no longer finds {', '.join(watch.resolved)}")
        else:
            warnings.append(text + ("" if watch.verdict == "error" else " (another revision)"))
    # the last gate
    gate, refused = last_gate(seen.history)
    if refused:
        warnings.append(f"history: {refused} line(s) are not JSON objects; skipped")
    if seen.history_truncated:
        warnings.append(f"history: only its last {HISTORY_SCAN_BYTES >> 20} MiB read")
    if gate is not None and gate.verdict != "pass":
        problems.append((GATE_FAILED, f"the last gate ({gate.time or 'time unknown'}) did not pass: "
                                      f"{gate.verdict}{': ' + gate.summary if gate.summary else ''}"))
    if pending:
        problems.append((PENDING, f"the inventory plans revision {planned.revision}; {seen.deployed} is deployed"))
    if planned.unknown:
        warnings.append(f"planned revision unknown: {printable(planned.unknown)}")
    order = {s: i for i, s in enumerate(STATES)}
    state = min((s for s, _ in problems), key=order.__getitem__, default=OK)
    revision = {"running": seen.current, "deployed": seen.deployed, "previous": seen.previous,
                "planned": planned.revision, "pending": pending}
    return Row(host=host, state=state, problems=[text for _, text in problems], reachable=True, error=error,
               revision=revision, server=server, sglang=sglang, drift=drift, diff=diff, last_gate=gate,
               warnings=warnings, gpu_health=seen.gpu_health, gpu_tags=gpu_tags, last_watch=watch)


def _argv_drift(seen: Observed, problems: list[tuple[str, str]], warnings: list[str],
                scrubber: Scrubber | None) -> str:
    """``same`` | ``differs`` | ``unknown``: the running MainPID's argv (/proc/PID/cmdline) against
    the ExecStart= of the deployed revision's staged unit (started by hand, or from a unit changed
    since) and of the live unit (changed and reloaded, not restarted: a restart would change it)."""
    if seen.unit.active_state != "active" or not seen.unit.main_pid or seen.staged_unit is None:
        return "unknown"
    if seen.cmdline is None:
        warnings.append("argv: the running server's command line could not be read")
        return "unknown"
    running = list(seen.cmdline)
    verdict = "same"
    for what, text in ((f"revision {seen.reference}'s ExecStart=", seen.staged_unit),
                       ("the live unit's ExecStart= (changed, reloaded and not restarted?)", seen.live_unit)):
        if text is None:
            continue
        try:
            expected = parse_exec_start(text)
        except ExecStartError as exc:
            warnings.append(f"argv: {what} not compared: {printable(str(exc))}")
            verdict = "unknown" if verdict == "same" else verdict
            continue
        if expected != running:
            changes = "; ".join(argv_changes(expected, running, scrubber))
            problems.append((DRIFTED, f"argv drifted: pid {seen.unit.main_pid} runs another command line than "
                                      f"{what}: {changes}"))
            verdict = "differs"
    return verdict


# ---- the SGLang Model Gateway -------------------------------------------------------------------

@dataclass(frozen=True)
class FleetGateways:
    """The inventory's gateways and their workers, as a deploy plans them (sglang_deploy/plan/gateway.py)."""

    gateway_hosts: tuple[str, ...]  # every host with ``sglang_gateway`` set (not an SGLang host), inventory order
    gateways: Mapping[str, GatewaySettings]  # those whose settings are good
    urls: Mapping[str, str]  # gateway -> where the controller reads it: http://<address>:<port>
    memberships: Mapping[str, WorkerMembership]  # worker host -> its gateways and URL
    expected: Mapping[str, tuple[tuple[str, str], ...]]  # gateway -> ((worker host, URL), ...), inventory order
    errors: Mapping[str, str]  # host -> why its gateway data cannot be planned (an error row)
    # worker host -> its data-parallel replicas past the first, each a worker of its own (with_replicas)
    replicas: Mapping[str, tuple[WorkerMembership, ...]] = field(default_factory=dict)


def fleet_gateways(hosts: Sequence[tuple[str, Mapping[str, Any]]]) -> FleetGateways:
    """Every gateway host of the inventory (``(name, merged data)`` pairs, inventory order) and the
    workers that name it, each host's mistakes kept as its own error (the deploy refuses that host
    with the same message) instead of failing the whole read."""
    gateway_hosts = tuple(n for n, d in hosts if d.get("sglang_gateway") not in (None, False))
    gateways: dict[str, GatewaySettings] = {}
    urls: dict[str, str] = {}
    errors: dict[str, str] = {}
    for name, data in hosts:
        if name not in gateway_hosts:
            continue
        try:
            settings = gateway_settings(name, data)
            assert settings is not None
            urls[name] = gateway_url(name, data, settings)
        except PlanError as exc:
            errors[name] = str(exc)
            continue
        gateways[name] = settings
    known = dict.fromkeys(gateway_hosts)  # a worker may name a gateway whose own data is wrong
    memberships: dict[str, WorkerMembership] = {}
    units, rank0 = tp_leaders(hosts)
    for name, data in hosts:
        if name in known:
            continue
        try:
            m = inventory_membership(name, data, units, rank0, known)
        except PlanError as exc:
            errors[name] = str(exc)
            continue
        if m is not None:
            memberships[name] = m
    while memberships:  # two workers of one gateway with one URL: the later one is refused, as in the deploy
        try:
            gateway_workers(list(memberships.values()), units)
            break
        except PlanError as exc:
            if exc.host not in memberships:
                raise
            errors[exc.host] = str(exc)
            del memberships[exc.host]
    expected: dict[str, list[tuple[str, str]]] = {g: [] for g in gateway_hosts}
    for m in memberships.values():
        if m.host in units and rank0[units[m.host]][0] != m.host:
            continue  # a tp group is one worker: listed once, as its rank 0
        for g in m.gateways:
            expected[g].append((m.host, m.url))
    return FleetGateways(gateway_hosts=gateway_hosts, gateways=gateways, urls=urls, memberships=memberships,
                         expected={g: tuple(ws) for g, ws in expected.items()}, errors=errors)


def with_replicas(fleet: FleetGateways, ports: Mapping[str, Sequence[int]],
                  data: Mapping[str, Mapping[str, Any]]) -> FleetGateways:
    """``fleet`` with each host's data-parallel replicas past the first as workers of its gateways
    (``ports``: host -> every replica's port, from its plan, ``plan.replicas``): behind a gateway
    each replica is a worker of its own, at the host's address on its own port; the inventory
    alone names only the first."""
    expected = {g: list(ws) for g, ws in fleet.expected.items()}
    more: dict[str, tuple[WorkerMembership, ...]] = {}
    for host, replica_ports in ports.items():
        m = fleet.memberships.get(host)
        if m is None or data[host].get("sglang_worker_url") is not None:  # refused by the deploy (plan.replicas)
            continue
        known = dict.fromkeys(fleet.gateway_hosts)
        found = [worker_membership(host, data[host], port, gateway_hosts=known) for port in list(replica_ports)[1:]]
        more[host] = tuple(r for r in found if r is not None)
        for replica in more[host]:
            for g in m.gateways:
                if g in expected:
                    expected[g].append((host, replica.url))
    return replace(fleet, expected={g: tuple(ws) for g, ws in expected.items()}, replicas=more)


def _norm_url(url: str) -> str:
    """A worker URL as compared here: no surrounding space, no trailing slash (sglang-router 0.3.2
    keeps ``http://h:1`` and ``http://h:1/`` as two workers; the deploy registers the first form)."""
    return url.strip().rstrip("/")


@dataclass(frozen=True)
class ListedWorker:
    """One entry of a gateway's ``GET /workers``: its URL and ``is_healthy``."""

    url: str
    healthy: bool | None


@dataclass(frozen=True)
class GatewayRead:
    """One gateway's worker list as the controller read it, or why it could not."""

    url: str  # where it was read (no credentials)
    listed: tuple[ListedWorker, ...] | None = None  # None: not read
    error: str | None = None  # why not (names the URL, never the key)


@dataclass(frozen=True)
class GatewayHostSeen:
    """A gateway host as its SSH read found it (``deploy.gateway.GatewayState``); None: not known."""

    error: str | None = None  # why the host could not be read over SSH
    installed: str | None = None  # the sglang-router release in the planned venv
    current: str | None = None  # the revision whose files are live
    deployed: str | None = None  # the revision that last passed the gateway's gate
    active: str | None = None  # the unit's ActiveState

    def as_dict(self) -> dict[str, Any]:
        return {"error": self.error, "active": self.active, "current": self.current, "deployed": self.deployed}


#: What a gateway host's read may hold: a router release (digits first), a unit state word.
_ROUTER_VERSION = re.compile(r"[0-9][0-9A-Za-z.+!-]{0,63}")
_ACTIVE = re.compile(r"[a-z-]{1,32}")


def gateway_host_seen(fact: Mapping[str, Any] | None) -> GatewayHostSeen:
    """A gateway host's read (``deploy.gateway.GatewayState``: its router release, ``current`` and
    ``deployed`` revisions, unit state), each value kept only in the shape expected (else None)."""
    if not isinstance(fact, Mapping) or fact.get("systemd") != "yes":
        return GatewayHostSeen(error="no systemd answered (the read printed nothing)")

    def checked(key: str, shape: re.Pattern[str]) -> str | None:
        value = fact.get(key)
        return value if isinstance(value, str) and shape.fullmatch(value) else None

    return GatewayHostSeen(installed=checked("version", _ROUTER_VERSION), current=checked("current", _REVISION),
                           deployed=checked("deployed", _REVISION), active=checked("active", _ACTIVE))


def _gateway_host_findings(service: str, planned: str, seen: GatewayHostSeen) -> tuple[list[str], list[str]]:
    """(problems, warnings) of the gateway host's own read: its unit, its router release, its revision."""
    if seen.error is not None:
        return [], [f"not read over SSH: {printable(seen.error)}"]
    problems, warnings = [], []
    if seen.active != "active":
        problems.append(f"unit {service}.service is {seen.active or 'not known to systemd'}: the gateway does not run")
    if seen.installed != planned:
        warnings.append(f"sglang-router {seen.installed or 'not installed'} in its venv, {planned} planned: "
                        "the next deploy installs it")
    if seen.current and seen.current != seen.deployed:
        warnings.append(f"revision {seen.current} is live but did not pass the gateway's gate (deployed: "
                        f"{seen.deployed or 'none'})")
    return problems, warnings


def membership(read: GatewayRead | None, url: str) -> str:
    """``listed`` (healthy), ``unhealthy``, ``missing`` or ``unknown`` (not read): the worker at ``url``
    in that gateway. An entry without ``is_healthy`` is not counted healthy."""
    if read is None or read.listed is None:
        return UNKNOWN
    want = _norm_url(url)
    entries = [w for w in read.listed if _norm_url(w.url) == want]
    if not entries:
        return MISSING
    return LISTED if any(w.healthy is True for w in entries) else UNHEALTHY


def _url_text(url: str) -> str:
    """A URL from a gateway's answer, safe to print: credentials masked, terminal controls removed, bounded."""
    return printable(redact_url(url))[:200]


def gateway_row(host: str, settings: GatewaySettings, read: GatewayRead, expected: Sequence[tuple[str, str]],
                draining: Collection[str] = (), seen: GatewayHostSeen | None = None) -> Row:
    """A gateway host's row: ``ok`` when it answered and lists every worker the inventory gives it
    (``expected``: (host, URL) pairs) healthy; one problem per worker not listed or listed
    unhealthy (``degraded``); ``unreachable`` when it could not be read. A worker in ``draining``
    (its deploy's lock is held now: it leaves its gateways before its restart) is expected out:
    a warning, not a problem. ``seen``: the host's own SSH read (its unit not active is a problem;
    another router release installed, or a live revision that did not pass its gate, a warning)."""
    workers = [{"host": h, "url": u, "membership": membership(read, u), "draining": h in draining}
               for h, u in expected]
    doc: dict[str, Any] = {"url": read.url, "router": {"planned": settings.version,
                                                       "installed": seen.installed if seen else None},
                           "unit": seen.as_dict() if seen else None, "expected": len(expected),
                           "listed": None, "healthy": None, "workers": workers, "others": [], "others_total": 0}
    row = unreachable_row(host, read.error or "not read")
    row.kind, row.gateway = KIND_GATEWAY, doc
    problems, warnings = _gateway_host_findings(settings.service_name, settings.version, seen) if seen else ([], [])
    if read.listed is None:
        row.problems += problems
        row.warnings += warnings
        return row
    row.reachable, row.error, row.problems = True, None, []
    mine = {_norm_url(u) for _, u in expected}
    others = sorted({_norm_url(w.url) for w in read.listed} - mine)
    doc["listed"], doc["others"] = len(read.listed), [_url_text(u) for u in others[:OTHERS_SHOWN]]
    doc["others_total"] = len(others)
    doc["healthy"] = sum(1 for w in workers if w["membership"] == LISTED)
    for w in workers:
        where = f"worker {w['host']} ({w['url']})"
        if w["membership"] == LISTED:
            continue
        if w["draining"]:
            row.warnings.append(f"{where} is {'not listed' if w['membership'] == MISSING else 'listed unhealthy'} "
                                "while a deploy drains and restarts it (its lock is held): expected")
        elif w["membership"] == MISSING:
            row.problems.append(f"{where} is not listed: clients routed through {host} never reach it")
        else:
            row.problems.append(f"{where} is listed unhealthy: {host} routes it no requests until its health "
                                "checks pass again")
    if others:
        more = f" and {len(others) - OTHERS_SHOWN} more" if len(others) > OTHERS_SHOWN else ""
        row.warnings.append(f"{len(others)} worker(s) listed that no host of the inventory gives this gateway: "
                            f"{', '.join(doc['others'])}{more}")
    if not expected:
        row.warnings.append("no host of the inventory names this gateway in sglang_gateways")
    row.problems += problems
    row.warnings += warnings
    row.state = DEGRADED if row.problems else OK
    return row


def gateway_error_row(host: str, why: str) -> Row:
    """A gateway host whose ``sglang_gateway`` (or address) cannot be planned: exit 2."""
    row = error_row(host, why)
    row.kind = KIND_GATEWAY
    return row


def add_gateways(row: Row, worker: WorkerMembership | None, reads: Mapping[str, GatewayRead],
                 seen: Observed | None = None, unread: Mapping[str, str] | None = None) -> Row:
    """A serving host's row with its membership in each of its gateways (``gateways``). When the
    host was read (``seen``), each gateway that does not list it healthy is a problem (``degraded``:
    clients sent through that gateway never reach it), unless a deploy holds its lock now: a deploy
    takes a worker out of its gateways before it stops it and puts it back after its gate, so then
    it is a warning. A gateway that could not be read leaves the membership ``unknown`` (a warning;
    ``unread``: gateway -> why it was not read at all)."""
    if worker is None:
        return row
    unread = unread or {}
    row.gateways = {g: membership(reads.get(g), worker.url) for g in worker.gateways}
    if seen is None or not row.reachable:
        return row
    draining = lock_held(seen)
    for g, word in row.gateways.items():
        if word == UNKNOWN:
            read = reads.get(g)
            why = read.error if read is not None and read.error else unread.get(g, "not read")
            row.warnings.append(f"membership in gateway {g} unknown: {printable(why)}")
        elif word != LISTED and draining:
            row.warnings.append(f"{'not in' if word == MISSING else 'unhealthy in'} gateway {g} while the deploy "
                                "holding this host's lock drains and restarts it: expected")
        elif word == MISSING:
            row.problems.append(f"not in gateway {g}: clients routed through it never reach this host")
            row.state = _worse(row.state, DEGRADED)
        elif word == UNHEALTHY:
            row.problems.append(f"unhealthy in gateway {g}: it routes no requests to this host until its health "
                                "checks pass again")
            row.state = _worse(row.state, DEGRADED)
    return row


def _worse(a: str, b: str) -> str:
    order = {s: i for i, s in enumerate(STATES)}
    return a if order[a] <= order[b] else b


def exit_code(rows: Sequence[Row]) -> int:
    """0 every host ok; 2 a host unreachable or in error; 1 any other state."""
    if any(r.state in (UNREACHABLE, ERROR) for r in rows):
        return 2
    return 0 if all(r.state == OK for r in rows) else 1


# ---- output -------------------------------------------------------------------------------------

_COLOURS = {OK: "32", PENDING: "33", UNREACHABLE: "31", ERROR: "31"}


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _rate_text(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _gateway_cells(row: Row) -> list[str]:
    doc = row.gateway or {}
    router = doc.get("router") or {}
    planned, installed = router.get("planned"), router.get("installed")
    version = f"router {installed or planned}" if (installed or planned) else "-"
    if installed and planned and installed != planned:
        version += f" (plan {planned})"
    unit = doc.get("unit") or {}
    revision = unit.get("current") or "-"
    if not row.reachable or doc.get("healthy") is None:
        return [row.host, row.state, revision, "-", version, "-", "-", "-", "-"]
    server = f"gateway {doc['healthy']}/{doc['expected']} healthy"
    if doc.get("others_total"):
        server += f" (+{doc['others_total']} other)"
    return [row.host, row.state, revision, server, version, "-", "-", "-", "-"]


def _cells(row: Row) -> list[str]:
    rev, srv, sg = row.revision, row.server, row.sglang
    if row.kind == KIND_GATEWAY:
        return _gateway_cells(row)
    if not row.reachable:
        return [row.label, row.state, "-", "-", "-", "-", "-", "-", "-"]
    running, deployed, planned = rev["running"] or "none", rev["deployed"] or "none", rev["planned"] or "?"
    revision = running if running == deployed else f"{running} (deployed {deployed})"
    if rev["pending"]:
        revision += f" -> {planned}"
    server = srv["active_state"] or "?"
    if srv["main_pid"]:
        server += f" pid {srv['main_pid']}"
    if srv["uptime_s"] is not None:
        server += f" up {_duration(srv['uptime_s'])}"
    if srv["restarts"]:
        server += f" restarts {srv['restarts']}"
    version = sg["installed"] or "-"
    if sg["planned"] and sg["planned"] != sg["installed"]:
        version += f" (plan {sg['planned']})"
    drifted = [k for k, v in row.drift.items() if v in ("differs", "missing")]
    drift = ",".join(drifted) if drifted else ("-" if all(v == "unknown" for v in row.drift.values()) else "none")
    gpus = gpu_summary(row.gpu_health, row.gpu_tags)
    watch = "-"
    if row.last_watch is not None:
        w = row.last_watch
        watch = f"{w.verdict} {_rate_text(w.decode_tok_s)}"
        if w.baseline_tok_s is not None:
            watch += f"/{_rate_text(w.baseline_tok_s)}"
        watch += " tok/s"
        if w.age_s is not None:
            watch += f" {_duration(w.age_s)} ago"
    gate = "-"
    if row.last_gate is not None:
        g = row.last_gate
        gate = f"{g.verdict} {_rate_text(g.decode_tok_s)} tok/s"
        if g.target_tok_s is not None:
            gate += f" (target {_rate_text(g.target_tok_s)})"
        if g.baseline_tok_s is not None:
            gate += f" (baseline {_rate_text(g.baseline_tok_s)})"
        if g.time:
            gate += f" {g.time}"
    return [row.label, row.state, revision, server, version, drift, gpus, gate, watch]


HEADER = ["HOST", "STATE", "REVISION", "SERVER", "SGLANG", "DRIFT", "GPUS", "LAST GATE", "LAST WATCH"]


def render_table(rows: Sequence[Row], colour: bool = False, with_diff: bool = False) -> str:
    """The table for people: one line per host, then each host's problems, warnings and diffs."""
    cells = [[printable(c) for c in _cells(r)] for r in rows]
    widths = [max(len(line[i]) for line in [HEADER, *cells]) for i in range(len(HEADER))]
    out = ["  ".join(h.ljust(w) for h, w in zip(HEADER, widths)).rstrip()]
    for row, line in zip(rows, cells):
        text = [c.ljust(w) for c, w in zip(line, widths)]
        if colour:
            code = _COLOURS.get(row.state, "31")
            text[1] = f"\x1b[{code}m{line[1]}\x1b[0m" + " " * (widths[1] - len(line[1]))
        out.append("  ".join(text).rstrip())
    notes = []
    for row in rows:
        for problem in row.problems:
            notes.append(f"{row.label}: {printable(problem)}")
        for warning in row.warnings:
            notes.append(f"{row.label}: warning: {printable(warning)}")
        if with_diff:
            for key, shown_diff in row.diff.items():
                notes.append(f"{row.label}: {key} diff:\n{printable(shown_diff, newlines=True).rstrip()}")
    if notes:
        out += ["", *notes]
    return "\n".join(out) + "\n"


def rows_json(rows: Sequence[Row], with_diff: bool = False) -> str:
    """``--json``: an array of host objects (docs/status.md has the schema)."""
    return json.dumps([r.as_dict(with_diff) for r in rows], indent=2) + "\n"
