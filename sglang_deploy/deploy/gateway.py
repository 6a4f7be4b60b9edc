"""The SGLang Model Gateway (sglang-router) in a worker's deploy: the inventory's gateways as every host
sees them, and a serving host's leave and re-admission around its restart. The gateway host's own
deploy is ``sglang_deploy.deploy.gateway_host``; the run's restart steps, ``sglang_deploy.deploy.restart_steps``.

A serving host with ``sglang_gateways`` is a worker: its restart is carried out as the drain state
machine asks (``sglang_deploy.deploy.restart_run``): before anything changes the gateways are read
and the worker leaves them, its in-flight requests finish (the server's own /metrics, bounded by
``sglang_drain.timeout``), the deploy stops and restarts it, and only after its gate passes (or
its rollback re-gates) is it registered again. The HTTP is ``deploy.gateway_client``'s.
"""

from __future__ import annotations

from typing import Any, Mapping

from pyinfra import logger
from pyinfra.api.host import Host

from sglang_deploy.deploy import gateway_client
from sglang_deploy.deploy.context import HostDeploy, Prepared
from sglang_deploy.deploy.gating import fail_host
from sglang_deploy.deploy.restart_run import RestartRun, deregister
from sglang_deploy.deploy.secrets import read_secrets
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.gateway import (API_KEY_ENV, GatewaySettings,
                                        gateway_own_urls, gateway_settings, gateway_workers, worker_address,
                                        worker_membership)
from sglang_deploy.plan.gateway import gateway_url as plan_gateway_url
from sglang_deploy.plan.gateway_tier import admin_urls

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


def worker_run(host: Host, data: dict[str, Any], p: Prepared, leader: str | None = None) -> RestartRun | None:
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
    bootstrap = p.plan.intents.get("disaggregation_bootstrap_port")  # a prefill server's, as its plan has it
    membership = worker_membership(host.name, data, int(p.plan.intents["port"].value), address=address,
                                   gateway_hosts=gateways, bootstrap_port=int(bootstrap.value) if bootstrap else None)
    if membership is None:
        return None
    # What each of its gateways listens on, so that a worker the gateway would route to itself is
    # refused in its own deploy too (a run limited to the workers never plans the gateway host),
    # naming both hosts (plan.gateway.gateway_workers); two workers with one URL are the whole
    # inventory's check (plan.gateway_fleet.inventory_gateways: `plan` and the gateway host's deploy).
    own = {}
    for name in membership.gateways:
        try:
            own[name] = gateway_own_urls(name, dict(host.inventory.get_host(name).data.dict()), gateways[name])
        except PlanError:  # the gateway has no address of its own to compare with: nothing to collide
            continue
    gateway_workers([membership], None, own)
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
    return RestartRun(membership=membership, gateways=tuple(refs), worker_key=p.api_key, log=host.log,
                     warn=lambda text: host.log_styled(text, fg="yellow", log_func=logger.warning))


def replica_url(host: Host, data: Mapping[str, Any], port: int) -> str | None:
    """Where the host's gateways reach its server on ``port`` (a replica's), as for the host's own."""
    membership = worker_membership(host.name, data, port, gateway_hosts=inventory_gateways(host))
    return membership.url if membership is not None else None


def retire_callback(state: Any, host: Host, ctx: HostDeploy, run: RestartRun, urls: tuple[str, ...]) -> bool:
    """Before the replicas that stop first are stopped (``lifecycle.retire.stale_units``: those the
    plan no longer runs, and those whose GPUs or port an earlier replica takes): each leaves the
    host's gateways and its in-flight requests finish (up to the drain timeout), as a worker does
    before its restart. A gateway that cannot be reached fails the host here, before anything on
    it changes; ``sglang_drain: skip`` skips the wait, not the leave."""
    membership = run.membership
    if membership is None:  # no gateway lists the host's replicas
        return True
    for url in urls:
        try:
            deregister(run, url)  # also with sglang_drain: skip: a stopped replica would stay listed for good
        except gateway_client.GatewayError as exc:
            ctx.error = (f"could not take replica {url}, which stops before the host's first replica goes live, "
                         f"out of its gateways; nothing changed: {exc}")
            fail_host(host, ctx, ctx.error)
            return False
        if membership.drain.skip:
            host.log(f"replica {url} is out of {run.names()}; drain skipped (sglang_drain: skip)")
            continue
        timed_out, _ = gateway_client.wait_idle(url, run.worker_key, membership.drain.timeout_s, poll_s=0.25)
        host.log(f"replica {url} is out of {run.names()}" + (" (drain timeout: stopped with requests in flight)"
                                                              if timed_out else "; in-flight requests done"))
    return True


def keep_listed_callback(state: Any, host: Host, ctx: HostDeploy, run: RestartRun) -> bool:
    """No restart: a worker that serves its deployed revision but is missing from a gateway (a
    re-admission that failed earlier, a gateway restarted by hand) is registered again."""
    membership, missing = run.membership, []
    if membership is None:
        return True
    try:
        for client, (name, _, _) in zip(run.clients(), run.gateways):
            if not any(w.url == membership.url for w in client.workers()):
                client.register(membership.url, run.worker_key, membership.role_of)
                client.wait_registered(membership.url, membership.drain.admit_timeout_s)
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
