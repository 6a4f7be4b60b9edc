"""A small planted performance model for the tuner's search tests and benchmark.

Same shape as the simulated server's model (sglang/_sim/perf.py): speculative decoding through
an acceptance model (each tree level holds the right token with p = 1 - (1 - alpha*decay^i)^topk;
expected tokens per verify = sum of the running products up to depth min(steps, draft - 1);
a verify costs 1 + draft_step_cost*steps*(1 + topk_step_cost*(topk - 1)) + verify_token_cost*draft
base steps), batch scaling
up to the CUDA-graph batch size, KV capacity from the memory fraction, out of memory above a
threshold that falls with the graph batch size, custom allreduce off costing a factor at TP > 1.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Mapping

from sglang_deploy.tuning.search import TrialResult


@dataclass(frozen=True)
class Planted:
    decode_tok_s: float = 50.0
    accept_alpha: float = 0.7
    accept_decay: float = 1.0
    draft_step_cost: float = 0.1
    verify_token_cost: float = 0.02
    topk_step_cost: float = 0.5  # each extra branch makes a draft step this much dearer
    batch_slowdown: float = 0.02
    over_graph_bs_factor: float = 1.6
    default_graph_bs: int = 32
    kv_tokens_per_fraction: float = 60000.0
    weights_fraction: float = 0.6
    oom_above: float = 0.95
    graph_mem_per_bs: float = 0.0
    no_custom_ar_factor: float = 1.15
    spec_batch_penalty: float = 0.004  # speculative work per extra request in the batch
    tp_size: int = 2
    prompt_tokens: int = 512
    max_tokens: int = 256
    crash_when: tuple[tuple[tuple[str, Any], ...], ...] = ()

    def oom(self, config: Mapping[str, Any]) -> bool:
        mem = config.get("mem_fraction_static") or 0.88
        bs = config.get("cuda_graph_max_bs_decode") or self.default_graph_bs
        return mem > self.oom_above - self.graph_mem_per_bs * bs

    def crashes(self, config: Mapping[str, Any]) -> bool:
        return any(all(config.get(k) == v for k, v in cond) for cond in self.crash_when)

    def tokens_per_verify(self, config: Mapping[str, Any]) -> tuple[float, float]:
        if config.get("speculative_algorithm") is None:
            return 1.0, 1.0
        steps = config["speculative_num_steps"]
        topk = config["speculative_eagle_topk"]
        draft = config["speculative_num_draft_tokens"]
        depth = min(steps, draft - 1)
        expected, run = 1.0, 1.0
        for i in range(depth):
            p = 1 - (1 - self.accept_alpha * self.accept_decay ** i) ** topk
            run *= p
            expected += run
        cost = (1 + self.draft_step_cost * steps * (1 + self.topk_step_cost * (topk - 1))
                + self.verify_token_cost * draft)
        return expected, cost

    def expected(self, config: Mapping[str, Any], concurrency: int) -> dict[str, float]:
        tokens, cost = self.tokens_per_verify(config)
        rate = self.decode_tok_s * tokens / cost
        if not config.get("custom_all_reduce", True) and self.tp_size > 1:
            rate /= self.no_custom_ar_factor
        mem = config.get("mem_fraction_static") or 0.88
        kv = self.kv_tokens_per_fraction * max(mem - self.weights_fraction, 0.0)
        fit = max(int(kv // (self.prompt_tokens + self.max_tokens)), 1)
        mrr = config.get("max_running_requests") or 10 ** 9
        batch = max(min(concurrency, mrr, fit), 1)
        graph = config.get("cuda_graph_max_bs_decode") or self.default_graph_bs
        step = 1 + self.batch_slowdown * (batch - 1)
        if config.get("speculative_algorithm") is not None:
            step *= 1 + self.spec_batch_penalty * (batch - 1) * (config["speculative_num_draft_tokens"])
        if batch > graph:
            step *= self.over_graph_bs_factor
        per_request = rate / step
        return {"decode_tok_s": rate, "output_tok_s": per_request * batch, "batch": batch}


def objective_value(model: Planted, config: Mapping[str, Any], objective: str, concurrency: int = 32) -> float:
    figures = model.expected(config, 1 if objective == "decode" else concurrency)
    return figures["decode_tok_s"] if objective == "decode" else figures["output_tok_s"]


def run_trial(model: Planted, config: Mapping[str, Any], objective: str, rng: random.Random, sigma: float,
              abandon_below: float | None = None, trial_s: float = 0.0, concurrency: int = 32) -> TrialResult:
    """One trial as the tuner's glue would report it: infeasible on OOM or crash, else the
    model's objective times log-normal noise (abandoned when below the threshold)."""
    figures = {"trial_s": trial_s}
    if model.oom(config):
        return TrialResult("infeasible", cause="CUDA out of memory during CUDA graph capture", oom=True,
                           figures=figures)
    if model.crashes(config):
        return TrialResult("infeasible", cause="crashed after start", figures=figures)
    value = objective_value(model, config, objective, concurrency) * math.exp(rng.gauss(0.0, sigma))
    if abandon_below is not None and value < abandon_below * 0.9:
        return TrialResult("abandoned", objective=value, cause="cannot win", figures=figures)
    return TrialResult("ok", objective=value, figures=figures)
