"""The deploy's roles, called in order by deploy.py. Thin: facts in, core decides, operations out.

    ctx = prepare(host)   # probe + state facts, plan, render, decide
    install(ctx)          # venv + pinned SGLang
    configure(ctx)        # stage files aside, prove argv, swap in, reload, enable
    restart(ctx)          # only when the deployed revision is not this one; then the gate:
                          # pass -> mark deployed; fail -> roll back (or stop) and fail the host

A host whose data, probe or secrets are wrong gets a single failing operation
that says why, before anything on it changes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import tempfile
import time
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

import gevent
import httpx
from pyinfra import logger
from pyinfra.api import StringCommand, deploy
from pyinfra.api.host import Host
from pyinfra.context import ContextObject
from pyinfra.operations import python, server, systemd

from roles import gatezip, tpgroup
from roles.facts import DeployState, GpuProbe
from roles.inventory import data_layers
from roles.operations import (install_sglang, mark_deployed, prove_argv, prune_revisions, restart_service,
                              stage_revision, stop_service, swap_in)
from roles.secrets import read_secrets
from sglang_deploy.gate import outcomes
from sglang_deploy.errors import PlanError
from sglang_deploy.gate.client import wait_ready
from sglang_deploy.gate.errors import GateError, ServiceDown
from sglang_deploy.gate.options import CheckOptions
from sglang_deploy.gate.report import error_report, explain_slow
from sglang_deploy.gate.run import run_check
from sglang_deploy.gate.watch import SystemdWatch
from sglang_deploy.planner import Plan, plan_host
from sglang_deploy.render import RenderedFiles, render
from sglang_deploy.revision import FILE_NAMES, Actions, HostState, Layout, decide, revision_id
from sglang_deploy.spec import DeploySpec, build_spec
from sglang_deploy.tpgroups import group_name
from sglang_deploy.gate.verdict import parse_fail_on

@dataclass
class HostDeploy:
    host: Host
    spec: DeploySpec | None = None
    plan: Plan | None = None
    files: RenderedFiles | None = None
    revision: str | None = None
    layout: Layout | None = None
    state: HostState | None = None
    actions: Actions | None = None
    error: str | None = None
    api_key: str | None = None
    rollback: outcomes.RollbackPlan | None = None
    # filled at run time by the gate callbacks
    outcome: outcomes.Outcome | None = None
    step: str | None = None
    rollback_result: str | None = None
    rollback_ok: bool | None = None
    report: dict[str, Any] | None = None
    tp: tpgroup.GroupRun | None = None  # the multi-node tp group this host is a member of

    @property
    def gate_on_host(self) -> bool:
        """Whether the gate runs on the host itself (``sglang_gate.run_on``; auto: loopback-only server)."""
        assert self.spec and self.plan
        return self.spec.gate.on_host(self.plan.intents["host"].value)

    @property
    def ok(self) -> bool:
        return self.error is None


def prepare(host: Host) -> HostDeploy:
    """Gather facts and let the core plan and decide; errors become a failing operation."""
    # The Host itself, not pyinfra's context proxy (``from pyinfra import host``), which at execute
    # time means whichever host runs: a tp group's rank 0 reads its members' units through theirs.
    host = host._get_module() if isinstance(host, ContextObject) else host
    ctx = HostDeploy(host=host)
    try:
        group_data, host_data = data_layers(host)
        group = group_name(group_data, host_data)
        if group is not None:
            ctx.tp = tpgroup.join(host, group)
        spec = ctx.spec = build_spec(host.name, group_data, host_data)
        node = ctx.tp.node(host.name) if ctx.tp is not None else None
        probe = host.get_fact(GpuProbe)
        if "error" in probe:
            raise PlanError(host.name, "GPU probe", probe["error"])
        plan = plan_host(spec, probe=probe, node=node)
        layout = Layout(service=plan.service.name, unit_path=plan.service.unit_path,
                        env_path=plan.service.env_path, nccl_conf_path=plan.nccl_conf_path)
        state = host.get_fact(DeployState, layout=layout, python=plan.python, user=plan.service.user,
                              group=plan.service.group, workdir=plan.service.workdir)
        if not state.systemd:
            raise PlanError(host.name, "systemd", "this host does not run systemd; the service cannot be installed")
        secrets = read_secrets(host.name, plan.secrets)
        ctx.api_key = secrets.get("SGLANG_API_KEY")
        files = render(plan, secrets)
        rev = revision_id(files, plan.sglang_version)
        ctx.plan, ctx.files, ctx.revision, ctx.layout, ctx.state = plan, files, rev, layout, state
        ctx.actions = decide(state, files, rev, plan.sglang_version)
        ctx.rollback = outcomes.rollback_plan(state, ctx.actions, rev)
        if ctx.tp is not None and state.current == rev == state.deployed and rev in state.staged:
            # A member whose own revision is deployed already restarts with its group all the same;
            # if the group fails, it goes back to that revision (restarted with the others).
            ctx.rollback = outcomes.RollbackPlan(target=rev, previous=state.previous)
    except PlanError as exc:
        ctx.error = str(exc)
        record_result(ctx)
        # One failing operation that says why: the host stops before anything on it changes.
        server.shell(name="Plan SGLang for this host",
                     commands=[f"printf '%s\\n' {shlex.quote(ctx.error)} >&2; exit 1"])
    if ctx.tp is not None:
        ctx.tp.register(ctx)
        if ctx.ok:
            # Decided when it executes, once every member's prepare has run (their probes,
            # their plans): a group that cannot deploy whole stops before anything changes.
            python.call(name=f"Check tp group {ctx.tp.name}: every member here and alike",
                        function=_group_check_callback, ctx=ctx)
    return ctx


@deploy("Install SGLang")
def install(ctx: HostDeploy) -> None:
    if not ctx.ok:
        return
    plan = ctx.plan
    assert plan is not None and ctx.state is not None and ctx.spec is not None
    pip = ctx.spec.install
    install_sglang(
        name=f"Install SGLang {plan.sglang_version} into {plan.venv}",
        venv=plan.venv,
        version=plan.sglang_version,
        extras=pip.extras,
        index_url=pip.index_url,
        extra_index_urls=pip.extra_index_urls,
        find_links=pip.find_links,
        no_index=pip.no_index,
        installed_version=ctx.state.installed_version,
    )


@deploy("Configure the SGLang service")
def configure(ctx: HostDeploy) -> None:
    if not ctx.ok:
        return
    plan, actions, layout, rev = ctx.plan, ctx.actions, ctx.layout, ctx.revision
    assert plan and actions and layout and rev and ctx.files
    if actions.account:
        server.group(name="Service group", group=plan.service.group, system=True)
        server.user(name="Service user", user=plan.service.user, group=plan.service.group, system=True,
                    home=plan.service.workdir, shell="/usr/sbin/nologin", create_home=False)
        server.shell(name="Working directory", commands=[
            f"install -d -m 0750 -o {shlex.quote(plan.service.user)} -g {shlex.quote(plan.service.group)} "
            f"{shlex.quote(plan.service.workdir)}"])
    if actions.stage:
        stage_revision(name=f"Stage revision {rev}", layout=layout, rev=rev, files=ctx.files, argv=plan.argv,
                       sglang_version=plan.sglang_version)
    if actions.stage or actions.install or actions.swap:
        prove_argv(name=f"Prove the launch flags with the installed SGLang {plan.sglang_version}",
                   layout=layout, rev=rev, python=plan.python)
    if ctx.tp is not None:
        # Installed, staged and proven on every member, or made live on none.
        python.call(name=f"Check tp group {ctx.tp.name}: every member staged and proven",
                    function=_group_barrier_callback, ctx=ctx)
    if actions.swap or ctx.state.current != rev:  # type: ignore[union-attr]
        swap_in(name=f"Make revision {rev} live ({', '.join(actions.swap) or 'markers only'})",
                layout=layout, rev=rev, keys=actions.swap, previous=actions.new_previous, unit_text=ctx.files.unit)
    if actions.daemon_reload:
        systemd.daemon_reload(name="Reload systemd units")
    if actions.enable:
        systemd.service(name=f"Enable {layout.service}", service=f"{layout.service}.service", enabled=True,
                        running=None)
    if actions.prune and not actions.restart:  # with a restart: after a passing gate (the rollback needs them)
        prune_revisions(name="Prune old revisions", layout=layout, revisions=actions.prune)


@deploy("Restart and gate SGLang")
def restart(ctx: HostDeploy) -> None:
    """Restart on the new revision, gate it; pass: mark deployed; otherwise roll back
    (or stop) and fail the host saying what failed and what was done."""
    if not ctx.ok or not ctx.actions:
        return
    if ctx.tp is not None:
        _restart_group(ctx)
        return
    if not ctx.actions.restart:
        if results_file():
            python.call(name="Record the result (unchanged)", function=_record_callback, ctx=ctx)
        return
    plan, layout, rev, actions = ctx.plan, ctx.layout, ctx.revision, ctx.actions
    assert plan and layout and rev
    restart_service(name=f"Restart {layout.service} on revision {rev}", layout=layout, rev=rev,
                    python=plan.python, gpu_indices=plan.gpus.indices)
    gate = python.call(name=f"Gate revision {rev} ({gate_where(ctx)})", function=_gate_callback, ctx=ctx,
                       _ignore_errors=True)
    mark_deployed(name=f"Mark revision {rev} deployed", layout=layout, rev=rev, _if=gate.did_succeed)
    if actions.prune:
        prune_revisions(name="Prune old revisions", layout=layout, revisions=actions.prune, _if=gate.did_succeed)
    rb = ctx.rollback
    if rb is not None:
        when = [gate.did_error, lambda: ctx.step == outcomes.ROLLBACK]
        swap_in(name=f"Roll back: restore revision {rb.target}", layout=layout, rev=rb.target,
                keys=tuple(FILE_NAMES), previous=rb.previous, clear_previous=rb.previous is None, _if=when)
        systemd.daemon_reload(name="Roll back: reload systemd units", _if=when)
        restart_service(name=f"Roll back: restart {layout.service} on revision {rb.target}", layout=layout,
                        rev=rb.target, python=plan.python, gpu_indices=plan.gpus.indices, _if=when)
        python.call(name=f"Roll back: confirm revision {rb.target} is ready", function=_confirm_callback, ctx=ctx,
                    _if=when, _ignore_errors=True)
    else:
        server.shell(name=f"No previous revision: stop {layout.service}",
                     commands=[f"systemctl stop {shlex.quote(layout.service + '.service')}"],
                     _if=[gate.did_error, lambda: ctx.step == outcomes.STOP])
    if results_file():
        python.call(name="Record the result", function=_record_callback, ctx=ctx, _if=gate.did_succeed)
    python.call(name=f"Fail {ctx.host.name}: gate of revision {rev}", function=_fail_callback, ctx=ctx,
                _if=gate.did_error)


# ---------------------------------------------------------------------------
# Result records: with SGLANG_DEPLOY_RESULTS=FILE in the controller's environment
# (set by `sglang-deploy rollout` for each wave), every host's outcome is appended
# to FILE as one JSON line. A plain `pyinfra INVENTORY deploy.py` writes none.
# ---------------------------------------------------------------------------

RESULTS_ENV = "SGLANG_DEPLOY_RESULTS"


def results_file() -> str | None:
    return os.environ.get(RESULTS_ENV) or None


def record_result(ctx: HostDeploy) -> None:
    path = results_file()
    if not path:
        return
    state = ctx.state
    old = (state.current or state.deployed) if state else None
    restarted = bool(ctx.actions and ctx.actions.restart) or bool(ctx.tp and ctx.ok and ctx.tp.restart_needed())
    record = outcomes.host_result(
        ctx.host.name, old_revision=ctx.rollback.target if ctx.rollback else old, new_revision=ctx.revision,
        restarted=restarted, outcome=ctx.outcome, step=ctx.step,
        rollback_ok=ctx.rollback_ok, report=ctx.report, error=ctx.error)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")


def _record_callback(state, host: Host, ctx: HostDeploy) -> bool:
    record_result(ctx)
    return True


# ---------------------------------------------------------------------------
# Gate callbacks: run at execute time (python.call), on the controller, with
# the host's connection for the host-side reads and writes.
# ---------------------------------------------------------------------------


def gate_url(ctx: HostDeploy) -> str:
    """What the controller measures: ``sglang_gate.url``, else the host's address and the port."""
    assert ctx.spec and ctx.plan
    if ctx.spec.gate.url:
        return ctx.spec.gate.url
    address = ctx.host.data.get("ssh_hostname") or ctx.host.name
    return _http_url(address, ctx.plan.intents["port"].value)


