"""The deploy's roles, called in order by deploy_current_host() (deploy.py). Thin: facts in, core decides,
operations out.

    ctx = prepare(host)   # probe + state facts, plan, render, decide
    install(ctx)          # venv + pinned SGLang
    configure(ctx)        # stage files aside, prove argv
    go_live(ctx)          # in the host's restart step: out of its gateways, swap in, reload, enable
    restart(ctx)          # only when the deployed revision is not this one; then the gate:
                          # pass -> mark deployed; fail -> roll back (or stop) and fail the host
    watch(ctx)            # sglang_watch: the continuous check's units and files (or their removal)

A host whose data, probe or secrets are wrong gets a single failing operation
that says why, before anything on it changes. The gate's callbacks are in
sglang_deploy/deploy/gating.py, a multi-node tp group's restart in sglang_deploy/deploy/group_deploy.py.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from typing import Any, Callable, Mapping

from pyinfra import host as current_host  # pyinfra's context: the host being deployed now
from pyinfra.api import deploy
from pyinfra.api.host import Host
from pyinfra.context import ContextObject
from pyinfra.operations import python, server, systemd

from sglang_deploy.deploy import (cache_seed, caches, calibration, gateway, gateway_deploy, gating, group_deploy,
                                  restart_run, restart_steps, tpgroup, tuning, watching)
from sglang_deploy.deploy.context import HostDeploy, Prepared
from sglang_deploy.deploy.facts import DeployState, GpuProbe, ReplicaUnits, StartHistory
from sglang_deploy.deploy.inventory import data_layers
from sglang_deploy.deploy.model_metadata import facts_for_specs
from sglang_deploy.deploy.proof import proof_options
from sglang_deploy.deploy.operations import (install_sglang, install_transfer_engine, mark_deployed, prove_argv,
                                             prune_revisions, restart_service, stage_revision, stop_service, swap_in)
from sglang_deploy.deploy.restart_run import RestartRun
from sglang_deploy.deploy.results import record_callback, record_result, results_file
from sglang_deploy.deploy.rollback import roll_back
from sglang_deploy.deploy.secrets import read_secrets
from sglang_deploy.deploy.tuning import records_for, trial_for
from sglang_deploy.deploy.weights import prune_command, run_callback, stage_command, sync_callback, weights_for
from sglang_deploy.errors import PlanError
from sglang_deploy.lifecycle import drain, retire, rollback_policy
from sglang_deploy.plan import replicas, start_budget
from sglang_deploy.plan.calibration import calibrate_plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.lifecycle.revision import FILE_NAMES, Layout, decide, revision_id
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.untrusted import printable
from sglang_deploy.plan.spec import DeploySpec, IntentSetting, build_spec
from sglang_deploy.plan.tpgroups import group_name
from sglang_deploy.plan.tuning_record import hardware_class
from sglang_deploy.runcontext import RunContextError
from sglang_deploy.runcontext import from_environ as run_context
from sglang_deploy.tuning.space import SpaceError, load_space, space_as_dict, space_for_plan


def prepare(host: Host) -> list[HostDeploy]:
    """Gather facts and let the core plan and decide; errors become a failing operation. One
    context for the host's server, or, for a host whose data-parallel replicas are workers of a
    gateway (``plan.replicas``), one per replica, in order."""
    # The Host itself, not pyinfra's context proxy (``from pyinfra import host``), which at execute
    # time means whichever host runs: a tp group's rank 0 reads its members' units through theirs.
    host = host._get_module() if isinstance(host, ContextObject) else host
    ctx = HostDeploy(host=host)
    ctxs = [ctx]
    try:
        group_data, host_data = data_layers(host)
        group = group_name(group_data, host_data)
        if group is not None:
            ctx.tp = tpgroup.join(host, group)
        spec = build_spec(host.name, group_data, host_data)
        ctx.prepared = _plan(ctx, spec)
        data = {**group_data, **host_data}
        ctx.gateway = gateway.worker_run(host, data, ctx.prepared, ctx.tp.leader if ctx.tp is not None else None)
        # A tuning trial's layout is one server's (the trial layer sets its dp_size above the host's):
        # its host is not split, and nothing of it is retired while the tuner owns it.
        trial = tuning.current_trial(host.name) is not None
        specs = replicas.replica_specs(spec, ctx.prepared.plan) if ctx.gateway is not None and not trial else (spec,)
        state_file = tuning.state_file()
        if state_file:
            if len(specs) > 1:
                raise PlanError(host.name, "sglang_gateways", f"its {len(specs)} data-parallel replicas are separate "
                                                              "workers of its gateways; tune tries one server's "
                                                              "layouts: tune the host without sglang_gateways")
            # The tuner's precheck: what the host runs and what this inventory plans for it; nothing changes.
            _record_state(ctx, ctx.prepared, state_file)
            ctx.prepared = None
            return ctxs
        if len(specs) > 1:
            replicas.check_worker_url(host.name, data, len(specs))
            ctxs = []
            for i, replica_spec in enumerate(specs):
                one = HostDeploy(host=host, replica=i, replicas=len(specs))
                one.prepared = _plan(one, replica_spec)
                one.gateway = gateway.worker_run(host, data, one.prepared)
                ctxs.append(one)
        if ctx.tp is None and not trial:
            ctxs[0].retire = _retired(host, data, spec, ctxs)
        for one in ctxs:
            if one.prepared is not None:
                _say_plan(one, one.prepared)
        if ctx.gateway is not None:
            restart_steps.run_steps(host)  # the fleet's max_unavailable, checked here: a wrong one fails the host now
    except PlanError as exc:
        ctx.error = str(exc)
        ctxs = [ctx]
        record_result(ctx)
        # One failing operation that says why: the host stops before anything on it changes.
        server.shell(name="Plan SGLang for this host",
                     commands=[f"printf '%s\\n' {shlex.quote(ctx.error)} >&2; exit 1"])
    if ctx.tp is not None:
        ctx.tp.register(ctx)
        if ctx.ok:
            # Decided when it executes, once every member's prepare has run (their probes,
            # their plans): a group that cannot deploy whole stops before anything changes.
            python.call(name="Check the tp group: every member here and alike",
                        function=group_deploy.check_callback, ctx=ctx, tp=ctx.tp)
    return ctxs


def _retired(host: Host, data: Mapping[str, Any], spec: DeploySpec,
             ctxs: list[HostDeploy]) -> tuple[tuple[retire.Retired, Layout, str | None, Any], ...]:
    """The host's replica units that must stop before its first replica goes live
    (``retire.stale_units``: those the plan no longer runs, and those whose GPUs or port a replica
    restarted before them takes): each with its layout, the URL its gateways know it at (None: no
    gateway now, or one URL for the host) and its continuous check's files."""
    base = spec.service.name
    plans = [one.prepared.plan for one in ctxs if one.prepared is not None]
    planned = [(plan.gpus.indices, int(plan.intents["port"].value)) for plan in plans]
    found = host.get_fact(ReplicaUnits, service=base, config_dir=spec.service.config_dir)
    out = []
    for retired in retire.stale_units(base, found, planned):
        layout = Layout.of(dataclasses.replace(spec.service, name=retired.unit), plans[0].nccl_conf_path)
        url = None
        if retired.port is not None and data.get("sglang_gateways") and data.get("sglang_worker_url") is None:
            url = gateway.replica_url(host, data, retired.port)
        have = host.get_fact(watching.WatchState, service=retired.unit, state_dir=layout.state_dir) or {}
        out.append((retired, layout, url, have))
    return tuple(out)


