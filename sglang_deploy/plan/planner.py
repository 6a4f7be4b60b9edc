"""DeploySpec + hardware -> Plan: every launch setting with its value, layer and reason.

The layers apply in the order of ``layers.LAYERS``, lowest first (SGLang defaults,
architecture profile, topology rules, model facts, model profile, tuning record,
inventory group, host, trial); each one's values come from one function of
layer_values.py (``SETTERS``). The tuning record and a tuning run's trial are inputs of
:func:`plan_host`, not part of the inventory's DeploySpec. Then the rules' ``enforce``
parts run over the result: what the hardware cannot do is switched off even if host
data, a tuning record or a trial asked for it, with a warning. The model-facts layer
(facts_layer.py, entered once as a ``FactsLayer``) then drops what the checkpoint cannot
do, and its constraint checker (constraints.py) refuses what SGLang would refuse at load
time. Finally the dialect of the SGLang version spells the intents as argv, and the
version's catalog checks it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from sglang_deploy.plan import catalog as catalogs
from sglang_deploy.plan import (constraints, cuda_needs, fabric, facts_layer, layers, pcie, rdma, recipes, start_budget,
                                transfer)
from sglang_deploy.plan.predicted import gpu_perf, link_of, plan_prediction
from sglang_deploy.plan.dialects import DialectError, compile_intents
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.hardware import (GpuSet, HostHardware, check_declared_matches_probe, declared_hardware,
                                         parse_probe, select_gpus)
from sglang_deploy.plan.intents import INTENTS, Resolved
from sglang_deploy.plan.layout_rank import STATE_INTENTS, Speed
from sglang_deploy.plan.facts_layer import FactsLayer, Layout, fill_layout
from sglang_deploy.plan.modelfacts import FactsLookup, FactsUnavailable, ModelFacts
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.layer_values import SETTERS, HostPlanning
from sglang_deploy.plan.plan_checks import (check_argv, check_consistency, check_layout, check_remote_code,
                                            checked_extra_args, deprecated_options)
from sglang_deploy.plan.profiles import ArchProfile, Knowledge, ModelProfile, Rule, fill_reason, load_knowledge
from sglang_deploy.plan.caches import Caches
from sglang_deploy.plan.service_env import nccl_conf, service_env, weights_env
from sglang_deploy.plan.spec import DeploySpec, IntentSetting
from sglang_deploy.plan.spec_checks import normalize_version
from sglang_deploy.plan.tpgroups import TpNode
from sglang_deploy.plan.tuning_record import LAYOUT, TuningRecord, class_of, layout_words, match
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
            raise PlanError(spec.host, "sglang_model_profile", f"unknown model profile {spec.model_profile!r}; "
                                                               f"known: {', '.join(sorted(knowledge.models))}")
        return profile
    return knowledge.model_for(spec.model_path)


def _facts(gpus: GpuSet, arch: ArchProfile, model: ModelProfile | None, tp: int, nnodes: int,
           fabric_check: fabric.FabricCheck, pcie_check: pcie.PcieCheck) -> dict[str, Any]:
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
        # The NVLink fabric of the GPUs the server uses: ready, not-ready or unknown, and why (fabric.py).
        "fabric": fabric_check.status,
        "fabric_detail": fabric_check.detail,
        # Peer transfers over PCIe between them: clear, broken (ACS redirects), unknown or unused (pcie.py).
        "pcie_p2p": pcie_check.status,
        "pcie_p2p_detail": pcie_check.detail,
    }
    facts.update({f"cap_{k}": v for k, v in arch.capabilities.items()})
    for key in ("moe", "multimodal", "mtp", "fp8_checkpoint", "hybrid_attention", "num_attention_heads",
                "dsa_fp8_default"):
        facts[f"model_{key}"] = None
    if model is not None:
        facts.update({f"model_{k}": v for k, v in model.facts.items()})
    return facts


def _declared(given: Mapping[str, Mapping[str, IntentSetting]]) -> dict[str, Any]:
    """The values the given layers set (tuning record, inventory group and host, trial), the highest winning."""
    out: dict[str, Any] = {}
    for layer in layers.NAMES:
        for name, setting in given.get(layer, {}).items():
            out[name] = setting.value
    return out


def _layout(host: str, arch: ArchProfile, model: FactsLayer, gpus: GpuSet, nnodes: int = 1,
            objective: str = "throughput", speed: Speed | None = None) -> Layout:
    """The host's layout: TP x DP replicas (x DP attention). Chosen from the checkpoint's facts
    unless a layer sets the TP; declared replicas (dp_size) win and are checked."""
    value, field_name, chosen, where = INTENTS["tp_size"].default, "sglang_intents.tp_size", False, "SGLang's default"
    if "tp_size" in model.declared:
        value, chosen, where = model.declared["tp_size"], True, "declared"
    else:
        for setting in (*arch.settings, *model.profile_settings):
            if setting.intent == "tp_size":
                value, chosen, where = setting.value, True, "set by the profile"
    dp = model.declared.get("dp_size")
    total = gpus.count * nnodes
    if dp is not None and dp > 1 and nnodes > 1:
        raise PlanError(host, "sglang_intents.dp_size", f"dp_size {dp} on a member of a {nnodes}-node tp group: "
                                                        "SGLang runs no data-parallel replicas across nodes "
                                                        "(server_args.py _handle_data_parallelism)")
    if dp is not None and dp > total:
        raise PlanError(host, "sglang_intents.dp_size", f"dp_size {dp} replicas need at least {dp} GPUs; the server "
                                                        f"uses {total}")
    sized = None if chosen else model.choose_layout(host, gpus, nnodes, objective, dp, speed)
    if sized is not None:
        return sized
    tp = total if value == "all" else int(value)
    if nnodes > 1:
        # SGLang runs tp_size / nnodes ranks on every node.
        where_nodes = f"{nnodes} nodes x {gpus.count} GPU(s)"
        if tp % nnodes:
            raise PlanError(host, field_name, f"TP size {tp} is not a multiple of the {nnodes} nodes of the tp "
                                              f"group: SGLang runs the same number of ranks on every node")
        if tp > total:
            raise PlanError(host, field_name, f"TP size {tp} is larger than the {where_nodes} the tp group has")
        if gpus.count % (tp // nnodes):
            raise PlanError(host, field_name, f"TP size {tp} ({tp // nnodes} per node) does not divide the "
                                              f"{gpus.count} GPUs each node uses")
    elif tp > gpus.count:
        raise PlanError(host, field_name, f"TP size {tp} is larger than the {gpus.count} GPU(s) the server uses")
    if dp is not None and tp * dp > total:
        raise PlanError(host, "sglang_intents.dp_size", f"TP {tp} x dp_size {dp} = {tp * dp} GPUs; the server uses "
                                                        f"{total}")
    heads = model.profile_heads
    if heads and heads % tp:
        raise PlanError(host, field_name,
                        f"TP size {tp} does not divide the {heads} attention heads of {model.profile.key}")  # type: ignore[union-attr]
    return fill_layout(tp, f"{where}, {value}" if value == "all" else where, gpus, nnodes, dp,
                       model.declared.get("attn_dp_size") or 1)


def plan_host(spec: DeploySpec, probe: Any | None = None, sglang_version: str | None = None,
              knowledge: Knowledge | None = None, node: TpNode | None = None, facts: FactsLookup | None = None,
              weights: Weights | None = None, tuning: Sequence[TuningRecord] = (),
              trial: Mapping[str, IntentSetting] | None = None) -> Plan:
    """Plan one host (see :func:`_plan_host`). A matching tuning record whose layout (TP x DP) this
    host's plan refuses is applied without its layout, and the plan says why."""
    try:
        return _plan_host(spec, probe, sglang_version, knowledge, node, facts, weights, tuning, trial)
    except PlanError as exc:
        laid = [r for r in tuning if any(n in r.intents for n in LAYOUT)]
        if not laid:
            raise
        bare = [dataclasses.replace(r, intents={k: v for k, v in r.intents.items() if k not in LAYOUT})
                if r in laid else r for r in tuning]
        plan = _plan_host(spec, probe, sglang_version, knowledge, node, facts, weights, bare, trial)
        if plan.tuning is None or not any(r.hardware == plan.tuning.hardware for r in laid):
            raise  # the record's layout was not what the plan refused
        record = next(r for r in laid if r.hardware == plan.tuning.hardware)
        plan.tuning_notes.append(f"tuning record's layout ({layout_words(record.intents)}) not applied: "
                                 f"{exc.field}: {exc.message}")
        return plan