def on_host_url(plan: Plan) -> str:
    """What the gate measures on the host itself: the address the server binds (loopback for a wildcard)."""
    bind = str(plan.intents["host"].value or "").strip("[]")
    if bind in ("", "0.0.0.0"):
        bind = "127.0.0.1"
    elif bind == "::":
        bind = "::1"
    return _http_url(bind, plan.intents["port"].value)


def _http_url(address: str, port: Any) -> str:
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"
    return f"http://{address}:{port}"


def gate_where(ctx: HostDeploy) -> str:
    assert ctx.plan
    if ctx.gate_on_host:
        return f"on the host, {on_host_url(ctx.plan)}"
    return gate_url(ctx)


def _sh(host: Host, command: str) -> tuple[bool, str]:
    ok, output = host.run_shell_command(StringCommand(command), print_output=False, print_input=False)
    return ok, "\n".join(output.stdout_lines)


def unit_watch(host: Host, layout: Layout) -> SystemdWatch:
    """The service's unit, read over the host's SSH connection."""
    return SystemdWatch(lambda command: _sh(host, command)[1], f"{layout.service}.service")


def _unit_watch(host: Host, ctx: HostDeploy) -> SystemdWatch:
    """What the gate (and the rollback's confirmation) watches: the host's unit; at rank 0 of
    a multi-node tp group, every member's unit (tpgroup.GroupWatch)."""
    assert ctx.layout
    watch = unit_watch(host, ctx.layout)
    if ctx.tp is not None and ctx.tp.is_leader(ctx):
        return ctx.tp.watch(watch, lambda member: unit_watch(member.host, member.layout))
    return watch


