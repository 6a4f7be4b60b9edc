"""The SGLang Model Gateway (``sglang-router``) and its workers, pure: settings parsed and
bounded here, the inventory's gateways and each worker's membership; the router's launch
arguments, its unit and its root-only env file are rendered in ``sglang_deploy.plan.gateway_render``.

A gateway host (``sglang_gateway``) runs the router from its own pinned virtualenv under a
systemd unit. Serving hosts name the gateways they are workers of (``sglang_gateways``); the
gateway starts with their URLs (``--worker-urls``) and the deploy takes a worker out before its
restart and puts it back after its gate (``sglang_deploy.lifecycle.drain``), through the router's
admin API.

The router's API key is a secret: it never reaches the router's argv (readable by every local
user in /proc), the unit or a plan. sglang-router 0.3.2 reads it from ``--api-key`` only
(sglang_router/router_args.py, ``RouterArgs.add_cli_args``: no environment variable), so the
unit starts a small launcher (``sglang_deploy/deploy/host/gateway_launch.py``) that takes the
key from the environment (the root-only env file, ``EnvironmentFile=``) and builds the router's
arguments in-process.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.settings import DRAIN_DEFAULTS, DRAIN_SETTINGS, GATEWAY_DEFAULTS, GATEWAY_SETTINGS
from sglang_deploy.plan.spec import SecretRef, check_text
from sglang_deploy.plan.spec_checks import check_unit_name, key_text, normalize_version, shown
from sglang_deploy.plan.intents import INTENTS
from sglang_deploy.plan.pd_gateway import PD_FLAGS, ROLE_POLICIES, ROLES, RoleOf
from sglang_deploy.plan.watch import absolute_dir, span_seconds, whole_number

GATEWAY_KEYS = tuple(s.name for s in GATEWAY_SETTINGS)
DRAIN_KEYS = tuple(s.name for s in DRAIN_SETTINGS)

#: sglang-router releases whose launch flags ``router_argv`` writes (checked against each
#: release's sglang_router/router_args.py, ``RouterArgs.add_cli_args``).
SUPPORTED_ROUTER_VERSIONS = ("0.3.2",)

#: ``--policy`` choices of sglang-router 0.3.2 (sglang_router/router_args.py, RouterArgs.add_cli_args).
ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two", "manual")

#: Every flag ``router_argv`` writes, per release; each is an option of that release's parser
#: (sglang-router 0.3.2: sglang_router/router_args.py, RouterArgs.add_cli_args, called by
#: sglang_router/launch_router.py parse_router_args with use_router_prefix=False).
ROUTER_FLAGS: Mapping[str, tuple[str, ...]] = {
    "0.3.2": ("--host", "--port", "--policy", "--prometheus-port", "--prometheus-host", "--request-timeout-secs",
              "--retry-max-retries", "--health-check-interval-secs", "--worker-urls", *PD_FLAGS),
}

#: sglang-router 0.3.2 waits this long for in-flight requests when it is stopped
#: (RouterArgs.shutdown_grace_period_secs, sglang_router/router_args.py); the unit's
#: TimeoutStopSec leaves it that and a margin before systemd kills it.
ROUTER_SHUTDOWN_GRACE_S = 180
STOP_MARGIN_S = 30

#: The variable of the gateway's env file that holds its API key; the launcher
#: (sglang_deploy/deploy/host/gateway_launch.py, API_KEY_ENV) reads it under the same name.
API_KEY_ENV = "SGLANG_GATEWAY_API_KEY"
LAUNCHER_NAME = "gateway_launch.py"

# Bounds (seconds, counts). A request longer than a day or a health check rarer than hourly is a typo.
MIN_REQUEST_TIMEOUT_S, MAX_REQUEST_TIMEOUT_S = 1, 24 * 3600
MIN_HEALTH_INTERVAL_S, MAX_HEALTH_INTERVAL_S = 1, 3600
MAX_RETRIES = 20
MIN_DRAIN_TIMEOUT_S, MAX_DRAIN_TIMEOUT_S = 0, 24 * 3600
MIN_ADMIT_TIMEOUT_S, MAX_ADMIT_TIMEOUT_S = 1, 3600
MAX_GATEWAYS_PER_WORKER = 64
MAX_WORKERS_PER_GATEWAY = 4096
# A host's data-parallel replicas behind a gateway: at most one per GPU; more than any node has.
MAX_REPLICAS_PER_HOST = 64
MAX_URL_CHARS = 2048
#: Router processes behind the host's balancer (``routers``); its health check's interval.
MAX_ROUTERS = 16
MIN_CHECK_INTERVAL_S, MAX_CHECK_INTERVAL_S = 1, 60

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
# A worker's base URL as the router takes it (--worker-urls: "use brackets for IPv6"): scheme,
# host and port; no user info, path, query or fragment (the router appends its own paths).
_WORKER_URL = re.compile(r"^(?P<scheme>https?)://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)"
                         r"(?::(?P<port>[0-9]{1,5}))?/?$")


class GatewaySecretRef(SecretRef):
    """The gateway's API key: a `SecretRef` (read on the controller like ``sglang_secrets``)
    whose errors name ``sglang_gateway.api_key``."""

    @property
    def inventory_field(self) -> str:
        return "sglang_gateway.api_key"


@dataclass(frozen=True)
class GatewaySettings:
    """``sglang_gateway`` of one host (docs/settings.md)."""

    version: str = GATEWAY_DEFAULTS["version"]
    port: int = GATEWAY_DEFAULTS["port"]
    metrics_port: int = GATEWAY_DEFAULTS["metrics_port"]
    host: str = GATEWAY_DEFAULTS["host"]  # the bind address
    policy: str = GATEWAY_DEFAULTS["policy"]
    request_timeout_s: int = GATEWAY_DEFAULTS["request_timeout"]
    retries: int = GATEWAY_DEFAULTS["retries"]
    health_interval_s: int = GATEWAY_DEFAULTS["health_interval"]
    api_key: SecretRef | None = None
    service_name: str = GATEWAY_DEFAULTS["service_name"]
    venvs_dir: str = GATEWAY_DEFAULTS["venvs_dir"]
    routers: int = GATEWAY_DEFAULTS["routers"]
    router_port: int = GATEWAY_DEFAULTS["port"] + 1  # the first router's, with routers > 1
    balancer_check_interval_s: int = GATEWAY_DEFAULTS["balancer_check_interval"]
    prefill_policy: str | None = None  # prefill/decode mode: each role's (None: ``policy``)
    decode_policy: str | None = None

    @property
    def balanced(self) -> bool:
        """HAProxy in front of ``routers`` router processes (``plan.gateway_tier``), not one router."""
        return self.routers > 1

    @property
    def venv(self) -> str:
        """One virtualenv per release, so installing another never touches the running one."""
        return f"{self.venvs_dir}/sglang-router-{self.version}"

    @property
    def python(self) -> str:
        return f"{self.venv}/bin/python"

    @property
    def launcher_path(self) -> str:
        """Where the deploy puts gateway_launch.py: in the release's virtualenv, beside what it imports."""
        return f"{self.venv}/{LAUNCHER_NAME}"

    @property
    def unit_path(self) -> str:
        return f"/etc/systemd/system/{self.service_name}.service"

    @property
    def config_dir(self) -> str:
        """Root-only (0700): holds the env file."""
        return f"/etc/{self.service_name}"

    @property
    def env_path(self) -> str:
        """Root-only (0600): the API key."""
        return f"{self.config_dir}/{self.service_name}.env"

    @property
    def secrets(self) -> tuple[SecretRef, ...]:
        return (self.api_key,) if self.api_key is not None else ()

    def as_dict(self) -> dict[str, Any]:
        return {"version": self.version, "port": self.port, "metrics_port": self.metrics_port, "host": self.host,
                "policy": self.policy, "request_timeout_s": self.request_timeout_s, "retries": self.retries,
                "health_interval_s": self.health_interval_s,
                "api_key": self.api_key.describe() if self.api_key else None,
                "service_name": self.service_name, "venvs_dir": self.venvs_dir, "routers": self.routers,
                **{f"{r}_policy": getattr(self, f"{r}_policy") for r in ROLES if getattr(self, f"{r}_policy")},
                **({"router_port": self.router_port, "balancer_check_interval_s": self.balancer_check_interval_s}
                   if self.balanced else {})}


