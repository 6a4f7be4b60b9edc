"""The gateway host's files and proof (``sglang_gateway``): the pinned sglang-router in a virtualenv
of its own (staged before anything stops), the launcher, a root-only env file with the API key, its
unit (with several routers: HAProxy's unit and configuration and each router's unit); the files form
a revision (content hash) kept under the state directory, so a gateway whose new revision fails its
gate gets the previous one back byte for byte (``deploy.gateway_roll``). Its gate: ready, every
worker of the inventory that answers listed and healthy, and a streamed request through it.
"""

from __future__ import annotations

import hashlib
import shlex
import time
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any, Callable, Mapping

from pyinfra import logger
from pyinfra.api import FactBase, FileUploadCommand, operation
from pyinfra.api.host import Host

from sglang_deploy.deploy import gateway_client
from sglang_deploy.deploy.gating import sh
from sglang_deploy.deploy.hostscript import ascii_answer
from sglang_deploy.deploy.operations import _pip_install
from sglang_deploy.deploy.secrets import read_secrets
from sglang_deploy.gate.watch import SystemdWatch
from sglang_deploy.plan.gateway import API_KEY_ENV, LAUNCHER_NAME, GatewaySettings
from sglang_deploy.plan.gateway_render import render_gateway, revision_files
from sglang_deploy.plan.gateway_tier import HAPROXY, admin_urls
from sglang_deploy.plan.gateway_fleet import kept_role
from sglang_deploy.plan.pd_gateway import RoleOf
from sglang_deploy.plan.gateway_fleet import inventory_gateways as plan_inventory_gateways
from sglang_deploy.lifecycle.revision import STATE_ROOT
from sglang_deploy.untrusted import Scrubber, printable

from sglang_deploy.deploy.gateway import gateway_url, runs_gateway

LAUNCHER = Path(__file__).resolve().parent / "host" / LAUNCHER_NAME
#: How long the gateway's gate waits for it to answer after a restart, and for its workers.
READY_TIMEOUT_S = 60.0
WORKERS_TIMEOUT_S = 60.0


# ---------------------------------------------------------------------------
# The gateway host's own deploy


@dataclass(frozen=True)
class GatewayFilesPlan:
    settings: GatewaySettings
    files: Mapping[str, tuple[str, str, str]]  # name in the revision -> (live path, mode, text)
    revision: str
    workers: tuple[str, ...]
    api_key: str | None
    admin_urls: tuple[str, ...]  # each router's (plan.gateway_tier.admin_urls)
    roles: Mapping[str, RoleOf] = field(default_factory=dict)  # prefill/decode mode: each worker's role

    @property
    def hashes(self) -> dict[str, str]:
        """Each file's content hash, as the host's state fact reads the live revision's."""
        return {name: hashlib.sha256(text.encode()).hexdigest() for name, (_, _, text) in self.files.items()}

    @property
    def state_dir(self) -> str:
        return f"{STATE_ROOT}/{self.settings.service_name}"


def plan_gateway(host: Host, settings: GatewaySettings) -> GatewayFilesPlan:
    """The gateway's files and revision: its workers are the inventory's hosts that name it."""
    # The gateway hosts and the workers that name this one (another gateway's workers are theirs to refuse).
    pairs = [(other.name, dict(host.inventory.get_host(other.name).data.dict())) for other in host.inventory]
    pairs = [(n, d) for n, d in pairs if runs_gateway(host.inventory.get_host(n)) or n == host.name
             or host.name in (d.get("sglang_gateways") or ())]
    fronts = plan_inventory_gateways(pairs)
    workers, roles = fronts.workers.get(host.name, ()), dict(fronts.roles.get(host.name, {}))
    values = read_secrets(host.name, settings.secrets)
    files = revision_files(settings, render_gateway(host.name, settings, workers, values, roles),
                           LAUNCHER.read_text())
    digest = hashlib.sha256()
    # One router: the hash of the version, unit, env file and launcher, as before balanced gateways.
    for name in ("version", "unit", "env", "launcher", *sorted(set(files) - {"unit", "env", "launcher"})):
        digest.update((settings.version if name == "version" else files[name][2]).encode())
        digest.update(b"\0")
    data = dict(host.inventory.get_host(host.name).data.dict())
    return GatewayFilesPlan(settings=settings, files=files, revision=digest.hexdigest()[:16], workers=workers,
                            api_key=values.get(API_KEY_ENV), admin_urls=admin_urls(host.name, data, settings),
                            roles=roles)


