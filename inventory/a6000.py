"""The reference deployment: Qwen3.6-27B on one host with 2x RTX A6000.

    pyinfra inventory/a6000.py deploy.py          # deploy
    sglang-deploy plan inventory/a6000.py --explain   # see every decision and why

The model profile (sglang_deploy/data/models/qwen3.6-27b.yaml) carries the
tuned speculative settings (MTP 3 steps, top-k 1, 4 draft tokens), text-only
use and the prefill CUDA graph; the architecture profile and topology rules
decide NVLS (off: SM86) and custom allreduce (kept at TP 2). Only what is
particular to this host is set here.
"""

a6000 = [
    (
        "a6000-1",
        {
            "sglang_model": "Qwen/Qwen3.6-27B",
            # Declared for offline planning; the deploy probes the host and stops
            # if it finds other GPUs or fewer of them.
            "sglang_gpus": {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"},
            "sglang_intents": {
                "mem_fraction_static": {
                    "value": 0.88,
                    "reason": "~53 GiB of bf16 weights over 2x 48 GiB: 0.88 leaves ~31 GiB of pool for the KV "
                    "cache and MTP drafts, ~6 GiB per GPU for activations and CUDA graphs",
                },
                "context_length": {"value": 65536, "reason": "long enough for the workload, short enough for KV cache"},
                "served_model_name": "qwen3.6-27b",
                "host": "0.0.0.0",
            },
            # A gated model would also need a token, read on the controller at deploy time
            # and written only into the root-only env file:
            # "sglang_secrets": {"hf_token": {"env": "HF_TOKEN"}},
        },
    ),
]
