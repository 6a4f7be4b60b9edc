"""The planner: layers, reasons, hardware rules, bad input."""

from __future__ import annotations

import pytest

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.plan.spec import build_spec

from tests.conftest import load_probe

REFERENCE = {
    "sglang_model": "Qwen/Qwen3.6-27B",
    "sglang_gpus": {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"},
}


def plan_for(host_data, group_data=None, probe=None, version=None, host="h1"):
    spec = build_spec(host, group_data or {}, host_data)
    return plan_host(spec, probe=load_probe(probe) if probe else None, sglang_version=version)


def intent(plan, name):
    return plan.intents[name]


def test_reference_sm86_no_nvls_but_custom_allreduce():
    plan = plan_for(REFERENCE)
    nvls = intent(plan, "nvls")
    assert (nvls.value, nvls.layer) == (False, "arch")
    assert "SM86 has no NVLink SHARP" in nvls.reason
    car = intent(plan, "custom_all_reduce")
    assert (car.value, car.layer) == (True, "topology")
    assert "TP 2" in car.reason
    assert "--disable-custom-all-reduce" not in plan.argv
    assert "--enable-nccl-nvls" not in plan.argv
    assert plan.env["NCCL_NVLS_ENABLE"] == "0"
    assert intent(plan, "tp_size").value == 2 and intent(plan, "tp_size").layer == "model"


def test_reference_model_profile_intents():
    plan = plan_for(REFERENCE)
    got = {n: (intent(plan, n).value, intent(plan, n).layer) for n in (
        "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
        "speculative_num_draft_tokens", "text_only", "prefill_cuda_graph", "single_batch_overlap")}
    assert got == {
        "speculative_algorithm": ("NEXTN", "model"),
        "speculative_num_steps": (3, "model"),
        "speculative_eagle_topk": (1, "model"),
        "speculative_num_draft_tokens": (4, "model"),
        "text_only": (True, "model"),
        "prefill_cuda_graph": ("on", "model"),
        "single_batch_overlap": (False, "model"),
    }
    assert "MoE" in intent(plan, "single_batch_overlap").reason


def test_probe_and_declaration_give_the_same_plan():
    declared = plan_for(REFERENCE)
    probed = plan_for(REFERENCE, probe="a6000x2-bridge")
    assert declared.argv == probed.argv
    assert declared.env == probed.env


def test_probe_contradicting_the_inventory_stops_the_host():
    data = {**REFERENCE, "sglang_gpus": {"model": "H100 SXM", "count": 8}}
    with pytest.raises(PlanError, match="inventory declares 8x H100 80GB HBM3, the host has 2x NVIDIA RTX A6000"):
        plan_for(data, probe="a6000x2-bridge")


def test_layering_group_then_host():
    group = {"sglang_intents": {"mem_fraction_static": 0.8, "context_length": 32768}}
    host = {**REFERENCE, "sglang_intents": {"mem_fraction_static": {"value": 0.9, "reason": "measured on this box"}}}
    plan = plan_for(host, group)
    mem = intent(plan, "mem_fraction_static")
    assert (mem.value, mem.layer, mem.reason) == (0.9, "host", "measured on this box")
    ctx = intent(plan, "context_length")
    assert (ctx.value, ctx.layer) == (32768, "group")
    assert plan.argv[plan.argv.index("--mem-fraction-static") + 1] == "0.9"
    # host data overrides the model layer too
    plan = plan_for({**REFERENCE, "sglang_intents": {"speculative_num_steps": 1}})
    steps = intent(plan, "speculative_num_steps")
    assert (steps.value, steps.layer) == (1, "host")
    draft = intent(plan, "speculative_num_draft_tokens")
    assert draft.value == 2  # forced to steps + 1 at top-k 1, with a warning
    assert any("forces steps + 1" in w for w in plan.warnings)


def test_every_intent_has_value_layer_and_reason():
    plan = plan_for(REFERENCE)
    for r in plan.intents.values():
        assert r.layer in ("sglang-default", "arch", "topology", "model", "group", "host"), r
        assert r.reason, r


def test_geforce_without_p2p_gets_nccl_fallback():
    plan = plan_for({"sglang_model": "Qwen/Qwen3-32B", "sglang_intents": {"tp_size": 2}}, probe="rtx4090x2-pcie")
    car = intent(plan, "custom_all_reduce")
    assert car.value is False and car.layer == "topology"
    assert "--disable-custom-all-reduce" in plan.argv
    assert plan.nccl_conf["NCCL_P2P_DISABLE"] == "1"
    assert "GeForce" in plan.nccl_comments["NCCL_P2P_DISABLE"]


def test_geforce_host_cannot_turn_custom_allreduce_back_on():
    data = {"sglang_model": "Qwen/Qwen3-32B", "sglang_intents": {"custom_all_reduce": True, "tp_size": 2}}
    plan = plan_for(data, probe="rtx4090x2-pcie")
    assert "--disable-custom-all-reduce" in plan.argv
    assert any(w.startswith("custom_all_reduce=True (host layer) overridden to False") for w in plan.warnings)


def test_four_pcie_gpus_fall_back_to_nccl():
    plan = plan_for({"sglang_model": "Qwen/Qwen3-32B"}, probe="a6000x4-two-bridges")
    car = intent(plan, "custom_all_reduce")
    assert car.value is False and car.layer == "topology" and "NVLink" in car.reason
    assert "--disable-custom-all-reduce" in plan.argv
    # the same GPUs as one bridged pair keep it
    plan = plan_for({"sglang_model": "Qwen/Qwen3-32B", "sglang_gpu_indices": [2, 3]}, probe="a6000x4-two-bridges")
    assert intent(plan, "custom_all_reduce").value is True
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_nvls_only_with_nvswitch_and_more_than_two_gpus():
    big = plan_for({"sglang_model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"}, probe="h100x8-nvswitch")
    assert intent(big, "nvls").value is True and "--enable-nccl-nvls" in big.argv
    assert big.env["NCCL_NVLS_ENABLE"] == "1"
    two = plan_for({"sglang_model": "Qwen/Qwen3-32B", "sglang_gpu_indices": [0, 1]}, probe="h100x8-nvswitch")
    assert intent(two, "nvls").value is False and "--enable-nccl-nvls" not in two.argv
    assert "more than 2 GPUs" in intent(two, "nvls").reason


def test_forcing_nvls_on_sm86_is_overridden_with_a_warning():
    plan = plan_for({**REFERENCE, "sglang_intents": {"nvls": True}})
    assert intent(plan, "nvls").value is False and "--enable-nccl-nvls" not in plan.argv
    assert any("nvls=True (host layer) overridden to False" in w for w in plan.warnings)


def test_single_batch_overlap_never_on_sm90():
    data = {"sglang_model": "Qwen/Qwen3-30B-A3B", "sglang_intents": {"single_batch_overlap": True}}
    plan = plan_for(data, probe="h100x8-nvswitch")
    assert "--enable-single-batch-overlap" not in plan.argv
    assert intent(plan, "single_batch_overlap").layer == "arch"
    assert any("SM90" in w for w in plan.warnings)
    # allowed on SM86 for a MoE model when asked (SGLang accepts it there)
    plan = plan_for({**data, "sglang_gpus": {"model": "RTX A6000", "count": 2}})
    assert "--enable-single-batch-overlap" in plan.argv


def test_fp8_w8a8_refused_where_the_architecture_has_no_fp8():
    plan = plan_for({**REFERENCE, "sglang_model": "Qwen/Qwen3-32B", "sglang_intents": {"quantization": "w8a8_fp8"}})
    assert "--quantization" not in plan.argv
    assert any("w8a8_fp8 needs FP8 tensor cores" in w for w in plan.warnings)
    h100 = plan_for({"sglang_model": "Qwen/Qwen3-32B", "sglang_intents": {"quantization": "w8a8_fp8"}},
                    probe="h100x8-nvswitch")
    assert h100.argv[h100.argv.index("--quantization") + 1] == "w8a8_fp8"


def test_unknown_model_plans_with_a_warning():
    plan = plan_for({"sglang_model": "/models/custom", "sglang_gpus": {"model": "L40S", "count": 1}})
    assert plan.model_profile is None
    assert any("no model profile" in w for w in plan.warnings)
    assert plan.argv[:2] == ["--model-path", "/models/custom"]


# --- bad input: one clear error naming host and field ------------------------------------------

BAD = [
    ({"sglang_intents": {"mem_fraction_static": 1.2}}, "sglang_intents.mem_fraction_static", "between 0 and 1"),
    ({"sglang_intents": {"mem_fraction_static": 0}}, "sglang_intents.mem_fraction_static", "between 0 and 1"),
    ({"sglang_intents": {"tensor_parallel": 2}}, "sglang_intents.tensor_parallel", "unknown intent"),
    ({"sglang_intents": {"tp_size": 4}}, "sglang_intents.tp_size", "larger than the 2 GPU"),
    ({"sglang_intents": {"prefill_cuda_graph": "force"}}, "sglang_intents.prefill_cuda_graph", "one of"),
    ({"sglang_intents": {"speculative_algorithm": "MTP"}}, "sglang_intents.speculative_algorithm", "one of"),
    ({"sglang_intents": {"served_model_name": "a\nb"}}, "sglang_intents.served_model_name", "control character"),
    ({"sglang_intents": {"attention_backend": "fa9"}}, "sglang_intents.attention_backend", "choices"),
    ({"sglang_version": "0.4.0"}, "sglang_version", "0.5.23"),
    ({"sglang_extra_args": "--foo"}, "sglang_extra_args", "list of strings"),
    ({"sglang_extra_args": ["--no-such-flag"]}, "sglang_extra_args", "would refuse '--no-such-flag'"),
    ({"sglang_extra_args": ["--cuda-graph-max-bs", "8"]}, "sglang_extra_args", "ambiguous"),
    ({"sglang_extra_args": ["--max-prefill-tokens"]}, "sglang_extra_args", "expected one argument"),
    ({"sglang_extra_args": ["--tp-size", "2"]}, "sglang_extra_args[0]", "already sets"),
    ({"sglang_extra_args": ["--log-requests-level", "a\x1b"]}, "sglang_extra_args[1]", "control character"),
    ({"sglang_gpu_indices": [0, 0]}, "sglang_gpu_indices", "twice"),
    ({"sglang_modle": "x"}, "sglang_modle", "unknown setting"),
    ({"sglang_model_profile": "nope"}, "sglang_model_profile", "unknown model profile"),
    ({"sglang_env": {"HF_TOKEN": "x"}}, "sglang_env.HF_TOKEN", "secret"),
    ({"sglang_env": {"BAD-NAME": "x"}}, "sglang_env.BAD-NAME", "not a valid"),
    ({"sglang_secrets": {"hf_token": "hf_abc"}}, "sglang_secrets.hf_token", "{env: VARIABLE}"),
    ({"sglang_secrets": {"password": {"env": "X"}}}, "sglang_secrets.password", "unknown secret"),
    ({"sglang_venvs_dir": "relative/venvs"}, "sglang_venvs_dir", "absolute path"),
    ({"sglang_pip_no_index": True}, "sglang_pip_no_index", "needs sglang_pip_find_links"),
    ({"sglang_pip_extras": ["all;rm"]}, "sglang_pip_extras[0]", "not a package extra"),
    ({"sglang_user": "root;rm"}, "sglang_user", "not a valid name"),
    ({"sglang_target_tok_s": "fast"}, "sglang_target_tok_s", "must be a number"),
    ({"sglang_target_tok_s": 0}, "sglang_target_tok_s", "must be > 0"),
    ({"sglang_gate": {"retries": 3}}, "sglang_gate.retries", "unknown gate setting"),
    ({"sglang_gate": {"repeats": 0}}, "sglang_gate.repeats", "positive integer"),
    ({"sglang_gate": {"tolerance": 1.5}}, "sglang_gate.tolerance", "fraction"),
    ({"sglang_gate": {"fail_on": ["tpp"]}}, "sglang_gate.fail_on", "unknown --fail-on group"),
    ({"sglang_gate": {"url": "host:30000"}}, "sglang_gate.url", "http(s) URL"),
    ({"sglang_intents": {"speculative_algorithm": None, "speculative_num_steps": 2},
      "sglang_model": "Qwen/Qwen3-32B"}, "sglang_intents.speculative_num_steps", "without speculative_algorithm"),
]


@pytest.mark.parametrize("data,field,text", BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_input_names_host_and_field(data, field, text):
    with pytest.raises(PlanError) as exc:
        plan_for({**REFERENCE, **data}, host="gpu-bad-1")
    assert exc.value.host == "gpu-bad-1"
    assert exc.value.field == field
    assert text in str(exc.value)
    assert str(exc.value).startswith(f"host gpu-bad-1: {field}: ")


def test_tp_not_dividing_the_heads():
    # Qwen3.6-27B has 24 heads: TP 16 on 16 GPUs cannot split them evenly
    data = {**REFERENCE, "sglang_gpus": {"model": "H100 SXM", "count": 16}}
    with pytest.raises(PlanError, match="TP size 16 does not divide the 24 attention heads of qwen3.6-27b"):
        plan_for(data)


def test_unsupported_version_on_the_command_line():
    with pytest.raises(PlanError) as exc:
        plan_for(REFERENCE, version="0.6.0")
    assert exc.value.field == "--sglang-version"


def test_extra_args_are_appended_after_checking():
    plan = plan_for({**REFERENCE, "sglang_extra_args": ["--max-prefill-tokens", "16384", "--enable-mixed-chunk"]})
    assert plan.argv[-3:] == ["--max-prefill-tokens", "16384", "--enable-mixed-chunk"]


def test_deprecated_extra_arg_is_a_warning():
    plan = plan_for({**REFERENCE, "sglang_extra_args": ["--disable-cuda-graph"]})
    assert any("--disable-cuda-graph is deprecated in SGLang 0.5.23" in w for w in plan.warnings)


def test_secrets_never_reach_plan_unit_or_argv(monkeypatch):
    secret = "hf_SECRETVALUE123"
    data = {**REFERENCE, "sglang_secrets": {"hf_token": {"env": "HF_TOKEN"}, "api_key": {"env": "MY_KEY"}}}
    plan = plan_for(data)
    redacted = render(plan)
    real = render(plan, {"HF_TOKEN": secret, "SGLANG_API_KEY": "sk-APIKEY"})
    assert f"HF_TOKEN={secret}" in real.env and "SGLANG_API_KEY=sk-APIKEY" in real.env
    for text in (real.unit, real.nccl_conf, redacted.unit, redacted.env, redacted.nccl_conf, " ".join(plan.argv)):
        assert secret not in text and "sk-APIKEY" not in text
    # the key reaches the server through its environment, appended inside the process, not via ExecStart
    assert "${" not in real.unit and "(('--api-key', 'SGLANG_API_KEY'),)" in real.unit
    assert "--api-key " not in real.unit  # never as an ExecStart word
    assert "HF_TOKEN='<redacted>'" in redacted.env


def test_secret_with_a_newline_is_refused():
    plan = plan_for({**REFERENCE, "sglang_secrets": {"hf_token": {"env": "HF_TOKEN"}}})
    with pytest.raises(PlanError) as exc:
        render(plan, {"HF_TOKEN": "abc\nNCCL_P2P_DISABLE=1"})
    assert exc.value.field == "sglang_secrets.hf_token" and "abc" not in str(exc.value)


def test_weights_that_cannot_fit_are_a_warning():
    plan = plan_for({"sglang_model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
                     "sglang_gpus": {"model": "RTX A6000", "count": 2}})
    assert any("weighs ~221 GiB" in w and "will not load" in w for w in plan.warnings)
    plan = plan_for({**REFERENCE, "sglang_intents": {"mem_fraction_static": 0.6}})
    assert any("little room for the KV cache" in w for w in plan.warnings)
    assert not any("GiB" in w for w in plan_for(REFERENCE).warnings)
