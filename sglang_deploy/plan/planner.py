"""DeploySpec + hardware -> Plan: every launch setting with its value, layer and reason.

Resolution, lowest first: SGLang defaults < architecture profile < topology
rules < model facts (the checkpoint's own config: facts_layer.py) < model
profile (tuned knowledge) < tuning record (what `sglang-deploy tune` measured
on this hardware class: tuning/record.py) < inventory group < host < trial (a
tuning run's trial, set by the tuner only). Then the rules' ``enforce`` parts
run over the result: what the hardware cannot do is switched off even if host
data, a tuning record or a trial asked for it, with a warning. With model
facts, the constraint checker (constraints.py) then refuses what SGLang would
refuse at load time.
Finally the dialect of the SGLang version spells the intents as argv, and the
version's catalog checks it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

from sglang_deploy.plan import catalog as catalogs
from sglang_deploy.plan import constraints, facts_layer
from sglang_deploy.plan.dialects import DialectError, compile_intents
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.hardware import (GpuSet, HostHardware, check_declared_matches_probe, declared_hardware,
                                         parse_probe, select_gpus)
from sglang_deploy.plan.intents import INTENTS, Resolved
from sglang_deploy.plan.modelfacts import FactsLookup, FactsUnavailable, ModelFacts
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.profiles import ArchProfile, Knowledge, ModelProfile, Rule, load_knowledge
from sglang_deploy.plan.spec import DeploySpec, IntentSetting
from sglang_deploy.plan.spec_checks import check_serving_args, normalize_version
from sglang_deploy.plan.tpgroups import TpNode
from sglang_deploy.plan.tuning_record import TuningRecord, class_of, match
from sglang_deploy.plan.weights import Weights

DEFAULT_TIMEOUT_START_S = 1200


def _hardware(spec: DeploySpec, knowledge: Knowledge, probe: Any | None) -> HostHardware:
    declared = None
    if spec.declared_gpus is not None:
        declared = declared_hardware(spec.host, spec.declared_gpus, knowledge.gpus)
    if probe is not None:
        probed = parse_probe(spec.host, probe)
        if declared is not None:
            check_declared_matches_probe(spec.host, declared, probed, knowledge.gpus)
        return probed
    if declared is None:
        raise PlanError(spec.host, "sglang_gpus",
                        "no hardware to plan for: declare it (e.g. {model: 'RTX A6000', count: 2}) or probe the host")
    return declared


def _model_profile(spec: DeploySpec, knowledge: Knowledge) -> ModelProfile | None:
    if spec.model_profile is not None:
        profile = knowledge.models.get(spec.model_profile)
        if profile is None:
            raise PlanError(spec.host, "sglang_model_profile",
                            f"unknown model profile {spec.model_profile!r}; known: {', '.join(sorted(knowledge.models))}")
        return profile
    return knowledge.model_for(spec.model_path)


def _facts(gpus: GpuSet, arch: ArchProfile, model: ModelProfile | None, tp: int, nnodes: int) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "arch": gpus.arch,
        "topology": gpus.topology,
        # The TP ranks on this host: what its interconnect rules are about (a tp group's
        # ranks on other hosts talk over the network, whatever this host's topology).
        "tp_size": tp // nnodes,
        "nnodes": nnodes,
        "gpu_count": gpus.count,
        "p2p": gpus.p2p,
        "geforce": gpus.geforce,
        "nvswitch": gpus.nvswitch,
        "memory_tier": gpus.memory_tier,
    }
    facts.update({f"cap_{k}": v for k, v in arch.capabilities.items()})
    for key in ("moe", "multimodal", "mtp", "fp8_checkpoint", "hybrid_attention", "num_attention_heads"):
        facts[f"model_{key}"] = None
    if model is not None:
        facts.update({f"model_{k}": v for k, v in model.facts.items()})
    return facts


def _profile_settings(model: ModelProfile | None, facts: ModelFacts | None) -> tuple[Any, ...]:
    """A profile's tuned settings, plus its fallback sizing when no checkpoint facts answer."""
    if model is None:
        return ()
    return model.settings if facts is not None else model.settings + model.fallback


def _declared(spec: DeploySpec, name: str) -> Any:
    """The value the trial, the host, the group or the tuning record sets (None: none does)."""
    for layer in (spec.trial_intents, spec.host_intents, spec.group_intents, spec.tuned_intents):
        if name in layer:
            return layer[name].value
    return None


