"""Multi-node tensor-parallel groups: one SGLang instance spread over several hosts.

Every host whose data sets the same ``sglang_tp_group`` is a member of that
group; members are ranked in inventory order (rank 0 first). Each member runs
the same launch command but for ``--node-rank``: ``--nnodes`` = the member
count and ``--dist-init-addr`` = rank 0's node address and the group's
rendezvous port. The ``tp_size`` intent means the whole instance (GPUs per
node x nodes).

This module derives the ranks from inventory data alone, before any host is
touched (:func:`assign`, :func:`nodes_from_data`): the members, their ranks
and the rendezvous address; ``sglang_nnodes`` and the settings that are the
group's, not a member's, agree. Checking the members' plans against each
other is inventory-wide planning (``inventory_plan.check_plans``).

Errors are :class:`PlanError` naming the member that differs and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.spec import DEFAULT_DIST_INIT_PORT, DeploySpec, build_spec


@dataclass(frozen=True)
class TpNode:
    """One member's place in its group."""

    group: str
    rank: int
    members: tuple[str, ...]  # host names, rank order
    addresses: tuple[str, ...]  # node addresses, rank order
    dist_init_port: int

    @property
    def nnodes(self) -> int:
        return len(self.members)

    @property
    def leader(self) -> str:
        return self.members[0]

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    @property
    def dist_init_addr(self) -> str:
        """Rank 0's rendezvous address, ``HOST:PORT`` (``[V6]:PORT`` for an IPv6 address)."""
        address = self.addresses[0]
        return f"[{address}]:{self.dist_init_port}" if ":" in address else f"{address}:{self.dist_init_port}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.group,
            "nnodes": self.nnodes,
            "node_rank": self.rank,
            "dist_init_addr": self.dist_init_addr,
            "members": [{"host": h, "node_rank": r, "address": a}
                        for r, (h, a) in enumerate(zip(self.members, self.addresses))],
        }


def assign(members: Sequence[DeploySpec]) -> dict[str, TpNode]:
    """Ranks and the rendezvous address of one group's members (inventory order).

    Raises PlanError for the group's data: too few members, a declared
    ``sglang_nnodes`` that is not the member count, members that disagree on the
    rendezvous port, the SGLang version or the model."""
    if not members:
        raise ValueError("a tp group needs members")
    first = members[0]
    assert first.tp_group is not None
    name = first.tp_group.name
    names = [m.host for m in members]
    for m in members:
        if m.tp_group is None or m.tp_group.name != name:
            raise ValueError(f"{m.host} is not a member of tp group {name}")
        declared = m.tp_group.nnodes
        if declared is not None and declared != len(members):
            raise PlanError(m.host, "sglang_nnodes",
                            f"tp group {name} declares {declared} nodes but has {len(members)} member(s) in the "
                            f"inventory: {', '.join(names)}")
    if len(members) < 2:
        raise PlanError(first.host, "sglang_tp_group",
                        f"tp group {name} has only this host; a group spans at least 2 hosts (is another member "
                        "missing from the inventory, or the name misspelt?)")
    for m in members[1:]:
        for key, mine, theirs in (
            ("sglang_dist_init_port", m.tp_group.dist_init_port, first.tp_group.dist_init_port),  # type: ignore[union-attr]
            ("sglang_version", m.sglang_version, first.sglang_version),
            ("sglang_model", m.model_path, first.model_path),
        ):
            if mine != theirs:
                raise PlanError(m.host, key, f"{mine!r} here but {theirs!r} at rank 0 ({first.host}): every member "
                                             f"of tp group {name} runs the same instance")
    port = first.tp_group.dist_init_port or DEFAULT_DIST_INIT_PORT
    addresses = tuple(m.tp_group.node_address for m in members)  # type: ignore[union-attr]
    return {m.host: TpNode(group=name, rank=rank, members=tuple(names), addresses=addresses, dist_init_port=port)
            for rank, m in enumerate(members)}


HostData = tuple[str, Mapping[str, Any], Mapping[str, Any]]  # (name, group_data, host_data)


def group_name(group_data: Mapping[str, Any], host_data: Mapping[str, Any]) -> str | None:
    """The ``sglang_tp_group`` a host's data names (the host's own setting wins), read
    even where the rest of its data is wrong; None when it names none."""
    name = {**group_data, **host_data}.get("sglang_tp_group")
    return name if isinstance(name, str) and name else None


def members_by_group(hosts: Sequence[HostData]) -> dict[str, list[str]]:
    """Each tp group's member host names, inventory order (= rank order)."""
    out: dict[str, list[str]] = {}
    for name, group_data, host_data in hosts:
        group = group_name(group_data, host_data)
        if group is not None:
            out.setdefault(group, []).append(name)
    return out


def build_specs(hosts: Sequence[HostData]) -> dict[str, DeploySpec | PlanError]:
    """Every host's spec (or its PlanError), built once for all who need them (the facts, the plan)."""
    specs: dict[str, DeploySpec | PlanError] = {}
    for name, group_data, host_data in hosts:
        try:
            specs[name] = build_spec(name, group_data, host_data)
        except PlanError as exc:
            specs[name] = exc
    return specs


def nodes_from_data(hosts: Sequence[HostData], specs: Mapping[str, DeploySpec | PlanError] | None = None) -> tuple[
        dict[str, DeploySpec | PlanError], dict[str, TpNode], dict[str, PlanError]]:
    """From an inventory's host data (inventory order): every host's spec (or its
    PlanError), every group member's node, and for each member of a group that
    cannot be assigned (a member's data is wrong, or the group's data disagrees)
    the group's error (the same for all; it names the member at fault: wrap it
    with ``inventory_plan.group_failed`` for the others)."""
    if specs is None or any(name not in specs for name, _, _ in hosts):
        specs = build_specs(hosts)
    specs = dict(specs)
    nodes: dict[str, TpNode] = {}
    errors: dict[str, PlanError] = {}
    for names in members_by_group(hosts).values():
        members = [specs[h] for h in names]
        bad = next((s for s in members if isinstance(s, PlanError)), None)
        try:
            if bad is not None:
                raise bad
            nodes.update(assign([s for s in members if not isinstance(s, PlanError)]))
        except PlanError as exc:
            for h in names:
                errors[h] = exc
    return specs, nodes, errors