def _probe(host: Host, spec: DeploySpec) -> dict[str, Any]:
    """The GPU probe, with SGLang's own P2P results where they live: the cache directory (0.5.15
    and later), the service user's ~/.cache/sglang (0.5.9: its home is the workdir)."""
    return host.get_fact(GpuProbe, cache_root=spec.cache_dir, home_cache=f"{spec.service.workdir}/.cache/sglang")


def _plan(ctx: HostDeploy, spec: DeploySpec) -> Prepared:
    """Probe, plan, render and decide for one host; PlanError says what is wrong."""
    host = ctx.host
    node = ctx.tp.node(host.name) if ctx.tp is not None else None
    probe = _probe(host, spec)
    if "error" in probe:
        raise PlanError(host.name, "GPU probe", probe["error"])
    secrets = read_secrets(host.name, spec.secrets)
    facts = facts_for_specs([spec])[host.name]   # once per model for the whole run (memoized)
    records = records_for(host.name, host.groups)  # once per file for the whole run (memoized)
    trial = trial_for(host.name)  # a tuning run's trial, for the hosts it names
    plan = plan_host(spec, probe=probe, node=node, facts=facts, weights=weights_for(spec, secrets, facts),
                     tuning=records, trial=trial)
    # the prediction calibrated by the fleet's passing gates beside the inventory (once per file content)
    plan = calibrate_plan(plan, calibration.load(calibration.samples_file(host.groups)))
    for warning in plan.warnings:  # what `plan` prints, said where the probed hardware is planned
        host.log(printable(f"plan: {warning}"))
    layout = Layout.of(plan.service, plan.nccl_conf_path)
    state = host.get_fact(DeployState, layout=layout, python=plan.python, user=plan.service.user,
                          group=plan.service.group, workdir=plan.service.workdir)
    if not state.systemd:
        raise PlanError(host.name, "systemd", "this host does not run systemd; the service cannot be installed")
    files = render(plan, secrets)
    rev = revision_id(files, plan.sglang_version)
    actions = decide(state, files, rev, plan.sglang_version)
    rollback = rollback_policy.rollback_plan(state, actions, rev)
    if ctx.tp is not None and state.current == rev == state.deployed and rev in state.staged:
        # A member whose own revision is deployed already restarts with its group all the same;
        # if the group fails, it goes back to that revision (restarted with the others).
        rollback = rollback_policy.RollbackPlan(target=rev, previous=state.previous)
    where = start_budget.weights_dir(plan)
    learnt = host.get_fact(StartHistory, history=gating.history_path(layout),
                           cache_dir=plan.caches.dir if plan.caches is not None else None, weights_dir=where)
    disk = start_budget.disk_class(**learnt["disk"]) if where else "unknown"
    seed = cache_seed.decide(plan, learnt["caches"])
    taken = seed.take if seed is not None else None
    budget = start_budget.choose(plan, spec.gate.ready_timeout_s, spec.service.timeout_start_s, learnt["entries"],
                                 learnt["caches"], gating.hardware(plan), disk,
                                 seeded=(taken.source_host, taken.start_s) if taken and taken.start_s else None)
    return Prepared(spec=spec, plan=plan, files=files, revision=rev, layout=layout, state=state, actions=actions,
                    rollback=rollback, api_key=secrets.get("SGLANG_API_KEY"), start_budget=budget, seed=seed)


