"""The gate's options (sglang_deploy/gate/options.py): every default written once, the options
file the deploy hands to the gate on a GPU host (JSON, a format version, every key checked, no
secret in it), and `check`'s command line taking its defaults from there."""

from __future__ import annotations

import dataclasses
import io
import json
import os
from pathlib import Path

import pytest

from sglang_deploy.commands import cli, cli_handlers
from sglang_deploy.gate import main as gate_main
from sglang_deploy.gate import options
from sglang_deploy.gate.errors import GateError
from sglang_deploy.gate.files import MAX_OPTIONS_BYTES, read_options
from sglang_deploy.gate.options import FILE_FORMAT, FILE_VERSION, CheckOptions, HostRefs, from_file_dict, to_file_dict
from sglang_deploy.gate.watch import AbortFileWatch, SystemdWatch

PLAN = {"host": "h1", "sglang_version": "0.5.23", "intents": {"tp_size": {"value": 2}}, "model": "m"}
FULL = CheckOptions(url="http://127.0.0.1:30000", target_tok_s=120.5, baseline="/var/lib/x/history.jsonl",
                    tolerance=0.2, concurrency=(1, 8, 32), model="m", expect="/tmp/plan.json", expect_host="h1",
                    fail_on=frozenset({"tp", "nvls"}), ready_timeout=900.0, repeats=3, max_tokens=64,
                    hardware="2x NVIDIA RTX A6000 (sm86)", nvml=True, stall_timeout=30.0, record=True,
                    expect_plan=PLAN, slo={"ttft_p90": 2.0, "itl_p90": 0.06}, abandon_below=("decode", 150.0),
                    api_key="sk-not-in-the-file")
REFS = HostRefs(api_key_file="/tmp/sglang-gate.x/key", watch_unit="sglang.service", abort_file="/tmp/g/abort")


def _travelling(opts: CheckOptions) -> dict:
    return {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)
            if f.name not in ("api_key", "watch", "prompts")}


def test_a_round_trip_through_json_keeps_every_option_and_no_secret():
    data = json.loads(json.dumps(to_file_dict(FULL, REFS)))
    assert data["format"] == FILE_FORMAT and data["version"] == FILE_VERSION
    assert "sk-not-in-the-file" not in json.dumps(data) and "api_key" not in data
    opts, refs = from_file_dict(data, "options.json")
    assert _travelling(opts) == _travelling(FULL) and refs == REFS
    assert opts.api_key is None and opts.watch is None
    # the defaults travel as they are; a key left out keeps its default
    plain = CheckOptions(url="http://h:1")
    assert from_file_dict(to_file_dict(plain), "f")[0] == plain
    assert from_file_dict({"format": FILE_FORMAT, "version": 1, "url": "http://h:1"}, "f")[0] == plain


def test_every_default_is_the_dataclass_field_default():
    for f in dataclasses.fields(CheckOptions):
        if f.name != "url":
            assert options.default(f.name) == getattr(CheckOptions(url="http://h:1"), f.name)
    with pytest.raises(KeyError):
        options.default("url")


def test_check_without_options_is_checkoptions_defaults():
    """`sglang-deploy check --url U` restates no default: what it builds is CheckOptions(url=U)."""
    args = cli.build_parser().parse_args(["check", "--url", "http://h:1"])
    assert cli_handlers._check_options(args) == CheckOptions(url="http://h:1")
    text = cli.build_parser()._subparsers._group_actions[0].choices["check"].format_help()
    for name in ("repeats", "max_tokens"):
        assert f"(default {options.default(name)})" in text
    assert f"(default {options.default('tolerance'):g})" in " ".join(text.split())


BAD = [
    ({"repeats": 0}, "repeats: must be at least 1, got 0"),
    ({"repeats": "5"}, "repeats: must be a whole number, got '5'"),
    ({"repeats": True}, "repeats: must be a whole number, got True"),
    ({"max_tokens": 2.5}, "max_tokens: must be a whole number"),
    ({"concurrency": [1, 5000]}, "concurrency: must be at most 1024, got 5000"),
    ({"concurrency": []}, "concurrency: must be a whole number or a non-empty list of them"),
    ({"tolerance": 1.5}, "tolerance: must be between 0 and 1"),
    ({"tolerance": None}, "tolerance: must be a number, got None"),
    ({"target_tok_s": -1}, "target_tok_s: must be a finite number > 0"),
    ({"target_tok_s": "fast"}, "target_tok_s: must be a number or null, got 'fast'"),
    ({"ready_timeout": 1e12}, "ready_timeout: must be between 0 and"),
    ({"stall_timeout": 0}, "stall_timeout: must be > 0"),
    ({"fail_on": ["tp", "bogus"]}, "fail_on: must be a list of groups among"),
    ({"fail_on": "tp"}, "fail_on: must be a list of groups"),
    ({"slo": {"ttft_p95": 1.0}}, "slo: "),
    ({"slo": {"ttft_p90": "2s"}}, "slo: must be an object"),
    ({"abandon_below": ["decode"]}, "abandon_below: must be [objective, value]"),
    ({"abandon_below": ["speed", 1]}, "abandon_below: unknown objective 'speed'"),
    ({"nvml": 1}, "nvml: must be true or false, got 1"),
    ({"record": True}, "record: needs a baseline"),
    ({"url": "ftp://h"}, "url: 'ftp://h' is not an http(s) URL"),
    ({"url": None}, "url: must be text, got None"),
    ({"expect_plan": [PLAN]}, "expect_plan: must be an object"),
    ({"model": ""}, "model: is empty"),
    ({"api_key": "sk-x"}, "'api_key': unknown key"),
    ({"extra\x1b[31m": 1}, "unknown key"),
    ({"api_key_file": ""}, "api_key_file: must be a non-empty text or null"),
    ({"abort_file": "/tmp/a"}, "abort_file: needs watch_unit"),
    ({"version": 2}, "version: this gate reads version 1, got 2"),
    ({"version": True}, "version: this gate reads version 1, got True"),
    ({"format": "something else"}, "format: expected 'sglang-deploy gate options'"),
]


