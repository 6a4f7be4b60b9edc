"""The SGLang Model Gateway (sglang-router) in the deploy: the gateway host's own deploy, and a
serving host's leave and re-admission around its restart.

A gateway host (``sglang_gateway``) gets the pinned router in a virtualenv of its own (staged
before anything stops), the launcher, a root-only env file with the API key and a unit; the
three files form a revision (content hash) kept under the state directory, so a gateway whose
new revision fails its gate gets the previous one back byte for byte. Its gate: ready, every
worker of the inventory that answers listed and healthy, and a streamed request through it.

A serving host with ``sglang_gateways`` is a worker: its restart is driven by the drain state
machine (``sglang_deploy.lifecycle.drain``): before anything changes the gateways are read and the
worker leaves them, its in-flight requests finish (the server's own /metrics, bounded by
``sglang_drain.timeout``), the deploy stops and restarts it, and only after its gate passes (or
its rollback re-gates) is it registered again. The HTTP is ``deploy.gateway_client``'s.
"""

from __future__ import annotations

import hashlib
import shlex
import time
from dataclasses import dataclass, field
from functools import partial
from io import BytesIO
from pathlib import Path
from typing import Any, Callable, Mapping

from pyinfra import logger
from pyinfra.api import FactBase, FileUploadCommand, StringCommand, deploy, operation
from pyinfra.api.host import Host
from pyinfra.operations import python, server

from sglang_deploy.deploy import gateway_client, tuning
from sglang_deploy.deploy.context import HostDeploy, Prepared
from sglang_deploy.deploy.gating import fail_host, sh
from sglang_deploy.deploy.inventory import data_layers
from sglang_deploy.deploy.operations import _pip_install
from sglang_deploy.deploy.results import append_record, record_gateway_callback, results_file
from sglang_deploy.deploy.secrets import read_secrets
from sglang_deploy.errors import PlanError
from sglang_deploy.gate.watch import SystemdWatch
from sglang_deploy.lifecycle import drain
from sglang_deploy.plan.gateway import (API_KEY_ENV, LAUNCHER_NAME, GatewaySettings, WorkerMembership,
                                        gateway_settings, gateway_workers, render_gateway, worker_address,
                                        worker_membership)
from sglang_deploy.plan.gateway import gateway_url as plan_gateway_url
from sglang_deploy.plan.gateway import inventory_gateways as plan_inventory_gateways
from sglang_deploy.plan.gateway import fleet_memberships, workers_to_keep
from sglang_deploy.lifecycle.revision import STATE_ROOT
from sglang_deploy.lifecycle.rollback_policy import gateway_result
from sglang_deploy.plan.settings import ROLLOUT_DEFAULTS, ROLLOUT_KEYS
from sglang_deploy.runcontext import from_environ as run_context
from sglang_deploy.untrusted import Scrubber, printable
from sglang_deploy.waves import (Size, WaveError, agreed_setting, gateway_worker_counts,
                                 parse_max_unavailable, split_for_gateways)

LAUNCHER = Path(__file__).resolve().parent / "host" / LAUNCHER_NAME
#: How long the gateway's gate waits for it to answer after a restart, and for its workers.
READY_TIMEOUT_S = 60.0
WORKERS_TIMEOUT_S = 60.0
#: How long a worker's removal may take to show in a gateway's list (sglang-router 0.3.2 answers
#: DELETE /workers/{id} with 202 and removes it in a background job).
DEREGISTER_TIMEOUT_S = 30.0


# ---------------------------------------------------------------------------
# The inventory's gateways, as every host's deploy sees them


def inventory_gateways(host: Host) -> dict[str, GatewaySettings]:
    """Every host of the inventory that runs a gateway: name -> its settings (errors name that host)."""
    out = {}
    for other in host.inventory:
        settings = gateway_settings(other.name, dict(host.inventory.get_host(other.name).data.dict()))
        if settings is not None:
            out[other.name] = settings
    return out


def gateway_url(host: Host, name: str, settings: GatewaySettings) -> str:
    """Where the controller and the workers reach gateway ``name`` (plan.gateway.gateway_url)."""
    return plan_gateway_url(name, dict(host.inventory.get_host(name).data.dict()), settings)


def _gateway_key(name: str, settings: GatewaySettings) -> str | None:
    values = read_secrets(name, settings.secrets)
    return values.get(API_KEY_ENV)


# ---------------------------------------------------------------------------
# A worker's restart behind its gateways


