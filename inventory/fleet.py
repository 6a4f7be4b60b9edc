"""A small fleet: single A6000 and H100 hosts, and one SGLang instance over two 8x H100 hosts.

    sglang-deploy plan inventory/fleet.py                 # every host's plan; the TP group's ranks
    sglang-deploy rollout inventory/fleet.py               # canary first, then waves (see README)
    pyinfra inventory/fleet.py deploy.py                   # everything at once (an outage: prefer rollout)

Groups are pyinfra's: each list below is one; ``(hosts, data)`` gives the
group its own data.

- ``sglang_gateways``: ``gw-01`` runs the SGLang Model Gateway in front of the A6000 hosts, which
  name it in ``sglang_gateways`` and share its API key; a rollout deploys it first.
- ``canary``: the rollout's first wave of workers, one host on its own.
- ``a6000``: the reference configuration (Qwen3.6-27B at TP 2) on more hosts.
- ``h100``: one 8x H100 host serving Qwen3-235B-A22B FP8 at TP 8 and EP 2 (the FP8
  experts' 128-column blocks do not split 8 ways: see inventory/h100.py).
- ``h100_tp16``: ONE instance of the same model over two 8x H100 hosts,
  TP 16 (``tp_size: all`` = 8 GPUs x 2 nodes) and EP 4 (1536 / (16 / 4) = 384
  columns per rank, 3 FP8 blocks). ``sglang_tp_group`` makes them
  one unit: ranks follow the order below (``h100-tp16-a`` is rank 0, where the
  group is gated and the rendezvous listens), every member gets the same
  flags but ``--node-rank``, and a rollout never splits them.
"""

_A6000 = {
    "sglang_model": "Qwen/Qwen3.6-27B",
    "sglang_gpus": {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"},
    "sglang_intents": {
        "mem_fraction_static": 0.88,
        "context_length": 65536,
        "served_model_name": "qwen3.6-27b",
        "host": "0.0.0.0",
    },
    "sglang_target_tok_s": 45,
}

_QWEN3_235B = {
    "sglang_model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
    "sglang_gpus": {"model": "H100 SXM", "count": 8, "topology": "nvswitch"},
    "sglang_intents": {
        "tp_size": {"value": "all", "reason": "every GPU of the host: TP 4 would hold the weights, TP 8 doubles "
                                              "the KV cache and the memory bandwidth per token"},
        "mem_fraction_static": 0.85,
        "served_model_name": "qwen3-235b-a22b",
        "host": "0.0.0.0",
    },
    "sglang_secrets": {"hf_token": {"env": "HF_TOKEN"}},
}

# The A6000 hosts' clients send to the SGLang Model Gateway on gw-01 (docs/gateway.md): each restart
# drains its host out of it first, and a rollout keeps all but one of them serving. Two routers
# behind HAProxy on port 30000: the gateway's own updates restart one router at a time, drained in
# the balancer first, so no update of the gateway refuses a client either.
sglang_gateways = [
    ("gw-01", {"ssh_hostname": "10.0.0.2",
               "sglang_gateway": {"port": 30000, "policy": "cache_aware", "routers": 2,
                                  "api_key": {"env": "SGLANG_API_KEY"}}}),
]

_BEHIND_GW = {"sglang_gateways": ["gw-01"], "sglang_secrets": {"api_key": {"env": "SGLANG_API_KEY"}}}

canary = [
    ("a6000-01", {"ssh_hostname": "10.0.0.11", **_A6000, **_BEHIND_GW}),
]

a6000 = [
    ("a6000-02", {"ssh_hostname": "10.0.0.12", **_A6000, **_BEHIND_GW}),
    ("a6000-03", {"ssh_hostname": "10.0.0.13", **_A6000, **_BEHIND_GW}),
]

h100 = [
    ("h100-01", {"ssh_hostname": "10.0.1.11", **_QWEN3_235B}),
]

h100_tp16 = (
    [
        # sglang_node_address: where the other member reaches this host (the fabric,
        # not the management network ssh uses). Rank 0's is the rendezvous address.
        ("h100-tp16-a", {"ssh_hostname": "10.0.1.21", "sglang_node_address": "10.10.1.21"}),
        ("h100-tp16-b", {"ssh_hostname": "10.0.1.22", "sglang_node_address": "10.10.1.22"}),
    ],
    {
        **_QWEN3_235B,
        "sglang_tp_group": "qwen3-235b-tp16",
        "sglang_nnodes": 2,  # optional; checked against the members above
        "sglang_dist_init_port": 50000,
        # NCCL's bootstrap and Gloo's CPU group go over the fabric, not the management NIC.
        "sglang_nccl_socket_ifname": "bond0",
        "sglang_gloo_socket_ifname": "bond0",
        "sglang_intents": {
            **_QWEN3_235B["sglang_intents"],
            "tp_size": {"value": "all", "reason": "one instance over both hosts: 8 GPUs x 2 nodes = TP 16, "
                                                  "twice the KV cache of a single 8x H100 host"},
        },
        "sglang_target_tok_s": 30,
    },
)
