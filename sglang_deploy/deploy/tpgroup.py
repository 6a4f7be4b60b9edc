"""A multi-node tensor-parallel group in one pyinfra run: its members act as one unit.

pyinfra runs the deploy code (``prepare`` ...) once per host, one host after the
other, and only then executes the operations in lockstep: each operation on
every host before the next. A member's rank depends only on inventory data, so
each member's plan is made in its own ``prepare``; what needs every member
(their probed hardware agreeing, all of them being in this run) is decided when
the first operation executes, by which time every member's ``prepare`` has run.

The state shared between the members of one run lives here, keyed by the run's
pyinfra State and the group's name:

* which members this run has (their deploy contexts) and whether they agree
  (:meth:`GroupRun.problem`, checked before anything changes on any member);
* whether the group restarts (any member's revision is not deployed: the
  members restart together, or not at all);
* the group's verdict: decided at rank 0, whose gate watches every member's
  unit (:class:`GroupWatch`): a follower that fails or restarts fails the
  group's gate at once. Followers' callbacks of the same operation wait for it.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

from pyinfra import logger
from pyinfra.api.host import Host  # noqa: F401 (join's argument)

from sglang_deploy.deploy.context import HostDeploy, Prepared
from sglang_deploy.deploy.inventory import data_layers
from sglang_deploy.gate import outcomes
from sglang_deploy.lifecycle import rollback_policy
from sglang_deploy.errors import PlanError
from sglang_deploy.gate.watch import SystemdWatch
from sglang_deploy.plan.inventory_plan import check_plans, group_failed
from sglang_deploy.plan.tpgroups import TpNode, members_by_group, nodes_from_data

WAIT_POLL_S = 0.5


@dataclass
class GroupRun:
    """One tp group within one pyinfra run."""

    name: str
    members: tuple[str, ...]  # every member in the inventory, rank order
    state: Any  # the pyinfra State of this run
    ctxs: dict[str, HostDeploy] = field(default_factory=dict)  # members in this run
    nodes: dict[str, TpNode] = field(default_factory=dict)
    errors: dict[str, PlanError] = field(default_factory=dict)  # the group's data is wrong (inventory only)
    _problem: tuple[str | None] | None = None
    # decided at execute time
    verdict: outcomes.Outcome | None = None  # the group's gate, decided at rank 0
    # what every member does next (rollback_policy.MARK_DEPLOYED, ROLLBACK, STOP, KEEP_UNPROVEN)
    step: str | None = None
    rollback_outcome: outcomes.Outcome | None = None  # readiness of the restored revision, confirmed at rank 0
    left_gateways: bool | None = None  # behind gateways: rank 0 took the group out of them (False: it could not)
    # the preflight (group_deploy.preflight_callback): rank 0's rendezvous port open for the check ("yes"),
    # the pid of the listener it opened for it, each member's findings
    rendezvous_open: str | None = None
    listener: str | None = None
    findings: dict[str, list[str]] = field(default_factory=dict)
    offsets: dict[str, float] = field(default_factory=dict)  # each member's clock minus the controller's

    @property
    def leader(self) -> str:
        return self.members[0]

    def rank(self, host_name: str) -> int:
        return self.members.index(host_name)

    def is_leader(self, ctx: HostDeploy) -> bool:
        return ctx.host.name == self.leader

    def register(self, ctx: HostDeploy) -> None:
        self.ctxs[ctx.host.name] = ctx

    # -- before anything changes ----------------------------------------------------

    def node(self, host_name: str) -> TpNode:
        """This member's rank and rendezvous address; PlanError when the group's data is wrong."""
        if host_name in self.errors:
            problem = self.errors[host_name]
            raise problem if problem.host == host_name else group_failed(host_name, self.name, problem)
        return self.nodes[host_name]

    def problem(self) -> str | None:
        """Why the group cannot be deployed in this run (None: it can). Computed once, when the
        first member's first operation executes: every member's prepare has run by then."""
        if self._problem is None:
            self._problem = (self._find_problem(),)
        return self._problem[0]

    def _find_problem(self) -> str | None:
        missing = [h for h in self.members if h not in self.ctxs]
        if missing:
            return (f"member(s) {', '.join(missing)} not in this run (left out by --limit, or unreachable): a tp "
                    f"group deploys all {len(self.members)} members together")
        plans = []
        for host_name in self.members:
            ctx = self.ctxs[host_name]
            if ctx.error or ctx.prepared is None:
                return f"member {host_name} cannot be deployed: {ctx.error}"
            plans.append(ctx.prepared.plan)
        try:
            check_plans(plans)
        except PlanError as exc:
            return str(exc)
        return None

    def failed_members(self) -> list[str]:
        """Members this run has already failed (an earlier operation failed on them)."""
        return [h for h, ctx in self.ctxs.items() if ctx.host in self.state.failed_hosts]

    # -- the restart, the gate and the rollback -------------------------------------

    def restart_needed(self) -> bool:
        """The members restart together when any of them does not run its revision as deployed."""
        return any(ctx.prepared is not None and ctx.prepared.actions.restart for ctx in self.ctxs.values())

    def passed(self) -> bool:
        return self.verdict is not None and self.verdict.passed

    def can_roll_back(self) -> bool:
        """Every member has a previous revision staged: otherwise no member can serve it alone."""
        return all(ctx.prepared is not None and ctx.prepared.rollback is not None for ctx in self.ctxs.values())

    def without_rollback(self) -> list[str]:
        """The members with no previous revision staged (they make the whole group stop)."""
        return [h for h, ctx in self.ctxs.items() if ctx.prepared is None or ctx.prepared.rollback is None]

    def decide(self, outcome: outcomes.Outcome) -> None:
        """The group's verdict; what every member does next (the core's ``next_step``)."""
        self.verdict = outcome
        self.step = rollback_policy.next_step(outcome, self.can_roll_back())

    def wait_for(self, attribute: str, timeout_s: float, what: str) -> bool:
        """A follower's wait for rank 0 to decide (``attribute`` set); False when rank 0 can no
        longer decide (it failed in this run) or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        leader = self.ctxs[self.leader].host
        while getattr(self, attribute) is None:
            if leader in self.state.failed_hosts:
                return False
            if time.monotonic() > deadline:
                logger.warning(f"tp group {self.name}: gave up waiting for rank 0 ({self.leader}) to {what}")
                return False
            time.sleep(WAIT_POLL_S)  # gevent's: the other members' callbacks run meanwhile
        return True

    def watch(self, own: SystemdWatch, member_watch: Callable[[HostDeploy], SystemdWatch]) -> GroupWatch:
        """Rank 0's watch over every member's unit; ``member_watch(ctx)`` reads a member's unit
        over that member's own connection."""
        followers = [(h, self.rank(h), member_watch(self.ctxs[h])) for h in self.members[1:]]
        return GroupWatch(own, self, followers, self.failed_members)