_GATEWAY_STATE = """\
command -v systemctl >/dev/null 2>&1 && echo systemd=yes
[ -x {haproxy} ] && echo haproxy=yes
[ -x {python} ] && {python} -c 'import importlib.metadata as m; print("version=" + m.version("sglang-router"))' \
2>/dev/null
for f in {state_dir}/current {state_dir}/previous {state_dir}/deployed; do
  [ -f "$f" ] && echo "$(basename $f)=$(timeout 10 head -c 64 $f | tr -d '\r\n')"
done
for d in {state_dir}/revisions/*/; do [ -f "$d/complete" ] && echo "staged=$(basename $d)"; done
echo "active=$(systemctl is-active {unit} 2>/dev/null)"
cur=$([ -f {state_dir}/current ] && timeout 10 head -c 64 {state_dir}/current 2>/dev/null | tr -cd 0-9a-f)
[ -n "$cur" ] && for f in {state_dir}/revisions/$cur/*; do
  n=$(basename "$f"); [ "$n" = complete ] || [ ! -f "$f" ] || \
    echo "live_file=$n:$(timeout 10 sha256sum < "$f" | cut -c1-64)"
done
for u in $(systemctl list-units --all --plain --no-legend {routers} 2>/dev/null | cut -d' ' -f1 | head -n 64); do
  echo "router_active=$u:$(systemctl is-active "$u" 2>/dev/null)"
done
true
"""


class GatewayState(FactBase):
    """The gateway host's installed router version, current/previous/deployed revision, staged ones,
    unit state (the deploy's, and `status`'s read of a gateway host)."""

    def command(self, state_dir: str, python: str, unit: str) -> str:
        # Files read only when regular (a FIFO would block the read), each within a bound; the answer in
        # printable ASCII (a folder name that is not UTF-8 would lose it whole: hostscript.ascii_answer).
        return ascii_answer(_GATEWAY_STATE.format(
            state_dir=shlex.quote(state_dir), python=shlex.quote(python), unit=shlex.quote(unit),
            haproxy=shlex.quote(HAPROXY), routers=shlex.quote(unit.removesuffix(".service") + "-router*.service")))

    def process(self, output: list[str]) -> dict[str, Any]:
        """Also ``live_files`` (the current revision's file -> content hash) and ``routers_active``
        (router index -> whether its unit is active): what ``lifecycle.gateway_roll`` decides from."""
        out: dict[str, Any] = {"staged": [], "live_files": {}, "routers_active": {}}
        for line in output[:512]:
            key, _, value = line.strip().partition("=")
            if key == "staged":
                out["staged"].append(value)
            elif key == "live_file":
                name, _, digest = value.partition(":")
                out["live_files"][name[:32]] = digest
            elif key == "router_active":
                unit, _, state = value.rpartition(":")
                index = unit.removesuffix(".service").rpartition("-router")[2]
                if index.isdigit() and len(index) <= 2:
                    out["routers_active"][int(index)] = state == "active"
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


@operation()
def stage_gateway(g: GatewayFilesPlan):
    """
    The revision's files aside, under the state directory (root-only), then its ``complete`` marker.

    + g: the gateway's planned files and revision
    """
    rdir = f"{g.state_dir}/revisions/{g.revision}"
    yield f"install -d -m 0700 {shlex.quote(rdir)}"
    for name, (_, _, text) in g.files.items():
        yield FileUploadCommand(BytesIO(text.encode()), f"{rdir}/{name}")
    yield f"chmod 0600 {shlex.quote(rdir)}/* && touch {shlex.quote(rdir)}/complete"


def gateway_gate(host: Host, g: GatewayFilesPlan, log: Callable[[str], object], url: str | None = None,
                 unit: str | None = None, stream: bool = True) -> str | None:
    """The gateway's proof after a restart: None when it passes, else why not. Ready; every worker
    of the inventory that answers its own /health listed healthy; a streamed request through it
    when any worker answers (``stream``). ``url``, ``unit``: one router of a balanced gateway's
    (default: the gateway's own)."""
    url = url or gateway_url(host, host.name, g.settings)
    client = gateway_client.Gateway(url, g.api_key)
    unit = unit or f"{g.settings.service_name}.service"
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
    # A gateway of prefill and decode servers answers a request only through a pair: one of each.
    paired = not g.roles or {g.roles[u].role for u in serving if u in g.roles} >= {"prefill", "decode"}
    if serving and stream and paired:
        try:
            seconds, tokens = gateway_client.Gateway(url, g.api_key, timeout_s=30.0).stream_once()
        except gateway_client.GatewayError as exc:
            return f"a streamed request through the gateway failed: {exc}"
        log(f"gateway {url}: {len(listed)} worker(s) listed, {len(serving)} serving; a streamed request through it"
            + (" (a prefill and a decode server)" if g.roles else "") + f": {tokens} chunks in {seconds:.2f} s")
    elif serving:
        log(f"router {url}: ready, {len(listed)} worker(s) listed, {len(serving)} serving"
            + ("" if paired else " (no prefill and decode pair serving yet: no request through it)"))
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


def register_kept(host: Host, g: GatewayFilesPlan, urls: tuple[str, ...], at: str | None = None) -> None:
    """The restarted gateway (``at``: one router of a balanced one) given back the workers it listed
    before that its unit does not name and that answer now; one that cannot join is said (its own
    next deploy registers it again)."""
    client = gateway_client.Gateway(at or gateway_url(host, host.name, g.settings), g.api_key)
    back = []
    for url in urls:
        try:
            if not gateway_client.server_answers(url, g.api_key, 2.0):
                continue
            # The gateway's key, as --worker-urls gives its workers: a worker's key is the gateway's
            # (or none) when both are set (worker_run refuses another).
            client.register(url, g.api_key, kept_role(url, g.roles))
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


