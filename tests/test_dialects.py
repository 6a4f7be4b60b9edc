"""Per-version spelling of each intent (SGLang 0.5.9 to 0.5.23 parsers), through the whole planner.

Every plan here is also checked against the version's catalog by the planner
itself (a rejection raises), so each case proves the spelling is accepted.
"""

from __future__ import annotations

import pytest

from sglang_deploy.plan.dialects import parse_version
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.spec import build_spec

VERSIONS = ("0.5.9", "0.5.15", "0.5.19", "0.5.23")
A6000 = {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"}


def plan(version, model="Qwen/Qwen3.6-27B", gpus=A6000, **intents):
    data = {"sglang_model": model, "sglang_gpus": gpus, "sglang_intents": intents}
    return plan_host(build_spec("h", {}, data), sglang_version=version)


def after(argv, option):
    return argv[argv.index(option) + 1]


@pytest.mark.parametrize("version,on,off", [
    ("0.5.9", ["--enable-piecewise-cuda-graph"], []),
    ("0.5.15", ["--cuda-graph-backend-prefill", "breakable"], ["--cuda-graph-backend-prefill", "disabled"]),
    ("0.5.19", ["--cuda-graph-backend-prefill", "breakable"], ["--cuda-graph-backend-prefill", "disabled"]),
    ("0.5.23", ["--cuda-graph-backend-prefill", "breakable"], ["--cuda-graph-backend-prefill", "disabled"]),
])
def test_prefill_cuda_graph_on_and_off(version, on, off):
    p_on = plan(version, prefill_cuda_graph="on")
    assert " ".join(on) in " ".join(p_on.argv)
    assert "--enforce-piecewise-cuda-graph" not in p_on.argv
    p_off = plan(version, prefill_cuda_graph="off")
    graph_flags = [a for a in p_off.argv if "piecewise" in a or "backend-prefill" in a or a == "disabled"]
    assert graph_flags == off


@pytest.mark.parametrize("version,warns", [("0.5.9", False), ("0.5.15", True), ("0.5.19", False), ("0.5.23", False)])
def test_prefill_graph_default_warns_where_sglang_auto_disables_it(version, warns):
    # 0.5.15 drops the prefill graph for every multimodal model; 0.5.19+ allowlists Qwen3_5.
    p = plan(version, prefill_cuda_graph="default", text_only=False)
    assert any("turns the prefill CUDA graph off" in w for w in p.warnings) is warns
    assert not any("backend-prefill" in a or "piecewise" in a for a in p.argv)


@pytest.mark.parametrize("version,option", [
    ("0.5.9", "--cuda-graph-max-bs"), ("0.5.15", "--cuda-graph-max-bs-decode"),
    ("0.5.19", "--cuda-graph-max-bs-decode"), ("0.5.23", "--cuda-graph-max-bs-decode"),
])
def test_decode_graph_batch_size(version, option):
    p = plan(version, cuda_graph_max_bs_decode=48)
    assert after(p.argv, option) == "48"
    if parse_version(version) >= (0, 5, 15):
        assert "--cuda-graph-max-bs" not in p.argv


@pytest.mark.parametrize("version,deprecated", [("0.5.9", False), ("0.5.15", True), ("0.5.19", True),
                                                 ("0.5.23", True)])
def test_all_graphs_off(version, deprecated):
    p = plan(version, cuda_graph=False)
    assert "--disable-cuda-graph" in p.argv
    assert not any("backend-prefill" in a or "piecewise" in a for a in p.argv)
    assert any("--disable-cuda-graph is deprecated" in w for w in p.warnings) is deprecated


@pytest.mark.parametrize("version", VERSIONS)
def test_text_only(version):
    p = plan(version, text_only=True)
    # --language-only is encoder disaggregation in every version: never the way to go text-only
    assert "--language-only" not in p.argv
    assert "--language-model-only" not in p.argv
    if parse_version(version) >= (0, 5, 19):
        assert after(p.argv, "--json-model-override-args") == '{"language_model_only": true}'
        assert not any(w.startswith("text_only") for w in p.warnings)
    else:
        assert "--json-model-override-args" not in p.argv
        warning = next(w for w in p.warnings if w.startswith("text_only"))
        assert f"SGLang {version} cannot skip the vision tower" in warning and "not rendered" in warning


def test_text_only_on_a_text_model_is_a_no_op_with_a_note():
    p = plan("0.5.23", model="Qwen/Qwen3-32B", text_only=True)
    assert "--json-model-override-args" not in p.argv
    assert any("nothing to skip" in w for w in p.warnings)


@pytest.mark.parametrize("version", VERSIONS)
def test_single_batch_overlap_where_allowed(version):
    p = plan(version, model="Qwen/Qwen3-30B-A3B", single_batch_overlap=True, ep_size=2)
    assert "--enable-single-batch-overlap" in p.argv
    h100 = plan(version, model="Qwen/Qwen3-30B-A3B", gpus={"model": "H100 SXM", "count": 8},
                single_batch_overlap=True)
    assert "--enable-single-batch-overlap" not in h100.argv


@pytest.mark.parametrize("version", VERSIONS)
def test_speculative_mtp(version):
    p = plan(version)
    assert after(p.argv, "--speculative-algorithm") == "NEXTN"
    assert after(p.argv, "--speculative-num-steps") == "3"
    assert after(p.argv, "--speculative-eagle-topk") == "1"
    assert after(p.argv, "--speculative-num-draft-tokens") == "4"


@pytest.mark.parametrize("version", VERSIONS)
def test_speculative_partial_settings_are_completed(version):
    # SGLang fails when only some of steps / top-k / draft tokens are given
    p = plan(version, model="Qwen/Qwen3-32B", speculative_algorithm="ngram", speculative_num_steps=5)
    assert after(p.argv, "--speculative-algorithm") == "NGRAM"
    assert after(p.argv, "--speculative-eagle-topk") == "1"
    assert after(p.argv, "--speculative-num-draft-tokens") == "6"


@pytest.mark.parametrize("version,words", [
    ("0.5.9", ["--enable-dp-attention", "--dp-size", "2"]),
    ("0.5.15", ["--enable-dp-attention", "--dp-size", "2"]),
    ("0.5.19", ["--enable-dp-attention", "--dp-size", "2"]),
    ("0.5.23", ["--attn-dp-size", "2"]),
])
def test_data_parallel_attention(version, words):
    p = plan(version, model="Qwen/Qwen3-30B-A3B", attn_dp_size=2)
    assert " ".join(words) in " ".join(p.argv)
    assert not any("deprecated" in w for w in p.warnings)


@pytest.mark.parametrize("version,option", [
    ("0.5.9", "--mamba-scheduler-strategy"), ("0.5.15", "--mamba-radix-cache-strategy"),
    ("0.5.19", "--mamba-radix-cache-strategy"), ("0.5.23", "--mamba-radix-cache-strategy"),
])
def test_hybrid_model_prefix_cache_strategy(version, option):
    p = plan(version)
    assert after(p.argv, option) == "extra_buffer"


def test_api_key_is_a_systemd_reference_not_a_value():
    data = {"sglang_model": "Qwen/Qwen3-32B", "sglang_gpus": A6000,
            "sglang_secrets": {"api_key": {"file": "/run/keys/sglang"}}}
    p = plan_host(build_spec("h", {}, data), sglang_version="0.5.23")
    i = p.argv.index("--api-key")
    assert p.argv[i + 1] == "${SGLANG_API_KEY}" and p.argv_env_refs == {i + 1: "SGLANG_API_KEY"}


def test_parse_version():
    assert parse_version("0.5.23") == (0, 5, 23)
    assert parse_version("0.5.15.post1") == (0, 5, 15)
    assert parse_version("0.5.10rc1") == (0, 5, 10)
