"""The restart of a multi-node tp group: its members restart, are gated and roll back as
one unit (the run's shared state is sglang_deploy/deploy/tpgroup.py's GroupRun and GroupWatch).

The members restart together, or none does (whenever any member's revision is not
deployed); rank 0 is stopped first (SGLang's other ranks stop on its shutdown
broadcast and ignore SIGTERM). The group is gated once, at rank 0, while that gate
watches every member's unit; then every member is marked deployed, or every member
rolls back (each to its previous revision; rank 0 confirms readiness for the group),
or, when some member has no previous revision, every member stops. The operations are
the same on every member but rank 0's own stops (conditions decide at run time), so
the members' operations line up. Each member's steps run as its restart's state machine
asks (sglang_deploy/lifecycle/drain.py through deploy/restart_run.py's RestartRun), as a
single server's do: the group's events (restarted, gated at rank 0, the rollback confirmed
there) are told to every member's machine.
"""

from __future__ import annotations

import shlex
import time

from pyinfra import logger
from pyinfra.api.host import Host
from pyinfra.operations import python, server

from sglang_deploy.deploy import caches, gateway, gating, restart_run, tpgroup
from sglang_deploy.deploy.context import HostDeploy, Prepared
from sglang_deploy.deploy.operations import mark_deployed, prune_revisions, restart_service, stop_service
from sglang_deploy.deploy.restart_run import RestartRun
from sglang_deploy.deploy.results import record_callback, results_file
from sglang_deploy.deploy.rollback import roll_back
from sglang_deploy.gate import outcomes
from sglang_deploy.lifecycle import drain, group_preflight, rollback_policy
from sglang_deploy.untrusted import printable

#: How long a follower waits for rank 0 to open its rendezvous port for the check.
PREFLIGHT_WAIT_S = 60.0


def restart_group(ctx: HostDeploy, tp: tpgroup.GroupRun, p: Prepared) -> None:
    """restart() for a member of a multi-node tp group, as its restart's state machine asks
    (deploy/restart_run.py, lifecycle/drain.py), like a single server's: every member has one.
    Rank 0's is the group's run in its gateways (begun in go_live: out of them, drained) when it
    is a worker of any; a follower's, and rank 0's behind no gateway, begins at the stop. Each is
    told the group's events: the restart went through, the verdict gated at rank 0, the rollback's
    readiness confirmed there."""
    layout, rev = p.layout, p.revision
    leader = tp.is_leader(ctx)
    needed = tp.restart_needed
    in_gateways = ctx.gateway is not None and leader
    run = ctx.gateway if in_gateways else RestartRun.alone(ctx.host)
    if not in_gateways:
        run.tell(drain.Event.SKIP_DRAIN)

    def step_is(step: str):
        return lambda: tp.step == step

    if results_file():
        python.call(name="Record the result (unchanged)", function=record_callback, ctx=ctx,
                    _if=lambda: not needed())
    restarting = [needed, run.wants(drain.Action.STOP)]
    if leader:  # its restart's moments are stamped, for the start's phases the gate records there
        stop_service(name="Stop the service at rank 0 of the tp group first", layout=layout,
                     health_url=gating.on_host_url(p.plan), _if=restarting)
    restart_service(name="Restart the service on the new revision (every tp group member)",
                    layout=layout, gpu_indices=p.plan.gpus.indices, stop=not leader, stamped=leader, _if=restarting)
    python.call(name="Gate the tp group once, at rank 0", function=gate_callback,
                ctx=ctx, tp=tp, p=p, run=run, _if=needed, _ignore_errors=True)
    passed = [needed, run.passed]
    mark_deployed(name="Mark the new revision deployed (the tp group passed)", layout=layout, rev=rev, _if=passed)
    if in_gateways:  # the group is one worker of its gateways: rank 0's server, its restart run
        python.call(name="Register the tp group in its gateways again (at rank 0)",
                    function=restart_run.register_callback, ctx=ctx, run=run,
                    _if=[*passed, run.wants(drain.Action.REGISTER)])
    if p.actions.prune:
        prune_revisions(name="Prune old revisions", layout=layout, revisions=p.actions.prune, _if=passed)
    if p.plan.caches is not None:  # every member: each has its own caches (deploy/caches.py)
        server.shell(name="Remove the compile caches of SGLang versions whose venv is gone",
                     commands=[caches.prune_command(p.plan.caches, p.plan.service)], _if=passed)
    # The machine asks for a rollback after a failed gate; the group's rollback policy says whether
    # every member has a previous revision (the group rolls back) or not (every member stops).
    rolling_back = [needed, run.wants(drain.Action.ROLL_BACK)]
    if p.rollback is not None:
        roll_back(ctx, p, p.rollback, [*rolling_back, step_is(rollback_policy.ROLLBACK)], confirm_callback,
                  "the tp group is ready at rank 0", tp=tp, run=run)
    stop_service(name="If the gate fails and a tp group member has no previous revision: stop the service",
                 layout=layout, _if=[*rolling_back, step_is(rollback_policy.STOP)])
    failed = [needed, run.failed]
    if in_gateways:
        python.call(name="If the gate fails and the rollback is ready: register the tp group in its gateways again",
                    function=restart_run.register_callback, ctx=ctx, run=run,
                    _if=[*failed, run.wants(drain.Action.REGISTER)])
        python.call(name="If the gate fails and nothing gated serves: keep the tp group out of its gateways",
                    function=restart_run.out_callback, ctx=ctx, run=run,
                    _if=[*failed, lambda: ctx.gate.rollback_ok is not True])
    if results_file():
        python.call(name="Record the result", function=record_callback, ctx=ctx, _if=passed)
    python.call(name="If the tp group's gate fails: fail this member, saying what was done",
                function=fail_callback, ctx=ctx, tp=tp, p=p, _if=failed)


