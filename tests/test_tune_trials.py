"""The trial file the tuner hands the deploy, and how a trial's deploy result and gate
report become the search's outcome (sglang_deploy/tuning/trials.py)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from sglang_deploy.tuning import trials
from sglang_deploy.tuning.trials import TrialFile, TrialFileError, TrialGate, load_trial, outcome_of


@pytest.fixture
def state_dir():
    """A folder as the tuner makes it (sglang_deploy/commands/tune.py: TemporaryDirectory(prefix=STATE_DIR_PREFIX))."""
    with tempfile.TemporaryDirectory(prefix=trials.STATE_DIR_PREFIX) as tmp:
        yield Path(tmp).resolve()


def test_the_tuners_default_concurrency_is_the_gates():
    """A trial measured without levels of its own is measured as the deploy's gate measures: the
    tuner's every default (its options, a trial's gate, a trial file and a record without levels)
    is the gate's default (sglang_deploy/gate/options.py)."""
    from sglang_deploy.commands.tune import TuneOptions
    from sglang_deploy.gate.options import CheckOptions
    from sglang_deploy.plan.tuning_record import DEFAULT_CONCURRENCY

    gate_levels = CheckOptions(url="http://127.0.0.1:30000").levels
    assert DEFAULT_CONCURRENCY == gate_levels
    assert TuneOptions(inventory="inventory.py", host="a6000-1").concurrency == gate_levels
    assert TrialGate().concurrency == gate_levels
    doc = {"hosts": ["a6000-1"], "trial": 1, "intents": {}, "gate": {}}
    assert load_trial(json.dumps(doc), "t.json").gate.concurrency == gate_levels


def test_trial_file_round_trip(state_dir):
    tf = TrialFile(hosts=("a6000-1",), number=3, intents={"speculative_num_steps": 4}, reason="tune trial 3",
                   gate=TrialGate((1, 8), {"ttft_p90": 2.0}, ("decode", 51.5)),
                   report_file=str(state_dir / "trial-3.report.json"))
    back = load_trial(tf.dumps(), "t.json", state_dir / "trial-3.json")
    assert back == tf


@pytest.mark.parametrize("name", ["trust_remote_code", "host", "port", "extra_args", "model_path", "nnodes",
                                  "served_model_name"])
def test_a_trial_sets_only_what_the_tuner_varies(name):
    doc = {"hosts": ["h"], "trial": 1, "intents": {"speculative_num_steps": 3, name: True}}
    with pytest.raises(TrialFileError) as info:
        load_trial(json.dumps(doc), "t.json")
    message = str(info.value)
    assert message.startswith(f"t.json: intents.{name}: ") and "\n" not in message
    assert ("not a tuned setting; a trial may set only speculative_algorithm, " in message
            or f"unknown intent '{name}'; a trial may set only speculative_algorithm, " in message)


@pytest.mark.parametrize("key", ["extra_args", "env", "host"])
def test_a_trial_holds_no_other_key(key):
    doc = {"hosts": ["h"], "trial": 1, "intents": {}, key: ["--trust-remote-code"]}
    with pytest.raises(TrialFileError, match=rf"^t\.json: {key}: not a trial setting"):
        load_trial(json.dumps(doc), "t.json")


def test_the_report_file_stays_in_the_state_directory(state_dir, tmp_path):
    doc = {"hosts": ["h"], "trial": 1, "intents": {}}
    trial = state_dir / "trial-1.json"
    ok = load_trial(json.dumps({**doc, "report_file": "trial-1.report.json"}), "t.json", trial)
    assert ok.report_file == str(state_dir / "trial-1.report.json")
    (state_dir / "link").symlink_to(tmp_path)
    for bad in ("/etc/passwd", str(tmp_path / "r.json"), "../r.json", str(state_dir / ".." / "r.json"),
                "link/r.json", str(state_dir / "sub" / "r.json"), str(state_dir)):
        with pytest.raises(TrialFileError, match=r"^t\.json: report_file: .* outside the tuner's state directory"):
            load_trial(json.dumps({**doc, "report_file": bad}), "t.json", trial)
    # a trial file elsewhere names no report file at all
    with pytest.raises(TrialFileError, match=r"^t\.json: report_file: the trial file is not in the tuner's state"):
        load_trial(json.dumps({**doc, "report_file": str(tmp_path / "r.json")}), "t.json", tmp_path / "t.json")


