"""The run's restart steps: a pyinfra run that changes several workers of a gateway runs their live
changes in steps, at most ``max_unavailable`` of a gateway's workers out at once (``waves.split_for_gateways``),
each step's operations ordered after the last step's; and the gateway hosts' operations ordered before
any worker's (``gateways_first``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyinfra.api.host import Host
from pyinfra.operations import python

from sglang_deploy.deploy.context import HostDeploy
from sglang_deploy.deploy.gating import fail_host
from sglang_deploy.deploy.inventory import data_layers
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.gateway_fleet import fleet_memberships, fleet_roles
from sglang_deploy.plan.settings import ROLLOUT_DEFAULTS, ROLLOUT_KEYS
from sglang_deploy.runcontext import from_environ as run_context
from sglang_deploy.waves import (Size, WaveError, agreed_setting, gateway_worker_counts,
                                 parse_max_unavailable, split_for_gateways)

from sglang_deploy.deploy.gateway import runs_gateway


# ---------------------------------------------------------------------------
# The run's restart steps: at most max_unavailable of a gateway's workers out at once


def fleet_max_unavailable(host: Host) -> Size:
    """The rollout's ``--max-unavailable`` when it runs this deploy, else ``sglang_rollout.max_unavailable``
    (every host that sets it must agree), else 1. PlanError names the host and the field."""
    field_name = "sglang_rollout.max_unavailable"
    try:
        raw = run_context().max_unavailable or agreed_setting(
            {h.name: h.data.get("sglang_rollout") for h in host.inventory}, "max_unavailable", ROLLOUT_KEYS)
        return parse_max_unavailable(raw if raw is not None else ROLLOUT_DEFAULTS["max_unavailable"])
    except WaveError as exc:
        raise PlanError(host.name, field_name, str(exc).removeprefix(f"{field_name}: ")) from None


@dataclass(frozen=True)
class RunSteps:
    """The hosts of this pyinfra run in restart steps (``waves.split_for_gateways``), run one after
    another: no step holds more than ``max_unavailable`` of any gateway's workers (a tp group is
    one worker, in one step); hosts that are no gateway's workers are in the first."""

    steps: tuple[tuple[str, ...], ...]
    memberships: dict[str, tuple[str, ...]]

    def index(self, name: str) -> int:
        return next((i for i, step in enumerate(self.steps) if name in step), 0)

    def earlier_partners(self, name: str) -> list[str]:
        """The workers of this host's gateways in earlier steps than its own, inventory order."""
        mine, gateways = self.index(name), set(self.memberships.get(name, ()))
        return [h for step in self.steps[:mine] for h in step if gateways & set(self.memberships.get(h, ()))]


#: pyinfra state -> (that state, its steps): pyinfra loads every host's deploy (in parallel
#: greenlets: pyinfra_cli/util.py, _parallel_load_hosts) before any operation executes; the first
#: host to ask computes the steps for all (the state is kept with them: an id can be reused).
_STEPS: dict[int, tuple[Any, RunSteps]] = {}


def run_steps(host: Host) -> RunSteps:
    """This run's restart steps, the same on every host (inventory data and the run's ``--limit``
    only: no host's facts), computed once per run. PlanError: the fleet's max_unavailable is wrong."""
    state = host.state
    cached = _STEPS.get(id(state))
    if cached is not None and cached[0] is state:
        return cached[1]
    size = fleet_max_unavailable(host)
    layers = [(other.name, *data_layers(other)) for other in host.inventory]
    memberships, units = fleet_memberships(layers)
    in_run = [h.name for h in host.inventory if state.is_host_in_limit(h)]
    steps = split_for_gateways(in_run, memberships, size, units=units,
                               worker_counts=gateway_worker_counts(memberships, units), roles=fleet_roles(layers))
    result = RunSteps(steps=tuple(steps) or ((),), memberships=memberships)
    _STEPS[id(state)] = (state, result)
    return result


def step_plan(host: Host, ctx: HostDeploy, serving: bool | None = None) -> tuple[int, int]:
    """(how many restart steps this run has, the one (0-based) this host's live change runs in).

    A worker of a gateway that serves now (or a tp group member: whether its group serves is decided
    at run time) takes its step; every other host restarts in the first: a server that does not
    serve yet takes no capacity away. One step when no host of the inventory runs a gateway, or the
    fleet's max_unavailable is wrong (then every worker has failed its plan, saying so)."""
    if not any(runs_gateway(other) for other in host.inventory):
        return 1, 0
    try:
        steps = run_steps(host)
    except PlanError:
        return 1, 0
    p = ctx.prepared
    if serving is None:  # else the caller's: whether any of the host's replicas serves
        serving = p is not None and p.state.active
    if ctx.gateway is None or (ctx.tp is None and not serving):
        return len(steps.steps), 0
    return len(steps.steps), steps.index(host.name)


def step_check_callback(state: Any, host: Host, ctx: HostDeploy, steps: RunSteps) -> bool:
    """Before this worker's live change, in a later step: a worker of one of its gateways that
    failed in an earlier step of this run stops it, unchanged (as a failed step ends a rollout's wave)."""
    failed = {h.name for h in state.failed_hosts}
    earlier = [h for h in steps.earlier_partners(host.name) if h in failed]
    if not earlier:
        return True
    ctx.error = (f"not restarted: {', '.join(earlier)}, a worker of the same gateway(s) in an earlier step of this "
                 "run, failed; nothing was changed on this host")
    fail_host(host, ctx, ctx.error)
    return False


def end_of_step(host: Host, number: int, total: int) -> None:
    """One operation on every host of the run at the end of each restart step (called from one
    line, it is one node of pyinfra's operation order, as in :func:`gateways_first`): the next
    step's operations come after every host's operations of this one."""
    python.call(name=f"End of restart step {number + 1} of {total}: at most max_unavailable of each gateway's "
                     "workers out at once", function=_ordering_point)


def _ordering_point(state: Any, host: Host) -> bool:
    """What the ordering operations run (``gateways_first``, ``end_of_step``): nothing; their place
    in pyinfra's order is what they are for."""
    return True


def gateways_first(host: Host) -> None:
    """When a gateway host is in this run, one operation on every host that orders the gateway
    hosts' operations before the workers'.

    pyinfra (3.10, pyinfra/api/state.py, State.get_op_order) orders a run's operations as a graph
    of each host's own sequence, ties broken by line number: the n-th operation of every host runs
    with the others' n-th, whatever the code order of the hosts' deploys, so a gateway's install,
    restart and gate would interleave with its workers' drain and restart. An operation called from
    one line for every host is one node of that graph: the gateway hosts' operations come before
    it, the workers' after it. Called by ``deploy_current_host`` after the gateway's deploy and
    before the workers' roles."""
    state = host.state
    if any(runs_gateway(other) and state.is_host_in_limit(other) for other in host.inventory):
        python.call(name="Gateway hosts deployed before any worker changes", function=_ordering_point)
