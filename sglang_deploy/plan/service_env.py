"""What a host's plan writes besides the argv: the service's environment file and the
host's ``/etc/nccl.conf``, each entry with the comment that says why it is there.
"""

from __future__ import annotations

from typing import Mapping

from sglang_deploy.plan.caches import Caches
from sglang_deploy.plan.hardware import GpuSet
from sglang_deploy.plan.intents import Resolved
from sglang_deploy.plan.spec import DeploySpec
from sglang_deploy.plan.weights import Weights


def service_env(spec: DeploySpec, gpus: GpuSet, resolved: Mapping[str, Resolved],
                caches: Caches | None = None) -> tuple[dict[str, str], dict[str, str]]:
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
    if caches is not None:
        # The compile caches in the version's own directory (sglang_deploy/plan/caches.py says which
        # version reads which variable, and where): set here, SGLang's own setdefault keeps them.
        for name, value, why in caches.env():
            put(name, value, f"{why}; kept across restarts and rollbacks (sglang_cache_dir)")
    for name, value in spec.extra_env.items():
        put(name, value, "set in inventory data (sglang_env)")
    return env, comments


def nccl_conf(spec: DeploySpec, resolved: Mapping[str, Resolved]) -> tuple[dict[str, str], dict[str, str]]:
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


def weights_env(weights: Weights | None, env: dict[str, str], comments: dict[str, str]) -> None:
    if weights is not None and (weights.staged or weights.source == "host"):
        # huggingface_hub.constants.HF_HUB_OFFLINE: no Hub call at all; a missing file is an error at
        # start instead of a download while the host serves nothing.
        env["HF_HUB_OFFLINE"] = "1"
        comments["HF_HUB_OFFLINE"] = f"weights are local ({weights.origin}): never download at start"