def _replan(ctx: HostDeploy, spec: DeploySpec) -> Callable[[Mapping[str, Any]], Plan]:
    """This host planned again with a layout (tp_size, dp_size, attn_dp_size) as a trial: the tuning
    space holds only the layouts whose plan the planner accepts (PlanError: refused)."""
    host = ctx.host
    node = ctx.tp.node(host.name) if ctx.tp is not None else None
    facts = facts_for_specs([spec])[host.name]

    def replan(layout: Mapping[str, Any]) -> Plan:
        trial = {k: IntentSetting(v, "a layout the tuner may try") for k, v in layout.items()}
        return plan_host(spec, probe=_probe(host, spec), node=node, facts=facts,
                         weights=weights_for(spec, read_secrets(host.name, spec.secrets), facts),
                         tuning=records_for(host.name, host.groups), trial=trial)
    return replan


def _record_state(ctx: HostDeploy, p: Prepared, path: str) -> None:
    """One JSON line: the host's revisions (running, deployed, previous), the one planned, the plan,
    its hardware class and the tuning space of its plan (``--space`` applied)."""
    state, host = p.state, ctx.host
    try:
        space = space_for_plan(p.plan, replan=_replan(ctx, p.spec))
        space_file = tuning.space_file()
        if space_file:
            space = load_space(space_file, space)
    except SpaceError as exc:
        raise PlanError(host.name, "--space", str(exc)) from None
    line = {"host": host.name, "current": state.current, "deployed": state.deployed,
            "previous": state.previous, "planned": p.revision, "sglang_version": p.plan.sglang_version,
            "tp_group": ctx.tp.name if ctx.tp is not None else None, "plan": p.plan.as_dict(),
            "hardware_class": hardware_class(p.plan).as_dict(), "space": space_as_dict(space)}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line, sort_keys=True, default=str) + "\n")


