"""Wave planning (Ansible serial semantics), canary, TP groups, failure budget, summary."""

from __future__ import annotations

import pytest

from sglang_deploy import waves
from sglang_deploy.waves import Summary, WaveError, parse_sizes, plan_waves

H8 = [f"h{i}" for i in range(1, 9)]


def names(ws):
    return [list(w.hosts) for w in ws]


def test_default_is_a_canary_of_one_then_a_quarter_at_a_time():
    ws = plan_waves(H8)
    assert names(ws) == [["h1"], ["h2", "h3"], ["h4", "h5"], ["h6", "h7"], ["h8"]]
    assert ws[1].reason == "25% of 8 = 2"


def test_ansible_serial_semantics():
    assert names(plan_waves(H8, parse_sizes("1,2,50%"))) == [["h1"], ["h2", "h3"], ["h4", "h5", "h6", "h7"],
                                                             ["h8"]]
    # a percentage rounds down, but a wave has at least one host
    assert names(plan_waves(H8[:3], parse_sizes("10%"))) == [["h1"], ["h2"], ["h3"]]
    assert names(plan_waves(H8[:3], parse_sizes("100%"))) == [["h1", "h2", "h3"]]
    # sizes beyond the host count just end early
    assert names(plan_waves(H8[:2], parse_sizes("5,5"))) == [["h1", "h2"]]
    assert parse_sizes([1, "25%"]) == parse_sizes("1, 25%") and str(parse_sizes("25%")[0]) == "25%"


@pytest.mark.parametrize("bad", ["0", "-1", "1.5", "0%", "101%", "x", "", "1,,2", True])
def test_bad_sizes_name_the_setting(bad):
    with pytest.raises(WaveError, match="--waves"):
        parse_sizes(bad)


def test_canary_group_is_the_first_wave_in_place_of_the_first_size():
    ws = plan_waves(H8, parse_sizes("1,50%"), canary=["h5", "h2"])
    assert names(ws) == [["h2", "h5"], ["h1", "h3", "h4", "h6"], ["h7", "h8"]]
    assert ws[0].reason == "canary group"
    with pytest.raises(WaveError, match="canary group: nope"):
        plan_waves(H8, canary=["nope"])


def test_a_tp_group_is_never_split():
    units = {"h3": "tp16", "h4": "tp16"}
    ws = plan_waves(H8, parse_sizes("1,3"), units=units)
    assert names(ws) == [["h1"], ["h2", "h3", "h4"], ["h5", "h6", "h7"], ["h8"]]
    # a group that does not fit what is left of a wave starts the next one
    ws = plan_waves(H8, parse_sizes("2"), units={"h2": "g", "h3": "g"})
    assert names(ws) == [["h1"], ["h2", "h3"], ["h4", "h5"], ["h6", "h7"], ["h8"]]
    # larger than the wave: a wave of its own, said so
    ws = plan_waves(H8, parse_sizes("1"), units={"h1": "g", "h5": "g", "h6": "g"})
    assert names(ws)[0] == ["h1", "h5", "h6"] and ws[0].oversized and "never split" in ws[0].reason
    # members not adjacent in the inventory still go together, where the first one stands
    ws = plan_waves(H8, parse_sizes("2"), units={"h2": "g", "h7": "g"})
    assert names(ws)[:2] == [["h1"], ["h2", "h7"]]
    # the canary pulls its whole TP group in
    ws = plan_waves(H8, canary=["h3"], units={"h3": "g", "h4": "g"})
    assert names(ws)[0] == ["h3", "h4"] and "TP group" in ws[0].reason


def test_failure_budget_counts_hosts_without_a_proven_revision():
    wave = waves.Wave(2, ("a", "b", "c"), 3, "size 3")
    records = {"a": {"result": "passed"}, "b": {"result": "rolled back"}}  # c: no record (unreachable)
    failed = waves.wave_failures(records, wave)
    assert failed == ["b", "c"]
    assert waves.over_budget(failed, 1) and not waves.over_budget(failed, 2)
    assert waves.wave_failures({"a": {"result": "unchanged"}}, waves.Wave(1, ("a",), 1, "")) == []


