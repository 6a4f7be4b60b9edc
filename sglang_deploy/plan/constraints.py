"""What SGLang would refuse at load time, checked before anything changes on a host.

Pure and data-driven: ``data/constraints.yaml`` lists the constraints (id, the
intent it concerns, severity, the SGLang source it mirrors); each names a check
here, a function of the model facts and the plan's resolved values that returns
the problem in numbers, or None. :func:`check` runs them all on one plan.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable

import yaml

from sglang_deploy.plan import sizing
from sglang_deploy.plan.modelfacts import ModelFacts


@dataclass(frozen=True)
class PlanView:
    """The resolved values a constraint looks at (one host's plan)."""

    tp: int
    ep: int
    gpu_mib: int
    compute_capability: int          # x10: 86 for SM86
    mem_fraction: float | None       # None: SGLang computes its own
    context_length: int | None
    speculative_algorithm: str | None
    draft_model: bool                # --speculative-draft-model-path among the extra args
    text_only: bool
    kv_cache_dtype: str | None = None
    chunked_prefill: int | None = None
    graph_bs: int | None = None


@dataclass(frozen=True)
class Constraint:
    id: str
    field: str
    check: str
    severity: str
    source: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Violation:
    constraint: Constraint
    problem: str

    @property
    def message(self) -> str:
        return f"constraint {self.constraint.id}: {self.problem} [SGLang refuses it: {self.constraint.source}]"


Check = Callable[[ModelFacts, PlanView, dict[str, Any]], "str | None"]
CHECKS: dict[str, Check] = {}


def _check(fn: Check) -> Check:
    CHECKS[fn.__name__] = fn
    return fn


@_check
def attention_heads(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    if f.num_attention_heads % p.tp:
        return f"{f.num_attention_heads} attention heads do not divide by TP {p.tp}"
    return None


@_check
def kv_heads(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    kv = f.num_key_value_heads
    if f.mla or not kv:
        return None
    if kv >= p.tp and kv % p.tp:
        return f"{kv} KV heads do not divide by TP {p.tp}"
    if kv < p.tp and p.tp % kv:
        return f"TP {p.tp} is not a multiple of the {kv} KV heads (fewer heads than ranks must replicate evenly)"
    return None


@_check
def ep_within_tp(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    if p.ep > 1 and (p.ep > p.tp or p.tp % p.ep):
        return f"EP {p.ep} does not divide TP {p.tp} (the MoE TP width is TP / EP)"
    return None


@_check
def experts_ep(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    if f.moe is not None and f.moe.num_experts % p.ep:
        return f"{f.moe.num_experts} experts do not divide by EP {p.ep}"
    return None


@_check
def moe_tp(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    if f.moe is None or p.tp % p.ep:
        return None
    width = p.tp // p.ep
    if f.moe.moe_intermediate_size % width:
        return f"moe_intermediate_size {f.moe.moe_intermediate_size} does not divide by TP {p.tp} / EP {p.ep} = {width}"
    return None


@_check
def moe_block(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    block = sizing.block_size(f)
    if f.moe is None or block is None or p.tp % p.ep or f.moe.moe_intermediate_size % (p.tp // p.ep):
        return None
    width = p.tp // p.ep
    per_rank = f.moe.moe_intermediate_size // width
    for name, size in (("block_n", block[0]), ("block_k", block[1])):
        if per_rank % size and (name == "block_n" or width > 1):
            return (f"moe_intermediate_size {f.moe.moe_intermediate_size} / (TP {p.tp} / EP {p.ep}) = {per_rank} "
                    f"columns per rank is not a multiple of {name} {size}{_ep_hint(f, p)}")
    return None


def _ep_hint(f: ModelFacts, p: PlanView) -> str:
    fits = [ep for ep in _powers_of_two(p.tp) if sizing.moe_split_problem(f, p.tp, ep) is None]
    return f"; EP {fits[0]} would split it" if fits else "; no EP up to TP splits it"


def _powers_of_two(limit: int) -> list[int]:
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


@_check
def dense_block(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    block = sizing.block_size(f)
    for name, width in sizing.dense_widths(f):
        if width % p.tp:
            return f"{name} {width} does not divide by TP {p.tp}"
        if block is not None and (width // p.tp) % block[0]:
            return (f"{name} {width} / TP {p.tp} = {width // p.tp} is not a multiple of the weight "
                    f"quantization block_n {block[0]}")
    return None


@_check
def weights_fit(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    b = sizing.budget(f, p.tp, p.gpu_mib, p.mem_fraction, p.kv_cache_dtype, p.chunked_prefill, p.graph_bs)
    if b is None or b.kv_bytes > 0 or f.total_weight_bytes is None:
        return None
    return (f"{f.total_weight_bytes / sizing.GIB:.1f} GiB of weights / TP {p.tp} = {b.weights / sizing.GIB:.1f} GiB "
            f"per GPU do not fit the {b.pool / sizing.GIB:.1f} GiB static pool ({p.gpu_mib / 1024:g} GiB x "
            f"mem_fraction_static {b.fraction:g}): no room for a KV cache")


@_check
def min_kv_cache(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    b = sizing.budget(f, p.tp, p.gpu_mib, p.mem_fraction, p.kv_cache_dtype, p.chunked_prefill, p.graph_bs)
    need = sizing.min_kv_tokens(f)
    if b is None or b.kv_bytes <= 0 or b.kv_tokens >= need:
        return None
    return (f"at TP {p.tp} the KV cache holds ~{b.kv_tokens:,} tokens, less than one {need:,}-token request: "
            f"{b.describe()}")


@_check
def context_max_positions(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    limit = f.max_position_embeddings
    if p.context_length is not None and limit and p.context_length > limit:
        return f"context_length {p.context_length} is longer than the model's {limit} max_position_embeddings"
    return None


@_check
def speculative_draft(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    algo = p.speculative_algorithm
    if algo in (None, "NGRAM") or p.draft_model:
        return None
    if algo == "NEXTN" and f.mtp_layers:
        return None
    if algo == "NEXTN":
        return f"speculative_algorithm NEXTN but {f.model} carries no MTP/NextN layers to draft with"
    return f"speculative_algorithm {algo} needs a draft model (--speculative-draft-model-path in sglang_extra_args)"


@_check
def text_only_vision(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    if p.text_only and not f.vision:
        return f"text_only, but {f.model} ({', '.join(f.architectures) or f.model_type}) has no vision tower to skip"
    return None


@_check
def quant_capability(f: ModelFacts, p: PlanView, params: dict[str, Any]) -> str | None:
    q = f.quantization
    if q is None:
        return None
    need = params.get("min_capability", {}).get(q.method)
    if need is not None and p.compute_capability < need:
        return (f"{q.method} checkpoint needs compute capability {need / 10:g} or newer; these GPUs are "
                f"{p.compute_capability / 10:g}")
    return None


@functools.lru_cache(maxsize=1)
def load_constraints() -> tuple[Constraint, ...]:
    path = resources.files("sglang_deploy") / "data" / "constraints.yaml"
    with path.open("r", encoding="utf-8") as fh:
        raw = yaml.safe_load(fh)
    out = []
    for entry in raw["constraints"]:
        known = {"id", "field", "check", "severity", "source"}
        if not known <= set(entry) or entry["check"] not in CHECKS or entry["severity"] not in ("error", "warning"):
            raise ValueError(f"data/constraints.yaml: constraint {entry.get('id')!r} needs {sorted(known)}, a known "
                             f"check ({', '.join(sorted(CHECKS))}) and severity error|warning")
        params = {k: v for k, v in entry.items() if k not in known}
        out.append(Constraint(entry["id"], entry["field"], entry["check"], entry["severity"], entry["source"], params))
    return tuple(out)


def check(facts: ModelFacts, plan: PlanView) -> list[Violation]:
    """Every constraint the plan breaks, in the data file's order."""
    found = []
    for c in load_constraints():
        problem = CHECKS[c.check](facts, plan, c.params)
        if problem:
            found.append(Violation(c, problem))
    return found