def _say_plan(ctx: HostDeploy, p: Prepared) -> None:
    """This host's part of the run, in its own line: operation names are shared by every host
    (pyinfra's results table merges them), so what differs per host is said here."""
    state, host = p.state, ctx.host
    line = (f"revision {p.revision} (SGLang {p.plan.sglang_version} in {p.plan.venv}); running "
            f"{state.current or 'none'}, deployed {state.deployed or 'none'}")
    if ctx.replicas > 1:
        line = (f"replica {ctx.replica} of {ctx.replicas} ({p.layout.service}, port {p.plan.intents['port'].value}, "
                f"GPUs {','.join(map(str, p.plan.gpus.indices))}): " + line)
    if p.plan.weights is not None:
        line += f"; weights: {p.plan.weights.origin}"
    if ctx.tp is not None:
        line += (f"; tp group {ctx.tp.name}, node rank {ctx.tp.rank(host.name)}: restarts with the group when any "
                 "member's revision is not deployed")
    elif p.actions.restart:
        line += f"; restart, gate {gating.gate_where(host, p)}, " + (
            f"a failed gate rolls back to {p.rollback.target}" if p.rollback else "no revision to roll back to")
    else:
        line += "; no restart"
    host.log(line)


def _regate_failed(state, host: Host, ctx: HostDeploy) -> bool:
    outcome = ctx.gate.outcome
    ctx.error = f"the running revision failed its gate: {outcome.summary if outcome else gating.NO_REPORT}"
    gating.fail_host(host, ctx, ctx.error)
    return False


@deploy("Install SGLang")
def install(ctx: HostDeploy) -> None:
    p = ctx.prepared
    if p is None or not ctx.ok or ctx.replica > 0:  # the host's replicas share the first one's venv
        return
    plan, pip = p.plan, p.spec.install
    install_sglang(
        name="Install the pinned SGLang into its virtualenv",
        venv=plan.venv,
        version=plan.sglang_version,
        extras=pip.extras,
        index_url=pip.index_url,
        extra_index_urls=pip.extra_index_urls,
        find_links=pip.find_links,
        no_index=pip.no_index,
        installed_version=p.state.installed_version,
        installer=pip.installer,
    )
    engine = plan.transfer_engine  # a prefill or decode server's (plan/transfer.py)
    if engine is not None:
        install_transfer_engine(
            name="Install the KV transfer engine into the SGLang virtualenv",
            venv=plan.venv, engine=engine, index=(pip.index_url, pip.extra_index_urls, pip.find_links, pip.no_index),
            installer=pip.installer)


