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


def sim_args(config: Mapping[str, Any], start: Mapping[str, Any] = START) -> dict[str, Any]:
    """The ServerArgs the simulated SGLang 0.5.23 resolves for a trial config (text model, TP 2
    unless the config sets the layout; --dp-size is the LayoutModel's, not one replica's)."""
    merged = {**start, **config}
    algo = merged.get("speculative_algorithm")
    prefill = merged.get("prefill_cuda_graph") or "default"
    args: dict[str, Any] = {
        "tp_size": merged.get("tp_size") or TP_SIZE,
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


# ---- layouts: TP x DP on one host ------------------------------------------------------------
#
# The fixture is one server at TP 2 (2x RTX A6000). A layout's figures come from the same model,
# rescaled to a replica at TP t on the same GPUs, with these shapes:
#   - weights split over the TP ranks (SGLang shards every linear layer): weights_fraction x 2/t
#     of each GPU; at TP 1 the 27B model's 53 GiB exceed one 48 GiB GPU and it does not start,
#     as the planner refuses it (constraint weights-fit);
#   - the KV cache split by KV heads over the ranks: kv_tokens_per_fraction x t/2 tokens;
#   - a decode step reads each GPU's share of the weights and KV (memory-bound: the fixture's
#     TP-2 step, less its allreduce, x 2/t), plus one allreduce per layer whose time follows
#     NCCL's ring: the bytes each rank moves are 2(t-1)/t of the message (nccl-tests
#     doc/PERFORMANCE.md, "bus bandwidth"), the message growing with the requests in the batch;
#     TP_ALLREDUCE_SHARE, its share of the fixture's TP-2 step per request, is PLANTED;
#   - prefill compute split over the ranks: prefill_tok_s x t/2;
#   - DP replicas each serve an equal share of the streams (SGLang's data-parallel controller
#     dispatches requests round robin by default, managers/data_parallel_controller.py), so the
#     output tok/s is dp x one replica's at concurrency / dp, and a single stream runs on one replica.
# At TP 2 the rescaled model is the fixture itself. Larger TP: faster single streams; more replicas:
# more output tok/s at 64 streams (the allreduce grows with the batch a TP group carries).
TP_ALLREDUCE_SHARE = 0.02  # PLANTED


def _ring(tp: int) -> float:
    """NCCL ring allreduce bytes per rank relative to TP 2 (2(t-1)/t; 1 at TP 2, 0 at TP 1)."""
    return 2.0 * (tp - 1) / tp


def replica_mapping(mapping: Mapping[str, Any], tp: int, share: float = TP_ALLREDUCE_SHARE) -> dict[str, Any]:
    """The fixture's model mapping for one replica at TP ``tp`` on the fixture's GPUs (shapes above).
    A step at batch b, in TP-2 single steps: (1 - a + (s - a)(b - 1)) x 2/t + a x b x ring(t), which
    is linear in b: decode_tok_s / step(1) and batch_slowdown = slope / step(1)."""
    ratio = TP_SIZE / tp
    s = float(mapping.get("batch_slowdown", 0.0))
    step1 = (1.0 - share) * ratio + share * _ring(tp)
    slope = (s - share) * ratio + share * _ring(tp)
    out = dict(mapping)
    out.update(decode_tok_s=float(mapping["decode_tok_s"]) / step1, batch_slowdown=slope / step1,
               weights_fraction=float(mapping["weights_fraction"]) * ratio)
    if mapping.get("kv_tokens_per_fraction") is not None:
        out["kv_tokens_per_fraction"] = float(mapping["kv_tokens_per_fraction"]) / ratio
    if mapping.get("prefill_tok_s"):
        out["prefill_tok_s"] = float(mapping["prefill_tok_s"]) / ratio
    return out


class LayoutModel:
    """SIMULATOR ONLY: the fixture's model over the layouts of one host (replica_mapping per TP)."""

    def __init__(self, mapping: Mapping[str, Any], start: Mapping[str, Any], share: float = TP_ALLREDUCE_SHARE):
        self.mapping, self.start, self.share = dict(mapping), dict(start), share
        self._models: dict[int, Any] = {}

    def replica(self, config: Mapping[str, Any]) -> tuple[Any, dict[str, Any], int]:
        """One replica's model and args, and the replicas."""
        merged = {**self.start, **config}
        tp, dp = int(merged["tp_size"]), int(merged.get("dp_size") or 1)
        if tp not in self._models:
            mapping = replica_mapping(self.mapping, tp, self.share)
            self._models[tp] = (perf_model.load_model(mapping) if mapping["weights_fraction"] < 1.0
                                else _WeightsDoNotFit())
        return self._models[tp], sim_args(config, self.start), dp


class _WeightsDoNotFit:
    """A replica whose share of the weights exceeds its GPUs' memory: SGLang stops at start."""

    def startup_failure(self, args: Mapping[str, Any]) -> str:
        return perf_model.perf.NOT_ENOUGH_MEMORY + " (SIMULATED: the weights exceed the GPUs of one replica)"

    def crash_after_s(self, args: Mapping[str, Any]) -> None:
        return None


def replica_of(model: Any, config: Mapping[str, Any]) -> tuple[Any, dict[str, Any], int]:
    if isinstance(model, LayoutModel):
        return model.replica(config)
    return model, sim_args(config), 1


def figure(model: Any, config: Mapping[str, Any], objective: str) -> float:
    """The noise-free objective of a config: decode = single stream, throughput = at CONCURRENCY
    (over a layout's replicas, each with its share of the streams)."""
    one, args, dp = replica_of(model, config)
    if objective == "decode":
        return one.expected(args, 1, PROMPT_TOKENS, MAX_TOKENS)["decode_tok_s"]
    return dp * one.expected(args, max(1, CONCURRENCY // dp), PROMPT_TOKENS, MAX_TOKENS)["output_tok_s"]


def feasible(model: Any, config: Mapping[str, Any]) -> bool:
    one, args, _ = replica_of(model, config)
    return one.startup_failure(args) is None and one.crash_after_s(args) is None


def run_trial(model: Any, config: Mapping[str, Any], objective: str, rng: random.Random, sigma: float,
              abandon_below: float | None = None, trial_s: float = 0.0) -> TrialResult:
    """One trial as the tuner's glue would report it. An abandoned trial stands for the gate
    stopping early: here when the noisy figure is clearly (10%) below the threshold."""
    figures: dict[str, Any] = {"trial_s": trial_s}
    one_model, args, _ = replica_of(model, config)
    failure = one_model.startup_failure(args)
    if failure is not None:
        lines = [ln for ln in failure.splitlines() if ln.strip()]
        oom = [ln for ln in lines if "out of memory" in ln.lower()]
        return TrialResult("infeasible", cause=(oom or lines)[0], oom=bool(oom), figures=figures)
    if one_model.crash_after_s(args) is not None:
        return TrialResult("infeasible", cause="crashed after start", figures=figures)
    value = figure(model, config, objective) * math.exp(rng.gauss(0.0, sigma))
    # The gate's single-stream figures (sglang_deploy/gate/report.py: decode_tok_s and ttft_s, the
    # medians of the single-stream requests) from the same model, TTFT with its own noise of the
    # same size, drawn from a generator seeded by this trial's figure so that the objective's
    # draws stay as they were.
    one = one_model.expected(args, 1, PROMPT_TOKENS, MAX_TOKENS)
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


# The layout scenarios: 8x RTX A6000 serving Qwen3.6-27B (its recorded config.json, context declared
# 131,072 so that TP 2 holds it, speculative decoding off: the scenarios tune the layout alone), planned
# by the real planner (which ranks the layouts by predicted speed, the running requests each replica's
# recurrent state allows among it); the layouts tried are those its plan accepts
# (space.layout_candidates: TP 1 is refused, its weights do not fit one GPU), scored by LayoutModel
# with the allreduce share each scenario plants. With MTP on, its draft states (4 per request beside
# 0.5.23's 5 slots) make the planner rank TP 8 first, and no share puts another layout within noise
# of that one (LayoutModel: TP 4 x DP 2 serves more at every share).
#   layout-found        planned for throughput (TP 4 x DP 2: the planner's ranking, as SGLang runs
#                       at most 19 requests per TP 2 replica for the recurrent state, 72 per TP 4);
#                       allreduce planted costly (0.03, as over a slow PCIe root): TP 2 x DP 4 serves
#                       29% more at 64 streams, single streams half as fast; memory fraction and
#                       CUDA-graph batch tuned too
#   layout-noise        planned for throughput (TP 4 x DP 2); share 0.0154: TP 2 x DP 4 within 0.4%
#   layout-latency-plan planned for latency (TP 8); share 0.02, the tuner's objective throughput:
#                       TP 2 x DP 4 serves 2.8x more at 64 streams, single streams 72% slower
LAYOUT_HOST = {"sglang_model": "Qwen/Qwen3.6-27B",
               "sglang_gpus": {"model": "RTX A6000", "count": 8, "topology": "pcie"},
               "sglang_intents": {"context_length": 131072, "speculative_algorithm": None}}
LAYOUT_ONLY = {n: [] for n in ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                               "speculative_num_draft_tokens", "mem_fraction_static", "max_running_requests",
                               "cuda_graph_max_bs_decode", "chunked_prefill_size", "prefill_cuda_graph",
                               "custom_all_reduce")}
#: name -> (sglang_objective the host is planned for, the tuner's objective, allreduce share, --space)
LAYOUT_SCENARIOS: dict[str, tuple[str, str, float, dict[str, Any]]] = {
    "layout-found": ("throughput", "throughput", 0.03,
                     {**LAYOUT_ONLY, "mem_fraction_static": [0.8, 0.84, 0.88, 0.9],
                      "cuda_graph_max_bs_decode": [16, 32, 64]}),
    "layout-noise": ("throughput", "throughput", 0.0154, LAYOUT_ONLY),
    "layout-latency-plan": ("latency", "throughput", TP_ALLREDUCE_SHARE, LAYOUT_ONLY),
}


def layout_plan(sglang_objective: str, host: Mapping[str, Any] | None = None):
    """The planner's plan of the layout host, and the host planned again with a layout as its trial
    (what deploy/sglang.py passes to space_for_plan)."""
    from sglang_deploy.plan.planner import plan_host
    from sglang_deploy.plan.spec import IntentSetting, build_spec
    from sglang_deploy.simulator.facts_matrix import checkpoints

    data = dict(host or LAYOUT_HOST)
    facts = checkpoints()[data["sglang_model"]]
    # no latency limits: the scenarios start from the rule's layout (TP 2 x DP 4 for throughput),
    # which the default limits would move (the planner's ranking: tests/test_layout_rank.py)
    objective = {"serve": sglang_objective, "tpot_ms": None, "ttft_ms": None}
    spec = build_spec("sim-a6000x8", {}, {**data, "sglang_objective": objective})

    def replan(layout: Mapping[str, Any]) -> Any:
        trial = {k: IntentSetting(v, "a layout the tuner may try") for k, v in layout.items()}
        return plan_host(spec, facts=facts, sglang_version=VERSION, trial=trial)

    return plan_host(spec, facts=facts, sglang_version=VERSION), replan


def scenario_start(name: str) -> dict[str, Any]:
    """The config a scenario's search starts from: the plan's values (START for the a6000 fixture)."""
    if name not in LAYOUT_SCENARIOS:
        return dict(START)
    plan, _ = layout_plan(LAYOUT_SCENARIOS[name][0])
    return {k: r.value for k, r in plan.intents.items()}


def scenario(name: str):
    if name in LAYOUT_SCENARIOS:
        from sglang_deploy.tuning.space import space_for_plan

        planned_for, objective, share, narrowing = LAYOUT_SCENARIOS[name]
        plan, replan = layout_plan(planned_for)
        start = {k: r.value for k, r in plan.intents.items()}
        return (LayoutModel(fixture_mapping(), start, share), objective,
                load_space(narrowing, space_for_plan(plan, replan)))
    overrides, objective, narrowing = SCENARIOS[name]
    return load(overrides), objective, load_space(narrowing, base_space())


def grid_best(model: Any, objective: str, space: Any, start: Mapping[str, Any] = START
              ) -> tuple[list[dict[str, Any]], float, dict[str, Any]]:
    grid = space.grid(start)
    ok = [c for c in grid if feasible(model, c)]
    best = max(ok, key=lambda c: figure(model, c, objective))
    return grid, figure(model, best, objective), best
