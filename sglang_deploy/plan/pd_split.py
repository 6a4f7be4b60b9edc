"""How a gateway's prefill and decode servers are best split, for the workload the plan serves.

The speed model (perf.py) gives each server's rate for the inventory's workload
(``sglang_objective``: input and output tokens per request, the TPOT limit):

- a prefill server: requests per second = its replicas x one request's input rate / input tokens.
  Prefill is compute bound: requests batched together share the GPUs' FLOPs, so one request's
  rate is the server's;
- a decode server: requests per second = its aggregate output rate / output tokens, at the
  largest number of streams whose time per output token still meets the TPOT limit and whose KV
  cache fits.

A gateway's p prefill and d decode servers then serve min(p x prefill rate, d x decode rate)
requests per second (each request takes one of each). The suggestion is the split of the same
p + d servers that serves the most, each role at its servers' mean rate; the plan warns when the
inventory's split serves less than ``WARN_BELOW`` of it. A server's own layout is planned for its
role: moving a host to the other role would be planned again, which the mean rate stands in for.

Pure: plans in, text out. The TTFT limit is not applied to prefill: a prefill server's queue is
the gateway's to balance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from sglang_deploy.plan.hardware import GpuDatabase
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.pd import role
from sglang_deploy.plan.perf import capacity, predict
from sglang_deploy.plan.predicted import model_inputs
from sglang_deploy.plan.spec import Workload

#: The inventory's split is said to be far from the suggestion below this share of its requests/s.
WARN_BELOW = 0.8
#: Streams per decode replica tried, up to the KV cache's capacity and the server's running-request cap.
STREAMS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class Rate:
    """One server's predicted requests per second in its role, and how it was reached."""

    host: str
    role: str
    rps: float
    how: str


def server_rate(plan: Plan, role: str, db: GpuDatabase, workload: Workload) -> Rate | str:
    """``plan``'s server in ``role`` for ``workload``, or why the model cannot say."""
    inputs, why = model_inputs(db, plan.gpus, plan.facts, plan.intents, plan.tp_node.nnodes if plan.tp_node else 1)
    if inputs is None:
        return f"{plan.host}: {why}"
    isl, osl = workload.input_tokens, workload.output_tokens
    layout = inputs.layout
    if role == "prefill":
        p = predict(inputs.cost, inputs.gpu, layout, prompt_tokens=isl, output_tokens=1,
                    fp8_weights=inputs.fp8_weights, prefill_tokens=isl).prefill_tok_s
        assert p is not None
        rps = layout.dp * p.expected / isl
        return Rate(plan.host, role, rps, f"{layout.dp} x {p.expected:,.0f} input tok/s / {isl} tokens")
    cap = capacity(inputs.cost, inputs.gpu, layout, isl + osl)
    planned = plan.intents["max_running_requests"].value if "max_running_requests" in plan.intents else None
    if planned:  # the server's own cap of running requests, over its replicas
        cap = min(cap, max(1, int(planned) // max(1, layout.dp)))
    levels = sorted({s for s in STREAMS if s < cap} | {min(cap, STREAMS[-1])})  # more would only wait
    pred = predict(inputs.cost, inputs.gpu, layout, prompt_tokens=isl, output_tokens=osl,
                   concurrency=levels, fp8_weights=inputs.fp8_weights)
    best: tuple[float, int] | None = None
    for running in levels:
        aggregate = pred.output_tok_s[running].expected
        if workload.tpot_ms is not None and aggregate / (layout.dp * running) < 1000 / workload.tpot_ms:
            break
        best = (aggregate, running)
    if best is None:
        return f"{plan.host}: not one decode stream meets the TPOT limit of {workload.tpot_ms:g} ms"
    aggregate, running = best
    return Rate(plan.host, role, aggregate / osl,
                f"{aggregate:,.0f} output tok/s at {running} stream(s) per replica / {osl} tokens")


def best_split(prefill_rps: float, decode_rps: float, servers: int) -> tuple[int, float]:
    """(prefill servers, requests/s) of the split of ``servers`` that serves the most."""
    return max(((p, min(p * prefill_rps, (servers - p) * decode_rps)) for p in range(1, servers)),
               key=lambda x: (x[1], -x[0]))


@dataclass(frozen=True)
class Advice:
    """A gateway's split, each role's mean rate per server, and the split that serves the most."""

    text: str
    prefill: int = 0
    decode: int = 0
    prefill_rps: float = 0.0
    decode_rps: float = 0.0
    now_rps: float = 0.0
    best_prefill: int = 0
    best_rps: float = 0.0

    @property
    def far(self) -> bool:
        """Whether the inventory's split serves less than WARN_BELOW of the suggestion's."""
        return self.now_rps < WARN_BELOW * self.best_rps


def advise(gateway: str, plans: Sequence[Plan], db: GpuDatabase, workload: Workload) -> Advice | None:
    """The gateway's split and the suggestion (only the text, saying why, where the speed model
    cannot rate a server), or None without servers of both roles. ``plans``: the gateway's prefill
    and decode servers."""
    roles: Mapping[str, list[Plan]] = {"prefill": [], "decode": []}
    for plan in plans:
        mode = role(plan)
        if mode is not None:  # each data-parallel replica behind the gateway is a server of its own
            roles[mode].extend(plan.replicas or (plan,))
    if not roles["prefill"] or not roles["decode"]:
        return None
    rates = {role: [server_rate(p, role, db, workload) for p in members] for role, members in roles.items()}
    missing = [r for rs in rates.values() for r in rs if isinstance(r, str)]
    p, d = len(roles["prefill"]), len(roles["decode"])
    head = f"gateway {gateway}: {p} prefill : {d} decode server(s) for {workload.text()}"
    if missing:
        return Advice(f"{head}; no suggestion: {'; '.join(missing)}")
    mean = {role: sum(r.rps for r in rs if isinstance(r, Rate)) / len(rs) for role, rs in rates.items()}
    now = min(p * mean["prefill"], d * mean["decode"])
    best_p, best = best_split(mean["prefill"], mean["decode"], p + d)
    first = {role: next(r for r in rs if isinstance(r, Rate)) for role, rs in rates.items()}
    text = (f"{head}: a prefill server {mean['prefill']:.2f} req/s ({first['prefill'].how}), a decode server "
            f"{mean['decode']:.2f} req/s ({first['decode'].how}); "
            + (f"this split serves {now:.2f} req/s, the most these {p + d} servers can" if best_p == p else
               f"this split serves {now:.2f} req/s, {best_p} : {p + d - best_p} would serve {best:.2f}"))
    return Advice(text, p, d, mean["prefill"], mean["decode"], now, best_p, best)
