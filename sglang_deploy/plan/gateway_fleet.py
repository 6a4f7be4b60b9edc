"""The inventory's gateways as a whole, pure: every gateway host with its workers and their roles
(:func:`inventory_gateways`), each host's gateways and tp group for the rollout's and the restart
steps' split (:func:`fleet_memberships`), and the workers a restarted router must be given back
(:func:`workers_to_keep`, :func:`kept_role`). Settings and memberships are
``sglang_deploy.plan.gateway``'s."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from dataclasses import dataclass, field

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.gateway import (_WORKER_URL, MAX_REPLICAS_PER_HOST, MAX_URL_CHARS, MAX_WORKERS_PER_GATEWAY,
                                        GatewaySettings, WorkerMembership, declared_port, gateway_own_urls,
                                        gateway_settings, gateway_workers, worker_address, worker_membership)
from sglang_deploy.plan.pd_gateway import ROLES, RoleOf, gateway_roles
from sglang_deploy.plan.tpgroups import group_name, members_by_group


def _hosts_ports(named: Iterable[str]) -> dict[tuple[str, str], list[tuple[int, str]]]:
    """(scheme, host) -> (port, URL) of each named worker URL that has a port."""
    out: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for url in named:
        m = _WORKER_URL.match(url)
        if m and m.group("port"):
            out.setdefault((m.group("scheme"), m.group("host")), []).append((int(m.group("port")), url))
    return out


def _replica_of(url: Any, index: Mapping[tuple[str, str], list[tuple[int, str]]]) -> tuple[str, int] | None:
    """(the named worker, the offset) whose replica ``url`` (untrusted) can be: on its scheme and host, at
    most ``MAX_REPLICAS_PER_HOST`` ports above its port, the nearest such; None for any other URL."""
    m = _WORKER_URL.match(url) if isinstance(url, str) and len(url) <= MAX_URL_CHARS else None
    if m is None or not m.group("port"):
        return None
    port = int(m.group("port"))
    offsets = [(port - base, named) for base, named in index.get((m.group("scheme"), m.group("host")), ())
               if 0 < port - base <= MAX_REPLICAS_PER_HOST]
    if not offsets:
        return None
    offset, named = min(offsets)
    return named, offset


def workers_to_keep(listed: Sequence[str], named: Sequence[str]) -> tuple[str, ...]:
    """Of the workers a gateway listed before its restart (``listed``, untrusted: its own answer),
    those its unit does not name (``named``: ``--worker-urls``) that the restarted router must be
    given again: a host's data-parallel replicas past the first (``plan.replicas``: the host's port
    plus the replica's index) join by registration alone, and a restarted router starts from its
    ``--worker-urls``. Only URLs on a named worker's scheme and host and at most
    ``MAX_REPLICAS_PER_HOST`` ports above its port qualify, once each, in the listed order, at most
    ``MAX_WORKERS_PER_GATEWAY``: nothing the answer says reaches another address."""
    index = _hosts_ports(named)
    out: list[str] = []
    for url in listed:
        if url in named or url in out or _replica_of(url, index) is None:
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


def fleet_roles(hosts: Iterable[tuple[str, Mapping[str, Any], Mapping[str, Any]]]) -> dict[str, str]:
    """Host -> its ``sglang_role`` (prefill or decode) for the workers that declare one, from their data
    layers ``(name, group data, host data)``: what the restart steps keep one of serving per gateway
    (``waves.split_for_gateways``). Anything else is the host's own plan's to refuse."""
    out = {}
    for name, group_data, host_data in hosts:
        role = {**group_data, **host_data}.get("sglang_role")
        if role in ROLES:
            out[name] = str(role)
    return out


def kept_role(url: str, roles: Mapping[str, RoleOf]) -> RoleOf | None:
    """The role of a replica :func:`workers_to_keep` kept (``url``), from the plan's, not the gateway's
    answer: that of the role worker on its scheme and host nearest below its port (``roles``: the
    gateway's, ``plan.pd_gateway.gateway_roles``), a prefill replica's bootstrap port that worker's
    plus the replica's offset, as ``plan.replicas`` plans it. None: no such worker (a regular gateway)."""
    found = _replica_of(url, _hosts_ports(roles))
    if found is None:
        return None
    named, offset = found
    role = roles[named]
    return RoleOf(role.role, None if role.bootstrap_port is None else role.bootstrap_port + offset)


@dataclass(frozen=True)
class InventoryGateways:
    """The inventory's gateway hosts (name -> settings), their workers' URLs (inventory order) and,
    for a gateway of prefill and decode servers, each worker's role (``plan.pd_gateway``)."""

    gateways: Mapping[str, GatewaySettings]
    workers: Mapping[str, tuple[str, ...]]
    roles: Mapping[str, Mapping[str, RoleOf]] = field(default_factory=dict)


def tp_leaders(hosts: Sequence[tuple[str, Mapping[str, Any]]]
               ) -> tuple[dict[str, str], dict[str, tuple[str, Mapping[str, Any]]]]:
    """(host -> its multi-node tp group, group -> (rank 0's name, its data)): rank 0 is a group's
    first member in inventory order, the only rank that serves."""
    data_of = dict(hosts)
    groups = members_by_group([(name, {}, data) for name, data in hosts])
    units = {member: group for group, members in groups.items() for member in members}
    return units, {group: (members[0], data_of[members[0]]) for group, members in groups.items()}


def inventory_membership(name: str, data: Mapping[str, Any], units: Mapping[str, str],
                         rank0: Mapping[str, tuple[str, Mapping[str, Any]]],
                         gateway_hosts: Mapping[str, Any]) -> WorkerMembership | None:
    """A host's membership as the inventory declares it (:func:`worker_membership` at its declared
    port); a tp group member's is the group's, at rank 0's address and port (:func:`tp_leaders`)."""
    served_by, served_data = rank0.get(units.get(name, ""), (name, data))
    address = worker_address(served_by, served_data)[0] if served_by != name else None
    return worker_membership(name, data, declared_port(served_by, served_data), address=address,
                             gateway_hosts=gateway_hosts)


def inventory_gateways(hosts: Sequence[tuple[str, Mapping[str, Any]]]) -> InventoryGateways:
    """Every gateway host of the inventory (``(name, data)`` pairs, inventory order) and the
    workers that name it. A multi-node tp group (``sglang_tp_group``) is one worker: rank 0 (its
    first member in inventory order) serves, so its address and port are the group's. PlanError
    names the first host and field that is wrong."""
    gateways = {}
    for name, data in hosts:
        settings = gateway_settings(name, data)
        if settings is not None:
            gateways[name] = settings
    units, rank0 = tp_leaders(hosts)
    memberships = []
    for name, data in hosts:
        if name in gateways or not data.get("sglang_gateways"):
            continue
        m = inventory_membership(name, data, units, rank0, gateways)
        if m is not None:
            memberships.append(m)
    data_of = dict(hosts)
    own = {}
    for name, settings in gateways.items():
        try:
            own[name] = gateway_own_urls(name, data_of[name], settings)
        except PlanError:  # no address of its own to compare with (its name is none): nothing to collide
            continue
    workers = gateway_workers(memberships, units, own)
    return InventoryGateways(gateways=gateways, workers={g: workers.get(g, ()) for g in gateways},
                             roles=gateway_roles(memberships))