@pytest.mark.parametrize("doc, field", [
    ({"trial": 1, "intents": {}, "reason": "x"}, "hosts"),
    ({"hosts": [], "trial": 1, "intents": {}, "reason": "x"}, "hosts"),
    ({"hosts": ["h"], "trial": "1", "intents": {}, "reason": "x"}, "trial"),
    ({"hosts": ["h"], "trial": 1, "intents": [], "reason": "x"}, "intents"),
    ({"hosts": ["h"], "trial": 1, "intents": {}, "reason": 3}, "reason"),
    ({"hosts": ["h"], "trial": 1, "intents": {}, "reason": "x", "gate": {"concurrency": [0]}}, "gate.concurrency"),
    ({"hosts": ["h"], "trial": 1, "intents": {}, "reason": "x", "gate": {"slo": {"ttft_p90": -1}}}, "gate.slo"),
    ({"hosts": ["h"], "trial": 1, "intents": {}, "reason": "x", "gate": {"abandon_below": ["speed", 3]}},
     "gate.abandon_below"),
])
def test_a_bad_trial_file_names_the_field(doc, field):
    with pytest.raises(TrialFileError, match=rf"t\.json: {field}"):
        load_trial(json.dumps(doc), "t.json")


def test_not_json_is_refused():
    with pytest.raises(TrialFileError, match="not JSON"):
        load_trial("{", "t.json")


JOURNAL_OOM = ("Nov 30 20:01:02 host python[812]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
               "2.00 GiB. GPU 0 has a total capacity of 47.54 GiB of which 1.12 GiB is free.")
JOURNAL_LOW = ("Nov 30 20:01:02 host python[812]: RuntimeError: Not enough memory. Please try to increase "
               "--mem-fraction-static.")


def test_passing_trial_gives_its_objective():
    report = {"verdict": "pass", "decode_tok_s": 57.1, "requests": [1]}
    o = outcome_of({"result": "passed"}, {"outcome": "pass", "summary": "ok", "report": report}, "decode")
    assert (o.status, o.objective, o.oom) == (trials.OK, 57.1, False)
    assert o.figures["decode_tok_s"] == 57.1 and "requests" not in o.figures


def test_out_of_memory_in_the_journal_is_infeasible_and_flagged():
    dump = {"outcome": "crashed", "summary": f"the server did not stay up: the unit failed; last journal lines:\n"
                                             f"{JOURNAL_OOM}", "report": {}}
    o = outcome_of({"result": "rolled-back"}, dump, "decode")
    assert o.status == trials.INFEASIBLE and o.oom and o.objective is None
    assert o.cause.startswith("crashed: out of GPU memory at start-up") and "CUDA out of memory" in o.cause


def test_too_low_memory_is_infeasible_but_not_oom():
    o = outcome_of(None, {"outcome": "crashed", "summary": JOURNAL_LOW}, "decode")
    assert o.status == trials.INFEASIBLE and not o.oom and "memory fraction too low" in o.cause


def test_a_slow_trial_misses_the_gate_and_is_infeasible():
    o = outcome_of({"result": "rolled-back"}, {"outcome": "fail", "summary": "gate failed: 30 tok/s below 45",
                                               "report": {"verdict": "fail", "decode_tok_s": 30.0}}, "decode")
    assert o.status == trials.INFEASIBLE and "gate failed" in o.cause and o.figures["decode_tok_s"] == 30.0


def test_a_deploy_that_never_reached_the_gate_is_infeasible_with_its_error():
    o = outcome_of({"result": "failed", "summary": "SGLang 0.5.23 refuses --speculative-num-steps 9"}, None, "decode")
    assert o.status == trials.INFEASIBLE and "refuses" in o.cause


def test_abandoned_trial_keeps_its_partial_figure():
    report = {"verdict": "pass", "decode_tok_s": 31.0,
              "abandoned": {"objective": "decode", "bound": 32.0, "threshold": 50.0, "after_requests": 2}}
    o = outcome_of({"result": "passed"}, {"outcome": "pass", "report": report}, "decode")
    assert o.status == trials.ABANDONED and o.objective == 31.0 and "bound 32 below 50 after 2" in o.cause


def test_describe_names_only_what_differs():
    start = {"speculative_num_steps": 3, "mem_fraction_static": 0.88}
    assert trials.describe({"speculative_num_steps": 4, "mem_fraction_static": 0.88}, start) == \
        "speculative_num_steps=4"
    assert trials.describe(dict(start), start) == "the starting configuration"


def test_a_crash_names_the_servers_own_last_error_line():
    summary = ("the server did not stay up: the server exited and systemd is about to restart it, result exit-code; "
               "last journal lines:\n"
               "Nov 30 20:45:01 e2e-tune python[123]: Scheduler hit an exception: "
               "Traceback (most recent call last):\n"
               "Nov 30 20:45:01 e2e-tune python[123]: RuntimeError: CUDA error: "
               "an illegal memory access was encountered\n"
               "Nov 30 20:45:02 e2e-tune systemd[1]: sglang.service: Main process exited, "
               "code=exited, status=1/FAILURE")
    o = outcome_of({"result": "rolled-back"}, {"outcome": "crashed", "summary": summary}, "decode")
    assert o.status == trials.INFEASIBLE and not o.oom
    assert o.cause.startswith("crashed: the server did not stay up")
    assert o.cause.endswith("RuntimeError: CUDA error: an illegal memory access was encountered")
