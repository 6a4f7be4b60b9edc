"""A balanced gateway's revision going live (``sglang_gateway.routers`` > 1, or a host that had
one): the steps ``lifecycle.gateway_roll.roll_plan`` decides, carried out over the host's
connection, and the same walk back to the previous revision when a step fails.

Each router the running balancer sends to is drained in it (``deploy.balancer``: no new request,
its in-flight requests finish, bounded by the router's request timeout), put in maintenance,
restarted, gated on its own port (ready, every serving worker listed healthy, the workers it
listed before and its unit does not name registered again), made ready and seen UP by the
balancer's own check before the next one; a change of the balancer's configuration is a reload.
Then a streamed request through the gateway's port proves the whole.
"""

from __future__ import annotations

import shlex
import time
from functools import partial
from typing import Any, Callable

from pyinfra import logger
from pyinfra.api.host import Host

from sglang_deploy.deploy import gateway_client
from sglang_deploy.deploy.balancer import Balancer, BalancerError
from sglang_deploy.deploy.gateway_host import GatewayFilesPlan, gateway_gate, register_kept
from sglang_deploy.deploy.gating import sh
from sglang_deploy.deploy.results import append_record
from sglang_deploy.lifecycle.gateway_roll import RELOAD, RESTART, RollPlan, roll_plan
from sglang_deploy.lifecycle.rollback_policy import gateway_result
from sglang_deploy.plan.gateway import _url_host, worker_address
from sglang_deploy.plan.gateway_fleet import workers_to_keep
from sglang_deploy.plan.gateway_tier import MAX_SHAPE_BYTES, Shape, live_path, parse_shape, router_service, shape_of
from sglang_deploy.untrusted import printable

#: How long a router made ready again may take to be counted UP by the balancer's check, beyond
#: two of its intervals.
UP_MARGIN_S = 10.0


