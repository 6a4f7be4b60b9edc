"""Planning a whole inventory: every host, each multi-node tp group's members together.

``planner.plan_host`` plans one host and ``tpgroups`` derives a group's ranks
from inventory data; this module plans all hosts of an inventory with those
ranks and checks the members' plans against each other: a tp group plans whole
or not at all.

:func:`check_plans` (once every member is planned, with probed hardware during
a deploy) requires the same GPU count, GPU model and architecture, SGLang
version, model and every resolved intent, and the same argv but for
``--node-rank`` (and ``--host``: where each node's own health endpoint listens
is the node's business).

Hosts of one class share one computation. A host's plan depends on its DeploySpec, its GPU
probe (or declared GPUs, part of the spec), its model facts, the SGLang version (the spec's, or
``sglang_version`` for all) with that version's catalog, the knowledge and the tuning records
(the same for every host of one call), and for a tp group member its node. The host's name
enters only as the name its plan and errors carry. So the class of a host that is not a tp
group member is: its spec with the name replaced by :data:`CLASS_HOST` (every other key: GPUs,
model, version, intents, extra args, environment, service settings, ports, paths, secrets by
reference), its probe and its facts lookup. Hosts that differ in anything but the name are
different classes; a value that differs per host (a port, a path) makes its host a class of its
own. The class is planned once under :data:`CLASS_HOST`, and each member's plan is that plan
under its own name, with its own copies of every list and dict (``Plan.shared`` keeps the class
plan, so that ``output`` renders and formats each class once). A class error is each member's
error under its own name. Where a class plan holds :data:`CLASS_HOST` anywhere but its host
field, its members are planned one by one instead. A tp group member's node names it (its rank,
the members): it is planned alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Collection, Mapping, Sequence

from sglang_deploy.plan import pd, pd_split, replicas, tpgroups
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.hardware import same_gpu_model
from sglang_deploy.plan.modelfacts import FactsLookup
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.profiles import Knowledge, load_knowledge
from sglang_deploy.plan.spec import DeploySpec
from sglang_deploy.plan.tuning_record import TuningRecord
from sglang_deploy.plan.weights import Weights, facts_commit, host_endpoint, plan_weights

# Options that may differ between members: the rank itself, and the address each
# node's own (health) endpoint binds.
PER_NODE_OPTIONS = ("--node-rank", "--host")
PER_NODE_INTENTS = ("node_rank", "host")

_PlanOne = Callable[[DeploySpec, str], "Plan | PlanError"]  # a spec planned with a host's probe, node and facts

#: The name a class of hosts is planned under. spec.check_text refuses a control character in a
#: host name and in the texts of an inventory, so no host is called this: where it shows in a
#: class's plan, files or output, it stands for the member's own name.
CLASS_HOST = "\x00class\x00"


def offline_weights(spec: DeploySpec, facts: FactsLookup | None = None) -> Weights | None:
    """The weights as a plan sees them: the commit the model's facts were read at, or the
    revision when it is one; without either a deploy resolves it (or stops the host)."""
    if spec.weights is None:
        return None
    return plan_weights(spec.host, spec.model_path, spec.weights, facts_commit(facts), host_endpoint(spec))


def plan_inventory(
    hosts: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]],
    probes: Mapping[str, Any] | None = None,
    sglang_version: str | None = None,
    knowledge: Knowledge | None = None,
    facts: Mapping[str, FactsLookup] | None = None,
    tuning: Sequence[TuningRecord] = (),
    specs: Mapping[str, DeploySpec | PlanError] | None = None,
) -> list[Plan | PlanError]:
    """Plan every host of an inventory, ``(name, group_data, host_data)`` in inventory
    order, each tp group's members together; one Plan or PlanError per host.

    A tp group plans whole or not at all: when a member's data is wrong, the group's
    data disagrees, a member cannot be planned, or the members' plans differ where
    they must match (:func:`check_plans`), the member at fault gets its error and
    every other member an error naming the group and that member.

    ``facts`` maps host name -> the checkpoint's facts (or why there are none); a host
    without an entry is planned from its model profile. ``tuning``: the inventory's tuning
    records; each host gets the one of its hardware class (``planner.plan_host``). ``specs``: each
    host's spec as ``tpgroups.build_specs`` built it for the facts, so it is not built twice."""
    knowledge = knowledge or load_knowledge()
    probes = probes or {}
    facts = facts or {}
    specs, nodes, group_errors = tpgroups.nodes_from_data(hosts, specs)
    out: dict[str, Plan | PlanError] = {}

    def one(spec: DeploySpec, name: str) -> Plan | PlanError:
        """``spec`` planned with the probe, node and facts of host ``name``."""
        try:
            return plan_host(spec, probe=probes.get(name), sglang_version=sglang_version, knowledge=knowledge,
                             node=nodes.get(name), facts=facts.get(name),
                             weights=offline_weights(spec, facts.get(name)), tuning=tuning)
        except PlanError as exc:
            return exc

    classes: dict[tuple[str, str, int], list[_Class]] = {}
    for name, spec in specs.items():
        if isinstance(spec, PlanError):
            out[name] = spec
        elif name in group_errors:
            continue
        elif name in nodes:
            out[name] = one(spec, name)
        else:
            out[name] = _member(_class_of(classes, spec, probes.get(name), facts.get(name), one), spec, one)
    replica_memo: dict[int, list[Plan | PlanError]] = {}
    for name, group_data, host_data in hosts:
        plan, own = out.get(name), specs.get(name)
        if isinstance(plan, Plan) and isinstance(own, DeploySpec) and name not in nodes \
                and {**group_data, **host_data}.get("sglang_gateways"):
            out[name] = _with_replicas(plan, own, one, replica_memo)
    groups = tpgroups.members_by_group(hosts)
    for group, members in groups.items():
        problem = next((e for h in members for e in [group_errors.get(h) or out.get(h)]
                        if isinstance(e, PlanError)), None)
        if problem is None:
            try:
                check_plans([out[h] for h in members])  # type: ignore[misc]
            except PlanError as exc:
                problem = exc
        if problem is not None:
            for h in members:
                out[h] = problem if h == problem.host else group_failed(h, group, problem)
    # Prefill and decode servers of one gateway must meet (pd.py); a tp group's rank 0 takes its members along.
    group_of = {h: group for group, members in groups.items() for h in members}
    for name, problem in pd.check_roles(hosts, out).items():
        out[name] = problem
        for h in groups.get(group_of.get(name, ""), ()):
            if h != name:
                out[h] = group_failed(h, group_of[name], problem)
    _pd_split(hosts, specs, out, knowledge)
    return [out[name] for name, _, _ in hosts]


