"""Model facts of the recorded checkpoints (sglang_deploy/simulator/hub/checkpoints/: the
published config.json and safetensors index of each, read by the real parser), by name,
for unit tests of the model-facts layer and the constraint checker."""

from __future__ import annotations

from sglang_deploy.simulator.facts_matrix import checkpoints

_ALL = checkpoints()

LLAMA_70B = _ALL["meta-llama/Llama-3.3-70B-Instruct"]
QWEN3_32B = _ALL["Qwen/Qwen3-32B"]
QWEN3_235B_FP8 = _ALL["Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"]
QWEN3_30B_A3B = _ALL["Qwen/Qwen3-30B-A3B"]
DEEPSEEK_V3 = _ALL["deepseek-ai/DeepSeek-V3"]
QWEN36_27B = _ALL["Qwen/Qwen3.6-27B"]
GPT_OSS_120B = _ALL["openai/gpt-oss-120b"]
MIXTRAL = _ALL["mistralai/Mixtral-8x7B-v0.1"]