@dataclass
class WorkerRun:
    """One serving host's membership and where its drain state machine stands."""

    membership: WorkerMembership
    gateways: tuple[tuple[str, str, str | None], ...]  # (name, url, API key)
    worker_key: str | None
    log: Callable[[str], object]  # a line of the host's output
    warn: Callable[[str], object]  # a warning line of the host's output
    state: drain.WorkerState = field(default_factory=drain.WorkerState)
    steps: list[str] = field(default_factory=list)
    drained_s: float | None = None

    def clients(self) -> list[gateway_client.Gateway]:
        return [gateway_client.Gateway(url, key) for _, url, key in self.gateways]

    def names(self) -> str:
        return ", ".join(f"{name} ({url})" for name, url, _ in self.gateways)


def worker_run(host: Host, data: dict[str, Any], p: Prepared, leader: str | None = None) -> WorkerRun | None:
    """The host as a worker of its gateways (None: it names none). ``leader``: rank 0 of the host's
    multi-node tp group, whose server is the group's one worker (every member names the same
    gateways). PlanError names the host and field."""
    gateways = inventory_gateways(host)
    address = None
    if leader is not None:
        leader_data = dict(host.inventory.get_host(leader).data.dict())
        if leader_data.get("sglang_gateways") != data.get("sglang_gateways"):
            raise PlanError(host.name, "sglang_gateways", f"differs from rank 0 ({leader}) of its tp group: the "
                                                          "group is one worker of its gateways; set it for the group")
        if data.get("sglang_gateways"):
            address = worker_address(leader, leader_data)[0]
    membership = worker_membership(host.name, data, int(p.plan.intents["port"].value), address=address,
                                   gateway_hosts=gateways)
    if membership is None:
        return None
    # Every worker of the inventory, so that two hosts with one URL are refused here as in the unit.
    gateway_workers([membership])
    refs = []
    for name in membership.gateways:
        settings = gateways[name]
        key = _gateway_key(name, settings)
        if key is not None and p.api_key is not None and key != p.api_key:
            # sglang-router 0.3.2 calls the workers it was started with (--worker-urls) with its own key
            # (its README, "Router API key"): a worker with another key would fail its health checks.
            raise PlanError(host.name, "sglang_secrets.api_key", f"differs from gateway {name}'s "
                                                                 "sglang_gateway.api_key; a gateway's workers "
                                                                 "use its key (or none)")
        refs.append((name, gateway_url(host, name, settings), key))
    return WorkerRun(membership=membership, gateways=tuple(refs), worker_key=p.api_key, log=host.log,
                     warn=lambda text: host.log_styled(text, fg="yellow", log_func=logger.warning))


def replica_url(host: Host, data: Mapping[str, Any], port: int) -> str | None:
    """Where the host's gateways reach its server on ``port`` (a replica's), as for the host's own."""
    membership = worker_membership(host.name, data, port, gateway_hosts=inventory_gateways(host))
    return membership.url if membership is not None else None


# ---------------------------------------------------------------------------
# The run's restart steps: at most max_unavailable of a gateway's workers out at once


def fleet_max_unavailable(host: Host) -> Size:
    """The rollout's ``--max-unavailable`` when it runs this deploy, else ``sglang_rollout.max_unavailable``
    (every host that sets it must agree), else 1. PlanError names the host and the field."""
    field_name = "sglang_rollout.max_unavailable"
    try:
        raw = run_context().max_unavailable or agreed_setting(
            {h.name: h.data.get("sglang_rollout") for h in host.inventory}, "max_unavailable", ROLLOUT_KEYS)
        return parse_max_unavailable(raw if raw is not None else ROLLOUT_DEFAULTS["max_unavailable"])
    except WaveError as exc:
        raise PlanError(host.name, field_name, str(exc).removeprefix(f"{field_name}: ")) from None


@dataclass(frozen=True)
class RunSteps:
    """The hosts of this pyinfra run in restart steps (``waves.split_for_gateways``), run one after
    another: no step holds more than ``max_unavailable`` of any gateway's workers (a tp group is
    one worker, in one step); hosts that are no gateway's workers are in the first."""

    steps: tuple[tuple[str, ...], ...]
    memberships: dict[str, tuple[str, ...]]

    def index(self, name: str) -> int:
        return next((i for i, step in enumerate(self.steps) if name in step), 0)

    def earlier_partners(self, name: str) -> list[str]:
        """The workers of this host's gateways in earlier steps than its own, inventory order."""
        mine, gateways = self.index(name), set(self.memberships.get(name, ()))
        return [h for step in self.steps[:mine] for h in step if gateways & set(self.memberships.get(h, ()))]


#: pyinfra state -> (that state, its steps): pyinfra loads every host's deploy (in parallel
#: greenlets: pyinfra_cli/util.py, _parallel_load_hosts) before any operation executes; the first
#: host to ask computes the steps for all (the state is kept with them: an id can be reused).
_STEPS: dict[int, tuple[Any, RunSteps]] = {}