def _history_path(layout: Layout) -> str:
    return layout.marker("history.jsonl")


def _append_history(host: Host, layout: Layout, entry: dict[str, Any]) -> None:
    line = json.dumps(entry, separators=(",", ":"), sort_keys=True, default=str)
    ok, _ = _sh(host, f"mkdir -p {shlex.quote(layout.state_dir)} && printf '%s\\n' {shlex.quote(line)} >> "
                      f"{shlex.quote(_history_path(layout))}")
    if not ok:
        host.log(f"could not append to {_history_path(layout)}", logger.warning)


def _plan_summary(ctx: HostDeploy) -> dict[str, Any]:
    plan = ctx.plan
    assert plan
    return {"model": plan.model_path, "hardware": _hardware(ctx), "argv": list(plan.argv)}


def _hardware(ctx: HostDeploy) -> str:
    g = ctx.plan.gpus  # type: ignore[union-attr]
    return outcomes.hardware_key(g.count, g.model, g.compute_capability)


def _gate_callback(state, host: Host, ctx: HostDeploy) -> bool:
    try:
        return _gate(host, ctx)
    except Exception as exc:  # noqa: BLE001 -- a bug here must read as the gate's failure, not a slow server
        ctx.outcome = outcomes.Outcome(outcomes.ERROR, f"gate could not measure: {type(exc).__name__}: {exc}")
        ctx.step = outcomes.next_step(ctx.outcome, ctx.rollback.target if ctx.rollback else None)
        host.log_styled(ctx.outcome.summary, fg="red", log_func=logger.error)
        return False


