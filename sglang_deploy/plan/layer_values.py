"""Where each layer of a host's plan takes its values from: the host being planned
(:class:`HostPlanning`: what its layers read, and the intents resolved so far) and one function
per layer above SGLang's defaults (:data:`SETTERS`), which planner.py applies in the order of
``layers.LAYERS``, lowest first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from sglang_deploy.plan import facts_layer, layers
from sglang_deploy.plan.facts_layer import Change, FactsLayer, Layout
from sglang_deploy.plan.hardware import GpuSet
from sglang_deploy.plan.intents import INTENTS, Resolved
from sglang_deploy.plan.profiles import ArchProfile, Rule, Setting, fill_reason
from sglang_deploy.plan.spec import DeploySpec, IntentSetting
from sglang_deploy.plan.tpgroups import TpNode
from sglang_deploy.plan.tuning_record import TuningRecord
from sglang_deploy.plan.weights import Weights


@dataclass
class HostPlanning:
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
    ib_device: tuple[str, str] | None = None  # a prefill or decode server's RDMA devices from the probe (rdma.py)
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


def _rule_sets(h: HostPlanning, layer: str) -> list[Change]:
    """What the layer's rules that apply to this host set (a ``{fact}`` in a reason: that fact's value)."""
    return [(intent, value, fill_reason(reason, h.rule_facts), source)
            for rule in h.rules[layer] if rule.set and rule.applies(h.rule_facts)
            for intent, value, reason, source in _settings(rule.set)]


def _arch(h: HostPlanning) -> list[Change]:
    return [*_settings(h.arch.settings), *_rule_sets(h, "arch")]


def _topology(h: HostPlanning) -> list[Change]:
    """The topology rules, then the replicas that fill the GPU count around a TP a layer set."""
    out = _rule_sets(h, "topology")
    if h.ib_device is not None:
        out.append(("disaggregation_ib_device", h.ib_device[0], h.ib_device[1], None))
    layout = h.layout
    if not layout.chosen and layout.dp > 1:
        out.append(("dp_size", layout.dp, layout.dp_reason, None))
    return out


def _model_facts(h: HostPlanning) -> list[Change]:
    return h.model.settings(h.layout, h.gpus, h.resolved["kv_cache_dtype"].value)


def _model(h: HostPlanning) -> list[Change]:
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


def _tuned(h: HostPlanning) -> list[Change]:
    """The matching tuning record's values, each with what was measured against what lies below."""
    if h.record is None:
        return []
    below = {k: r.value for k, r in h.resolved.items()}
    return [(name, setting.value, h.record.reason(name, below), None) for name, setting in h.given["tuned"].items()]


def _inventory(h: HostPlanning, layer: str) -> list[Change]:
    return [(name, s.value, s.reason or f"set in inventory {layer} data", None) for name, s in h.given[layer].items()]


def _group(h: HostPlanning) -> list[Change]:
    """The inventory's group data, then the tp group's rank settings and the host's role (nothing above
    sets those)."""
    out = _inventory(h, "group")
    role = h.spec.role
    if role is not None:
        out.append(("disaggregation_mode", role, f"sglang_role: {role}: a {role} server behind its gateways, which "
                                                 "pair each request's prefill and decode servers", None))
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


def _host(h: HostPlanning) -> list[Change]:
    return _inventory(h, "host")


def _trial(h: HostPlanning) -> list[Change]:
    return [(name, s.value, s.reason or "a tuning run's trial", None) for name, s in h.given["trial"].items()]


#: Where each layer above SGLang's defaults takes its values from, by name (applied in layers.LAYERS order).
SETTERS: dict[str, Callable[[HostPlanning], list[Change]]] = {
    "arch": _arch, "topology": _topology, facts_layer.LAYER: _model_facts, "model": _model, "tuned": _tuned,
    "group": _group, "host": _host, "trial": _trial,
}