def _pd_split(hosts: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]],
              specs: Mapping[str, DeploySpec | PlanError], out: dict[str, Plan | PlanError],
              knowledge: Knowledge) -> None:
    """Each gateway's prefill and decode servers get its split and the one the speed model
    suggests for the first one's workload (pd_split.py); a split far from it is a warning."""
    for gateway, names in pd.role_workers(hosts, out).items():
        plans = [p for n in names for p in [out[n]] if isinstance(p, Plan)]
        spec = specs.get(names[0])
        if not plans or not isinstance(spec, DeploySpec):
            continue
        advice = pd_split.advise(gateway, plans, knowledge.gpus, spec.workload)
        if advice is None:
            continue
        for n in names:
            plan = out[n]
            if isinstance(plan, Plan):
                warnings = [*plan.warnings, f"PD split: {advice.text}"] if advice.far else plan.warnings
                # printed and rendered as its own (the class plan it may share knows nothing of the split)
                out[n] = dataclasses.replace(plan, pd_split=advice.text, warnings=warnings, shared=None)


@dataclasses.dataclass
class _Class:
    """Hosts whose plans differ only by name: their spec under CLASS_HOST, probe and facts."""

    spec: DeploySpec
    probe: Any
    facts: FactsLookup | None
    plan: Plan | PlanError  # under CLASS_HOST
    shared: bool  # False: the plan holds CLASS_HOST beyond its host field; members plan alone


