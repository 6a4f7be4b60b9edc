"""The rollback after a failed gate, as operations: the same sequence for a single host and
for every member of a multi-node tp group (whose rank 0 is stopped first: SGLang's other
ranks stop on its shutdown broadcast and ignore SIGTERM)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from pyinfra.operations import python, systemd

from sglang_deploy.deploy.context import HostDeploy, Prepared
from sglang_deploy.deploy.operations import restart_service, stop_service, swap_in
from sglang_deploy.lifecycle import rollback_policy
from sglang_deploy.lifecycle.revision import FILE_NAMES

WHEN = "If the gate fails, roll back"


def roll_back(ctx: HostDeploy, p: Prepared, rb: rollback_policy.RollbackPlan, when: Sequence[Callable[[], Any]],
              confirm: Callable[..., bool], confirm_what: str, **confirm_args: Any) -> None:
    """Restore ``rb.target``'s files, reload systemd, [stop rank 0 first,] restart, confirm
    (``confirm``, a python.call callback given ``ctx``, ``p``, ``target`` and ``confirm_args``;
    ``confirm_what`` names what it confirms), each only ``when`` (conditions decided at run time)."""
    layout, tp = p.layout, ctx.tp
    leader = tp is not None and tp.is_leader(ctx)
    swap_in(name=f"{WHEN}: restore the last good revision", layout=layout, rev=rb.target, keys=tuple(FILE_NAMES),
            previous=rb.previous, clear_previous=rb.previous is None, _if=list(when))
    systemd.daemon_reload(name=f"{WHEN}: reload systemd units", _if=list(when))
    if tp is not None and leader:
        stop_service(name=f"{WHEN}: stop the service at rank 0 of the tp group first", layout=layout,
                     _if=list(when))
    restart_service(name=f"{WHEN}: restart the service on the last good revision"
                         + (" (every tp group member)" if tp is not None else ""),
                    layout=layout, gpu_indices=p.plan.gpus.indices, stop=not leader, _if=list(when))
    python.call(name=f"{WHEN}: confirm {confirm_what}", function=confirm, ctx=ctx, p=p, target=rb.target,
                **confirm_args, _if=list(when), _ignore_errors=True)
