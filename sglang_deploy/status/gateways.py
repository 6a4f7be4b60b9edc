"""The SGLang Model Gateway in `status`: a gateway host's row from its worker list against the
workers the inventory gives it (:func:`gateway_row`), and a worker's membership in each of its
gateways (:func:`add_gateways`). Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Collection, Mapping, Sequence

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.gateway import (GatewaySettings, WorkerMembership, gateway_settings, gateway_url,
                                        gateway_workers, worker_membership)
from sglang_deploy.plan.gateway_fleet import inventory_membership, tp_leaders
from sglang_deploy.plan.gateway_tier import admin_urls
from sglang_deploy.untrusted import printable, redact_url
from sglang_deploy.status.model import (DEGRADED, KIND_GATEWAY, LISTED, MISSING, OK, OTHERS_SHOWN, Observed,
                                        UNHEALTHY, UNKNOWN, _REVISION)
from sglang_deploy.status.row import Row, _worse, error_row, lock_held, unreachable_row


# ---- the SGLang Model Gateway -------------------------------------------------------------------

@dataclass(frozen=True)
class FleetGateways:
    """The inventory's gateways and their workers, as a deploy plans them (sglang_deploy/plan/gateway.py)."""

    gateway_hosts: tuple[str, ...]  # every host with ``sglang_gateway`` set (not an SGLang host), inventory order
    gateways: Mapping[str, GatewaySettings]  # those whose settings are good
    urls: Mapping[str, str]  # gateway -> where the controller reads it: http://<address>:<port>
    memberships: Mapping[str, WorkerMembership]  # worker host -> its gateways and URL
    expected: Mapping[str, tuple[tuple[str, str], ...]]  # gateway -> ((worker host, URL), ...), inventory order
    errors: Mapping[str, str]  # host -> why its gateway data cannot be planned (an error row)
    # worker host -> its data-parallel replicas past the first, each a worker of its own (with_replicas)
    replicas: Mapping[str, tuple[WorkerMembership, ...]] = field(default_factory=dict)
    # gateway -> each of its routers' URL, when several sit behind its balancer (plan.gateway_tier)
    routers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def fleet_gateways(hosts: Sequence[tuple[str, Mapping[str, Any]]]) -> FleetGateways:
    """Every gateway host of the inventory (``(name, merged data)`` pairs, inventory order) and the
    workers that name it, each host's mistakes kept as its own error (the deploy refuses that host
    with the same message) instead of failing the whole read."""
    gateway_hosts = tuple(n for n, d in hosts if d.get("sglang_gateway") not in (None, False))
    gateways: dict[str, GatewaySettings] = {}
    urls: dict[str, str] = {}
    routers: dict[str, tuple[str, ...]] = {}
    errors: dict[str, str] = {}
    for name, data in hosts:
        if name not in gateway_hosts:
            continue
        try:
            settings = gateway_settings(name, data)
            assert settings is not None
            urls[name] = gateway_url(name, data, settings)
            if settings.balanced:
                routers[name] = admin_urls(name, data, settings)
        except PlanError as exc:
            errors[name] = str(exc)
            continue
        gateways[name] = settings
    known = dict.fromkeys(gateway_hosts)  # a worker may name a gateway whose own data is wrong
    memberships: dict[str, WorkerMembership] = {}
    units, rank0 = tp_leaders(hosts)
    for name, data in hosts:
        if name in known:
            continue
        try:
            m = inventory_membership(name, data, units, rank0, known)
        except PlanError as exc:
            errors[name] = str(exc)
            continue
        if m is not None:
            memberships[name] = m
    while memberships:  # two workers of one gateway with one URL: the later one is refused, as in the deploy
        try:
            gateway_workers(list(memberships.values()), units)
            break
        except PlanError as exc:
            if exc.host not in memberships:
                raise
            errors[exc.host] = str(exc)
            del memberships[exc.host]
    expected: dict[str, list[tuple[str, str]]] = {g: [] for g in gateway_hosts}
    for m in memberships.values():
        if m.host in units and rank0[units[m.host]][0] != m.host:
            continue  # a tp group is one worker: listed once, as its rank 0
        for g in m.gateways:
            expected[g].append((m.host, m.url))
    return FleetGateways(gateway_hosts=gateway_hosts, gateways=gateways, urls=urls, memberships=memberships,
                         expected={g: tuple(ws) for g, ws in expected.items()}, errors=errors, routers=routers)


