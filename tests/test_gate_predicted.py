"""The gate against the plan's predicted speed (sglang_deploy/gate/predicted.py, gate/verdict.py):
the band read from a plan, the rule with and without anything else to compare, and the warning."""

from __future__ import annotations

import pytest

from sglang_deploy.gate.predicted import PredictedDecode, predicted_decode, prediction_rule
from sglang_deploy.gate.verdict import BaselineSummary, decide

BAND = {"decode_tok_s": {"low": 40.0, "expected": 50.0, "high": 60.0}, "basis": "roofline of RTX A6000 x2"}


def test_the_band_is_read_from_the_plan():
    p = predicted_decode({"predicted": BAND})
    assert p == PredictedDecode(40.0, 50.0, 60.0, "roofline of RTX A6000 x2")


@pytest.mark.parametrize("predicted", [
    None, {"none": "no facts"}, {"decode_tok_s": {"low": 40, "expected": 30, "high": 60}},
    {"decode_tok_s": {"low": 0, "expected": 30, "high": 60}}, {"decode_tok_s": {"low": True, "expected": 1, "high": 2}},
    {"decode_tok_s": {"low": float("nan"), "expected": 30, "high": 60}}, {"decode_tok_s": "fast"}, "x"])
def test_a_plan_without_a_band_has_none(predicted):
    assert predicted_decode({"predicted": predicted}) is None
    assert predicted_decode(None) is None


def test_a_basis_that_is_not_printable_is_dropped():
    p = predicted_decode({"predicted": {**BAND, "basis": "evil\x1b[2J"}})
    assert p is not None and p.basis == ""


P = PredictedDecode(40.0, 50.0, 60.0, "")


def test_far_below_with_nothing_else_fails():
    v = decide(16.0, None, None, tolerance=0.1, predicted=P, prediction_floor=0.5)
    assert not v.passed and "below 0.5 of the predicted band's low end (20.0 tok/s" in v.reasons[0]


def test_below_the_band_above_the_floor_passes_with_a_warning():
    v = decide(30.0, None, None, tolerance=0.1, predicted=P, prediction_floor=0.5)
    assert v.passed and v.rules[-1]["rule"] == "prediction" and "60% of the predicted 50.0" in v.rules[-1]["detail"]
    rule, warning = prediction_rule(30.0, P, 0.5, judged=True)
    assert rule["ok"] and warning is not None and "clocks throttled" in warning
    assert prediction_rule(45.0, P, 0.5, judged=True)[1] is None


def test_a_target_or_a_baseline_judges_instead():
    assert decide(16.0, 10.0, None, tolerance=0.1, predicted=P, prediction_floor=0.5).passed
    base = BaselineSummary(matching=1, considered=1, passing=1, best_tok_s=17.0)
    assert decide(16.0, None, base, tolerance=0.1, predicted=P, prediction_floor=0.5).passed
    # an empty baseline (no passing result) is nothing to compare with
    empty = BaselineSummary(matching=1, considered=1, passing=0, best_tok_s=None)
    assert not decide(16.0, None, empty, tolerance=0.1, predicted=P, prediction_floor=0.5).passed


def test_a_floor_of_zero_never_fails():
    assert decide(1.0, None, None, tolerance=0.1, predicted=P, prediction_floor=0.0).passed


@pytest.mark.parametrize("value", [1.0, -0.1, float("nan"), "half", True, 10 ** 400])
def test_a_bad_prediction_floor_names_the_host_and_the_field(value):
    from sglang_deploy.errors import PlanError
    from sglang_deploy.plan.spec import build_spec
    data = {"sglang_model": "Qwen/Qwen3.6-27B", "sglang_gpus": {"model": "RTX A6000", "count": 2},
            "sglang_gate": {"prediction_floor": value}}
    with pytest.raises(PlanError) as err:
        build_spec("gpu-1", {}, data)
    assert err.value.host == "gpu-1" and err.value.field == "sglang_gate.prediction_floor"
