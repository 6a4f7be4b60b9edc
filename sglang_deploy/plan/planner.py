"""DeploySpec + hardware -> Plan: every launch setting with its value, layer and reason.

The layers apply in the order of ``layers.LAYERS``, lowest first (SGLang defaults,
architecture profile, topology rules, model facts, model profile, tuning record,
inventory group, host, trial); each one's values come from one function here
(``_SETTERS``). The tuning record and a tuning run's trial are inputs of
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
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from sglang_deploy.plan import catalog as catalogs
from sglang_deploy.plan import constraints, facts_layer, layers, recipes
from sglang_deploy.plan.dialects import DialectError, compile_intents
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.hardware import (GpuSet, HostHardware, check_declared_matches_probe, declared_hardware,
                                         parse_probe, select_gpus)
from sglang_deploy.plan.intents import INTENTS, Resolved
from sglang_deploy.plan.facts_layer import Change, FactsLayer, Layout, fill_layout
from sglang_deploy.plan.modelfacts import FactsLookup, FactsUnavailable, ModelFacts
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.profiles import ArchProfile, Knowledge, ModelProfile, Rule, Setting, load_knowledge
from sglang_deploy.plan.spec import DeploySpec, IntentSetting
from sglang_deploy.plan.spec_checks import check_serving_args, normalize_version
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


def _declared(given: Mapping[str, Mapping[str, IntentSetting]]) -> dict[str, Any]:
    """The values the given layers set (tuning record, inventory group and host, trial), the highest winning."""
    out: dict[str, Any] = {}
    for layer in layers.NAMES:
        for name, setting in given.get(layer, {}).items():
            out[name] = setting.value
    return out


def _layout(host: str, arch: ArchProfile, model: FactsLayer, gpus: GpuSet, nnodes: int = 1,
            objective: str = "throughput") -> Layout:
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
    sized = None if chosen else model.choose_layout(host, gpus, nnodes, objective, dp)
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
    gpus = select_gpus(host, _hardware(spec, knowledge, probe), knowledge.arch_of_capability, spec.gpu_indices)
    arch = knowledge.archs[gpus.arch]
    profile = _model_profile(spec, knowledge)
    warnings: list[str] = list(spec.warnings)
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
    model = FactsLayer(profile, usable, _declared(given), version)  # the checkpoint's facts, or the profile's
    recipe = recipes.for_model(spec.model_path, usable, profile.architecture if profile else None, catalog, version)
    warnings.extend(recipe.warnings)

    layout = _layout(host, arch, model, gpus, nnodes, spec.objective)
    tp = layout.tp
    h = _HostPlanning(spec=spec, gpus=gpus, nnodes=nnodes, node=node, arch=arch, model=model, given=given,
                      record=record, weights=weights, tp=tp, layout=layout,
                      rules={"arch": arch.rules, "topology": knowledge.topology_rules,
                             "model": knowledge.model_rules + model.profile_rules},
                      rule_facts={**_facts(gpus, arch, profile, tp, nnodes), **model.rule_facts()},
                      recipe=recipe.changes)
    for layer in layers.LAYERS[1:]:
        for name, value, reason, source in _SETTERS[layer.name](h):
            h.apply(layer.name, name, value, reason, source)
    resolved = h.resolved
    _enforce(h.rules, {**h.rule_facts, **{f"i_{k}": r.value for k, r in resolved.items()}}, resolved, warnings)

    model.reconcile(gpus, resolved, warnings, catalog.model_support, version)
    _check_layout(host, gpus, layout, resolved, warnings)
    _check_remote_code(host, usable, catalog, version, resolved, warnings)
    _check_consistency(host, resolved, warnings)
    model.check(host, gpus, resolved, warnings, spec.extra_args, nnodes, catalog.model_support, version)

    compiled = _compile(spec, version, catalog, resolved, model.dialect_model(), weights)
    warnings.extend(compiled.warnings)
    argv = [*compiled.argv, *_checked_extra_args(spec, compiled.argv, catalog)]
    _check_argv(spec, version, catalog, argv)
    deprecated = _deprecated(version, catalog, argv, warnings)
    env, env_comments = _service_env(spec, gpus, resolved)
    _weights_env(weights, env, env_comments)
    nccl, nccl_comments = _nccl_conf(spec, resolved)
    timeout = spec.service.timeout_start_s or int(
        (profile.service.get("timeout_start_s") if profile else None) or DEFAULT_TIMEOUT_START_S)
    return Plan(
        host=host, sglang_version=version, model_path=spec.model_path,
        model_profile=profile.key if profile else None,
        gpus=gpus, arch_name=arch.name, intents=resolved, argv=argv, argv_env_refs=compiled.env_refs,
        env=env, env_comments=env_comments, nccl_conf=nccl, nccl_comments=nccl_comments, secrets=spec.secrets,
        warnings=warnings, service=spec.service, timeout_start_s=timeout, deprecated=deprecated, tp_node=node,
        facts=usable, facts_unavailable=facts if isinstance(facts, FactsUnavailable) else None, weights=weights,
        tuning=record, tuning_notes=tuning_notes,
    )


@dataclass
class _HostPlanning:
    """One host being planned: what its layers read, and the intents resolved so far."""

    spec: DeploySpec
    gpus: GpuSet
    nnodes: int
    node: TpNode | None
    arch: ArchProfile
    model: FactsLayer
    given: Mapping[str, Mapping[str, IntentSetting]]  # the tuning record's, the inventory's and the trial's
    record: TuningRecord | None
    weights: Weights | None
    tp: int
    layout: Layout  # TP x DP (x DP attention), and why: chosen from the checkpoint, or around a TP a layer set
    rules: Mapping[str, tuple[Rule, ...]]  # by layer
    rule_facts: dict[str, Any]
    recipe: tuple[Change, ...] = ()  # the model family's recipe flags (recipes.py), first in the model layer
    resolved: dict[str, Resolved] = field(init=False)  # every intent, at SGLang's default until a layer sets it

    def __post_init__(self) -> None:
        self.resolved = {name: Resolved(name, d.default, layers.DEFAULT, d.default_reason)
                         for name, d in INTENTS.items()}

    def apply(self, layer: str, name: str, value: Any, reason: str, source: str | None = None) -> None:
        if name == "tp_size" and value == "all":
            reason = f"{reason} ({self.gpus.count} GPUs" + (f" x {self.nnodes} nodes)" if self.nnodes > 1 else ")")
            value = self.gpus.count * self.nnodes
        self.resolved[name] = Resolved(name, value, layer, reason, source)


def _settings(settings: Iterable[Setting]) -> list[Change]:
    return [(s.intent, s.value, s.reason, s.source) for s in settings]


def _rule_sets(h: _HostPlanning, layer: str) -> list[Change]:
    """What the layer's rules that apply to this host set."""
    return [change for rule in h.rules[layer] if rule.set and rule.applies(h.rule_facts)
            for change in _settings(rule.set)]


