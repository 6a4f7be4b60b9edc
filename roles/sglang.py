"""The deploy's roles, called in order by deploy.py. Thin: facts in, core decides, operations out.

    ctx = prepare(host)   # probe + state facts, plan, render, decide
    install(ctx)          # venv + pinned SGLang
    configure(ctx)        # stage files aside, prove argv, swap in, reload, enable
    restart(ctx)          # only when the deployed revision is not this one

A host whose data, probe or secrets are wrong gets a single failing operation
that says why, before anything on it changes.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from pyinfra.api import deploy
from pyinfra.api.host import Host
from pyinfra.operations import server, systemd

from roles.facts import DeployState, GpuProbe
from roles.operations import install_sglang, prove_argv, prune_revisions, restart_service, stage_revision, swap_in
from roles.secrets import read_secrets
from sglang_deploy.errors import PlanError
from sglang_deploy.planner import Plan, plan_host
from sglang_deploy.render import RenderedFiles, render
from sglang_deploy.revision import Actions, HostState, Layout, decide, revision_id
from sglang_deploy.spec import DeploySpec, build_spec

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

    @property
    def ok(self) -> bool:
        return self.error is None


def _data_layers(host: Host) -> tuple[dict[str, Any], dict[str, Any]]:
    inventory = host.inventory
    group_data = dict(inventory.get_data())
    group_data.update(inventory.get_groups_data(host.groups))
    return group_data, dict(inventory.get_host_data(host.name))


def prepare(host: Host) -> HostDeploy:
    """Gather facts and let the core plan and decide; errors become a failing operation."""
    ctx = HostDeploy(host=host)
    try:
        group_data, host_data = _data_layers(host)
        spec = ctx.spec = build_spec(host.name, group_data, host_data)
        probe = host.get_fact(GpuProbe)
        if "error" in probe:
            raise PlanError(host.name, "GPU probe", probe["error"])
        plan = plan_host(spec, probe=probe)
        layout = Layout(service=plan.service.name, unit_path=plan.service.unit_path,
                        env_path=plan.service.env_path, nccl_conf_path=plan.nccl_conf_path)
        state = host.get_fact(DeployState, layout=layout, python=plan.python, user=plan.service.user,
                              group=plan.service.group, workdir=plan.service.workdir)
        if not state.systemd:
            raise PlanError(host.name, "systemd", "this host does not run systemd; the service cannot be installed")
        files = render(plan, read_secrets(host.name, plan.secrets))
        rev = revision_id(files, plan.sglang_version)
        ctx.plan, ctx.files, ctx.revision, ctx.layout, ctx.state = plan, files, rev, layout, state
        ctx.actions = decide(state, files, rev, plan.sglang_version)
    except PlanError as exc:
        ctx.error = str(exc)
        # One failing operation that says why: the host stops before anything on it changes.
        server.shell(name="Plan SGLang for this host",
                     commands=[f"printf '%s\\n' {shlex.quote(ctx.error)} >&2; exit 1"])
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
    if actions.swap or ctx.state.current != rev:  # type: ignore[union-attr]
        swap_in(name=f"Make revision {rev} live ({', '.join(actions.swap) or 'markers only'})",
                layout=layout, rev=rev, keys=actions.swap, previous=actions.new_previous, unit_text=ctx.files.unit)
    if actions.daemon_reload:
        systemd.daemon_reload(name="Reload systemd units")
    if actions.enable:
        systemd.service(name=f"Enable {layout.service}", service=f"{layout.service}.service", enabled=True,
                        running=None)
    if actions.prune:
        prune_revisions(name="Prune old revisions", layout=layout, revisions=actions.prune)


@deploy("Restart SGLang")
def restart(ctx: HostDeploy) -> None:
    if not ctx.ok or not ctx.actions or not ctx.actions.restart:
        return
    assert ctx.plan and ctx.layout and ctx.revision
    restart_service(name=f"Restart {ctx.layout.service} on revision {ctx.revision}", layout=ctx.layout,
                    rev=ctx.revision, python=ctx.plan.python, gpu_indices=ctx.plan.gpus.indices)
