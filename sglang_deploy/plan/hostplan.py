"""The plan of one host: every launch setting with its value, layer and reason, the argv, the
service's environment and NCCL settings, and what the plan was made from (hardware, model facts,
weights). ``planner.plan_host`` makes it; rendering, the deploy and the gate read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sglang_deploy.plan.perf import Prediction
from sglang_deploy.plan.hardware import GpuSet
from sglang_deploy.plan.intents import Resolved
from sglang_deploy.plan.modelfacts import FactsLookup, FactsUnavailable, ModelFacts
from sglang_deploy.plan.spec import NCCL_CONF_PATH, SecretRef, ServiceSettings
from sglang_deploy.plan.tpgroups import TpNode
from sglang_deploy.plan.tuning_record import TuningRecord
from sglang_deploy.plan.caches import Caches
from sglang_deploy.plan.cuda_needs import DriverCheck
from sglang_deploy.plan.pcie import PcieCheck
from sglang_deploy.plan.weights import Weights
from sglang_deploy.plan.start_budget import StartBudget
from sglang_deploy.plan.transfer import TransferEngine

#: Why a plan made without a facts lookup (a caller that passed none) has no facts.
NOT_LOOKED_UP = "no checkpoint metadata was looked up"


@dataclass
class Plan:
    host: str
    sglang_version: str
    model_path: str
    model_profile: str | None
    gpus: GpuSet
    arch_name: str
    intents: dict[str, Resolved]
    argv: list[str]
    argv_env_refs: dict[int, str]
    env: dict[str, str]
    env_comments: dict[str, str]
    nccl_conf: dict[str, str]
    nccl_comments: dict[str, str]
    secrets: tuple[SecretRef, ...]
    warnings: list[str]
    service: ServiceSettings
    timeout_start_s: int
    nccl_conf_path: str = NCCL_CONF_PATH
    deprecated: list[str] = field(default_factory=list)
    tp_node: TpNode | None = None  # this host's place in its multi-node tp group
    facts: ModelFacts | None = None  # the checkpoint's facts the plan was sized from
    facts_unavailable: FactsUnavailable | None = None  # or why a lookup found none
    weights: Weights | None = None  # where the weights come from and which directory SGLang loads
    caches: Caches | None = None  # the version's compile-cache directory (None: a plan built by hand)
    tuning: TuningRecord | None = None  # the tuning record applied (the "tuned" layer)
    tuning_notes: list[str] = field(default_factory=list)  # why other tuning records were not applied
    # The plan of the host's class (inventory_plan: hosts whose plans differ only by name), planned
    # under inventory_plan.CLASS_HOST; None: planned on its own. Output renders a class once.
    shared: "Plan | None" = field(default=None, repr=False, compare=False)
    # Behind a gateway, a plan of several data-parallel replicas runs one server per replica
    # (sglang_deploy.plan.replicas): every replica's plan, this one (replica 0) first; () otherwise.
    replicas: "tuple[Plan, ...]" = field(default=(), repr=False, compare=False)
    # The speed this plan should reach (sglang_deploy.plan.perf), or why there is no prediction.
    predicted: Prediction | None = field(default=None, compare=False)
    predicted_missing: str | None = field(default=None, compare=False)
    # The driver and GPUs against what the version's torch needs (plan/cuda_needs.py); None: a plan
    # built by hand.
    driver: DriverCheck | None = None
    # Peer transfers over PCIe between its GPUs, judged from the bridges' ACS (plan/pcie.py).
    pcie: PcieCheck | None = None
    # A prefill or decode server's gateway: its split of the two roles and the split the speed model
    # suggests for the workload (plan/pd_split.py); None: no role, or not planned with its gateway.
    pd_split: str | None = field(default=None, compare=False)
    # A prefill or decode server's KV transfer engine, a package of its venv (plan/transfer.py).
    transfer_engine: TransferEngine | None = None
    # How long its start may take (plan/start_budget.py): from the plan and the inventory alone; the
    # deploy adds the host's recorded starts and its caches. None: a plan built by hand.
    start_budget: StartBudget | None = field(default=None, compare=False)

    def predicted_dict(self) -> dict[str, Any]:
        """`plan --json`'s ``predicted``: the bands and their basis, or ``{"none": why}``."""
        return self.predicted.as_dict() if self.predicted is not None else {"none": self.predicted_missing}

    @property
    def model_facts(self) -> FactsLookup | None:
        """The checkpoint's facts the plan was made with, or why there were none."""
        return self.facts if self.facts is not None else self.facts_unavailable

    @property
    def facts_missing(self) -> str | None:
        """Why the plan fell back to the model profile (None: it was sized from facts)."""
        if self.facts is not None:
            return None
        return self.facts_unavailable.reason if self.facts_unavailable is not None else NOT_LOOKED_UP

    def facts_dict(self) -> dict[str, Any]:
        if self.facts is None:
            return {"source": None, "revision": None, "unavailable": self.facts_missing}
        return {"source": self.facts.source, "revision": self.facts.revision, "model": self.facts.model}

    @property
    def venv(self) -> str:
        """One virtualenv per SGLang version: installing a new version never touches the
        one a running server (or the previous revision) uses."""
        return f"{self.service.venvs_dir}/sglang-{self.sglang_version}"

    @property
    def python(self) -> str:
        return f"{self.venv}/bin/python"

    @property
    def arch(self) -> str:
        return self.gpus.arch

    def as_dict(self) -> dict[str, Any]:
        """The plan as plain JSON data: no file contents, and secrets only by source."""
        g = self.gpus
        return {
            "host": self.host,
            "arch": self.arch,
            "sglang_version": self.sglang_version,
            "model": self.model_path,
            "model_path": self.weights.snapshot_dir if self.weights else self.model_path,
            "model_profile": self.model_profile,
            "gpus": {
                "model": g.model,
                "count": g.count,
                "indices": list(g.indices),
                "compute_capability": g.compute_capability,
                "memory_mib": g.memory_mib,
                "memory_tier": g.memory_tier,
                "topology": g.topology,
                "p2p": g.p2p,
                "geforce": g.geforce,
                "source": g.source,
            },
            "argv": list(self.argv),
            "env": dict(self.env),
            "nccl_conf": dict(self.nccl_conf),
            "secrets": [{"name": s.name, "env": s.env_var, "source": s.describe()} for s in self.secrets],
            "intents": [r.as_dict() for r in self.intents.values()],
            "warnings": list(self.warnings),
            "paths": {"unit": self.service.unit_path, "env": self.service.env_path, "nccl_conf": self.nccl_conf_path},
            "tp_group": self.tp_node.as_dict() if self.tp_node else None,
            "model_facts": self.facts_dict(),
            "weights": self.weights.as_dict() if self.weights else None,
            "caches": self.caches.as_dict() if self.caches else None,
            "tuning": {"record": self.tuning.summary() if self.tuning else None, "notes": list(self.tuning_notes)},
            "replicas": [{"service": r.service.name, "port": r.intents["port"].value, "gpus": list(r.gpus.indices),
                          "argv": list(r.argv), "paths": {"unit": r.service.unit_path, "env": r.service.env_path},
                          "predicted": r.predicted_dict()}
                         for r in self.replicas],
            "predicted": self.predicted_dict(),
            "driver": self.driver.as_dict() if self.driver else None,
            "pcie_p2p": self.pcie.as_dict() if self.pcie else None,
            "pd_split": self.pd_split,
            **({"transfer_engine": self.transfer_engine.requirement} if self.transfer_engine else {}),
        }

    @property
    def gpu_summary(self) -> str:
        g = self.gpus
        nodes = f" over {self.tp_node.nnodes} nodes (rank {self.tp_node.rank})" if self.tp_node else ""
        return (f"{g.count}x {g.model} ({g.arch}, {g.memory_gib:g} GiB, {g.topology}"
                f"{'' if g.p2p else ', no P2P'}), TP {self.intents['tp_size'].value}{nodes}")