def _class_of(classes: dict[tuple[str, str, int], list[_Class]], spec: DeploySpec, probe: Any,
              facts: FactsLookup | None, one: _PlanOne) -> _Class:
    """The host's class, planned on first sight. The key is the repr of what the plan reads, but
    a member joins a class only when its spec and probe also compare equal to the class's and
    its facts are the same lookup (a repr alone could hide a difference)."""
    anonymous = dataclasses.replace(spec, host=CLASS_HOST)
    key = (repr(anonymous), repr(probe), id(facts))
    for c in classes.get(key, ()):
        if c.facts is facts and c.spec == anonymous and c.probe == probe and type(c.probe) is type(probe):
            return c
    plan = one(anonymous, spec.host)
    # repr spells the name as it spells any string (escaped); a false alarm only costs sharing
    shared = isinstance(plan, PlanError) or repr(CLASS_HOST)[1:-1] not in repr(dataclasses.replace(plan, host=""))
    c = _Class(anonymous, probe, facts, plan, shared)
    classes.setdefault(key, []).append(c)
    return c


def _member(c: _Class, spec: DeploySpec, one: _PlanOne) -> Plan | PlanError:
    """One member's plan (or error) from its class's, under its own name."""
    if not c.shared:
        return one(spec, spec.host)
    return _named(c.plan, spec)


def _with_replicas(plan: Plan, spec: DeploySpec, one: _PlanOne,
                   memo: dict[int, list[Plan | PlanError]]) -> Plan | PlanError:
    """A gateway worker's plan of several data-parallel replicas as the deploy runs it: one server
    per replica (``replicas.replica_specs``), replica 0's plan holding every replica's. A class's
    replicas are planned once (``memo``, by the class plan) and named for each member."""
    if replicas.replica_count(plan) <= 1:
        return plan
    try:
        mine = replicas.replica_specs(spec, plan)
    except PlanError as exc:
        return exc
    if plan.shared is None:
        planned = [one(s, spec.host) for s in mine]
    else:
        key = id(plan.shared)
        if key not in memo:
            anonymous = replicas.replica_specs(dataclasses.replace(spec, host=CLASS_HOST), plan.shared)
            planned = [one(s, spec.host) for s in anonymous]
            whole = tuple(p for p in planned if isinstance(p, Plan))
            if len(whole) == len(planned):  # the class's first plan holds them too (its output)
                planned[0] = dataclasses.replace(whole[0], replicas=whole)
            memo[key] = planned
        planned = [_named(p, s) for p, s in zip(memo[key], mine)]
    failed = next((p for p in planned if isinstance(p, PlanError)), None)
    if failed is not None:
        return failed
    done = tuple(p for p in planned if isinstance(p, Plan))
    return dataclasses.replace(done[0], replicas=done)


def _named(plan: Plan | PlanError, spec: DeploySpec) -> Plan | PlanError:
    """A class plan (or error) under a member's name, with the member's spec's own parts."""
    name = spec.host
    if isinstance(plan, PlanError):
        if plan.host != CLASS_HOST:
            return plan
        return PlanError(name, plan.field.replace(CLASS_HOST, name), plan.message.replace(CLASS_HOST, name))
    # Every container its own: nothing one host's plan is given or changes reaches another's.
    return dataclasses.replace(
        plan, host=name, intents=dict(plan.intents), argv=list(plan.argv), argv_env_refs=dict(plan.argv_env_refs),
        env=dict(plan.env), env_comments=dict(plan.env_comments), nccl_conf=dict(plan.nccl_conf),
        nccl_comments=dict(plan.nccl_comments), secrets=spec.secrets, warnings=list(plan.warnings),
        service=spec.service, deprecated=list(plan.deprecated), tuning_notes=list(plan.tuning_notes), shared=plan)


