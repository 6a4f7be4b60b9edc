"""A gateway host's deploy (``sglang_gateway``): the pinned sglang-router (and, for several routers,
Debian's HAProxy) installed and the revision staged before anything stops (``deploy.gateway_host``);
then the revision made live by one lifecycle, one router or several (``deploy.gateway_roll``:
the steps ``lifecycle.gateway_roll`` decides, gated, and walked back on failure). Every path writes
the host's record for the rollout (``lifecycle.rollback_policy.gateway_result``).
"""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api import deploy
from pyinfra.api.host import Host
from pyinfra.operations import apt, python, server

from sglang_deploy.deploy import gateway_roll
from sglang_deploy.deploy.gateway_host import (GatewayState, install_router, plan_gateway, stage_gateway)
from sglang_deploy.deploy.results import append_record, record_gateway_callback, results_file
from sglang_deploy.errors import PlanError
from sglang_deploy.lifecycle.rollback_policy import gateway_result
from sglang_deploy.plan.gateway import gateway_settings
from sglang_deploy.plan.gateway_tier import HAPROXY_PACKAGE


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
    if settings.balanced and have.get("haproxy") != "yes":
        apt.packages(name="Install HAProxy (Debian's haproxy)", packages=[HAPROXY_PACKAGE])
    if g.revision not in have["staged"]:
        stage_gateway(name="Stage the gateway's revision aside", g=g)
    if have.get("current") == g.revision and have.get("active") == "active":
        if results_file():
            python.call(name="Record the gateway's result (unchanged)", function=record_gateway_callback,
                        record=gateway_result(host.name, old_revision=g.revision, new_revision=g.revision,
                                              restarted=False))
        return
    python.call(name="Make the gateway's revision live (one router at a time) and gate it",
                function=gateway_roll.roll_callback, g=g, have=have)
