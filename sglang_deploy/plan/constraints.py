"""What SGLang would refuse at load time, checked before anything changes on a host.

Pure and data-driven: ``data/constraints.yaml`` lists the constraints (id, the
intent it concerns, severity, the SGLang source it mirrors); each names a check
here, a function of the model facts and the plan's resolved values that returns
the problem in numbers, or None. :func:`check` runs them all on one plan.

A constraint of ``kind: policy`` is this project's own rule, not SGLang's: its message says
so and never attributes it to SGLang. Every other row claims the SGLang ``versions`` whose
wheels were read for it and ``cites``, for each, the file inside the wheel and the dotted name
there that it mirrors (:class:`Citation`); ``scripts/catalogs/citations.py`` finds each in the
released wheel of each version it claims. What a version knows (quantization methods, drafts from
the model's own MTP/NextN layers) comes from that version's catalog (``PlanView.support``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable

from sglang_deploy.plan import sizing
from sglang_deploy.plan.catalog import ModelSupport
from sglang_deploy.plan.modelfacts import ModelFacts
from sglang_deploy.shipped import load_shipped_yaml


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
    sglang_version: str | None = None
    support: ModelSupport | None = None   # the version's catalog model_support (None: not checked)


@dataclass(frozen=True)
class Citation:
    """The SGLang code a row mirrors in some versions: a file inside the wheel
    (``sglang/srt/arg_groups/speculative_hook.py``), a dotted name defined there
    (``ServerArgs._handle_speculative_decoding``, ``_handle_eagle_family``) and source fragments
    the definition holds (whitespace ignored)."""

    file: str
    name: str
    versions: tuple[str, ...]
    contains: tuple[str, ...] = ()


@dataclass(frozen=True)
class Constraint:
    id: str
    field: str
    check: str
    severity: str
    source: str
    params: dict[str, Any]
    kind: str = "sglang"   # sglang: SGLang refuses it | policy: this project's rule
    versions: tuple[str, ...] = ()        # the SGLang versions whose wheels were read for the row
    cites: tuple[Citation, ...] = ()      # per version, the code it mirrors


@dataclass(frozen=True)
class Violation:
    constraint: Constraint
    problem: str

    @property
    def message(self) -> str:
        c = self.constraint
        if c.kind == "policy":
            return f"constraint {c.id}: {self.problem} [project policy: {c.source}]"
        if c.severity == "warning":
            return f"constraint {c.id}: {self.problem} [{c.source}]"
        return f"constraint {c.id}: {self.problem} [SGLang refuses it: {c.source}]"


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
    return sizing.dense_split_problem(f, p.tp)


@_check
def weights_fit(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    b = sizing.budget(f, p.tp, p.gpu_mib, p.mem_fraction, p.kv_cache_dtype, p.chunked_prefill, p.graph_bs,
                      version=p.sglang_version, sm_major=p.compute_capability // 10)
    if b is None or b.kv_bytes > 0 or f.total_weight_bytes is None:
        return None
    return (f"{f.total_weight_bytes / sizing.GIB:.1f} GiB of weights / TP {p.tp} = {b.weights / sizing.GIB:.1f} GiB "
            f"per GPU do not fit the {b.pool / sizing.GIB:.1f} GiB static pool ({p.gpu_mib / 1024:g} GiB x "
            f"mem_fraction_static {b.fraction:g}): no room for a KV cache")


@_check
def min_kv_cache(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    """The project's floor (sizing.FLOOR_KV_TOKENS): above it a smaller KV cache only lowers the
    context, with a warning (facts_layer); below it the plan is refused."""
    b = sizing.budget(f, p.tp, p.gpu_mib, p.mem_fraction, p.kv_cache_dtype, p.chunked_prefill, p.graph_bs,
                      version=p.sglang_version, sm_major=p.compute_capability // 10)
    floor = sizing.floor_kv_tokens(f)
    if b is None or b.kv_bytes <= 0 or b.kv_tokens >= floor:
        return None
    return (f"at TP {p.tp} the KV cache holds ~{b.kv_tokens:,} tokens, less than this project's floor of "
            f"{floor:,} tokens per request: {b.describe()}")


@_check
def context_max_positions(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    limit = f.context_limit
    if p.context_length is not None and limit and p.context_length > limit:
        return f"context_length {p.context_length} is longer than the model's {limit} ({f.context_limit_source})"
    return None


#: The algorithms that draft with the model's own MTP/NextN layers when no draft model is given:
#: SGLang upper-cases the name and resolves NEXTN to EAGLE (arg_groups/speculative_hook.py
#: _resolve_speculative_algorithm_alias; 0.5.9: server_args.py ServerArgs._handle_speculative_decoding).
SELF_DRAFT_ALGORITHMS = ("EAGLE", "NEXTN")


def _arch(f: ModelFacts) -> str:
    return f.architectures[0] if f.architectures else f.model_type


def self_draft_problem(f: ModelFacts, support: ModelSupport | None, version: str | None = None) -> str | None:
    """Why EAGLE/NEXTN without a draft model cannot draft from this checkpoint, or None.

    Without --speculative-draft-model-path SGLang loads the draft worker from the target's own
    path (configs/model_config.py ModelConfig.from_server_args: model_path or the model's), and
    ModelConfig._config_draft_model turns the architectures it knows into their MTP/NextN draft
    class; any other architecture has no draft class to load. Most need the layers named in
    config.json (num_nextn_predict_layers / mtp_num_hidden_layers); some SGLang assumes one layer
    for itself (Qwen3-Next, Qwen3.5: ``num_nextn_predict_layers = 1`` in the same function)."""
    arch = _arch(f)
    if support is None:
        return None if f.mtp_layers else f"{f.model} carries no MTP/NextN layers to draft with"
    v = f"SGLang {version}" if version else "SGLang"
    if arch not in support.draft_architectures:
        return (f"{v} has no MTP/NextN draft for {arch} ({f.model}): it drafts from the model's own layers only "
                "for the architectures its ModelConfig._config_draft_model lists; give a draft model "
                "(--speculative-draft-model-path in sglang_extra_args)")
    if arch not in support.assumed_one_layer and not f.mtp_layers:
        return (f"{f.model} ({arch}) carries no MTP/NextN layers to draft with: its config.json sets "
                "num_nextn_predict_layers / mtp_num_hidden_layers to 0 or omits them")
    return None


def _self_drafting(p: PlanView) -> bool:
    algo = (p.speculative_algorithm or "").upper()
    return algo in SELF_DRAFT_ALGORITHMS and not p.draft_model


@_check
def speculative_draft(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    algo = (p.speculative_algorithm or "").upper()
    if not algo or algo == "NGRAM" or p.draft_model:
        return None
    if algo in SELF_DRAFT_ALGORITHMS:
        problem = self_draft_problem(f, p.support, p.sglang_version)
        return f"speculative_algorithm {algo}: {problem}" if problem else None
    return f"speculative_algorithm {algo} needs a draft model (--speculative-draft-model-path in sglang_extra_args)"


@_check
def speculative_assumed_layer(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    """EAGLE/NEXTN on an architecture SGLang assumes one draft layer for, while the checkpoint's
    config names none: SGLang loads it, so the weights must carry it (the config cannot say)."""
    support = p.support
    if support is None or not _self_drafting(p) or f.mtp_layers or _arch(f) not in support.assumed_one_layer:
        return None
    return (f"speculative_algorithm {(p.speculative_algorithm or '').upper()}: SGLang {p.sglang_version or ''} "
            f"assumes one MTP layer for {_arch(f)} ({support.draft_architectures[_arch(f)]}) although the config.json "
            f"of {f.model} names none; the checkpoint's weights must carry it")


@_check
def text_only_vision(f: ModelFacts, p: PlanView, _: dict[str, Any]) -> str | None:
    if p.text_only and not f.vision:
        return f"text_only, but {f.model} ({', '.join(f.architectures) or f.model_type}) has no vision tower to skip"
    return None


@_check
def quant_known(f: ModelFacts, p: PlanView, params: dict[str, Any]) -> str | None:
    """The checkpoint's quant_method among the methods the version knows (lower-cased, as
    ModelConfig._verify_quantization reads it); ``converted`` names the methods another one's
    override_quantization_method takes over (gptq -> gptq_marlin)."""
    q, support = f.quantization, p.support
    if q is None or support is None:
        return None
    method = q.method_at(sizing.release(p.sglang_version)).lower()
    if q.method == "modelopt_mixed" and method == "w4afp8":  # 0.5.9 (QuantFacts.method_at)
        return (f"{f.model} is a ModelOpt MIXED_PRECISION checkpoint with NVFP4 layers: SGLang {p.sglang_version} "
                "runs MIXED_PRECISION as w4afp8 (FP8 linear layers, INT4 experts: layers/quantization/w4afp8.py "
                "W4AFp8Config.get_quant_method), which loads no NVFP4 layer; 0.5.15 and later run it as modelopt_mixed")
    known = support.quantization_methods
    target = params.get("converted", {}).get(method)
    if method in known or (target is not None and target in known):
        return None
    return (f"{f.model}'s quantization_config.quant_method {method!r} is not a quantization method SGLang "
            f"{p.sglang_version or ''} knows (it knows {len(known)}: {', '.join(sorted(known))})")


@_check
def quant_capability(f: ModelFacts, p: PlanView, params: dict[str, Any]) -> str | None:
    q = f.quantization
    if q is None:
        return None
    method = q.method_at(sizing.release(p.sglang_version)).lower()
    # a release whose method asks for another capability than 0.5.23's (min_capability_by_version)
    need = params.get("min_capability_by_version", {}).get(p.sglang_version, {}).get(
        method, params.get("min_capability", {}).get(method))
    if need is not None and p.compute_capability < need:
        return (f"{method} checkpoint needs compute capability {need / 10:g} or newer; these GPUs are "
                f"{p.compute_capability / 10:g}")
    return None


_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_WHEEL_FILE = re.compile(r"sglang/([A-Za-z0-9_]+/)*[A-Za-z0-9_]+\.py")
_VERSION = re.compile(r"\d+\.\d+\.\d+")


def _strings(value: Any) -> tuple[str, ...] | None:
    """A string or a list of strings as a tuple; None for anything else."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _citations(cid: str, kind: str, entry: dict[str, Any]) -> tuple[tuple[str, ...], tuple[Citation, ...]]:
    """The row's claimed versions and its citations, well formed: every cite names a wheel file
    and a dotted name, claims only the row's versions, and (a row of kind sglang) every claimed
    version has at least one."""
    def bad(why: str) -> ValueError:
        return ValueError(f"data/constraints.yaml: constraint {cid!r}: {why}")

    versions = _strings(entry.get("versions", []))
    if versions is None or not all(_VERSION.fullmatch(v) for v in versions) or len(set(versions)) != len(versions):
        raise bad("versions must be a list of distinct SGLang versions (X.Y.Z)")
    raw = entry.get("cites", [])
    if not isinstance(raw, list):
        raise bad("cites must be a list of {file, name, versions?, contains?}")
    cites = []
    for c in raw:
        if not isinstance(c, dict) or not {"file", "name"} <= set(c) or not set(c) <= {"file", "name", "versions",
                                                                                      "contains"}:
            raise bad(f"a citation needs file and name (and may have versions, contains): {c!r}")
        file, name = c["file"], c["name"]
        if not isinstance(file, str) or not _WHEEL_FILE.fullmatch(file):
            raise bad(f"citation file {file!r} is not a path inside the wheel (sglang/.../name.py)")
        if not isinstance(name, str) or not _DOTTED.fullmatch(name):
            raise bad(f"citation name {name!r} is not a dotted Python name (Class.method, function)")
        cv = _strings(c.get("versions", list(versions)))
        if cv is None or not cv or not set(cv) <= set(versions):
            raise bad(f"citation {file} {name}: versions {c.get('versions')!r} must be some of the row's "
                      f"versions {list(versions)}")
        contains = _strings(c.get("contains", []))
        if contains is None or not all(s.strip() for s in contains):
            raise bad(f"citation {file} {name}: contains must be a source fragment or a list of them")
        cites.append(Citation(file, name, cv, contains))
    if kind == "sglang" and not versions:
        raise bad("a row SGLang enforces claims the versions whose wheels were read for it (versions)")
    uncited = [v for v in versions if not any(v in c.versions for c in cites)]
    if uncited:
        raise bad(f"no citation for version(s) {', '.join(uncited)}: name the file and function it mirrors there")
    return versions, tuple(cites)


