"""The tuning records file beside an inventory (``<inventory>.tuning.yaml``): where it is, read and
checked field by field (a record that does not fit is a :class:`TuningError` naming the file, the
record and the field), and written back whole (atomically, every other record kept). The records
themselves, their hardware class and how they read are ``sglang_deploy.plan.tuning_record``'s.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import tempfile
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.intents import INTENTS, check_value
from sglang_deploy.untrusted import UntrustedInput, load_yaml, printable, read_text_file, shown
from sglang_deploy.gate.load import OBJECTIVES
from sglang_deploy.plan.tuning_record import (DEFAULT_CONCURRENCY, FORMAT, HOST_NAME, LAYOUT, MAX_LEVELS, MAX_NAME,
                                              MAX_RECORDS, MAX_TEXT, MAX_TRIALS, TRIAL_STATUSES, TUNABLE,
                                              HardwareClass, TuningError, TuningRecord)


# ---------------------------------------------------------------------------
# The file


def records_path(inventory_path: str | os.PathLike[str]) -> Path:
    """Where the records of an inventory live: ``<dir>/<stem>.tuning.yaml``."""
    p = Path(inventory_path)
    return p.with_name(f"{p.stem}.tuning.yaml")


def load_records(path: str | os.PathLike[str]) -> list[TuningRecord]:
    """The records in ``path``; a missing file has none. TuningError names the field at fault."""
    p = Path(path)
    if not os.path.lexists(p):
        return []
    try:  # a regular file of at most 16 MiB: a FIFO or a device is refused, not read
        text = read_text_file(p, "tuning records")
    except UntrustedInput as exc:
        raise TuningError(p, "", str(exc).removeprefix("tuning records: ")) from None
    return parse_records(text, p)


def parse_records(text: str, path: str | os.PathLike[str] = "<text>") -> list[TuningRecord]:
    try:  # no aliases (no "billion laughs"), nesting and size capped, one line when it is not YAML
        data = load_yaml(text, "")
    except UntrustedInput as exc:
        if exc.line is not None:
            raise TuningError(path, f"line {exc.line}", f"not valid YAML: {exc.problem}") from None
        raise TuningError(path, "", str(exc).lstrip(": ")) from None
    if not isinstance(data, Mapping):
        raise TuningError(path, "", "must be a mapping with 'format: 1' and 'records: [...]'")
    unknown = sorted(map(str, set(data) - {"format", "records"}))
    if unknown:
        raise TuningError(path, unknown[0], "unknown key (known: format, records)")
    if data.get("format") != FORMAT:
        raise TuningError(path, "format", f"must be {FORMAT}, got {data.get('format')!r}")
    raw = data.get("records")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise TuningError(path, "records", "must be a list of records")
    if len(raw) > MAX_RECORDS:
        raise TuningError(path, "records", f"{len(raw)} records, more than the {MAX_RECORDS} accepted")
    out = [_record(path, f"records[{i}]", r) for i, r in enumerate(raw)]
    for i, record in enumerate(out):
        for j in range(i):
            if not out[j].hardware.differences(record.hardware):
                raise TuningError(path, f"records[{i}].hardware", f"the same hardware class as records[{j}]")
    return out


def dump_records(records: Iterable[TuningRecord]) -> str:
    data = {"format": FORMAT, "records": [r.as_dict() for r in records]}
    return ("# Tuning records (sglang-deploy tune): the best launch settings measured per hardware class.\n"
            "# The planner applies a record only to hosts of exactly its class (the 'tuned' layer).\n"
            # Not allow_unicode: PyYAML would write a NEL (U+0085) or a line separator raw, which
            # a reader takes for a line break; escaped, every string reads back as written.
            + yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False, default_flow_style=False,
                        allow_unicode=False, width=100))


class _NoAliasDumper(yaml.SafeDumper):
    """The reader refuses aliases (untrusted.load_yaml): a value shared between two places
    is written twice, never as ``&anchor`` / ``*alias``."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def save_record(path: str | os.PathLike[str], record: TuningRecord) -> None:
    """Write ``record`` into ``path``, replacing the record of the same hardware class and keeping
    the others (in their order; a new class goes last). Atomic: a reader sees the old file or the new."""
    p = Path(path)
    _record(p, "record", record.as_dict())  # refuse to write what could not be read back
    kept = load_records(p)
    replaced = False
    records = []
    for old in kept:
        if not old.hardware.differences(record.hardware):
            records.append(record)
            replaced = True
        else:
            records.append(old)
    if not replaced:
        records.append(record)
    text = dump_records(records)
    mode = p.stat().st_mode & 0o777 if p.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


