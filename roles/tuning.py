"""What a deploy reads of tuning: the inventory's tuning records and, during a tuning run, the trial.

Records (``sglang_deploy.tuning.record``) come from the file named by
``SGLANG_DEPLOY_TUNING_FILE``, else from ``<inventory>.tuning.yaml`` beside the
inventory file pyinfra was given. Each file is read once per run, and again
only when it changes (a tuner running deploys in one process writes the trial
file anew for every trial). The planner applies the record of the host's
hardware class.

A trial is the tuner's: ``SGLANG_DEPLOY_TRIAL`` names a JSON file
``{"host": NAME, "trial": N, "intents": {...}, "reason": "...", "gate": {...}}``
whose intents are the "trial" layer of that one host's plan; every other host
plans as if there were no trial.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

from roles.inventory import inventory_file
from sglang_deploy.errors import PlanError
from sglang_deploy.spec import IntentSetting, trial_intents
from sglang_deploy.tuning.record import TuningError, TuningRecord, load_records, records_path

TUNING_FILE_ENV = "SGLANG_DEPLOY_TUNING_FILE"
TRIAL_ENV = "SGLANG_DEPLOY_TRIAL"


def tuning_file(groups: Iterable[str], environ: Mapping[str, str] | None = None,
                argv: list[str] | None = None) -> Path | None:
    """Where this host's tuning records are: the file the environment names, else the one beside
    the host's inventory file (None: neither is known)."""
    env = os.environ if environ is None else environ
    if env.get(TUNING_FILE_ENV):
        return Path(env[TUNING_FILE_ENV])
    inventory = inventory_file(groups, argv)
    return records_path(inventory) if inventory is not None else None


def _version(path: str) -> tuple[int, ...] | None:
    """What tells one content of a file from the next (None: no such file)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return (-1,)  # let the read say what is wrong
    return st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size


@lru_cache(maxsize=None)
def _read_records(path: str, version: tuple[int, ...] | None) -> tuple[TuningRecord, ...]:
    return tuple(load_records(path))


def _records(path: str) -> tuple[TuningRecord, ...]:
    return _read_records(path, _version(path))


def records_for(host: str, groups: Iterable[str], environ: Mapping[str, str] | None = None,
                argv: list[str] | None = None) -> tuple[TuningRecord, ...]:
    """The tuning records to plan ``host`` with (read once per file per run); a malformed file
    stops the host with the file and the field at fault."""
    path = tuning_file(groups, environ, argv)
    if path is None:
        return ()
    try:
        return _records(str(path.resolve()))
    except TuningError as exc:
        raise PlanError(host, "tuning records", str(exc)) from None


def read_trial(path: str) -> dict[str, Any]:
    """The trial file, checked for its shape (its intents are checked for the host they name);
    ValueError says what is wrong."""
    return _read_trial(path, _version(path))


@lru_cache(maxsize=None)
def _read_trial(path: str, version: tuple[int, ...] | None) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{TRIAL_ENV} {path}: cannot read the trial: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{TRIAL_ENV} {path}: must be a JSON object {{host, trial, intents, reason, gate}}")
    for key, kind in (("host", str), ("intents", dict)):
        if not isinstance(data.get(key), kind):
            raise ValueError(f"{TRIAL_ENV} {path}: {key}: missing or not a {'string' if kind is str else 'mapping'}")
    trial = data.get("trial")
    if trial is not None and (isinstance(trial, bool) or not isinstance(trial, int)):
        raise ValueError(f"{TRIAL_ENV} {path}: trial: must be the trial's number, got {trial!r}")
    if not isinstance(data.get("reason", ""), str):
        raise ValueError(f"{TRIAL_ENV} {path}: reason: must be a string")
    return data


def trial_for(host: str, environ: Mapping[str, str] | None = None) -> dict[str, IntentSetting]:
    """The trial layer of ``host``'s plan: the intents of the trial file when it names this host,
    else none. A trial file that cannot be read stops the host (PlanError)."""
    env = os.environ if environ is None else environ
    path = env.get(TRIAL_ENV)
    if not path:
        return {}
    try:
        data = read_trial(str(Path(path).resolve()))
    except ValueError as exc:
        raise PlanError(host, TRIAL_ENV, str(exc)) from None
    if data["host"] != host:
        return {}
    number = data.get("trial")
    said = f"tuning trial {number}" if number is not None else "tuning trial"
    reason = f"{said}: {data['reason']}" if data.get("reason") else said
    return trial_intents(host, f"{TRIAL_ENV}.intents", data["intents"], reason)
