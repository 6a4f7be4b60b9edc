"""The inventory's gateways as the fleet's restarts see them, pure: each host's gateways and tp group
for the rollout's and the restart steps' split (:func:`fleet_memberships`), and the workers a
restarted router must be given back (:func:`workers_to_keep`). Settings and memberships are
``sglang_deploy.plan.gateway``'s."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.gateway import _WORKER_URL, MAX_REPLICAS_PER_HOST, MAX_URL_CHARS, MAX_WORKERS_PER_GATEWAY
from sglang_deploy.plan.tpgroups import group_name


def workers_to_keep(listed: Sequence[str], named: Sequence[str]) -> tuple[str, ...]:
    """Of the workers a gateway listed before its restart (``listed``, untrusted: its own answer),
    those its unit does not name (``named``: ``--worker-urls``) that the restarted router must be
    given again: a host's data-parallel replicas past the first (``plan.replicas``: the host's port
    plus the replica's index) join by registration alone, and a restarted router starts from its
    ``--worker-urls``. Only URLs on a named worker's scheme and host and at most
    ``MAX_REPLICAS_PER_HOST`` ports above its port qualify, once each, in the listed order, at most
    ``MAX_WORKERS_PER_GATEWAY``: nothing the answer says reaches another address."""
    ports: dict[tuple[str, str], list[int]] = {}
    for url in named:
        m = _WORKER_URL.match(url)
        if m and m.group("port"):
            ports.setdefault((m.group("scheme"), m.group("host")), []).append(int(m.group("port")))
    out: list[str] = []
    for url in listed:
        m = _WORKER_URL.match(url) if isinstance(url, str) and len(url) <= MAX_URL_CHARS else None
        if m is None or not m.group("port") or url in named or url in out:
            continue
        port, bases = int(m.group("port")), ports.get((m.group("scheme"), m.group("host")), ())
        if not any(0 < port - base <= MAX_REPLICAS_PER_HOST for base in bases):
            continue
        out.append(url)
        if len(out) >= MAX_WORKERS_PER_GATEWAY:
            break
    return tuple(out)


def fleet_memberships(hosts: Iterable[tuple[str, Mapping[str, Any], Mapping[str, Any]]], strict: bool = False
                      ) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """(host -> the gateways it is a worker of, host -> its tp group) for every host of the fleet,
    from its data layers ``(name, group data, host data)``: what both the rollout and a plain
    deploy's restart steps split by. A gateway host (``sglang_gateway`` set) is no worker.
    ``sglang_gateways`` that is not a list of names is, with ``strict``, a PlanError naming the host
    (the rollout refuses to start); else no membership (the host's own plan refuses it)."""
    memberships: dict[str, tuple[str, ...]] = {}
    units: dict[str, str] = {}
    for name, group_data, host_data in hosts:
        data = {**group_data, **host_data}
        raw = data.get("sglang_gateways") or ()
        if data.get("sglang_gateway") not in (None, False):
            raw = ()
        if not isinstance(raw, (list, tuple)) or not all(isinstance(n, str) for n in raw):
            if strict:
                raise PlanError(name, "sglang_gateways", "must be a list of inventory host names")
            raw = ()
        memberships[name] = tuple(raw)
        unit = group_name(group_data, host_data)
        if unit is not None:
            units[name] = unit
    return memberships, units