@deploy("Configure the SGLang service")
def configure(ctx: HostDeploy) -> None:
    p = ctx.prepared
    if p is None or not ctx.ok:
        return
    plan, actions, layout, rev = p.plan, p.actions, p.layout, p.revision
    if actions.account and ctx.replica == 0:  # one account for the host's replicas
        server.group(name="Service group", group=plan.service.group, system=True)
        server.user(name="Service user", user=plan.service.user, group=plan.service.group, system=True,
                    home=plan.service.workdir, shell="/usr/sbin/nologin", create_home=False)
        server.shell(name="Working directory", commands=[
            f"install -d -m 0750 -o {shlex.quote(plan.service.user)} -g {shlex.quote(plan.service.group)} "
            f"{shlex.quote(plan.service.workdir)}"])
    if actions.stage:
        stage_revision(name="Stage the new revision aside", layout=layout, rev=rev, files=p.files, argv=plan.argv,
                       sglang_version=plan.sglang_version)
    weights = plan.weights if ctx.replica == 0 else None  # one snapshot for the host's replicas
    staging = actions.restart or actions.stage or ctx.tp is not None
    if weights is not None and staging and weights.source == "controller":
        python.call(name="Copy the model's weights from the controller, verified", function=sync_callback,
                    weights=weights, python=plan.python, owner=f"{plan.service.user}:{plan.service.group}")
    elif weights is not None and (staging or weights.verify):
        # sglang_weights_verify: even with nothing else to do, the stager re-hashes the served
        # snapshot; a bad file is fetched into its partial file and renamed over the blob (a new
        # inode: the running server's open files and loaded weights are untouched, so it keeps
        # serving, and no stop is needed); the next restart, through the gate, loads the good file.
        command = stage_command(weights, python=plan.python, env_file=f"{layout.revision_dir(rev)}/"
                                f"{FILE_NAMES['env']}", owner=f"{plan.service.user}:{plan.service.group}",
                                host_name=ctx.host.name, caches=plan.caches)
        if command is not None:
            python.call(name="Put the model's weights on the host, verified", function=run_callback,
                        command=command)
    if plan.caches is not None and staging and ctx.replica == 0:  # before the restart, kept across it
        server.shell(name="Make the SGLang version's compile-cache directory",
                     commands=[caches.ensure_command(plan.caches, plan.service)])
        seed = p.seed
        if seed is not None and seed.take is not None and actions.restart:
            python.call(name="Seed the compile caches from the first host of this class",
                        function=cache_seed.import_callback, p=p, seed=seed)
        elif seed is not None and seed.note and actions.restart:
            python.call(name="Say why the compile caches are not seeded", function=cache_seed.say_callback,
                        text=seed.note)
    if actions.stage or actions.install or actions.swap:
        prove_argv(name="Prove the launch flags with the installed SGLang",
                   layout=layout, rev=rev, python=plan.python, options=proof_options(plan))
    if ctx.tp is not None:
        # Installed, staged and proven on every member, or made live on none.
        python.call(name="Check the tp group: every member staged and proven",
                    function=group_deploy.barrier_callback, ctx=ctx, tp=ctx.tp, p=p)
        python.call(name="Check the tp group can meet: its interfaces, rank 0's rendezvous port reached",
                    function=group_deploy.preflight_callback, ctx=ctx, tp=ctx.tp, p=p)
        python.call(name="Check the tp group can meet: every member's findings",
                    function=group_deploy.decide_callback, ctx=ctx, tp=ctx.tp, p=p)


