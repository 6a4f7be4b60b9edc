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
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from sglang_deploy.plan import tpgroups
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
) -> list[Plan | PlanError]:
    """Plan every host of an inventory, ``(name, group_data, host_data)`` in inventory
    order, each tp group's members together; one Plan or PlanError per host.

    A tp group plans whole or not at all: when a member's data is wrong, the group's
    data disagrees, a member cannot be planned, or the members' plans differ where
    they must match (:func:`check_plans`), the member at fault gets its error and
    every other member an error naming the group and that member.

    ``facts`` maps host name -> the checkpoint's facts (or why there are none); a host
    without an entry is planned from its model profile. ``tuning``: the inventory's tuning
    records; each host gets the one of its hardware class (``planner.plan_host``)."""
    knowledge = knowledge or load_knowledge()
    probes = probes or {}
    facts = facts or {}
    specs, nodes, group_errors = tpgroups.nodes_from_data(hosts)
    out: dict[str, Plan | PlanError] = {}
    for name, spec in specs.items():
        if isinstance(spec, PlanError):
            out[name] = spec
        elif name not in group_errors:
            try:
                out[name] = plan_host(spec, probe=probes.get(name), sglang_version=sglang_version,
                                      knowledge=knowledge, node=nodes.get(name), facts=facts.get(name),
                                      weights=offline_weights(spec, facts.get(name)), tuning=tuning)
            except PlanError as exc:
                out[name] = exc
    for group, members in tpgroups.members_by_group(hosts).items():
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
    return [out[name] for name, _, _ in hosts]


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


def _shared_argv(argv: Sequence[str]) -> list[str]:
    """The argv without the per-node options (and their values)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        option = arg.split("=", 1)[0]
        if option in PER_NODE_OPTIONS:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


def _first_difference(mine: Sequence[str], theirs: Sequence[str]) -> str:
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a != b:
            return f"{a!r} here where rank 0 has {b!r} (word {i + 1} of the shared flags)"
    if len(mine) > len(theirs):
        return f"extra here: {' '.join(mine[len(theirs):])}"
    return f"missing here: {' '.join(theirs[len(mine):])}"