def run_steps(host: Host) -> RunSteps:
    """This run's restart steps, the same on every host (inventory data and the run's ``--limit``
    only: no host's facts), computed once per run. PlanError: the fleet's max_unavailable is wrong."""
    state = host.state
    cached = _STEPS.get(id(state))
    if cached is not None and cached[0] is state:
        return cached[1]
    size = fleet_max_unavailable(host)
    memberships, units = fleet_memberships((other.name, *data_layers(other)) for other in host.inventory)
    in_run = [h.name for h in host.inventory if state.is_host_in_limit(h)]
    steps = split_for_gateways(in_run, memberships, size, units=units,
                               worker_counts=gateway_worker_counts(memberships, units))
    result = RunSteps(steps=tuple(steps) or ((),), memberships=memberships)
    _STEPS[id(state)] = (state, result)
    return result


def step_plan(host: Host, ctx: HostDeploy, serving: bool | None = None) -> tuple[int, int]:
    """(how many restart steps this run has, the one (0-based) this host's live change runs in).

    A worker of a gateway that serves now (or a tp group member: whether its group serves is decided
    at run time) takes its step; every other host restarts in the first: a server that does not
    serve yet takes no capacity away. One step when no host of the inventory runs a gateway, or the
    fleet's max_unavailable is wrong (then every worker has failed its plan, saying so)."""
    if not any(runs_gateway(other) for other in host.inventory):
        return 1, 0
    try:
        steps = run_steps(host)
    except PlanError:
        return 1, 0
    p = ctx.prepared
    if serving is None:  # else the caller's: whether any of the host's replicas serves
        serving = p is not None and p.state.active
    if ctx.gateway is None or (ctx.tp is None and not serving):
        return len(steps.steps), 0
    return len(steps.steps), steps.index(host.name)


def step_check_callback(state: Any, host: Host, ctx: HostDeploy, steps: RunSteps) -> bool:
    """Before this worker's live change, in a later step: a worker of one of its gateways that
    failed in an earlier step of this run stops it, unchanged (as a failed step ends a rollout's wave)."""
    failed = {h.name for h in state.failed_hosts}
    earlier = [h for h in steps.earlier_partners(host.name) if h in failed]
    if not earlier:
        return True
    ctx.error = (f"not restarted: {', '.join(earlier)}, a worker of the same gateway(s) in an earlier step of this "
                 "run, failed; nothing was changed on this host")
    fail_host(host, ctx, ctx.error)
    return False


def end_of_step(host: Host, number: int, total: int) -> None:
    """One operation on every host of the run at the end of each restart step (called from one
    line, it is one node of pyinfra's operation order, as in :func:`gateways_first`): the next
    step's operations come after every host's operations of this one."""
    python.call(name=f"End of restart step {number + 1} of {total}: at most max_unavailable of each gateway's "
                     "workers out at once", function=_ordering_point)


def _perform(run: WorkerRun, action: drain.Action) -> drain.Event:
    """Carry out a gateway action of the state machine; the event it ends in."""
    url = run.membership.url
    try:
        if action is drain.Action.CHECK:
            for client in run.clients():
                client.workers()
            return drain.Event.GATEWAY_OK
        if action is drain.Action.DEREGISTER:
            _deregister(run, url)
            return drain.Event.GATEWAY_OK
        if action is drain.Action.REGISTER:
            for client in run.clients():
                client.register(url, run.worker_key)
                client.wait_registered(url, run.membership.drain.admit_timeout_s)
            return drain.Event.GATEWAY_OK
        if action is drain.Action.WAIT:
            return _wait_in_flight(run)
    except gateway_client.GatewayError as exc:
        run.steps.append(f"{action.value}: {exc}")
        return drain.Event.GATEWAY_UNREACHABLE if exc.refused else drain.Event.GATEWAY_ERROR
    raise AssertionError(f"not a gateway action: {action}")


def _deregister(run: WorkerRun, url: str) -> None:
    """``url`` out of every gateway of ``run``, each one's removal job seen done (it no longer lists
    it) within DEREGISTER_TIMEOUT_S; GatewayError otherwise."""
    for client in run.clients():
        if client.deregister(url):
            client.wait_deregistered(url, DEREGISTER_TIMEOUT_S)