@functools.lru_cache(maxsize=1)
def load_constraints() -> tuple[Constraint, ...]:
    path = resources.files("sglang_deploy") / "data" / "constraints.yaml"
    with path.open("r", encoding="utf-8") as fh:
        raw = load_shipped_yaml(fh)
    out = []
    for entry in raw["constraints"]:
        known = {"id", "field", "check", "severity", "source"}
        kind = entry.get("kind", "sglang")
        if (not known <= set(entry) or entry["check"] not in CHECKS or entry["severity"] not in ("error", "warning")
                or kind not in ("sglang", "policy")):
            raise ValueError(f"data/constraints.yaml: constraint {entry.get('id')!r} needs {sorted(known)}, a known "
                             f"check ({', '.join(sorted(CHECKS))}), severity error|warning and kind sglang|policy")
        versions, cites = _citations(str(entry["id"]), kind, entry)
        params = {k: v for k, v in entry.items() if k not in known | {"kind", "versions", "cites"}}
        out.append(Constraint(entry["id"], entry["field"], entry["check"], entry["severity"], entry["source"], params,
                              kind, versions, cites))
    return tuple(out)


def check(facts: ModelFacts, plan: PlanView) -> list[Violation]:
    """Every constraint the plan breaks, in the data file's order."""
    found = []
    for c in load_constraints():
        problem = CHECKS[c.check](facts, plan, c.params)
        if problem:
            found.append(Violation(c, problem))
    return found
