"""What a runner tells the deploy it starts, as one typed context.

`sglang-deploy rollout` and `sglang-deploy tune` drive the deploy through ordinary pyinfra runs
(`pyinfra -y INVENTORY deploy.py --limit ...`, a process of its own). What such a run must know
beyond the inventory (where each host writes its record, the rollout's max_unavailable and its
compile-cache seeds, a tuning run's trial, precheck, space and records, whether an unchanged
revision is gated again) is one
:class:`RunContext`, written by the runner as a JSON file that the environment variable
``SGLANG_DEPLOY_RUN`` names (:func:`write`). The deploy reads it once per content
(:func:`from_environ`); a plain `pyinfra INVENTORY deploy.py` has none (every field empty).

The file is data, checked here (unknown keys, wrong types and paths that are not absolute are
errors naming the field); a file that cannot be read fails the run with that message.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from sglang_deploy.untrusted import UntrustedInput, load_json, read_text_file

RUN_ENV = "SGLANG_DEPLOY_RUN"
MAX_BYTES = 64 * 1024


class RunContextError(ValueError):
    """The run file named by SGLANG_DEPLOY_RUN is not one a runner wrote: the message names the field."""


@dataclass(frozen=True)
class RunContext:
    #: rollout: each host appends its result record here (one JSON line, lifecycle.rollback_policy)
    results_file: str | None = None
    #: rollout --max-unavailable: the deploy checks the rollout's value again (waves.parse_max_unavailable)
    max_unavailable: str | None = None
    #: tune: the tuning records file (else <inventory>.tuning.yaml)
    tuning_file: str | None = None
    #: tune: the trial file (tuning.trials): its intents are the "trial" layer of the hosts it names
    trial_file: str | None = None
    #: tune's precheck: record each host's state, plan and space here and change nothing
    state_file: str | None = None
    #: tune --space FILE, applied by the precheck to the host's default space
    space_file: str | None = None
    #: gate an unchanged revision all the same (the tuner's trials and its return)
    regate: bool = False
    #: rollout: the directory of its compile-cache seeds (lifecycle/cache_seed.py): the first host of a
    #: class to pass leaves its caches there, the later hosts of the class start from them
    cache_seed_dir: str | None = None

    def dumps(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    def merged(self, **changes: Any) -> RunContext:
        return dataclasses.replace(self, **changes)


_FIELDS = {f.name: f for f in dataclasses.fields(RunContext)}


def parse(text: str, where: str = RUN_ENV) -> RunContext:
    """A run file's text as a :class:`RunContext`; RunContextError names the field."""
    try:
        doc = load_json(text, where, MAX_BYTES, max_depth=4)
    except UntrustedInput as exc:
        raise RunContextError(str(exc)) from None
    if not isinstance(doc, dict):
        raise RunContextError(f"{where}: must be a JSON object")
    unknown = sorted(set(doc) - set(_FIELDS))
    if unknown:
        raise RunContextError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}")
    values: dict[str, Any] = {}
    for name, value in doc.items():
        if name == "regate":
            if not isinstance(value, bool):
                raise RunContextError(f"{where}.regate: must be true or false, got {value!r}")
        elif value is not None:
            if not isinstance(value, str) or not value or "\0" in value or len(value) > 4096:
                raise RunContextError(f"{where}.{name}: must be a non-empty string, got {value!r}")
            if name.endswith(("_file", "_dir")) and not os.path.isabs(value):
                raise RunContextError(f"{where}.{name}: must be an absolute path, got {value!r}")
        values[name] = value
    return RunContext(**values)


@lru_cache(maxsize=8)
def _read(path: str, version: tuple[int, int, int]) -> RunContext:
    try:  # a regular file of at most MAX_BYTES (a FIFO is refused, not read), UTF-8
        text = read_text_file(path, RUN_ENV, MAX_BYTES)
    except UntrustedInput as exc:
        raise RunContextError(str(exc)) from None
    return parse(text, f"{RUN_ENV} {path}")


def from_environ(environ: Mapping[str, str] | None = None) -> RunContext:
    """The run's context: the file ``SGLANG_DEPLOY_RUN`` names (read once per content), else the
    empty context of a plain pyinfra run."""
    env = os.environ if environ is None else environ
    path = env.get(RUN_ENV)
    if not path:
        return RunContext()
    try:
        st = os.stat(path)
    except OSError as exc:
        raise RunContextError(f"{RUN_ENV} {path}: cannot read: {exc.strerror or exc}") from None
    return _read(path, (st.st_ino, st.st_mtime_ns, st.st_size))


def write(ctx: RunContext, path: str) -> dict[str, str]:
    """Write ``ctx`` to ``path`` (0600: it names the runner's files) and return the environment
    entry that hands it to a pyinfra run."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(ctx.dumps())
    return {RUN_ENV: path}
