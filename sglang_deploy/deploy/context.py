"""One host's deploy as the roles carry it from prepare to the gate's last callback.

``HostDeploy`` is what ``prepare`` returns for every host. When its plan, render
and decisions succeed it holds a ``Prepared`` record (every field set); the
operations and callbacks that run only after a successful prepare take that
record. What the gate and the rollback find out at run time goes into
``GateResults``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyinfra.api.host import Host

from sglang_deploy.gate import outcomes
from sglang_deploy.lifecycle import cache_seed, rollback_policy
from sglang_deploy.plan import start_budget
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.render import RenderedFiles
from sglang_deploy.lifecycle.revision import Actions, HostState, Layout
from sglang_deploy.plan.spec import DeploySpec


@dataclass(frozen=True)
class Prepared:
    """What prepare planned and decided for the host."""

    spec: DeploySpec
    plan: Plan
    files: RenderedFiles
    revision: str
    layout: Layout
    state: HostState
    actions: Actions
    rollback: rollback_policy.RollbackPlan | None  # None: nothing staged to roll back to
    api_key: str | None  # SGLANG_API_KEY from the host's secrets, if any
    # How long the restarted server may take to be ready (plan/start_budget.py: the inventory's
    # setting, else the host's recorded starts, else the plan's phases); None: a Prepared built by
    # hand, which waits the unit's start timeout.
    start_budget: start_budget.StartBudget | None = None
    # A rollout's compile-cache seed for this host's class (lifecycle/cache_seed.py): take it before
    # the stop, or offer this host's caches after its gate passes; None: not a rollout.
    seed: cache_seed.SeedPlan | None = None

    @property
    def ready_timeout_s(self) -> float:
        """How long the gate waits for the restarted server to be ready: the start budget
        (``sglang_gate.ready_timeout_s`` when the inventory sets it), else the unit's start timeout."""
        if self.start_budget is not None:
            return float(self.start_budget.total_s)
        given = self.spec.gate.ready_timeout_s
        return float(given) if given is not None else float(self.plan.timeout_start_s)

    @property
    def gate_on_host(self) -> bool:
        """Whether the gate runs on the host itself (``sglang_gate.run_on``; auto: loopback-only server)."""
        return self.spec.gate.on_host(self.plan.intents["host"].value)


@dataclass
class GateResults:
    """Filled at run time by the gate's and the rollback's callbacks."""

    outcome: outcomes.Outcome | None = None
    step: str | None = None  # rollback_policy.MARK_DEPLOYED, ROLLBACK, STOP, KEEP_UNPROVEN
    report: dict[str, Any] | None = None
    rollback_result: str | None = None
    rollback_ok: bool | None = None
    downtime: dict[str, Any] | None = None  # the restart's serving gap and phases (sglang_deploy.downtime)


@dataclass
class HostDeploy:
    host: Host
    prepared: Prepared | None = None  # None: prepare failed (``error`` says why)
    error: str | None = None
    gate: GateResults = field(default_factory=GateResults)
    # The multi-node tp group this host is a member of (a sglang_deploy.deploy.tpgroup.GroupRun), None for a single
    # host. Typed loosely: this module is the bottom of deploy/, and tpgroup is built on it.
    tp: Any = None
    # The host as a worker of its gateways, its restart's run (sglang_deploy.deploy.restart_run.RestartRun);
    # None when it names none.
    gateway: Any = None
    # Which of the host's data-parallel replicas this is, of how many (sglang_deploy.plan.replicas): behind a
    # gateway each replica is a server of its own, deployed one after another; (0, 1): the host's one server.
    replica: int = 0
    replicas: int = 1
    # The host's replica units that stop before anything else goes live, in the first context's live
    # change (lifecycle.retire.stale_units): each as (that record, its layout, the URL its gateways knew
    # it at or None, its continuous check's files).
    retire: tuple[tuple[Any, Layout, str | None, Any], ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None