# ---------------------------------------------------------------------------
# Reading and writing one record


_RECORD_KEYS = ("hardware", "objective", "concurrency", "slo", "intents", "evidence", "decisions", "measured_on",
                "measured_at", "trial_count", "tool_version", "trials")
_DECISION_KEYS = ("value", "prior", "proposed", "moved", "reason", "gain", "spread", "worse")
_REQUIRED = ("hardware", "objective", "intents", "measured_on", "measured_at", "trial_count")




def _clean(path: Any, where: str, value: str, limit: int) -> str:
    """A string of the file: bounded and free of control characters (it may reach a terminal)."""
    if len(value) > limit:
        raise TuningError(path, where, f"a string of {len(value)} characters, more than the {limit} accepted")
    if printable(value, newlines=True) != value or "\t" in value:
        raise TuningError(path, where, "holds control characters (terminal escapes are not accepted)")
    return value


def _optional_text(path: Any, where: str, value: Any, limit: int = MAX_NAME) -> str | None:
    return None if value is None else _text(path, where, value, limit)


def _text(path: Any, where: str, value: Any, limit: int = MAX_NAME) -> str:
    if not isinstance(value, str) or not value:
        raise TuningError(path, where, f"must be a non-empty string, got {shown(value)}")
    if "\n" in value:
        raise TuningError(path, where, "must be one line")
    return _clean(path, where, value, limit)


def _int(path: Any, where: str, value: Any, minimum: int = 0, maximum: int = 10 ** 9) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise TuningError(path, where, f"must be an integer >= {minimum} (at most {maximum}), got {shown(value)}")
    return value


def _finite(path: Any, where: str, value: Any, optional: bool = True) -> Any:
    """A finite number (None when ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TuningError(path, where, f"must be a finite number, got {shown(value)}")
    return value


def _host(path: Any, where: str, value: Any) -> str:
    """``measured_on``: a host name as the inventory names it."""
    name = _text(path, where, value)
    if not HOST_NAME.match(name):
        raise TuningError(path, where, f"must be a host name (letters, digits, . - _ : @ /; at most 253), "
                                       f"got {shown(name)}")
    return name


def _timestamp(path: Any, where: str, value: Any) -> str:
    """``measured_at``: an ISO 8601 time (YAML reads an unquoted one as a datetime)."""
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    text = _text(path, where, value, limit=64)
    try:
        dt.datetime.fromisoformat(text)
    except ValueError:
        raise TuningError(path, where, f"must be an ISO 8601 time such as 2026-11-30T20:00:00+00:00, "
                                       f"got {shown(text)}") from None
    return text


def _tunable(path: Any, where: str, name: str) -> None:
    """A record may set only what the tuner varies: the tuning space's dimensions."""
    if name not in TUNABLE:
        what = "not a tuned setting" if name in INTENTS else f"unknown intent {shown(name)}"
        raise TuningError(path, where, f"{what}; a record may set only {', '.join(TUNABLE)}")


