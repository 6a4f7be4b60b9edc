"""SIMULATOR ONLY: the plan matrix: every shipped model profile x 13 hardware layouts x every
supported SGLang version x the variants of the version-sensitive intents.

``HARDWARE`` (the layouts, one per GPU architecture at least, as an inventory declares them), with
three more in ``FACTS_HARDWARE``, is the hardware axis of the facts matrix (``facts_matrix.py``).
Shared by the matrix tests
(tests/test_matrix.py, tests/test_facts_matrix.py), scripts/check_plans_against_real_parsers.py
and the planner's benchmarks.
"""

from __future__ import annotations

import itertools
from typing import Any

from sglang_deploy.plan.catalog import SUPPORTED_VERSIONS
from sglang_deploy.plan.profiles import load_knowledge

HARDWARE = {
    "a100x8-nvswitch": {"model": "A100 SXM", "count": 8},
    "a6000x1": {"model": "RTX A6000", "count": 1},
    "a6000x2-bridge": {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"},
    "a6000x4-pcie": {"model": "RTX A6000", "count": 4, "topology": "pcie"},
    "rtx3090x2-pcie": {"model": "RTX 3090", "count": 2},
    "l40sx4-pcie": {"model": "L40S", "count": 4},
    "rtx4090x2-pcie": {"model": "RTX 4090", "count": 2},
    "h100x2-pcie": {"model": "H100 PCIe", "count": 2},
    "h100x8-nvswitch": {"model": "H100 SXM", "count": 8},
    "h200x4-nvswitch": {"model": "H200", "count": 4},
    "b200x8-nvswitch": {"model": "B200", "count": 8},
    "rtxpro6000x2-pcie": {"model": "RTX PRO 6000", "count": 2},
    "rtx5090x4-pcie": {"model": "RTX 5090", "count": 4},
}
#: The facts matrix's hardware axis: ``HARDWARE`` and the layouts issue 21 names that it lacks
#: (8x H200, 4x H100, 1x RTX 4090), so every layout a new user tries is planned.
FACTS_HARDWARE: dict[str, dict[str, Any]] = {
    **HARDWARE,
    "h100x4-nvswitch": {"model": "H100 SXM", "count": 4},
    "h200x8-nvswitch": {"model": "H200", "count": 8},
    "rtx4090x1": {"model": "RTX 4090", "count": 1},
}
MODELS = {p.key: p.models[0] for p in load_knowledge().models.values()}
VARIANTS = {
    "profile": {},
    "prefill-off-bs": {"prefill_cuda_graph": "off", "cuda_graph_max_bs_decode": 64, "text_only": True},
    "prefill-default": {"prefill_cuda_graph": "default", "attn_dp_size": 2, "kv_cache_dtype": "fp8_e4m3"},
    "graphs-off-sbo": {"cuda_graph": False, "single_batch_overlap": True, "p2p_check": True,
                       "speculative_algorithm": "NGRAM"},
}
CASES = list(itertools.product(sorted(MODELS), sorted(HARDWARE), SUPPORTED_VERSIONS, sorted(VARIANTS)))

#: Prefill/decode pairs behind one gateway (``sglang_role``): every shipped model profile on 8x H100 with
#: each transfer backend a version offers (mooncake_tcp from 0.5.15, the catalogs) and an RDMA device, so
#: that both roles' flags, a prefill server's bootstrap port and its replicas' are parsed by every
#: supported release's own parser (scripts/check_plans_against_real_parsers.py).
PD_TRANSFER_BACKENDS = ("mooncake", "nixl", "mooncake_tcp")


def pd_inventories() -> list[tuple[str, list[tuple[str, dict[str, Any], dict[str, Any]]]]]:
    """(version, the hosts of one inventory: a prefill and a decode server of gateway ``gw``)."""
    out = []
    for model, version, backend in itertools.product(sorted(MODELS), SUPPORTED_VERSIONS, PD_TRANSFER_BACKENDS):
        if backend == "mooncake_tcp" and version == "0.5.9":
            continue
        intents = {"disaggregation_transfer_backend": backend, "disaggregation_ib_device": "mlx5_0,mlx5_1"}
        if model == "qwen3-32b":  # TP 2: four replicas, each a server of its own with its own bootstrap port
            intents["tp_size"] = 2
        out.append((version, [(name, {}, {"sglang_model": MODELS[model], "sglang_gpus": HARDWARE["h100x8-nvswitch"],
                                          "sglang_gateways": ["gw"], "sglang_role": role, "sglang_intents": intents})
                              for name, role in (("p", "prefill"), ("d", "decode"))]))
    return out