def _gate(host: Host, ctx: HostDeploy) -> bool:
    spec, plan, layout, rev = ctx.spec, ctx.plan, ctx.layout, ctx.revision
    assert spec and plan and layout and rev and ctx.files
    watch = _unit_watch(host, ctx)
    watch.failure()  # the unit as the restart left it
    on_host = ctx.gate_on_host
    report = (_gate_on_host if on_host else _gate_from_controller)(host, ctx, watch)
    down = report.get("service_failure")
    if down:
        failure, journal = down["reason"], down.get("journal") or ""
    else:
        # A crash right after the last request (or before the measurement began) fails it too.
        failure = watch.failure()
        journal = watch.journal() if failure or report.get("verdict") == "error" else ""
    report["gate_ran_on"] = "host" if on_host else "controller"
    ctx.report = report
    outcome = ctx.outcome = outcomes.classify(report, failure, journal, on_host=on_host)
    ctx.step = outcomes.next_step(outcome, ctx.rollback.target if ctx.rollback else None)
    _append_history(host, layout, outcomes.history_entry("gate", rev, outcome, report, _plan_summary(ctx),
                                                        plan.sglang_version))
    if outcome.passed:
        host.log_styled(f"gate passed: {outcome.summary}", fg="green", log_func=logger.info)
        return True
    host.log_styled(outcome.summary, fg="red", log_func=logger.error)
    return False


class HostGateDir:
    """A private temporary directory on the host holding the gate's zipapp (roles/gatezip.py);
    removed on exit. ``argv(args)`` is the zipapp's command line with the venv's Python in
    isolated mode (-I: no PYTHONPATH or user site; the zip is first on sys.path, so its
    libraries win over the venv's, while the venv's nvidia-ml-py stays reachable for NVML)."""

    def __init__(self, host: Host, python: str):
        self.host, self.python, self.path = host, python, ""

    def __enter__(self) -> HostGateDir:
        ok, out = _sh(self.host, "mktemp -d /tmp/sglang-gate.XXXXXXXX")
        self.path = out.strip()
        if not ok or not self.path.startswith("/tmp/sglang-gate."):
            raise GateError("on-host gate", "cannot make a temporary directory on the host")
        self.put("gate.pyz", gatezip.build())
        return self

    def put(self, name: str, data: bytes) -> str:
        """A file in the directory (mode 0600: the directory is the controller's alone)."""
        remote = f"{self.path}/{name}"
        _sh(self.host, f"umask 077 && : > {shlex.quote(remote)}")
        self.host.put_file(BytesIO(data), remote, print_output=False, print_input=False)
        return remote

    def argv(self, *args: str) -> list[str]:
        return [self.python, "-I", f"{self.path}/gate.pyz", *args]

    def __exit__(self, *exc: object) -> None:
        if self.path.startswith("/tmp/sglang-gate."):
            _sh(self.host, f"rm -rf {shlex.quote(self.path)}")