def _plan_host(
    spec: DeploySpec,
    probe: Any | None = None,
    sglang_version: str | None = None,
    knowledge: Knowledge | None = None,
    node: TpNode | None = None,
    facts: FactsLookup | None = None,
    weights: Weights | None = None,
    tuning: Sequence[TuningRecord] = (),
    trial: Mapping[str, IntentSetting] | None = None,
) -> Plan:
    """Plan one host. ``probe`` is the GPU probe's JSON; without it, declared hardware is used.

    A member of a multi-node tp group needs its ``node`` (``tpgroups.assign`` over
    the group's members); the members' plans are then checked together
    (``inventory_plan.check_plans``). ``facts`` are the checkpoint's (``sglang_deploy/deploy/`` looks them
    up); without them (None, or FactsUnavailable saying why) the model profile's fallback
    sizing is used. ``weights`` (``weights.plan_weights``): a staged snapshot
    is what ``--model-path`` names, served under the model's id, with ``HF_HUB_OFFLINE=1``.
    ``tuning``: the tuning records known (``tuning_record_file.load_records``); the one matching this
    host's hardware class is the "tuned" layer, and the plan says why the others were not applied.
    ``trial``: a tuning run's trial for this host (``deploy.tuning.trial_for``), the "trial" layer."""
    knowledge = knowledge or load_knowledge()
    host = spec.host
    _check_node(spec, node)
    nnodes = node.nnodes if node else 1
    version, catalog = _version_and_catalog(spec, sglang_version)
    hardware = _hardware(spec, knowledge, probe)
    gpus = select_gpus(host, hardware, knowledge.arch_of_capability, spec.gpu_indices)
    fabric_check = fabric.judge([(i, hardware.gpus[i].fabric) for i in gpus.indices], hardware.source,
                                hardware.fabric_manager)
    arch = knowledge.archs[gpus.arch]
    profile = _model_profile(spec, knowledge)
    warnings: list[str] = list(spec.warnings)
    if fabric_check.status != fabric.READY and fabric_check.service is not None:
        warnings.append(f"NVLink fabric {fabric_check.status}: nvidia-fabricmanager.service is {fabric_check.service}")
    pcie_check = pcie.judge(gpus.indices, hardware.links, hardware.p2p_read, hardware.pcie, hardware.source)
    warnings.extend(pcie_check.warnings)
    # Before anything is sized: a driver or GPU the version's torch cannot run stops the host here,
    # before its install and its stop (cuda_needs.py, data/cuda_needs.yaml).
    install = spec.install
    other_index = bool(install.index_url or install.extra_index_urls or install.find_links)
    driver = cuda_needs.judge(host, version, hardware.cuda_driver_version, gpus.compute_capability, gpus.model,
                              hardware.source, other_index, warnings)
    given: dict[str, Mapping[str, IntentSetting]] = {"group": spec.group_intents, "host": _host_intents(spec),
                                                     "trial": trial or {}}
    usable = _usable_facts(spec, profile, facts, warnings, _declared(given))  # before the record: it matches them
    if weights is not None and weights.source in ("hub", "controller") and not weights.staged:
        warnings.append(f"weights: {weights.origin}")
    record, tuning_notes = _tuning_record(spec, tuning, gpus, version, usable, weights, node)
    if record is not None:
        given["tuned"] = {k: IntentSetting(v, record.reason(k)) for k, v in record.intents.items()}
        declared = sorted({n for layer in ("group", "host", "trial") for n in given[layer] if n in LAYOUT})
        if declared and LAYOUT[0] in given["tuned"]:  # a layout applies whole or not at all
            given["tuned"] = {k: s for k, s in given["tuned"].items() if k not in LAYOUT}
            tuning_notes.append(f"tuning record's layout ({layout_words(record.intents)}) not applied: "
                                f"{', '.join(declared)} set by the inventory or the trial")
    wanted = _declared(given)
    recipe = recipes.for_model(spec.model_path, usable, profile.architecture if profile else None, catalog, version)
    warnings.extend(recipe.warnings)
    # the speculative decoding and state strategy the model layer sets (its recipe, then its profile) size
    # a hybrid model's recurrent state: the layout is ranked with them where no layer above sets them
    below = {c[0]: c[1] for c in recipe.changes} | {s.intent: s.value for s in (profile.settings if profile else ())}
    model = FactsLayer(profile, usable, {k: below[k] for k in STATE_INTENTS if k in below} | wanted,
                       version, enable_multimodal="--enable-multimodal" in spec.extra_args  # the checkpoint's facts
                       or wanted.get("enable_multimodal") is True)  # or the profile's

    perf = gpu_perf(knowledge.gpus, gpus)
    speed = (Speed(dataclasses.replace(perf, memory_gib=gpus.memory_gib), link_of(gpus, nnodes), spec.workload)
             if perf is not None else None)
    layout = _layout(host, arch, model, gpus, nnodes, spec.objective, speed)
    tp = layout.tp
    h = HostPlanning(spec=spec, gpus=gpus, nnodes=nnodes, node=node, arch=arch, model=model, given=given,
                     record=record, weights=weights, tp=tp, layout=layout,
                     rules={"arch": arch.rules, "topology": knowledge.topology_rules,
                            "model": knowledge.model_rules + model.profile_rules},
                     rule_facts={**_facts(gpus, arch, profile, tp, nnodes, fabric_check, pcie_check),
                                 **model.rule_facts()},
                     recipe=recipe.changes, ib_device=_ib_device(spec, gpus, hardware))
    for layer in layers.LAYERS[1:]:
        for name, value, reason, source in SETTERS[layer.name](h):
            h.apply(layer.name, name, value, reason, source)
    resolved = h.resolved
    _enforce(h.rules, {**h.rule_facts, **{f"i_{k}": r.value for k, r in resolved.items()}}, resolved, warnings)

    model.reconcile(gpus, resolved, warnings, catalog.model_support, version)
    check_layout(host, gpus, layout, resolved, warnings)
    check_remote_code(host, usable, catalog, version, resolved, warnings)
    check_consistency(host, resolved, warnings)
    model.check(host, gpus, resolved, warnings, spec.extra_args, nnodes, catalog.model_support, version)

    compiled = _compile(spec, version, catalog, resolved, model.dialect_model(), weights)
    warnings.extend(compiled.warnings)
    argv = [*compiled.argv, *checked_extra_args(spec, compiled.argv, catalog)]
    check_argv(spec, version, catalog, argv)
    deprecated = deprecated_options(version, catalog, argv, warnings)
    caches = Caches(spec.cache_dir, version)
    env, env_comments = service_env(spec, gpus, resolved, caches)
    weights_env(weights, env, env_comments)
    nccl, nccl_comments = nccl_conf(spec, resolved)
    timeout = spec.service.timeout_start_s or int(
        (profile.service.get("timeout_start_s") if profile else None) or DEFAULT_TIMEOUT_START_S)
    predicted, predicted_missing = plan_prediction(knowledge.gpus, gpus, usable, resolved, nnodes)
    plan = Plan(
        host=host, sglang_version=version, model_path=spec.model_path,
        model_profile=profile.key if profile else None,
        gpus=gpus, arch_name=arch.name, intents=resolved, argv=argv, argv_env_refs=compiled.env_refs,
        env=env, env_comments=env_comments, nccl_conf=nccl, nccl_comments=nccl_comments, secrets=spec.secrets,
        warnings=warnings, service=spec.service, timeout_start_s=timeout, deprecated=deprecated, tp_node=node,
        facts=usable, facts_unavailable=facts if isinstance(facts, FactsUnavailable) else None, weights=weights,
        tuning=record, tuning_notes=tuning_notes, predicted=predicted, predicted_missing=predicted_missing,
        caches=caches, driver=driver, pcie=pcie_check,
        transfer_engine=transfer.engine_for(resolved["disaggregation_transfer_backend"].value,
                                            spec.install.transfer_engine_version) if spec.role else None,
    )
    plan.start_budget = start_budget.choose(plan, spec.gate.ready_timeout_s, spec.service.timeout_start_s, (),
                                            "unknown", "")
    return plan


