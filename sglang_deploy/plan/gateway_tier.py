"""A balanced gateway, pure: HAProxy in front of several sglang-router processes on one host
(``sglang_gateway.routers`` > 1), so that no single restart is in the clients' path.

Router i runs from its own unit (``<service>-router<i>``) on ``router_port + i`` (metrics on
``metrics_port + 1 + i``; HAProxy's own Prometheus exporter is on ``metrics_port``), with every
worker of the gateway in its ``--worker-urls``; the workers
join and leave every router (:func:`admin_urls`), as they do for several gateways. HAProxy
(Debian's ``haproxy``, 2.6 in Debian 12) listens on the gateway's ``port`` as
``<service>.service``, checks each router's ``GET /health`` (sglang-router 0.3.2 answers it 200
without a key, workers or not) and sends each request to the router with the fewest connections.

The files of one revision, by name (what the state directory keeps, ``deploy.gateway_tier``):
``unit`` (the gateway's own unit: the router with one, HAProxy with several), ``env`` (the API
key), ``launcher``, and with several routers ``balancer`` (HAProxy's configuration) and
``router<i>`` (router i's unit).
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Mapping

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.gateway import GatewaySettings, _url_host, worker_address
from sglang_deploy.plan.render import HEADER, _environment
from sglang_deploy import unitsyntax

#: Debian's haproxy package installs it here (``/usr/sbin/haproxy``).
HAPROXY = "/usr/sbin/haproxy"
HAPROXY_PACKAGE = "haproxy"
#: The backend and server names the deploy drains and enables through the admin socket.
BACKEND = "routers"
#: HAProxy's ``timeout client``/``server`` beyond the router's own request timeout: the router
#: answers a request that runs too long itself, before the balancer would cut the stream.
STREAM_MARGIN_S = 30
MAX_SHAPE_BYTES = 4096


def router_service(settings: GatewaySettings, index: int | None) -> str:
    """The unit name of router ``index`` of a balanced gateway; the gateway's own with one router."""
    return settings.service_name if index is None else f"{settings.service_name}-router{index}"


def router_name(index: int) -> str:
    """Router ``index``'s server name in the balancer, and its file's name in a revision."""
    return f"router{index}"


def admin_socket(settings: GatewaySettings) -> str:
    """HAProxy's admin socket (the unit's RuntimeDirectory, 0700, its dynamic user's; root reads it)."""
    return f"/run/{settings.service_name}/admin.sock"


def balancer_path(settings: GatewaySettings) -> str:
    """HAProxy's configuration: no secret in it, so beside Debian's own (``/etc/haproxy``)."""
    return f"/etc/haproxy/{settings.service_name}.cfg"


def router_unit_path(settings: GatewaySettings, index: int) -> str:
    return f"/etc/systemd/system/{router_service(settings, index)}.service"


def backend_address(settings: GatewaySettings) -> str:
    """Where HAProxy reaches the routers on their host: loopback when they bind every address."""
    try:
        ip = ipaddress.ip_address(settings.host)
    except ValueError:
        return settings.host
    if ip.is_unspecified:
        return "::1" if ip.version == 6 else "127.0.0.1"
    return str(ip)


def admin_urls(name: str, data: Mapping[str, object], settings: GatewaySettings) -> tuple[str, ...]:
    """Where the controller and the workers reach each router of gateway host ``name`` to list,
    register and remove workers: the gateway's own URL with one router; with several, each
    router's, at the host's address (``worker_address``) on ``router_port + i``."""
    address, _ = worker_address(name, data)
    if not settings.balanced:
        return (f"http://{_url_host(address)}:{settings.port}",)
    return tuple(f"http://{_url_host(address)}:{settings.router_port + i}" for i in range(settings.routers))


def render_balancer_config(host: str, settings: GatewaySettings) -> str:
    """HAProxy's configuration (templates/sglang-gateway-balancer.cfg.j2)."""
    address = backend_address(settings)
    routers = [{"name": router_name(i), "address": f"{address}:{settings.router_port + i}"}
               for i in range(settings.routers)]
    stream = settings.request_timeout_s + STREAM_MARGIN_S
    return _environment().get_template("sglang-gateway-balancer.cfg.j2").render(
        header=HEADER, host=host, service=settings.service_name, admin_socket=admin_socket(settings),
        bind=f"{settings.host}:{settings.port}", metrics_bind=f"{settings.host}:{settings.metrics_port}",
        routers=routers, check_s=settings.balancer_check_interval_s,
        stream_timeout_s=stream, hard_stop_s=stream + STREAM_MARGIN_S)


def render_balancer_unit(host: str, settings: GatewaySettings) -> str:
    """HAProxy's unit, the gateway's own name (templates/sglang-gateway-balancer.service.j2)."""
    try:
        return _environment().get_template("sglang-gateway-balancer.service.j2").render(
            header=HEADER, host=host, port=settings.port, routers=settings.routers, service=settings.service_name,
            router_units=[f"{router_service(settings, i)}.service" for i in range(settings.routers)],
            config_path=balancer_path(settings), haproxy=HAPROXY,
            low_port=min(settings.port, settings.metrics_port) < 1024)
    except (unitsyntax.ControlCharacter, ValueError) as exc:
        raise PlanError(host, "sglang_gateway", str(exc)) from None


def live_path(settings: GatewaySettings, name: str) -> str | None:
    """Where file ``name`` of any revision of this gateway goes live (None: not a name revisions
    hold). The launcher goes into this release's virtualenv: the unit of an older revision names
    its own release's launcher, which its virtualenv still holds."""
    fixed = {"unit": settings.unit_path, "env": settings.env_path, "launcher": settings.launcher_path,
             "balancer": balancer_path(settings)}
    if name in fixed:
        return fixed[name]
    if name.startswith("router") and name[6:].isdigit() and len(name) <= 8 and int(name[6:]) < 64:
        return router_unit_path(settings, int(name[6:]))
    return None


@dataclass(frozen=True)
class Shape:
    """Where a revision's routers listen: the gateway's port and router i's port (none: one
    router). A balanced revision keeps it as its ``shape`` file, so that a rollback to it gates
    each router where that revision put it."""

    port: int
    router_ports: tuple[int, ...]

    def as_json(self) -> str:
        return json.dumps({"port": self.port, "router_ports": list(self.router_ports)}) + "\n"


def shape_of(settings: GatewaySettings) -> Shape:
    return Shape(settings.port, tuple(settings.router_port + i for i in range(settings.routers))
                 if settings.balanced else ())


def parse_shape(text: str, fallback: Shape) -> Shape:
    """A revision's ``shape`` file (untrusted: read from the host), or ``fallback`` when it is not one."""
    try:
        raw = json.loads(text[:MAX_SHAPE_BYTES])
        port, ports = raw["port"], raw["router_ports"]
    except (ValueError, KeyError, TypeError):
        return fallback
    def is_port(p: object) -> bool:
        return isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536
    if is_port(port) and isinstance(ports, list) and len(ports) <= 64 and all(is_port(p) for p in ports):
        return Shape(port, tuple(ports))
    return fallback
