"""The SGLang Model Gateway (sglang-router) in a worker's deploy: the inventory's gateways as every host
sees them, and a serving host's leave and re-admission around its restart. The gateway host's own
deploy is ``sglang_deploy.deploy.gateway_host``; the run's restart steps, ``sglang_deploy.deploy.restart_steps``.

A serving host with ``sglang_gateways`` is a worker: its restart is driven by the drain state
machine (``sglang_deploy.lifecycle.drain``): before anything changes the gateways are read and the
worker leaves them, its in-flight requests finish (the server's own /metrics, bounded by
``sglang_drain.timeout``), the deploy stops and restarts it, and only after its gate passes (or
its rollback re-gates) is it registered again. The HTTP is ``deploy.gateway_client``'s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from pyinfra import logger
from pyinfra.api.host import Host

from sglang_deploy.deploy import gateway_client, tuning
from sglang_deploy.deploy.context import HostDeploy, Prepared
from sglang_deploy.deploy.gating import fail_host
from sglang_deploy.deploy.secrets import read_secrets
from sglang_deploy.errors import PlanError
from sglang_deploy.lifecycle import drain
from sglang_deploy.plan.gateway import (API_KEY_ENV, GatewaySettings, WorkerMembership,
                                        gateway_settings, gateway_workers, worker_address,
                                        worker_membership)
from sglang_deploy.plan.gateway import gateway_url as plan_gateway_url
from sglang_deploy.plan.gateway_tier import admin_urls

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
        # Every router of a balanced gateway is a gateway of its own to the worker: it leaves and
        # joins each one (plan.gateway_tier.admin_urls).
        urls = admin_urls(name, dict(host.inventory.get_host(name).data.dict()), settings)
        for i, url in enumerate(urls):
            refs.append((name if len(urls) == 1 else f"{name} router {i}", url, key))
    return WorkerRun(membership=membership, gateways=tuple(refs), worker_key=p.api_key, log=host.log,
                     warn=lambda text: host.log_styled(text, fg="yellow", log_func=logger.warning))


def replica_url(host: Host, data: Mapping[str, Any], port: int) -> str | None:
    """Where the host's gateways reach its server on ``port`` (a replica's), as for the host's own."""
    membership = worker_membership(host.name, data, port, gateway_hosts=inventory_gateways(host))
    return membership.url if membership is not None else None


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


def runs_gateway(host: Host) -> bool:
    """Whether the host's data makes it a gateway host (``sglang_gateway`` set and not false)."""
    value = host.data.get("sglang_gateway")
    return value is not None and value is not False