def _gate_from_controller(host: Host, ctx: HostDeploy, watch: SystemdWatch) -> dict[str, Any]:
    """The gate in this process against the host's port; the unit watched over SSH, and
    the service's GPUs sampled on the host meanwhile (`sample-gpus` from the zipapp) for
    the likely causes of a slow result."""
    spec, plan, layout = ctx.spec, ctx.plan, ctx.layout
    assert spec and plan and layout
    g = spec.gate
    with tempfile.TemporaryDirectory(prefix="sglang-gate-") as tmp:
        baseline = Path(tmp) / "history.jsonl"
        _, history = _sh(host, f"tail -n 500 {shlex.quote(_history_path(layout))} 2>/dev/null; true")
        baseline.write_text(history + "\n" if history else "", encoding="utf-8")
        opts = CheckOptions(url=gate_url(ctx), target_tok_s=spec.target_tok_s, baseline=str(baseline),
                            tolerance=g.tolerance, expect_plan=plan.as_dict(),
                            fail_on=parse_fail_on(",".join(g.fail_on) if g.fail_on else None),
                            ready_timeout=g.ready_timeout_s, repeats=g.repeats, max_tokens=g.max_tokens,
                            api_key=ctx.api_key, hardware=_hardware(ctx), watch=watch)
        with contextlib.ExitStack() as stack:
            try:
                remote: HostGateDir | None = stack.enter_context(HostGateDir(host, plan.python))
            except GateError as exc:  # no GPU samples then; the gate itself does not need the host
                remote, samples = None, json.dumps({"samples": None, "error": exc.message})
            if remote is not None:
                sampler = remote.argv("sample-gpus", "--out", f"{remote.path}/nvml.json", "--until-file",
                                      f"{remote.path}/stop", "--max-seconds", str(g.ready_timeout_s + 1800),
                                      "--indices", ",".join(str(i) for i in plan.gpus.indices))
                _sh(host, f"nohup {shlex.join(sampler)} >/dev/null 2>&1 </dev/null &")
            try:
                report = run_check(opts, progress=lambda msg: host.log(f"gate: {msg}"))
            finally:
                if remote is not None:
                    q = shlex.quote
                    _, samples = _sh(host, f"touch {q(remote.path)}/stop; for i in $(seq 50); do "
                                           f"test -e {q(remote.path)}/nvml.json && break; sleep 0.1; done; "
                                           f"cat {q(remote.path)}/nvml.json 2>/dev/null")
    try:
        recorded = json.loads(samples)
    except ValueError:
        recorded = {"samples": None, "error": "the sampler left no samples"}
    if recorded.get("error"):
        report.setdefault("warnings", []).append(f"no GPU samples from the host: {recorded['error']}")
    elif recorded.get("samples") is not None and report.get("verdict") in ("pass", "fail"):
        explain_slow(report, recorded["samples"], plan.as_dict())
    return report


def _gate_on_host(host: Host, ctx: HostDeploy, watch: SystemdWatch) -> dict[str, Any]:
    """The same gate, run on the GPU host from the zipapp: for a server bound to loopback.
    It watches the unit there itself and samples NVML (clocks, throttling, memory, other
    processes) for the likely causes; the plan, and the API key (a 0600 file, never
    argv), go into a private temporary directory that is removed afterwards."""
    spec, plan, layout = ctx.spec, ctx.plan, ctx.layout
    assert spec and plan and layout
    g = spec.gate
    with HostGateDir(host, plan.python) as remote:
        argv = remote.argv("check", "--url", on_host_url(plan), "--nvml",
                           "--expect", remote.put("plan.json", json.dumps(plan.as_dict()).encode()),
                           "--baseline", _history_path(layout), "--tolerance", str(g.tolerance),
                           "--ready-timeout", str(g.ready_timeout_s), "--repeats", str(g.repeats),
                           "--max-tokens", str(g.max_tokens), "--hardware", _hardware(ctx), "--watch-unit", watch.unit,
                           "--json", f"{remote.path}/report.json")
        if spec.target_tok_s is not None:
            argv += ["--target", str(spec.target_tok_s)]
        if g.fail_on:
            argv += ["--fail-on", ",".join(g.fail_on)]
        if ctx.api_key:
            argv += ["--api-key-file", remote.put("key", ctx.api_key.encode())]
        members = None
        if isinstance(watch, tpgroup.GroupWatch):
            # The gate there watches rank 0's unit; the other members' units are read from here,
            # and a failure among them ends that gate through this file.
            abort = f"{remote.path}/abort"
            argv += ["--abort-file", abort]

            def write_abort(text: str) -> None:  # whole, or not at all: written aside, then renamed
                _sh(host, f"mv {shlex.quote(remote.put('abort.new', text.encode()))} {shlex.quote(abort)}")

            members = gevent.spawn(watch.abort_when_a_member_fails, write_abort)
        host.log(f"gate: on the host, {on_host_url(plan)} (up to {g.ready_timeout_s:g} s for readiness)")
        try:
            _, output = _sh(host, shlex.join(argv) + " >/dev/null 2>&1; echo \"exit=$?\"; "
                                  f"cat {shlex.quote(remote.path)}/report.json 2>/dev/null")
        finally:
            if members is not None:
                members.kill()
    head, _, body = output.partition("\n")
    try:
        return json.loads(body)
    except ValueError:
        return error_report(CheckOptions(url=on_host_url(plan)), GateError(
            "on-host gate", f"the gate on the host left no report ({head.strip() or 'no exit status'}); "
                            f"run {plan.python} -I gate.pyz check by hand to see why"))


