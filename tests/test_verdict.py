"""The gate's judgements (sglang_deploy/gate/verdict.py, causes.py): configuration as planned,
baseline per key, target and tolerance, reasons a user reads, likely causes."""

from __future__ import annotations

import pytest

from sglang_deploy.gate import verdict
from sglang_deploy.gate.causes import likely_causes, summarize_nvml, throttle_names
from sglang_deploy.gate.options import default
from sglang_deploy.gate.verdict import (
    BaselineSummary,
    compare_config,
    make_key,
    parse_fail_on,
    select_plan,
    summarize_baseline,
)


TOLERANCE = default("tolerance")


def decide(*args, tolerance=TOLERANCE, **kwargs):
    """verdict.decide with check's default tolerance (written once, in gate/options.py)."""
    return verdict.decide(*args, tolerance=tolerance, **kwargs)


def plan(sglang_version="0.5.23", **intents):
    base = {
        "tp_size": 2, "prefill_cuda_graph": "on", "custom_all_reduce": True, "nvls": False,
        "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4, "attention_backend": None, "mem_fraction_static": 0.88,
        "served_model_name": "qwen", "cuda_graph": True,
    }
    base.update(intents)
    return {"host": "h1", "sglang_version": sglang_version, "model": "Qwen/Qwen3.6-27B",
            "gpus": {"model": "RTX A6000", "count": 2},
            "intents": [{"name": k, "value": v, "layer": "model", "reason": "test"} for k, v in base.items()]}


def info_0523(**over):
    info = {
        "version": "0.5.23", "model_path": "Qwen/Qwen3.6-27B", "served_model_name": "qwen", "tp_size": 2,
        "cuda_graph_config": {"prefill": {"backend": "breakable"}, "decode": {"backend": "full"}},
        "disable_cuda_graph": False, "disable_custom_all_reduce": False, "enable_nccl_nvls": False,
        "speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4, "attention_backend": "flashinfer", "mem_fraction_static": 0.88,
    }
    info.update(over)
    return info


def info_059(**over):
    info = info_0523(version="0.5.9", speculative_algorithm="EAGLE", enable_piecewise_cuda_graph=True)
    del info["cuda_graph_config"]
    info.update(over)
    return info


def messages(cmp):
    return [d.message for d in cmp.diffs]


def test_matching_server_has_no_diffs_and_nextn_equals_eagle():
    assert compare_config(plan(), info_0523()).diffs == []
    assert compare_config(plan(), info_0523(speculative_algorithm="nextn")).diffs == []
    assert compare_config(plan(speculative_algorithm="EAGLE"), info_0523(speculative_algorithm="NEXTN")).diffs == []
    assert compare_config(plan(sglang_version="0.5.9"), info_059()).diffs == []


@pytest.mark.parametrize("over,field,text", [
    ({"speculative_num_steps": 2}, "speculative_num_steps", "speculative_num_steps: planned 3, server resolved 2"),
    ({"speculative_num_draft_tokens": 3}, "speculative_num_draft_tokens",
     "speculative_num_draft_tokens: planned 4, server resolved 3"),
    ({"speculative_eagle_topk": 4}, "speculative_eagle_topk", "speculative_eagle_topk: planned 1, server resolved 4"),
    ({"speculative_algorithm": None}, "speculative_algorithm",
     "speculative_algorithm: planned NEXTN, server resolved none"),
    ({"tp_size": 1}, "tp_size", "tp_size: planned 2, server resolved 1"),
    ({"cuda_graph_config": {"prefill": {"backend": "disabled"}}}, "prefill_cuda_graph",
     "prefill_cuda_graph: planned on, server resolved disabled"),
    ({"disable_custom_all_reduce": True}, "custom_all_reduce", "custom_all_reduce: planned on, server resolved off"),
    ({"enable_nccl_nvls": True}, "nvls", "nvls: planned off, server resolved on"),
    ({"mem_fraction_static": 0.85}, "mem_fraction_static", "mem_fraction_static: planned 0.88, server resolved 0.85"),
    ({"served_model_name": "other"}, "served_model_name", "served_model_name: planned qwen, server resolved other"),
    ({"version": "0.5.19"}, "sglang_version", "sglang_version: planned 0.5.23, server resolved 0.5.19"),
])
def test_each_compared_field_reports_planned_and_resolved(over, field, text):
    cmp = compare_config(plan(), info_0523(**over))
    assert [d.field for d in cmp.diffs] == [field]
    assert messages(cmp) == [text]
    default_fatal = field.startswith("speculative") or field in ("tp_size", "prefill_cuda_graph")
    assert cmp.diffs[0].fails is default_fatal
    assert cmp.diffs[0].as_dict()["message"] == text