def _wait_in_flight(run: WorkerRun) -> drain.Event:
    """Until the server's own count of running and queued requests reads 0 twice (nothing listening
    on its port counts as 0), or the drain timeout (gateway_client.wait_idle)."""
    timeout = run.membership.drain.timeout_s
    started = time.monotonic()
    timed_out, last = gateway_client.wait_idle(run.membership.url, run.worker_key, timeout, poll_s=0.25)
    run.drained_s = round(time.monotonic() - started, 2)
    if not timed_out:
        run.log(f"drained in {run.drained_s:g} s")
        return drain.Event.DRAIN_DONE
    count = "an unknown number of" if last is None else str(last)  # no /metrics, or it cannot be read
    run.warn(f"drain timeout ({timeout} s) with {count} request(s) still in flight; stopping all the same")
    return drain.Event.DRAIN_TIMEOUT


_GATEWAY_ACTIONS = frozenset({drain.Action.CHECK, drain.Action.DEREGISTER, drain.Action.REGISTER,
                              drain.Action.WAIT})


def drive(run: WorkerRun, event: drain.Event) -> drain.Action:
    """Feed ``event`` to the state machine and carry out its gateway actions until it asks for
    something the deploy's operations do (stop, gate, roll back) or ends."""
    for _ in range(drain.MAX_STEPS + 1):
        before = run.state.phase
        run.state, action = drain.step(run.state, event)
        run.steps.append(f"{before.value} --{event.value}--> {run.state.phase.value}: {action.value}")
        if action not in _GATEWAY_ACTIONS:
            return action
        event = _perform(run, action)
    raise AssertionError("the drain state machine did not settle")


def _fail(host: Host, ctx: HostDeploy, run: WorkerRun, what: str) -> bool:
    ctx.error = f"{what}: {run.state.reason} (gateways: {run.names()})"
    tail = [s for s in run.steps if ":" in s and "-->" not in s][-3:]
    fail_host(host, ctx, ctx.error + ("\n" + "\n".join(tail) if tail else ""))
    return False


def leave_callback(state: Any, host: Host, ctx: HostDeploy, run: WorkerRun) -> bool:
    """Before anything changes: leave every gateway and let in-flight requests finish."""
    skip = run.membership.drain.skip
    action = drive(run, drain.Event.SKIP_DRAIN if skip else drain.Event.RESTART)
    if action is drain.Action.STOP:
        if skip:
            host.log("drain skipped (sglang_drain: skip): the gateways keep this worker listed")
        elif run.state.drain_timed_out:
            host.log(f"out of {run.names()}; drain timeout after {run.drained_s:g} s: stopped with requests in flight")
        else:
            host.log(f"out of {run.names()}; in-flight requests done after {run.drained_s:g} s")
        return True
    return _fail(host, ctx, run, "could not take the host out of its gateways before the restart; nothing changed")


def admit_callback(state: Any, host: Host, ctx: HostDeploy, run: WorkerRun,
                   rolled_back: bool = False) -> bool:
    """After a passing gate (or, ``rolled_back``, the rollback's re-gate): join the gateways again.
    A tuning trial's server stays out: a host being tuned serves no client until the tuner's
    return to its own revision, whose deploy registers it again."""
    if run.state.phase is drain.Phase.SERVING:  # nothing left them (no leave ran): nothing to do
        return True
    if tuning.current_trial(host.name) is not None:
        host.log(f"tuning trial: stays out of {run.names()} until the tuner returns the host to its revision")
        return True
    events = [drain.Event.STOPPED, drain.Event.STARTED]
    events += [drain.Event.GATE_FAIL, drain.Event.ROLLBACK_PASS] if rolled_back else [drain.Event.GATE_PASS]
    for event in events:
        drive(run, event)
    if run.state.phase in (drain.Phase.DONE, drain.Phase.ROLLED_BACK):
        host.log(f"registered again in {run.names()}" if not run.state.skip else run.state.reason)
        return True
    return _fail(host, ctx, run, "the server passed its gate but could not join its gateways again")


def evict_callback(state: Any, host: Host, ctx: HostDeploy, run: WorkerRun) -> bool:
    """The gate and the rollback failed: the worker serves no gated revision and stays out."""
    if run.state.phase is drain.Phase.SERVING:
        return True
    for event in (drain.Event.STOPPED, drain.Event.STARTED, drain.Event.GATE_FAIL, drain.Event.ROLLBACK_FAIL):
        if run.state.terminal:
            break
        drive(run, event)
    host.log(run.state.reason)
    return True


