"""The "model-facts" layer: decisions the checkpoint's own metadata makes, each with numbers.

Between the topology rules and the model profile (layers.py): TP size from
heads and memory, EP size from how block-quantized experts split, the static
memory fraction and the context length from the per-GPU budget (sizing.py).
After every layer, :func:`reconcile` drops what a profile asked for that this
checkpoint cannot do (speculative decoding without MTP layers, text-only
without a vision tower) and lowers a context the KV cache or the model cannot
hold; the constraint checker (constraints.py) then refuses the rest.

The planner enters it once, as a :class:`FactsLayer`: the checkpoint's facts, or
none, and then the model profile's own rules, fallback sizing and memory check
stand in for them. Every choice between the two is made here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from sglang_deploy.plan import constraints, layers, layout_rank, request_cap, sizing
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.catalog import ModelSupport
from sglang_deploy.plan.hardware import GpuSet
from sglang_deploy.plan.intents import Resolved
from sglang_deploy.plan.layout_rank import Speed
from sglang_deploy.plan.modelfacts import ModelFacts
from sglang_deploy.plan.profiles import ModelProfile, Rule, Setting

LAYER = "model-facts"  # its name in layers.LAYERS
DECLARED = layers.INVENTORY

#: One value a layer sets: (intent, value, reason, source).
Change = tuple[str, Any, str, str | None]


@dataclass(frozen=True)
class FactsLayer:
    """What one plan knows of its model: the checkpoint's ``facts`` (None: the profile's
    fallback sizing), its ``profile`` (None: no profile matches) and ``declared``, the values
    the layers above set that the sizing respects (the tuning record, the inventory and a
    trial, the highest winning)."""

    profile: ModelProfile | None
    facts: ModelFacts | None
    declared: Mapping[str, Any]
    #: the SGLang release whose sizing formulas apply (sizing.budget; None: the newest supported)
    version: str | None = None
    #: --enable-multimodal is among the extra arguments: SGLang serves the vision tower of an
    #: architecture it would otherwise serve text-only (sizing.multimodal_by_default)
    enable_multimodal: bool = False

    def rule_facts(self) -> dict[str, Any]:
        """The ``model_*`` facts the rules test from the checkpoint ({}: the profile's stand)."""
        return rule_facts(self.facts) if self.facts is not None else {}

    @property
    def profile_rules(self) -> tuple[Rule, ...]:
        """The profile's own rules: they stand in for the checkpoint's facts, so only without them."""
        return self.profile.rules if self.profile is not None and self.facts is None else ()

    @property
    def profile_settings(self) -> tuple[Setting, ...]:
        """The profile's tuned settings, plus its fallback sizing when no checkpoint facts answer."""
        if self.profile is None:
            return ()
        return self.profile.settings if self.facts is not None else self.profile.settings + self.profile.fallback

    @property
    def profile_heads(self) -> int | None:
        """The attention heads a layer-set TP must divide, from the profile (the constraints check facts)."""
        if self.profile is None or self.facts is not None:
            return None
        return self.profile.facts.get("num_attention_heads")

    @property
    def prefill_graph(self) -> bool:
        """Whether SGLang may capture the prefill CUDA graph (a layer's prefill_cuda_graph off: no
        reserve for it; default and on: SGLang's own rules, sizing.prefill_graph_mib)."""
        return self.declared.get("prefill_cuda_graph") != "off"

    @property
    def serves_vision(self) -> bool:
        """The checkpoint's vision tower will be loaded: it has one, SGLang serves it for this
        architecture (by default or under --enable-multimodal) and no layer asks for text only."""
        if self.facts is None:
            return False
        text_only = self.declared.get("text_only")
        if text_only is None:
            text_only = next((s.value for s in self.profile_settings if s.intent == "text_only"), False)
        return self.served_multimodal and not text_only

    @property
    def served_multimodal(self) -> bool:
        """SGLang treats the checkpoint as multimodal (ModelConfig.is_multimodal): it has a vision
        tower and its architecture is not one SGLang serves text-only unless --enable-multimodal."""
        if self.facts is None or not self.facts.vision:
            return False
        return self.enable_multimodal or sizing.multimodal_by_default(self.facts.architecture, self.version)

    def choose_layout(self, host: str, gpus: GpuSet, nnodes: int, objective: str = "throughput",
                      dp: int | None = None, speed: Speed | None = None) -> Layout | None:
        """The layout from the checkpoint, for when no layer sets the TP (None: no facts); ``dp``:
        the replicas a layer declared (the TP is then chosen within the GPUs they leave);
        ``speed``: what ranks the layouts by predicted speed (None: the rule alone)."""
        if self.facts is None:
            return None
        context = self.declared.get("context_length")
        kv = self.declared.get("kv_cache_dtype") or sizing.dsa_default_kv_dtype(self.facts, gpus.sm_major)
        return choose_layout(host, self.facts, gpus, nnodes, self.declared.get("mem_fraction_static"),
                             kv, self.serves_vision, objective, context if isinstance(context, int) else None, dp,
                             attn_dp_declared=(self.declared.get("attn_dp_size") or 1) > 1, version=self.version,
                             prefill_graph=self.prefill_graph, speed=speed,
                             spec_steps=layout_rank.draft_steps(self.facts, self.declared),
                             state_args=layout_rank.state_args(self.facts, self.declared))

    def settings(self, layout: Layout, gpus: GpuSet, kv_dtype_below: Any) -> list[Change]:
        """What the layer sets: sizing from the checkpoint, respecting declared values it depends on
        (a layout not ``chosen`` by the checkpoint: a layer or the inventory set the TP, the
        constraints check it)."""
        if self.facts is None:
            return []
        declared = {k: v for k in ("mem_fraction_static", "ep_size") if (v := self.declared.get(k)) is not None}
        kv_dtype = self.declared.get("kv_cache_dtype") or kv_dtype_below
        source = describe(self.facts)
        attn_dp = layout.attn_dp if layout.chosen else (self.declared.get("attn_dp_size") or 1)
        out: list[Change] = [(name, value, reason, source)
               for name, value, reason in decisions(self.facts, layout.tp, layout.reason, gpus, declared, kv_dtype,
                                                    self.serves_vision, attn_dp, self.version, self.prefill_graph,
                                                    layout_rank.state_args(self.facts, self.declared))
               if not (name == "tp_size" and not layout.chosen)]
        if layout.chosen:
            out.append(("dp_size", layout.dp, layout.dp_reason, source))
            if layout.attn_dp > 1:
                out.append(("attn_dp_size", layout.attn_dp, layout.attn_dp_reason, source))
        return out

    def reconcile(self, gpus: GpuSet, resolved: dict[str, Resolved], warnings: list[str],
                  support: ModelSupport | None = None, version: str | None = None) -> None:
        """After every layer (and the rules' enforcement): :func:`reconcile`, with facts
        (``support``: the SGLang version's catalog model_support)."""
        if self.facts is not None:
            reconcile(self.facts, gpus, resolved, warnings, lambda: resolved["kv_cache_dtype"].value, support, version)

    def check(self, host: str, gpus: GpuSet, resolved: Mapping[str, Resolved], warnings: list[str],
              extra_args: Sequence[str], nnodes: int, support: ModelSupport | None = None,
              version: str | None = None) -> None:
        """What SGLang would refuse at load time (a PlanError naming the constraint and its numbers);
        without facts, a warning when the profile's weights cannot fit."""
        if self.facts is None:
            _check_memory(gpus, self.profile, resolved, warnings, nnodes)
            return
        for v in constraints.check(self.facts, view(resolved, gpus, extra_args, support, version)):
            if v.constraint.severity == "warning":
                warnings.append(v.message)
                continue
            name = v.constraint.field
            raise PlanError(host, layers.field(resolved[name].layer, name), v.message)

    def dialect_model(self) -> ModelProfile | None:
        """What the dialects read about the model (:func:`dialect_model` with facts)."""
        if self.facts is None:
            return self.profile
        return dialect_model(self.profile, self.facts, self.served_multimodal)


def view(resolved: Mapping[str, Resolved], gpus: GpuSet, args: Sequence[str], support: ModelSupport | None = None,
         version: str | None = None) -> constraints.PlanView:
    """The values the constraint checker reads (``support``: the version's catalog model_support)."""
    r = {k: v.value for k, v in resolved.items()}
    return constraints.PlanView(
        tp=r["tp_size"], ep=r["ep_size"], gpu_mib=gpus.memory_mib,
        compute_capability=int(round(float(gpus.compute_capability) * 10)),
        mem_fraction=r["mem_fraction_static"], context_length=r["context_length"],
        speculative_algorithm=r["speculative_algorithm"],
        draft_model=any(a.split("=", 1)[0] == "--speculative-draft-model-path" for a in args),
        text_only=r["text_only"], kv_cache_dtype=r["kv_cache_dtype"],
        chunked_prefill=r["chunked_prefill_size"], graph_bs=r["cuda_graph_max_bs_decode"],
        sglang_version=version, support=support)


def _check_memory(gpus: GpuSet, model: ModelProfile | None, resolved: Mapping[str, Resolved],
                  warnings: list[str], nnodes: int = 1) -> None:
    """Without facts: warn when the profile's weights alone exceed the static memory pool of
    one replica's GPUs, its TP group (on every node): each data-parallel replica holds the whole
    model (SGLang's DataParallelController starts a full TP group per replica,
    srt/managers/data_parallel_controller.py, launch_dp_schedulers)."""
    weights = model.facts.get("weights_gib") if model else None
    if not weights or resolved["quantization"].value is not None:
        return
    fraction = resolved["mem_fraction_static"].value or 0.9
    tp = resolved["tp_size"].value
    count = tp if isinstance(tp, int) and 0 < tp <= gpus.count * nnodes else gpus.count * nnodes
    pool = count * gpus.memory_mib / 1024 * fraction
    if weights > pool:
        warnings.append(f"{model.key} weighs ~{weights} GiB but {count}x {gpus.memory_gib:g} GiB at "  # type: ignore[union-attr]
                        f"mem_fraction_static {fraction:g} gives a {pool:.0f} GiB pool: it will not load")
    elif weights > 0.85 * pool:
        warnings.append(f"{model.key} weights (~{weights} GiB) fill {weights / pool:.0%} of the {pool:.0f} GiB "  # type: ignore[union-attr]
                        "static pool: little room for the KV cache")


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
        "model_dsa_fp8_default": sizing.dsa_fp8_by_default(facts),
    }


