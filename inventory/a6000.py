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
                    "reason": "27B bf16 weights take ~27 GiB per GPU at TP 2; 0.88 leaves the KV cache room for "
                    "MTP drafts while keeping activations and CUDA graphs out of OOM",
                },
                "context_length": {"value": 65536, "reason": "long enough for the workload, short enough for KV cache"},
                "served_model_name": "qwen3.6-27b",
                "host": "0.0.0.0",
            },
            # Read on the controller at deploy time; lands only in the root-only env file.
            "sglang_secrets": {"hf_token": {"env": "HF_TOKEN"}},
        },
    ),
]