@deploy("Live change")
def go_live(ctx: HostDeploy) -> None:
    """The live change, run in the host's restart step (``restart_steps.step_plan``): out of its
    gateways, the deploy lock, the new files live, the unit reloaded and enabled."""
    p = ctx.prepared
    if p is None or not ctx.ok:
        return
    if ctx.retire:
        _retire(ctx)
    actions, layout, rev = p.actions, p.layout, p.revision
    tp = ctx.tp
    trial = tuning.current_trial(ctx.host.name) is not None
    if ctx.gateway is not None and tp is not None:
        # A tp group is one worker (rank 0's server): out of its gateways when the group restarts,
        # and through a tune's every trial.
        python.call(name="Take the tp group out of its gateways (at rank 0) and let in-flight requests finish",
                    function=group_deploy.leave_callback, ctx=ctx, tp=tp, run=ctx.gateway,
                    _if=lambda: trial or tp.restart_needed())
        if not trial:  # also the tuner's return: a group's running revision is not gated again
            python.call(name="Keep the tp group listed in its gateways", function=group_deploy.keep_listed_callback,
                        ctx=ctx, tp=tp, run=ctx.gateway, _if=lambda: not tp.restart_needed())
    elif ctx.gateway is not None and (actions.restart or trial):
        # Out of every gateway, in-flight requests finished, before anything live changes
        # (sglang_deploy.lifecycle.drain); a gateway that cannot be reached fails the host here, unchanged.
        # A tuning trial leaves them even when it restarts nothing (its configuration is the one
        # running): a host being tuned serves no client, and its trials measure it alone.
        python.call(name="Take the host out of its gateways and let in-flight requests finish",
                    function=restart_run.leave_callback, ctx=ctx, run=ctx.gateway)
    elif (ctx.gateway is not None and p.state.active and p.state.deployed == rev == p.state.current
          and not tuning.regate()):  # the tuner's return: registered after its gate (restart())
        python.call(name="Keep the host listed in its gateways", function=gateway.keep_listed_callback,
                    ctx=ctx, run=ctx.gateway)
    if _changes_live(p):
        # The host's lock (docs/watch.md): the continuous check skips while the deploy changes the live
        # service, restarts and gates it; a check already running is stopped. Removed after the gate.
        server.shell(name="Take the host's deploy lock",
                     commands=[watching.lock_command(layout, watching.lock_bound_s(p))])
    if actions.swap or p.state.current != rev:
        swap_in(name="Make the new revision live",
                layout=layout, rev=rev, keys=actions.swap, previous=actions.new_previous, unit_text=p.files.unit)
    if actions.daemon_reload:
        systemd.daemon_reload(name="Reload systemd units")
    if actions.enable:
        systemd.service(name="Enable the service", service=f"{layout.service}.service", enabled=True,
                        running=None)
    if actions.prune and not actions.restart:  # with a restart: after a passing gate (the rollback needs them)
        prune_revisions(name="Prune old revisions", layout=layout, revisions=actions.prune)
    if _changes_live(p) and not actions.restart and ctx.tp is None:
        server.shell(name="Release the host's deploy lock", commands=[watching.unlock_command(layout)])


def _retire(ctx: HostDeploy) -> None:
    """Before anything else goes live: the replicas this plan no longer runs, and those whose GPUs or
    port an earlier replica takes (``retire.stale_units``), leave the host's gateways (their
    in-flight requests finished) and stop. Those no longer run are disabled, and their unit, env
    file, state folder (its revisions hold their secrets) and continuous check removed; the others
    start again in their own turn of this step."""
    urls = tuple(url for _, _, url, _ in ctx.retire if url is not None)
    if ctx.gateway is not None and urls:
        python.call(name="Take the replicas that stop first out of their gateways",
                    function=gateway.retire_callback, ctx=ctx, run=ctx.gateway, urls=urls)
    removed = [(layout, have) for retired, layout, _, have in ctx.retire if retired.remove]
    for layout, have in ctx.host.loop(removed):
        watching.remove_watch(name="Remove a retired replica's continuous check", layout=layout, have=have)
    q = shlex.quote
    commands = []
    for retired, layout, _, _ in ctx.retire:
        unit = q(layout.service + ".service")
        if retired.remove:
            commands.append(f"systemctl disable --now {unit} 2>/dev/null; systemctl reset-failed {unit} 2>/dev/null; "
                            f"rm -rf {q(layout.unit_path)} {q(layout.env_path)} {q(layout.state_dir)}")
        else:
            commands.append(f"systemctl stop {unit}")
    server.shell(name="Stop the replicas that stop first; remove those this plan no longer runs",
                 commands=[*commands, *(["systemctl daemon-reload"] if removed else [])])


def _changes_live(p: Prepared) -> bool:
    """Whether this deploy changes the live service (its files, or a restart): then it holds the lock."""
    return bool(p.actions.swap or p.state.current != p.revision or p.actions.restart)


