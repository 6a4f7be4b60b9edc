"""`sglang-deploy status INVENTORY`: every host's revision, server, drift (files and argv), GPU health,
last gate and last continuous check; nothing changes.

Order: load the inventory (pyinfra's loader) and select ``--limit``; start reading every gateway
the selection needs (a selected gateway host, or one a selected worker names: one ``GET /workers``
each, from this controller, sglang_deploy/deploy/gateway_status.py); connect to every selected
SGLang host and probe its GPUs, and to every selected gateway host for its router release, revision
and unit, all at once and beside those reads (sglang_deploy/deploy/status.py);
plan the whole inventory but its gateway hosts with those probes as ``sglang-deploy plan`` does,
render each plan with its secrets read on this controller (as a deploy does) for the revision it
would deploy; read every SGLang host's state in one command each, again all at once; compare
(sglang_deploy/status/) and print: a gateway host's row from its worker list, each
worker's row with its membership in its gateways.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Sequence, TextIO

import gevent

from sglang_deploy.commands.rollout import RolloutError, select
from sglang_deploy.deploy.inventory import InventoryError, load_inventory
from sglang_deploy.deploy.gateway_status import GatewayReads, GatewayTarget
from sglang_deploy.deploy.model_metadata import facts_for_hosts
from sglang_deploy.deploy.secrets import read_secrets
from sglang_deploy.deploy.status import HostRead, StatusReader, quiet_pyinfra, raise_open_files
from sglang_deploy.errors import PlanError
from sglang_deploy import status
from sglang_deploy.commands import status_table
from sglang_deploy.plan.gateway import API_KEY_ENV
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.inventory_plan import plan_inventory
from sglang_deploy.plan.render import render
from sglang_deploy.lifecycle.revision import Layout, revision_id
from sglang_deploy.plan.spec import DeploySpec, build_spec
from sglang_deploy.plan.tpgroups import build_specs
from sglang_deploy.plan.tuning_record import TuningError
from sglang_deploy.plan.tuning_record_file import load_records, records_path
from sglang_deploy.untrusted import Scrubber


@dataclass
class StatusOptions:
    inventory: str
    limit: Sequence[str] = ()
    json: bool = False
    diff: bool = False
    verify_weights: bool = False  # re-hash the served snapshot on each host (reads all its bytes)
    colour: bool | None = None  # None: when stdout is a terminal
    parallel: int = status.READ_PARALLEL  # hosts connected and read at once


@dataclass
class _Planned:
    planned: status.Planned
    layout: tuple[Layout, str] | None = None  # the layout and the venvs' folder, when planned
    secrets: list[str] = field(default_factory=list)


def _findings(plan: Plan) -> tuple[str, ...]:
    """What the plan's checks of the probed hardware found that the host should hear of in `status` too:
    peer transfers over PCIe planned off, and why; an IOMMU that translates."""
    check = plan.pcie
    if check is None:
        return ()
    off = ((f"PCIe P2P broken: {check.detail}; planned without custom allreduce, NCCL_P2P_DISABLE=1",)
           if check.status == "broken" else ())
    return (*off, *check.warnings)


def _planned(name: str, plan: Plan | PlanError, probe: dict[str, Any] | None, data: tuple[Any, Any]) -> _Planned:
    out = _planned_revision(name, plan, probe, data)
    if isinstance(plan, Plan):
        out.planned = replace(out.planned, findings=_findings(plan))
    return out


def _planned_revision(name: str, plan: Plan | PlanError, probe: dict[str, Any] | None,
                      data: tuple[Any, Any]) -> _Planned:
    if isinstance(plan, PlanError):
        return _Planned(status.Planned(error=str(plan)))
    layout = Layout.of(plan.service, plan.nccl_conf_path)
    out = _Planned(status.Planned(sglang_version=plan.sglang_version, paths=layout.live_paths()),
                   (layout, plan.service.venvs_dir))
    if probe is not None and "error" in probe:
        out.planned = status.Planned(sglang_version=plan.sglang_version, paths=layout.live_paths(),
                                     unknown=f"GPU probe: {probe['error']}")
        return out
    weights = plan.weights
    if weights is not None and weights.source in ("hub", "controller") and weights.commit is None:
        out.planned = status.Planned(sglang_version=plan.sglang_version, paths=layout.live_paths(),
                                     unknown="the weights' commit is resolved by a deploy, not here")
        return out
    try:
        spec = build_spec(name, *data)
        secrets = read_secrets(name, spec.secrets)
        files = render(plan, secrets)
    except PlanError as exc:  # a secret not available on this controller: the revision cannot be known
        out.planned = status.Planned(sglang_version=plan.sglang_version, paths=layout.live_paths(),
                                     unknown=str(exc))
        return out
    out.secrets = list(secrets.values())
    out.planned = status.Planned(revision=revision_id(files, plan.sglang_version), sglang_version=plan.sglang_version,
                                 paths=layout.live_paths())
    return out


def _gateway_targets(fleet: status.FleetGateways, wanted: Sequence[str]) -> tuple[dict[str, GatewayTarget],
                                                                                   dict[str, str]]:
    """Where each wanted gateway is read and with which API key (read on this controller, as a deploy
    reads it); and, for those that cannot be read at all, why not (their data is wrong, or their key
    is not available here)."""
    targets: dict[str, GatewayTarget] = {}
    unread: dict[str, str] = {}
    for name in wanted:
        settings = fleet.gateways.get(name)
        if settings is None:
            unread[name] = f"gateway {name} cannot be planned: {fleet.errors.get(name, 'not a gateway host')}"
            continue
        try:
            key = read_secrets(name, settings.secrets).get(API_KEY_ENV)
        except PlanError as exc:
            unread[name] = f"gateway {fleet.urls[name]}: not read: its API key is not available on this controller: " \
                           f"{exc}"
            continue
        targets[name] = GatewayTarget(url=fleet.urls[name], api_key=key, routers=fleet.routers.get(name, ()))
    return targets, unread


def collect(opts: StatusOptions) -> list[status.Row]:
    """Every selected host's row (raises InventoryError, RolloutError or TuningError on bad input)."""
    return _collect(opts)[0]


