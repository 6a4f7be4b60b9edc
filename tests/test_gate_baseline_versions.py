"""The gate's baseline across SGLang versions and the operator's accepted reason
(sglang_deploy/gate/verdict.py ``summarize_baseline_across_versions``, ``decide``'s
``accept_slower``): the first deploy of a new SGLang version is compared with the most recent
other version's best on the same hardware and model instead of passing at any speed; once the
new version passed, its own results are the baseline; ``sglang_gate.accept_slower`` lets a
failing baseline rule pass with its reason (never a target or a configuration difference),
recorded in the history and shown by ``status``."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_deploy import status
from sglang_deploy.commands import cli, cli_handlers, status_table
from sglang_deploy.errors import PlanError
from sglang_deploy.gate import outcomes, verdict
from sglang_deploy.gate.errors import GateError
from sglang_deploy.gate.measure import RequestFigures
from sglang_deploy.gate.options import CheckOptions, from_file_dict, to_file_dict, validate
from sglang_deploy.gate.report import fill_verdict, format_report
from sglang_deploy.gate.run import Measured, _judge
from sglang_deploy.gate.verdict import (ACCEPT_SLOWER_MAX, BaselineSummary, ConfigDiff, decide, make_key,
                                        summarize_baseline, summarize_baseline_across_versions)
from sglang_deploy.plan.spec import build_spec

HW = "2x NVIDIA RTX A6000 (sm86)"
MODEL = "Qwen/Qwen3.6-27B"
NEW = make_key(HW, MODEL, "0.5.23")
PREV = make_key(HW, MODEL, "0.5.22")
OLDER = make_key(HW, MODEL, "0.5.19")
REASON = "0.5.23 drops the FP8 KV cache path on A6000; accepted by serving, OPS-1234"


def entry(rate, key, ok=True):
    return {"verdict": "pass" if ok else "fail", "decode_tok_s": rate, "key": dict(key)}


# ---- which results are the baseline ------------------------------------------------------------


def test_a_new_version_is_compared_with_the_most_recent_other_versions_best():
    entries = [entry(90.0, OLDER), entry(60.0, PREV), entry(69.2, PREV), entry(50.0, PREV, ok=False),
               entry(40.0, NEW, ok=False)]
    assert summarize_baseline(entries, NEW).best_tok_s is None  # the key alone: no baseline (the bug)
    s = summarize_baseline_across_versions(entries, NEW)
    assert s.best_tok_s == 69.2 and s.version == "0.5.22" and s.from_previous_version
    assert (s.matching, s.considered, s.passing) == (3, 2, 2)  # PREV's window ends at its latest pass
    assert s.as_dict()["version"] == "0.5.22" and s.as_dict()["from_previous_version"] is True
    # the most recent other version is the one that passed last, not the highest number nor the oldest
    s = summarize_baseline_across_versions([entry(69.2, PREV), entry(90.0, OLDER)], NEW)
    assert (s.best_tok_s, s.version) == (90.0, "0.5.19")


def test_the_rule_names_the_version_and_its_figure():
    s = summarize_baseline_across_versions([entry(69.2, PREV)], NEW)
    v = decide(45.0, baseline=s, tolerance=0.10)
    assert v.verdict == "fail"
    assert v.reasons == ["decode 45.0 tok/s is 35.0% below 69.2 tok/s, the best recent passing result of "
                         "SGLang 0.5.22 on this hardware and model (tolerance 10%)"]
    ok = decide(66.0, baseline=s, tolerance=0.10)
    assert ok.verdict == "pass" and ok.rules[0]["detail"] == (
        "decode 66.0 tok/s is within 10% of 69.2 tok/s, the best recent passing result of SGLang 0.5.22 on "
        "this hardware and model")


def test_an_older_version_is_not_used_once_the_version_has_its_own_passing_results():
    entries = [entry(100.0, PREV), entry(50.0, NEW), entry(48.0, NEW, ok=False)]
    s = summarize_baseline_across_versions(entries, NEW)
    assert s == summarize_baseline(entries, NEW)
    assert s.best_tok_s == 50.0 and s.version == "0.5.23" and not s.from_previous_version
    assert decide(47.0, baseline=s, tolerance=0.10).verdict == "pass"  # 100 of 0.5.22 is not the baseline
    # the same-version rule reads as before
    assert decide(40.0, baseline=s, tolerance=0.10).reasons == [
        "decode 40.0 tok/s is 20.0% below the best recent passing result 50.0 tok/s for this hardware, model "
        "and SGLang version (tolerance 10%)"]


def test_entries_of_another_hardware_or_model_never_count():
    other_hw = make_key("2x NVIDIA RTX 4090 (sm89)", MODEL, "0.5.22")
    other_model = make_key(HW, "Qwen/Qwen3-32B", "0.5.22")
    entries = [entry(500.0, other_hw), entry(400.0, other_model), entry(300.0, make_key(HW, MODEL, "0.5.22")),
               entry(900.0, make_key("8x H100", MODEL, "0.5.23")), entry(800.0, make_key(HW, "m2", "0.5.23"))]
    s = summarize_baseline_across_versions(entries, NEW)
    assert s.best_tok_s == 300.0 and s.version == "0.5.22"
    assert summarize_baseline_across_versions(entries[:2] + entries[3:], NEW).best_tok_s is None
    # hardware compares as the key does: NVML's "NVIDIA " prefix and spacing do not split it
    assert summarize_baseline_across_versions([entry(70.0, make_key("2x  RTX A6000 (sm86)", MODEL, "0.5.22"))],
                                              NEW).best_tok_s == 70.0


def test_failures_and_unusable_entries_are_never_a_baseline():
    entries = [entry(99.0, PREV, ok=False), {"verdict": "error", "decode_tok_s": None, "key": PREV},
               entry(float("nan"), PREV), entry(True, PREV), {"verdict": "pass", "decode_tok_s": 80.0},
               "junk", entry(10 ** 400, PREV)]
    assert summarize_baseline_across_versions(entries, NEW).best_tok_s is None


def test_this_versions_own_pass_beyond_its_window_when_no_other_version_passed():
    entries = [entry(100.0, NEW)] + [entry(50.0, NEW, ok=False) for _ in range(verdict.RECENT)]
    assert summarize_baseline(entries, NEW).best_tok_s is None
    s = summarize_baseline_across_versions(entries, NEW)
    assert s.best_tok_s == 100.0 and s.version == "0.5.23" and not s.from_previous_version
    # another version's pass comes first, as the rule says
    s = summarize_baseline_across_versions([entry(80.0, PREV), *entries], NEW)
    assert (s.best_tok_s, s.version) == (80.0, "0.5.22")


VERSIONS = ("0.5.19", "0.5.22", "0.5.23", "unknown")
TARGETS = ((HW, MODEL), (HW, "Qwen/Qwen3-32B"), ("8x NVIDIA H100 80GB HBM3 (sm90)", MODEL))
ENTRIES = st.lists(st.fixed_dictionaries({
    "target": st.sampled_from(TARGETS),
    "version": st.sampled_from(VERSIONS),
    "verdict": st.sampled_from(("pass", "fail", "error")),
    "rate": st.one_of(st.none(), st.floats(min_value=0, max_value=1e4),
                      st.sampled_from((float("nan"), float("inf")))),
}), max_size=60)


@settings(max_examples=300, deadline=None)
@given(raw=ENTRIES, version=st.sampled_from(VERSIONS), target=st.sampled_from(TARGETS))
def test_a_baseline_exists_whenever_a_passing_result_of_the_hardware_and_model_does(raw, version, target):
    entries = [{"verdict": e["verdict"], "decode_tok_s": e["rate"], "key": make_key(*e["target"], e["version"])}
               for e in raw]
    key = make_key(*target, version)
    s = summarize_baseline_across_versions(entries, key)
    usable = [e for e in entries if e["verdict"] == "pass" and isinstance(e["decode_tok_s"], float)
              and math.isfinite(e["decode_tok_s"]) and (e["key"]["hardware"], e["key"]["model"]) == target]
    assert (s.best_tok_s is not None) == bool(usable)
    if usable:
        assert s.best_tok_s in [e["decode_tok_s"] for e in usable]
        assert s.from_previous_version == (s.version != version)
        own = summarize_baseline(entries, key)
        if own.best_tok_s is not None:  # the version's own results win
            assert s == own


# ---- the operator's accepted reason ------------------------------------------------------------


def test_an_accepted_reason_passes_a_baseline_failure_naming_it():
    prev = summarize_baseline_across_versions([entry(69.2, PREV)], NEW)
    own = summarize_baseline([entry(100.0, NEW)], NEW)
    for baseline in (prev, own):
        v = decide(45.0, baseline=baseline, tolerance=0.10, accept_slower=REASON)
        assert v.verdict == "pass" and v.reasons == [] and v.accepted_slower == REASON
        rule = v.rules[0]
        assert rule["rule"] == "baseline" and rule["ok"] and rule["accepted"] == REASON
        assert rule["detail"].endswith(f"; accepted: {REASON}") and "% below" in rule["detail"]
    # a result within the tolerance needs no acceptance: none recorded
    v = decide(68.0, baseline=prev, tolerance=0.10, accept_slower=REASON)
    assert v.passed and v.accepted_slower is None and "accepted" not in v.rules[0]


def test_an_accepted_reason_never_hides_a_missed_target_or_a_configuration_difference():
    prev = summarize_baseline_across_versions([entry(69.2, PREV)], NEW)
    v = decide(45.0, target_tok_s=50, baseline=prev, tolerance=0.10, accept_slower=REASON)
    assert v.verdict == "fail" and v.reasons == ["decode 45.0 tok/s is 10.0% below target 50"]
    assert v.accepted_slower == REASON  # the baseline rule alone was accepted
    diff = ConfigDiff("tp_size", "tp", 2, 1, True)
    v = decide(45.0, baseline=prev, tolerance=0.10, config_diffs=[diff], accept_slower=REASON)
    assert v.verdict == "fail"
    assert v.reasons == ["configuration differs from the plan: tp_size: planned 2, server resolved 1"]
    # no baseline, nothing to accept
    v = decide(1.0, baseline=BaselineSummary(0, 0, 0, None), tolerance=0.10, accept_slower=REASON)
    assert v.passed and v.accepted_slower is None and v.rules == []


MINIMAL = {"sglang_model": MODEL}
BAD_REASONS = [
    ("", "must be a non-empty reason"),
    ("   ", "must be a non-empty reason"),
    ("x" * (ACCEPT_SLOWER_MAX + 1), f"must be at most {ACCEPT_SLOWER_MAX} characters, got 501"),
    ("two\nlines", "character 4 is '\\n'"),
    ("tab\there", "character 4 is '\\t'"),
    ("red \x1b[31m", "character 5 is '\\x1b'"),
    ("bidi \u202e", "character 6 is '\\u202e'"),
    (42, "must be a string (the reason), got int"),
    (["a"], "must be a string (the reason), got list"),
]


@pytest.mark.parametrize("value, message", BAD_REASONS, ids=[m for _, m in BAD_REASONS])
def test_the_inventory_reason_is_bounded_and_printable_naming_host_and_key(value, message):
    with pytest.raises(PlanError) as err:
        build_spec("gpu-7", {}, {**MINIMAL, "sglang_gate": {"accept_slower": value}})
    text = str(err.value)
    assert text.startswith("host gpu-7: sglang_gate.accept_slower: ") and message in text, text
    assert "\x1b" not in text and "\n" not in text and "\u202e" not in text


def test_the_inventory_reason_reaches_the_gate_options():
    assert build_spec("h", {}, MINIMAL).gate.accept_slower is None
    longest = "é" * ACCEPT_SLOWER_MAX
    for reason in (REASON, longest, "ok: 'quotes' \"and\" $(not a command) `nor this`; \\"):
        spec = build_spec("h", {}, {**MINIMAL, "sglang_gate": {"accept_slower": reason}})
        assert spec.gate.accept_slower == reason
        # it travels to a gate on the host in the options file (JSON), read back as it was
        opts = CheckOptions(url="http://127.0.0.1:30000", accept_slower=reason)
        back, _ = from_file_dict(json.loads(json.dumps(to_file_dict(opts))), "options.json")
        assert back.accept_slower == reason


@pytest.mark.parametrize("value, message", BAD_REASONS[:7], ids=[m for _, m in BAD_REASONS[:7]])
def test_the_gate_refuses_a_bad_reason_from_its_options_file_and_command_line(value, message):
    data = {**to_file_dict(CheckOptions(url="http://127.0.0.1:9")), "accept_slower": value}
    with pytest.raises(GateError) as err:
        from_file_dict(data, "opts.json")
    assert str(err.value).startswith("--options: opts.json: accept_slower: ") and message in str(err.value)
    args = cli.build_parser().parse_args(["check", "--url", "http://h:1", "--accept-slower", value])
    with pytest.raises(GateError) as err:
        validate(cli_handlers._check_options(args))
    assert err.value.step == "--accept-slower" and message in str(err.value)
    with pytest.raises(GateError, match="accept_slower: must be text"):
        from_file_dict({**data, "accept_slower": 7}, "opts.json")


# ---- through the gate's run, its report, the history and status ----------------------------------


def figures(rate: float) -> RequestFigures:
    return RequestFigures(ttft_s=0.05, decode_tok_s=rate, completion_tokens=256, tokens_source="usage", chunks=256,
                          tokens_per_chunk=1.0, t_sent=0.0, t_first=0.05, t_last=0.05 + 255 / rate,
                          finish_reason="length")


def gate_report(tmp_path, rate: float, history: list[dict], accept: str | None = None) -> dict:
    """The report of a gate whose requests measured ``rate``, against ``history`` as its baseline file."""
    path = tmp_path / "baseline.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in history))
    opts = CheckOptions(url="http://127.0.0.1:30000", baseline=str(path), accept_slower=accept)
    measured = Measured(shape=None, single=[figures(rate)] * 3, rounds=[], measure_s=1.0)  # type: ignore[arg-type]
    warnings: list[str] = []
    result, baseline, _ = _judge(opts, measured, dict(NEW), verdict.ConfigComparison(), warnings)
    report = {"key": dict(NEW), "server": {"version": "0.5.23", "model": MODEL}, "target_tok_s": None,
              "tolerance": opts.tolerance}
    fill_verdict(report, single=measured.single, rounds=[], concurrency=1, accept=None, result=result,
                 warnings=warnings, baseline=baseline, settings={}, timing={})
    return report


def history_line(report: dict, rev: str) -> str:
    entry = outcomes.history_entry("gate", rev, outcomes.classify(report), report, {"model": MODEL}, "0.5.23")
    return json.dumps(entry, separators=(",", ":"), sort_keys=True)


def test_an_upgrades_first_gate_fails_against_the_previous_version_then_passes_when_accepted(tmp_path):
    history = [dict(entry(69.2, PREV), created="t0")]
    report = gate_report(tmp_path, 45.0, history)
    assert report["verdict"] == "fail" and report["accepted_slower"] is None
    assert report["reasons"] == ["decode 45.0 tok/s is 35.0% below 69.2 tok/s, the best recent passing result "
                                 "of SGLang 0.5.22 on this hardware and model (tolerance 10%)"]
    b = report["baseline"]
    assert b["best_tok_s"] == 69.2 and b["version"] == "0.5.22" and b["from_previous_version"] is True
    assert "baseline best 69.2 tok/s of SGLang 0.5.22" in format_report(report)

    accepted = gate_report(tmp_path, 45.0, history, accept=REASON)
    assert accepted["verdict"] == "pass" and accepted["accepted_slower"] == REASON
    assert f"accepted slower than the baseline: {REASON}" in format_report(accepted)
    outcome = outcomes.classify(accepted)
    assert outcome.passed and outcome.summary.endswith(f"; accepted: {REASON}")
    entry_ = json.loads(history_line(accepted, "a" * 16))
    assert entry_["accepted_slower"] == REASON
    assert entry_["baseline"]["version"] == "0.5.22" and "file" not in entry_["baseline"]
    # a gate that needed no acceptance records none
    assert json.loads(history_line(gate_report(tmp_path, 68.0, history, accept=REASON), "b" * 16))[
        "accepted_slower"] is None

    # status: the last gate's baseline by the same rule, and the accepted reason in its row and JSON
    lines = [json.dumps({"kind": "gate", "verdict": "pass", "decode_tok_s": 69.2, "key": PREV, "created": "t0"}),
             history_line(accepted, "a" * 16)]
    gate, refused = status.last_gate(lines)
    assert refused == 0 and gate is not None
    assert gate.baseline_tok_s == 69.2 and gate.baseline_version == "0.5.22" and gate.accepted_slower == REASON
    assert gate.as_dict()["accepted_slower"] == REASON and gate.as_dict()["baseline_version"] == "0.5.22"

    # and the next gate of 0.5.23 is compared with the accepted result, its own
    history.append(json.loads(history_line(accepted, "a" * 16)))
    later = gate_report(tmp_path, 44.0, history)
    assert later["verdict"] == "pass" and later["baseline"]["version"] == "0.5.23"
    assert not later["baseline"]["from_previous_version"] and later["baseline"]["best_tok_s"] == 45.0
    assert gate_report(tmp_path, 30.0, history)["verdict"] == "fail"


def test_status_shows_the_accepted_reason_small_and_printable():
    hostile = "ok \x1b[2J\u202e" + "x" * 600
    lines = [json.dumps({"kind": "gate", "verdict": "pass", "decode_tok_s": 80.0, "key": PREV}),
             json.dumps({"kind": "gate", "verdict": "pass", "decode_tok_s": 45.0, "key": NEW,
                         "accepted_slower": hostile, "summary": "s"})]
    gate, _ = status.last_gate(lines)
    assert gate is not None and gate.accepted_slower is not None
    assert len(gate.accepted_slower) <= ACCEPT_SLOWER_MAX and "\x1b" not in gate.accepted_slower
    assert gate.baseline_version == "0.5.22"
    # an entry without the field, or with a non-string, shows none
    for value in (None, 7, ""):
        doc = {"kind": "gate", "verdict": "pass", "decode_tok_s": 45.0, "key": NEW, "accepted_slower": value}
        plain, _ = status.last_gate([json.dumps(doc)])
        assert plain is not None and plain.accepted_slower is None and plain.baseline_version is None


def test_the_status_table_marks_it_and_names_the_reason_below():
    from sglang_deploy.status.model import LastGate

    gate = LastGate(verdict="pass", time="t1", revision="a" * 16, decode_tok_s=45.0, target_tok_s=None,
                    baseline_tok_s=69.2, summary="s", baseline_version="0.5.22", accepted_slower=REASON + " \x1b[2J")
    row = dataclasses.replace(status.unreachable_row("gpu-1", "x"), reachable=True, state=status.OK, problems=[],
                              error=None, last_gate=gate)
    table = status_table.render_table([row])
    head, first = table.splitlines()[:2]
    assert "pass 45.0 tok/s (baseline 69.2 of 0.5.22) accepted slower t1" in first and REASON not in first
    assert f"gpu-1: last gate accepted slower than its baseline: {REASON}" in table and "\x1b" not in table
    doc = json.loads(status_table.rows_json([row]))[0]["last_gate"]
    assert doc["accepted_slower"] == REASON + " \x1b[2J" and doc["baseline_version"] == "0.5.22"
    # a gate without either reads as before
    plain = dataclasses.replace(row, last_gate=dataclasses.replace(gate, baseline_version=None, accepted_slower=None))
    text = status_table.render_table([plain])
    assert "(baseline 69.2) t1" in text and "accepted" not in text


def test_the_deploys_gate_carries_the_reason_and_the_continuous_check_does_not(monkeypatch):
    from types import SimpleNamespace

    from sglang_deploy.deploy import gating, tuning

    monkeypatch.setattr(tuning, "current_trial", lambda host, run=None: None)
    spec = build_spec("h", {}, {**MINIMAL, "sglang_gate": {"accept_slower": REASON}})
    intents = {"host": SimpleNamespace(value="127.0.0.1"), "port": SimpleNamespace(value=30000)}
    plan = SimpleNamespace(as_dict=lambda: {"host": "h"}, intents=intents, timeout_start_s=1200,
                           gpus=SimpleNamespace(count=2, model="NVIDIA RTX A6000", compute_capability="8.6"))
    p = SimpleNamespace(spec=spec, plan=plan, api_key=None, ready_timeout_s=1200.0,
                        layout=SimpleNamespace(state_dir="/var/lib/sglang", service="sglang"))
    host = SimpleNamespace(name="h", data={})
    opts = gating.gate_options(host, p, "http://127.0.0.1:30000", None)  # type: ignore[arg-type]
    assert opts.accept_slower == REASON and opts.hardware == HW
    watch = json.loads(gating.watch_options(host, p))  # type: ignore[arg-type]
    assert watch["accept_slower"] is None
