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


def router_argv(settings: GatewaySettings, worker_urls: Sequence[str]) -> list[str]:
    """The router's launch arguments (after ``python -m sglang_router.launch_router``, or the
    launcher) for ``settings.version``. The API key is not among them: the launcher adds it
    in-process from the environment. ``--worker-urls`` (nargs="*") comes last."""
    if settings.version not in ROUTER_FLAGS:
        raise ValueError(f"sglang-router {settings.version}: no flags known; supported: "
                         f"{', '.join(SUPPORTED_ROUTER_VERSIONS)}")
    for url in worker_urls:
        if not isinstance(url, str) or not _WORKER_URL.match(url):
            raise ValueError(f"not a worker URL the router takes: {url!r}")
    if len(worker_urls) > MAX_WORKERS_PER_GATEWAY:
        raise ValueError(f"{len(worker_urls)} workers; at most {MAX_WORKERS_PER_GATEWAY}")
    argv = ["--host", settings.host, "--port", str(settings.port), "--policy", settings.policy,
            "--prometheus-port", str(settings.metrics_port), "--prometheus-host", settings.host,
            "--request-timeout-secs", str(settings.request_timeout_s),
            "--retry-max-retries", str(settings.retries),
            "--health-check-interval-secs", str(settings.health_interval_s),
            "--worker-urls", *worker_urls]
    unknown = {w for w in argv if w.startswith("--")} - set(ROUTER_FLAGS[settings.version])
    if unknown:  # a flag written here but not checked against the release's parser
        raise RuntimeError(f"sglang-router {settings.version}: flags not in its parser: {sorted(unknown)}")
    return argv


def exec_start_lines(settings: GatewaySettings, worker_urls: Sequence[str]) -> list[str]:
    """The unit's ExecStart words: the venv's Python, isolated (-I), runs the launcher with the
    router's arguments; one option and its values per line."""
    words = router_argv(settings, worker_urls)
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


def render_gateway_unit(host: str, settings: GatewaySettings, worker_urls: Sequence[str]) -> str:
    """The gateway's systemd unit (templates/sglang-gateway.service.j2)."""
    try:
        return _environment().get_template("sglang-gateway.service.j2").render(
            header=HEADER, host=host, version=settings.version, service=settings.service_name,
            workers=len(worker_urls), exec_lines=exec_start_lines(settings, worker_urls),
            env_path=settings.env_path, low_port=min(settings.port, settings.metrics_port) < 1024,
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
                   secret_values: Mapping[str, str] | None = None) -> GatewayFiles:
    """The gateway host's two files; secrets redacted without ``secret_values``."""
    return GatewayFiles(unit=render_gateway_unit(host, settings, worker_urls),
                        env=render_gateway_env(host, settings, secret_values))


def describe_gateway(name: str, settings: GatewaySettings, workers: Sequence[str]) -> str:
    """`plan`'s lines for a gateway host: what it runs and routes to."""
    return (f"{name}: SGLang Model Gateway (sglang-router {settings.version}) as {settings.service_name}.service, "
            f"port {settings.port}, metrics {settings.metrics_port}, policy {settings.policy}, "
            f"{len(workers)} worker(s)\n"
            + "".join(f"  worker {url}\n" for url in workers)
            + "  argv: " + " ".join(router_argv(settings, workers)) + "\n")