def _collect(opts: StatusOptions) -> tuple[list[status.Row], Scrubber]:
    """The rows, and the scrubber of every secret this controller read for them."""
    everyone = load_inventory(opts.inventory)
    hosts = select(everyone, opts.limit)
    records = load_records(records_path(opts.inventory))
    # Gateway hosts run the SGLang Model Gateway, not SGLang: read over HTTP, never planned as SGLang hosts.
    fleet = status.fleet_gateways([(h.name, {**h.group_data, **h.host_data}) for h in everyone])
    fronts = set(fleet.gateway_hosts)
    servers = [h for h in everyone if h.name not in fronts]
    names = [h.name for h in hosts if h.name not in fronts]
    selected = {h.name for h in hosts}
    named = {g for n in names if n in fleet.memberships for g in fleet.memberships[n].gateways}
    wanted = [g for g in fleet.gateway_hosts if g in selected or g in named]  # each read once
    targets, unread = _gateway_targets(fleet, wanted)
    gateway_reads = GatewayReads(targets)  # under way now, beside the SSH reads below
    gateway_keys = [t.api_key for t in targets.values()]
    undo = quiet_pyinfra()
    raise_open_files(len(names) + len(targets) + 256)  # a socket per host and gateway, and this process's own
    reader = StatusReader(opts.inventory, parallel=opts.parallel)
    reads: dict[str, HostRead] = {}
    seen_gateways: dict[str, status.GatewayHostSeen] = {}
    planned: dict[str, _Planned] = {}
    replicas: dict[str, list[tuple[str, _Planned]]] = {}  # host -> its replicas past the first: (unit, plan)
    checks: dict[str, status.WeightsCheck] = {}
    try:
        # The selected gateway hosts' own state over SSH (router release, revision, unit), beside the probes.
        gateway_hosts = gevent.spawn(reader.read_gateway_hosts, {g: fleet.gateways[g] for g in fleet.gateway_hosts
                                                                 if g in selected and g in fleet.gateways})
        if names:
            triples = [(h.name, h.group_data, h.host_data) for h in servers]
            specs = build_specs(triples)  # once, for the probes, the facts and the plans
            # probed as the deploy probes (SGLang's own P2P test results under the cache root): the
            # plan, and so the revision it is compared with, is the one a deploy would make
            reads = reader.probe(names, {n: s.cache_dir for n, s in specs.items() if isinstance(s, DeploySpec)})
        seen_gateways = gateway_hosts.get()
        reads_of_gateways = gateway_reads.results()
        if names:
            probes = {n: r.probe for n, r in reads.items() if r.probe is not None and "error" not in r.probe}
            plans = plan_inventory(triples, probes=probes, facts=facts_for_hosts(servers, specs), tuning=records,
                                   specs=specs)
            by_name = {h.name: (h, p) for h, p in zip(servers, plans)}
            # a host's replicas past the first are workers of its gateways too (plan.replicas)
            fleet = status.with_replicas(
                fleet, {h.name: [r.intents["port"].value for r in p.replicas] for h, p in zip(servers, plans)
                        if isinstance(p, Plan) and p.replicas},
                {h.name: {**h.group_data, **h.host_data} for h in servers})
            planned = {n: _planned(n, by_name[n][1], reads[n].probe,
                                   (by_name[n][0].group_data, by_name[n][0].host_data)) for n in names}
            for n in names:
                plan = by_name[n][1]
                if isinstance(plan, Plan) and plan.replicas:
                    data = (by_name[n][0].group_data, by_name[n][0].host_data)
                    replicas[n] = [(r.service.name, _planned(n, r, reads[n].probe, data)) for r in plan.replicas[1:]]
            layouts = {n: p.layout for n, p in planned.items() if p.layout is not None}
            reader.read(reads, layouts, opts.diff,
                        {n: [p.layout for _, p in rs if p.layout is not None] for n, rs in replicas.items()})
            checks = reader.verify_weights(reads, layouts) if opts.verify_weights else {}
    finally:
        reader.close()
        undo()
    scrubber = Scrubber([*(s for p in planned.values() for s in p.secrets), *gateway_keys])
    # a host whose lock any of its servers holds is being deployed (its replicas restart one by one)
    draining = {n for n in names if any(status.lock_held(seen) for seen in
                                        [reads[n].observed, *reads[n].replicas.values()] if seen is not None)}
    rows = []
    for h in hosts:
        n = h.name
        if n in fronts:
            rows.append(_gateway_row(n, fleet, reads_of_gateways, unread, draining, seen_gateways.get(n)))
            continue
        if n in fleet.errors:
            rows.append(status.error_row(n, fleet.errors[n], planned[n].planned))
            continue
        row = _row(reads[n], planned[n].planned, scrubber, opts.diff, checks.get(n))
        rows.append(status.add_gateways(row, fleet.memberships.get(n), reads_of_gateways, reads[n].observed,
                                        unread))
        if n not in replicas:
            continue
        # one row per replica, each a server and a worker of its own
        first = planned[n].layout
        row.service = first[0].service if first is not None else None
        memberships = fleet.replicas.get(n, ())
        for i, (service, one) in enumerate(replicas[n]):
            read = reads[n]
            seen = read.replicas.get(service)
            mine = HostRead(n, probe=read.probe, observed=seen,
                            unreachable=read.unreachable or (None if seen is not None else "its state was not read"))
            extra = _row(mine, one.planned, scrubber, opts.diff)
            extra.service = service
            rows.append(status.add_gateways(extra, memberships[i] if i < len(memberships) else None,
                                            reads_of_gateways, seen, unread))
    return rows, scrubber