def _fail_now(host: Host, ctx: HostDeploy, message: str) -> bool:
    ctx.error = message
    gating.fail_host(host, ctx, message)
    return False


def check_callback(state, host: Host, ctx: HostDeploy, tp: tpgroup.GroupRun) -> bool:
    """Before anything changes: every member is in this run, plannable, and alike."""
    problem = tp.problem()
    if problem is None:
        return True
    return _fail_now(host, ctx, f"tp group {tp.name}: {problem}; nothing was changed on any member")


def barrier_callback(state, host: Host, ctx: HostDeploy, tp: tpgroup.GroupRun, p: Prepared) -> bool:
    """Before any member's files go live: no member failed to install, stage or prove."""
    failed = tp.failed_members()
    if not failed:
        return True
    return _fail_now(host, ctx, f"tp group {tp.name}: member(s) {', '.join(failed)} failed before the "
                                f"swap (see their lines above); revision {p.revision} is made live on no "
                                "member, the running service is untouched")


#: Each interface's name, operstate and address families (``-``: ``ip`` is missing), then the clock.
_INTERFACES_COMMAND = (
    "for d in /sys/class/net/*; do n=${d##*/}; printf '%s %s' \"$n\" \"$(cat \"$d/operstate\" 2>/dev/null "
    "| head -c 16)\"; if command -v ip >/dev/null; then ip -o addr show dev \"$n\" 2>/dev/null "
    "| awk '{printf \" %s\", $3}'; else printf ' -'; fi; echo; done | head -n "
    f"{group_preflight.MAX_INTERFACES}; {gating.CLOCK_COMMAND}")
_LISTENER = ("import socket, sys\n"
             "v6 = ':' in sys.argv[1]\n"
             "s = socket.create_server(('::' if v6 else '', int(sys.argv[2])), family=socket.AF_INET6 if v6 "
             "else socket.AF_INET)\n"
             "while True:\n    s.accept()[0].close()\n")
_CONNECT = ("import socket, sys\n"
            "try:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()\n"
            "except OSError as e:\n    print(type(e).__name__, e.strerror or e); sys.exit(1)\n")


