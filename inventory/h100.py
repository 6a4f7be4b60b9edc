"""One 8x H100 SXM (HGX, NVSwitch) host serving Qwen3-235B-A22B (FP8 MoE) at TP 8.

    sglang-deploy plan inventory/h100.py --explain

NVLS comes on by itself here (SM90 + NVSwitch + TP 8 > 2); single-batch
overlap stays off (SGLang refuses it on SM90).
"""

h100 = [
    (
        "h100-1",
        {
            "sglang_model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
            "sglang_gpus": {"model": "H100 SXM", "count": 8, "topology": "nvswitch"},
            "sglang_intents": {
                "mem_fraction_static": 0.85,
                "served_model_name": "qwen3-235b-a22b",
                "host": "0.0.0.0",
                "enable_metrics": True,
            },
            "sglang_secrets": {"hf_token": {"env": "HF_TOKEN"}, "api_key": {"env": "SGLANG_API_KEY"}},
        },
    ),
]