def dialect_model(profile: ModelProfile | None, facts: ModelFacts, multimodal: bool | None = None) -> ModelProfile:
    """What the dialects read about the model: the checkpoint's architecture and vision
    tower (``multimodal``: whether SGLang serves it, FactsLayer.served_multimodal; None: the
    checkpoint has one), the profile's version knowledge (allowlists by SGLang release) on top."""
    derived = {"multimodal": facts.vision if multimodal is None else multimodal, "moe": facts.moe is not None,
               "mtp": facts.mtp_layers > 0}
    arch = facts.architectures[0] if facts.architectures else facts.model_type
    if profile is None:
        return ModelProfile(key=f"checkpoint:{facts.model}", models=(facts.model,), architecture=arch,
                            description="from the checkpoint's config.json", facts=derived, service={},
                            settings=())
    return dataclasses.replace(profile, architecture=arch, facts={**profile.facts, **derived})


OBJECTIVES = ("throughput", "latency")

#: Where SGLang recommends DP attention for MLA models: one replica over the node's GPUs, attention
#: data-parallel over all of them (dp = tp), under a throughput objective.
DP_ATTENTION_SOURCE = (
    "SGLang's 'DeepSeek V3/V3.1/R1 Usage' page: 'Append --enable-dp-attention --tp 8 --dp 8 ... when using 8 H200 "
    "GPUs', not for low-latency small-batch use; its 'DP, DPA and SGLang DP Router' guide: DPA for MLA models, "
    "whose single KV head TP duplicates on every GPU (sgl-project/sglang docs/basic_usage/deepseek_v3 and "
    "docs/advanced_features/dp_dpa_smg_guide, commit 0f4513c2f46b)")