def preflight_callback(state, host: Host, ctx: HostDeploy, tp: tpgroup.GroupRun, p: Prepared) -> bool:
    """Before anything stops, what each member finds for whether the group can meet
    (lifecycle/group_preflight.py): its interfaces against NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME;
    on rank 0, its rendezvous port held by the old server or opened for the check (a listener of at
    most LISTEN_S, closed by ``decide_callback``); on every other member, a TCP connection to it.
    pyinfra runs each operation on every member before the next, so ``decide_callback`` finds every
    member's findings. Rank 0 never waits for the others here, only they for its port."""
    if not tp.restart_needed():  # nothing stops: nothing to meet again
        return True
    node, q = p.plan.tp_node, shlex.quote
    assert node is not None
    address, port = node.addresses[0], node.dist_init_port
    t0 = time.time()
    _, out = gating.sh(host, _INTERFACES_COMMAND)
    t1 = time.time()
    lines = out.splitlines()
    clock = gating.host_clock(lines)
    if clock is not None:
        tp.offsets[host.name] = clock - (t0 + t1) / 2
    interfaces = group_preflight.parse_interfaces([line for line in lines if not line.startswith("clock ")])
    problems = group_preflight.interface_problems(p.plan.nccl_conf.get("NCCL_SOCKET_IFNAME"),
                                                  p.plan.env.get("GLOO_SOCKET_IFNAME"), interfaces,
                                                  group_preflight.family_of(address))
    if tp.is_leader(ctx):
        _, held = gating.sh(host, f"ss -Hltn 'sport = :{port}' 2>/dev/null | head -n 1")
        if not held.strip():
            _, pid = gating.sh(host, f"nohup timeout {group_preflight.LISTEN_S} python3 -c {q(_LISTENER)} "
                                     f"{q(address)} {port} >/dev/null 2>&1 </dev/null & echo $!")
            tp.listener = pid.strip() if pid.strip().isdigit() else None
            _, up = gating.sh(host, f"for i in $(seq 50); do ss -Hltn 'sport = :{port}' | grep -q . && echo up "
                                    "&& break; sleep 0.1; done; true")
            if "up" not in up:
                problems.append(f"rank 0 cannot listen on port {port}")
        tp.rendezvous_open = "yes"
    elif tp.wait_for("rendezvous_open", PREFLIGHT_WAIT_S, "open its rendezvous port"):
        ok, said = gating.sh(host, f"python3 -c {q(_CONNECT)} {q(address)} {port} "
                                   f"{group_preflight.CONNECT_TIMEOUT_S}")
        if not ok:
            problems.append(f"cannot reach rank 0's {node.dist_init_addr} ({printable(said.strip()[:160])})")
    else:
        problems.append("rank 0 never opened its rendezvous port for the check")
    tp.findings[host.name] = problems
    return True


def decide_callback(state, host: Host, ctx: HostDeploy, tp: tpgroup.GroupRun, p: Prepared) -> bool:
    """Every member the same verdict from every member's findings (``preflight_callback``): a group
    that cannot meet fails on every member, nothing stopped. Rank 0 closes its check's listener."""
    if not tp.restart_needed():
        return True
    if tp.is_leader(ctx) and tp.listener is not None:
        gating.sh(host, f"kill {int(tp.listener)} 2>/dev/null; true")
    node = p.plan.tp_node
    assert node is not None
    failed = [m for m in tp.failed_members() if m != host.name]
    if failed:
        return _fail_now(host, ctx, f"tp group {tp.name}: member(s) {', '.join(failed)} failed before the stop; "
                                    "nothing was stopped or changed on any member")
    clocks = group_preflight.clock_problems(tp.offsets, tp.leader)
    decision = group_preflight.verdict(tp.name, node.dist_init_addr,
                                       {m: [*tp.findings[m], *([clocks[m]] if m in clocks else [])]
                                        for m in tp.members if m in tp.findings})
    if decision:
        host.log(decision)
        return _fail_now(host, ctx, decision)
    return True


def leave_callback(state, host: Host, ctx: HostDeploy, tp: tpgroup.GroupRun, run: RestartRun) -> bool:
    """Before any member's files go live: rank 0 takes the group (one worker, its server) out of its
    gateways and lets its in-flight requests finish; the followers wait for that, and when rank 0
    could not, fail unchanged with it."""
    if tp.is_leader(ctx):
        tp.left_gateways = restart_run.leave_callback(state, host, ctx, run)
        return tp.left_gateways
    drain_s = run.membership.drain.timeout_s if run.membership is not None else 0.0
    if tp.wait_for("left_gateways", drain_s + 120.0, "leave the gateways") and tp.left_gateways:
        return True
    return _fail_now(host, ctx, f"tp group {tp.name}: rank 0 ({tp.leader}) could not take the group out of its "
                                f"gateways ({run.names()}); nothing was changed on any member")


def keep_listed_callback(state, host: Host, ctx: HostDeploy, tp: tpgroup.GroupRun, run: RestartRun) -> bool:
    """No restart of the group: rank 0 puts the group back in a gateway that misses it."""
    return gateway.keep_listed_callback(state, host, ctx, run) if tp.is_leader(ctx) else True


def _wait_s(p: Prepared) -> float:
    """How long a follower waits for rank 0: readiness plus a generous measurement."""
    return p.ready_timeout_s + 3600.0