def group_failed(host: str, group: str, problem: PlanError) -> PlanError:
    """The error of a member whose group cannot be deployed because of another member."""
    return PlanError(host, "sglang_tp_group", f"tp group {group} cannot be deployed (it deploys whole or not at "
                                              f"all): {problem}")


def _where(plan: Plan) -> str:
    return "sglang_gpus" if plan.gpus.source.startswith("declared") else "GPU probe"


def check_plans(plans: Sequence[Plan]) -> None:
    """Every member's plan against rank 0's: what must match across ranks does.

    ``plans`` are one group's members in rank order (``plan.tp_node`` set)."""
    if not plans:
        return
    lead = plans[0]
    node = lead.tp_node
    assert node is not None and node.is_leader, "plans must start at rank 0"
    name = node.group
    g0 = lead.gpus
    port = lead.intents["port"].value
    if node.dist_init_port == port:
        raise PlanError(lead.host, "sglang_dist_init_port",
                        f"{node.dist_init_port} is also the server's HTTP port on rank 0; choose another "
                        f"rendezvous port for tp group {name}")
    for plan in plans[1:]:
        other = plan.tp_node
        assert other is not None and other.group == name
        g = plan.gpus
        here = f"at rank 0 ({lead.host})"
        if g.count != g0.count:
            raise PlanError(plan.host, _where(plan),
                            f"{g.count} GPU(s) here but {g0.count} {here}: every member of tp group {name} "
                            "runs the same number of TP ranks")
        if not same_gpu_model(g.model, g0.model) or (g.compute_capability, g.arch) != (g0.compute_capability, g0.arch):
            raise PlanError(plan.host, _where(plan),
                            f"{g.model} ({g.arch}) here but {g0.model} ({g0.arch}) {here}: every member of tp "
                            f"group {name} needs the same GPU model and architecture")
        if plan.sglang_version != lead.sglang_version:
            raise PlanError(plan.host, "sglang_version",
                            f"{plan.sglang_version} here but {lead.sglang_version} {here}")
        if plan.model_path != lead.model_path:
            raise PlanError(plan.host, "sglang_model", f"{plan.model_path!r} here but {lead.model_path!r} {here}")
        for key, mine in plan.intents.items():
            theirs = lead.intents[key]
            if key not in PER_NODE_INTENTS and mine.value != theirs.value:
                raise PlanError(plan.host, f"intent {key}",
                                f"{mine.value!r} here ({mine.layer} layer: {mine.reason}) but {theirs.value!r} "
                                f"{here} ({theirs.layer} layer): every member of tp group {name} must resolve "
                                "it alike")
        mine_argv, lead_argv = _shared_argv(plan.argv), _shared_argv(lead.argv)
        if mine_argv != lead_argv:
            raise PlanError(plan.host, "argv", f"launch flags differ from rank 0 ({lead.host}): "
                                               f"{_first_difference(mine_argv, lead_argv)}")


def argv_without(argv: Sequence[str], options: Collection[str]) -> list[str]:
    """The argv without ``options`` and their values (``--opt value`` or ``--opt=value``)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg.split("=", 1)[0] in options:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


def _shared_argv(argv: Sequence[str]) -> list[str]:
    """The argv without the per-node options (and their values)."""
    return argv_without(argv, PER_NODE_OPTIONS)


def _first_difference(mine: Sequence[str], theirs: Sequence[str]) -> str:
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a != b:
            return f"{a!r} here where rank 0 has {b!r} (word {i + 1} of the shared flags)"
    if len(mine) > len(theirs):
        return f"extra here: {' '.join(mine[len(theirs):])}"
    return f"missing here: {' '.join(theirs[len(mine):])}"
