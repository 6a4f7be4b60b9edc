"""Tuning records: the file's round trip, its refusals (naming file and field), and matching."""

from __future__ import annotations

import copy
import dataclasses
import os
import tempfile

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_deploy.untrusted import printable
from sglang_deploy.plan.tuning_record import _HOST, HardwareClass, TuningError, TuningRecord, match
from sglang_deploy.plan.tuning_record_file import load_records, parse_records, records_path, save_record

A6000 = HardwareClass(arch="sm86", gpu_model="RTX A6000", gpu_count=2, topology="nvlink-pairs",
                      sglang_version="0.5.23", model="Qwen/Qwen3.6-27B", revision="a" * 40)


def record(hw=A6000, **kw):
    base = dict(
        hardware=hw, objective="decode",
        intents={"speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                 "speculative_num_draft_tokens": 4, "mem_fraction_static": 0.86},
        evidence={"speculative_num_steps": {"value": 3, "objective": 57.1,
                                            "runner_up": {"value": 2, "objective": 49.8}}},
        measured_on="a6000-1", measured_at="2026-11-30T20:00:00+00:00", trial_count=12, concurrency=(1,),
        trials=[{"number": 1, "config": {"speculative_num_steps": 2}, "status": "ok", "objective": 49.8,
                 "cause": None, "figures": {"decode_tok_s": 49.8}},
                {"number": 2, "config": {"mem_fraction_static": 0.95}, "status": "infeasible", "objective": None,
                 "cause": "out of memory at start", "figures": {}}],
        tool_version="0.1.0")
    base.update(kw)
    return TuningRecord(**base)


def test_records_path_sits_beside_the_inventory(tmp_path):
    assert records_path(tmp_path / "inventory" / "a6000.py") == tmp_path / "inventory" / "a6000.tuning.yaml"
    assert records_path("a6000.py").name == "a6000.tuning.yaml"


def test_a_missing_file_has_no_records(tmp_path):
    assert load_records(tmp_path / "none.tuning.yaml") == []


def test_save_then_load_gives_the_record_back_in_a_readable_file(tmp_path):
    path = tmp_path / "a6000.tuning.yaml"
    rec = record()
    save_record(path, rec)
    assert load_records(path) == [rec]
    text = path.read_text()
    assert text.splitlines()[2:4] == ["format: 1", "records:"]
    assert "speculative_num_steps: 3" in text and "measured_on: a6000-1" in text
    # block style, one key a line: a person can read and diff it
    assert "{" not in text.split("trials:")[0].replace("slo: {}", "")
    save_record(path, rec)
    assert path.read_text() == text, "writing the same record again gives the same bytes"


def test_save_replaces_the_same_class_and_keeps_the_others(tmp_path):
    path = tmp_path / "inv.tuning.yaml"
    old_version = record(dataclasses.replace(A6000, sglang_version="0.5.19"), trial_count=5)
    first = record()
    save_record(path, old_version)
    save_record(path, first)
    better = record(intents={**first.intents, "speculative_num_steps": 4}, trial_count=20)
    save_record(path, better)
    assert load_records(path) == [old_version, better]
    assert not [n for n in os.listdir(tmp_path) if n != "inv.tuning.yaml"], "no temporary file left behind"


def test_save_refuses_to_overwrite_a_file_it_cannot_read(tmp_path):
    path = tmp_path / "inv.tuning.yaml"
    path.write_text("format: 1\nrecords: [{objective: decode}]\n")
    with pytest.raises(TuningError):
        save_record(path, record())
    assert path.read_text() == "format: 1\nrecords: [{objective: decode}]\n"


def test_gpu_model_as_the_probe_spells_it_is_the_same_class(tmp_path):
    path = tmp_path / "inv.tuning.yaml"
    save_record(path, record())
    probed = dataclasses.replace(A6000, gpu_model="NVIDIA RTX A6000")
    save_record(path, record(probed, trial_count=30))
    (only,) = load_records(path)
    assert only.trial_count == 30
    assert match([only], A6000)[0] is only


_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-10**9, 10**9),
                    st.floats(allow_nan=False, allow_infinity=False, width=64), st.text(max_size=20).filter(
                        lambda s: printable(s, newlines=True) == s and "\t" not in s))
