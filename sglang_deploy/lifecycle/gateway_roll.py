"""A gateway revision going live, pure: which routers restart, in what order, whether the balancer
drains each one first, and whether the balancer itself reloads or restarts. The deploy
(``sglang_deploy.deploy.gateway_tier``) carries the steps out and, when one fails, asks again with
the previous revision as the target: the rollback is the same walk back.

Files are named as a revision holds them (``sglang_deploy.plan.gateway_tier``): ``unit`` (the
gateway's own unit: HAProxy with several routers, the router itself with one), ``env``,
``launcher``, ``balancer`` and ``router<i>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

_ROUTER = re.compile(r"^router([0-9]{1,2})$")

#: What happens to the gateway's own unit.
KEEP, RELOAD, RESTART = "keep", "reload", "restart"


def routers_of(files: Mapping[str, str]) -> tuple[int, ...]:
    """The router indexes a revision's file names hold, in order."""
    return tuple(sorted(int(m.group(1)) for name in files if (m := _ROUTER.match(name))))


@dataclass(frozen=True)
class RollPlan:
    """The steps that put a target revision live, in order:

    1. ``retire``: routers the live balancer sends to that the target does not run: drained in the
       balancer (no new request; in-flight ones finish) before it reloads without them;
    2. ``routers``: each restarted in turn (those in ``drained``: taken out of the live balancer
       first, put back once ready and listing its workers);
    3. ``front``: the gateway's own unit kept, reloaded (HAProxy: a new configuration, no
       connection refused) or restarted (a first deploy, a change of its unit, one router <-> a
       balancer: its port is refused for a moment);
    4. the retired routers' units stopped and removed (``retire``)."""

    routers: tuple[int, ...]
    drained: tuple[int, ...]  # of ``routers``, those the live balancer sends to: drained there first
    front: str
    retire: tuple[int, ...]

    @property
    def changes(self) -> bool:
        return bool(self.routers or self.retire or self.front != KEEP)

    def describe(self) -> str:
        parts = []
        if self.retire:
            parts.append("router(s) " + ", ".join(map(str, self.retire)) + " retired")
        if self.routers:
            parts.append("router(s) " + ", ".join(map(str, self.routers)) + " restarted one at a time"
                         + (" (" + ", ".join(map(str, self.drained)) + " drained in the balancer first)"
                            if self.drained else ""))
        if self.front == RELOAD:
            parts.append("the balancer reloaded")
        elif self.front == RESTART:
            parts.append("the gateway's own unit restarted")
        return "; ".join(parts) or "nothing to do"


def roll_plan(live: Mapping[str, str] | None, target: Mapping[str, str], active: Mapping[str, bool]) -> RollPlan:
    """The steps from the ``live`` revision's files (name -> content hash; None: nothing deployed
    yet) to the ``target``'s, given which units run now (``active``: ``"unit"`` and
    ``"router<i>"`` -> whether systemd says active).

    A router restarts when its unit, the env file (the API key) or the launcher changed, or when it
    does not run. The balancer drains a router first only when it runs now and its live
    configuration names that router (a live revision with a ``balancer``). The gateway's own unit
    restarts when it changed or does not run (one router <-> a balancer changes it), else reloads
    when the balancer's configuration changed (routers added or removed, a setting)."""
    live = live or {}
    target_routers = routers_of(target)
    live_routers = routers_of(live) if "balancer" in live else ()
    shared_changed = any(live.get(name) != target.get(name) for name in ("env", "launcher"))
    restart = tuple(i for i in target_routers
                    if shared_changed or live.get(f"router{i}") != target.get(f"router{i}")
                    or not active.get(f"router{i}", False))
    front_runs = active.get("unit", False)
    if not front_runs or live.get("unit") != target.get("unit"):
        front = RESTART
    elif "balancer" in target and live.get("balancer") != target.get("balancer"):
        front = RELOAD
    elif "balancer" not in target and shared_changed:
        front = RESTART  # one router: it is the gateway's own unit, and its key or launcher changed
    else:
        front = KEEP
    balancer_live = front_runs and "balancer" in live
    retire_from = set(routers_of(live)) | {int(name[6:]) for name, up in active.items()
                                           if up and _ROUTER.match(name)}
    retire = tuple(sorted(i for i in retire_from if i not in target_routers))
    # Drained first: the routers the running balancer sends to (its live configuration names them);
    # they go before the routers it does not know yet, which start with no traffic.
    drained = tuple(i for i in restart if balancer_live and i in live_routers)
    routers = drained + tuple(i for i in restart if i not in drained)
    return RollPlan(routers=routers, drained=drained, front=front, retire=retire)