def _confirm_callback(state, host: Host, ctx: HostDeploy) -> bool:
    """Readiness of the restored revision (no measurement); marks it deployed when ready."""
    layout, rb, plan = ctx.layout, ctx.rollback, ctx.plan
    assert layout and rb and plan and ctx.spec
    watch = _unit_watch(host, ctx)
    try:
        watch.failure()
        if ctx.gate_on_host:
            ready = _ready_on_host(host, ctx, watch)
        else:
            headers = {"Authorization": f"Bearer {ctx.api_key}"} if ctx.api_key else {}
            with httpx.Client(base_url=gate_url(ctx), headers=headers, trust_env=False) as client:
                ready = wait_ready(client, ctx.spec.gate.ready_timeout_s, lambda msg: host.log(f"rollback: {msg}"),
                                   watch=watch.check)["ready_s"]
        outcome = outcomes.Outcome(outcomes.PASS, f"ready again after {ready:g} s")
    except ServiceDown as exc:
        outcome = outcomes.classify(None, exc.reason, exc.journal)
    except GateError as exc:
        outcome = outcomes.Outcome(outcomes.NOT_READY, f"not ready: {exc.message}")
    except Exception as exc:  # noqa: BLE001
        outcome = outcomes.Outcome(outcomes.ERROR, f"readiness check failed: {type(exc).__name__}: {exc}")
    ctx.rollback_ok = outcome.passed
    if outcome.passed:
        _sh(host, f"echo {shlex.quote(rb.target)} > {shlex.quote(layout.marker('deployed'))}")
        ctx.rollback_result = outcome.summary + ", marked deployed"
    else:
        _sh(host, f"rm -f {shlex.quote(layout.marker('deployed'))}")
        ctx.rollback_result = f"the restored revision is not healthy either: {outcome.summary}"
    _, version = _sh(host, f"cat {shlex.quote(layout.revision_dir(rb.target))}/version 2>/dev/null; true")
    _append_history(host, layout, outcomes.history_entry("rollback", rb.target, outcome, None,
                                                        {"rolled_back_from": ctx.revision},
                                                        version or plan.sglang_version))
    return outcome.passed


def _ready_on_host(host: Host, ctx: HostDeploy, watch: SystemdWatch) -> float:
    """Seconds until the server answers on the host (curl there), watching the unit; raises
    GateError after the ready timeout, ServiceDown when the unit goes down."""
    assert ctx.plan and ctx.spec
    url, timeout = on_host_url(ctx.plan), ctx.spec.gate.ready_timeout_s
    t0 = time.monotonic()
    while True:
        ok, _ = _sh(host, f"{shlex.quote(ctx.plan.python)} -I -S -c {shlex.quote(_HEALTH_PY)} {shlex.quote(url)}")
        if ok:
            return round(time.monotonic() - t0, 3)
        watch.check(force=True)
        if time.monotonic() - t0 > timeout:
            raise GateError("ready", f"the server never became ready within {timeout:g} s ({url} on the host)")
        time.sleep(1.0)


# Ready as the gate means it: /health_generate answers 200 (/health where the server has no such path).
_HEALTH_PY = """import sys, urllib.error, urllib.request
for path in ("/health_generate", "/health"):
    try:
        urllib.request.urlopen(sys.argv[1] + path, timeout=10)
        sys.exit(0)
    except urllib.error.HTTPError as exc:
        if exc.code not in (404, 405):
            sys.exit(1)
    except Exception:
        sys.exit(1)
sys.exit(1)
"""


def _fail_callback(state, host: Host, ctx: HostDeploy) -> bool:
    assert ctx.layout and ctx.revision
    outcome = ctx.outcome or outcomes.Outcome(outcomes.ERROR, "gate could not measure: the gate did not report")
    message = outcomes.failure_message(ctx.layout.service, ctx.revision, outcome, ctx.step or "",
                                      ctx.rollback.target if ctx.rollback else None, ctx.rollback_result)
    for line in message.splitlines():
        host.log_styled(line, fg="red", log_func=logger.error)
    record_result(ctx)
    return False