def _gateway_row(name: str, fleet: status.FleetGateways, reads: dict[str, status.GatewayRead],
                 unread: dict[str, str], draining: set[str], seen: status.GatewayHostSeen | None) -> status.Row:
    settings = fleet.gateways.get(name)
    if settings is None:
        return status.gateway_error_row(name, fleet.errors.get(name, "not a gateway host"))
    read = reads.get(name) or status.GatewayRead(url=fleet.urls[name], error=unread.get(name, "not read"))
    return status.gateway_row(name, settings, read, fleet.expected.get(name, ()), draining, seen)


def _row(read: HostRead, planned: status.Planned, scrubber: Scrubber, diff: bool,
         weights: status.WeightsCheck | None = None) -> status.Row:
    if planned.error is not None:
        return status.error_row(read.name, planned.error)
    if read.unreachable is not None or read.observed is None:
        return status.unreachable_row(read.name, read.unreachable or "not read", planned)
    return status.build_row(read.name, read.observed, planned, scrubber, diff, weights,
                            now=datetime.now(timezone.utc))


def run_status(opts: StatusOptions, out: TextIO, err: TextIO) -> int:
    """Print the table (or ``--json``); the exit code of ``plan/status.py``'s ``exit_code``, or 2 on bad input."""
    try:
        rows, scrubber = _collect(opts)
    except (InventoryError, RolloutError, TuningError) as exc:
        err.write(f"error: {exc}\n")
        return 2
    # Whatever a host, a gateway or a file said (a history line's why, a gate's summary, a worker's URL)
    # is printed only through the scrubber of every secret read here, the table and --json alike: after
    # the printable filter, so that a secret split by a terminal control is whole again when it is masked.
    if opts.json:
        out.write(scrubber.text(status_table.rows_json(rows, opts.diff)))
    else:
        colour = opts.colour if opts.colour is not None else bool(getattr(out, "isatty", lambda: False)())
        out.write(scrubber.text(status_table.render_table(rows, colour=colour, with_diff=opts.diff)))
    return status.exit_code(rows)