def test_summary_names_every_host_and_the_totals():
    s = Summary(completed=False, halted="wave 1 had 1 failure(s) (max 0): h1")
    s.hosts.append(waves.host_row(1, "h1", {"host": "h1", "result": "rolled back", "old_revision": "aaa",
                                            "new_revision": "bbb", "running_revision": "aaa",
                                            "summary": "gate failed: decode 40.0 tok/s is 60% below target 100",
                                            "decode_tok_s": 40.0, "target_tok_s": 100.0,
                                            "baseline_best_tok_s": None}))
    s.hosts.append(waves.host_row(None, "h2", None))
    s.hosts.append(waves.host_row(2, "h3", None, why_missing="unreachable: Could not connect"))
    text = waves.format_summary(s)
    assert "HALTED" in text and "h1: gate failed" in text and "h2: not reached" in text
    assert "h3: unreachable" in text
    assert s.totals() == {"failed": 1, "not reached": 1, "rolled back": 1}
    assert s.as_dict()["hosts"][1]["result"] == "not reached"


def test_a_halt_before_the_last_wave_is_not_completed_and_exits_1():
    s = Summary(completed=False, halted="wave 1 had 1 failure(s), more than --max-fail 0: h1; later waves not started",
                over_budget="wave 1 had 1 failure(s), more than --max-fail 0: h1")
    s.hosts.append(waves.host_row(1, "h1", {"host": "h1", "result": "rolled back", "summary": "gate failed"}))
    s.hosts.append(waves.host_row(None, "h2", None))
    assert "rollout HALTED: wave 1 had" in waves.format_summary(s) and s.exit_code() == 1


def test_failures_beyond_the_budget_in_the_last_wave_complete_and_say_so():
    # every wave ran: nothing was halted and no wave was left unstarted, but the last
    # wave failed more hosts than the budget allows
    wave = waves.Wave(2, ("h2", "h3"), 2, "size 2")
    failures = waves.wave_failures({"h2": {"result": "rolled back"}, "h3": {"result": "stopped"}}, wave)
    assert waves.over_budget(failures, 1)
    s = Summary(completed=True, over_budget=waves.budget_exceeded(wave, failures, 1))
    s.hosts.append(waves.host_row(1, "h1", {"host": "h1", "result": "passed"}))
    for h, result in (("h2", "rolled back"), ("h3", "stopped")):
        s.hosts.append(waves.host_row(2, h, {"host": h, "result": result, "summary": "gate failed"}))
    text = waves.format_summary(s)
    assert ("rollout completed with failures beyond the budget in the last wave (wave 2 had 2 failure(s), "
            "more than --max-fail 1: h2, h3)") in text
    assert "HALTED" not in text and "not started" not in text
    doc = s.as_dict()
    assert doc["completed"] and doc["halted"] is None and "wave 2" in doc["over_budget"]
    assert s.exit_code() == 1  # over the budget, like a halt


@pytest.mark.parametrize("results, code", [
    (["passed", "unchanged"], 0),
    (["passed", "rolled back"], 3),  # completed, failures within the budget
    (["unchanged", "failed"], 3),
])
def test_exit_code_of_a_completed_rollout(results, code):
    s = Summary(completed=True)
    for i, r in enumerate(results):
        s.hosts.append(waves.host_row(1, f"h{i}", {"host": f"h{i}", "result": r}))
    assert s.exit_code() == code and "rollout completed;" in waves.format_summary(s)


def test_the_summary_shows_each_hosts_serving_gap():
    s = waves.Summary()
    s.hosts.append(waves.host_row(1, "h1", {"host": "h1", "result": "passed", "serving_gap_s": 3.214}))
    s.hosts.append(waves.host_row(1, "h2", {"host": "h2", "result": "unchanged", "serving_gap_s": None}))
    lines = waves.format_summary(s).splitlines()
    assert lines[0].split()[-2:] == ["gap", "s"]
    assert lines[2].split()[-1] == "3.21" and lines[3].split()[-1] == "-"


def test_hosts_agree_on_a_rollout_setting_written_as_a_list_or_a_tuple():
    from sglang_deploy.plan.settings import ROLLOUT_KEYS
    from sglang_deploy.waves import agreed_setting

    same = {"a": {"waves": ["1", "25%"]}, "b": {"waves": ("1", "25%")}, "c": None}
    assert agreed_setting(same, "waves", ROLLOUT_KEYS) == ["1", "25%"]
    with pytest.raises(WaveError, match=r"sglang_rollout.waves: hosts disagree \(a=\['1', '25%'\], b=\['1'\]\)"):
        agreed_setting({"a": {"waves": ["1", "25%"]}, "b": {"waves": ["1"]}}, "waves", ROLLOUT_KEYS)