# ---------------------------------------------------------------------------
# Multi-node tp groups (roles/tpgroup.py): the members deploy as one unit.
# ---------------------------------------------------------------------------


def _restart_group(ctx: HostDeploy) -> None:
    """restart() for a member of a multi-node tp group. The members restart together, or
    none does (whenever any member's revision is not deployed); rank 0 is stopped first
    (SGLang's other ranks stop on its shutdown broadcast and ignore SIGTERM). The group is
    gated once, at rank 0, while that gate watches every member's unit; then every member
    is marked deployed, or every member rolls back (each to its previous revision; rank 0
    confirms readiness for the group), or, when some member has no previous revision,
    every member stops. Every operation is the same on every member (conditions decide at
    run time), so the members' operations line up."""
    tp, plan, layout, rev, actions = ctx.tp, ctx.plan, ctx.layout, ctx.revision, ctx.actions
    assert tp and plan and layout and rev and actions
    leader = tp.is_leader(ctx)
    needed = tp.restart_needed

    def step_is(step: str):
        return lambda: tp.step == step

    def is_leader() -> bool:
        return leader

    if results_file():
        python.call(name="Record the result (unchanged)", function=_record_callback, ctx=ctx,
                    _if=lambda: not needed())
    stop_service(name=f"Stop {layout.service} at rank 0 of tp group {tp.name} first ({tp.leader})", layout=layout,
                 _if=[needed, is_leader])
    restart_service(name=f"Restart {layout.service} on revision {rev} (tp group {tp.name}, every member)",
                    layout=layout, rev=rev, python=plan.python, gpu_indices=plan.gpus.indices, stop=not leader,
                    _if=needed)
    python.call(name=f"Gate tp group {tp.name} once, at rank 0 ({tp.leader})", function=_group_gate_callback,
                ctx=ctx, _if=needed, _ignore_errors=True)
    mark_deployed(name=f"Mark revision {rev} deployed (tp group {tp.name} passed)", layout=layout, rev=rev,
                  _if=[needed, tp.passed])
    if actions.prune:
        prune_revisions(name="Prune old revisions", layout=layout, revisions=actions.prune, _if=[needed, tp.passed])
    rb = ctx.rollback
    if rb is not None:
        when = [needed, step_is(outcomes.ROLLBACK)]
        swap_in(name=f"Roll back: restore revision {rb.target}", layout=layout, rev=rb.target,
                keys=tuple(FILE_NAMES), previous=rb.previous, clear_previous=rb.previous is None, _if=when)
        systemd.daemon_reload(name="Roll back: reload systemd units", _if=when)
        stop_service(name=f"Roll back: stop {layout.service} at rank 0 of tp group {tp.name} first", layout=layout,
                     _if=[*when, is_leader])
        restart_service(name=f"Roll back: restart {layout.service} on revision {rb.target} (every member)",
                        layout=layout, rev=rb.target, python=plan.python, gpu_indices=plan.gpus.indices,
                        stop=not leader, _if=when)
        python.call(name=f"Roll back: confirm tp group {tp.name} is ready at rank 0 ({tp.leader})",
                    function=_group_confirm_callback, ctx=ctx, _if=when, _ignore_errors=True)
    server.shell(name=f"No previous revision on every member of tp group {tp.name}: stop {layout.service}",
                 commands=[f"systemctl stop {shlex.quote(layout.service + '.service')}"],
                 _if=[needed, step_is(outcomes.STOP)])
    if results_file():
        python.call(name="Record the result", function=_record_callback, ctx=ctx, _if=[needed, tp.passed])
    python.call(name=f"Fail {ctx.host.name}: tp group {tp.name}, revision {rev}", function=_group_fail_callback,
                ctx=ctx, _if=[needed, lambda: not tp.passed()])


def _group_fail_now(host: Host, ctx: HostDeploy, message: str) -> bool:
    ctx.error = message
    host.log_styled(message, fg="red", log_func=logger.error)
    record_result(ctx)
    return False


def _group_check_callback(state, host: Host, ctx: HostDeploy) -> bool:
    """Before anything changes: every member is in this run, plannable, and alike."""
    assert ctx.tp
    problem = ctx.tp.problem()
    if problem is None:
        return True
    return _group_fail_now(host, ctx, f"tp group {ctx.tp.name}: {problem}; nothing was changed on any member")


def _group_barrier_callback(state, host: Host, ctx: HostDeploy) -> bool:
    """Before any member's files go live: no member failed to install, stage or prove."""
    assert ctx.tp
    failed = ctx.tp.failed_members()
    if not failed:
        return True
    return _group_fail_now(host, ctx, f"tp group {ctx.tp.name}: member(s) {', '.join(failed)} failed before the "
                                      f"swap (see their lines above); revision {ctx.revision} is made live on no "
                                      "member, the running service is untouched")