def _arch(h: _HostPlanning) -> list[Change]:
    return [*_settings(h.arch.settings), *_rule_sets(h, "arch")]


def _topology(h: _HostPlanning) -> list[Change]:
    """The topology rules, then the replicas that fill the GPU count around a TP a layer set."""
    out = _rule_sets(h, "topology")
    layout = h.layout
    if not layout.chosen and layout.dp > 1:
        out.append(("dp_size", layout.dp, layout.dp_reason, None))
    return out


def _model_facts(h: _HostPlanning) -> list[Change]:
    return h.model.settings(h.layout, h.gpus, h.resolved["kv_cache_dtype"].value)


def _model(h: _HostPlanning) -> list[Change]:
    """The family's recipe, the model rules, the profile's settings, and the model's id when SGLang
    loads a snapshot."""
    out = [*h.recipe, *_rule_sets(h, "model"), *_settings(h.model.profile_settings)]
    weights, model_path = h.weights, h.spec.model_path
    if weights is not None and weights.snapshot_dir != model_path:
        # SGLang names the model by --model-path unless --served-model-name is given
        # (sglang/srt/server_args.py, ServerArgs.__post_init__: served_model_name = model_path).
        out.append(("served_model_name", model_path, f"the model's id: --model-path is its snapshot in the model "
                    f"store ({weights.snapshot_dir}), and clients keep asking for {model_path}", None))
    return out