def with_replicas(fleet: FleetGateways, ports: Mapping[str, Sequence[int]],
                  data: Mapping[str, Mapping[str, Any]]) -> FleetGateways:
    """``fleet`` with each host's data-parallel replicas past the first as workers of its gateways
    (``ports``: host -> every replica's port, from its plan, ``plan.replicas``): behind a gateway
    each replica is a worker of its own, at the host's address on its own port; the inventory
    alone names only the first."""
    expected = {g: list(ws) for g, ws in fleet.expected.items()}
    more: dict[str, tuple[WorkerMembership, ...]] = {}
    for host, replica_ports in ports.items():
        m = fleet.memberships.get(host)
        if m is None or data[host].get("sglang_worker_url") is not None:  # refused by the deploy (plan.replicas)
            continue
        known = dict.fromkeys(fleet.gateway_hosts)
        found = [worker_membership(host, data[host], port, gateway_hosts=known) for port in list(replica_ports)[1:]]
        more[host] = tuple(r for r in found if r is not None)
        for replica in more[host]:
            for g in m.gateways:
                if g in expected:
                    expected[g].append((host, replica.url))
    return replace(fleet, expected={g: tuple(ws) for g, ws in expected.items()}, replicas=more)


def _norm_url(url: str) -> str:
    """A worker URL as compared here: no surrounding space, no trailing slash (sglang-router 0.3.2
    keeps ``http://h:1`` and ``http://h:1/`` as two workers; the deploy registers the first form)."""
    return url.strip().rstrip("/")


@dataclass(frozen=True)
class ListedWorker:
    """One entry of a gateway's ``GET /workers``: its URL and ``is_healthy``."""

    url: str
    healthy: bool | None


@dataclass(frozen=True)
class GatewayRead:
    """One gateway's worker list as the controller read it, or why it could not."""

    url: str  # where it was read (no credentials)
    listed: tuple[ListedWorker, ...] | None = None  # None: not read
    error: str | None = None  # why not (names the URL, never the key)


def every_router(front: GatewayRead, routers: Sequence[GatewayRead]) -> GatewayRead:
    """A balanced gateway's list as its clients meet it: the balancer sends a request to any of its
    routers, so a worker counts as listed only when every router lists it, and as healthy only
    when every router counts it healthy (unknown when one does not say). A router that could not
    be read is the gateway's error."""
    if front.error is not None or front.listed is None:
        return front
    listed = {w.url: w for w in front.listed}
    for read in routers:
        if read.error is not None or read.listed is None:
            return GatewayRead(url=front.url, error=f"router {read.url}: {read.error or 'not read'}")
        theirs = {w.url: w for w in read.listed}
        merged = {}
        for url, w in listed.items():
            if url in theirs:
                h = theirs[url].healthy
                healthy = False if False in (w.healthy, h) else None if None in (w.healthy, h) else True
                merged[url] = ListedWorker(url=url, healthy=healthy)
        listed = merged
    return GatewayRead(url=front.url, listed=tuple(listed.values()))


@dataclass(frozen=True)
class GatewayHostSeen:
    """A gateway host as its SSH read found it (``deploy.gateway_host.GatewayState``); None: not known."""

    error: str | None = None  # why the host could not be read over SSH
    installed: str | None = None  # the sglang-router release in the planned venv
    current: str | None = None  # the revision whose files are live
    deployed: str | None = None  # the revision that last passed the gateway's gate
    active: str | None = None  # the unit's ActiveState

    def as_dict(self) -> dict[str, Any]:
        return {"error": self.error, "active": self.active, "current": self.current, "deployed": self.deployed}


