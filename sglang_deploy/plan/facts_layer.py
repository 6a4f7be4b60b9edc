"""The "model-facts" layer: decisions the checkpoint's own metadata makes, each with numbers.

Between the topology rules and the model profile (planner.py): TP size from
heads and memory, EP size from how block-quantized experts split, the static
memory fraction and the context length from the per-GPU budget (sizing.py).
After every layer, :func:`reconcile` drops what a profile asked for that this
checkpoint cannot do (speculative decoding without MTP layers, text-only
without a vision tower) and lowers a context the KV cache or the model cannot
hold; the constraint checker (constraints.py) then refuses the rest.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from sglang_deploy.plan import sizing
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.hardware import GpuSet
from sglang_deploy.plan.intents import Resolved
from sglang_deploy.plan.modelfacts import ModelFacts
from sglang_deploy.plan.profiles import ModelProfile

LAYER = "model-facts"
DECLARED = ("group", "host")


def describe(facts: ModelFacts) -> str:
    """The source of a model-facts decision: the checkpoint and its revision (the plan's Facts
    line says where it was read)."""
    rev = f"@{facts.revision[:12]}" if facts.revision else ""
    return f"config.json of {facts.model}{rev}"


def rule_facts(facts: ModelFacts) -> dict[str, Any]:
    """The ``model_*`` facts the YAML rules test, from the checkpoint instead of a profile."""
    q = facts.quantization
    return {
        "model_moe": facts.moe is not None,
        "model_multimodal": facts.vision,
        "model_mtp": facts.mtp_layers > 0,
        "model_fp8_checkpoint": q is not None and q.method == "fp8",
        "model_hybrid_attention": facts.linear_attention_layers > 0,
        "model_num_attention_heads": facts.num_attention_heads,
    }


def dialect_model(profile: ModelProfile | None, facts: ModelFacts) -> ModelProfile:
    """What the dialects read about the model: the checkpoint's architecture and vision
    tower, the profile's version knowledge (allowlists by SGLang release) on top."""
    derived = {"multimodal": facts.vision, "moe": facts.moe is not None, "mtp": facts.mtp_layers > 0}
    arch = facts.architectures[0] if facts.architectures else facts.model_type
    if profile is None:
        return ModelProfile(key=f"checkpoint:{facts.model}", models=(facts.model,), architecture=arch,
                            description="from the checkpoint's config.json", facts=derived, service={},
                            settings=())
    return dataclasses.replace(profile, architecture=arch, facts={**profile.facts, **derived})


