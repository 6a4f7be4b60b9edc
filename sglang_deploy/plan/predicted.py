"""A plan's predicted speed (``plan.perf``'s model applied to one plan): the GPUs' datasheet
figures from data/gpus.yaml, the checkpoint's facts, the plan's layout and speculative settings.
Pure; None with the reason when the plan lacks what the model needs (no facts: a model profile's
plan; a GPU model without datasheet figures)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from sglang_deploy.plan.hardware import GpuDatabase, GpuSet
from sglang_deploy.plan.modelfacts import ModelFacts
from sglang_deploy.plan.perf import FP8_METHODS, GpuPerf, Layout, ModelCost, Prediction, model_cost, predict
from sglang_deploy.plan.settings import GATE_PREFILL_TOKENS

#: The concurrency levels a plan predicts aggregate output for: `check --concurrency 1,8,32`.
LEVELS = (1, 8, 32)
#: The gate's request, as the prediction assumes it: the shipped prompts (data/gate_prompts.yaml)
#: are about 50 words, some 80 tokens with a chat template; the deploy gate asks for 256 tokens
#: (gate/options.py CheckOptions.max_tokens).
PROMPT_TOKENS, OUTPUT_TOKENS = 80, 256
#: The deploy gate's long prompt for its prefill figure: ``sglang_gate.prefill_tokens``'s default
#: (plan/settings.py GATE_PREFILL_TOKENS).
PREFILL_TOKENS = GATE_PREFILL_TOKENS


def link_of(gpus: GpuSet, nnodes: int) -> str:
    """The TP group's links, as ``perf.ALLREDUCE_S`` names them."""
    if nnodes > 1:
        return "network"
    if gpus.nvswitch:
        return "nvswitch"
    if "nvlink" in gpus.topology.lower():
        return "nvlink"
    return "pcie_p2p" if gpus.p2p else "pcie"


def gpu_perf(db: GpuDatabase, gpus: GpuSet) -> GpuPerf | None:
    model = db.lookup(gpus.model)
    if model is None:
        return None
    if not model.hbm_gbps or not model.bf16_tflops:
        return None
    return GpuPerf(name=gpus.model, hbm_gbps=model.hbm_gbps, bf16_tflops=model.bf16_tflops,
                   fp8_tflops=model.fp8_tflops, fp4_tflops=model.fp4_tflops, source=model.perf_source or "",
                   nvlink_gbps=model.nvlink_gbps, pcie_gbps=model.pcie_gbps)


def _value(intents: Mapping[str, Any], name: str, default: Any = None) -> Any:
    r = intents.get(name)
    value = getattr(r, "value", r)
    return default if value is None else value


@dataclass(frozen=True)
class ModelInputs:
    """What the speed model reads of one plan: the checkpoint's cost, the GPU's figures, the layout."""

    cost: ModelCost
    gpu: GpuPerf
    layout: Layout
    fp8_weights: bool


def model_inputs(db: GpuDatabase, gpus: GpuSet, facts: ModelFacts | None, intents: Mapping[str, Any],
                 nnodes: int = 1, accept_length: float | None = None) -> tuple[ModelInputs | None, str | None]:
    """(the speed model's inputs for a plan, None), or (None, why there are none)."""
    if facts is None:
        return None, "no checkpoint facts (a model profile's plan): nothing to count bytes from"
    perf = gpu_perf(db, gpus)
    if perf is None:
        return None, f"{gpus.model}: no datasheet figures in data/gpus.yaml (hbm_gbps, bf16_tflops)"
    spec = _value(intents, "speculative_algorithm")
    layout = Layout(tp=int(_value(intents, "tp_size", 1)), dp=int(_value(intents, "dp_size", 1)),
                    ep=int(_value(intents, "ep_size", 1)), link=link_of(gpus, nnodes),
                    spec_steps=int(_value(intents, "speculative_num_steps", 3)) if spec else 0,
                    accept_length=accept_length if spec else None,
                    attn_dp=int(_value(intents, "attn_dp_size", 1)))
    method = ((facts.quantization.method if facts.quantization else None)
              or _value(intents, "quantization") or "").lower()
    return ModelInputs(model_cost(facts, _value(intents, "kv_cache_dtype")), perf, layout, method in FP8_METHODS), None


def plan_prediction(db: GpuDatabase, gpus: GpuSet, facts: ModelFacts | None, intents: Mapping[str, Any],
                    nnodes: int = 1, accept_length: float | None = None) -> tuple[Prediction | None, str | None]:
    """(prediction, None), or (None, why there is none)."""
    inputs, why = model_inputs(db, gpus, facts, intents, nnodes, accept_length)
    if inputs is None:
        return None, why
    return predict(inputs.cost, inputs.gpu, inputs.layout, prompt_tokens=PROMPT_TOKENS, output_tokens=OUTPUT_TOKENS,
                   concurrency=LEVELS, fp8_weights=inputs.fp8_weights, prefill_tokens=PREFILL_TOKENS), None
