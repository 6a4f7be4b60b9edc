"""The speed model calibrated by the fleet's passing gates (sglang_deploy/plan/calibration.py and
the controller's samples file, sglang_deploy/deploy/calibration.py): a sample per passing gate,
against the roofline alone; a factor per key once MIN_SAMPLES agree; every line of the file data."""

from __future__ import annotations

import json
import os

import pytest

from sglang_deploy.deploy import calibration as samples_io
from sglang_deploy.plan import calibration as cal
from sglang_deploy.plan.perf import Band, Prediction

from tests.test_recipes import H100X8, plan, recorded

KEY = cal.Key(gpu_model="H100 SXM", weights="bfloat16", moe=True, speculative=False)
OTHER = cal.Key(gpu_model="RTX A6000", weights="bfloat16", moe=True, speculative=False)
PREDICTION = Prediction(decode_tok_s=Band(80, 100, 120), ttft_ms=Band(40, 50, 70),
                        output_tok_s={1: Band(80, 100, 120), 8: Band(500, 600, 700)}, basis="roofline",
                        prefill_tok_s=Band(8000, 10000, 12000), prefill_tokens=2048)


def line(key: cal.Key = KEY, decode: float = 0.8, **extra) -> str:
    ratios = {"decode": decode, **extra}
    return json.dumps({"format": 1, "key": key.as_dict(), "ratios": ratios, "host": "gpu-1",
                       "at": "2026-12-06T10:00:00"})


def samples(*lines: str) -> cal.Samples:
    return cal.parse_samples("\n".join(lines), "inv.calibration.jsonl")


def test_a_factor_needs_three_gates_of_its_key_and_is_the_median_of_the_newest():
    two = samples(line(decode=0.7), line(decode=0.9))
    assert cal.factor(two.samples, KEY, "decode") == (None, 2)
    three = samples(line(decode=0.7), line(OTHER, decode=3.0), line(decode=0.9), line(decode=0.8))
    assert cal.factor(three.samples, KEY, "decode") == (cal.Factor(0.8, 3), 3)
    # the newest MAX_SAMPLES only: twenty at 0.5 after five at 2.0
    many = samples(*[line(decode=2.0)] * 5, *[line(decode=0.5)] * cal.MAX_SAMPLES)
    assert cal.factor(many.samples, KEY, "decode")[0] == cal.Factor(0.5, cal.MAX_SAMPLES)
    # a class far from the roofline is held to FACTOR_BOUNDS: the roofline, not the efficiency, is wrong there
    far = samples(*[line(decode=0.05)] * 3)
    assert cal.factor(far.samples, KEY, "decode")[0] == cal.Factor(cal.FACTOR_BOUNDS[0], 3)


def test_a_calibrated_prediction_scales_each_figure_by_its_own_factor_and_says_so():
    s = samples(*[line(decode=0.8, prefill=0.5, output=1.25)] * 3)
    p = cal.calibrate(PREDICTION, s, KEY)
    assert p.decode_tok_s == Band(64, 80, 96) and p.output_tok_s[1] == Band(64, 80, 96)
    assert p.output_tok_s[8] == Band(625, 750, 875)
    assert p.prefill_tok_s == Band(4000, 5000, 6000) and p.ttft_ms == Band(80, 100, 140)  # half the prefill rate
    assert p.calibration == {"decode": {"factor": 0.8, "samples": 3}, "prefill": {"factor": 0.5, "samples": 3},
                             "output": {"factor": 1.25, "samples": 3}}
    assert p.as_dict()["calibration"] == p.calibration and "calibrated: decode x0.8 (3 gates)" in p.basis
    assert "H100 SXM, bfloat16 MoE, speculative off" in p.lines[-1]
    only_decode = cal.calibrate(PREDICTION, samples(*[line(decode=0.8)] * 3), KEY)
    assert only_decode.prefill_tok_s == PREDICTION.prefill_tok_s and only_decode.output_tok_s[8] == Band(500, 600, 700)


def test_too_few_gates_leave_the_roofline_and_say_how_many_there_are():
    p = cal.calibrate(PREDICTION, samples(line(), line(OTHER)), KEY)
    assert p.decode_tok_s == PREDICTION.decode_tok_s and p.calibration is None and "calibration" not in p.as_dict()
    assert p.lines[-1] == ("not calibrated: 1 passing gate(s) of H100 SXM, bfloat16 MoE, speculative off in "
                           "inv.calibration.jsonl, 3 needed")


