"""Plan -> the three files a host gets: systemd unit, env file, nccl.conf.

Jinja2 does the layout (templates/ at the repository root, shipped inside the
wheel as sglang_deploy/templates); quoting is done by `unitsyntax` filters.
Secrets reach only the env file, and only when their values are passed in;
without them (plan output, JSON, diffs) the env file shows ``<redacted>``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import jinja2

from sglang_deploy import unitsyntax
from sglang_deploy.errors import PlanError

if TYPE_CHECKING:
    from sglang_deploy.plan.hostplan import Plan
    from sglang_deploy.plan.spec import SecretRef
    from sglang_deploy.plan.watch import WatchSettings

HEADER = "Managed by sglang-deploy: do not edit, the next deploy overwrites this file."
REDACTED = "<redacted>"


def templates_dir() -> Path:
    here = Path(__file__).resolve().parent.parent  # the sglang_deploy package
    for candidate in (here.parent / "templates", here / "templates"):
        if (candidate / "sglang.service.j2").is_file():
            return candidate
    raise FileNotFoundError("templates/ not found next to the sglang_deploy package")


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """One per process: Jinja2 compiles each template once into the environment's cache (and
    recompiles a template whose file changed), instead of once per host rendered."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["env_quote"] = unitsyntax.env_quote
    env.filters["nccl_value"] = unitsyntax.nccl_value
    env.filters["unit_value"] = unitsyntax.unit_value
    return env


@dataclass(frozen=True)
class RenderedFiles:
    unit: str
    env: str
    nccl_conf: str

    def as_dict(self) -> dict[str, str]:
        return {"unit": self.unit, "env": self.env, "nccl_conf": self.nccl_conf}


def launcher_code(pairs: list[tuple[str, str]]) -> str:
    """``python -c`` code that starts SGLang as ``-m sglang.launch_server`` would, with each
    ``(flag, VARIABLE)`` pair appended from the service environment (and removed from it,
    so SGLang's own child processes do not inherit it). The process's argv, readable by
    every local user in /proc, never holds the value; the variable comes from the
    root-only env file."""
    table = ", ".join(f"({flag!r}, {var!r})" for flag, var in pairs)
    return ("import os, runpy, sys; "
            f"sys.argv += [w for flag, var in ({table},) if var in os.environ for w in (flag, os.environ.pop(var))]; "
            "runpy.run_module('sglang.launch_server', run_name='__main__', alter_sys=True)")


def exec_lines(python: str, argv: list[str], references: Mapping[int, str] | None = None) -> list[str]:
    """The ExecStart words, one option with its values per line.

    ``references`` maps an argv index to an environment variable holding that word
    (the API key, whose value stays in the root-only env file). Such a word and its
    flag are not in ExecStart: a small launcher (:func:`launcher_code`) appends them
    from the environment inside the process, so the value never reaches an argv.
    """
    references = references or {}
    pairs = [(argv[i - 1], var) for i, var in sorted(references.items())]
    for i in references:
        unitsyntax.exec_reference(references[i])  # a valid variable name
        if i == 0 or not argv[i - 1].startswith("-"):
            raise ValueError(f"argv word {i} comes from ${references[i]} but follows no flag")
    hidden = {i for i in references} | {i - 1 for i in references}
    kept = [w for i, w in enumerate(argv) if i not in hidden]
    words = [unitsyntax.exec_quote(w) for w in kept]
    start = "-m sglang.launch_server" if not pairs else f"-c {unitsyntax.exec_quote(launcher_code(pairs))}"
    lines = [f"{unitsyntax.exec_quote(python)} {start}"]
    for word, raw in zip(words, kept):
        if raw.startswith("-") and not _is_number(raw) or not lines[1:]:
            lines.append(word)
        else:
            lines[-1] += f" {word}"
    return lines


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def secret_value(host: str, ref: SecretRef, secret_values: Mapping[str, str] | None) -> str:
    """What a root-only env file holds for ``ref``: its value, or ``<redacted>`` without
    ``secret_values`` (plans, diffs, JSON). PlanError, naming the host and the inventory field,
    for a value not read or one with a newline or control character (it would end the line)."""
    if secret_values is None:
        return REDACTED
    if ref.env_var not in secret_values:
        raise PlanError(host, ref.inventory_field, f"no value read for {ref.describe()}")
    value = secret_values[ref.env_var]
    try:
        unitsyntax.reject_control(value)
    except unitsyntax.ControlCharacter:
        raise PlanError(host, ref.inventory_field,
                        "the secret contains a newline or control character; refusing to write it") from None
    return value


