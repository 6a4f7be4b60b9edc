"""One 8x H100 SXM (HGX, NVSwitch) host serving Qwen3-235B-A22B (FP8 MoE) at TP 8.

    sglang-deploy plan inventory/h100.py --explain

NVLS comes on by itself here (SM90 + NVSwitch + TP 8 > 2); single-batch
overlap stays off (SGLang refuses it on SM90).

TP 8 is this host's choice (TP 4 would hold the ~220 GiB of FP8 weights; 8
doubles the KV cache and the memory bandwidth per token). At TP 8 the
checkpoint's experts (moe_intermediate_size 1536, FP8 blocks of 128x128) would
put 1536 / 8 = 192 columns on each rank, not a multiple of block_n 128, and
SGLang refuses to load that (layers/quantization/fp8.py Fp8MoEMethod
.create_weights); the plan therefore runs EP 2: 1536 / (8 / 2) = 384 columns,
3 blocks per rank, and 128 / 2 = 64 experts per EP rank. With the checkpoint's
metadata the model-facts layer derives EP 2; without it the model profile's
fallback rule says the same.
"""

h100 = [
    (
        "h100-1",
        {
            "sglang_model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
            "sglang_gpus": {"model": "H100 SXM", "count": 8, "topology": "nvswitch"},
            "sglang_intents": {
                "tp_size": {
                    "value": "all",
                    "reason": "every GPU of the host: TP 4 would hold the weights, TP 8 doubles the KV cache and "
                    "the memory bandwidth per token",
                },
                "mem_fraction_static": 0.85,
                "served_model_name": "qwen3-235b-a22b",
                "host": "0.0.0.0",
                "enable_metrics": True,
            },
            "sglang_secrets": {"hf_token": {"env": "HF_TOKEN"}, "api_key": {"env": "SGLANG_API_KEY"}},
        },
    ),
]