class Roll:
    """One walk from the live revision to a target's, on one gateway host."""

    def __init__(self, host: Host, g: GatewayFilesPlan, shape: Shape, log: Callable[[str], object]):
        self.host, self.g, self.shape, self.log = host, g, shape, log
        self.routers = tuple(range(len(shape.router_ports)))
        self.balancer = Balancer(lambda command: sh(host, command), g.settings)
        address, _ = worker_address(host.name, dict(host.data.dict()))
        self.address = _url_host(address)

    def router_url(self, i: int) -> str:
        return f"http://{self.address}:{self.shape.router_ports[i]}"

    def unit(self, i: int | None) -> str:
        return f"{router_service(self.g.settings, i)}.service"

    def systemctl(self, verb: str, unit: str) -> str | None:
        q = shlex.quote(unit)
        ok, out = sh(self.host, f"systemctl reset-failed {q} 2>/dev/null; systemctl {verb} {q} 2>&1")
        return None if ok else f"systemctl {verb} {unit} failed: {printable(out)[-300:]}"

    def carry_out(self, plan: RollPlan) -> str | None:
        """The plan's steps in order; None when every one passed, else why the first did not."""
        s = self.g.settings
        keep: tuple[str, ...] = ()
        self.log(f"gateway: {plan.describe()}")
        try:
            for i in plan.retire:
                if plan.front != RESTART:  # the running balancer still names it: no new request to it
                    self.balancer.set_state(i, "drain")
                    idle, left = self.balancer.wait_idle(i, s.request_timeout_s)
                    self.log(f"router {i} (retired) drained" + ("" if idle else f"; {left} request(s) still open"))
            for i in plan.routers:
                why = self.restart_router(i, i in plan.drained)
                if why is not None:
                    return f"router {i}: {why}"
            if plan.front == RELOAD:
                why = self.systemctl("reload", self.unit(None))
                if why is not None:
                    return why
                self.balancer.wait_up(self.routers, self.up_timeout())
                self.log("balancer reloaded: every router UP in its new configuration")
            elif plan.front == RESTART:
                # One router is the gateway's own unit: the workers it lists and its unit does not
                # name (a host's replicas past the first) are given back after its restart.
                keep = () if self.routers else self.listed_to_keep(self.front_url())
                why = self.systemctl("restart", self.unit(None))
                if why is not None:
                    return why
                if self.routers:
                    self.wait_front()
                    self.balancer.wait_up(self.routers, self.up_timeout())
            for i in plan.retire:
                unit = shlex.quote(self.unit(i))
                sh(self.host, f"systemctl disable --now {unit} >/dev/null 2>&1; rm -f /etc/systemd/system/{unit}; "
                              "systemctl daemon-reload")
                self.log(f"router {i} (retired) stopped and removed")
        except BalancerError as exc:
            return f"the balancer: {exc}"
        why = gateway_gate(self.host, self.g, self.log, url=self.front_url(), unit=self.unit(None))
        if why is None and plan.front == RESTART and keep:
            register_kept(self.host, self.g, keep, at=self.front_url())
        return why

    def listed_to_keep(self, url: str) -> tuple[str, ...]:
        """The workers ``url`` lists now that its unit does not name (``plan.gateway.workers_to_keep``);
        none when it does not answer (not running: a first deploy, a new router)."""
        try:
            return workers_to_keep([w.url for w in gateway_client.Gateway(url, self.g.api_key).workers()],
                                   self.g.workers)
        except gateway_client.GatewayError:
            return ()

    def front_url(self) -> str:
        return f"http://{self.address}:{self.shape.port}"

    def up_timeout(self) -> float:
        return 2 * self.g.settings.balancer_check_interval_s + UP_MARGIN_S

    def wait_front(self) -> None:
        client = gateway_client.Gateway(self.front_url(), self.g.api_key)
        deadline = time.monotonic() + 30.0
        while not client.alive():
            if time.monotonic() > deadline:
                raise BalancerError("the balancer did not answer on the gateway's port within 30 s")
            time.sleep(0.25)

    def restart_router(self, i: int, drained: bool) -> str | None:
        s = self.g.settings
        url = self.router_url(i)
        keep = self.listed_to_keep(url)
        if drained:
            self.balancer.set_state(i, "drain")
            idle, left = self.balancer.wait_idle(i, s.request_timeout_s)
            self.balancer.set_state(i, "maint")
            self.log(f"router {i} drained in the balancer" + ("" if idle else
                                                             f" (timeout: {left} request(s) still open)"))
        why = self.systemctl("restart", self.unit(i))
        if why is None:
            why = gateway_gate(self.host, self.g, self.log, url=url, unit=self.unit(i), stream=False)
        if why is not None:
            return why
        register_kept(self.host, self.g, keep, at=url)
        if drained:
            self.balancer.set_state(i, "ready")
            self.balancer.wait_up((i,), self.up_timeout())
            self.log(f"router {i} back in the balancer, UP")
        return None


def _hashes(host: Host, state_dir: str, revision: str) -> dict[str, str]:
    """A staged revision's files and their content hashes, as the host has them."""
    _, out = sh(host, f"cd {shlex.quote(state_dir)}/revisions/{shlex.quote(revision)} 2>/dev/null && "
                      "for f in *; do [ \"$f\" = complete ] || echo \"$f:$(sha256sum < \"$f\" | cut -c1-64)\"; done")
    out_map = {}
    for line in out.splitlines()[:128]:
        name, _, digest = line.partition(":")
        out_map[name[:32]] = digest[:64]
    return out_map


def _active(host: Host, g: GatewayFilesPlan) -> dict[str, bool]:
    names = ["unit", *(f"router{i}" for i in range(64))]
    units = [f"{router_service(g.settings, None if n == 'unit' else int(n[6:]))}.service" for n in names]
    _, out = sh(host, "systemctl is-active " + " ".join(shlex.quote(u) for u in units) + " 2>/dev/null; true")
    states = out.splitlines()
    return {n: (states[k].strip() == "active" if k < len(states) else False) for k, n in enumerate(names)}