def test_attention_backend_only_when_planned():
    assert compare_config(plan(), info_0523(attention_backend="triton")).diffs == []
    cmp = compare_config(plan(attention_backend="fa3"), info_0523(attention_backend="triton"))
    assert messages(cmp) == ["attention_backend: planned fa3, server resolved triton"]
    assert not cmp.diffs[0].fails


def test_prefill_graph_in_both_shapes():
    # 0.5.9: enable_piecewise_cuda_graph
    cmp = compare_config(plan(sglang_version="0.5.9"), info_059(enable_piecewise_cuda_graph=False))
    assert messages(cmp) == ["prefill_cuda_graph: planned on, server resolved disabled (enable_piecewise_cuda_graph)"]
    assert compare_config(plan(sglang_version="0.5.9", prefill_cuda_graph="off"),
                          info_059(enable_piecewise_cuda_graph=False)).diffs == []
    # 0.5.15+: cuda_graph_config.prefill.backend, also as a JSON string
    assert compare_config(plan(prefill_cuda_graph="off"),
                          info_0523(cuda_graph_config='{"prefill": {"backend": "disabled"}}')).diffs == []
    cmp = compare_config(plan(prefill_cuda_graph="off"), info_0523())
    assert messages(cmp) == ["prefill_cuda_graph: planned off, server resolved breakable"]
    # everything off
    cmp = compare_config(plan(), info_0523(disable_cuda_graph=True))
    assert messages(cmp) == ["prefill_cuda_graph: planned on, server resolved disabled (disable_cuda_graph)"]


def test_prefill_left_to_sglang_and_auto_disabled_is_a_note_not_a_diff():
    cmp = compare_config(plan(prefill_cuda_graph="default"),
                         info_0523(cuda_graph_config={"prefill": {"backend": "disabled"}}))
    assert cmp.diffs == []
    assert cmp.notes == ["prefill_cuda_graph: planned default (left to SGLang), server resolved disabled"]


def test_missing_server_fields_are_notes():
    info = info_0523()
    del info["cuda_graph_config"], info["enable_nccl_nvls"]
    cmp = compare_config(plan(), info)
    assert cmp.diffs == []
    assert any("enable_nccl_nvls" in n for n in cmp.notes) and any("prefill" in n for n in cmp.notes)


def test_tp_all_is_the_gpu_count():
    assert compare_config(plan(tp_size="all"), info_0523()).diffs == []
    assert messages(compare_config(plan(tp_size="all"), info_0523(tp_size=1))) == [
        "tp_size: planned 2, server resolved 1"]


def test_fail_on_is_configurable():
    assert parse_fail_on(None) == {"speculative", "tp", "prefill_graph"}
    assert parse_fail_on("none") == frozenset()
    assert parse_fail_on("all") == frozenset(verdict.DIFF_GROUPS)
    assert parse_fail_on("nvls, mem_fraction_static") == {"nvls", "mem_fraction_static"}
    with pytest.raises(ValueError, match="unknown --fail-on group"):
        parse_fail_on("speed")
    cmp = compare_config(plan(), info_0523(tp_size=1, enable_nccl_nvls=True), fail_on={"nvls"})
    assert {d.field: d.fails for d in cmp.diffs} == {"tp_size": False, "nvls": True}
    assert [d.field for d in cmp.failing] == ["nvls"]


def test_select_plan_from_plan_json_output():
    one, two = plan(), dict(plan(), host="h2")
    assert select_plan(one, None)["host"] == "h1"
    assert select_plan([one], None)["host"] == "h1"
    assert select_plan([one, two], "h2")["host"] == "h2"
    with pytest.raises(ValueError, match="pick one with --host"):
        select_plan([one, two], None)
    with pytest.raises(ValueError, match="not in the plan"):
        select_plan([one, two], "h3")
    with pytest.raises(ValueError):
        select_plan("nope", None)


# ---------------------------------------------------------------------------
# baseline and verdict
# ---------------------------------------------------------------------------

