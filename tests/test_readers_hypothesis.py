"""Hypothesis over every reader of tests/test_readers_fuzz.py, at the function each command
calls: whatever the file holds, the reader returns or raises its own one-line error without
terminal controls; never another exception."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_deploy.gate.errors import GateError
from sglang_deploy.gate.files import load_expect, read_baseline, read_key
from sglang_deploy.plan.tuning_record import TuningError
from sglang_deploy.plan.tuning_record_file import parse_records
from sglang_deploy.tuning.space import Space, SpaceError, load_space
from sglang_deploy.tuning.trials import TrialFileError, load_trial

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_TEXT = st.text(max_size=20)  # control characters and escapes included
_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), _TEXT)
_VALUE = st.recursive(_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(_TEXT, inner, max_size=4)), max_leaves=15)

RECORD = {"hardware": {"arch": "sm86", "gpu_model": "RTX A6000", "gpu_count": 2, "topology": "pcie",
                       "sglang_version": "0.5.23", "model": "m", "revision": None},
          "objective": "decode", "concurrency": [1], "slo": {}, "intents": {"speculative_num_steps": 3},
          "evidence": {}, "measured_on": "a6000-1", "measured_at": "2026-11-30T20:00:00+00:00", "trial_count": 1,
          "tool_version": "0.1.0", "trials": [{"number": 1, "config": {}, "status": "ok", "objective": 1.0,
                                                "cause": None, "figures": {}}]}
TRIAL = {"hosts": ["a6000-1"], "trial": 1, "intents": {"speculative_num_steps": 3}, "reason": "r",
         "gate": {"concurrency": [1], "slo": {}, "abandon_below": None}, "report_file": None}


def one_clean_line(exc: BaseException) -> None:
    text = str(exc)
    assert "\n" not in text and not CONTROL.search(text), repr(text)


def _set(doc: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


_RECORD_FIELDS = [[k] for k in RECORD] + [["hardware", k] for k in RECORD["hardware"]] + [["intents", "x"]]


@FUZZ
@given(field=st.sampled_from(_RECORD_FIELDS), value=_VALUE)
def test_a_record_with_any_value_in_any_field(field, value):
    text = yaml.safe_dump({"format": 1, "records": [_set(RECORD, field, value)]}, allow_unicode=True)
    try:
        parse_records(text, "r.yaml")
    except TuningError as exc:
        one_clean_line(exc)


@FUZZ
@given(text=st.text(max_size=200))
def test_a_record_file_of_any_text(text):
    try:
        parse_records(text, "r.yaml")
    except TuningError as exc:
        one_clean_line(exc)


_TRIAL_FIELDS = [[k] for k in TRIAL] + [["gate", k] for k in TRIAL["gate"]] + [["intents", "x"]]


@FUZZ
@given(field=st.sampled_from(_TRIAL_FIELDS), value=_VALUE)
def test_a_trial_with_any_value_in_any_field(field, value):
    try:
        load_trial(json.dumps(_set(TRIAL, field, value)), "t.json", "/nowhere/t.json")
    except TrialFileError as exc:
        one_clean_line(exc)


@FUZZ
@given(text=st.text(max_size=200))
def test_a_trial_file_of_any_text(text):
    try:
        load_trial(text, "t.json")
    except TrialFileError as exc:
        one_clean_line(exc)


@FUZZ
@given(raw=st.one_of(_VALUE, st.dictionaries(st.sampled_from(["speculative_num_steps", "mem_fraction_static",
                                                               "prefill_cuda_graph", "trust_remote_code"]),
                                              _VALUE, max_size=3)))
def test_a_space_file_of_any_content(raw):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "space.yaml"
        path.write_text(yaml.safe_dump(raw, allow_unicode=True))
        try:
            load_space(path, Space(()))
        except SpaceError as exc:
            one_clean_line(exc)


@FUZZ
@given(raw=_VALUE, host=st.one_of(st.none(), _TEXT))
def test_an_expect_file_of_any_content(raw, host):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan.json"
        path.write_text(json.dumps(raw))  # NaN and Infinity included: refused
        try:
            load_expect(str(path), host)
        except GateError as exc:
            assert exc.step == "--expect"
            one_clean_line(exc)


@FUZZ
@given(lines=st.lists(st.one_of(_TEXT, _VALUE.map(json.dumps)), max_size=8))
def test_a_baseline_of_any_lines(lines):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.jsonl"
        path.write_text("\n".join(lines), encoding="utf-8")
        entries, warnings = read_baseline(str(path))
        assert all(isinstance(e, dict) for e in entries) and len(warnings) <= 1


@FUZZ
@given(text=st.text(max_size=80))
def test_a_key_of_any_text(text):
    try:
        key = read_key(text, "--api-key-file")
    except GateError as exc:
        assert exc.step == "--api-key-file" and str(exc).startswith("--api-key-file: ")
        one_clean_line(exc)
        assert text.strip() == "" or text.strip() not in str(exc) or len(text.strip()) < 3
        return
    assert key and all(0x21 <= ord(c) <= 0x7E for c in key)