#: What a gateway host's read may hold: a router release (digits first), a unit state word.
_ROUTER_VERSION = re.compile(r"[0-9][0-9A-Za-z.+!-]{0,63}")
_ACTIVE = re.compile(r"[a-z-]{1,32}")


def gateway_host_seen(fact: Mapping[str, Any] | None) -> GatewayHostSeen:
    """A gateway host's read (``deploy.gateway_host.GatewayState``: its router release, ``current`` and
    ``deployed`` revisions, unit state), each value kept only in the shape expected (else None)."""
    if not isinstance(fact, Mapping) or fact.get("systemd") != "yes":
        return GatewayHostSeen(error="no systemd answered (the read printed nothing)")

    def checked(key: str, shape: re.Pattern[str]) -> str | None:
        value = fact.get(key)
        return value if isinstance(value, str) and shape.fullmatch(value) else None

    return GatewayHostSeen(installed=checked("version", _ROUTER_VERSION), current=checked("current", _REVISION),
                           deployed=checked("deployed", _REVISION), active=checked("active", _ACTIVE))


def _gateway_host_findings(service: str, planned: str, seen: GatewayHostSeen) -> tuple[list[str], list[str]]:
    """(problems, warnings) of the gateway host's own read: its unit, its router release, its revision."""
    if seen.error is not None:
        return [], [f"not read over SSH: {printable(seen.error)}"]
    problems, warnings = [], []
    if seen.active != "active":
        problems.append(f"unit {service}.service is {seen.active or 'not known to systemd'}: the gateway does not run")
    if seen.installed != planned:
        warnings.append(f"sglang-router {seen.installed or 'not installed'} in its venv, {planned} planned: "
                        "the next deploy installs it")
    if seen.current and seen.current != seen.deployed:
        warnings.append(f"revision {seen.current} is live but did not pass the gateway's gate (deployed: "
                        f"{seen.deployed or 'none'})")
    return problems, warnings


def membership(read: GatewayRead | None, url: str) -> str:
    """``listed`` (healthy), ``unhealthy``, ``missing`` or ``unknown`` (not read): the worker at ``url``
    in that gateway. An entry without ``is_healthy`` is not counted healthy."""
    if read is None or read.listed is None:
        return UNKNOWN
    want = _norm_url(url)
    entries = [w for w in read.listed if _norm_url(w.url) == want]
    if not entries:
        return MISSING
    return LISTED if any(w.healthy is True for w in entries) else UNHEALTHY


def _url_text(url: str) -> str:
    """A URL from a gateway's answer, safe to print: credentials masked, terminal controls removed, bounded."""
    return printable(redact_url(url))[:200]


