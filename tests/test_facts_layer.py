"""The model-facts layer: each decision from a checkpoint's facts, with its numbers."""

from __future__ import annotations

import dataclasses

import pytest

from sglang_deploy.plan import sizing
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.modelfacts import FactsUnavailable, MoeFacts
from sglang_deploy.plan.output import print_plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.plan.spec import build_spec
from tests.recorded_facts import DEEPSEEK_V3, LLAMA_70B, QWEN3_30B_A3B, QWEN3_32B, QWEN3_235B_FP8, QWEN36_27B

H100X4 = {"model": "H100 SXM", "count": 4}
H100X8 = {"model": "H100 SXM", "count": 8}
A6000X2 = {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"}


def plan(facts, gpus, version="0.5.23", **data):
    data = {"sglang_model": facts.model if hasattr(facts, "model") else "x/y", "sglang_gpus": gpus, **data}
    return plan_host(build_spec("gpu-1", {}, data), sglang_version=version, facts=facts)


def test_llama_70b_on_4x_h100_gets_tp_4_not_1():
    # The example: the profile-less plan said TP 1 for ~131 GiB of bf16 weights.
    p = plan(LLAMA_70B, H100X4)
    tp = p.intents["tp_size"]
    assert (tp.value, tp.layer) == (4, "model-facts")
    assert "weights 32.9 GiB (1/4)" in tp.reason and "81,920 B/token" in tp.reason
    assert p.argv[p.argv.index("--tp-size") + 1] == "4"
    # TP 2 leaves 65.7 GiB of weights on each GPU: less than the 32k-token KV minimum fits.
    assert sizing.budget(LLAMA_70B, 2, p.gpus.memory_mib).kv_tokens < sizing.MIN_KV_TOKENS


def test_no_tp_fits_is_one_line_with_the_numbers():
    with pytest.raises(PlanError) as err:
        plan(LLAMA_70B, A6000X2)
    text = str(err.value)
    assert text.startswith("host gpu-1: tp_size (model-facts): no TP up to the 2 GPU(s) fits")
    assert "131.4 GiB of weights" in text and "TP 2: weights 65.7 GiB/GPU" in text


def test_declared_tp_is_checked_by_the_same_rules():
    # TP 2 at mem_fraction_static 0.85 holds ~15k KV tokens on H100s: under the preferred 32k,
    # above the 4k floor: planned, said. At SGLang's own fraction (0.828 on NVML's 81,559 MiB, with
    # the prefill graph's 464 MiB reserved) it holds ~2k: refused like 0.825.
    p = plan(LLAMA_70B, H100X4, sglang_intents={"tp_size": 2, "mem_fraction_static": 0.85})
    assert any(w.startswith("project policy: the KV cache holds ~") and "weights 65.7 GiB (1/2)" in w
               for w in p.warnings)
    with pytest.raises(PlanError, match="constraint kv-cache-holds-one-request"):
        plan(LLAMA_70B, H100X4, sglang_intents={"tp_size": 2})
    with pytest.raises(PlanError) as err:
        plan(LLAMA_70B, H100X4, sglang_intents={"tp_size": 2, "mem_fraction_static": 0.825})
    assert err.value.field == "sglang_intents.tp_size"
    assert "constraint kv-cache-holds-one-request" in str(err.value) and "project policy" in str(err.value)
    # 24 heads of Qwen3.6-27B do not split 16 ways; 4 KV heads do not split 8 ways... but replicate.
    with pytest.raises(PlanError, match="constraint heads-divisible-by-tp: 24 attention heads do not divide by TP 16"):
        plan(QWEN36_27B, {"model": "H100 SXM", "count": 16}, sglang_intents={"tp_size": 16})


def test_kv_heads_fewer_than_tp_replicate():
    p = plan(QWEN3_235B_FP8, H100X8, sglang_intents={"tp_size": 8})
    assert "1 KV head(s)/GPU" in p.intents["mem_fraction_static"].reason
    assert sizing.kv_heads_per_rank(QWEN3_235B_FP8, 8) == 1
    odd = dataclasses.replace(QWEN3_32B, num_key_value_heads=6, num_attention_heads=48)
    with pytest.raises(PlanError, match="kv-heads-vs-tp: TP 8 is not a multiple of the 6 KV heads"):
        plan(odd, H100X8, sglang_intents={"tp_size": 8})


def test_block_fp8_experts_get_the_ep_that_splits_them():
    p = plan(QWEN3_235B_FP8, H100X8, sglang_intents={"tp_size": "all"})
    ep = p.intents["ep_size"]
    assert (ep.value, ep.layer) == (2, "model-facts")
    assert "1536 / (TP 8 / EP 1) = 192 is not a multiple of block_n 128" in ep.reason
    assert "1536 / (TP 8 / EP 2) = 384" in ep.reason
    assert p.argv[p.argv.index("--ep-size") + 1] == "2"
    # At TP 4 the experts split without EP: 1536 / 4 = 384.
    p4 = plan(QWEN3_235B_FP8, H100X4)
    assert p4.intents["ep_size"].value == 1 and "--ep-size" not in p4.argv


def test_declared_ep_that_breaks_the_blocks_is_refused_with_the_fix():
    with pytest.raises(PlanError) as err:
        plan(QWEN3_235B_FP8, H100X8, sglang_intents={"tp_size": 8, "ep_size": 1})
    assert err.value.field == "sglang_intents.ep_size"
    assert "moe-block-n" in str(err.value) and "= 192 columns per rank" in str(err.value)
    assert "EP 2 would split it" in str(err.value) and "fp8.py Fp8MoEMethod.create_weights" in str(err.value)


def test_experts_must_divide_by_ep():
    odd = dataclasses.replace(QWEN3_30B_A3B, moe=MoeFacts(num_experts=60, experts_per_token=4,
                                                          moe_intermediate_size=1408))
    with pytest.raises(PlanError, match="experts-divisible-by-ep: 60 experts do not divide by EP 8"):
        plan(odd, H100X8, sglang_intents={"tp_size": 8, "ep_size": 8})


def test_mla_kv_is_not_split_by_tp():
    cell = sizing.kv_cell(DEEPSEEK_V3, 8)
    assert cell.bytes_per_token == (512 + 64) * 61 * 2
    assert sizing.kv_cell(DEEPSEEK_V3, 1).bytes_per_token == cell.bytes_per_token
    # 640 GiB of FP8 weights: 8x H100 cannot hold them, 8x H200 can.
    with pytest.raises(PlanError, match="no TP up to the 8 GPU"):
        plan(DEEPSEEK_V3, H100X8)
    p = plan(DEEPSEEK_V3, {"model": "H200", "count": 8})
    assert p.intents["tp_size"].value == 8
    assert "MLA: (512 + 64) x 61 layers" in p.intents["mem_fraction_static"].reason


def test_hybrid_counts_only_full_attention_layers():
    cell = sizing.kv_cell(QWEN36_27B, 2)
    assert cell.bytes_per_token == 2 * 256 * 2 * 2 * 16  # 2 KV heads/GPU, 16 full-attention layers
    assert "48 linear-attention layers keep a fixed state" in cell.how


def test_sliding_window_layers_count_at_the_swa_ratio():
    swa = dataclasses.replace(QWEN3_32B, sliding_window_layers=32, sliding_window=4096)
    full = sizing.kv_cell(QWEN3_32B, 1).bytes_per_token
    assert sizing.kv_cell(swa, 1).bytes_per_token == pytest.approx(full / 2 + full / 2 * 0.8)


def test_gpt_oss_counts_its_sliding_window_layers_at_sglangs_ratio():
    from tests.recorded_facts import GPT_OSS_120B

    cell = sizing.kv_cell(GPT_OSS_120B, 1)
    per_layer = 8 * 64 * 2 * 2  # 8 KV heads x head_dim 64 x (K, V) x bf16
    assert cell.bytes_per_token == pytest.approx(per_layer * (18 + 18 * 0.8))
    assert "18 full-attention layers + 18 sliding-window layers x 0.8" in cell.how
    # MXFP4 runs from SM80 on (mxfp4.py Mxfp4Config.get_min_capability): it plans on one A100 at TP 1.
    p = plan(GPT_OSS_120B, {"model": "A100 SXM", "count": 1})
    assert p.intents["tp_size"].value == 1


def test_mem_fraction_and_context_come_from_the_budget():
    p = plan(QWEN3_32B, A6000X2)
    mem, ctx = p.intents["mem_fraction_static"], p.intents["context_length"]
    gpu = p.gpus.memory_mib
    assert mem.value == sizing.sglang_mem_fraction(gpu, sizing.reserve_mib(gpu, 2)) and mem.layer == "model-facts"
    assert f"~{sizing.budget(QWEN3_32B, 2, gpu).kv_tokens:,} tokens" in mem.reason
    assert (ctx.value, ctx.layer) == (40960, "model-facts")


def test_a_context_longer_than_the_model_or_the_cache_is_lowered_with_a_warning():
    p = plan(QWEN3_32B, A6000X2, sglang_intents={"context_length": 131072})
    assert p.intents["context_length"].value == 40960
    assert any("context_length 131,072 (host layer) lowered to 40,960" in w for w in p.warnings)
    # A memory fraction whose KV cache holds one 32k request but not the model's 40960 positions:
    fraction = next(f / 1000 for f in range(700, 800, 5)
                    if 32768 <= sizing.budget(QWEN3_32B, 2, 49152, f / 1000).kv_tokens < 40960)
    small = plan(QWEN3_32B, A6000X2, sglang_intents={"context_length": 40960, "mem_fraction_static": fraction})
    ctx = small.intents["context_length"]
    assert ctx.value < 40960 and "the KV cache holds" in ctx.reason


def test_speculative_and_text_only_from_a_profile_need_the_checkpoint_to_carry_them():
    # The Qwen3.6 profile asks for NEXTN and text-only; a checkpoint without MTP or vision cannot.
    # (an architecture SGLang has no MTP draft class for: Qwen3_5 itself gets one assumed layer)
    bare = dataclasses.replace(QWEN36_27B, mtp_layers=0, vision=False, architectures=("Qwen3ForCausalLM",))
    p = plan(bare, A6000X2)
    assert p.intents["speculative_algorithm"].value is None and "--speculative-algorithm" not in p.argv
    assert p.intents["text_only"].value is False
    assert any("has no MTP/NextN draft for Qwen3ForCausalLM" in w for w in p.warnings)
    assert any("no vision tower" in w for w in p.warnings)
    # Declared in the inventory, the same is refused.
    with pytest.raises(PlanError, match="speculative-needs-draft-layers"):
        plan(QWEN3_32B, A6000X2, sglang_intents={"speculative_algorithm": "NEXTN"})
    with pytest.raises(PlanError, match="text-only-needs-vision-tower"):
        plan(QWEN3_32B, A6000X2, sglang_intents={"text_only": True})
    # With the MTP layers it plans, and a named draft model is enough for EAGLE.
    assert plan(QWEN36_27B, A6000X2).intents["speculative_algorithm"].value == "NEXTN"
    ok = plan(QWEN3_32B, H100X4, sglang_intents={"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                                                 "speculative_eagle_topk": 1},
              sglang_extra_args=["--speculative-draft-model-path", "org/eagle3-draft"])
    assert ok.intents["speculative_algorithm"].value == "EAGLE3"


def test_fp8_on_ampere_warns_of_w8a16():
    p = plan(QWEN3_235B_FP8, {"model": "A100 SXM", "count": 8}, sglang_intents={"tp_size": 8})
    assert any("W8A16 (Marlin)" in w for w in p.warnings)
    assert not any("W8A16" in w for w in plan(QWEN3_235B_FP8, H100X8).warnings)


def test_facts_unavailable_falls_back_to_the_profile_with_one_line():
    missing = FactsUnavailable("Qwen/Qwen3.6-27B", "the Hub answered 401 and nothing is cached")
    p = plan(missing, A6000X2)
    assert p.intents["tp_size"].layer == "model"  # the profile's fallback sizing
    lines = [w for w in p.warnings if "no model facts" in w]
    assert lines == ["no model facts for Qwen/Qwen3.6-27B: the Hub answered 401 and nothing is cached; sized "
                     "from the model profile instead"]
    assert p.as_dict()["model_facts"]["unavailable"] == missing.reason


def test_plan_records_the_facts_source_and_revision(tmp_path):
    import io

    hub = dataclasses.replace(QWEN3_32B, revision="0" * 40, source="the Hub")
    p = plan(hub, A6000X2)
    assert p.as_dict()["model_facts"] == {"source": "the Hub", "revision": "0" * 40, "model": "Qwen/Qwen3-32B"}
    out = io.StringIO()
    print_plan(p, render(p), explain=True, out=out)
    text = out.getvalue()
    assert f"Facts     the checkpoint's own metadata, from the Hub (revision {'0' * 40})" in text
    assert "model-facts" in text and "smallest TP that splits 64 heads" in text


def test_tp_group_sized_from_facts_keeps_ranks_even():
    from sglang_deploy.plan.inventory_plan import plan_inventory

    group = {"sglang_model": LLAMA_70B.model, "sglang_gpus": {"model": "RTX A6000", "count": 2},
             "sglang_tp_group": "g"}
    hosts = [(n, group, {"sglang_node_address": f"10.0.0.{i}"}) for i, n in enumerate(("a", "b"), 1)]
    plans = plan_inventory(hosts, sglang_version="0.5.23", facts={"a": LLAMA_70B, "b": LLAMA_70B})
    assert not any(isinstance(p, PlanError) for p in plans), plans
    assert [p.intents["tp_size"].value for p in plans] == [4, 4]
    assert "--nnodes" in plans[0].argv


def _inventory(path):
    from sglang_deploy.deploy.inventory import load_inventory

    return [(h.name, h.group_data, h.host_data) for h in load_inventory(path)]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.15", "0.5.19", "0.5.23"])
def test_reference_inventories_with_their_checkpoints_facts(version, repo_root):
    from sglang_deploy.plan.catalog import load_catalog
    from sglang_deploy.plan.inventory_plan import plan_inventory

    (a6000,) = plan_inventory(_inventory(str(repo_root / "inventory/a6000.py")), sglang_version=version,
                              facts={"a6000-1": QWEN36_27B})
    i = a6000.intents
    assert (i["tp_size"].value, i["tp_size"].layer) == (2, "model-facts")
    assert "smallest TP that splits 24 heads / 4 KV heads" in i["tp_size"].reason
    assert [i[k].value for k in ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                                 "speculative_num_draft_tokens")] == ["NEXTN", 3, 1, 4]
    assert i["custom_all_reduce"].value is True and i["nvls"].value is False
    (from_profile,) = plan_inventory(_inventory(str(repo_root / "inventory/a6000.py")), sglang_version=version)
    assert a6000.warnings == from_profile.warnings  # the facts agree with the tuned profile: nothing to warn of
    argv = list(a6000.argv)
    if version == "0.5.9":
        # only the checkpoint's facts size the recurrent state: 0.5.9 would keep MTP's draft states
        # for 48 requests first (13.8 GiB of the 16.4 after the weights), leaving slots for 4 and
        # ~45,000 KV tokens, short of the 65,536-token context; the plan runs the 18 the slots allow
        cap = i["max_running_requests"]
        assert (cap.value, cap.layer) == (18, "model-facts") and "slots for 4 requests" in cap.reason
        at = argv.index("--max-running-requests")
        assert argv[at + 1] == "18"
        del argv[at:at + 2]
    assert argv == from_profile.argv
    (h100,) = plan_inventory(_inventory(str(repo_root / "inventory/h100.py")), sglang_version=version,
                             facts={"h100-1": QWEN3_235B_FP8})
    assert h100.intents["tp_size"].value == 8 and h100.intents["ep_size"].value == 2
    assert h100.argv[h100.argv.index("--ep-size") + 1] == "2"  # spelled --ep-size by every supported version
    assert "= 192 is not a multiple of block_n 128" in h100.intents["ep_size"].reason
    for p in (a6000, h100):
        assert load_catalog(version).check(p.argv) == []


def test_a_tp_below_the_gpu_count_fills_them_with_replicas():
    # Before: TP 2 on one quarter of the host, six GPUs idle with a warning; now replicas of the TP
    # ranked fastest (TP 4 x 2 under the default workload's limits: tests/test_layout_rank.py).
    p = plan(QWEN3_32B, H100X8)
    tp, dp = p.intents["tp_size"].value, p.intents["dp_size"].value
    assert tp * dp == 8 and dp > 1, (tp, dp)
    assert not any("stay idle" in w for w in p.warnings)
    assert not any("stay idle" in w for w in plan(QWEN3_32B, H100X8, sglang_intents={"tp_size": "all"}).warnings)


def test_an_fp8_kv_cache_halves_the_bytes_per_token_and_doubles_the_capacity():
    bf16 = plan(QWEN3_32B, A6000X2).intents["mem_fraction_static"]
    fp8 = plan(QWEN3_32B, A6000X2, sglang_intents={"kv_cache_dtype": "fp8_e4m3"}).intents["mem_fraction_static"]
    assert "131,072 B/token" in bf16.reason and "65,536 B/token" in fp8.reason
    fp8_tokens = sizing.budget(QWEN3_32B, 2, 49152, kv_cache_dtype="fp8_e4m3").kv_tokens
    assert fp8_tokens // 2 == sizing.budget(QWEN3_32B, 2, 49152).kv_tokens  # both rounded down


def test_no_facts_and_no_profile_is_refused_rather_than_sized_by_guess():
    """Llama-3.3-70B has no profile: without its checkpoint's facts, TP 1 (SGLang's default)
    would put ~141 GB of weights on one 80 GB GPU. The plan refuses and says how to fix it."""
    data = {"sglang_model": "meta-llama/Llama-3.3-70B-Instruct", "sglang_gpus": {"model": "H100 SXM", "count": 4}}
    missing = FactsUnavailable("meta-llama/Llama-3.3-70B-Instruct", "hub unreachable; no cached copy")
    with pytest.raises(PlanError) as err:
        plan_host(build_spec("h1", {}, data), facts=missing)
    assert err.value.field == "sglang_model"
    assert "hub unreachable" in str(err.value) and "models fetch" in str(err.value)
    declared = {**data, "sglang_intents": {"tp_size": 4}}
    plan = plan_host(build_spec("h1", {}, declared), facts=missing)
    assert plan.intents["tp_size"].value == 4 and plan.facts is None
    assert any("no model facts" in w for w in plan.warnings)
    # With the facts, the same inventory sizes itself.
    sized = plan_host(build_spec("h1", {}, data), facts=LLAMA_70B)
    assert sized.intents["tp_size"].value == 4 and sized.intents["tp_size"].layer == "model-facts"