# a record's strings hold no control characters (the reader refuses them: they could drive a terminal)
_KEY = st.text(min_size=1, max_size=12).filter(lambda s: printable(s) == s)
_FIGURES = st.recursive(_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(_KEY, inner, max_size=4)), max_leaves=12)
_INTENTS = st.fixed_dictionaries({}, optional={
    "speculative_algorithm": st.sampled_from([None, "NEXTN", "EAGLE", "EAGLE3"]),
    "speculative_num_steps": st.integers(1, 8),
    "speculative_eagle_topk": st.integers(1, 8),
    "speculative_num_draft_tokens": st.integers(1, 16),
    "mem_fraction_static": st.floats(0.01, 0.99),
    "cuda_graph_max_bs_decode": st.integers(1, 1024),
    "chunked_prefill_size": st.sampled_from([None, 2048, 4096, 8192]),
    "max_running_requests": st.one_of(st.none(), st.integers(1, 4096)),
    "prefill_cuda_graph": st.sampled_from(["on", "off"]),
    "custom_all_reduce": st.booleans(),
})
_TRIAL = st.fixed_dictionaries({
    "number": st.integers(0, 1000), "config": _INTENTS, "status": st.sampled_from(["ok", "infeasible", "abandoned"]),
    "objective": st.one_of(st.none(), st.floats(0, 1e5)),
    "cause": st.one_of(st.none(), st.text(max_size=40).filter(lambda s: printable(s) == s)),
    "figures": st.dictionaries(_KEY, _FIGURES, max_size=5)})


@settings(max_examples=60, deadline=None)
@given(intents=_INTENTS, trials=st.lists(_TRIAL, max_size=4),
       measured_on=st.from_regex(_HOST, fullmatch=True).filter(lambda s: len(s) <= 60),
       revision=st.one_of(st.none(), st.text(alphabet="0123456789abcdef", min_size=1, max_size=40)),
       version=st.sampled_from(["0.5.19", "0.5.23", "0.6", "1"]),
       concurrency=st.lists(st.integers(1, 512), min_size=1, max_size=4).map(tuple),
       slo=st.dictionaries(st.sampled_from(["ttft_p90", "itl_p90", "e2e_p99"]), st.floats(0.001, 100)))
def test_any_record_round_trips(intents, trials, measured_on, revision, version, concurrency, slo):
    hw = dataclasses.replace(A6000, revision=revision, sglang_version=version)
    evidence = {k: {"value": v, "objective": 1.5, "runner_up": None} for k, v in intents.items()}
    rec = record(hw, intents=intents, trials=trials, measured_on=measured_on, evidence=evidence,
                 concurrency=concurrency, slo=slo, trial_count=len(trials))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prop.tuning.yaml")
        save_record(path, rec)
        assert load_records(path) == [rec]


@pytest.mark.parametrize("text, field, words", [
    ("records: []\n", "format", "must be 1"),
    ("format: 2\nrecords: []\n", "format", "must be 1"),
    ("format: 1\nrecords: {}\n", "records", "must be a list"),
    ("format: 1\nrecords: [{objective: decode}]\n", "records[0].hardware", "missing"),
    ("format: 1\nrecord: []\n", "record", "unknown key"),
    ("format: 1\nrecords: [\n", "line", "not valid YAML"),
])
def test_malformed_files_name_the_file_and_the_field(tmp_path, text, field, words):
    path = tmp_path / "bad.tuning.yaml"
    path.write_text(text)
    with pytest.raises(TuningError) as info:
        load_records(path)
    message = str(info.value)
    assert message.startswith(f"tuning records {path}: {field}")
    assert words in message


def _with(**changes):
    data = record().as_dict()
    for dotted, value in changes.items():
        target = data
        *parents, last = dotted.split("__")
        for p in parents:
            target = target[p]
        if value is KeyError:
            del target[last]
        else:
            target[last] = value
    return yaml.safe_dump({"format": 1, "records": [data]})