def swap_commands(g: GatewayFilesPlan, revision: str, names: list[str], previous: str | None) -> list[str]:
    """Revision ``revision``'s files (``names``, as its folder holds them) live, ``current`` (and
    ``previous``) written, units reloaded and enabled; nothing restarted (the roll does that)."""
    q = shlex.quote
    rdir = f"{g.state_dir}/revisions/{revision}"
    cmds = [f"install -d -m 0700 {q(g.settings.config_dir)}"]
    for name in names:
        dest = live_path(g.settings, name)
        if dest is None:
            continue
        mode = "0600" if name == "env" else "0644"
        tmp = f"{dest}.sglang-deploy-tmp"
        cmds.append(f"install -D -m {mode} -o root -g root {q(rdir)}/{q(name)} {q(tmp)} && mv -f {q(tmp)} {q(dest)}")
    if previous:
        cmds.append(f"echo {q(previous)} > {q(g.state_dir)}/previous")
    cmds.append(f"echo {q(revision)} > {q(g.state_dir)}/current")
    units = [f"{router_service(g.settings, None if n == 'unit' else int(n[6:]))}.service"
             for n in names if n == "unit" or (n.startswith("router") and live_path(g.settings, n))]
    cmds += ["systemctl daemon-reload", "systemctl enable " + " ".join(q(u) for u in units) + " >/dev/null 2>&1"]
    return cmds


def _run_all(host: Host, cmds: list[str]) -> str | None:
    for cmd in cmds:
        ok, out = sh(host, cmd)
        if not ok:
            return f"`{cmd}` failed: {printable(out)[-300:]}"
    return None


def roll_callback(state: Any, host: Host, g: GatewayFilesPlan, have: dict[str, Any]) -> bool:
    """The new revision live (every file swapped in, then the roll), gated; on failure the previous
    revision walked back the same way. Writes the host's record on every path."""
    said: list[str] = []

    def log(line: str) -> None:
        said.append(line)
        host.log(line)

    current = have.get("current")
    previous = current if current and current != g.revision else have.get("previous")
    record = partial(gateway_result, host.name, old_revision=current or have.get("deployed"),
                     new_revision=g.revision, restarted=True)
    live = have.get("live_files") if current else None
    active = {"unit": have.get("active") == "active",
              **{f"router{i}": up for i, up in (have.get("routers_active") or {}).items()}}
    plan = roll_plan(live, g.hashes, active)
    why = _run_all(host, swap_commands(g, g.revision, list(g.files), previous))
    if why is None:
        why = Roll(host, g, shape_of(g.settings), log).carry_out(plan)
    if why is None:
        sh(host, f"echo {shlex.quote(g.revision)} > {shlex.quote(g.state_dir)}/deployed")
        append_record(record(why=None, gated=said[-1] if said else None))
        return True
    host.log_styled(f"the gateway's gate failed: {why}", fg="red", log_func=logger.error)
    if not previous:
        append_record(record(why=why))
        return False
    back = _hashes(host, g.state_dir, previous)
    _, shape_text = sh(host, f"head -c {MAX_SHAPE_BYTES} {shlex.quote(g.state_dir)}/revisions/"
                             f"{shlex.quote(previous)}/shape 2>/dev/null; true")
    shape = parse_shape(shape_text, Shape(g.settings.port, ()))
    undo = _run_all(host, swap_commands(g, previous, list(back), None))
    if undo is None:
        undo = Roll(host, g, shape, host.log).carry_out(roll_plan(g.hashes, back, _active(host, g)))
    host.log_styled(f"rolled back to revision {previous}: " + ("ready again" if undo is None else
                                                               f"not ready either: {undo}"),
                    fg="yellow", log_func=logger.warning)
    append_record(record(why=why, rolled_back=undo is None))
    return False