@dataclass(frozen=True)
class DrainSettings:
    """``sglang_drain`` of a worker. ``skip``: the gateways are not touched around its restart."""

    timeout_s: int = DRAIN_DEFAULTS["timeout"]
    admit_timeout_s: int = DRAIN_DEFAULTS["admit_timeout"]
    skip: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"timeout_s": self.timeout_s, "admit_timeout_s": self.admit_timeout_s, "skip": self.skip}


@dataclass(frozen=True)
class WorkerMembership:
    """A serving host as a worker of its gateways (``sglang_gateways``)."""

    host: str
    gateways: tuple[str, ...]  # inventory names of gateway hosts, as listed
    url: str  # what the gateways reach its server at
    drain: DrainSettings = DrainSettings()
    role: str | None = None  # ``sglang_role``: prefill or decode (None: both in one server)
    bootstrap_port: int | None = None  # a prefill server's (``disaggregation_bootstrap_port``)

    @property
    def role_of(self) -> RoleOf | None:
        return RoleOf(self.role, self.bootstrap_port) if self.role is not None else None

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "gateways": list(self.gateways), "url": self.url, "drain": self.drain.as_dict(),
                **({"role": self.role, "bootstrap_port": self.bootstrap_port} if self.role else {})}


# ---------------------------------------------------------------------------
# Small checks, each naming the host and the field