def retire_callback(state: Any, host: Host, ctx: HostDeploy, run: WorkerRun, urls: tuple[str, ...]) -> bool:
    """Before the replicas that stop first are stopped (``lifecycle.retire.stale_units``: those the
    plan no longer runs, and those whose GPUs or port an earlier replica takes): each leaves the
    host's gateways and its in-flight requests finish (up to the drain timeout), as a worker does
    before its restart. A gateway that cannot be reached fails the host here, before anything on
    it changes; ``sglang_drain: skip`` skips the wait, not the leave."""
    for url in urls:
        try:
            _deregister(run, url)  # also with sglang_drain: skip: a stopped replica would stay listed for good
        except gateway_client.GatewayError as exc:
            ctx.error = (f"could not take replica {url}, which stops before the host's first replica goes live, "
                         f"out of its gateways; nothing changed: {exc}")
            fail_host(host, ctx, ctx.error)
            return False
        if run.membership.drain.skip:
            host.log(f"replica {url} is out of {run.names()}; drain skipped (sglang_drain: skip)")
            continue
        timed_out, _ = gateway_client.wait_idle(url, run.worker_key, run.membership.drain.timeout_s, poll_s=0.25)
        host.log(f"replica {url} is out of {run.names()}" + (" (drain timeout: stopped with requests in flight)"
                                                              if timed_out else "; in-flight requests done"))
    return True


def keep_listed_callback(state: Any, host: Host, ctx: HostDeploy, run: WorkerRun) -> bool:
    """No restart: a worker that serves its deployed revision but is missing from a gateway (a
    re-admission that failed earlier, a gateway restarted by hand) is registered again."""
    missing = []
    try:
        for client, (name, _, _) in zip(run.clients(), run.gateways):
            if not any(w.url == run.membership.url for w in client.workers()):
                client.register(run.membership.url, run.worker_key)
                client.wait_registered(run.membership.url, run.membership.drain.admit_timeout_s)
                missing.append(name)
    except gateway_client.GatewayError as exc:
        host.log_styled(f"could not check the gateways: {exc}", fg="yellow", log_func=logger.warning)
        return True
    if missing:
        host.log(f"was missing from {', '.join(missing)}: registered again")
    return True


# ---------------------------------------------------------------------------
# The gateway host's own deploy


@dataclass(frozen=True)
class GatewayFilesPlan:
    settings: GatewaySettings
    unit: str
    env: str
    launcher: str
    revision: str
    workers: tuple[str, ...]
    api_key: str | None

    @property
    def state_dir(self) -> str:
        return f"{STATE_ROOT}/{self.settings.service_name}"


def plan_gateway(host: Host, settings: GatewaySettings) -> GatewayFilesPlan:
    """The gateway's files and revision: its workers are the inventory's hosts that name it."""
    # The gateway hosts and the workers that name this one (another gateway's workers are theirs to refuse).
    pairs = [(other.name, dict(host.inventory.get_host(other.name).data.dict())) for other in host.inventory]
    pairs = [(n, d) for n, d in pairs if runs_gateway(host.inventory.get_host(n)) or n == host.name
             or host.name in (d.get("sglang_gateways") or ())]
    workers = plan_inventory_gateways(pairs).workers.get(host.name, ())
    values = read_secrets(host.name, settings.secrets)
    files = render_gateway(host.name, settings, workers, values)
    launcher = LAUNCHER.read_text()
    digest = hashlib.sha256()
    for part in (settings.version, files.unit, files.env, launcher):
        digest.update(part.encode())
        digest.update(b"\0")
    return GatewayFilesPlan(settings=settings, unit=files.unit, env=files.env, launcher=launcher,
                            revision=digest.hexdigest()[:16], workers=workers, api_key=values.get(API_KEY_ENV))


_GATEWAY_STATE = """\
command -v systemctl >/dev/null 2>&1 && echo systemd=yes
[ -x {python} ] && {python} -c 'import importlib.metadata as m; print("version=" + m.version("sglang-router"))' \
2>/dev/null
for f in {state_dir}/current {state_dir}/previous {state_dir}/deployed; do
  [ -f "$f" ] && echo "$(basename $f)=$(head -c 64 $f | tr -d '\r\n')"
done
for d in {state_dir}/revisions/*/; do [ -f "$d/complete" ] && echo "staged=$(basename $d)"; done
echo "active=$(systemctl is-active {unit} 2>/dev/null)"
true
"""