KEY = make_key("2x RTX A6000", "Qwen/Qwen3.6-27B", "0.5.23")


def entry(rate, ok=True, key=KEY):
    return {"verdict": "pass" if ok else "fail", "decode_tok_s": rate, "key": dict(key)}


def test_baseline_counts_only_passing_results_of_the_same_key():
    other_hw = make_key("2x RTX 4090", "Qwen/Qwen3.6-27B", "0.5.23")
    other_ver = make_key("2x RTX A6000", "Qwen/Qwen3.6-27B", "0.5.19")
    entries = [entry(70), entry(90, ok=False), entry(95, key=other_hw), entry(99, key=other_ver), entry(60),
               {"verdict": "error", "decode_tok_s": None, "key": KEY}, "junk"]
    s = summarize_baseline(entries, KEY)
    assert (s.matching, s.considered, s.passing, s.best_tok_s) == (4, 4, 2, 70)
    # NVML's "NVIDIA " prefix and spacing do not split a key
    assert summarize_baseline([entry(70, key=make_key("2x NVIDIA  RTX A6000", "Qwen/Qwen3.6-27B", "0.5.23"))],
                              KEY).best_tok_s == 70


def test_baseline_is_the_last_20_matching_lines():
    entries = [entry(100)] + [entry(50) for _ in range(20)]
    assert summarize_baseline(entries, KEY).best_tok_s == 50
    assert summarize_baseline(entries[:20], KEY).best_tok_s == 100
    assert summarize_baseline([], KEY).best_tok_s is None


def test_target_rule_with_the_amount():
    v = decide(41.2, target_tok_s=50)
    assert v.verdict == "fail"
    assert v.reasons == ["decode 41.2 tok/s is 17.6% below target 50"]
    assert decide(50.0, target_tok_s=50).verdict == "pass"
    assert decide(50.0).verdict == "pass" and decide(50.0).rules == []


def test_baseline_rule_with_tolerance():
    b = BaselineSummary(matching=3, considered=3, passing=2, best_tok_s=70.0)
    assert decide(63.0, baseline=b, tolerance=0.10).verdict == "pass"  # exactly 10% below
    v = decide(62.9, baseline=b, tolerance=0.10)
    assert v.verdict == "fail"
    assert v.reasons == ["decode 62.9 tok/s is 10.1% below the best recent passing result 70.0 tok/s for this "
                         "hardware, model and SGLang version (tolerance 10%)"]
    assert decide(60.0, baseline=b, tolerance=0.2).verdict == "pass"
    assert decide(1.0, baseline=BaselineSummary(0, 0, 0, None)).verdict == "pass"  # no baseline yet


def test_both_rules_and_config_diffs_give_one_reason_each():
    diffs = compare_config(plan(), info_0523(tp_size=1, enable_nccl_nvls=True)).diffs
    v = decide(40.0, target_tok_s=50, baseline=BaselineSummary(1, 1, 1, 70.0), config_diffs=diffs)
    assert v.verdict == "fail"
    assert v.reasons == [
        "decode 40.0 tok/s is 20.0% below target 50",
        "decode 40.0 tok/s is 42.9% below the best recent passing result 70.0 tok/s for this hardware, model "
        "and SGLang version (tolerance 10%)",
        "configuration differs from the plan: tp_size: planned 2, server resolved 1",
    ]
    assert [r["rule"] for r in v.rules] == ["target", "baseline", "configuration"]
    # a difference outside --fail-on is listed but passes
    nvls_only = compare_config(plan(), info_0523(enable_nccl_nvls=True)).diffs
    assert decide(80.0, target_tok_s=50, config_diffs=nvls_only).verdict == "pass"


# ---------------------------------------------------------------------------
# why it is slow
# ---------------------------------------------------------------------------