def _mapping(path: Any, where: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TuningError(path, where, f"must be a mapping, got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise TuningError(path, f"{where}.{shown(key)}", "keys must be strings")
        _clean(path, f"{where}.{shown(key)}", key, MAX_NAME)
    return dict(value)


def _known(path: Any, where: str, data: Mapping[str, Any], known: Sequence[str], required: Sequence[str]) -> None:
    """No key outside ``known``, every key of ``required`` present; else the first at fault."""
    unknown = sorted(map(str, set(data) - set(known)))
    if unknown:
        raise TuningError(path, f"{where}.{unknown[0]}", f"unknown key (known: {', '.join(known)})")
    for key in required:
        if key not in data:
            raise TuningError(path, f"{where}.{key}", "missing")


def _data(path: Any, where: str, value: Any) -> Any:
    """Free-form figures: YAML's plain data (mappings with string keys, lists, scalars)."""
    if isinstance(value, Mapping):
        return _data_mapping(path, where, value)
    if isinstance(value, (list, tuple)):
        if len(value) > MAX_TRIALS:
            raise TuningError(path, where, f"a list of {len(value)} items, more than the {MAX_TRIALS} accepted")
        return [_data(path, f"{where}[{i}]", v) for i, v in enumerate(value)]
    if isinstance(value, str):
        return _clean(path, where, value, MAX_TEXT)
    if isinstance(value, float) and not math.isfinite(value):
        raise TuningError(path, where, f"must be a finite number, got {value!r}")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10 ** 18:
        raise TuningError(path, where, f"a number beyond what a measurement gives, {shown(value)}")
    if value is None or isinstance(value, (bool, int, float)):
        return value
    raise TuningError(path, where, f"must be plain data (number, text, list, mapping), got {type(value).__name__}")


def _intent_values(path: Any, where: str, value: Any) -> dict[str, Any]:
    out = {}
    for name, v in _mapping(path, where, value).items():
        _tunable(path, f"{where}.{name}", name)
        try:
            out[name] = check_value("-", f"{where}.{name}", name, v)
        except PlanError as exc:
            raise TuningError(path, exc.field, exc.message) from None
    return out


def check_layout(path: Any, where: str, intents: Mapping[str, Any], gpu_count: int) -> None:
    """A layout in a record (or a trial) is whole: tp_size and dp_size together, as numbers (not
    "all": the record's GPUs are counted), attn_dp_size dividing the TP (SGLang runs attention DP
    inside the TP group: 0.5.23 arg_groups/parallel_hook.py handle_data_parallelism), and TP x DP
    within the ``gpu_count`` GPUs the record was measured on. Whether it fits a host's GPUs and
    model is the plan's check (planner.plan_host refuses or ignores it with a reason)."""
    given = [n for n in LAYOUT if n in intents]
    if not given:
        return
    if "tp_size" not in intents or "dp_size" not in intents:
        missing = [n for n in ("tp_size", "dp_size") if n not in intents]
        raise TuningError(path, f"{where}.{missing[0]}", "a layout sets tp_size and dp_size together")
    tp, dp, attn = intents["tp_size"], intents["dp_size"], intents.get("attn_dp_size", 1)
    if not isinstance(tp, int) or isinstance(tp, bool):
        raise TuningError(path, f"{where}.tp_size", f"must be a number of GPUs, got {shown(tp)}")
    if tp * dp > gpu_count:
        raise TuningError(path, f"{where}.dp_size", f"TP {tp} x DP {dp} = {tp * dp} GPUs; the record's hardware "
                                                    f"has {gpu_count}")
    if attn > 1 and tp % attn:
        raise TuningError(path, f"{where}.attn_dp_size", f"attn_dp_size {attn} does not divide TP {tp}")


def _hardware(path: Any, where: str, raw: Any) -> HardwareClass:
    data = _mapping(path, where, raw)
    names = [f.name for f in fields(HardwareClass)]
    _known(path, where, data, names, names)
    version = data["sglang_version"]
    if isinstance(version, (int, float)) and not isinstance(version, bool):
        raise TuningError(path, f"{where}.sglang_version", f"must be a quoted string, got {version!r}")
    return HardwareClass(
        arch=_text(path, f"{where}.arch", data["arch"]),
        gpu_model=_text(path, f"{where}.gpu_model", data["gpu_model"]),
        gpu_count=_int(path, f"{where}.gpu_count", data["gpu_count"], 1, 4096),
        topology=_text(path, f"{where}.topology", data["topology"]),
        sglang_version=_text(path, f"{where}.sglang_version", version),
        model=_text(path, f"{where}.model", data["model"], limit=1024),
        revision=_optional_text(path, f"{where}.revision", data["revision"]),
    )


def _evidence(path: Any, where: str, raw: Any, intents: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for name, ev in _mapping(path, where, raw).items():
        here = f"{where}.{name}"
        if name not in intents:
            raise TuningError(path, here, "evidence for an intent the record does not set")
        ev = _data(path, here, _mapping(path, here, ev))
        _finite(path, f"{here}.objective", ev.get("objective"))
        runner = ev.get("runner_up")
        if runner is not None and not isinstance(runner, Mapping):
            raise TuningError(path, f"{here}.runner_up", "must be a mapping {value, objective} or null")
        if runner is not None:
            _finite(path, f"{here}.runner_up.objective", runner.get("objective"))
            if isinstance(runner.get("value"), (list, dict)):
                raise TuningError(path, f"{here}.runner_up.value", "must be one value of the setting")
        if isinstance(ev.get("value"), (list, dict)):
            raise TuningError(path, f"{here}.value", "must be one value of the setting")
        out[name] = ev
    return out


def _decisions(path: Any, where: str, raw: Any, intents: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Why each setting the best measured configuration had off its prior moved or was kept."""
    out = {}
    for name, d in _mapping(path, where, raw).items():
        here = f"{where}.{name}"
        _tunable(path, here, name)
        d = _data(path, here, _mapping(path, here, d))
        _known(path, here, d, _DECISION_KEYS, ("value", "prior", "moved", "reason"))
        if not isinstance(d["moved"], bool):
            raise TuningError(path, f"{here}.moved", f"must be true or false, got {shown(d['moved'])}")
        _text(path, f"{here}.reason", d["reason"], limit=MAX_TEXT)
        for key in ("value", "prior", "proposed"):
            if isinstance(d.get(key), (list, dict)):
                raise TuningError(path, f"{here}.{key}", "must be one value of the setting")
        if name in intents and d["value"] != intents[name]:
            raise TuningError(path, f"{here}.value", f"{shown(d['value'])} is not the record's value "
                                                     f"{shown(intents[name])}")
        for key in ("gain", "spread"):
            _finite(path, f"{here}.{key}", d.get(key))
        for label, change in _mapping(path, f"{here}.worse", d.get("worse")).items():
            _finite(path, f"{here}.worse.{label}", change, optional=False)
        out[name] = d
    return out


def _data_mapping(path: Any, where: str, value: Any) -> dict[str, Any]:
    """A mapping of free-form figures (None: an empty one)."""
    return {k: _data(path, f"{where}.{k}", v) for k, v in _mapping(path, where, value).items()}


def _trial(path: Any, where: str, raw: Any) -> dict[str, Any]:
    data = _data_mapping(path, where, raw)
    for key in ("number", "status"):
        if key not in data:
            raise TuningError(path, f"{where}.{key}", "missing")
    _int(path, f"{where}.number", data["number"])
    if data["status"] not in TRIAL_STATUSES:
        raise TuningError(path, f"{where}.status", f"must be one of {', '.join(TRIAL_STATUSES)}, "
                                                   f"got {shown(data['status'])}")
    config = data.get("config", {})
    if config is not None and not isinstance(config, Mapping):
        raise TuningError(path, f"{where}.config", "must be a mapping of intent -> value")
    for name in config or {}:
        _tunable(path, f"{where}.config.{name}", name)
    _finite(path, f"{where}.objective", data.get("objective"))
    cause = data.get("cause")
    if cause is not None and (not isinstance(cause, str) or "\n" in cause):
        raise TuningError(path, f"{where}.cause", f"must be one line of text or null, got {shown(cause)}")
    return data


def _record(path: Any, where: str, raw: Any) -> TuningRecord:
    data = _mapping(path, where, raw)
    _known(path, where, data, _RECORD_KEYS, _REQUIRED)
    objective = data["objective"]
    if objective not in OBJECTIVES:
        raise TuningError(path, f"{where}.objective", f"must be one of {', '.join(OBJECTIVES)}, "
                                                      f"got {shown(objective)}")
    concurrency = data.get("concurrency", list(DEFAULT_CONCURRENCY))
    if not isinstance(concurrency, list) or not concurrency or len(concurrency) > MAX_LEVELS:
        raise TuningError(path, f"{where}.concurrency", f"must be a non-empty list of at most {MAX_LEVELS} integers, "
                                                        f"got {shown(concurrency)}")
    levels = tuple(_int(path, f"{where}.concurrency[{i}]", c, 1, 10 ** 6) for i, c in enumerate(concurrency))
    slo = _mapping(path, f"{where}.slo", data.get("slo"))
    for key, value in slo.items():
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                or not value > 0):
            raise TuningError(path, f"{where}.slo.{key}", f"must be a positive number of seconds, got {shown(value)}")
    intents = _intent_values(path, f"{where}.intents", data["intents"])
    hardware = _hardware(path, f"{where}.hardware", data["hardware"])
    check_layout(path, f"{where}.intents", intents, hardware.gpu_count)
    trials = data.get("trials") or []
    if not isinstance(trials, list):
        raise TuningError(path, f"{where}.trials", "must be a list")
    if len(trials) > MAX_TRIALS:
        raise TuningError(path, f"{where}.trials", f"{len(trials)} trials, more than the {MAX_TRIALS} accepted")
    tool_version = data.get("tool_version", "")
    if not isinstance(tool_version, str):
        raise TuningError(path, f"{where}.tool_version", f"must be a string, got {shown(tool_version)}")
    if tool_version:
        _text(path, f"{where}.tool_version", tool_version, limit=64)
    return TuningRecord(
        hardware=hardware,
        objective=objective,
        intents=intents,
        measured_on=_host(path, f"{where}.measured_on", data["measured_on"]),
        measured_at=_timestamp(path, f"{where}.measured_at", data["measured_at"]),
        trial_count=_int(path, f"{where}.trial_count", data["trial_count"]),
        concurrency=levels,
        slo={k: v for k, v in slo.items()},
        evidence=_evidence(path, f"{where}.evidence", data.get("evidence"), intents),
        decisions=_decisions(path, f"{where}.decisions", data.get("decisions"), intents),
        trials=[_trial(path, f"{where}.trials[{i}]", t) for i, t in enumerate(trials)],
        tool_version=tool_version,
    )
