"""SGLang's own memory formulas, worked by hand: the hybrid recurrent-state share, the vision
tower's factor, the MLA prefill-graph reserve, per release; GPUs sized by NVML's total."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sglang_deploy.plan import sizing
from sglang_deploy.plan.hardware import declared_hardware
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.plan.profiles import load_knowledge
from tests.recorded_facts import DEEPSEEK_V3, QWEN3_32B, QWEN36_27B

HUB = Path(__file__).resolve().parent.parent / "sglang_deploy" / "simulator" / "hub" / "checkpoints"

MIB = 1024 ** 2
H100_NVML = 81559  # nvidia-smi total of an H100 80GB HBM3 (data/gpus.yaml memory_source)


def test_a_hybrid_models_kv_cache_gets_its_share_after_the_recurrent_state():
    # Qwen3.6-27B (Qwen3_5ForConditionalGeneration: 48 linear-attention + 16 full-attention
    # layers) on one H100, SGLang 0.5.23, text only. By hand:
    # reserve = 512 + 1.5 x 8192 + 1/8 x 1024 + 2 x 256 (decode graph) + 8 x 58 (prefill graph sizes
    # up to 8192) = 13,904 MiB; mem_fraction_static = round((81559 - 13904) / 81559, 3) = 0.83.
    assert sizing.reserve_mib(H100_NVML, 1, version="0.5.23") == 13904
    b = sizing.budget(QWEN36_27B, 1, H100_NVML, version="0.5.23")
    assert b is not None and b.fraction == 0.83
    rest = H100_NVML * MIB * 0.83 - 55562855904            # the pool less the weights
    share = rest * 0.9 / (1 + 0.9)                          # mamba_full_memory_ratio 0.9: state : KV
    # whole slots of one request's state (146.8 MiB at TP 1), the pool's padding slot counted
    # (mem_cache/kv_cache_configurator.py _handle_max_mamba_cache, the ratio-based branch)
    state = b.state_per_request
    slots = int((share - state) // state)
    kv = rest - (slots + 1) * state
    per_token = 4 * 256 * 2 * 2 * 16                        # KV heads x head_dim x (K, V) x bf16 x full layers
    assert b.kv.bytes_per_token == per_token
    assert b.kv_tokens == int(kv // per_token)
    # 0.5.23 resolves this architecture's strategy to extra_buffer: 3 + 2 slots per running request
    assert (b.slots_per_request, b.max_requests) == (5, slots // 5)
    # The planner used to give the whole rest to the KV cache: 1.9 x the tokens SGLang holds (less
    # the part of a slot the share leaves over).
    whole = int(rest // per_token)
    assert whole / b.kv_tokens == pytest.approx(1.9, rel=0.01)
    assert "recurrent state" in b.describe() and "mamba_full_memory_ratio 0.9" in b.describe()
    # A model without linear-attention layers keeps the whole rest for its KV cache.
    dense = sizing.budget(QWEN3_32B, 1, H100_NVML, version="0.5.23")
    assert dense is not None and dense.state_bytes == 0
    assert dense.kv_bytes == dense.pool - dense.weights


def test_the_planned_context_of_a_hybrid_model_is_what_sglang_would_hold():
    p = plan(QWEN36_27B, {"model": "H100 SXM", "count": 1}, sglang_intents={"text_only": True})
    ctx = p.intents["context_length"]
    values = {k: r.value for k, r in p.intents.items()}
    assert (values["speculative_algorithm"], values["speculative_num_draft_tokens"]) == ("NEXTN", 4)
    b = sizing.planned_budget(QWEN36_27B, H100_NVML, values, None, "0.5.23")
    assert b is not None and b.state_bytes > 0 and b.draft_tokens == 4
    assert ctx.value == b.kv_tokens // 1024 * 1024 < QWEN36_27B.context_limit
    # MTP's draft states come out of the state's share: fewer slots (K = (share - p(1 + D)) //
    # (p(1 + D/5))), and the states of min(48, K // 5) + 1 requests' 4 draft tokens beside them
    share = (b.pool - b.weights) * 0.9 / 1.9
    p_ = b.state_per_request
    slots = int((share - p_ * 5) // (p_ * (1 + 4 / 5)))
    assert b.max_requests == slots // 5
    assert b.state_bytes == (slots + 1) * p_ + p_ * (min(48, slots // 5) + 1) * 4


def test_the_vision_factor_scales_with_the_tower():
    # adjust_mem_fraction_for_vlm: 0.95 x clamp(1 - 0.1 x (layers x hidden^2 / (24 x 1024^2) - 1), 0.8, 1.05)
    assert sizing.vlm_fraction(1.0, None, None) == pytest.approx(0.95)          # ViT-L/14 by default
    assert sizing.vlm_fraction(1.0, 24, 1024) == pytest.approx(0.95)
    # 27 x 1152^2 = 35,831,808 against 25,165,824: ratio 1.423828125, factor 0.9576171875
    assert sizing.vlm_fraction(1.0, 27, 1152) == pytest.approx(0.95 * 0.9576171875)
    # a 48 x 1664 tower: ratio 5.28, factor clamped to 0.8; a 12 x 768 tower: clamped to 1.05
    assert sizing.vlm_fraction(0.8, 48, 1664) == pytest.approx(0.8 * 0.95 * 0.8)
    assert sizing.vlm_fraction(0.8, 12, 768) == pytest.approx(0.8 * 0.95 * 1.05)
    small, large = (sizing.budget(dataclasses.replace(QWEN36_27B, vision_layers=n), 1, H100_NVML, vision=True)
                    for n in (12, 40))
    assert small is not None and large is not None and small.fraction > large.fraction


def test_a_served_vision_tower_gets_sglangs_reserve_for_its_size():
    vlm = dataclasses.replace(QWEN36_27B, model="org/some-vlm", vision_layers=27)  # no profile: served
    served_plan = plan(vlm, H100X4)
    served, tp = served_plan.intents["mem_fraction_static"], served_plan.intents["tp_size"].value
    # Qwen3_5ForConditionalGeneration keeps its prefill graph in 0.5.23 (allow-listed multimodal)
    base = sizing.sglang_mem_fraction(H100_NVML, sizing.reserve_mib(
        H100_NVML, tp, vision=True, version="0.5.23", architecture="Qwen3_5ForConditionalGeneration"))
    assert served.value == round(base * 0.95 * 0.9576171875, 4)
    assert "vision tower (scaled by its size" in served.reason
    text_plan = plan(vlm, H100X4, sglang_intents={"text_only": True})
    text, text_tp = text_plan.intents["mem_fraction_static"], text_plan.intents["tp_size"].value
    assert text.value == sizing.sglang_mem_fraction(H100_NVML, sizing.reserve_mib(H100_NVML, text_tp)) > served.value


def test_the_prefill_graph_reserve_per_release():
    chunk = 8192
    assert len(sizing.prefill_graph_sizes(chunk)) == 8 + 14 + 8 + 8 + 12 + 8   # the six ranges up to 8192
    assert sizing.prefill_graph_mib("0.5.23", chunk) == 58 * 8
    assert sizing.prefill_graph_mib("0.5.23", chunk, mla=True) == 1536          # reserve_for_graph_mb, MLA
    assert sizing.prefill_graph_mib("0.5.19", chunk, mla=True) == 1536
    assert sizing.prefill_graph_mib("0.5.15", chunk, mla=True) == 0             # BCG off for MLA there
    assert sizing.prefill_graph_mib("0.5.15", chunk) == 58 * 8
    assert sizing.prefill_graph_mib("0.5.9", chunk) == 0                        # piecewise graph opt-in
    assert sizing.prefill_graph_mib("0.5.19", chunk, attn_dp=8) == 0            # DP attention: off before 0.5.23
    assert sizing.prefill_graph_mib("0.5.23", chunk, mla=True, attn_dp=8) == 1536
    assert sizing.prefill_graph_mib("0.5.23", chunk, vision=True,
                                    architecture="Qwen3VLMoeForConditionalGeneration") == 0


def test_an_mla_models_reserve_includes_the_prefill_graph():
    # DeepSeek-V3 at TP 8 on H200s (143,771 MiB), DP attention over 8: 512 + 1.5 x 8192 + 1024 +
    # 2 x 512 + 3 x 512 x 8 + 1.5 x 512 x 8 (batch above 300) + 1536 (MLA prefill graph) = 34,816 MiB
    with_graph = sizing.reserve_mib(143771, 8, attn_dp=8, mla=True, version="0.5.23")
    assert with_graph == 512 + 12288 + 1024 + 1024 + 12288 + 6144 + 1536
    without = sizing.reserve_mib(143771, 8, attn_dp=8, mla=True, version="0.5.23", prefill_graph=False)
    assert without == with_graph - 1536
    p = plan(DEEPSEEK_V3, {"model": "H200", "count": 8})
    mem = p.intents["mem_fraction_static"]
    assert mem.value == sizing.sglang_mem_fraction(143771, with_graph)
    assert "MLA prefill graph reserves 1.5 GiB" in mem.reason


def test_declared_gpus_are_planned_with_nvmls_total():
    db = load_knowledge().gpus
    l40s = declared_hardware("h", {"model": "L40S", "count": 4}, db)
    assert {g.memory_mib for g in l40s.gpus} == {46068}                       # 45.0 GiB, not the marketed 48
    p = plan(QWEN3_32B, {"model": "L40S", "count": 4})
    assert p.gpus.memory_mib == 46068 and p.gpus.memory_gib == 45.0
    # a model without a recorded NVML figure keeps its marketed size; a declared memory_gib wins
    assert {g.memory_mib for g in declared_hardware("h", {"model": "A40", "count": 1}, db).gpus} == {48 * 1024}
    assert {g.memory_mib for g in declared_hardware("h", {"model": "L40S", "count": 1, "memory_gib": 48},
                                                   db).gpus} == {48 * 1024}
    for model in db.models:
        assert model.memory_mib is None or model.memory_mib <= model.memory_gib * 1024 * 1.04, model.name


H100X4 = {"model": "H100 SXM", "count": 4}


def plan(facts, gpus, version="0.5.23", **data):
    data = {"sglang_model": facts.model, "sglang_gpus": gpus, **data}
    return plan_host(build_spec("gpu-1", {}, data), sglang_version=version, facts=facts)


def test_a_dsa_models_kv_cell_holds_its_indexer_keys():
    # DeepSeek-V3.2 and GLM-5 (index_topk in config.json: DeepSeek Sparse Attention). Per token and
    # layer SGLang sizes the latent plus the indexer's FP8 keys with a float32 scale per 128:
    # 128 + 4 = 132 B, whatever the KV cache's dtype. In an FP8 cache from 0.5.19 the latent is
    # counted as the pool stores it: 512 FP8 + 512 / 128 x 4 B of scales + 64 x 2 B of rope = 656.
    from sglang_deploy.simulator.facts_matrix import checkpoints

    facts = checkpoints()
    v32, glm5, r1 = (facts[m] for m in ("deepseek-ai/DeepSeek-V3.2", "zai-org/GLM-5-FP8", "deepseek-ai/DeepSeek-R1"))
    for f, layers in ((v32, 61), (glm5, 78)):
        assert f.extra["dsa_index_head_dim"] == 128 and f.kv_layers == layers
        for version in ("0.5.9", "0.5.15", "0.5.19", "0.5.23"):
            cell = sizing.kv_cell(f, 8, None, version)
            assert cell.bytes_per_token == (576 * 2 + 132) * layers and "indexer" in cell.how
        assert [sizing.kv_cell(f, 8, "fp8_e4m3", v).bytes_per_token for v in ("0.5.9", "0.5.15", "0.5.19", "0.5.23")] \
            == [(576 + 132) * layers] * 2 + [(656 + 132) * layers] * 2
        # which FP8 cell follows the backend SGLang picks for the GPU (arg_groups/overrides.py
        # _dsa_split_backend_resolution): flashmla_kv on Hopper stores the scaled 656, trtllm on
        # Blackwell the plain 576 (calculate_mla_kv_cache_dim); an unknown GPU gets the larger cell
        for version in ("0.5.19", "0.5.23"):
            cells = {major: sizing.kv_cell(f, 8, "fp8_e4m3", version, sm_major=major) for major in (9, 10, None)}
            assert cells[9].bytes_per_token == cells[None].bytes_per_token == (656 + 132) * layers
            assert cells[10].bytes_per_token == (576 + 132) * layers and "trtllm" in cells[10].how
            # a cache left to SGLang (auto) is FP8 there, as SGLang makes it; bf16 asked for stays bf16
            for auto in (None, "auto"):
                assert sizing.kv_cell(f, 8, auto, version, sm_major=10).bytes_per_token == (576 + 132) * layers
                assert sizing.kv_cell(f, 8, auto, version, sm_major=9).bytes_per_token == (576 * 2 + 132) * layers
            assert sizing.kv_cell(f, 8, "bfloat16", version, sm_major=10).bytes_per_token == (576 * 2 + 132) * layers
    # on SM120 a DeepSeek model's FP8 cache is trtllm's, GLM-5's flashinfer_sparse_mla's (scaled)
    assert sizing.kv_cell(v32, 8, "fp8_e4m3", "0.5.23", sm_major=12).bytes_per_token == (576 + 132) * 61
    assert sizing.kv_cell(glm5, 8, "fp8_e4m3", "0.5.23", sm_major=12).bytes_per_token == (656 + 132) * 78
    # an MLA model without the indexer keeps the plain latent
    assert sizing.kv_cell(r1, 8, None, "0.5.23").bytes_per_token == 576 * 2 * 61
    assert "dsa_index_head_dim" not in r1.extra


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_a_dsa_models_kv_cache_is_fp8_on_sm100_as_sglang_makes_it(version):
    # SGLang turns a DSA model's auto KV cache into FP8 on compute capability 10 and later, bf16
    # below: the plan writes it down where SGLang would choose it, so its sizing is SGLang's
    from sglang_deploy.simulator.facts_matrix import checkpoints

    v32 = checkpoints()["deepseek-ai/DeepSeek-V3.2"]
    on = {gpu: plan(v32, {"model": gpu, "count": 8}, version=version) for gpu in ("B200", "H200")}
    kv = on["B200"].intents["kv_cache_dtype"]
    assert (kv.value, kv.layer) == ("fp8_e4m3", "topology") and "compute capability 10" in kv.reason
    assert on["B200"].argv[on["B200"].argv.index("--kv-cache-dtype") + 1] == "fp8_e4m3"
    assert on["H200"].intents["kv_cache_dtype"].value == "auto" and "--kv-cache-dtype" not in on["H200"].argv
    # on B200 the plan sizes the cell SGLang's default trtllm backend stores: the plain FP8 latent
    # from 0.5.19 (0.5.9 has no scaled layout at all). The weights' size is DeepSeek-V3's recorded
    # index total (the same shapes but the indexer): V3.2's index is not recorded
    index = json.loads((HUB / "deepseek-ai--DeepSeek-V3" / "model.safetensors.index.json").read_text())
    weighed = dataclasses.replace(v32, total_weight_bytes=index["metadata"]["total_size"])
    values = {k: r.value for k, r in plan(weighed, {"model": "B200", "count": 8}, version=version).intents.items()}
    for gpu, cell in (("B200", 576), ("H200", 656)):
        b = sizing.planned_budget(weighed, on[gpu].gpus.memory_mib, values, "fp8_e4m3", version, on[gpu].gpus.sm_major)
        assert b is not None and b.kv.bytes_per_token == ((cell if version == "0.5.23" else 576) + 132) * 61, gpu
    # an inventory that leaves the cache to SGLang in so many words (auto) gets the same sizing
    auto = plan(weighed, {"model": "B200", "count": 8}, version=version, sglang_intents={"kv_cache_dtype": "auto"})
    assert auto.intents["kv_cache_dtype"].value == "auto"
    b = sizing.planned_budget(weighed, auto.gpus.memory_mib, {k: r.value for k, r in auto.intents.items()}, "auto",
                              version, auto.gpus.sm_major)
    assert b is not None and b.kv.bytes_per_token == (576 + 132) * 61
    # and the layout is ranked with that cache, not with the bf16 one SGLang does not allocate there
    for gpu, cell in (("B200", (576 + 132) * 61), ("H200", (576 * 2 + 132) * 61)):
        reason = plan(weighed, {"model": gpu, "count": 8}, version=version).intents["tp_size"].reason
        assert f" at {cell:,} B/token " in reason, reason
    # an MLA model without the indexer, or with learnable sinks (bf16 only), is left to SGLang
    r1 = checkpoints()["deepseek-ai/DeepSeek-R1"]
    assert plan(r1, {"model": "B200", "count": 8}, version=version).intents["kv_cache_dtype"].value == "auto"
    sinks = dataclasses.replace(v32, extra={**v32.extra, "learnable_sink": True})
    assert plan(sinks, {"model": "B200", "count": 8}, version=version).intents["kv_cache_dtype"].value == "auto"


@pytest.mark.parametrize("field, value, words", [
    ("index_head_dim", "128", "index_head_dim must be an integer"),
    ("index_head_dim", 0, "index_head_dim must be at least 1"),
    ("index_head_dim", 10 ** 12, "index_head_dim is 1000000000000"),
    ("index_topk", True, "index_topk must be an integer"),
    ("index_topk", 10 ** 30, "index_topk is a larger number"),
    ("index_n_heads", "64", "index_n_heads must be an integer"),
    ("index_n_heads", 0, "index_n_heads must be at least 1"),
    ("index_n_heads", 10 ** 6, "index_n_heads is 1000000"),
])
def test_a_dsa_configs_bad_indexer_field_is_one_clear_error(field, value, words):
    from sglang_deploy.plan.modelfacts import CheckpointError, facts_from_metadata
    from sglang_deploy.simulator.facts_matrix import FIXTURES

    config = json.loads((FIXTURES / "deepseek-ai--DeepSeek-V3.2" / "config.json").read_text())
    with pytest.raises(CheckpointError) as err:
        facts_from_metadata("deepseek-ai/DeepSeek-V3.2", None, "recorded", {**config, field: value})
    assert str(err.value).startswith("deepseek-ai/DeepSeek-V3.2: ") and words in str(err.value)
    assert "\n" not in str(err.value)
    # learnable_sink is read as SGLang reads it, bool(getattr(hf_config, "learnable_sink", False)):
    # any true value keeps the cache bf16
    for sink, fp8 in ((True, False), ("yes", False), (0, True), (None, True)):
        facts = facts_from_metadata("deepseek-ai/DeepSeek-V3.2", None, "recorded", {**config, "learnable_sink": sink})
        assert sizing.dsa_fp8_by_default(facts) is fp8