def test_nvml_summary_and_likely_causes():
    samples = [
        {"t": i, "gpus": [
            {"index": 0, "name": "NVIDIA RTX A6000", "sm_clock_mhz": 1100, "max_sm_clock_mhz": 2100,
             "throttle_mask": 0x4 | (0x40 if i % 2 else 0), "memory_used_mib": 40000, "memory_total_mib": 49140,
             "temperature_c": 85, "processes": [
                 {"pid": 10, "name": "python -m sglang.launch_server", "memory_mib": 39000, "server": True},
                 {"pid": 77, "name": "python train.py", "memory_mib": 900, "server": False}]},
            {"index": 1, "name": "NVIDIA RTX A6000", "sm_clock_mhz": 2000, "max_sm_clock_mhz": 2100,
             "throttle_mask": 0, "memory_used_mib": 39000, "memory_total_mib": 49140, "processes": []},
        ]} for i in range(4)
    ]
    s = summarize_nvml(samples)
    g0, g1 = s["gpus"]
    assert g0["sm_clock_mhz_median"] == 1100 and g0["throttle_reasons"] == {"hw_thermal_slowdown": 0.5,
                                                                           "sw_power_cap": 1.0}
    assert g1["throttle_reasons"] == {} and len(g0["processes"]) == 2
    causes = likely_causes(s, accept_length=1.1, draft_tokens=4)
    text = "\n".join(causes)
    assert "GPU 0 (NVIDIA RTX A6000) clocks were held back: sw power cap (100% of samples), hw thermal" in text
    assert "median SM clock of 1100 MHz, 52% of its 2100 MHz maximum" in text
    assert "pid 77 (python train.py) using 900 MiB" in text and "pid 10" not in text
    assert "accept length is 1.10 of up to 4 draft tokens" in text
    assert "GPU 1" not in text
    assert throttle_names(0x24) == ["sw_power_cap", "sw_thermal_slowdown"]


def test_likely_causes_name_config_diffs_and_missing_usage():
    diffs = compare_config(plan(), info_0523(tp_size=1)).diffs
    causes = likely_causes(None, None, None, diffs, ["the server sent no usage; ..."])
    assert causes == ["the server runs differently from the plan in 1 setting(s): tp_size",
                      "token counts are approximate (the server sent no usage)"]
    assert likely_causes() == []


def test_a_staged_snapshot_keys_history_by_the_model_id():
    from sglang_deploy.gate.verdict import make_key, model_id
    snap = "/var/lib/sglang/models/models--Qwen--Qwen3.6-27B/snapshots/" + "0" * 40
    assert model_id(snap) == "Qwen/Qwen3.6-27B"
    assert make_key("2x RTX A6000", snap, "0.5.23")["model"] == "Qwen/Qwen3.6-27B"
    assert model_id("Qwen/Qwen3.6-27B") == "Qwen/Qwen3.6-27B"
    assert model_id("/srv/models/my-llama") == "/srv/models/my-llama"


def test_staged_weights_expect_the_snapshot_as_model_path():
    snap = "/var/lib/sglang/models/models--Qwen--Qwen3.6-27B/snapshots/" + "a" * 40
    staged = {**plan(), "weights": {"model_path": snap}}
    assert compare_config(staged, info_0523(model_path=snap)).diffs == []
    assert messages(compare_config(staged, info_0523())) == [
        f"model_path: planned {snap}, server resolved Qwen/Qwen3.6-27B"]


def test_parsers_planned_auto_are_reported_as_sglang_resolved_them():
    # 0.5.23 resolves "auto" before it publishes its arguments: /server_info names the pick
    cmp = compare_config(plan(tool_call_parser="auto", reasoning_parser="auto"),
                         info_0523(tool_call_parser="qwen3_coder", reasoning_parser=None))
    assert cmp.diffs == []
    assert "tool_call_parser: planned auto, SGLang's detection picked qwen3_coder" in cmp.notes
    assert any(n.startswith("reasoning_parser: planned auto, SGLang's detection found none") for n in cmp.notes)
    # a named parser the server does not run is a difference, listed unless --fail-on names parsers
    named = compare_config(plan(tool_call_parser="pythonic"), info_0523(tool_call_parser="llama3"))
    assert messages(named) == ["tool_call_parser: planned pythonic, server resolved llama3"]
    assert named.diffs[0].group == "parsers" and not named.diffs[0].fails
    assert compare_config(plan(tool_call_parser="pythonic"), info_0523(tool_call_parser="pythonic")).diffs == []
    assert compare_config(plan(tool_call_parser="pythonic"), info_0523(tool_call_parser="llama3"),
                          fail_on={"parsers"}).failing
    # unplanned: not compared; planned but not reported: a note
    assert compare_config(plan(), info_0523(tool_call_parser="x")).diffs == []
    assert any("reports no tool_call_parser" in n for n in compare_config(plan(tool_call_parser="auto"),
                                                                             info_0523()).notes)