def _tuned(h: _HostPlanning) -> list[Change]:
    """The matching tuning record's values, each with what was measured against what lies below."""
    if h.record is None:
        return []
    below = {k: r.value for k, r in h.resolved.items()}
    return [(name, setting.value, h.record.reason(name, below), None) for name, setting in h.given["tuned"].items()]


def _inventory(h: _HostPlanning, layer: str) -> list[Change]:
    return [(name, s.value, s.reason or f"set in inventory {layer} data", None) for name, s in h.given[layer].items()]


def _group(h: _HostPlanning) -> list[Change]:
    """The inventory's group data, then the tp group's rank settings (nothing above sets those)."""
    out = _inventory(h, "group")
    node = h.node
    if node is not None:
        members = ", ".join(node.members)
        out += [("nnodes", node.nnodes, f"tp group {node.group} (sglang_tp_group) has {node.nnodes} members: "
                                        f"{members}", None),
                ("node_rank", node.rank, f"position of {h.spec.host} among the members of tp group {node.group} "
                                         "in inventory order", None),
                ("dist_init_addr", node.dist_init_addr, f"rank 0 ({node.leader}) node address and the group's "
                                                        "rendezvous port (sglang_node_address, sglang_dist_init_port)",
                 None)]
    return out


def _host(h: _HostPlanning) -> list[Change]:
    return _inventory(h, "host")


def _trial(h: _HostPlanning) -> list[Change]:
    return [(name, s.value, s.reason or "a tuning run's trial", None) for name, s in h.given["trial"].items()]


#: Where each layer above SGLang's defaults takes its values from, by name (applied in layers.LAYERS order).
_SETTERS: dict[str, Callable[[_HostPlanning], list[Change]]] = {
    "arch": _arch, "topology": _topology, facts_layer.LAYER: _model_facts, "model": _model, "tuned": _tuned,
    "group": _group, "host": _host, "trial": _trial,
}


def _host_intents(spec: DeploySpec) -> Mapping[str, IntentSetting]:
    """The host's intents, with ``sglang_trust_remote_code: true`` as the trust_remote_code intent."""
    if not spec.trust_remote_code or "trust_remote_code" in spec.host_intents:
        return spec.host_intents
    return {**spec.host_intents, "trust_remote_code": IntentSetting(
        True, "sglang_trust_remote_code: true (the operator consents to run the model repository's code)")}


def remote_code_needs(facts: ModelFacts, support: "catalogs.ModelSupport | None") -> list[str]:
    """The model's files that name code of its own repository SGLang would have to run:
    config.json's auto_map when SGLang has no native class for the architecture (its catalog's
    model_support.architectures: srt/models/*.py EntryClass), tokenizer_config.json's when the
    declared tokenizer class is the repository's own (modelfacts.AutoMap.own_tokenizer)."""
    arch = facts.architectures[0] if facts.architectures else None
    out = []
    for m in facts.auto_maps:
        if m.file == "config.json" and support is not None and arch not in support.architectures:
            out.append(f"config.json (auto_map {', '.join(m.classes)}; "
                       f"SGLang has no native {arch or facts.model_type})")
        elif m.file == "tokenizer_config.json" and m.own_tokenizer:
            out.append(f"tokenizer_config.json (auto_map {', '.join(m.classes)})")
    return out