def _port(host: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise PlanError(host, key, f"must be a port number 1..65535, got {shown(value)}")
    return value


def _address(host: str, key: str, value: Any) -> str:
    """A host name or an IP address (IPv6 without brackets; brackets are dropped)."""
    if not isinstance(value, str) or not value.strip():
        raise PlanError(host, key, f"must be a host name or IP address, got {shown(value)}")
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if "%" in text:
        raise PlanError(host, key, f"{shown(value)}: an IPv6 zone (%...) is not supported; use a global address")
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if not _HOST_NAME.match(text) or ".." in text:
        raise PlanError(host, key, f"{shown(value)} is not a host name or IP address")
    return text


def _url_host(address: str) -> str:
    """``address`` as the host part of a URL: an IPv6 address in brackets."""
    return f"[{address}]" if ":" in address else address


def _unknown_keys(host: str, field: str, raw: Mapping[Any, Any], known: Sequence[str]) -> None:
    for key in raw:
        if key not in known:
            raise PlanError(host, f"{field}.{key_text(key)}", f"unknown setting; known: {', '.join(known)}")


def _secret(host: str, key: str, raw: Any) -> GatewaySecretRef:
    """``{env: VAR}`` or ``{file: PATH}`` (as ``sglang_secrets`` takes them). No message echoes
    what was given: it may be the key itself."""
    if not isinstance(raw, Mapping) or len(raw) != 1 or next(iter(raw)) not in ("env", "file"):
        raise PlanError(host, key, "must be {env: VARIABLE} or {file: /path/on/controller}: where the controller "
                                   "reads the key, not the key itself")
    kind, ref = next(iter(raw.items()))
    if not isinstance(ref, str) or not ref:
        raise PlanError(host, f"{key}.{kind}", "must be a non-empty string")
    check_text(host, f"{key}.{kind}", ref)
    if kind == "env" and not _ENV_NAME.match(ref):
        raise PlanError(host, f"{key}.env", "is not a valid environment variable name (name the variable that "
                                            "holds the key, not the key itself)")
    return GatewaySecretRef(name="api_key", env_var=API_KEY_ENV, kind=kind, ref=ref)


def router_version(host: str, field: str, value: Any) -> str:
    """A supported sglang-router release, or a PlanError saying which are."""
    version = normalize_version(host, field, value)
    if version not in SUPPORTED_ROUTER_VERSIONS:
        raise PlanError(host, field, f"sglang-router {version} is not supported; supported: "
                        f"{', '.join(SUPPORTED_ROUTER_VERSIONS)} (its launch flags are checked against each "
                        "release's sglang_router/router_args.py)")
    return version


# ---------------------------------------------------------------------------
# The settings


def gateway_settings(host: str, data: Mapping[str, Any]) -> GatewaySettings | None:
    """``sglang_gateway`` from a host's merged data: None when the host runs no gateway (unset,
    null or false), the defaults for ``true``, else the mapping's keys checked and bounded;
    PlanError names the host and ``sglang_gateway.<key>``."""
    raw = data.get("sglang_gateway")
    if raw is None or raw is False:
        return None
    if raw is True:
        raw = {}
    elif not isinstance(raw, Mapping):
        raise PlanError(host, "sglang_gateway", f"must be true or a mapping with keys {', '.join(GATEWAY_KEYS)}, "
                                                f"got {shown(raw) if not isinstance(raw, str) else 'a string'}")
    _unknown_keys(host, "sglang_gateway", raw, GATEWAY_KEYS)
    get = {**GATEWAY_DEFAULTS, **raw}.get
    f = "sglang_gateway."
    policy = get("policy")
    if policy not in ROUTER_POLICIES:
        raise PlanError(host, f + "policy", f"must be one of {', '.join(ROUTER_POLICIES)} (sglang-router's "
                                            f"--policy), got {shown(policy)}")
    for role, choices in ROLE_POLICIES.items():
        if get(f"{role}_policy") not in (None, *choices):
            raise PlanError(host, f"{f}{role}_policy", f"must be one of {', '.join(choices)} (sglang-router's "
                                                       f"--{role}-policy), got {shown(get(f'{role}_policy'))}")
    settings = GatewaySettings(
        version=router_version(host, f + "version", get("version")),
        port=_port(host, f + "port", get("port")),
        metrics_port=_port(host, f + "metrics_port", get("metrics_port")),
        host=_address(host, f + "host", get("host")),
        policy=policy,
        request_timeout_s=span_seconds(host, f + "request_timeout", get("request_timeout"), MIN_REQUEST_TIMEOUT_S,
                                   MAX_REQUEST_TIMEOUT_S),
        retries=whole_number(host, f + "retries", get("retries"), 0, MAX_RETRIES),
        health_interval_s=span_seconds(host, f + "health_interval", get("health_interval"), MIN_HEALTH_INTERVAL_S,
                                   MAX_HEALTH_INTERVAL_S),
        api_key=None if get("api_key") is None else _secret(host, f + "api_key", get("api_key")),
        service_name=check_unit_name(host, f + "service_name", _name(host, f + "service_name", get("service_name"))),
        venvs_dir=absolute_dir(host, f + "venvs_dir", get("venvs_dir")),
        routers=whole_number(host, f + "routers", get("routers"), 1, MAX_ROUTERS),
        router_port=_port(host, f + "router_port", get("router_port") if get("router_port") is not None
                          else min(_port(host, f + "port", get("port")) + 1, 65535)),
        balancer_check_interval_s=span_seconds(host, f + "balancer_check_interval", get("balancer_check_interval"),
                                               MIN_CHECK_INTERVAL_S, MAX_CHECK_INTERVAL_S),
        prefill_policy=get("prefill_policy"), decode_policy=get("decode_policy"),
    )
    if settings.metrics_port == settings.port:
        raise PlanError(host, f + "metrics_port", f"is the gateway's own port ({settings.port}); choose another")
    if not settings.balanced:
        for key in ("router_port", "balancer_check_interval"):
            if raw.get(key) is not None:
                raise PlanError(host, f + key, "only means something with routers of 2 or more (HAProxy in front)")
        return settings
    ports = {"port": [settings.port],
             "router_port": [settings.router_port + i for i in range(settings.routers)],
             "metrics_port": [settings.metrics_port + i for i in range(settings.routers + 1)]}
    seen: dict[int, str] = {}
    for key, numbers in ports.items():
        for number in numbers:
            if number > 65535:
                raise PlanError(host, f + key, f"{settings.routers} routers need ports up to {numbers[-1]}; the "
                                               "last port is 65535")
            if number in seen:
                raise PlanError(host, f + key, f"port {number} is also the gateway's {seen[number]} (router i "
                                               f"listens on router_port + i, its metrics on metrics_port + 1 + i)")
            seen[number] = key
    return settings


def _name(host: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise PlanError(host, key, f"must be a non-empty string, got {shown(value)}")
    return check_text(host, key, value)


def drain_settings(host: str, data: Mapping[str, Any]) -> DrainSettings:
    """``sglang_drain``: the defaults when unset, ``skip``, or a mapping of its keys."""
    raw = data.get("sglang_drain")
    if raw is None:
        return DrainSettings()
    if raw == "skip":
        return DrainSettings(skip=True)
    if not isinstance(raw, Mapping):
        raise PlanError(host, "sglang_drain", f"must be skip or a mapping with keys {', '.join(DRAIN_KEYS)}, "
                                              f"got {shown(raw)}")
    _unknown_keys(host, "sglang_drain", raw, DRAIN_KEYS)
    get = {**DRAIN_DEFAULTS, **raw}.get
    return DrainSettings(
        timeout_s=span_seconds(host, "sglang_drain.timeout", get("timeout"), MIN_DRAIN_TIMEOUT_S, MAX_DRAIN_TIMEOUT_S),
        admit_timeout_s=span_seconds(host, "sglang_drain.admit_timeout", get("admit_timeout"), MIN_ADMIT_TIMEOUT_S,
                                 MAX_ADMIT_TIMEOUT_S))


def worker_address(host: str, data: Mapping[str, Any]) -> tuple[str, str]:
    """(address, field): where a worker's server is reached by default, ``sglang_node_address``,
    else ``ssh_hostname``, else the host name; ``field`` names where it came from."""
    for key in ("sglang_node_address", "ssh_hostname"):
        if data.get(key) is not None:
            return _address(host, key, data[key]), key
    try:
        return _address(host, "host name", host), "host name"
    except PlanError:
        raise PlanError(host, "sglang_worker_url", f"unset, and the host name {shown(host)} is not an address a "
                                                   "gateway can reach: set sglang_worker_url or "
                                                   "sglang_node_address") from None


def worker_url(host: str, value: Any) -> str:
    """``sglang_worker_url`` checked: an http(s) base URL the router can take, without a trailing '/'."""
    key = "sglang_worker_url"
    if not isinstance(value, str) or not value:
        raise PlanError(host, key, f"must be an http(s) URL such as http://10.0.0.5:30000, got {shown(value)}")
    if len(value) > MAX_URL_CHARS:
        raise PlanError(host, key, f"is {len(value)} characters; at most {MAX_URL_CHARS}")
    check_text(host, key, value)
    if "@" in value:  # user info: credentials would be in the router's argv and the plan
        raise PlanError(host, key, "holds user info (user:password@ or token@); the gateway authenticates to its "
                                   "workers with sglang_gateway.api_key")
    m = _WORKER_URL.match(value)
    if not m:
        raise PlanError(host, key, f"must be scheme://host[:port] (http or https; IPv6 in brackets; no path, query "
                                   f"or user info), got {shown(value)}")
    if m.group("port") is not None and not 1 <= int(m.group("port")) <= 65535:
        raise PlanError(host, key, f"port {m.group('port')} is not 1..65535")
    if m.group("host").startswith("["):
        try:
            ipaddress.IPv6Address(m.group("host")[1:-1])
        except ValueError:
            raise PlanError(host, key, f"{m.group('host')} is not an IPv6 address") from None
    return value.rstrip("/")


def worker_membership(host: str, data: Mapping[str, Any], port: int, address: str | None = None,
                      gateway_hosts: Mapping[str, Any] | None = None,
                      bootstrap_port: int | None = None) -> WorkerMembership | None:
    """The host as a worker of its gateways, or None when it names none.

    ``port``: the server's port (the plan's ``port`` intent); ``address``: where the gateways
    reach it when ``sglang_worker_url`` is unset (None: :func:`worker_address`; for a multi-node
    tp group, the caller passes rank 0's, the only rank that serves); ``gateway_hosts``: the
    inventory's gateway hosts, name -> their `GatewaySettings` (or anything: only the names are
    read); ``bootstrap_port``: a prefill server's (its plan's; None: as the inventory declares it).
    PlanError names the host and the field."""
    gateway_hosts = gateway_hosts or {}
    raw = data.get("sglang_gateways")
    if raw is None or (isinstance(raw, (list, tuple)) and not raw):
        for key in ("sglang_worker_url", "sglang_drain"):
            if data.get(key) is not None:
                raise PlanError(host, key, "only means something for a worker of a gateway: set sglang_gateways")
        return None
    if not isinstance(raw, (list, tuple)):
        hint = f" (a list: [{raw}])" if isinstance(raw, str) and _HOST_NAME.match(raw) else ""
        raise PlanError(host, "sglang_gateways", f"must be a list of inventory host names{hint}, got "
                                                 f"{shown(raw)}")
    if len(raw) > MAX_GATEWAYS_PER_WORKER:
        raise PlanError(host, "sglang_gateways", f"names {len(raw)} gateways; at most {MAX_GATEWAYS_PER_WORKER}")
    if host in gateway_hosts:
        raise PlanError(host, "sglang_gateways", "this host runs a gateway itself (sglang_gateway); a gateway host "
                                                 "is not a worker of a gateway: serve from another host")
    known = ", ".join(sorted(gateway_hosts)) or "none (no host of this inventory sets sglang_gateway)"
    names: list[str] = []
    for i, name in enumerate(raw):
        field = f"sglang_gateways[{i}]"
        if not isinstance(name, str) or not name:
            raise PlanError(host, field, f"must be an inventory host name, got {shown(name)}")
        if name == host:
            raise PlanError(host, field, "names this host itself; a worker's gateways run on other hosts")
        if name not in gateway_hosts:
            raise PlanError(host, field, f"{key_text(name)} is not a gateway host of this inventory (a host with "
                                         f"sglang_gateway); gateway hosts: {known}")
        if name in names:
            raise PlanError(host, field, f"{name} is listed twice")
        names.append(name)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise PlanError(host, "sglang_intents.port", f"must be a port number 1..65535, got {shown(port)}")
    if data.get("sglang_worker_url") is not None:
        url = worker_url(host, data["sglang_worker_url"])
    else:
        addr = _address(host, "sglang_node_address", address) if address is not None else worker_address(host, data)[0]
        url = f"http://{_url_host(addr)}:{port}"
    role = data.get("sglang_role") if data.get("sglang_role") in ROLES else None  # else the spec's to refuse
    if role == "prefill" and bootstrap_port is None:
        bootstrap_port = declared_port(host, data, "disaggregation_bootstrap_port")
    return WorkerMembership(host=host, gateways=tuple(names), url=url, drain=drain_settings(host, data), role=role,
                            bootstrap_port=bootstrap_port if role == "prefill" else None)


def _endpoint(url: str) -> tuple[str, int] | None:
    """(host, port) a worker or gateway URL reaches, spelled one way (lower case, an IPv6 address
    compressed, the scheme's default port filled in), whatever the scheme: two URLs that differ only
    in scheme still reach one socket. None for a URL that is not scheme://host[:port]."""
    m = _WORKER_URL.match(url)
    if m is None:
        return None
    host = m.group("host").lower()
    if host.startswith("["):
        try:
            host = f"[{ipaddress.IPv6Address(host[1:-1]).compressed}]"
        except ValueError:
            return None
    port = int(m.group("port")) if m.group("port") else (443 if m.group("scheme").lower() == "https" else 80)
    return host, port


def gateway_own_urls(name: str, data: Mapping[str, Any], settings: GatewaySettings) -> dict[str, str]:
    """What gateway host ``name`` itself listens on, as URLs -> what each is: its own URL
    (:func:`gateway_url`), its metrics port and, balanced (routers >= 2), each router's port
    (``router_port + i``, as ``gateway_tier.admin_urls`` reaches them; that module imports this one).
    A worker there would be the gateway routing to itself."""
    address, _ = worker_address(name, data)
    own = {gateway_url(name, data, settings): "its own URL",
           f"http://{_url_host(address)}:{settings.metrics_port}": "its metrics port"}
    if settings.balanced:
        for i in range(settings.routers):
            own.setdefault(f"http://{_url_host(address)}:{settings.router_port + i}", f"its router {i}'s port")
    return own


def gateway_workers(memberships: Sequence[WorkerMembership],
                    units: Mapping[str, str] | None = None,
                    gateway_urls: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, tuple[str, ...]]:
    """Gateway host -> its workers' URLs, in the order of ``memberships`` (inventory order).

    Members of one multi-node tp group (``units``: host -> group name) are one worker: its URL
    is listed once. Two other workers of one gateway with the same URL are refused, naming both
    hosts: the router would count one server twice. ``gateway_urls`` (gateway -> what it listens
    on: :func:`gateway_own_urls`): a worker at one of them, its scheme aside, is refused naming the
    worker and the gateway: the router's --worker-urls would name the router itself."""
    units = units or {}
    own = {g: {_endpoint(url): (url, what) for url, what in urls.items()}
           for g, urls in (gateway_urls or {}).items()}
    out: dict[str, list[str]] = {}
    seen: dict[tuple[str, str], str] = {}  # (gateway, url) -> first host
    group_url: dict[tuple[str, str], str] = {}  # (gateway, tp group) -> its one URL
    for m in memberships:
        for g in m.gateways:
            itself = own.get(g, {}).get(_endpoint(m.url))
            if itself is not None:
                raise PlanError(m.host, "sglang_worker_url",
                                f"{m.url} is gateway host {g}'s own address ({itself[1]}, {itself[0]}): the gateway "
                                "would route to itself; give the worker its own address or port")
            unit = units.get(m.host)
            if unit is not None and group_url.setdefault((g, unit), m.url) != m.url:
                raise PlanError(m.host, "sglang_worker_url", f"{m.url}, but tp group {unit} is one worker of gateway "
                                                             f"{g}, at {group_url[(g, unit)]} (rank 0's server)")
            first = seen.get((g, m.url))
            if first is not None:
                if units.get(first) is not None and units.get(first) == units.get(m.host):
                    continue  # the same tp group: one worker
                raise PlanError(m.host, "sglang_worker_url", f"{m.url} is also {first}'s worker URL in gateway {g}; "
                                                             "each worker needs its own")
            seen[(g, m.url)] = m.host
            urls = out.setdefault(g, [])
            if len(urls) >= MAX_WORKERS_PER_GATEWAY:
                raise PlanError(m.host, "sglang_gateways", f"gateway {g} has more than {MAX_WORKERS_PER_GATEWAY} "
                                                           "workers")
            urls.append(m.url)
    return {g: tuple(urls) for g, urls in out.items()}


# ---------------------------------------------------------------------------
# The whole inventory's gateways


def declared_port(host: str, data: Mapping[str, Any], intent: str = "port") -> int:
    """A serving host's port (``intent``: or a prefill server's ``disaggregation_bootstrap_port``) as
    its inventory declares it (``sglang_intents.<intent>``, plain or with a reason), else SGLang's
    default: what its gateways reach it on unless ``sglang_worker_url`` says."""
    raw = data.get("sglang_intents") or {}
    port = raw.get(intent, INTENTS[intent].default) if isinstance(raw, Mapping) else INTENTS[intent].default
    if isinstance(port, Mapping):
        port = port.get("value")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise PlanError(host, f"sglang_intents.{intent}", f"must be a port number 1..65535, got {shown(port)}")
    return port


def gateway_url(name: str, data: Mapping[str, Any], settings: GatewaySettings) -> str:
    """Where the controller and the workers reach gateway host ``name`` (its data ``data``): its
    address (``worker_address``) and port. PlanError names the host and the field."""
    address, _ = worker_address(name, data)
    return f"http://{_url_host(address)}:{settings.port}"

