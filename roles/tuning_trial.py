"""The deploy's side of a tuning trial: the trial file ``SGLANG_DEPLOY_TRIAL`` names (written
by `sglang-deploy tune`, roles/tuning_run.py), read once per run, for the hosts it names.
The planner takes its intents as the "trial" layer; the gate takes its measuring settings,
leaves the host's history alone (a trial is not the host's configuration: its figures must
not become the baseline of the next real deploy) and writes its whole report where the
tuner reads it.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from sglang_deploy.errors import PlanError
from sglang_deploy.tuning.trials import REGATE_ENV, STATE_ENV, TRIAL_ENV, TrialFile, TrialFileError, load_trial


@functools.lru_cache(maxsize=None)
def _load(path: str) -> TrialFile:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TrialFileError(f"{TRIAL_ENV}={path}: cannot read: {exc.strerror or exc}") from None
    return load_trial(text, f"{TRIAL_ENV}={path}")


def trial_for(host_name: str) -> TrialFile | None:
    """The trial for this host, or None (no trial file, or one naming another host)."""
    path = os.environ.get(TRIAL_ENV)
    if not path:
        return None
    try:
        trial = _load(path)
    except TrialFileError as exc:
        raise PlanError(host_name, TRIAL_ENV, str(exc)) from None
    return trial if host_name in trial.hosts else None


def write_dump(trial: TrialFile, outcome: Any, report: dict[str, Any] | None) -> None:
    """The gate's outcome (kind and whole summary, journal tail included) and report, for the tuner."""
    if not trial.report_file:
        return
    doc = {"trial": trial.number, "outcome": outcome.kind if outcome else None,
           "summary": outcome.summary if outcome else None, "report": report}
    tmp = f"{trial.report_file}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, default=str)
    os.replace(tmp, trial.report_file)


def state_file() -> str | None:
    """With ``SGLANG_DEPLOY_STATE_ONLY=FILE``: the deploy records each host's state and plan there and changes nothing."""
    return os.environ.get(STATE_ENV) or None


def regate() -> bool:
    """Whether a deploy that leaves the revision unchanged gates it all the same (the tuner's restore)."""
    return os.environ.get(REGATE_ENV) == "1"
