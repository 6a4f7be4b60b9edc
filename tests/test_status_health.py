"""status's new judgments (sglang_deploy/status/): the running argv against the deployed
revision's and the live unit's ExecStart=, the GPUs' health as gpu_health.py reports it, and the
continuous check's last history line."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from sglang_deploy import status
from sglang_deploy.commands import status_table
from tests.test_status import ARGV, PLANNED, REV, UNIT, columns, fact_lines, gate_line, health_line, healthy_gpu

NOW = datetime(2026, 1, 1, 0, 10, tzinfo=timezone.utc)


def row(lines):
    return status.build_row("gpu-1", status.parse_observed(lines), PLANNED, now=NOW)


def test_healthy_gpus_are_one_ok_cell():
    r = row(fact_lines())
    assert r.state == status.OK and columns(status_table.render_table([r]))[6] == "2x RTX A6000 ok"
    doc = json.loads(status_table.rows_json([r]))[0]
    assert doc["gpus"]["summary"] == "2x RTX A6000 ok" and doc["gpus"]["problems"] == []
    assert doc["gpus"]["devices"][1]["remapped_rows"]["failure"] is False


@pytest.mark.parametrize("changes, tag, sentence", [
    ({"remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": False, "failure": True}},
     "gpu1 row-remap failure", "gpu 1: a row remap failed"),
    ({"remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False}},
     "gpu1 row-remap pending", "gpu 1: a row remap waits for a GPU reset"),
    ({"ecc": {"uncorrected": 2, "corrected": 5}}, "gpu1 ecc", "gpu 1: 2 uncorrected ECC error(s)"),
    ({"retired_pages": {"single_bit": 1, "double_bit": 0, "pending": True}}, "gpu1 page-retirement pending",
     "gpu 1: a page retirement waits"),
    ({"xid": {"count": 3, "last": 79}}, "gpu1 xid 79", "gpu 1: 3 XID event(s) in the kernel log since boot"),
    ({"clocks_event_reasons": ["hw_slowdown", "hw_thermal_slowdown"]}, "gpu1 hw-thermal-slowdown",
     "gpu 1: clocks slowed down: hw_slowdown, hw_thermal_slowdown"),
    ({"foreign_processes": [{"pid": 4242, "used_bytes": 2 << 30}], "foreign_memory_bytes": 2 << 30},
     "gpu1 foreign 2.0 GiB", "gpu 1: 2.0 GiB used by processes other than the server (pid 4242)"),
])
def test_each_gpu_problem_is_degraded_red_and_exit_1(changes, tag, sentence):
    r = row(fact_lines(health=health_line(healthy_gpu(0), healthy_gpu(1, **changes))))
    assert r.state == status.DEGRADED and status.exit_code([r]) == 1
    assert r.gpu_tags == [tag] and any(p.startswith(sentence) for p in r.problems), r.problems
    assert columns(status_table.render_table([r]))[6] == f"2x RTX A6000: {tag}"
    assert "\x1b[31mdegraded\x1b[0m" in status_table.render_table([r], colour=True)


@pytest.mark.parametrize("changes, warning", [
    ({"ecc": {"uncorrected": 0, "corrected": 4}}, "gpu 1: 4 corrected ECC error(s) since the driver loaded"),
    ({"remapped_rows": {"correctable": 2, "uncorrectable": 0, "pending": False, "failure": False}},
     "gpu 1: 2 correctable and 0 uncorrectable row(s) remapped"),
    ({"clocks_event_reasons": ["sw_power_cap"]}, None),  # the power cap under load is normal
    ({"foreign_processes": [{"pid": 9, "used_bytes": 64 << 20}], "foreign_memory_bytes": 64 << 20}, None),
    ({"xid": None}, "XID events unknown: the kernel log could not be read"),
])
def test_what_is_not_a_fault_stays_ok(changes, warning):
    r = row(fact_lines(health=health_line(healthy_gpu(0), healthy_gpu(1, **changes))))
    assert r.state == status.OK and r.problems == []
    assert r.warnings == ([warning] if warning else [])


@pytest.mark.parametrize("line", ["not json", json.dumps({"schema": 2, "gpus": []}),
                                  json.dumps({"schema": 1, "error": None, "gpus": [{"index": "x"}]}),
                                  json.dumps({"schema": 1, "error": "NVML failed to start: \x1b[2J Driver Not Loaded",
                                              "gpus": []})])
def test_a_health_line_that_is_not_one_is_a_warning_never_shown_raw(line):
    r = row(fact_lines(health=line))
    assert r.state == status.OK and r.gpu_tags == []
    assert len(r.warnings) == 1 and r.warnings[0].startswith("GPU health not read: ") and "\x1b" not in r.warnings[0]
    assert columns(status_table.render_table([r]))[6] == "? (not read)"


def test_argv_started_by_hand_or_from_a_reloaded_unit_is_drift():
    by_hand = row(fact_lines(argv=[*ARGV, "--tp", "4"]))
    assert by_hand.state == status.DRIFTED and by_hand.drift["argv"] == "differs"
    assert by_hand.drift["unit"] == "same" and len(by_hand.problems) == 2  # neither unit starts that
    assert by_hand.problems[0].startswith(f"argv drifted: pid 4242 runs another command line than revision "
                                          f"{REV}'s ExecStart=: "
                                          "unit '' -> running '--tp 4'")
    edited = UNIT.replace("--port 30000", "--port 30001")
    reloaded = row(fact_lines(live={"unit": edited}))  # edited, reloaded, not restarted: still the old argv
    assert reloaded.drift == {"unit": "differs", "env": "same", "nccl_conf": "same", "argv": "differs"}
    assert any("the live unit's ExecStart=" in p and "unit '30001' -> running '30000'" in p for p in reloaded.problems)
    assert columns(status_table.render_table([reloaded]))[5] == "unit,argv"
    assert row(fact_lines(argv=None)).drift["argv"] == "unknown"


def test_a_credential_in_a_hand_started_argv_is_masked():
    r = row(fact_lines(argv=[*ARGV, "--api-key", "sk-live-123", "--hub-token=hf_abc"]))
    text = status_table.render_table([r]) + status_table.rows_json([r])
    assert "sk-live-123" not in text and "hf_abc" not in text and "--api-key ***" in text


def watch_line(verdict="pass", rev="0123456789abcdef", **extra):
    return json.dumps({"kind": "watch", "time": "2026-01-01T00:05:00Z", "service": "sglang", "revision": rev,
                       "verdict": verdict, "why": None if verdict == "pass" else "decode 20.0 tok/s, 50% below 40.0",
                       "decode_tok_s": 20.0 if verdict == "fail" else 41.0, "baseline_tok_s": 40.0,
                       "target_tok_s": None, "drift": [], "gpu_problems": [], "duration_s": 9.5, **extra})


def test_the_last_watch_line_is_shown_and_a_failed_one_degrades():
    ok = row(fact_lines(history=[gate_line(), watch_line(), "garbage"]))
    assert ok.state == status.OK and columns(status_table.render_table([ok]))[8] == "pass 41.0/40.0 tok/s 5m00s ago"
    doc = json.loads(status_table.rows_json([ok]))[0]["last_watch"]
    assert doc["age_s"] == 300.0 and doc["verdict"] == "pass" and doc["decode_tok_s"] == 41.0
    failed = row(fact_lines(history=[gate_line(), watch_line("fail", gpu_problems=["gpu 3: 2 uncorrected ECC"])]))
    assert failed.state == status.DEGRADED
    assert failed.problems == ["the continuous check failed (5m00s ago): decode 20.0 tok/s, 50% below 40.0"]
    other = row(fact_lines(history=[gate_line(), watch_line("fail", rev="aaaaaaaaaaaaaaaa")]))
    assert other.state == status.OK and "(another revision)" in other.warnings[0]
    hostile = row(fact_lines(history=[gate_line(), watch_line(verdict="\x1b[2J", drift=["unit", "x" * 999],
                                                              time="yesterday")]))
    assert hostile.last_watch is not None and hostile.last_watch.verdict == "unknown"
    assert hostile.last_watch.drift == ("unit",) and hostile.last_watch.age_s is None


# --- the check's failure held against status's own read (sglang_deploy/status/ judge_watch) ---

def drift_line(drift, measured="pass", **extra):
    """A check that measured fine but found ``drift`` (and whatever ``extra`` adds)."""
    return watch_line("fail", **{"why": f"drift: {', '.join(drift)}", "decode_tok_s": 41.0, "drift": drift,
                                 "measured": measured, **extra})


def test_drift_the_operator_fixed_is_resolved_and_leaves_the_exit_code():
    """The check saw the unit and env file edited; they are restored by hand: this read finds them as
    deployed, so the finding is shown resolved (when, what the check saw) and the host is ok, exit 0."""
    r = row(fact_lines(history=[gate_line(), drift_line(["unit", "env"])]))
    assert r.state == status.OK and r.problems == [] and status.exit_code([r]) == 0
    assert r.warnings == ["the continuous check failed (5m00s ago): drift: unit, env; resolved: this read no longer "
                          "finds drift: unit, drift: env"]
    doc = json.loads(status_table.rows_json([r]))[0]["last_watch"]
    assert doc["resolved"] == ["drift: unit", "drift: env"] and doc["standing"] == []


def test_drift_this_read_confirms_keeps_the_check_failing():
    edited = UNIT.replace("--port 30000", "--port 30001")
    r = row(fact_lines(live={"unit": edited}, history=[gate_line(), drift_line(["unit", "env"])]))
    assert r.state == status.DRIFTED and status.exit_code([r]) == 1
    assert ("the continuous check failed (5m00s ago): drift: unit, env (resolved since, by this read: drift: env)"
            in r.problems)
    assert r.last_watch is not None and r.last_watch.standing == ("drift: unit",)


@pytest.mark.parametrize("line, standing", [
    (drift_line(["unit"], measured="fail"), ("measurement",)),  # slow too: status cannot measure
    (drift_line(["unit"], measured=None), ("measurement",)),  # an older check's line: it does not say
    (drift_line(["weights"]), ("drift: weights",)),  # not verified by this read (no --verify-weights)
    (drift_line([], gpu_problems=["gpu 3: 2 uncorrected ECC"]), ("GPU problems",)),  # no keys: cannot tell
])
def test_what_this_read_cannot_check_stands(line, standing):
    r = row(fact_lines(history=[gate_line(), line]))
    assert r.state == status.DEGRADED and status.exit_code([r]) == 1
    assert r.last_watch is not None and set(standing) <= set(r.last_watch.standing), r.last_watch


def test_a_gpu_problem_of_the_check_is_judged_by_this_reads_gpus():
    line = drift_line([], why="gpu 1: 2.0 GiB used by processes other than the server (pid 4242)",
                      gpu_problems=["gpu 1: 2.0 GiB used by processes other than the server (pid 4242)"],
                      gpu_keys=["gpu1 foreign_memory"])
    gone = row(fact_lines(history=[gate_line(), line]))  # the other process has ended
    assert gone.state == status.OK and gone.last_watch is not None
    assert gone.last_watch.resolved == ("gpu1 foreign_memory",) and "resolved" in gone.warnings[-1]
    held = {"foreign_processes": [{"pid": 4242, "used_bytes": 1 << 30}], "foreign_memory_bytes": 1 << 30}
    still = row(fact_lines(health=health_line(healthy_gpu(0), healthy_gpu(1, **held)),
                           history=[gate_line(), line]))
    assert still.state == status.DEGRADED and still.last_watch is not None
    assert still.last_watch.standing == ("gpu1 foreign_memory",)
    unread = row(fact_lines(health="not json", history=[gate_line(), line]))
    assert unread.state == status.DEGRADED and unread.last_watch is not None
    assert unread.last_watch.standing == ("gpu1 foreign_memory",)