@pytest.mark.parametrize("bad", [
    "not json", "[]", "{}", json.dumps({"format": 2}),
    line(decode=float("nan")), line(decode=1e300), line(decode=-1), line(decode=True),
    line(decode="0.8"), json.dumps({"format": 1, "key": {**KEY.as_dict(), "moe": "yes"}, "ratios": {"decode": 1},
                                    "host": "h", "at": "t"}),
    json.dumps({"format": 1, "key": {**KEY.as_dict(), "gpu_model": "\x1b[31mH100"}, "ratios": {"decode": 1},
                "host": "h", "at": "t"}),
    json.dumps({"format": 1, "key": {**KEY.as_dict(), "gpu_model": "\ud800"}, "ratios": {"decode": 1},
                "host": "h", "at": "t"}),
    json.dumps({"format": 1, "key": KEY.as_dict(), "ratios": {"decode": 1}, "host": "h" * 5000, "at": "t"}),
    '{"format": 1, "key": ' * 2000,
])
def test_a_line_that_is_no_sample_is_skipped_and_counted(bad):
    s = samples(line(), bad, line())
    assert len(s.samples) == 2 and s.skipped == 1


def test_a_sample_is_against_the_roofline_alone_whatever_the_gated_plan_applied():
    report = {"measured_over_predicted": 1.1, "prefill_over_predicted": 0.9, "aggregate_over_predicted": None}
    text = cal.sample_line(KEY, report, {"decode": {"factor": 0.8, "samples": 3}}, "gpu-1", "2026-12-06T10:00:00")
    assert text is not None
    [back] = samples(text).samples
    assert back.key == KEY and back.ratios == {"decode": 0.88, "prefill": 0.9} and back.host == "gpu-1"
    assert cal.sample_line(KEY, {"measured_over_predicted": None}, None, "gpu-1", "t") is None
    assert cal.sample_line(KEY, {"measured_over_predicted": float("inf")}, None, "gpu-1", "t") is None


def test_a_plan_is_calibrated_under_its_own_key():
    p = plan(recorded("Qwen--Qwen3.5-35B-A3B"), H100X8)
    assert p.predicted is not None
    key = cal.plan_key(p)
    assert (key.gpu_model, key.moe) == ("H100 80GB HBM3", True)
    assert cal.key_of("NVIDIA  H100 80GB HBM3", None, "bfloat16", True, key.speculative) == key  # the probe's spelling
    calibrated = cal.calibrate_plan(p, samples(*[line(key, decode=0.5)] * 3))
    assert calibrated.predicted is not None
    assert calibrated.predicted.decode_tok_s.expected == pytest.approx(p.predicted.decode_tok_s.expected * 0.5)
    assert cal.calibrate_plan(p, samples(*[line(OTHER, decode=0.5)] * 3)).predicted.decode_tok_s == \
        p.predicted.decode_tok_s
    assert cal.calibrate_plan(p, None) is p


def test_the_controller_appends_one_line_per_passing_gate_and_reads_it_back(tmp_path):
    p = plan(recorded("Qwen--Qwen3.5-35B-A3B"), H100X8)
    path = tmp_path / "fleet.calibration.jsonl"
    for _ in range(3):
        assert samples_io.record(path, p, {"measured_over_predicted": 0.75}, "gpu-1")
    read = samples_io.load(path)
    assert read is not None and len(read.samples) == 3 and read.skipped == 0
    assert cal.calibrate_plan(p, read).predicted.calibration == {"decode": {"factor": 0.75, "samples": 3}}
    missing = samples_io.load(tmp_path / "none.calibration.jsonl")
    assert missing is not None and missing.samples == ()


def test_the_controller_writes_no_sample_through_a_link_or_into_a_fifo(tmp_path):
    p = plan(recorded("Qwen--Qwen3.5-35B-A3B"), H100X8)
    target = tmp_path / "elsewhere"
    target.write_text("")
    link = tmp_path / "fleet.calibration.jsonl"
    link.symlink_to(target)
    said: list[str] = []
    assert not samples_io.record(link, p, {"measured_over_predicted": 0.75}, "gpu-1", said.append)
    assert target.read_text() == "" and said and "not recorded in fleet.calibration.jsonl" in said[0]
    fifo = tmp_path / "other.calibration.jsonl"
    os.mkfifo(fifo)
    assert not samples_io.record(fifo, p, {"measured_over_predicted": 0.75}, "gpu-1", said.append)
    assert samples_io.load(fifo).samples == ()  # read as a file it is not: no samples, the reason kept
