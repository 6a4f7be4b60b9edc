"""Layouts ranked by predicted speed, pure: for ``sglang_objective`` throughput, the TP x DP
layouts that fit the GPUs and hold the model's context, each with the output tokens per second
per GPU that perf.py's roofline predicts at the objective's workload (prompt and output tokens)
and within its limits (time per output token, time to first token of one stream).

The planner keeps its rule (the smallest TP that holds the context: the most replicas, the
least traffic between GPUs) unless a larger TP is predicted to serve more than MARGIN more per
GPU, or the rule's layout cannot meet a limit another layout meets. The ranking is part of the
tp_size reason, so ``plan --explain`` lists the runners-up with their figures.

The prediction is made before the other layers run: it counts speculative decoding where the
plan will run it (a checkpoint with MTP/NextN draft layers, unless a layer turns it off: the
steps a layer sets, else SGLang's default 3, at perf.py's prior accepted length) and the
checkpoint's own weights dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from sglang_deploy.plan import hybrid_state
from sglang_deploy.plan.modelfacts import ModelFacts
from sglang_deploy.plan.perf import (FP8_METHODS, GpuPerf, Layout, ModelCost, Served, model_cost, served,
                                     ttft_s)
from sglang_deploy.plan.spec import Workload

#: How much more per GPU a larger TP must be predicted to serve before it replaces the rule's
#: smallest TP: this model's judgment of a difference the roofline cannot resolve, so that a near
#: tie keeps the layout with the most replicas (benchmarks/layout_vs_aiconfigurator.py shows how
#: the choices compare with aiconfigurator's rankings).
MARGIN = 0.05


@dataclass(frozen=True)
class Ranked:
    """One layout's predicted figures at the workload."""

    tp: int
    dp: int
    served: Served
    ttft_ms: float
    problem: str | None  # the limit it cannot meet (None: it meets every limit)

    @property
    def per_gpu(self) -> float:
        return self.served.tok_s_per_gpu

    def text(self) -> str:
        s = self.served
        each = f"{s.tok_s_per_user:,.1f}" if s.tok_s_per_user < 100 else f"{s.tok_s_per_user:,.0f}"
        out = (f"TP {self.tp} x DP {self.dp} {s.tok_s_per_gpu:,.0f} output tok/s per GPU ({s.batch} sequences per "
               f"replica at {each} tok/s each, bound by {s.bound}; TTFT {self.ttft_ms:,.0f} ms)")
        return out + (f", misses {self.problem}" if self.problem else "")


@dataclass(frozen=True)
class Speed:
    """What the ranking needs besides the layouts: the GPU's datasheet figures (its memory the
    host's), the TP group's link (perf.ALLREDUCE_S) and the objective's workload."""

    gpu: GpuPerf
    link: str
    workload: Workload

    def rank(self, facts: ModelFacts, kv_dtype: str | None, layouts: Sequence[Fit],
             spec_steps: int = 0) -> list[Ranked]:
        method = (facts.quantization.method if facts.quantization else "").lower()
        return rank(model_cost(facts, kv_dtype), self.gpu, layouts, self.link, self.workload,
                    fp8_weights=method in FP8_METHODS, spec_steps=spec_steps)

    def choose(self, facts: ModelFacts, kv_dtype: str | None, layouts: Sequence[Fit],
               spec_steps: int, rule_tp: int, rule_why: str) -> tuple[int, str]:
        """(the TP to plan, the tp_size reason): the rule's, its reason and the ranking, or the
        ranking's pick and why."""
        best, words = choose(self.rank(facts, kv_dtype, layouts, spec_steps), rule_tp)
        ranked = f"ranked by predicted speed for {self.workload.text()}"
        if best.tp == rule_tp:
            return rule_tp, f"{rule_why}; {ranked}: {words}"
        return best.tp, f"sglang_objective throughput, {ranked}: {words}"


def draft_steps(facts: ModelFacts, declared: Mapping[str, Any]) -> int:
    """The speculative steps the plan will run, for ranking layouts: a checkpoint with MTP/NextN
    draft layers runs them unless a layer turns speculative decoding off (the steps a layer sets,
    else SGLang's default 3, the recipes' 3/1/4: data/model_rules.yaml)."""
    if not facts.mtp_layers or declared.get("speculative_algorithm", "default") is None:
        return 0
    steps = declared.get("speculative_num_steps")
    return steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else 3