def _check_remote_code(host: str, facts: ModelFacts | None, catalog: "catalogs.Catalog", version: str,
                       resolved: Mapping[str, Resolved], warnings: list[str]) -> None:
    """Running a repository's code is the operator's decision: a model that needs it is refused
    without sglang_trust_remote_code (SGLang itself fails after the restart: the tokenizer's
    "use --trust-remote-code", srt/utils/hf_transformers/tokenizer.py); with it, a warning."""
    needs = remote_code_needs(facts, catalog.model_support) if facts is not None else []
    trusted = resolved["trust_remote_code"]
    if needs and not trusted.value:
        raise PlanError(host, "sglang_trust_remote_code",
                        f"{facts.model} needs its repository's own code to load in SGLang {version}: "  # type: ignore[union-attr]
                        f"{'; '.join(needs)}. Running it is the operator's decision: set "
                        "sglang_trust_remote_code: true to add --trust-remote-code")
    if trusted.value:
        what = f"it runs {'; '.join(needs)}" if needs else "no file of the checkpoint names code SGLang needs"
        warnings.append(f"--trust-remote-code ({trusted.layer} layer): SGLang may run Python code from the model's "
                        f"repository at start; {what}")


def _check_layout(host: str, gpus: GpuSet, layout: Layout, resolved: Mapping[str, Resolved],
                  warnings: list[str]) -> None:
    """TP x DP must fit the GPUs the server uses (SGLang places replica r on GPUs r x tp ...,
    managers/data_parallel_controller.py, world size dp x tp: server_args.py compute_world_size);
    DP attention runs inside the TP group and must divide it (0.5.23 arg_groups/parallel_hook.py
    handle_data_parallelism: assert tp_size % attn_dp_size == 0; 0.5.9 server_args.py
    _handle_data_parallelism: tp_size % dp_size with --enable-dp-attention). Fewer GPUs serving
    than the server has: a warning that says why."""
    tp, dp, attn = (resolved[k] for k in ("tp_size", "dp_size", "attn_dp_size"))
    total = gpus.count * resolved["nnodes"].value
    serving = tp.value * dp.value
    if serving > total:
        raise PlanError(host, layers.field(dp.layer if dp.value > 1 else tp.layer, "dp_size" if dp.value > 1
                                           else "tp_size"),
                        f"TP {tp.value} x DP {dp.value} = {serving} GPUs; the server uses {total}")
    if attn.value > 1 and tp.value % attn.value:
        raise PlanError(host, layers.field(attn.layer, "attn_dp_size"),
                        f"attn_dp_size {attn.value} does not divide TP {tp.value}: SGLang runs attention DP inside "
                        "the TP group (tp_size % dp_size == 0)")
    if serving < total:
        why = layout.idle if (layout.tp, layout.dp) == (tp.value, dp.value) and layout.idle else (
            f"tp_size ({tp.layer} layer) x dp_size ({dp.layer} layer) leave them")
        warnings.append(f"TP {tp.value} x DP {dp.value} uses {serving} of the {total} GPUs; {total - serving} stay "
                        f"idle: {why}")


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
                warnings.append(f"{s.intent}={current.value!r} ({current.layer} layer) overridden to {s.value!r}: "
                                f"{s.reason}")
                resolved[s.intent] = Resolved(s.intent, s.value, layer, s.reason, s.source)


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


def constraint_view(plan: Plan) -> constraints.PlanView:
    """The values the constraint checker reads, from a finished plan (to check it again)."""
    return facts_layer.view(plan.intents, plan.gpus, plan.argv)


#: Layers whose values someone wrote (the inventory, a trial): refused when incomplete, not completed.
_BY_HAND = (*layers.INVENTORY, "trial")


def _check_consistency(host: str, resolved: dict[str, Resolved], warnings: list[str]) -> None:
    algo = resolved["speculative_algorithm"]
    spec_keys = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    if algo.value is None:
        for key in spec_keys:
            layer = resolved[key].layer
            if resolved[key].value is not None and layer in _BY_HAND:
                raise PlanError(host, layers.field(layer, key),
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


def _service_env(spec: DeploySpec, gpus: GpuSet,
                 resolved: Mapping[str, Resolved]) -> tuple[dict[str, str], dict[str, str]]:
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