@deploy("Restart and gate SGLang")
def restart(ctx: HostDeploy) -> None:
    """Restart on the new revision, gate it; pass: mark deployed; otherwise roll back
    (or stop) and fail the host saying what failed and what was done."""
    p = ctx.prepared
    if p is None or not ctx.ok:
        return
    if ctx.tp is not None:
        group_deploy.restart_group(ctx, ctx.tp, p)
        if _changes_live(p):
            server.shell(name="Release the host's deploy lock", commands=[watching.unlock_command(p.layout)])
        return
    if not p.actions.restart and tuning.regate():
        # Unchanged, and asked to prove it all the same (the tuner's return to the host's revision).
        gate = python.call(name="Gate the running revision", function=gating.gate_callback, ctx=ctx, p=p,
                           _ignore_errors=True)
        if results_file():
            python.call(name="Record the result", function=record_callback, ctx=ctx, _if=gate.did_succeed)
        # Back from a tune (out of its gateways since its first trial): registered again. A trial
        # that re-measures the running configuration (also a regate) stays out.
        if ctx.gateway is not None and tuning.current_trial(ctx.host.name) is None:
            python.call(name="Register the host in its gateways again", function=gateway.keep_listed_callback,
                        ctx=ctx, run=ctx.gateway, _if=gate.did_succeed)
        python.call(name="If the gate fails: fail the host (the revision stays: it is the one it ran)",
                    function=_regate_failed, ctx=ctx, _if=gate.did_error)
        return
    if not p.actions.restart:
        if results_file():
            python.call(name="Record the result (unchanged)", function=record_callback, ctx=ctx)
        return
    layout, rev = p.layout, p.revision
    # The restart as its state machine asks (deploy/restart_run.py, lifecycle/drain.py): every step
    # below runs when the machine asks for what it does, and each callback tells it what happened.
    # A worker of gateways began in go_live (out of them, drained); a server of no gateway has
    # nothing to leave, and its machine starts at the stop.
    run = ctx.gateway
    if run is None:
        run = RestartRun.alone(ctx.host)
        run.tell(drain.Event.SKIP_DRAIN)
    restart_service(name="Restart the service on the new revision", layout=layout,
                    gpu_indices=p.plan.gpus.indices, health_url=gating.on_host_url(p.plan),
                    _if=run.wants(drain.Action.STOP))
    python.call(name="Gate the new revision", function=restart_run.gate_callback, ctx=ctx, p=p, run=run,
                _ignore_errors=True)
    mark_deployed(name="Mark the new revision deployed", layout=layout, rev=rev, _if=run.passed)
    if ctx.gateway is not None:
        python.call(name="Register the host in its gateways again", function=restart_run.register_callback, ctx=ctx,
                    run=run, _if=[run.passed, run.wants(drain.Action.REGISTER)])
    if p.actions.prune:
        prune_revisions(name="Prune old revisions", layout=layout, revisions=p.actions.prune, _if=run.passed)
    prune = prune_command(p.plan.weights, layout.state_dir, ctx.host.name) if p.plan.weights else None
    if prune is not None:
        python.call(name="Prune old snapshots from the model store", function=run_callback, command=prune,
                    _if=run.passed)
    if p.plan.caches is not None and ctx.replica == 0:
        server.shell(name="Remove the compile caches of SGLang versions whose venv is gone",
                     commands=[caches.prune_command(p.plan.caches, p.plan.service)], _if=run.passed)
    if p.seed is not None and p.seed.offer and ctx.replica == 0:
        python.call(name="Offer the compile caches to the other hosts of this class",
                    function=cache_seed.export_callback, p=p, seed=p.seed, ctx=ctx, _if=run.passed)
    # The machine asks for a rollback after a failed gate; the rollback policy says whether there is
    # one (a previous revision staged), or the service stops, or stays unproven (gate unreachable).
    rolling_back = run.wants(drain.Action.ROLL_BACK)
    if p.rollback is not None:
        roll_back(ctx, p, p.rollback, [rolling_back, lambda: ctx.gate.step == rollback_policy.ROLLBACK],
                  restart_run.confirm_callback, "the last good revision is ready", run=run)
    else:
        stop_service(name="If the gate fails: stop the service (no previous revision to roll back to)",
                     layout=layout, _if=[rolling_back, lambda: ctx.gate.step == rollback_policy.STOP])
    if ctx.gateway is not None:
        python.call(name="If the gate fails and the rollback is ready: register the host in its gateways again",
                    function=restart_run.register_callback, ctx=ctx, run=run,
                    _if=[run.failed, run.wants(drain.Action.REGISTER)])
        python.call(name="If the gate fails and nothing gated serves: keep the host out of its gateways",
                    function=restart_run.out_callback, ctx=ctx, run=run,
                    _if=[run.failed, lambda: ctx.gate.rollback_ok is not True])
    if results_file():
        python.call(name="Record the result", function=record_callback, ctx=ctx, _if=run.passed)
    server.shell(name="Release the host's deploy lock", commands=[watching.unlock_command(layout)])
    python.call(name="If the gate fails: fail the host, saying what was done", function=gating.fail_callback, ctx=ctx,
                p=p, _if=run.failed)