def _serves_vision(spec: DeploySpec, model: ModelProfile | None, facts: ModelFacts) -> bool:
    """The checkpoint's vision tower will be loaded: it has one and no layer asks for text only."""
    text_only = _declared(spec, "text_only")
    if text_only is None:
        text_only = next((s.value for s in _profile_settings(model, facts) if s.intent == "text_only"), False)
    return facts.vision and not text_only


def _tp_size(spec: DeploySpec, arch: ArchProfile, model: ModelProfile | None, gpus: GpuSet,
             nnodes: int = 1, facts: ModelFacts | None = None) -> tuple[int, str | None]:
    """The TP size and, when the checkpoint's facts chose it, why (None: set by a layer)."""
    value, field_name, chosen = INTENTS["tp_size"].default, "sglang_intents.tp_size", False
    for setting in (*arch.settings, *_profile_settings(model, facts)):
        if setting.intent == "tp_size":
            value, chosen = setting.value, True
    for layer in (spec.tuned_intents, spec.group_intents, spec.host_intents, spec.trial_intents):
        if "tp_size" in layer:
            value, chosen = layer["tp_size"].value, True
    if facts is not None and not chosen:
        return facts_layer.choose_tp(spec.host, facts, gpus, nnodes, _declared(spec, "mem_fraction_static"),
                                     _declared(spec, "kv_cache_dtype"), _serves_vision(spec, model, facts))
    total = gpus.count * nnodes
    tp = total if value == "all" else int(value)
    if nnodes > 1:
        # SGLang runs tp_size / nnodes ranks on every node.
        where = f"{nnodes} nodes x {gpus.count} GPU(s)"
        if tp % nnodes:
            raise PlanError(spec.host, field_name, f"TP size {tp} is not a multiple of the {nnodes} nodes of the tp "
                                                   f"group: SGLang runs the same number of ranks on every node")
        if tp > total:
            raise PlanError(spec.host, field_name, f"TP size {tp} is larger than the {where} the tp group has")
        if gpus.count % (tp // nnodes):
            raise PlanError(spec.host, field_name, f"TP size {tp} ({tp // nnodes} per node) does not divide the "
                                                   f"{gpus.count} GPUs each node uses")
    elif tp > gpus.count:
        raise PlanError(spec.host, field_name, f"TP size {tp} is larger than the {gpus.count} GPU(s) the server uses")
    elif gpus.count % tp:
        raise PlanError(spec.host, field_name, f"TP size {tp} does not divide the {gpus.count} GPUs the server uses")
    heads = model.facts.get("num_attention_heads") if model and facts is None else None
    if heads and heads % tp:
        raise PlanError(spec.host, field_name,
                        f"TP size {tp} does not divide the {heads} attention heads of {model.key}")  # type: ignore[union-attr]
    return tp, None


def plan_host(
    spec: DeploySpec,
    probe: Any | None = None,
    sglang_version: str | None = None,
    knowledge: Knowledge | None = None,
    node: TpNode | None = None,
    facts: FactsLookup | None = None,
    weights: Weights | None = None,
    tuning: Sequence[TuningRecord] = (),
) -> Plan:
    """Plan one host. ``probe`` is the GPU probe's JSON; without it, declared hardware is used.

    A member of a multi-node tp group needs its ``node`` (``tpgroups.assign`` over
    the group's members); the members' plans are then checked together
    (``inventory_plan.check_plans``). ``facts`` are the checkpoint's (``sglang_deploy/deploy/`` looks them
    up); without them (None, or FactsUnavailable saying why) the model profile's fallback
    sizing is used. ``weights`` (``weights.plan_weights``): a staged snapshot
    is what ``--model-path`` names, served under the model's id, with ``HF_HUB_OFFLINE=1``.
    ``tuning``: the tuning records known (``tuning.record.load_records``); the one matching this
    host's hardware class is the "tuned" layer, and the plan says why the others were not applied."""
    knowledge = knowledge or load_knowledge()
    host = spec.host
    _check_node(spec, node)
    nnodes = node.nnodes if node else 1
    version, catalog = _version_and_catalog(spec, sglang_version)
    gpus = select_gpus(host, _hardware(spec, knowledge, probe), knowledge.arch_of_capability, spec.gpu_indices)
    arch = knowledge.archs[gpus.arch]
    model = _model_profile(spec, knowledge)
    warnings: list[str] = list(spec.warnings)
    usable = _usable_facts(spec, model, facts, warnings)
    record, tuning_notes = _tuning_record(spec, tuning, gpus, version, usable, weights, node)
    if record is not None:
        spec = replace(spec, tuned_intents={k: IntentSetting(v, record.reason(k)) for k, v in record.intents.items()})

    tp, tp_reason = _tp_size(spec, arch, model, gpus, nnodes, usable)
    rule_facts = _facts(gpus, arch, model, tp, nnodes)
    if usable is not None:
        rule_facts.update(facts_layer.rule_facts(usable))
    rules_by_layer: dict[str, tuple[Rule, ...]] = {
        "arch": arch.rules,
        "topology": knowledge.topology_rules,
        "model": knowledge.model_rules + (model.rules if model and usable is None else ()),
    }
    resolved: dict[str, Resolved] = {
        name: Resolved(name, d.default, "sglang-default", d.default_reason) for name, d in INTENTS.items()
    }

    def apply(layer: str, name: str, value: Any, reason: str, source: str | None = None) -> None:
        if name == "tp_size" and value == "all":
            reason = f"{reason} ({gpus.count} GPUs" + (f" x {nnodes} nodes)" if nnodes > 1 else ")")
            value = gpus.count * nnodes
        resolved[name] = Resolved(name, value, layer, reason, source)

    for setting in arch.settings:
        apply("arch", setting.intent, setting.value, setting.reason, setting.source)
    for layer in ("arch", "topology", "model"):
        if layer == "model" and usable is not None:
            _apply_facts(spec, model, usable, tp, tp_reason, gpus, resolved, apply)
        for rule in rules_by_layer[layer]:
            if rule.set and rule.applies(rule_facts):
                for s in rule.set:
                    apply(layer, s.intent, s.value, s.reason, s.source)
        if layer == "model":
            for setting in _profile_settings(model, usable):
                apply("model", setting.intent, setting.value, setting.reason, setting.source)
    _apply_weights(spec, weights, apply, warnings)
    if record is not None:
        below = {k: r.value for k, r in resolved.items()}
        for name, setting in spec.tuned_intents.items():
            apply("tuned", name, setting.value, record.reason(name, below))
    _apply_inventory(spec, node, apply)
    _enforce(rules_by_layer, {**rule_facts, **{f"i_{k}": r.value for k, r in resolved.items()}}, resolved, warnings)

    if usable is not None:
        facts_layer.reconcile(usable, gpus, resolved, warnings, lambda: resolved["kv_cache_dtype"].value)
    _check_consistency(host, resolved, warnings)
    if usable is None:
        _check_memory(gpus, model, resolved, warnings, nnodes)
    else:
        _check_constraints(spec, usable, gpus, resolved, warnings)

    compiled = _compile(spec, version, catalog, resolved, model, usable, weights)
    warnings.extend(compiled.warnings)
    argv = [*compiled.argv, *_checked_extra_args(spec, compiled.argv, catalog)]
    _check_argv(spec, version, catalog, argv)
    deprecated = _deprecated(version, catalog, argv, warnings)
    env, env_comments = _service_env(spec, gpus, resolved)
    _weights_env(weights, env, env_comments)
    nccl, nccl_comments = _nccl_conf(spec, resolved)
    timeout = spec.service.timeout_start_s or int(
        (model.service.get("timeout_start_s") if model else None) or DEFAULT_TIMEOUT_START_S)
    return Plan(
        host=host, sglang_version=version, model_path=spec.model_path, model_profile=model.key if model else None,
        gpus=gpus, arch_name=arch.name, intents=resolved, argv=argv, argv_env_refs=compiled.env_refs,
        env=env, env_comments=env_comments, nccl_conf=nccl, nccl_comments=nccl_comments, secrets=spec.secrets,
        warnings=warnings, service=spec.service, timeout_start_s=timeout, deprecated=deprecated, tp_node=node,
        facts=usable, facts_unavailable=facts if isinstance(facts, FactsUnavailable) else None, weights=weights,
        tuning=record, tuning_notes=tuning_notes,
    )


def _check_node(spec: DeploySpec, node: TpNode | None) -> None:
    if spec.tp_group is not None and node is None:
        raise PlanError(spec.host, "sglang_tp_group", f"member of tp group {spec.tp_group.name}: plan it with the "
                                                      "other members (its rank depends on them)")
    if node is not None and (spec.tp_group is None or spec.tp_group.name != node.group):
        raise ValueError(f"{spec.host} is not a member of tp group {node.group}")


def _version_and_catalog(spec: DeploySpec, sglang_version: str | None) -> tuple[str, "catalogs.Catalog"]:
    version = spec.sglang_version if sglang_version is None else normalize_version(spec.host, "--sglang-version",
                                                                                      sglang_version)
    try:
        return version, catalogs.load_catalog(version)
    except catalogs.UnsupportedVersion as exc:
        raise PlanError(spec.host, "sglang_version" if sglang_version is None else "--sglang-version",
                        str(exc)) from None


def _tuning_record(spec: DeploySpec, tuning: Sequence[TuningRecord], gpus: GpuSet, version: str,
                   facts: ModelFacts | None, weights: Weights | None,
                   node: TpNode | None) -> tuple[TuningRecord | None, list[str]]:
    """The tuning record for this host's hardware class, and why the others do not apply."""
    if not tuning:
        return None, []
    if node is not None:
        return None, [f"tuning records are not applied to a member of a multi-node tp group (tp group {node.group}): "
                      "a record measures one host's server"]
    return match(tuning, class_of(gpus, version, spec.model_path, facts, weights))


def _usable_facts(spec: DeploySpec, model: ModelProfile | None, facts: FactsLookup | None,
                  warnings: list[str]) -> ModelFacts | None:
    """The facts to size from (None: the profile's fallback, with a warning saying why)."""
    host = spec.host
    if isinstance(facts, FactsUnavailable) and facts.field:
        raise PlanError(host, facts.field, facts.reason)
    if isinstance(facts, ModelFacts):
        return facts
    if facts is not None:
        warnings.append(f"no model facts for {facts.model}: {facts.reason}; sized from the model profile instead")
    if model is None and facts is not None and _declared(spec, "tp_size") is None:
        # Sizing would be a guess (SGLang's own default is one GPU): a plan that cannot load,
        # found only after the old server stopped, is worse than no plan.
        raise PlanError(host, "sglang_model",
                        f"no model facts for {spec.model_path} ({facts.reason}) and no model profile matches it: "
                        "nothing to size the plan from; run `sglang-deploy models fetch MODEL`, set "
                        "sglang_model_dir to a copy of its config.json, or declare sglang_intents.tp_size")
    if model is None:
        warnings.append(f"no model profile matches {spec.model_path!r}: model-dependent rules (text-only, "
                        "speculative decoding, head count) are not applied; set sglang_model_profile if one fits")
    return None


def _apply_weights(spec: DeploySpec, weights: Weights | None, apply: Callable[..., None],
                   warnings: list[str]) -> None:
    if weights is None:
        return
    if weights.snapshot_dir != spec.model_path:
        # SGLang names the model by --model-path unless --served-model-name is given
        # (sglang/srt/server_args.py, ServerArgs.__post_init__: served_model_name = model_path).
        apply("model", "served_model_name", spec.model_path, f"the model's id: --model-path is its snapshot in "
              f"the model store ({weights.snapshot_dir}), and clients keep asking for {spec.model_path}")
    if weights.source in ("hub", "controller") and not weights.staged:
        warnings.append(f"weights: {weights.origin}")


def _apply_inventory(spec: DeploySpec, node: TpNode | None, apply: Callable[..., None]) -> None:
    """The inventory's group and host layers, then the tp group's rank settings."""
    for layer, settings in (("group", spec.group_intents), ("host", spec.host_intents)):
        for name, setting in settings.items():
            apply(layer, name, setting.value, setting.reason or f"set in inventory {layer} data", None)
    for name, setting in spec.trial_intents.items():
        apply("trial", name, setting.value, setting.reason or "a tuning run's trial", None)
    if node is not None:
        members = ", ".join(node.members)
        apply("group", "nnodes", node.nnodes, f"tp group {node.group} (sglang_tp_group) has {node.nnodes} "
                                              f"members: {members}")
        apply("group", "node_rank", node.rank, f"position of {spec.host} among the members of tp group "
                                               f"{node.group} in inventory order")
        apply("group", "dist_init_addr", node.dist_init_addr,
              f"rank 0 ({node.leader}) node address and the group's rendezvous port (sglang_node_address, "
              "sglang_dist_init_port)")


def _enforce(rules_by_layer: Mapping[str, tuple[Rule, ...]], final_facts: Mapping[str, Any],
             resolved: dict[str, Resolved], warnings: list[str]) -> None:
    """What the hardware cannot do, whatever a higher layer asked."""
    for layer in ("arch", "topology", "model"):
        for rule in rules_by_layer[layer]:
            if not rule.enforce or not rule.applies(dict(final_facts)):
                continue
            for s in rule.enforce:
                current = resolved[s.intent]
                if current.value == s.value:
                    continue
                warnings.append(f"{s.intent}={current.value!r} ({current.layer} layer) overridden to {s.value!r}: "
                                f"{s.reason}")
                resolved[s.intent] = Resolved(s.intent, s.value, layer, s.reason, s.source)


def _compile(spec: DeploySpec, version: str, catalog: "catalogs.Catalog", resolved: Mapping[str, Resolved],
             model: ModelProfile | None, facts: ModelFacts | None, weights: Weights | None) -> Any:
    try:
        return compile_intents(
            version=version,
            catalog=catalog,
            intents={k: r.value for k, r in resolved.items()},
            model_path=weights.snapshot_dir if weights is not None else spec.model_path,
            model=facts_layer.dialect_model(model, facts) if facts is not None else model,
            api_key=any(s.name == "api_key" for s in spec.secrets),
        )
    except DialectError as exc:
        layer = resolved[exc.intent].layer
        where = f"sglang_intents.{exc.intent}" if layer in ("group", "host") else f"{exc.intent} ({layer} layer)"
        raise PlanError(spec.host, where, str(exc)) from None


def _checked_extra_args(spec: DeploySpec, argv: list[str], catalog: "catalogs.Catalog") -> tuple[str, ...]:
    _check_extra_args(spec.host, spec.extra_args, argv, catalog)
    check_serving_args(spec.host, spec.extra_args, catalog)
    return spec.extra_args


def _check_argv(spec: DeploySpec, version: str, catalog: "catalogs.Catalog", argv: list[str]) -> None:
    rejections = catalog.check(argv)
    if rejections:
        first = rejections[0]
        field_name = "sglang_extra_args" if first.arg in spec.extra_args else "argv"
        raise PlanError(spec.host, field_name, f"SGLang {version} would refuse {first.arg!r}: {first.message}")


def _deprecated(version: str, catalog: "catalogs.Catalog", argv: list[str], warnings: list[str]) -> list[str]:
    deprecated = []
    for arg in argv:
        option = catalog.resolve(arg.split("=", 1)[0]) if arg.startswith("--") else None
        if option is not None and option.deprecated:
            hint = f"; use {option.replacement}" if option.replacement else ""
            deprecated.append(option.option)
            warnings.append(f"{option.option} is deprecated in SGLang {version}{hint}")
    return deprecated


def _weights_env(weights: Weights | None, env: dict[str, str], comments: dict[str, str]) -> None:
    if weights is not None and (weights.staged or weights.source == "host"):
        # huggingface_hub.constants.HF_HUB_OFFLINE: no Hub call at all; a missing file is an error at
        # start instead of a download while the host serves nothing.
        env["HF_HUB_OFFLINE"] = "1"
        comments["HF_HUB_OFFLINE"] = f"weights are local ({weights.origin}): never download at start"


def _apply_facts(spec: DeploySpec, model: ModelProfile | None, facts: ModelFacts, tp: int,
                 tp_reason: str | None, gpus: GpuSet, resolved: Mapping[str, Resolved], apply: Any) -> None:
    """The model-facts layer: sizing from the checkpoint, respecting declared values it depends on."""
    declared = {k: v for k in ("mem_fraction_static", "ep_size") if (v := _declared(spec, k)) is not None}
    kv_dtype = _declared(spec, "kv_cache_dtype") or resolved["kv_cache_dtype"].value
    vision = _serves_vision(spec, model, facts)
    for name, value, reason in facts_layer.decisions(facts, tp, tp_reason or "", gpus, declared, kv_dtype, vision):
        if name == "tp_size" and tp_reason is None:
            continue  # a layer or the inventory set it; the constraints check it
        apply(facts_layer.LAYER, name, value, reason, facts_layer.describe(facts))


def _view(resolved: Mapping[str, Resolved], gpus: GpuSet, args: Any) -> constraints.PlanView:
    r = {k: v.value for k, v in resolved.items()}
    return constraints.PlanView(
        tp=r["tp_size"], ep=r["ep_size"], gpu_mib=gpus.memory_mib,
        compute_capability=int(round(float(gpus.compute_capability) * 10)),
        mem_fraction=r["mem_fraction_static"], context_length=r["context_length"],
        speculative_algorithm=r["speculative_algorithm"],
        draft_model=any(a.split("=", 1)[0] == "--speculative-draft-model-path" for a in args),
        text_only=r["text_only"], kv_cache_dtype=r["kv_cache_dtype"],
        chunked_prefill=r["chunked_prefill_size"], graph_bs=r["cuda_graph_max_bs_decode"])


def constraint_view(plan: Plan) -> constraints.PlanView:
    """The values the constraint checker reads, from a finished plan (to check it again)."""
    return _view(plan.intents, plan.gpus, plan.argv)


def _check_constraints(spec: DeploySpec, facts: ModelFacts, gpus: GpuSet, resolved: Mapping[str, Resolved],
                       warnings: list[str]) -> None:
    """What SGLang would refuse at load time: a PlanError naming the constraint and its numbers."""
    for v in constraints.check(facts, _view(resolved, gpus, spec.extra_args)):
        if v.constraint.severity == "warning":
            warnings.append(v.message)
            continue
        name = v.constraint.field
        layer = resolved[name].layer
        where = f"sglang_intents.{name}" if layer in ("group", "host") else f"{name} ({layer} layer)"
        raise PlanError(spec.host, where, v.message)


def _check_consistency(host: str, resolved: dict[str, Resolved], warnings: list[str]) -> None:
    algo = resolved["speculative_algorithm"]
    spec_keys = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    if algo.value is None:
        for key in spec_keys:
            layer = resolved[key].layer
            if resolved[key].value is not None and layer in ("group", "host", "trial"):
                raise PlanError(host, f"sglang_intents.{key}" if layer != "trial" else f"{key} (trial layer)",
                                "set without speculative_algorithm: say which algorithm (e.g. NEXTN) as well")
        return
    # SGLang asserts all three or none, and fails when only some are given: complete them.
    steps = resolved["speculative_num_steps"].value
    topk = resolved["speculative_eagle_topk"].value
    why = "completed with SGLang's default: it needs steps, top-k and draft tokens together"
    if steps is None:
        steps = 3
        resolved["speculative_num_steps"] = Resolved("speculative_num_steps", steps, algo.layer, why)
    if topk is None:
        topk = 1
        resolved["speculative_eagle_topk"] = Resolved("speculative_eagle_topk", topk, algo.layer, why)
    draft = resolved["speculative_num_draft_tokens"]
    if topk == 1 and draft.value != steps + 1:
        if draft.value is not None:
            warnings.append(f"speculative_num_draft_tokens={draft.value} with top-k 1: SGLang forces steps + 1; "
                            f"planned {steps + 1}")
        resolved["speculative_num_draft_tokens"] = Resolved(
            "speculative_num_draft_tokens", steps + 1, draft.layer if draft.value is not None else algo.layer,
            "top-k 1 verifies one chain: draft tokens = steps + 1 (SGLang forces it)")
    elif draft.value is None:
        raise PlanError(host, "sglang_intents.speculative_num_draft_tokens",
                        f"needed with speculative_eagle_topk={topk} (> 1): how many draft tokens to verify")
    if resolved["single_batch_overlap"].value and not resolved["ep_size"].value > 1:
        warnings.append("single_batch_overlap is on without expert parallelism: it has no effect")


def _check_memory(gpus: GpuSet, model: ModelProfile | None, resolved: Mapping[str, Resolved],
                  warnings: list[str], nnodes: int = 1) -> None:
    """Warn when the weights alone exceed the static memory pool of the GPUs used (on every node)."""
    weights = model.facts.get("weights_gib") if model else None
    if not weights or resolved["quantization"].value is not None:
        return
    fraction = resolved["mem_fraction_static"].value or 0.9
    count = gpus.count * nnodes
    pool = count * gpus.memory_mib / 1024 * fraction
    if weights > pool:
        warnings.append(f"{model.key} weighs ~{weights} GiB but {count}x {gpus.memory_gib:g} GiB at "  # type: ignore[union-attr]
                        f"mem_fraction_static {fraction:g} gives a {pool:.0f} GiB pool: it will not load")
    elif weights > 0.85 * pool:
        warnings.append(f"{model.key} weights (~{weights} GiB) fill {weights / pool:.0%} of the {pool:.0f} GiB "  # type: ignore[union-attr]
                        "static pool: little room for the KV cache")


# Set from the host's tp group, never by hand: a rank written in extra_args disagrees with the others.
_TP_GROUP_DESTS = {"nnodes", "node_rank", "dist_init_addr"}


def _check_extra_args(host: str, extra: tuple[str, ...], argv: list[str], catalog: "catalogs.Catalog") -> None:
    for i, arg in enumerate(extra):
        spec = catalog.resolve(arg.split("=", 1)[0]) if arg.startswith("-") else None
        if spec is not None and spec.dest in _TP_GROUP_DESTS:
            raise PlanError(host, f"sglang_extra_args[{i}]",
                            f"{arg.split('=', 1)[0]} comes from the host's tp group: set sglang_tp_group (ranks "
                            "follow inventory order) instead")
    planned = {}
    for arg in argv:
        if arg.startswith("--"):
            spec = catalog.resolve(arg.split("=", 1)[0])
            if spec is not None:
                planned[spec.dest] = arg.split("=", 1)[0]
    for i, arg in enumerate(extra):
        if not arg.startswith("-"):
            continue
        spec = catalog.resolve(arg.split("=", 1)[0])
        if spec is not None and spec.dest in planned:
            raise PlanError(host, f"sglang_extra_args[{i}]",
                            f"{arg.split('=', 1)[0]} sets what the plan already sets with {planned[spec.dest]}; "
                            "override the intent in sglang_intents instead")


def _service_env(spec: DeploySpec, gpus: GpuSet, resolved: Mapping[str, Resolved]) -> tuple[dict[str, str], dict[str, str]]:
    env: dict[str, str] = {}
    comments: dict[str, str] = {}

    def put(name: str, value: str, comment: str) -> None:
        env[name] = value
        comments[name] = comment

    put("CUDA_DEVICE_ORDER", "PCI_BUS_ID",
        "number GPUs in PCI order, as NVML and nvidia-smi do (CUDA's default puts the fastest first)")
    put("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in gpus.indices),
        f"the {gpus.count} GPU(s) this server uses")
    nvls = resolved["nvls"]
    put("NCCL_NVLS_ENABLE", "1" if nvls.value else "0", f"NVLS {'on' if nvls.value else 'off'}: {nvls.reason}")
    put("PYTHONUNBUFFERED", "1", "log lines reach the journal as they are written")
    if spec.gloo_socket_ifname:
        # torch's Gloo (the CPU process group SGLang also creates) reads only its process
        # environment; /etc/nccl.conf is NCCL's alone.
        put("GLOO_SOCKET_IFNAME", spec.gloo_socket_ifname,
            "network interface(s) torch's Gloo uses between nodes (sglang_gloo_socket_ifname)")
    for name, value in spec.extra_env.items():
        put(name, value, "set in inventory data (sglang_env)")
    return env, comments


def _nccl_conf(spec: DeploySpec, resolved: Mapping[str, Resolved]) -> tuple[dict[str, str], dict[str, str]]:
    conf: dict[str, str] = {}
    comments: dict[str, str] = {}
    if spec.nccl_socket_ifname:
        conf["NCCL_SOCKET_IFNAME"] = spec.nccl_socket_ifname
        comments["NCCL_SOCKET_IFNAME"] = ("network interface(s) NCCL uses between nodes (sglang_nccl_socket_ifname); "
                                          "NCCL reads it here unless the environment sets it")
    debug = resolved["nccl_debug"]
    if debug.value:
        conf["NCCL_DEBUG"] = debug.value
        comments["NCCL_DEBUG"] = debug.reason
    p2p = resolved["nccl_p2p_disable"]
    if p2p.value:
        conf["NCCL_P2P_DISABLE"] = "1"
        comments["NCCL_P2P_DISABLE"] = p2p.reason
    return conf, comments


__all__ = ["Plan", "constraint_view", "plan_host"]