@dataclass(frozen=True)
class Layout:
    """How the server's GPUs serve: ``dp`` replicas of the model, each over ``tp`` GPUs (SGLang's
    --dp-size: world size = dp x tp, server_args.py compute_world_size), attention data-parallel
    over ``attn_dp`` ranks inside each TP group (no more GPUs). ``chosen``: the checkpoint's facts
    chose it (the model-facts layer sets it); else a layer set the TP and ``dp`` fills the GPUs.
    ``idle``: why GPUs stay idle, when they do."""

    tp: int
    dp: int
    attn_dp: int
    reason: str
    dp_reason: str
    attn_dp_reason: str = ""
    chosen: bool = False
    idle: str | None = None

    @property
    def serving(self) -> int:
        return self.tp * self.dp

    def as_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "dp": self.dp, "dp_attention": self.attn_dp > 1, "attn_dp": self.attn_dp,
                "gpus_serving": self.serving, "reason": self.reason, "idle": self.idle}


def _candidates(gpus: GpuSet, nnodes: int) -> list[int]:
    """TP sizes SGLang can run here: on one node the powers of two up to its GPUs and the GPU
    count itself; over a tp group's nodes, every node the same number of ranks, dividing its GPUs."""
    out, tp = [], 1
    while tp <= gpus.count * nnodes:
        if nnodes == 1 or (tp % nnodes == 0 and gpus.count % (tp // nnodes) == 0):
            out.append(tp)
        tp *= 2
    if nnodes == 1 and gpus.count not in out:
        out.append(gpus.count)
    return out


@dataclass(frozen=True)
class _Fit:
    tp: int
    budget: sizing.Budget | None

    @property
    def tokens(self) -> int | None:
        return self.budget.kv_tokens if self.budget is not None else None


def choose_layout(host: str, facts: ModelFacts, gpus: GpuSet, nnodes: int, fraction: float | None,
                  kv_dtype: str | None, vision: bool = False, objective: str = "throughput",
                  context: int | None = None, dp: int | None = None, attn_dp_declared: bool = False,
                  version: str | None = None, prefill_graph: bool = True, speed: Speed | None = None,
                  spec_steps: int = 0, state_args: Mapping[str, Any] | None = None) -> Layout:
    """The host's layout: TP x DP replicas that fill the GPUs, each TP splitting the heads
    (sizing.heads_fit) and holding at least this project's KV floor (sizing.floor_kv_tokens).

    throughput: the smallest TP whose KV cache holds the model's context (the declared
    context_length, else its max positions), in as many replicas as fill the GPUs; when no TP
    holds it, the largest (the context is then cut, but never while GPUs could hold more). An MLA
    model over all of one node's GPUs runs DP attention (dp = tp), as SGLang's pages do.
    latency: the largest TP, every GPU in one replica where the heads allow.
    A TP that divides the GPU count is preferred (no GPU idle); ``dp`` declared: the TP is chosen
    within the GPUs the replicas leave. PlanError with the numbers when no TP holds the floor."""
    total = gpus.count * nnodes
    need, floor = sizing.min_kv_tokens(facts), sizing.floor_kv_tokens(facts)
    target = max(context, need) if context else (facts.context_limit or need)
    if facts.context_limit:
        target = min(target, facts.context_limit)  # a longer declared context is lowered anyway
    replicas = dp or 1
    heads = f"{facts.num_attention_heads} heads / {facts.num_key_value_heads} KV heads"
    tried: list[str] = []
    fits: list[_Fit] = []
    for tp in _candidates(gpus, nnodes):
        if tp * replicas > total:
            continue
        problem = sizing.heads_fit(facts, tp) or sizing.dense_split_problem(facts, tp)
        if problem:
            tried.append(f"TP {tp}: {problem}")
            continue
        b = sizing.budget(facts, tp, gpus.memory_mib, fraction, kv_dtype, vision=vision, version=version,
                          prefill_graph=prefill_graph, sm_major=gpus.sm_major, **(state_args or {}))
        if b is not None and b.kv_tokens < floor:
            tried.append(f"TP {tp}: weights {b.weights / sizing.GIB:.1f} GiB/GPU leave ~{b.kv_tokens:,} KV tokens "
                         f"of the {need:,} preferred ({b.pool / sizing.GIB:.1f} GiB pool)")
            continue
        fits.append(_Fit(tp, b))
    if not fits:
        raise PlanError(host, "tp_size (model-facts)",
                        f"no TP up to the {total} GPU(s) fits {facts.model} "
                        f"({(facts.total_weight_bytes or 0) / sizing.GIB:.1f} GiB of weights) on "
                        f"{gpus.memory_gib:g} GiB GPUs with a KV cache of at least {floor:,} tokens (project policy)"
                        + (f" in {replicas} replicas (dp_size)" if dp else "") + f": {'; '.join(tried)}")
    whole = [f for f in fits if (total // replicas) % f.tp == 0] or fits  # no GPU idle, where a TP allows
    largest = whole[-1]
    attn_dp = 1
    if nnodes > 1:
        pick = largest
        why = (f"TP {pick.tp} over the tp group's {nnodes} nodes x {gpus.count} GPUs: SGLang runs no data-parallel "
               "replicas across nodes without DP attention (server_args.py _handle_data_parallelism)")
    elif objective == "latency":
        pick = largest
        why = f"sglang_objective latency: the largest TP that splits {heads} and fits"
    elif facts.mla and largest.tp == total > 1 and not dp and not attn_dp_declared:
        pick, attn_dp = largest, largest.tp
        why = (f"an MLA model ({facts.kv_lora_rank} + {facts.qk_rope_head_dim} latent, one KV head that TP would "
               f"replicate on every rank) under sglang_objective throughput: TP {pick.tp} over all {total} GPUs "
               f"with DP attention")
    elif largest.budget is None:
        pick = largest
        why = (f"the checkpoint gives no weight size to check memory against: the largest TP that splits {heads}, "
               "so the weights have the most room" + (f" (not {'; '.join(tried)})" if tried else ""))
    else:
        # The smallest TP that holds the context, one that divides the GPUs first; only a TP that
        # holds it leaves GPUs idle (said in a warning), never a cut context.
        full = ([f for f in whole if f.tokens is not None and f.tokens >= target]
                or [f for f in fits if f.tokens is not None and f.tokens >= target])
        if full:
            pick = full[0]
            why = (f"sglang_objective throughput: the smallest TP that splits {heads} and holds the {target:,}-token "
                   "context")
            ranked = [f for f in full if (total // replicas) % f.tp == 0]
            if speed is not None and not dp and len(ranked) > 1 and pick in ranked:
                # ranked by predicted speed (plan/layout_rank.py): a larger TP only where it serves more
                by = [(f.tp, total // f.tp, f.tokens, f.budget.max_requests if f.budget else None) for f in ranked]
                tp, why = speed.choose(facts, kv_dtype, by, spec_steps, pick.tp, why)
                pick = next(f for f in ranked if f.tp == tp)
        else:
            pick = largest
            why = (f"no TP holds the {target:,}-token context; TP {pick.tp} holds the most of it on these GPUs, so the "
                   "context is cut only as far as every GPU cannot hold it")
    if pick.budget is not None:
        why += f": {pick.budget.describe()}"
    if dp:
        replicas = dp
    elif nnodes == 1 and not attn_dp_declared and attn_dp == 1:
        replicas = max(1, total // pick.tp)
    else:
        replicas = 1
    dp_why = (f"dp_size {replicas} declared" if dp else
              f"{replicas} replica(s) of TP {pick.tp} fill the {total} GPUs" if replicas > 1 else
              f"one replica of TP {pick.tp}")
    idle = None
    if pick.tp * replicas < total:
        cuts = "; ".join(f"TP {f.tp} holds ~{f.tokens:,} of {target:,} tokens" for f in whole
                         if f.tokens is not None and f.tokens < target)
        idle = _idle_reason(total, pick.tp, replicas, nnodes, tried, dp, attn_dp_declared, cuts)
    attn_why = (f"DP attention over the {attn_dp} ranks of TP {pick.tp} (dp = tp): {DP_ATTENTION_SOURCE}"
                if attn_dp > 1 else "")
    return Layout(tp=pick.tp, dp=replicas, attn_dp=attn_dp, reason=why, dp_reason=dp_why, attn_dp_reason=attn_why,
                  chosen=True, idle=idle)


def _idle_reason(total: int, tp: int, dp: int, nnodes: int, tried: Sequence[str], dp_declared: int | None,
                 attn_dp_declared: bool, smaller_cuts: str = "") -> str:
    if dp_declared:
        return f"dp_size {dp_declared} is declared"
    if attn_dp_declared:
        return ("attn_dp_size is declared: the plan adds no replicas beside DP attention (before 0.5.23 both "
                "are SGLang's --dp-size)")
    if nnodes > 1:
        return "no TP that splits the heads uses every node's GPUs"
    why = f"{total} GPUs are not a multiple of TP {tp}"
    others = [*tried, *([smaller_cuts] if smaller_cuts else [])]
    if others:
        why += f", and no other TP holds the context ({'; '.join(others)})"
    return why


def fill_layout(tp: int, where: str, gpus: GpuSet, nnodes: int, dp: int | None, attn_dp: int) -> Layout:
    """The layout around a TP a layer set: the declared replicas, else as many as fill the GPUs
    (one node only: SGLang runs no replicas across nodes without DP attention, server_args.py
    _handle_data_parallelism; none beside declared DP attention, which SGLang before 0.5.23
    spells with the same --dp-size)."""
    total = gpus.count * nnodes
    if dp:
        replicas, why = dp, f"dp_size {dp} declared"
    elif nnodes == 1 and attn_dp <= 1:
        replicas = max(1, total // tp)
        why = (f"{replicas} replicas of TP {tp} ({where}) fill the {total} GPUs" if replicas > 1
               else f"one replica of TP {tp} ({where})")
    else:
        replicas, why = 1, f"one replica of TP {tp} ({where})"
    idle = None
    if tp * replicas < total:
        if dp:
            idle = f"dp_size {dp} is declared"
        elif nnodes > 1:
            idle = f"TP {tp} ({where}) leaves GPUs of the tp group's nodes unused"
        elif attn_dp > 1:
            idle = _idle_reason(total, tp, replicas, nnodes, (), None, True)
        else:
            idle = f"{total} GPUs are not a multiple of TP {tp} ({where})"
    return Layout(tp=tp, dp=replicas, attn_dp=attn_dp, reason=f"TP {tp} ({where})", dp_reason=why, idle=idle)


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
              kv_dtype: str | None, vision: bool = False, attn_dp: int = 1, version: str | None = None,
              prefill_graph: bool = True, state_args: Mapping[str, Any] | None = None) -> list[tuple[str, Any, str]]:
    """(intent, value, reason) set at the model-facts layer; ``declared`` are inventory values
    the sizing must respect (mem_fraction_static, ep_size); ``attn_dp``: DP-attention ranks."""
    out: list[tuple[str, Any, str]] = [("tp_size", tp, tp_reason)]
    ep = choose_ep(facts, tp)
    if ep is not None and "ep_size" not in declared:
        out.append(("ep_size", ep[0], ep[1]))
    frac = declared.get("mem_fraction_static")
    b = sizing.budget(facts, tp, gpus.memory_mib, frac, kv_dtype, vision=vision, attn_dp=attn_dp, version=version,
                      prefill_graph=prefill_graph, sm_major=gpus.sm_major, **(state_args or {}))
    if b is None:
        return out
    if "mem_fraction_static" not in declared:
        mla_graph = facts.mla and prefill_graph and _mla_graph(version)
        out.append(("mem_fraction_static", b.fraction,
                    f"SGLang's own sizing, written down: {gpus.memory_gib:g} GiB less a {b.reserve / sizing.GIB:.1f} "
                    f"GiB reserve for activations and CUDA graphs"
                    f"{' (the MLA prefill graph reserves 1.5 GiB)' if mla_graph else ''}"
                    f"{' and the vision tower (scaled by its size, sizing.vlm_fraction)' if vision else ''}"
                    f"{_text_only_note(facts, version) if facts.vision and not vision else ''}"
                    f"{f' (DP attention over {attn_dp} ranks pads more)' if attn_dp > 1 else ''}; "
                    f"{b.describe()}"))
    limit = facts.context_limit
    if limit:
        context = min(limit, _round_down(b.kv_tokens))
        if context == limit:
            why = f"the model's {limit:,} ({facts.context_limit_source}); the KV cache holds ~{b.kv_tokens:,} tokens"
        else:
            why = (f"lowered from the model's {limit:,} positions to what the KV cache holds (~{b.kv_tokens:,} "
                   "tokens)")
        if context > 0:
            out.append(("context_length", context, why))
    return out


def _text_only_note(facts: ModelFacts, version: str | None) -> str:
    """Why a checkpoint with a vision tower gets no VLM reduction: SGLang serves it text-only."""
    arch = facts.architecture
    if sizing.multimodal_by_default(arch, version):
        return " (the vision tower is not served: text only)"
    return (f" (no vision-tower reduction: SGLang {version or ''} serves {arch} text-only unless "
            "--enable-multimodal, configs/model_config.py mm_disabled_models)").replace("SGLang  ", "SGLang ")


def _mla_graph(version: str | None) -> bool:
    """Whether the MLA prefill-graph reserve is in this budget's release (sizing.prefill_graph_mib)."""
    return sizing.prefill_graph_mib(version, 8192, mla=True) > 0


def _round_down(tokens: int) -> int:
    return tokens // 1024 * 1024 if tokens >= 1024 else tokens


def reconcile(facts: ModelFacts, gpus: GpuSet, resolved: dict[str, Resolved], warnings: list[str],
              kv_dtype_of: Callable[[], str | None], support: ModelSupport | None = None,
              version: str | None = None) -> None:
    """After every layer: drop what a profile set that this checkpoint cannot do, lower a
    context the model or its KV cache cannot hold, and say what the GPU does with the
    checkpoint's quantization. Inventory values are left for the constraint checker."""
    spec = resolved["speculative_algorithm"]
    algo = str(spec.value or "").upper()
    problem = None
    if algo in constraints.SELF_DRAFT_ALGORITHMS:
        problem = constraints.self_draft_problem(facts, support, version)
    elif algo == "EAGLE3" and not facts.mtp_layers:
        problem = f"{facts.model} carries no MTP/NextN layers to draft with"
    if problem and spec.layer not in DECLARED:
        warnings.append(f"speculative_algorithm {spec.value} ({spec.layer} layer) dropped: {problem}")
        for key in ("speculative_" + k for k in ("algorithm", "num_steps", "eagle_topk", "num_draft_tokens")):
            resolved[key] = Resolved(key, None, LAYER, "the checkpoint has no MTP/NextN draft SGLang can load")
    request_cap.under_speculative_decoding(resolved, LAYER)
    request_cap.for_draft_states(resolved, LAYER, lambda cap: sizing.planned_budget(
        facts, gpus.memory_mib, {**{k: r.value for k, r in resolved.items()}, "max_running_requests": cap},
        kv_dtype_of(), version, gpus.sm_major))
    text = resolved["text_only"]
    if text.value and not facts.vision and text.layer not in DECLARED:
        warnings.append(f"text_only ({text.layer} layer) dropped: {facts.model} has no vision tower")
        resolved["text_only"] = Resolved("text_only", False, LAYER, "the checkpoint has no vision tower")
    b = sizing.planned_budget(facts, gpus.memory_mib, {k: r.value for k, r in resolved.items()}, kv_dtype_of(),
                              version, gpus.sm_major)
    _lower_context(facts, resolved, warnings, b)
    _kv_policy_note(facts, resolved, warnings, b)
    _quantization_note(facts, gpus, warnings)


def _lower_context(facts: ModelFacts, resolved: dict[str, Resolved], warnings: list[str],
                   b: sizing.Budget | None) -> None:
    ctx = resolved["context_length"]
    if ctx.value is None:
        return
    limit = facts.context_limit
    lowest, why = ctx.value, ""
    if limit and lowest > limit:
        lowest, why = limit, f"the model's {facts.context_limit_source} is {limit:,}"
    if b is not None and b.kv_bytes > 0 and lowest > b.kv_tokens:
        lowest, why = _round_down(b.kv_tokens), f"the KV cache holds ~{b.kv_tokens:,} tokens ({b.describe()})"
    if lowest != ctx.value and lowest > 0:
        warnings.append(f"context_length {ctx.value:,} ({ctx.layer} layer) lowered to {lowest:,}: {why}")
        resolved["context_length"] = Resolved("context_length", lowest, LAYER, f"lowered from {ctx.value:,}: {why}")


def _kv_policy_note(facts: ModelFacts, resolved: Mapping[str, Resolved], warnings: list[str],
                    b: sizing.Budget | None) -> None:
    """This project's policy: a KV cache below the preferred one request (sizing.min_kv_tokens) but
    at or above the floor plans, with the context it leaves said in a warning (below the floor
    the constraint kv-cache-holds-one-request refuses)."""
    need, floor = sizing.min_kv_tokens(facts), sizing.floor_kv_tokens(facts)
    if b is None or b.kv_bytes <= 0 or not floor <= b.kv_tokens < need:
        return
    ctx = resolved["context_length"].value
    warnings.append(f"project policy: the KV cache holds ~{b.kv_tokens:,} tokens at TP {resolved['tp_size'].value}, "
                    f"less than the preferred {need:,}-token request (floor {floor:,})"
                    + (f"; context_length is {ctx:,}" if ctx else "")
                    + ": more GPUs (tp_size), a higher mem_fraction_static or kv_cache_dtype fp8_e4m3 would hold "
                    f"more ({b.describe()})")


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
