"""The SGLang Model Gateway's files, pure: the router's launch arguments (sglang-router 0.3.2's own
flags), the unit that starts it through the launcher (the API key never in its argv) and its
root-only env file. Settings are ``sglang_deploy.plan.gateway``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from sglang_deploy import unitsyntax
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.render import HEADER, _environment, secret_value
from sglang_deploy.plan.gateway import (_WORKER_URL, API_KEY_ENV, LAUNCHER_NAME, MAX_WORKERS_PER_GATEWAY,
                                        ROUTER_FLAGS, ROUTER_SHUTDOWN_GRACE_S, STOP_MARGIN_S,
                                        SUPPORTED_ROUTER_VERSIONS, GatewaySettings)
from sglang_deploy.plan.pd_gateway import RoleOf, router_role_args
from sglang_deploy.plan.gateway_tier import (backend_address, balancer_path, render_balancer_config,
                                             render_balancer_unit, router_name, router_service, router_unit_path,
                                             shape_of)


def router_argv(settings: GatewaySettings, worker_urls: Sequence[str], index: int | None = None,
                roles: Mapping[str, RoleOf] | None = None) -> list[str]:
    """The router's launch arguments (after ``python -m sglang_router.launch_router``, or the
    launcher) for ``settings.version``. The API key is not among them: the launcher adds it
    in-process from the environment. ``--worker-urls`` (nargs="*") comes last; with ``roles`` (the
    workers' roles: a gateway of prefill and decode servers) the router's prefill/decode mode and
    its ``--prefill``/``--decode`` workers instead (``plan.pd_gateway``). ``index``: router
    ``index`` of a balanced gateway (``settings.routers`` > 1), on ``router_port + index`` with its
    metrics on ``metrics_port + 1 + index`` (``metrics_port`` is the balancer's); None: the one
    router, on ``port``."""
    if settings.version not in ROUTER_FLAGS:
        raise ValueError(f"sglang-router {settings.version}: no flags known; supported: "
                         f"{', '.join(SUPPORTED_ROUTER_VERSIONS)}")
    for url in worker_urls:
        if not isinstance(url, str) or not _WORKER_URL.match(url):
            raise ValueError(f"not a worker URL the router takes: {url!r}")
    if len(worker_urls) > MAX_WORKERS_PER_GATEWAY:
        raise ValueError(f"{len(worker_urls)} workers; at most {MAX_WORKERS_PER_GATEWAY}")
    port, metrics = ((settings.port, settings.metrics_port) if index is None else
                     (settings.router_port + index, settings.metrics_port + 1 + index))
    argv = ["--host", settings.host, "--port", str(port), "--policy", settings.policy,
            "--prometheus-port", str(metrics), "--prometheus-host", settings.host,
            "--request-timeout-secs", str(settings.request_timeout_s),
            "--retry-max-retries", str(settings.retries),
            "--health-check-interval-secs", str(settings.health_interval_s)]
    if roles:
        argv += router_role_args(worker_urls, roles, {"prefill": settings.prefill_policy,
                                                      "decode": settings.decode_policy})
    else:
        argv += ["--worker-urls", *worker_urls]
    unknown = {w for w in argv if w.startswith("--")} - set(ROUTER_FLAGS[settings.version])
    if unknown:  # a flag written here but not checked against the release's parser
        raise RuntimeError(f"sglang-router {settings.version}: flags not in its parser: {sorted(unknown)}")
    return argv


def exec_start_lines(settings: GatewaySettings, worker_urls: Sequence[str], index: int | None = None,
                     roles: Mapping[str, RoleOf] | None = None) -> list[str]:
    """The unit's ExecStart words: the venv's Python, isolated (-I), runs the launcher with the
    router's arguments; one option and its values per line."""
    words = router_argv(settings, worker_urls, index, roles)
    lines = [" ".join(unitsyntax.exec_quote(w) for w in (settings.python, "-I", settings.launcher_path))]
    for word in words:
        if word.startswith("--") or len(lines) == 1:
            lines.append(unitsyntax.exec_quote(word))
        else:
            lines[-1] += " " + unitsyntax.exec_quote(word)
    return lines


@dataclass(frozen=True)
class GatewayFiles:
    """``<service_name>.service`` and its root-only env file."""

    unit: str
    env: str

    def as_dict(self) -> dict[str, str]:
        return {"unit": self.unit, "env": self.env}


def render_gateway_unit(host: str, settings: GatewaySettings, worker_urls: Sequence[str],
                        index: int | None = None, roles: Mapping[str, RoleOf] | None = None) -> str:
    """The router's systemd unit (templates/sglang-gateway.service.j2): the gateway's own, or router
    ``index``'s behind the balancer."""
    ports = ((settings.port, settings.metrics_port) if index is None else
             (settings.router_port + index, settings.metrics_port + 1 + index))
    try:
        return _environment().get_template("sglang-gateway.service.j2").render(
            header=HEADER, host=host, version=settings.version, service=router_service(settings, index),
            workers=len(worker_urls), exec_lines=exec_start_lines(settings, worker_urls, index, roles),
            env_path=settings.env_path, low_port=min(ports) < 1024, behind_balancer=index is not None,
            timeout_stop_s=ROUTER_SHUTDOWN_GRACE_S + STOP_MARGIN_S, api_key_env=API_KEY_ENV)
    except (unitsyntax.ControlCharacter, ValueError) as exc:
        raise PlanError(host, "sglang_gateway", str(exc)) from None


def render_gateway_env(host: str, settings: GatewaySettings, secret_values: Mapping[str, str] | None = None) -> str:
    """The gateway's env file (root-only, 0600): the API key, when there is one. Without
    ``secret_values`` (plans, diffs, JSON) the key shows as ``<redacted>``."""
    lines = [f"# {HEADER}",
             f"# Environment of {settings.service_name}.service (EnvironmentFile=). Root-only (0600): the launcher",
             f"# ({LAUNCHER_NAME}) hands {API_KEY_ENV} to the router in-process, never in its argv."]
    for ref in settings.secrets:
        value = secret_value(host, ref, secret_values)
        if not value:
            raise PlanError(host, ref.inventory_field, f"{ref.describe()} is empty")
        lines += [f"# secret: {ref.describe()}", f"{ref.env_var}={unitsyntax.env_quote(value)}"]
    return "\n".join(lines) + "\n"


def render_gateway(host: str, settings: GatewaySettings, worker_urls: Sequence[str],
                   secret_values: Mapping[str, str] | None = None,
                   roles: Mapping[str, RoleOf] | None = None) -> GatewayFiles | BalancedFiles:
    """The gateway host's files (with several routers, ``render_balanced``'s); secrets redacted
    without ``secret_values``; ``roles``: its workers' (a gateway of prefill and decode servers)."""
    if settings.balanced:
        return render_balanced(host, settings, worker_urls, secret_values, roles)
    return GatewayFiles(unit=render_gateway_unit(host, settings, worker_urls, roles=roles),
                        env=render_gateway_env(host, settings, secret_values))


@dataclass(frozen=True)
class BalancedFiles:
    """A balanced gateway's files: HAProxy's unit and configuration, each router's unit, the env file."""

    unit: str
    balancer: str
    routers: tuple[str, ...]
    env: str

    def as_dict(self) -> dict[str, object]:
        return {"unit": self.unit, "balancer": self.balancer, "routers": list(self.routers), "env": self.env}


def render_balanced(host: str, settings: GatewaySettings, worker_urls: Sequence[str],
                    secret_values: Mapping[str, str] | None = None,
                    roles: Mapping[str, RoleOf] | None = None) -> BalancedFiles:
    """Every file of a balanced gateway; secrets redacted without ``secret_values``."""
    return BalancedFiles(unit=render_balancer_unit(host, settings),
                         balancer=render_balancer_config(host, settings),
                         routers=tuple(render_gateway_unit(host, settings, worker_urls, i, roles)
                                       for i in range(settings.routers)),
                         env=render_gateway_env(host, settings, secret_values))


def revision_files(settings: GatewaySettings, files: GatewayFiles | BalancedFiles,
                   launcher: str) -> dict[str, tuple[str, str, str]]:
    """A revision's files: name -> (live path, mode, text)."""
    out = {"unit": (settings.unit_path, "0644", files.unit), "env": (settings.env_path, "0600", files.env),
           "launcher": (settings.launcher_path, "0644", launcher)}
    if isinstance(files, BalancedFiles):
        out["balancer"] = (balancer_path(settings), "0644", files.balancer)
        out["shape"] = ("", "0600", shape_of(settings).as_json())  # not live: the state directory's alone
        for i, text in enumerate(files.routers):
            out[router_name(i)] = (router_unit_path(settings, i), "0644", text)
    return out


def describe_gateway(name: str, settings: GatewaySettings, workers: Sequence[str],
                     roles: Mapping[str, RoleOf] | None = None) -> str:
    """`plan`'s lines for a gateway host: what it runs and routes to (``roles``: its workers', a
    gateway of prefill and decode servers)."""
    roles = roles or {}

    def role(url: str) -> str:
        r = roles.get(url)
        return "" if r is None else f" ({r.role}" + (f", bootstrap port {r.bootstrap_port})" if r.bootstrap_port
                                                     else ")")
    return (f"{name}: SGLang Model Gateway (sglang-router {settings.version}) as {settings.service_name}.service, "
            f"port {settings.port}, metrics {settings.metrics_port}, policy {settings.policy}, "
            f"{len(workers)} worker(s)" + (", prefill/decode mode" if roles else "") + "\n"
            + "".join(f"  worker {url}{role(url)}\n" for url in workers)
            + (describe_balanced(settings) if settings.balanced else "")
            + "  argv: " + " ".join(router_argv(settings, workers, 0 if settings.balanced else None, roles)) + "\n")


def describe_balanced(settings: GatewaySettings) -> str:
    """`plan`'s lines for the balancer and its routers."""
    address = backend_address(settings)
    return (f"  HAProxy on port {settings.port} ({balancer_path(settings)}), checks each router every "
            f"{settings.balancer_check_interval_s} s:\n"
            + "".join(f"  router {i}: {router_service(settings, i)}.service on {address}:{settings.router_port + i},"
                      f" metrics {settings.metrics_port + 1 + i}\n" for i in range(settings.routers)))