def _wait_s(ctx: HostDeploy) -> float:
    """How long a follower waits for rank 0: readiness plus a generous measurement."""
    return (ctx.spec.gate.ready_timeout_s if ctx.spec else 900.0) + 3600.0


def _group_gate_callback(state, host: Host, ctx: HostDeploy) -> bool:
    """Rank 0 runs the gate (watching every member); the followers wait for its verdict,
    adopt it and record it in their own history (no figures: measured at rank 0)."""
    tp, layout = ctx.tp, ctx.layout
    assert tp and layout and ctx.plan
    if tp.is_leader(ctx):
        _gate_callback(state, host, ctx)
        tp.gate_report = ctx.report
        tp.decide(ctx.outcome or outcomes.Outcome(outcomes.ERROR, "gate could not measure: the gate did not report"))
        ctx.step = tp.step
    else:
        if not tp.wait_for("verdict", _wait_s(ctx), "gate the group") and tp.verdict is None:
            tp.decide(outcomes.Outcome(outcomes.CRASHED, f"rank 0 ({tp.leader}) failed in this run before it gated "
                                                       "the group"))
        verdict = tp.verdict
        assert verdict is not None
        ctx.outcome = outcomes.Outcome(verdict.kind, f"tp group {tp.name}, gated at rank 0 ({tp.leader}): "
                                                    f"{verdict.summary}")
        ctx.step = tp.step
        _append_history(host, layout, tpgroup.member_history(tp, ctx, verdict))
        if verdict.passed:
            host.log_styled(f"tp group {tp.name} passed at rank 0 ({tp.leader})", fg="green", log_func=logger.info)
        else:
            host.log_styled(ctx.outcome.summary.splitlines()[0], fg="red", log_func=logger.error)
    return tp.passed()


def _group_confirm_callback(state, host: Host, ctx: HostDeploy) -> bool:
    """After the group's rollback: rank 0 confirms readiness (watching every member); the
    followers adopt its answer, mark the restored revision deployed (or not) and record it."""
    tp, layout, rb = ctx.tp, ctx.layout, ctx.rollback
    assert tp and layout and rb and ctx.plan
    if tp.is_leader(ctx):
        ok = _confirm_callback(state, host, ctx)
        tp.rollback_outcome = outcomes.Outcome(outcomes.PASS if ok else outcomes.NOT_READY,
                                              ctx.rollback_result or "no answer")
        return ok
    if not tp.wait_for("rollback_outcome", _wait_s(ctx), "confirm the rollback") and tp.rollback_outcome is None:
        tp.rollback_outcome = outcomes.Outcome(outcomes.ERROR, f"rank 0 ({tp.leader}) could not confirm the rollback")
    outcome = tp.rollback_outcome
    assert outcome is not None
    ctx.rollback_ok = outcome.passed
    if outcome.passed:
        _sh(host, f"echo {shlex.quote(rb.target)} > {shlex.quote(layout.marker('deployed'))}")
        ctx.rollback_result = f"tp group {tp.name} ready again at rank 0 ({tp.leader}), marked deployed"
    else:
        _sh(host, f"rm -f {shlex.quote(layout.marker('deployed'))}")
        ctx.rollback_result = (f"the restored revision of tp group {tp.name} is not healthy at rank 0 either: "
                               f"{outcome.summary}")
    _, version = _sh(host, f"cat {shlex.quote(layout.revision_dir(rb.target))}/version 2>/dev/null; true")
    _append_history(host, layout, outcomes.history_entry(
        "rollback", rb.target, outcomes.Outcome(outcome.kind, f"tp group {tp.name}, confirmed at rank 0 "
                                                             f"({tp.leader}): {outcome.summary}"),
        None, {"rolled_back_from": ctx.revision, "tp_group": tp.name}, version or ctx.plan.sglang_version))
    return outcome.passed


def _group_fail_callback(state, host: Host, ctx: HostDeploy) -> bool:
    """The member's failure line; says so when it was stopped because another member had no
    previous revision to go back to."""
    tp = ctx.tp
    assert tp and ctx.layout and ctx.revision
    without = [h for h, member in tp.ctxs.items() if member.rollback is None]
    if tp.step != outcomes.STOP or not without or host.name in without:
        return _fail_callback(state, host, ctx)
    outcome = ctx.outcome or outcomes.Outcome(outcomes.ERROR, "the gate did not report")
    message = (f"revision {ctx.revision} of {ctx.layout.service}: {outcome.summary}\n-> not rolled back: member(s) "
               f"{', '.join(without)} of tp group {tp.name} have no previous revision, and no member serves alone: "
               f"{ctx.layout.service} was stopped on every member")
    for line in message.splitlines():
        host.log_styled(line, fg="red", log_func=logger.error)
    record_result(ctx)
    return False