def gate_callback(state, host: Host, ctx: HostDeploy, tp: tpgroup.GroupRun, p: Prepared, run: RestartRun) -> bool:
    """Rank 0 runs the gate (watching every member); the followers wait for its verdict,
    adopt it and record it in their own history (no figures: measured at rank 0). Either way
    the member's restart machine is told the restart went through and the group's verdict
    (a gate that raised is a failed one)."""
    passed = False
    try:
        passed = _gate(host, ctx, tp, p, state)
    finally:
        restart_run.started(run)
        restart_run.tell_gate(run, passed)
    return passed


def _gate(host: Host, ctx: HostDeploy, tp: tpgroup.GroupRun, p: Prepared, state) -> bool:
    if tp.is_leader(ctx):
        gating.gate_callback(state, host, ctx, p)
        tp.decide(ctx.gate.outcome or outcomes.Outcome(outcomes.ERROR, gating.NO_REPORT))
        ctx.gate.step = tp.step
        return tp.passed()
    if not tp.wait_for("verdict", _wait_s(p), "gate the group") and tp.verdict is None:
        tp.decide(outcomes.Outcome(outcomes.CRASHED, f"rank 0 ({tp.leader}) failed in this run before it gated "
                                                   "the group"))
    verdict = tp.verdict or outcomes.Outcome(outcomes.ERROR, gating.NO_REPORT)
    ctx.gate.outcome = outcomes.Outcome(verdict.kind, f"tp group {tp.name}, gated at rank 0 ({tp.leader}): "
                                                     f"{verdict.summary}")
    ctx.gate.step = tp.step
    gating.append_history(host, p.layout, tpgroup.member_history(tp, host.name, p, verdict))
    if verdict.passed:
        host.log_styled(f"tp group {tp.name} passed at rank 0 ({tp.leader})", fg="green", log_func=logger.info)
    else:
        host.log_styled(ctx.gate.outcome.summary.splitlines()[0], fg="red", log_func=logger.error)
    return tp.passed()


def confirm_callback(state, host: Host, ctx: HostDeploy, p: Prepared, target: str, tp: tpgroup.GroupRun,
                     run: RestartRun) -> bool:
    """After the group's rollback: rank 0 confirms readiness (watching every member); the
    followers adopt its answer, mark the restored revision deployed (or not) and record it. The
    member's restart machine is told the answer."""
    ok = False
    try:
        ok = _confirm(host, ctx, p, target, tp, state)
    finally:
        restart_run.rollback_confirmed(run, ok)
    return ok


def _confirm(host: Host, ctx: HostDeploy, p: Prepared, target: str, tp: tpgroup.GroupRun, state) -> bool:
    if tp.is_leader(ctx):
        ok = gating.confirm_callback(state, host, ctx, p, target)
        tp.rollback_outcome = outcomes.Outcome(outcomes.PASS if ok else outcomes.NOT_READY,
                                              ctx.gate.rollback_result or "no answer")
        return ok
    if not tp.wait_for("rollback_outcome", _wait_s(p), "confirm the rollback") and tp.rollback_outcome is None:
        tp.rollback_outcome = outcomes.Outcome(outcomes.ERROR, f"rank 0 ({tp.leader}) could not confirm the rollback")
    outcome = tp.rollback_outcome or outcomes.Outcome(outcomes.ERROR, "no answer")
    result = (f"tp group {tp.name} ready again at rank 0 ({tp.leader}), marked deployed" if outcome.passed else
              f"the restored revision of tp group {tp.name} is not healthy at rank 0 either: {outcome.summary}")
    gating.finish_rollback(host, ctx, p, target, outcome.passed, outcomes.Outcome(
        outcome.kind, f"tp group {tp.name}, confirmed at rank 0 ({tp.leader}): {outcome.summary}"),
        result, {"tp_group": tp.name})
    return outcome.passed


def fail_callback(state, host: Host, ctx: HostDeploy, tp: tpgroup.GroupRun, p: Prepared) -> bool:
    """The member's failure line; says so when it was stopped because another member had no
    previous revision to go back to."""
    without = tp.without_rollback()
    if tp.step != rollback_policy.STOP or not without or host.name in without:
        return gating.fail_callback(state, host, ctx, p)
    outcome = ctx.gate.outcome or outcomes.Outcome(outcomes.ERROR, "the gate did not report")
    service = p.layout.service
    gating.fail_host(host, ctx, f"revision {p.revision} of {service}: {outcome.summary}\n-> not rolled back: "
                                f"member(s) {', '.join(without)} of tp group {tp.name} have no previous revision, "
                                f"and no member serves alone: {service} was stopped on every member")
    return False
