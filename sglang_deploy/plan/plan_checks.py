"""The checks a host's plan passes once its layers are applied and the rules enforced: the
layout fits the GPUs, a model that needs its repository's own code has the operator's consent,
speculative decoding's settings are complete, extra arguments neither set a tp group's ranks nor
what the plan already sets, and the argv is one the version's catalog accepts (its deprecated
options said). planner.py runs them in that order.
"""

from __future__ import annotations

from typing import Mapping

from sglang_deploy.errors import PlanError
from sglang_deploy.plan import catalog as catalogs
from sglang_deploy.plan import layers
from sglang_deploy.plan.dialects import V0_5_15, parse_version
from sglang_deploy.plan.facts_layer import Layout
from sglang_deploy.plan.hardware import GpuSet
from sglang_deploy.plan.intents import Resolved
from sglang_deploy.plan.modelfacts import ModelFacts
from sglang_deploy.plan.spec import DeploySpec
from sglang_deploy.plan.spec_checks import check_serving_args


def remote_code_needs(facts: ModelFacts, support: "catalogs.ModelSupport | None") -> list[str]:
    """The model's files that name code of its own repository SGLang would have to run:
    config.json's auto_map when SGLang has no native class for the architecture (its catalog's
    model_support.architectures: srt/models/*.py EntryClass), tokenizer_config.json's when the
    declared tokenizer class is the repository's own (modelfacts.AutoMap.own_tokenizer)."""
    arch = facts.architecture
    out = []
    for m in facts.auto_maps:
        if m.file == "config.json" and support is not None and arch not in support.architectures:
            out.append(f"config.json (auto_map {', '.join(m.classes)}; "
                       f"SGLang has no native {arch or facts.model_type})")
        elif m.file == "tokenizer_config.json" and m.own_tokenizer:
            out.append(f"tokenizer_config.json (auto_map {', '.join(m.classes)})")
    return out


def check_remote_code(host: str, facts: ModelFacts | None, catalog: "catalogs.Catalog", version: str,
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
    _check_native_class(host, facts, catalog, version, warnings)
    if trusted.value:
        what = f"it runs {'; '.join(needs)}" if needs else "no file of the checkpoint names code SGLang needs"
        warnings.append(f"--trust-remote-code ({trusted.layer} layer): SGLang may run Python code from the model's "
                        f"repository at start; {what}")


def _check_native_class(host: str, facts: ModelFacts | None, catalog: "catalogs.Catalog", version: str,
                        warnings: list[str]) -> None:
    """A checkpoint whose architectures SGLang ``version`` has no class for (model_support.architectures)
    and that names no code of its own loads only through SGLang's Transformers backend, which finds
    the class in the installed transformers or fails at start ("Cannot find model module": 0.5.23
    model_loader/utils.py get_model_architecture -> resolve_transformers_arch): a warning, as the
    plan cannot know that library's classes. A NemotronH config.json without num_hidden_layers is
    refused on 0.5.9, whose NemotronHConfig has no layers_block_type and counts its default 52 layers
    (configs/nemotron_h.py; 0.5.15 on count layers_block_type)."""
    support = catalog.model_support
    if facts is None or support is None or not facts.architectures:
        return
    if facts.extra.get("layers_from_block_type") and parse_version(version) < V0_5_15:
        raise PlanError(host, "sglang_version",
                        f"{facts.model}'s config.json names its layers in layers_block_type alone (no "
                        "num_hidden_layers); SGLang 0.5.9's NemotronHConfig does not read it and builds its default "
                        "52 layers: use 0.5.15 or later")
    if any(a in support.architectures for a in facts.architectures):
        return
    if any(m.file == "config.json" for m in facts.auto_maps):
        return  # its own code: check_remote_code's consent decides
    warnings.append(f"SGLang {version} has no class of its own for {', '.join(facts.architectures)} (its srt/models); "
                    "it will try its Transformers backend, which loads the model only if the installed transformers "
                    "has that class, and otherwise stops at start with \"Cannot find model module\"; the plan is "
                    "sized as if it loads")


def check_layout(host: str, gpus: GpuSet, layout: Layout, resolved: Mapping[str, Resolved],
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


def checked_extra_args(spec: DeploySpec, argv: list[str], catalog: "catalogs.Catalog") -> tuple[str, ...]:
    _check_extra_args(spec.host, spec.extra_args, argv, catalog)
    check_serving_args(spec.host, spec.extra_args, catalog)
    return spec.extra_args


def check_argv(spec: DeploySpec, version: str, catalog: "catalogs.Catalog", argv: list[str]) -> None:
    rejections = catalog.check(argv)
    if rejections:
        first = rejections[0]
        field_name = "sglang_extra_args" if first.arg in spec.extra_args else "argv"
        raise PlanError(spec.host, field_name, f"SGLang {version} would refuse {first.arg!r}: {first.message}")


def deprecated_options(version: str, catalog: "catalogs.Catalog", argv: list[str], warnings: list[str]) -> list[str]:
    deprecated = []
    for arg in argv:
        option = catalog.resolve(arg.split("=", 1)[0]) if arg.startswith("--") else None
        if option is not None and option.deprecated:
            hint = f"; use {option.replacement}" if option.replacement else ""
            deprecated.append(option.option)
            warnings.append(f"{option.option} is deprecated in SGLang {version}{hint}")
    return deprecated


#: Layers whose values someone wrote (the inventory, a trial): refused when incomplete, not completed.
_BY_HAND = (*layers.INVENTORY, "trial")


def check_consistency(host: str, resolved: dict[str, Resolved], warnings: list[str]) -> None:
    if resolved["enable_multimodal"].value and resolved["text_only"].value:
        layer = resolved["enable_multimodal"].layer
        raise PlanError(host, layers.field(layer, "enable_multimodal"),
                        "and text_only are both set: serve the vision tower or skip it, not both")
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
