"""A host's data-parallel replicas as servers of their own, one gateway worker each.

A plan with ``dp_size`` N > 1 (no attention DP) runs N replicas of TP T inside one SGLang server
(its DataParallelController). Behind a gateway, each replica is instead its own server: its own
unit, port and block of GPUs, registered as its own worker, so the gateway balances them, sees
each one's health, and a deploy drains and restarts one replica at a time. This is the layout
of sglang-router's own co-launcher (sglang-router 0.3.2, ``sglang_router/launch_server.py``,
``launch_server_process``: each replica a copy of the server's arguments with ``dp_size = 1``, its
own ``port``, and ``base_gpu_id = dp_id * tp_size``); here each replica's GPUs are its unit's
``CUDA_VISIBLE_DEVICES`` (the same block: a ``--dp-size`` server starts replica r at GPU
``r * tp_size``, ``srt/managers/data_parallel_controller.py``,
``DataParallelController.launch_dp_schedulers`` in 0.5.9 and 0.5.23), and its port the host's
plus its index.

Attention DP stays one server: its ranks share one TP group and cannot be split apart. A
multi-node tp group runs no replicas (the planner refuses ``dp_size`` there).

Pure: specs and plans in, specs out.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.pd import role
from sglang_deploy.plan.spec import DeploySpec, IntentSetting

# A replica past the first runs as "<service>-dp<i>"; the first keeps the host's service name,
# so a host that joins a gateway keeps its unit, revisions and history for replica 0.
SUFFIX = "-dp"
MAX_PORT = 65535


def replica_count(plan: Plan) -> int:
    """How many separate servers the plan becomes behind a gateway: its ``dp_size`` when the
    replicas are plain data parallelism on one node, else 1 (attention DP, a multi-node tp group)."""
    dp = int(plan.intents["dp_size"].value) if "dp_size" in plan.intents else 1
    attn = int(plan.intents["attn_dp_size"].value) if "attn_dp_size" in plan.intents else 1
    if dp <= 1 or attn > 1 or plan.tp_node is not None:
        return 1
    return dp


def service_name(base: str, index: int) -> str:
    """Replica ``index``'s service: the host's own for the first, ``<base>-dp<index>`` after it."""
    return base if index == 0 else f"{base}{SUFFIX}{index}"


def replica_specs(spec: DeploySpec, plan: Plan) -> tuple[DeploySpec, ...]:
    """One spec per replica of ``plan`` (planned from ``spec``), each for one server of the plan's
    TP on its own block of GPUs and its own port. PlanError names the host and the field when the
    ports do not fit."""
    count = replica_count(plan)
    if count <= 1:
        return (spec,)
    tp = int(plan.intents["tp_size"].value)
    port = int(plan.intents["port"].value)
    gpus = plan.gpus.indices
    if len(gpus) < tp * count:
        raise PlanError(spec.host, "sglang_intents.dp_size", f"{count} replicas of TP {tp} need {tp * count} GPUs; "
                                                             f"the plan has {len(gpus)}")
    if port + count - 1 > MAX_PORT:
        raise PlanError(spec.host, "sglang_intents.port", f"port {port}: {count} replicas behind a gateway listen on "
                                                          f"{port}..{port + count - 1}, past {MAX_PORT}")
    bootstrap = _bootstrap_ports(spec, plan, port, count)
    out = []
    for i in range(count):
        block = tuple(gpus[i * tp:(i + 1) * tp])
        why = f"replica {i} of {count} behind a gateway: a server of its own (GPUs {','.join(map(str, block))})"
        intents = {**spec.host_intents,
                   "tp_size": IntentSetting(tp, why),
                   "dp_size": IntentSetting(1, why),
                   "port": IntentSetting(port + i, why)}
        if bootstrap is not None:
            intents["disaggregation_bootstrap_port"] = IntentSetting(bootstrap + i, f"{why}, its own bootstrap port")
        out.append(dataclasses.replace(
            spec, gpu_indices=block, host_intents=intents,
            service=dataclasses.replace(spec.service, name=service_name(spec.service.name, i))))
    return tuple(out)


def _bootstrap_ports(spec: DeploySpec, plan: Plan, port: int, count: int) -> int | None:
    """A prefill host's first replica's bootstrap port (each replica's server listens on its own:
    the first's plus the replica's index), None for any other host. PlanError when the range
    passes the last port or meets the replicas' HTTP ports."""
    if role(plan) != "prefill":
        return None
    first = int(plan.intents["disaggregation_bootstrap_port"].value)
    last = first + count - 1
    field = "sglang_intents.disaggregation_bootstrap_port"
    if last > MAX_PORT:
        raise PlanError(spec.host, field, f"{first}: {count} prefill replicas behind a gateway take bootstrap ports "
                                          f"{first}..{last}, past {MAX_PORT}")
    if first <= port + count - 1 and port <= last:
        raise PlanError(spec.host, field, f"{count} prefill replicas behind a gateway take bootstrap ports "
                                          f"{first}..{last}, which meet their HTTP ports {port}..{port + count - 1}")
    return first


def check_worker_url(host: str, data: Mapping[str, Any], count: int) -> None:
    """``sglang_worker_url`` names one server; a host of ``count`` replicas behind a gateway has
    one per replica, reached at the host's address on each one's port. PlanError when it is set."""
    if data.get("sglang_worker_url") is not None:
        raise PlanError(host, "sglang_worker_url", f"is one URL, but the host's {count} data-parallel replicas are "
                                                   "workers of their own, each on its own port: unset it, and set "
                                                   "sglang_node_address to where the gateways reach the host")