def render(plan: "Plan", secret_values: Mapping[str, str] | None = None) -> RenderedFiles:
    """Render the host's files. Without ``secret_values`` secrets are redacted."""
    host = plan.host
    env = _environment()
    try:
        unit = env.get_template("sglang.service.j2").render(
            header=HEADER,
            host=host,
            gpu_summary=plan.gpu_summary,
            sglang_version=plan.sglang_version,
            model_path=plan.model_path,
            weights_origin=plan.weights.origin if plan.weights else "",
            weights_marker=plan.weights.marker if plan.weights and plan.weights.staged else "",
            user=plan.service.user,
            group=plan.service.group,
            workdir=plan.service.workdir,
            env_path=plan.service.env_path,
            exec_lines=exec_lines(plan.python, plan.argv, plan.argv_env_refs),
            restart_sec=plan.service.restart_sec,
            start_limit_interval_s=max(3600, 5 * plan.timeout_start_s),
            start_limit_burst=5,
            timeout_start_s=plan.timeout_start_s,
            timeout_stop_s=plan.service.timeout_stop_s,
            limit_nofile=plan.service.limit_nofile,
        )
        secrets = [{"name": ref.env_var, "value": secret_value(host, ref, secret_values),
                    "comment": f"secret: {ref.describe()}"} for ref in plan.secrets]
        env_text = env.get_template("sglang.env.j2").render(
            header=HEADER, unit_name=plan.service.name,
            env=[{"name": k, "value": v, "comment": plan.env_comments.get(k, "")} for k, v in plan.env.items()],
            secrets=secrets,
        )
        nccl = env.get_template("nccl.conf.j2").render(
            header=HEADER, host=host,
            nccl=[{"name": k, "value": v, "comment": plan.nccl_comments.get(k, "")} for k, v in plan.nccl_conf.items()],
        )
    except unitsyntax.ControlCharacter as exc:
        raise PlanError(host, "rendered value", str(exc)) from None
    except ValueError as exc:
        if isinstance(exc, PlanError):
            raise
        raise PlanError(host, "rendered value", str(exc)) from None
    return RenderedFiles(unit=unit, env=env_text, nccl_conf=nccl)


#: The continuous check's bounds on its host (docs/watch.md): half a core at idle priority, and
#: memory for the gate's zipapp and one report.
WATCH_CPU_QUOTA_PERCENT = 50
WATCH_MEMORY_MAX_MIB = 512


@dataclass(frozen=True)
class WatchFiles:
    """``<service>-watch.service`` and ``<service>-watch.timer``."""

    service: str
    timer: str


def watch_dir(state_dir: str) -> str:
    """Where the deploy puts the watch's files on the host (root-only, persistent)."""
    return f"{state_dir}/watch"


def render_watch(plan: "Plan", watch: "WatchSettings", state_dir: str) -> WatchFiles:
    """The continuous check's units: a oneshot service (the venv's Python runs the host script
    sglang_deploy/deploy/host/watch.py) and its timer. Not part of the revision: other units
    than the server's, so changing them restarts nothing."""
    env = _environment()
    wdir = watch_dir(state_dir)
    words = [plan.python, "-I", f"{wdir}/watch.py", "--config", f"{wdir}/watch.json"]
    try:
        common = {"header": HEADER, "service": plan.service.name, "interval_s": watch.interval_s}
        service = env.get_template("sglang-watch.service.j2").render(
            **common, exec_start=" ".join(unitsyntax.exec_quote(w) for w in words), timeout_s=watch.timeout_s,
            textfile_dir=watch.textfile_dir, state_dir=state_dir, cpu_quota=WATCH_CPU_QUOTA_PERCENT,
            memory_max_mib=WATCH_MEMORY_MAX_MIB)
        timer = env.get_template("sglang-watch.timer.j2").render(
            **common, delay_s=min(60, max(1, watch.interval_s // 10)))
    except (unitsyntax.ControlCharacter, ValueError) as exc:
        raise PlanError(plan.host, "sglang_watch", str(exc)) from None
    return WatchFiles(service=service, timer=timer)