@deploy("Continuous check")
def watch(ctx: HostDeploy) -> None:
    """``sglang_watch``: its files and units in place (only what differs), or taken away when unset;
    after a restart, one check at once. Not part of the revision: nothing here restarts the server."""
    p = ctx.prepared
    if p is None or not ctx.ok or tuning.current_trial(ctx.host.name) is not None:
        return
    host, settings = ctx.host, p.spec.watch
    have = host.get_fact(watching.WatchState, service=p.layout.service, state_dir=p.layout.state_dir) or {}
    if settings is None:
        watching.remove_watch(name="Remove the continuous check", layout=p.layout, have=have)
        return
    files = watching.wanted_files(p, settings, gating.watch_options(host, p))
    watching.install_watch(name="Install the continuous check", layout=p.layout, files=files, have=have,
                           textfile_dir=settings.textfile_dir, start=p.actions.restart)


def deploy_current_host() -> None:
    """The whole deploy of the host pyinfra is running ``deploy.py`` for: the roles in order, or,
    on a gateway host (``sglang_gateway``), the gateway's deploy. Between the two, an operation every
    host runs (``restart_steps.gateways_first``) orders the gateway hosts' operations before any worker's:
    a worker's drain and re-admission find its gateway up."""
    try:  # what the runner tells this run (sglang_deploy.runcontext): checked before anything else
        run_context()
    except RunContextError as exc:
        server.shell(name="Read the run's context", commands=[f"printf '%s\\n' {shlex.quote(str(exc))} >&2; exit 1"])
        return
    runs_gateway = gateway.runs_gateway(current_host)
    if runs_gateway:
        gateway_deploy.deploy_gateway(host=current_host)
    restart_steps.gateways_first(current_host)  # one line for every host: one node of pyinfra's order
    if runs_gateway:
        return
    ctxs = prepare(current_host)
    ctx = ctxs[0]
    # By keyword: pyinfra types a @deploy function as PyinfraOperation, whose __call__ lists its global
    # arguments (_sudo, ...) before the function's own, so a positional ctx would read as _sudo to the
    # type checker (at run time the wrapper hands every argument to the function as given).
    install(ctx=ctx)
    # A host's replicas (one context each) in pyinfra's Host.loop: the loop position is part of
    # each operation's order, so the same line's operations stay one per replica, in order.
    for one in current_host.loop(ctxs):
        configure(ctx=one)
    # The live change in the host's restart step: at most max_unavailable of a gateway's workers in
    # one. pyinfra appends the loop position to an operation's order (pyinfra/api/operation.py,
    # solve_operation_consistency; Host.loop), so each step's operations are nodes of their own, and
    # the step's end, one operation every host runs, orders the next step after this one. A host's
    # replicas go live one after another in its step: one of them out of its gateways at a time.
    total, mine = restart_steps.step_plan(current_host, ctx, serving=any(
        one.prepared is not None and one.prepared.state.active for one in ctxs))
    for number in current_host.loop(range(total)):
        if number == mine:
            if number > 0 and ctx.ok and ctx.gateway is not None:
                python.call(name="Before this restart step: no worker of the same gateways failed in an earlier one",
                            function=restart_steps.step_check_callback, ctx=ctx,
                            steps=restart_steps.run_steps(current_host))
            for one in current_host.loop(ctxs):
                go_live(ctx=one)
                restart(ctx=one)
        if total > 1:
            restart_steps.end_of_step(current_host, number, total)
    for one in current_host.loop(ctxs):
        watch(ctx=one)
