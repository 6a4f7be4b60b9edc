"""Result records: where the run context names a ``results_file`` (``sglang_deploy.runcontext``, set
by `sglang-deploy rollout` for each wave), every host's outcome is appended to it as one JSON line
(``rollback_policy.host_result``, ``rollback_policy.gateway_result``). A plain `pyinfra INVENTORY
deploy.py` writes none.
"""

from __future__ import annotations

import json

from pyinfra.api.host import Host

from sglang_deploy.deploy.context import HostDeploy
from sglang_deploy.lifecycle import rollback_policy
from sglang_deploy.runcontext import from_environ


def results_file() -> str | None:
    return from_environ().results_file


def record_result(ctx: HostDeploy) -> None:
    if not results_file():
        return
    p, g = ctx.prepared, ctx.gate
    # What the host ran before this deploy: the revision whose files were live (the current
    # marker). Not the rollback target: that is the previous revision when the host already
    # runs the new one, and it is reported as where a rollback went, not as where the host was.
    old = (p.state.current or p.state.deployed) if p else None
    restarted = bool(p and p.actions.restart) or bool(ctx.tp and ctx.ok and ctx.tp.restart_needed())
    record = rollback_policy.host_result(
        ctx.host.name, old_revision=old, new_revision=p.revision if p else None, restarted=restarted,
        outcome=g.outcome, step=g.step, rollback_ok=g.rollback_ok, report=g.report, error=ctx.error,
        rollback_target=p.rollback.target if p and p.rollback else None, downtime=g.downtime)
    if ctx.replicas > 1:  # one record per replica: the rollout counts them (rollback_policy.host_records)
        record.update(replica=ctx.replica, replicas=ctx.replicas, service=p.layout.service if p else None)
    append_record(record)


def append_record(record: dict) -> None:
    """One host's record as one line of the results file (none without a run context's results_file): the
    servers' (:func:`record_result`) and the gateway hosts' (``rollback_policy.gateway_result``)."""
    path = results_file()
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")


def record_callback(state, host: Host, ctx: HostDeploy) -> bool:
    record_result(ctx)
    return True


def record_gateway_callback(state, host: Host, record: dict) -> bool:
    """A gateway host's record, when its deploy has nothing left to do (unchanged)."""
    append_record(record)
    return True