class GatewayState(FactBase):
    """The gateway host's installed router version, current/previous/deployed revision, staged ones,
    unit state (the deploy's, and `status`'s read of a gateway host)."""

    def command(self, state_dir: str, python: str, unit: str) -> str:
        return _GATEWAY_STATE.format(state_dir=shlex.quote(state_dir), python=shlex.quote(python),
                                     unit=shlex.quote(unit))

    def process(self, output: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {"staged": []}
        for line in output:
            key, _, value = line.strip().partition("=")
            if key == "staged":
                out["staged"].append(value)
            elif key:
                out[key] = value
        return out


@operation()
def install_router(settings: GatewaySettings, installed: str | None, index: tuple):
    """
    The pinned sglang-router into its own virtualenv (one per release), checked afterwards.

    + settings: the gateway's settings (venv, version)
    + installed: the version the venv has now (GatewayState); equal means nothing to do
    + index: pip's index options (index_url, extra_index_urls, find_links, no_index)
    """
    if installed == settings.version:
        return
    q = shlex.quote
    yield f"test -x {q(settings.python)} || python3 -m venv {q(settings.venv)}"
    yield from _pip_install(f"{q(settings.venv)}/bin/pip", index, f"sglang-router=={settings.version}")
    yield (f"test \"$({q(settings.python)} -c 'import importlib.metadata as m; print(m.version(\"sglang-router\"))')\""
           f" = {q(settings.version)} || {{ echo 'installed sglang-router is not {settings.version}' >&2; exit 1; }}")


def _files(g: GatewayFilesPlan) -> dict[str, tuple[str, str, str]]:
    """name in the revision folder -> (live path, mode, text)."""
    s = g.settings
    return {"unit": (s.unit_path, "0644", g.unit), "env": (s.env_path, "0600", g.env),
            "launcher": (s.launcher_path, "0644", g.launcher)}


@operation()
def stage_gateway(g: GatewayFilesPlan):
    """
    The revision's files aside, under the state directory (root-only), then its ``complete`` marker.

    + g: the gateway's planned files and revision
    """
    rdir = f"{g.state_dir}/revisions/{g.revision}"
    yield f"install -d -m 0700 {shlex.quote(rdir)}"
    for name, (_, _, text) in _files(g).items():
        yield FileUploadCommand(BytesIO(text.encode()), f"{rdir}/{name}")
    yield f"chmod 0600 {shlex.quote(rdir)}/* && touch {shlex.quote(rdir)}/complete"


def _swap_commands(g: GatewayFilesPlan, rev: str, previous: str | None) -> list[str]:
    q = shlex.quote
    rdir = f"{g.state_dir}/revisions/{rev}"
    cmds = [f"install -d -m 0700 {q(g.settings.config_dir)}"]
    for name, (dest, mode, _) in _files(g).items():
        tmp = f"{dest}.sglang-deploy-tmp"
        cmds.append(f"install -m {mode} -o root -g root {q(rdir)}/{name} {q(tmp)} && mv -f {q(tmp)} {q(dest)}")
    if previous:
        cmds.append(f"echo {q(previous)} > {q(g.state_dir)}/previous")
    cmds.append(f"echo {q(rev)} > {q(g.state_dir)}/current")
    unit = q(f"{g.settings.service_name}.service")
    cmds += ["systemctl daemon-reload", f"systemctl enable {unit} >/dev/null 2>&1",
             f"systemctl reset-failed {unit} 2>/dev/null || true", f"systemctl restart {unit}"]
    return cmds


def gateway_gate(host: Host, g: GatewayFilesPlan, log: Callable[[str], object]) -> str | None:
    """The gateway's proof after a restart: None when it passes, else why not. Ready; every worker
    of the inventory that answers its own /health listed healthy; a streamed request through it
    when any worker answers."""
    url = gateway_url(host, host.name, g.settings)
    client = gateway_client.Gateway(url, g.api_key)
    unit = f"{g.settings.service_name}.service"
    watch = SystemdWatch(lambda command: sh(host, command)[1], unit)
    started = watch.status().n_restarts
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not client.alive():
        if time.monotonic() > deadline:
            return f"{url} did not answer as ready within {READY_TIMEOUT_S:g} s"
        restarts = watch.status().n_restarts
        if restarts is not None and started is not None and restarts > started:
            # Restart=always: a router that exits at start (a bind it cannot make, say) comes back
            # every RestartSec and never answers; no need to wait out the whole timeout.
            return (f"{unit} exited while starting (systemd restarted it {restarts - started} time(s)); its last "
                    f"lines: {_journal_tail(host, unit, g.api_key)}")
        time.sleep(0.5)
    deadline = time.monotonic() + WORKERS_TIMEOUT_S
    while True:
        try:
            listed = {w.url: w for w in client.workers()}
        except gateway_client.GatewayError as exc:
            return str(exc)
        # sglang-router 0.3.2 lists a worker of --worker-urls only once its registration job (workflow
        # local_worker_registration, step detect_connection_mode, retried while the worker's /health
        # does not answer) has reached it: a worker that does not answer yet (a first deploy: the
        # workers start after their gateway) cannot be listed, and joins later, by that job or by its
        # own deploy's admission after its gate.
        serving = [u for u in g.workers if gateway_client.server_answers(u, g.api_key, 2.0)]
        missing = [u for u in serving if u not in listed]
        unhealthy = [u for u in serving if u in listed and listed[u].healthy is False]
        if not missing and not unhealthy:
            break
        if time.monotonic() > deadline:
            return (f"workers that answer but are not listed: {', '.join(missing)}" if missing else
                    f"workers that answer but the gateway counts unhealthy: {', '.join(unhealthy)}")
        time.sleep(1.0)
    if serving:
        try:
            seconds, tokens = gateway_client.Gateway(url, g.api_key, timeout_s=30.0).stream_once()
        except gateway_client.GatewayError as exc:
            return f"a streamed request through the gateway failed: {exc}"
        log(f"gateway {url}: {len(listed)} worker(s) listed, {len(serving)} serving; a streamed request through it: "
            f"{tokens} chunks in {seconds:.2f} s")
    else:
        log(f"gateway {url}: ready, {len(listed)} worker(s) listed, none serving yet (no request through it)")
    return None


def _journal_tail(host: Host, unit: str, api_key: str | None, lines: int = 3) -> str:
    """The last lines the unit's own processes wrote (``_SYSTEMD_UNIT=``: not systemd's restart
    messages), one line, terminal codes removed, at most 600 characters, the gateway's key blanked."""
    _, out = sh(host, f"journalctl _SYSTEMD_UNIT={shlex.quote(unit)} -n {lines} -o cat --no-pager 2>/dev/null")
    text = " | ".join(printable(line).strip() for line in out.splitlines() if line.strip())
    text = Scrubber([api_key]).text(text)
    return (text[:600] + "...") if len(text) > 600 else (text or "(none)")


def _listed_callback(state: Any, host: Host, g: GatewayFilesPlan, outcome: dict) -> bool:
    """Before the restart: the workers the running gateway lists that its unit does not name
    (``plan.gateway.workers_to_keep``), for the restarted one. None read (not running, or not
    answering): nothing to give back."""
    outcome["keep"] = ()
    try:
        listed = gateway_client.Gateway(gateway_url(host, host.name, g.settings), g.api_key).workers()
    except gateway_client.GatewayError:
        return True
    outcome["keep"] = workers_to_keep([w.url for w in listed], g.workers)
    return True


def _register_kept(host: Host, g: GatewayFilesPlan, urls: tuple[str, ...]) -> None:
    """The restarted gateway given back the workers it listed before that its unit does not name
    and that answer now; one that cannot join is said (its own next deploy registers it again)."""
    client = gateway_client.Gateway(gateway_url(host, host.name, g.settings), g.api_key)
    back = []
    for url in urls:
        try:
            if not gateway_client.server_answers(url, g.api_key, 2.0):
                continue
            # The gateway's key, as --worker-urls gives its workers: a worker's key is the gateway's
            # (or none) when both are set (worker_run refuses another).
            client.register(url, g.api_key)
            client.wait_registered(url, 60.0)
            back.append(url)
        except gateway_client.GatewayError as exc:
            host.log_styled(f"a worker it listed before the restart could not join again: {exc}", fg="yellow",
                            log_func=logger.warning)
            try:  # not left half registered (listed, never healthy): its own next deploy registers it
                client.deregister(url)
            except gateway_client.GatewayError:
                pass
    if back:
        host.log(f"registered again {len(back)} worker(s) it listed before the restart and its unit does not name "
                 f"(a host's replicas): {', '.join(back)}")


def _gate_callback(state: Any, host: Host, g: GatewayFilesPlan, previous: str | None, outcome: dict) -> bool:
    said: list[str] = []

    def log(line: str) -> None:
        said.append(line)
        host.log(line)

    why = gateway_gate(host, g, log)
    outcome["why"] = why
    record = partial(gateway_result, host.name, old_revision=outcome.get("old"), new_revision=g.revision,
                     restarted=True, why=why)
    if why is None:
        host.run_shell_command(StringCommand(f"echo {shlex.quote(g.revision)} > "
                                             f"{shlex.quote(g.state_dir)}/deployed"))
        _register_kept(host, g, outcome.get("keep", ()))
        append_record(record(gated=said[-1] if said else None))
        return True
    host.log_styled(f"the gateway's gate failed: {why}", fg="red", log_func=logger.error)
    if not previous:
        append_record(record())
        return False
    for cmd in _swap_commands(g, previous, None):
        status, _ = host.run_shell_command(StringCommand(cmd))
        if not status:
            host.log_styled(f"rollback to {previous}: `{cmd}` failed", fg="red", log_func=logger.error)
            append_record(record(rolled_back=False))
            return False
    again = gateway_gate(host, g, host.log)
    host.log_styled(f"rolled back to revision {previous}: "
                    + ("ready again" if again is None else f"not ready either: {again}"),
                    fg="yellow", log_func=logger.warning)
    if again is None:
        _register_kept(host, g, outcome.get("keep", ()))
    append_record(record(rolled_back=again is None))
    return False


def runs_gateway(host: Host) -> bool:
    """Whether the host's data makes it a gateway host (``sglang_gateway`` set and not false)."""
    value = host.data.get("sglang_gateway")
    return value is not None and value is not False


def pip_index(host: str, data: dict[str, Any]) -> tuple:
    """The gateway host's pip options (``sglang_pip_*``, as for SGLang): (index_url,
    extra_index_urls, find_links, no_index)."""
    def text(key: str) -> str | None:
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise PlanError(host, key, f"must be a URL or path, got {value!r}")
        return value
    extra = data.get("sglang_pip_extra_index_urls") or ()
    if not isinstance(extra, (list, tuple)) or not all(isinstance(u, str) and u.strip() for u in extra):
        raise PlanError(host, "sglang_pip_extra_index_urls", "must be a list of URLs")
    no_index = data.get("sglang_pip_no_index", False)
    if not isinstance(no_index, bool):
        raise PlanError(host, "sglang_pip_no_index", f"must be true or false, got {no_index!r}")
    return text("sglang_pip_index_url"), tuple(extra), text("sglang_pip_find_links"), no_index


def _ordering_point(state: Any, host: Host) -> bool:
    """What the ordering operations run (``gateways_first``, ``end_of_step``): nothing; their place
    in pyinfra's order is what they are for."""
    return True


def gateways_first(host: Host) -> None:
    """When a gateway host is in this run, one operation on every host that orders the gateway
    hosts' operations before the workers'.

    pyinfra (3.10, pyinfra/api/state.py, State.get_op_order) orders a run's operations as a graph
    of each host's own sequence, ties broken by line number: the n-th operation of every host runs
    with the others' n-th, whatever the code order of the hosts' deploys, so a gateway's install,
    restart and gate would interleave with its workers' drain and restart. An operation called from
    one line for every host is one node of that graph: the gateway hosts' operations come before
    it, the workers' after it. Called by ``deploy_current_host`` after the gateway's deploy and
    before the workers' roles."""
    state = host.state
    if any(runs_gateway(other) and state.is_host_in_limit(other) for other in host.inventory):
        python.call(name="Gateway hosts deployed before any worker changes", function=_ordering_point)


@deploy("SGLang Model Gateway")
def deploy_gateway(host: Host) -> None:
    """Install, stage, swap in (only what changed), restart and gate the gateway; roll back on failure.
    Every path writes the host's record for the rollout (``rollback_policy.gateway_result``)."""
    def refuse(why: str) -> None:
        append_record(gateway_result(host.name, old_revision=None, new_revision=None, restarted=False, error=why))
        server.shell(name="Plan the gateway for this host",
                     commands=[f"printf '%s\\n' {shlex.quote(why)} >&2; exit 1"])

    try:
        data = dict(host.data.dict())
        settings = gateway_settings(host.name, data)
        if settings is None:
            raise PlanError(host.name, "sglang_gateway", "is not set")
        index = pip_index(host.name, data)
        g = plan_gateway(host, settings)
    except PlanError as exc:
        refuse(str(exc))
        return
    have = host.get_fact(GatewayState, state_dir=g.state_dir, python=settings.python,
                         unit=f"{settings.service_name}.service")
    if have.get("systemd") != "yes":
        refuse(f"[{host.name}] systemd: not found; the gateway cannot be installed")
        return
    host.log(f"gateway: sglang-router {settings.version}, revision {g.revision}, {len(g.workers)} worker(s), "
             f"policy {settings.policy}, port {settings.port}")
    install_router(name="Install sglang-router", settings=settings, installed=have.get("version"), index=index)
    if g.revision not in have["staged"]:
        stage_gateway(name="Stage the gateway's revision aside", g=g)
    if have.get("current") == g.revision and have.get("active") == "active":
        if results_file():
            python.call(name="Record the gateway's result (unchanged)", function=record_gateway_callback,
                        record=gateway_result(host.name, old_revision=g.revision, new_revision=g.revision,
                                              restarted=False))
        return
    previous = have.get("current") if have.get("current") != g.revision else have.get("previous")
    outcome: dict[str, Any] = {"old": have.get("current") or have.get("deployed")}
    python.call(name="Read the workers the gateway lists before its restart", function=_listed_callback, g=g,
                outcome=outcome)
    server.shell(name="Make the gateway's revision live and restart it", commands=_swap_commands(g, g.revision,
                                                                                                 previous))
    python.call(name="Gate the gateway", function=_gate_callback, g=g, previous=previous, outcome=outcome)