class GroupWatch(SystemdWatch):
    """Rank 0's unit and, through it, the whole group: a follower's unit that fails, stops
    or restarts reads as a failure of the group's server (real SGLang: a lost TP rank hangs
    or kills the others), named by member and rank; its journal lines are added."""

    def __init__(self, own: SystemdWatch, group: GroupRun, followers: list[tuple[str, int, SystemdWatch]],
                 failed: Callable[[], list[str]]):
        super().__init__(own.run, own.unit, own.every_s)
        self.group, self.followers, self.failed = group, followers, failed
        self.culprit: tuple[str, int, SystemdWatch] | None = None

    def failure(self) -> str | None:
        return super().failure() or self.member_failure()

    def member_failure(self) -> str | None:
        """The other members only (rank 0's own unit aside)."""
        failed = [h for h in self.failed() if h != self.group.leader]
        if failed:
            return (f"tp group {self.group.name}: member {failed[0]} (node rank {self.group.rank(failed[0])}) "
                    "failed in this run")
        for name, rank, watch in self.followers:
            try:
                why = watch.failure()
            except Exception as exc:  # noqa: BLE001 -- a member we cannot read is not a failed member
                logger.warning(f"tp group {self.group.name}: cannot read {watch.unit} on {name}: "
                               f"{type(exc).__name__}: {exc}")
                continue
            if why:
                self.culprit = (name, rank, watch)
                return f"tp group {self.group.name}: member {name} (node rank {rank}): {why}"
        return None

    def journal(self) -> str:
        own = super().journal()
        theirs = self.member_journal()
        return f"{own.rstrip()}\n{theirs}" if theirs else own

    def member_journal(self) -> str:
        """The journal lines of the member that failed, under a header naming it ('' if none)."""
        if self.culprit is None:
            return ""
        name, rank, watch = self.culprit
        try:
            theirs = watch.journal()
        except Exception:  # noqa: BLE001
            theirs = "(journal unreadable)"
        return f"--- {name} (node rank {rank}) ---\n{theirs}"

    def abort_when_a_member_fails(self, write: Callable[[str], None], every_s: float = 1.0) -> None:
        """While a gate runs on rank 0's host (watching only rank 0's unit there): poll the other
        members and, when one fails, ``write`` the reason and its journal lines (the gate's
        ``--abort-file``), then return. Run it in a greenlet; kill it when the gate ends."""
        while True:
            why = self.member_failure()
            if why:
                write(f"{why}\n{self.member_journal()}")
                return
            time.sleep(every_s)


# ---------------------------------------------------------------------------
# the registry: one GroupRun per group name and pyinfra State
# ---------------------------------------------------------------------------

_RUNS: "weakref.WeakKeyDictionary[Any, dict[str, GroupRun]]" = weakref.WeakKeyDictionary()


def join(host: Host, group_name: str) -> GroupRun:
    """The run of ``group_name`` in this host's pyinfra run; built from the whole inventory
    (every member's data, in inventory order) the first time a member asks."""
    runs = _RUNS.setdefault(host.state, {})
    if group_name not in runs:
        hosts = [(h.name, *data_layers(h)) for h in host.inventory]
        _, nodes, errors = nodes_from_data(hosts)
        members = tuple(members_by_group(hosts).get(group_name, ()))
        runs[group_name] = GroupRun(name=group_name, members=members, state=weakref.proxy(host.state),
                                    nodes={h: nodes[h] for h in members if h in nodes},
                                    errors={h: errors[h] for h in members if h in errors})
    return runs[group_name]


def member_history(group: GroupRun, host_name: str, p: Prepared, outcome: outcomes.Outcome) -> dict[str, Any]:
    """A follower's history line for the group's gate: it was gated at rank 0, no figures here."""
    passed = outcome.passed
    summary = (f"tp group {group.name} passed at rank 0 ({group.leader})" if passed
               else f"tp group {group.name} failed: {outcome.summary.splitlines()[0]}")
    entry = outcomes.history_entry("tp-group", p.revision, outcomes.Outcome(outcome.kind, summary), None,
                                  {"model": p.plan.model_path, "argv": list(p.plan.argv)}, p.plan.sglang_version)
    entry.update(verdict="pass" if passed else "fail", tp_group=group.name, node_rank=group.rank(host_name),
                 gated_at=group.leader)
    return entry