def _candidates(gpus: GpuSet, nnodes: int) -> list[int]:
    """Powers of two SGLang can run here: every node the same number of ranks, dividing its GPUs."""
    out, tp = [], 1
    while tp <= gpus.count * nnodes:
        if tp % nnodes == 0 and gpus.count % (tp // nnodes) == 0:
            out.append(tp)
        tp *= 2
    return out


def choose_tp(host: str, facts: ModelFacts, gpus: GpuSet, nnodes: int, fraction: float | None,
              kv_dtype: str | None, vision: bool = False) -> tuple[int, str]:
    """The smallest power-of-two TP that splits the heads and fits weights + a minimum KV
    cache + SGLang's reserve on each GPU; PlanError with the numbers when none does."""
    need = sizing.min_kv_tokens(facts)
    tried = []
    for tp in _candidates(gpus, nnodes):
        heads = sizing.heads_fit(facts, tp)
        if heads:
            tried.append(f"TP {tp}: {heads}")
            continue
        b = sizing.budget(facts, tp, gpus.memory_mib, fraction, kv_dtype, vision=vision)
        if b is None:
            return tp, (f"{facts.num_attention_heads} heads / {facts.num_key_value_heads} KV heads split at TP {tp}; "
                        "the checkpoint gives no weight size to check memory against")
        if b.kv_tokens >= need:
            return tp, (f"smallest TP that splits {facts.num_attention_heads} heads / {facts.num_key_value_heads} KV "
                        f"heads and leaves a {need:,}-token KV cache: {b.describe()}")
        tried.append(f"TP {tp}: weights {b.weights / sizing.GIB:.1f} GiB/GPU leave ~{b.kv_tokens:,} KV tokens "
                     f"of the {need:,} needed ({b.pool / sizing.GIB:.1f} GiB pool)")
    total = gpus.count * nnodes
    raise PlanError(host, "tp_size (model-facts)",
                    f"no TP up to the {total} GPU(s) fits {facts.model} "
                    f"({(facts.total_weight_bytes or 0) / sizing.GIB:.1f} GiB of weights) on "
                    f"{gpus.memory_gib:g} GiB GPUs: {'; '.join(tried)}")


def choose_ep(facts: ModelFacts, tp: int) -> tuple[int, str] | None:
    """EP for an MoE checkpoint at ``tp``: 1 when the experts split by TP alone, else the
    smallest power of two that makes every rank's share of the experts a whole number of
    quantization blocks; None when no EP up to TP does (the constraint names it)."""
    moe = facts.moe
    if moe is None:
        return None
    ep = 1
    while ep <= tp:
        if sizing.moe_split_problem(facts, tp, ep) is None:
            break
        ep *= 2
    else:
        return None
    block = sizing.block_size(facts)
    share = moe.moe_intermediate_size // (tp // ep)
    if ep == 1:
        return 1, (f"{moe.num_experts} experts split by TP {tp}: {moe.moe_intermediate_size} / {tp} = {share} "
                   f"columns per rank" + (f", a multiple of block_n {block[0]}" if block else ""))
    why = sizing.moe_split_problem(facts, tp, 1)
    return ep, (f"{why}; EP {ep} makes it {moe.moe_intermediate_size} / (TP {tp} / EP {ep}) = {share}, "
                f"{share // block[0] if block else share} block(s) per rank, and {moe.num_experts} experts / EP "
                f"{ep} = {moe.num_experts // ep} per rank")


def decisions(facts: ModelFacts, tp: int, tp_reason: str, gpus: GpuSet, declared: dict[str, Any],
              kv_dtype: str | None, vision: bool = False) -> list[tuple[str, Any, str]]:
    """(intent, value, reason) set at the model-facts layer; ``declared`` are inventory values
    the sizing must respect (mem_fraction_static, ep_size)."""
    out: list[tuple[str, Any, str]] = [("tp_size", tp, tp_reason)]
    ep = choose_ep(facts, tp)
    if ep is not None and "ep_size" not in declared:
        out.append(("ep_size", ep[0], ep[1]))
    b = sizing.budget(facts, tp, gpus.memory_mib, declared.get("mem_fraction_static"), kv_dtype, vision=vision)
    if b is None:
        return out
    if "mem_fraction_static" not in declared:
        out.append(("mem_fraction_static", b.fraction,
                    f"SGLang's own sizing, written down: {gpus.memory_gib:g} GiB less a {b.reserve / sizing.GIB:.1f} "
                    f"GiB reserve for activations and CUDA graphs{' and the vision encoder' if vision else ''}; "
                    f"{b.describe()}"))
    limit = facts.max_position_embeddings
    if limit:
        context = min(limit, _round_down(b.kv_tokens))
        if context == limit:
            why = f"the model's {limit:,} max_position_embeddings; the KV cache holds ~{b.kv_tokens:,} tokens"
        else:
            why = (f"lowered from the model's {limit:,} positions to what the KV cache holds (~{b.kv_tokens:,} "
                   "tokens)")
        if context > 0:
            out.append(("context_length", context, why))
    return out


def _round_down(tokens: int) -> int:
    return tokens // 1024 * 1024 if tokens >= 1024 else tokens


def reconcile(facts: ModelFacts, gpus: GpuSet, resolved: dict[str, Resolved], warnings: list[str],
              kv_dtype_of: Callable[[], str | None]) -> None:
    """After every layer: drop what a profile set that this checkpoint cannot do, lower a
    context the model or its KV cache cannot hold, and say what the GPU does with the
    checkpoint's quantization. Inventory values are left for the constraint checker."""
    spec = resolved["speculative_algorithm"]
    if spec.value in ("NEXTN", "EAGLE", "EAGLE3") and not facts.mtp_layers and spec.layer not in DECLARED:
        warnings.append(f"speculative_algorithm {spec.value} ({spec.layer} layer) dropped: {facts.model} carries no "
                        "MTP/NextN layers to draft with")
        for key in ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                    "speculative_num_draft_tokens"):
            resolved[key] = Resolved(key, None, LAYER, "the checkpoint has no MTP/NextN draft layers")
    text = resolved["text_only"]
    if text.value and not facts.vision and text.layer not in DECLARED:
        warnings.append(f"text_only ({text.layer} layer) dropped: {facts.model} has no vision tower")
        resolved["text_only"] = Resolved("text_only", False, LAYER, "the checkpoint has no vision tower")
    tp, total = resolved["tp_size"], gpus.count * resolved["nnodes"].value
    if tp.layer == LAYER and tp.value < total:
        warnings.append(f"TP {tp.value} (the smallest that fits) uses {tp.value} of the {total} GPUs; the others "
                        "stay idle: set tp_size (e.g. 'all') for more KV cache, or sglang_gpu_indices")
    _lower_context(facts, gpus, resolved, warnings, kv_dtype_of())
    _quantization_note(facts, gpus, warnings)


def _lower_context(facts: ModelFacts, gpus: GpuSet, resolved: dict[str, Resolved], warnings: list[str],
                   kv_dtype: str | None) -> None:
    ctx = resolved["context_length"]
    if ctx.value is None:
        return
    tp = resolved["tp_size"].value
    b = sizing.budget(facts, tp, gpus.memory_mib, resolved["mem_fraction_static"].value, kv_dtype)
    limit = facts.max_position_embeddings
    lowest, why = ctx.value, ""
    if limit and lowest > limit:
        lowest, why = limit, f"the model's max_position_embeddings is {limit:,}"
    if b is not None and b.kv_bytes > 0 and lowest > b.kv_tokens:
        lowest, why = _round_down(b.kv_tokens), f"the KV cache holds ~{b.kv_tokens:,} tokens ({b.describe()})"
    if lowest != ctx.value and lowest > 0:
        warnings.append(f"context_length {ctx.value:,} ({ctx.layer} layer) lowered to {lowest:,}: {why}")
        resolved["context_length"] = Resolved("context_length", lowest, LAYER, f"lowered from {ctx.value:,}: {why}")


def _quantization_note(facts: ModelFacts, gpus: GpuSet, warnings: list[str]) -> None:
    q = facts.quantization
    if q is None:
        return
    cc = int(float(gpus.compute_capability) * 10)
    if q.method == "fp8" and cc < 89:
        warnings.append(f"{facts.model} is an FP8 checkpoint and {gpus.arch} has no FP8 tensor cores: SGLang runs "
                        "it as W8A16 (Marlin): weights stay FP8 in memory, every matmul dequantizes to bf16, "
                        "so prefill is slower than on SM89+ and the KV cache stays bf16 "
                        "(sglang layers/quantization/fp8_utils.py can_auto_enable_marlin_fp8)")