@pytest.mark.parametrize("text, field, words", [
    (_with(hardware__gpu_count=0), "records[0].hardware.gpu_count", "integer >= 1"),
    (_with(hardware__revision=KeyError), "records[0].hardware.revision", "missing"),
    (_with(hardware__sglang_version=0.6), "records[0].hardware.sglang_version", "quoted string"),
    (_with(hardware__gpus=2), "records[0].hardware.gpus", "unknown key"),
    (_with(objective="latency"), "records[0].objective", "decode, throughput, goodput"),
    (_with(intents__mem_fraction_static=1.5), "records[0].intents.mem_fraction_static", "between 0 and 1"),
    (_with(intents__speculative_num_stepz=3), "records[0].intents.speculative_num_stepz", "unknown intent"),
    (_with(intents__nnodes=2), "records[0].intents.nnodes", "not a tuned setting"),
    (_with(evidence__tp_size={"value": 2}), "records[0].evidence.tp_size", "does not set"),
    (_with(trials=[{"number": 1, "status": "great"}]), "records[0].trials[0].status", "ok, infeasible, abandoned"),
    (_with(trial_count=-1), "records[0].trial_count", "integer >= 0"),
    (_with(concurrency=[]), "records[0].concurrency", "non-empty list"),
    (_with(slo__ttft_p90=-2), "records[0].slo.ttft_p90", "positive number"),
    (_with(measured_on=KeyError), "records[0].measured_on", "missing"),
])
def test_malformed_records_name_the_field(text, field, words):
    with pytest.raises(TuningError) as info:
        parse_records(text, "inv.tuning.yaml")
    assert str(info.value).startswith(f"tuning records inv.tuning.yaml: {field}: "), str(info.value)
    assert words in str(info.value)


def test_two_records_of_one_class_are_refused():
    data = record().as_dict()
    with pytest.raises(TuningError, match=r"records\[1\]\.hardware: the same hardware class as records\[0\]"):
        parse_records(yaml.safe_dump({"format": 1, "records": [data, copy.deepcopy(data)]}), "x")


def test_a_value_shared_in_memory_is_written_without_aliases(tmp_path):
    shared = {"decode_tok_s": 50.0}
    trials = [{"number": i, "config": {}, "status": "ok", "objective": 50.0, "cause": None, "figures": shared}
              for i in (1, 2)]
    path = tmp_path / "inv.tuning.yaml"
    save_record(path, record(trials=trials))
    assert "&" not in path.read_text() and "*id" not in path.read_text()
    assert load_records(path)[0].trials[1]["figures"] == shared


def test_match_applies_only_the_same_class_and_says_why_not():
    same = record()
    older = record(dataclasses.replace(A6000, sglang_version="0.5.19"))
    assert match([older, same], A6000) == (same, [
        "tuning record for SGLang 0.5.19 not applied: this host runs 0.5.23 (measured on a6000-1, 2026-11-30)"])
    found, notes = match([older], A6000)
    assert found is None and len(notes) == 1


@pytest.mark.parametrize("change, note", [
    ({"revision": "b" * 40}, f"tuning record for revision {'b' * 40} not applied: this host serves revision "
                             f"{'a' * 40}"),
    ({"revision": None}, "tuning record for an unknown revision not applied: this host serves revision"),
    ({"gpu_count": 4}, "tuning record for 4 GPU(s) not applied: this host uses 2 GPU(s)"),
    ({"gpu_model": "L40S", "arch": "sm89"}, "tuning record for sm89, L40S not applied: this host is sm86, has "
                                            "RTX A6000"),
    ({"topology": "pcie"}, "tuning record for topology pcie not applied: this host has topology nvlink-pairs"),
])
def test_each_differing_field_is_named(change, note):
    found, notes = match([record(dataclasses.replace(A6000, **change))], A6000)
    assert found is None
    assert notes[0].startswith(note), notes


def test_a_host_whose_revision_is_unknown_does_not_take_a_pinned_record():
    found, notes = match([record()], dataclasses.replace(A6000, revision=None))
    assert found is None
    assert "this host serves a revision not known when planning" in notes[0]


def test_records_of_other_models_are_counted_not_listed():
    other = record(dataclasses.replace(A6000, model="Qwen/Qwen3-32B"))
    assert match([other], A6000) == (None, ["no tuning record for Qwen/Qwen3.6-27B: the 1 record(s) given are "
                                            "for other models"])
    assert match([other, record()], A6000)[1] == []


def test_reasons_cite_the_measurement():
    rec = record()
    assert rec.reason("speculative_num_steps") == (
        "MTP 3 steps: 57.1 tok/s vs 49.8 at 2 steps, measured on a6000-1, 12 trials (tuning record 2026-11-30)")
    assert rec.reason("mem_fraction_static") == (
        "mem_fraction_static 0.86: part of the best configuration found, measured on a6000-1, 12 trials "
        "(tuning record 2026-11-30)")
    busy = record(objective="throughput", concurrency=(1, 8, 32),
                  evidence={"mem_fraction_static": {"value": 0.86, "objective": 812.34,
                                                    "runner_up": {"value": 0.8, "objective": 700}}})
    assert busy.reason("mem_fraction_static").startswith(
        "mem_fraction_static 0.86: 812.3 output tok/s at concurrency 32 vs 700 at 0.8, measured on a6000-1")