#: The intents state_args reads: the model layer's values of them reach the layout's ranking too (planner).
STATE_INTENTS = ("speculative_algorithm", "speculative_num_steps", "speculative_num_draft_tokens",
                 "mamba_cache_strategy", "max_running_requests")


def state_args(facts: ModelFacts, declared: Mapping[str, Any]) -> dict[str, Any]:
    """sizing.budget's speculative arguments while the layout is chosen, before the layers below
    resolve them: the draft steps the plan will run (draft_steps), with what is declared."""
    steps = draft_steps(facts, declared)
    algo = (declared.get("speculative_algorithm") or "NEXTN") if steps else None
    return hybrid_state.budget_args({**declared, "speculative_algorithm": algo, "speculative_num_steps": steps})


#: A layout to rank: (tp, dp, KV tokens per replica or None[, running requests the replica's
#: recurrent state allows or None]).
Fit = tuple[int, int, int | None] | tuple[int, int, int | None, int | None]


def rank(cost: ModelCost, gpu: GpuPerf, layouts: Sequence[Fit], link: str,
         workload: Workload, fp8_weights: bool = False, spec_steps: int = 0) -> list[Ranked]:
    """Every layout of ``layouts`` (Fit) with its figures, the ones meeting every limit first,
    then by output tokens per GPU (best first; ties keep the given order). ``spec_steps``: the
    speculative draft steps the plan will run (perf.accept_band's prior)."""
    out = []
    for fit in layouts:
        tp, dp, kv_tokens = fit[0], fit[1], fit[2]
        lay = Layout(tp=tp, dp=dp, link=link, spec_steps=spec_steps)
        s = served(cost, gpu, lay, prompt_tokens=workload.input_tokens, output_tokens=workload.output_tokens,
                   tpot_ms=workload.tpot_ms, fp8_weights=fp8_weights, kv_tokens=kv_tokens,
                   max_requests=fit[3] if len(fit) > 3 else None)
        ttft_ms = 1000 * ttft_s(cost, gpu, lay, 1, workload.input_tokens, workload.output_tokens, fp8_weights)
        problem = None
        if not s.meets_tpot:
            problem = f"TPOT {workload.tpot_ms:g} ms"
        elif workload.ttft_ms is not None and ttft_ms > workload.ttft_ms:
            problem = f"TTFT {workload.ttft_ms:g} ms"
        out.append(Ranked(tp, dp, s, ttft_ms, problem))
    return sorted(out, key=lambda r: (r.problem is not None, -r.per_gpu))  # stable: ties keep the given order


def choose(ranked: Sequence[Ranked], rule_tp: int) -> tuple[Ranked, str]:
    """The layout to plan and the words that say why, with the runners-up: of the layouts that
    meet every limit (all of them when none does), the smallest TP predicted within MARGIN of the
    best (the most replicas: the rule's own preference), so the rule's TP stays unless a larger
    one serves more than MARGIN more per GPU or meets a limit the rule's misses."""
    rule = next(r for r in ranked if r.tp == rule_tp)
    meeting = [r for r in ranked if r.problem is None] or list(ranked)
    top = max(r.per_gpu for r in meeting)
    pick = min((r for r in meeting if r.per_gpu * (1 + MARGIN) >= top), key=lambda r: r.tp)
    if pick is rule:
        why = f"kept: no larger TP is predicted to serve more than {MARGIN:.0%} more per GPU"
    elif rule.problem is not None and pick.problem is None:
        why = f"TP {pick.tp} meets {rule.problem}, which TP {rule.tp} misses"
    else:
        why = f"TP {pick.tp} is predicted {pick.per_gpu / rule.per_gpu - 1:+.1%} per GPU over TP {rule.tp}"
    others = "; ".join(r.text() for r in ranked if r is not pick)
    return pick, f"{why}: {pick.text()}" + (f"; runners-up: {others}" if others else "")
