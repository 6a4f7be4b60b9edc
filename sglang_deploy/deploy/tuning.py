"""What a deploy reads of tuning: the inventory's tuning records and, during a tuning run, the trial.

Records (``sglang_deploy.plan.tuning_record``) come from the run context's ``tuning_file``
(``sglang_deploy.runcontext``: the tuner's), else from ``<inventory>.tuning.yaml`` beside the
inventory file pyinfra was given. Each file is read once per run, and again
only when it changes (a tuner running deploys in one process writes the trial
file anew for every trial). The planner applies the record of the host's
hardware class.

A trial is the tuner's (sglang_deploy/commands/tune.py): the run context's ``trial_file`` names a JSON
trial file (sglang_deploy/tuning/trials.py) whose intents are the "trial" layer of
the plan of the hosts it names; every other host plans as if there were no trial.
The gate takes the trial's measuring settings from it, leaves the host's history
alone (a trial is not the host's configuration: its figures must not become the
baseline of the next real deploy) and writes its whole report where the tuner reads it.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from sglang_deploy.deploy.inventory import inventory_file
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.spec import IntentSetting, trial_intents
from sglang_deploy.plan.tuning_record import TuningError, TuningRecord
from sglang_deploy.plan.tuning_record_file import load_records, records_path
from sglang_deploy.runcontext import RunContext, from_environ
from sglang_deploy.tuning.trials import MAX_TRIAL_BYTES, TRIAL, TrialFile, TrialFileError, load_trial
from sglang_deploy.untrusted import UntrustedInput, read_text_file


def tuning_file(groups: Iterable[str], run: RunContext | None = None,
                argv: list[str] | None = None) -> Path | None:
    """Where this host's tuning records are: the file the run context names (the tuner's), else the
    one beside the host's inventory file (None: neither is known)."""
    run = from_environ() if run is None else run
    if run.tuning_file:
        return Path(run.tuning_file)
    inventory = inventory_file(groups, argv)
    return records_path(inventory) if inventory is not None else None


def file_version(path: str) -> tuple[int, ...] | None:
    """What tells one content of a file from the next (None: no such file); a cache key for the
    controller's readers of files beside the inventory (tuning records, calibration samples)."""
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
    return _read_records(path, file_version(path))


def records_for(host: str, groups: Iterable[str], run: RunContext | None = None,
                argv: list[str] | None = None) -> tuple[TuningRecord, ...]:
    """The tuning records to plan ``host`` with (read once per file per run); a malformed file
    stops the host with the file and the field at fault."""
    path = tuning_file(groups, run, argv)
    if path is None:
        return ()
    try:
        return _records(str(path.resolve()))
    except TuningError as exc:
        raise PlanError(host, "tuning records", str(exc)) from None


@lru_cache(maxsize=None)
def _read_trial(path: str, version: tuple[int, ...] | None) -> TrialFile:
    try:  # a regular file (a FIFO is refused, not read), bounded
        text = read_text_file(path, TRIAL, MAX_TRIAL_BYTES)
    except UntrustedInput as exc:
        raise TrialFileError(f"{exc} (the trial cannot be read)") from None
    # the report file it names must be inside the tuner's state directory, beside the trial file
    return load_trial(text, f"{TRIAL} {path}", path)


def current_trial(host: str, run: RunContext | None = None) -> TrialFile | None:
    """The tuner's trial when it names ``host`` (the host tuned, or a member of the tp group
    tuned), else None. A trial file that cannot be read stops the host (PlanError)."""
    path = (from_environ() if run is None else run).trial_file
    if not path:
        return None
    resolved = str(Path(path).resolve())
    try:
        trial = _read_trial(resolved, file_version(resolved))
    except TrialFileError as exc:
        raise PlanError(host, TRIAL, str(exc)) from None
    return trial if host in trial.hosts else None


def trial_for(host: str, run: RunContext | None = None) -> dict[str, IntentSetting]:
    """The trial layer of ``host``'s plan (``plan_host``'s ``trial``): the trial's intents when it names
    this host, else none."""
    trial = current_trial(host, run)
    if trial is None:
        return {}
    reason = f"tuning trial {trial.number}: {trial.reason}" if trial.reason else f"tuning trial {trial.number}"
    return trial_intents(host, f"{TRIAL}.intents", dict(trial.intents), reason)


def write_dump(trial: TrialFile, outcome: Any, report: dict[str, Any] | None) -> None:
    """The gate's outcome (kind and whole summary, journal tail included) and report, where the
    tuner reads them; written aside and renamed, so it is whole or absent."""
    if not trial.report_file:
        return
    doc = {"trial": trial.number, "outcome": outcome.kind if outcome else None,
           "summary": outcome.summary if outcome else None, "report": report}
    tmp = f"{trial.report_file}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, default=str)
    os.replace(tmp, trial.report_file)


def state_file() -> str | None:
    """The run context's ``state_file``: the deploy records each host's state, plan and tuning
    space there and changes nothing (the tuner's precheck)."""
    return from_environ().state_file


def space_file() -> str | None:
    """The tuner's ``--space FILE``, applied by the precheck to the host's default space."""
    return from_environ().space_file


def regate() -> bool:
    """Whether a deploy that leaves the revision unchanged gates it all the same (the tuner's return)."""
    return from_environ().regate