def gateway_row(host: str, settings: GatewaySettings, read: GatewayRead, expected: Sequence[tuple[str, str]],
                draining: Collection[str] = (), seen: GatewayHostSeen | None = None) -> Row:
    """A gateway host's row: ``ok`` when it answered and lists every worker the inventory gives it
    (``expected``: (host, URL) pairs) healthy; one problem per worker not listed or listed
    unhealthy (``degraded``); ``unreachable`` when it could not be read. A worker in ``draining``
    (its deploy's lock is held now: it leaves its gateways before its restart) is expected out:
    a warning, not a problem. ``seen``: the host's own SSH read (its unit not active is a problem;
    another router release installed, or a live revision that did not pass its gate, a warning)."""
    workers = [{"host": h, "url": u, "membership": membership(read, u), "draining": h in draining}
               for h, u in expected]
    doc: dict[str, Any] = {"url": read.url, "router": {"planned": settings.version,
                                                       "installed": seen.installed if seen else None},
                           "unit": seen.as_dict() if seen else None, "expected": len(expected),
                           "listed": None, "healthy": None, "workers": workers, "others": [], "others_total": 0}
    row = unreachable_row(host, read.error or "not read")
    row.kind, row.gateway = KIND_GATEWAY, doc
    problems, warnings = _gateway_host_findings(settings.service_name, settings.version, seen) if seen else ([], [])
    if read.listed is None:
        row.problems += problems
        row.warnings += warnings
        return row
    row.reachable, row.error, row.problems = True, None, []
    mine = {_norm_url(u) for _, u in expected}
    others = sorted({_norm_url(w.url) for w in read.listed} - mine)
    doc["listed"], doc["others"] = len(read.listed), [_url_text(u) for u in others[:OTHERS_SHOWN]]
    doc["others_total"] = len(others)
    doc["healthy"] = sum(1 for w in workers if w["membership"] == LISTED)
    for w in workers:
        where = f"worker {w['host']} ({w['url']})"
        if w["membership"] == LISTED:
            continue
        if w["draining"]:
            row.warnings.append(f"{where} is {'not listed' if w['membership'] == MISSING else 'listed unhealthy'} "
                                "while a deploy drains and restarts it (its lock is held): expected")
        elif w["membership"] == MISSING:
            row.problems.append(f"{where} is not listed: clients routed through {host} never reach it")
        else:
            row.problems.append(f"{where} is listed unhealthy: {host} routes it no requests until its health "
                                "checks pass again")
    if others:
        more = f" and {len(others) - OTHERS_SHOWN} more" if len(others) > OTHERS_SHOWN else ""
        row.warnings.append(f"{len(others)} worker(s) listed that no host of the inventory gives this gateway: "
                            f"{', '.join(doc['others'])}{more}")
    if not expected:
        row.warnings.append("no host of the inventory names this gateway in sglang_gateways")
    row.problems += problems
    row.warnings += warnings
    row.state = DEGRADED if row.problems else OK
    return row


def gateway_error_row(host: str, why: str) -> Row:
    """A gateway host whose ``sglang_gateway`` (or address) cannot be planned: exit 2."""
    row = error_row(host, why)
    row.kind = KIND_GATEWAY
    return row


def add_gateways(row: Row, worker: WorkerMembership | None, reads: Mapping[str, GatewayRead],
                 seen: Observed | None = None, unread: Mapping[str, str] | None = None) -> Row:
    """A serving host's row with its membership in each of its gateways (``gateways``). When the
    host was read (``seen``), each gateway that does not list it healthy is a problem (``degraded``:
    clients sent through that gateway never reach it), unless a deploy holds its lock now: a deploy
    takes a worker out of its gateways before it stops it and puts it back after its gate, so then
    it is a warning. A gateway that could not be read leaves the membership ``unknown`` (a warning;
    ``unread``: gateway -> why it was not read at all)."""
    if worker is None:
        return row
    unread = unread or {}
    row.gateways = {g: membership(reads.get(g), worker.url) for g in worker.gateways}
    if seen is None or not row.reachable:
        return row
    draining = lock_held(seen)
    for g, word in row.gateways.items():
        if word == UNKNOWN:
            read = reads.get(g)
            why = read.error if read is not None and read.error else unread.get(g, "not read")
            row.warnings.append(f"membership in gateway {g} unknown: {printable(why)}")
        elif word != LISTED and draining:
            row.warnings.append(f"{'not in' if word == MISSING else 'unhealthy in'} gateway {g} while the deploy "
                                "holding this host's lock drains and restarts it: expected")
        elif word == MISSING:
            row.problems.append(f"not in gateway {g}: clients routed through it never reach this host")
            row.state = _worse(row.state, DEGRADED)
        elif word == UNHEALTHY:
            row.problems.append(f"unhealthy in gateway {g}: it routes no requests to this host until its health "
                                "checks pass again")
            row.state = _worse(row.state, DEGRADED)
    return row
