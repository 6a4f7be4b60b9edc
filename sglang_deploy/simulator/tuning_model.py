"""SIMULATOR ONLY: trials for the tuner's search tests (tests/test_tune_search.py) and benchmark
(benchmarks/tune_search.py), scored by the simulator's performance model.

The model is the simulated server's own (perf_model.py, planted data in perf/). A trial config
(intents) becomes the ServerArgs the model reads through `sim_args`, a direct mapping for SGLang
0.5.23 that tests/test_tune_search.py checks against the simulated package's own parser
(perf_model.server_args on the dialect's argv). A trial scores the model's noise-free expected()
figure times seeded log-normal noise, with the gate's single-stream decode rate and time to first
token among its figures; a config the model refuses at start (out of memory, not
enough memory, a planted crash) is infeasible, as the tuner's glue would report it from the journal.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any, Mapping

from sglang_deploy.plan.profiles import ModelProfile
from sglang_deploy.simulator import perf_model
from sglang_deploy.tuning.search import TrialResult
from sglang_deploy.tuning.space import default_space, load_space

FIXTURE = Path(__file__).resolve().parent / "perf" / "a6000_qwen36.yaml"
VERSION = "0.5.23"
TP_SIZE = 2
PROMPT_TOKENS = 512
MAX_TOKENS = 256
CONCURRENCY = 64
#: mem_fraction_static the simulated server resolves when the argv sets none (its behaviour default)
SIM_DEFAULT_MEM = 0.85

MTP_MODEL = ModelProfile(key="mtp-model", models=("org/mtp",), architecture="Qwen3ForCausalLM", description="",
                         facts={"mtp": True, "multimodal": False}, service={}, settings=())

START = {"tp_size": TP_SIZE, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3,
         "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "custom_all_reduce": True,
         "mem_fraction_static": 0.88, "cuda_graph_max_bs_decode": 32, "max_running_requests": None,
         "chunked_prefill_size": None, "prefill_cuda_graph": "default"}


def fixture_mapping() -> dict[str, Any]:
    return perf_model.read_yaml(FIXTURE)


def load(overrides: Mapping[str, Any] | None = None) -> Any:
    return perf_model.load_model({**fixture_mapping(), **(overrides or {})})


def sim_args(config: Mapping[str, Any]) -> dict[str, Any]:
    """The ServerArgs the simulated SGLang 0.5.23 resolves for a trial config (text model, TP 2)."""
    merged = {**START, **config}
    algo = merged.get("speculative_algorithm")
    prefill = merged.get("prefill_cuda_graph") or "default"
    args: dict[str, Any] = {
        "tp_size": TP_SIZE,
        "speculative_algorithm": None if algo is None else ("EAGLE" if algo == "NEXTN" else algo),
        "mem_fraction_static": merged.get("mem_fraction_static") or SIM_DEFAULT_MEM,
        "cuda_graph_max_bs_decode": merged.get("cuda_graph_max_bs_decode"),
        "chunked_prefill_size": merged.get("chunked_prefill_size"),
        "max_running_requests": merged.get("max_running_requests"),
        "disable_custom_all_reduce": not merged.get("custom_all_reduce", True),
        # 0.5.15+: a text model keeps the breakable prefill graph by default
        "cuda_graph_config": {"prefill": {"backend": "disabled" if prefill == "off" else "breakable"}},
    }
    if algo is not None:
        args["speculative_num_steps"] = merged["speculative_num_steps"]
        args["speculative_eagle_topk"] = merged["speculative_eagle_topk"]
        args["speculative_num_draft_tokens"] = merged["speculative_num_draft_tokens"]
    return args


def figure(model: Any, config: Mapping[str, Any], objective: str) -> float:
    """The noise-free objective of a config: decode = single stream, throughput = at CONCURRENCY."""
    args = sim_args(config)
    if objective == "decode":
        return model.expected(args, 1, PROMPT_TOKENS, MAX_TOKENS)["decode_tok_s"]
    return model.expected(args, CONCURRENCY, PROMPT_TOKENS, MAX_TOKENS)["output_tok_s"]


def feasible(model: Any, config: Mapping[str, Any]) -> bool:
    args = sim_args(config)
    return model.startup_failure(args) is None and model.crash_after_s(args) is None


def run_trial(model: Any, config: Mapping[str, Any], objective: str, rng: random.Random, sigma: float,
              abandon_below: float | None = None, trial_s: float = 0.0) -> TrialResult:
    """One trial as the tuner's glue would report it. An abandoned trial stands for the gate
    stopping early: here when the noisy figure is clearly (10%) below the threshold."""
    figures: dict[str, Any] = {"trial_s": trial_s}
    args = sim_args(config)
    failure = model.startup_failure(args)
    if failure is not None:
        lines = [ln for ln in failure.splitlines() if ln.strip()]
        oom = [ln for ln in lines if "out of memory" in ln.lower()]
        return TrialResult("infeasible", cause=(oom or lines)[0], oom=bool(oom), figures=figures)
    if model.crash_after_s(args) is not None:
        return TrialResult("infeasible", cause="crashed after start", figures=figures)
    value = figure(model, config, objective) * math.exp(rng.gauss(0.0, sigma))
    # The gate's single-stream figures (sglang_deploy/gate/report.py: decode_tok_s and ttft_s, the
    # medians of the single-stream requests) from the same model, TTFT with its own noise of the
    # same size, drawn from a generator seeded by this trial's figure so that the objective's
    # draws stay as they were.
    one = model.expected(args, 1, PROMPT_TOKENS, MAX_TOKENS)
    noise = random.Random(repr(value))
    figures["ttft_s"] = one["ttft_s"] * math.exp(noise.gauss(0.0, sigma))
    figures["decode_tok_s"] = value if objective == "decode" else one["decode_tok_s"] * math.exp(
        noise.gauss(0.0, sigma))
    if abandon_below is not None and value < abandon_below * 0.9:
        return TrialResult("abandoned", objective=value, cause="cannot win", figures=figures)
    return TrialResult("ok", objective=value, figures=figures)


def base_space():
    return default_space(VERSION, START, model=MTP_MODEL, arch="sm86", gpu_memory_gib=48)


# The three planted optima, all from the simulator's a6000 fixture:
#   mtp-4-steps     single stream along top-k 1 (top-k pinned), memory, CUDA graphs and allreduce
#                   tuned too (they hardly matter to one stream): best at 4 MTP steps
#   topk-2          single stream, full speculative space: best at top-k 2, 5 steps, 10 draft tokens
#   throughput-mem  64 concurrent streams: best without speculation, at a higher memory fraction
#                   and a CUDA-graph batch that covers the running batch
SPEC_ONLY = {"mem_fraction_static": [], "max_running_requests": [], "cuda_graph_max_bs_decode": [],
             "chunked_prefill_size": [], "prefill_cuda_graph": []}
SCENARIOS: dict[str, tuple[dict[str, Any], str, dict[str, Any]]] = {
    "mtp-4-steps": ({}, "decode", {"speculative_eagle_topk": [1], "chunked_prefill_size": [],
                                   "max_running_requests": []}),
    "topk-2": ({}, "decode", SPEC_ONLY),
    "throughput-mem": ({"kv_tokens_per_fraction": 120000}, "throughput",
                       {"speculative_eagle_topk": [1], "prefill_cuda_graph": [], "chunked_prefill_size": [],
                        "custom_all_reduce": []}),
}


def scenario(name: str):
    overrides, objective, narrowing = SCENARIOS[name]
    return load(overrides), objective, load_space(narrowing, base_space())


def grid_best(model: Any, objective: str, space: Any) -> tuple[list[dict[str, Any]], float, dict[str, Any]]:
    grid = space.grid(START)
    ok = [c for c in grid if feasible(model, c)]
    best = max(ok, key=lambda c: figure(model, c, objective))
    return grid, figure(model, best, objective), best