def _host_intents(spec: DeploySpec) -> Mapping[str, IntentSetting]:
    """The host's intents, with ``sglang_trust_remote_code: true`` as the trust_remote_code intent."""
    if not spec.trust_remote_code or "trust_remote_code" in spec.host_intents:
        return spec.host_intents
    return {**spec.host_intents, "trust_remote_code": IntentSetting(
        True, "sglang_trust_remote_code: true (the operator consents to run the model repository's code)")}


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
                  warnings: list[str], declared: Mapping[str, Any]) -> ModelFacts | None:
    """The facts to size from (None: the profile's fallback, with a warning saying why)."""
    host = spec.host
    if isinstance(facts, FactsUnavailable) and facts.field:
        raise PlanError(host, facts.field, facts.reason)
    if isinstance(facts, ModelFacts):
        return facts
    if facts is not None:
        warnings.append(f"no model facts for {facts.model}: {facts.reason}; sized from the model profile instead")
    if model is None and facts is not None and declared.get("tp_size") is None:
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


def _ib_device(spec: DeploySpec, gpus: GpuSet, hardware: HostHardware) -> tuple[str, str] | None:
    """A prefill or decode server's RDMA devices, those of the probe nearest to its GPUs (rdma.py)."""
    if spec.role is None or not hardware.rdma:
        return None
    paths = hardware.pcie.gpus if hardware.pcie is not None else ()
    at = [(i, paths[i].bridges if i < len(paths) else None, paths[i].numa_node if i < len(paths) else None)
          for i in gpus.indices]
    return rdma.choose(at, hardware.rdma)