@pytest.mark.parametrize("change, message", BAD, ids=[next(iter(c)) for c, _ in BAD])
def test_a_wrong_key_is_refused_naming_it(change, message):
    data = {**to_file_dict(CheckOptions(url="http://127.0.0.1:9")), **change}
    with pytest.raises(GateError) as exc:
        from_file_dict(data, "opts.json")
    assert exc.value.step == "--options" and str(exc.value).startswith("--options: opts.json: ")
    assert message in str(exc.value), str(exc.value)
    assert "\x1b" not in str(exc.value) and "sk-x" not in str(exc.value)


def test_missing_url_and_not_an_object():
    with pytest.raises(GateError, match="url: missing"):
        from_file_dict({"format": FILE_FORMAT, "version": 1}, "f")
    with pytest.raises(GateError, match="expected a JSON object, got list"):
        from_file_dict([], "f")


def test_the_file_is_read_through_the_bounded_readers(tmp_path):
    good = tmp_path / "options.json"
    good.write_text(json.dumps(to_file_dict(CheckOptions(url="http://h:1", expect_plan=PLAN))))
    assert read_options(str(good))[0].expect_plan == PLAN
    cases = {
        "missing": (tmp_path / "nope.json", None),
        "not JSON": (tmp_path / "bad.json", "{"),
        "NaN": (tmp_path / "nan.json", json.dumps(to_file_dict(CheckOptions(url="http://h:1")))
                .replace('"tolerance": 0.1', '"tolerance": NaN')),
        "too large": (tmp_path / "big.json", " " * (MAX_OPTIONS_BYTES + 1)),
        "not a plan": (tmp_path / "plan.json", json.dumps(to_file_dict(CheckOptions(url="http://h:1",
                                                                                     expect_plan={"x": 1})))),
    }
    for name, (path, text) in cases.items():
        if text is not None:
            path.write_text(text)
        with pytest.raises(GateError) as exc:
            read_options(str(path))
        assert exc.value.step == "--options", name
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(GateError, match="--options"):  # refused, never read (no wait)
        read_options(str(fifo))


def test_options_from_file_resolves_the_key_and_the_watch(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-from-the-file\n")
    path = tmp_path / "options.json"
    path.write_text(json.dumps(to_file_dict(CheckOptions(url="http://h:1"),
                                            HostRefs(api_key_file=str(key), watch_unit="sglang.service",
                                                     abort_file=str(tmp_path / "abort")))))
    opts = gate_main.options_from_file(str(path))
    assert opts.api_key == "sk-from-the-file"
    assert isinstance(opts.watch, AbortFileWatch) and opts.watch.unit == "sglang.service"
    path.write_text(json.dumps(to_file_dict(CheckOptions(url="http://h:1"), HostRefs(watch_unit="u.service"))))
    opts = gate_main.options_from_file(str(path))
    assert type(opts.watch) is SystemdWatch and opts.api_key is None
    key.write_text("two\nlines\n")
    path.write_text(json.dumps(to_file_dict(CheckOptions(url="http://h:1"), HostRefs(api_key_file=str(key)))))
    with pytest.raises(GateError) as exc:
        gate_main.options_from_file(str(path))
    assert exc.value.step == "api_key_file" and "two" not in str(exc.value)


def test_the_gate_entry_point_exits_2_before_any_request(tmp_path):
    err = io.StringIO()
    path = tmp_path / "options.json"
    path.write_text(json.dumps({**to_file_dict(CheckOptions(url="http://127.0.0.1:9")), "surprise": 1}))
    assert gate_main.main(["check", "--options", str(path)], io.StringIO(), err) == 2
    assert f"error: --options: {path}: 'surprise': unknown key" in err.getvalue()
    err = io.StringIO()
    assert gate_main.main(["check", "--options", " "], io.StringIO(), err) == 2
    assert "--options: is empty" in err.getvalue()
    with pytest.raises(SystemExit):
        gate_main.main(["check"], io.StringIO(), io.StringIO())  # --options is required


def test_sample_gpus_arguments_are_one_definition(tmp_path):
    """`sglang-deploy sample-gpus` and the zipapp's take the same arguments and checks."""
    for main in (cli.main, gate_main.main):
        err = io.StringIO()
        assert main(["sample-gpus", "--out", str(tmp_path / "s.json"), "--every", "0"], io.StringIO(), err) == 2
        assert "--every: must be a finite number of seconds" in err.getvalue()
    assert Path(tmp_path / "s.json").exists() is False