def _enforce(rules_by_layer: Mapping[str, tuple[Rule, ...]], final_facts: Mapping[str, Any],
             resolved: dict[str, Resolved], warnings: list[str]) -> None:
    """What the hardware cannot do, whatever a higher layer asked."""
    for layer in layers.NAMES:
        for rule in rules_by_layer.get(layer, ()):
            if not rule.enforce or not rule.applies(dict(final_facts)):
                continue
            for s in rule.enforce:
                current = resolved[s.intent]
                if current.value == s.value:
                    continue
                reason = fill_reason(s.reason, dict(final_facts))
                warnings.append(f"{s.intent}={current.value!r} ({current.layer} layer) overridden to {s.value!r}: "
                                f"{reason}")
                resolved[s.intent] = Resolved(s.intent, s.value, layer, reason, s.source)


def _compile(spec: DeploySpec, version: str, catalog: "catalogs.Catalog", resolved: Mapping[str, Resolved],
             model: ModelProfile | None, weights: Weights | None) -> Any:
    try:
        return compile_intents(
            version=version,
            catalog=catalog,
            intents={k: r.value for k, r in resolved.items()},
            model_path=weights.snapshot_dir if weights is not None else spec.model_path,
            model=model,
            api_key=any(s.name == "api_key" for s in spec.secrets),
        )
    except DialectError as exc:
        raise PlanError(spec.host, layers.field(resolved[exc.intent].layer, exc.intent), str(exc)) from None


def constraint_view(plan: Plan) -> constraints.PlanView:
    """The values the constraint checker reads, from a finished plan (to check it again)."""
    return facts_layer.view(plan.intents, plan.gpus, plan.argv)


__all__ = ["Plan", "constraint_view", "plan_host"]
