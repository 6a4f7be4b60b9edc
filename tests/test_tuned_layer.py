"""The planner's "tuned" layer (a matching tuning record) and "trial" layer (a tuning run's trial),
and how the CLI and the deploy find them."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
from pathlib import Path

import pytest

from sglang_deploy.deploy.inventory import inventory_file
from sglang_deploy.deploy.tuning import current_trial, records_for, trial_for, tuning_file
from sglang_deploy.runcontext import RunContext
from sglang_deploy.plan import catalog as catalogs
from sglang_deploy.commands.cli import main
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.output import print_plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.plan.spec import build_spec, trial_intents
from sglang_deploy.plan.tuning_record import HardwareClass, TuningRecord, hardware_class
from sglang_deploy.plan.tuning_record_file import records_path, save_record

from tests.conftest import load_probe
from tests.recorded_facts import QWEN36_27B

REFERENCE = {
    "sglang_model": "Qwen/Qwen3.6-27B",
    "sglang_gpus": {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"},
}
A6000 = HardwareClass(arch="sm86", gpu_model="RTX A6000", gpu_count=2, topology="nvlink-pairs",
                      sglang_version="0.5.23", model="Qwen/Qwen3.6-27B", revision=None)
STEPS_REASON = "MTP 2 steps: 61.2 tok/s vs 57.1 at 3 steps, measured on a6000-1, 12 trials (tuning record 2026-11-30)"


def record(hw=A6000, intents=None, **kw):
    base = dict(
        hardware=hw, objective="decode",
        intents=intents or {"speculative_num_steps": 2, "speculative_num_draft_tokens": 3,
                            "chunked_prefill_size": 4096},
        evidence={"speculative_num_steps": {"value": 2, "objective": 61.2,
                                            "runner_up": {"value": 3, "objective": 57.1}}},
        measured_on="a6000-1", measured_at="2026-11-30T20:00:00+00:00", trial_count=12, tool_version="0.1.0",
        trials=[{"number": 1, "config": {"speculative_num_steps": 3}, "status": "ok", "objective": 57.1,
                 "cause": None, "figures": {"decode_tok_s": 57.1}}])
    base.update(kw)
    return TuningRecord(**base)


def plan_for(host_data=REFERENCE, tuning=(), group_data=None, probe=None, version=None, host="a6000-1",
             trial=None):
    spec = build_spec(host, group_data or {}, host_data)
    return plan_host(spec, probe=load_probe(probe) if probe else None, sglang_version=version, tuning=tuning,
                     trial=trial)


def layer_of(plan, name):
    r = plan.intents[name]
    return r.value, r.layer


def test_the_hardware_class_of_the_reference_plan():
    assert hardware_class(plan_for()) == A6000


def test_a_matching_record_is_the_tuned_layer_with_measured_reasons():
    rec = record()
    plan = plan_for(tuning=[rec])
    assert layer_of(plan, "speculative_num_steps") == (2, "tuned")
    assert plan.intents["speculative_num_steps"].reason == STEPS_REASON
    assert layer_of(plan, "chunked_prefill_size") == (4096, "tuned")
    assert "part of the best configuration found, measured on a6000-1" in plan.intents["chunked_prefill_size"].reason
    # below it the model profile still speaks for what the record does not set
    assert layer_of(plan, "speculative_algorithm") == ("NEXTN", "model")
    assert plan.tuning is rec and plan.tuning_notes == []
    argv = " ".join(plan.argv)
    assert "--speculative-num-steps 2" in argv and "--speculative-num-draft-tokens 3" in argv
    assert "--chunked-prefill-size 4096" in argv
    assert catalogs.load_catalog("0.5.23").check(plan.argv) == []


def test_group_and_host_data_win_over_the_record():
    rec = record()
    plan = plan_for({**REFERENCE, "sglang_intents": {"speculative_num_steps": 4, "speculative_num_draft_tokens": 5}},
                    tuning=[rec], group_data={"sglang_intents": {"chunked_prefill_size": 8192}})
    assert layer_of(plan, "speculative_num_steps") == (4, "host")
    assert layer_of(plan, "speculative_num_draft_tokens") == (5, "host")
    assert layer_of(plan, "chunked_prefill_size") == (8192, "group")
    assert plan.tuning is rec


def test_a_record_for_another_version_is_not_applied_and_the_plan_says_so():
    old = record(dataclasses.replace(A6000, sglang_version="0.5.19"))
    plan = plan_for(tuning=[old])
    assert layer_of(plan, "speculative_num_steps") == (3, "model")
    assert plan.tuning is None
    assert plan.tuning_notes == ["tuning record for SGLang 0.5.19 not applied: this host runs 0.5.23 "
                                 "(measured on a6000-1, 2026-11-30)"]
    # ... and the same record applies to a plan for that version
    assert plan_for(tuning=[old], version="0.5.19").tuning is old


def test_a_record_for_another_revision_is_not_applied():
    facts = dataclasses.replace(QWEN36_27B, revision="a" * 40, source="the Hub")
    spec = build_spec("a6000-1", {}, REFERENCE)
    pinned = record(dataclasses.replace(A6000, revision="b" * 40))
    plan = plan_host(spec, facts=facts, tuning=[pinned])
    assert plan.tuning is None and layer_of(plan, "speculative_num_steps")[1] != "tuned"
    assert plan.tuning_notes[0].startswith(f"tuning record for revision {'b' * 40} not applied: this host serves "
                                           f"revision {'a' * 40}")
    same = record(dataclasses.replace(A6000, revision="a" * 40))
    assert plan_host(spec, facts=facts, tuning=[same]).tuning is same


def test_a_tuned_memory_fraction_sizes_the_plan_like_a_declared_one():
    """With the checkpoint's facts, the KV budget (context length) is computed with the tuned fraction."""
    spec = build_spec("a6000-1", {}, {"sglang_model": "Qwen/Qwen3.6-27B",
                                      "sglang_gpus": {"model": "RTX A6000", "count": 2}})
    hw = hardware_class(plan_host(spec, facts=QWEN36_27B))
    rec = record(hw, intents={"mem_fraction_static": 0.8})
    plan = plan_host(spec, facts=QWEN36_27B, tuning=[rec])
    assert plan.tuning is rec, plan.tuning_notes
    assert layer_of(plan, "mem_fraction_static") == (0.8, "tuned")
    declared = plan_host(build_spec("a6000-1", {}, {**spec_data(spec), "sglang_intents": {"mem_fraction_static": 0.8}}),
                         facts=QWEN36_27B)
    assert plan.intents["context_length"].value == declared.intents["context_length"].value


def spec_data(spec):
    return {"sglang_model": spec.model_path, "sglang_gpus": spec.declared_gpus}


def test_hardware_enforcement_still_overrides_a_tuned_value():
    plan = plan_for(tuning=[record(intents={"nvls": True})])
    assert layer_of(plan, "nvls") == (False, "arch")
    assert "--enable-nccl-nvls" not in plan.argv and plan.env["NCCL_NVLS_ENABLE"] == "0"
    assert any(w.startswith("nvls=True (tuned layer) overridden to False: SM86 has no NVLink SHARP")
               for w in plan.warnings)


def test_a_tuned_custom_allreduce_without_p2p_is_overridden():
    data = {"sglang_model": "Qwen/Qwen3-32B", "sglang_intents": {"tp_size": 2}}
    probe_plan = plan_for(data, probe="rtx4090x2-pcie")
    hw = hardware_class(probe_plan)
    assert hw.gpu_model == "GeForce RTX 4090", "the probe's 'NVIDIA ' prefix is not part of the class"
    plan = plan_for(data, probe="rtx4090x2-pcie", tuning=[record(hw, intents={"custom_all_reduce": True})])
    assert plan.tuning is not None
    assert layer_of(plan, "custom_all_reduce") == (False, "topology")
    assert "--disable-custom-all-reduce" in plan.argv
    assert any(w.startswith("custom_all_reduce=True (tuned layer) overridden to False") for w in plan.warnings)


def test_the_trial_layer_wins_over_the_host_and_the_record():
    trial = trial_intents("a6000-1", "trial", {"speculative_num_steps": 5, "speculative_num_draft_tokens": 6,
                                               "mem_fraction_static": 0.85}, "tuning trial 7")
    plan = plan_for(tuning=[record()], trial=trial)
    assert layer_of(plan, "speculative_num_steps") == (5, "trial")
    assert layer_of(plan, "mem_fraction_static") == (0.85, "trial")  # the host's 0.88 is below it
    assert plan.intents["mem_fraction_static"].reason == "tuning trial 7"
    assert layer_of(plan, "chunked_prefill_size") == (4096, "tuned")
    assert "--speculative-num-steps 5" in " ".join(plan.argv)


def test_a_trial_the_hardware_cannot_do_is_overridden_too():
    trial = trial_intents("a6000-1", "trial", {"nvls": True}, "tuning trial 1")
    plan = plan_for(trial=trial)
    assert layer_of(plan, "nvls") == (False, "arch")
    assert any(w.startswith("nvls=True (trial layer) overridden to False") for w in plan.warnings)


def test_a_trial_turning_speculation_off_drops_its_flags():
    plan = plan_for(trial=trial_intents("a6000-1", "trial", {"speculative_algorithm": None}, "trial 2"))
    assert layer_of(plan, "speculative_algorithm") == (None, "trial")
    assert not [a for a in plan.argv if a.startswith("--speculative")]
    with pytest.raises(PlanError, match=r"speculative_num_steps \(trial layer\): set without speculative_algorithm"):
        plan_for(trial=trial_intents("a6000-1", "trial", {"speculative_algorithm": None,
                                                                  "speculative_num_steps": 2}, "trial 3"))


def test_a_trial_with_a_bad_intent_is_refused_naming_it():
    with pytest.raises(PlanError, match=r"SGLANG_DEPLOY_TRIAL.intents.speculative_num_steps: .* at least 1"):
        trial_intents("a6000-1", "SGLANG_DEPLOY_TRIAL.intents", {"speculative_num_steps": 0}, "t")


def test_no_records_changes_nothing(repo_root):
    """Without records a plan is what it was: same intents, argv and files (the goldens hold this too)."""
    plain, with_empty = plan_for(), plan_for(tuning=())
    assert plain.argv == with_empty.argv and render(plain) == render(with_empty)
    assert plain.as_dict()["tuning"] == {"record": None, "notes": []}


def test_tp_group_members_take_no_record():
    from sglang_deploy.plan.inventory_plan import plan_inventory

    member = {"sglang_model": "Qwen/Qwen3-32B", "sglang_gpus": {"model": "H100 80GB HBM3", "count": 8},
              "sglang_tp_group": "big", "sglang_intents": {"tp_size": 16}}
    hw = HardwareClass(arch="sm90", gpu_model="H100 80GB HBM3", gpu_count=8, topology="nvswitch",
                       sglang_version="0.5.23", model="Qwen/Qwen3-32B", revision=None)
    plans = plan_inventory([("n1", {}, {**member, "sglang_node_address": "10.0.0.1"}),
                            ("n2", {}, {**member, "sglang_node_address": "10.0.0.2"})],
                           tuning=[record(hw, intents={"chunked_prefill_size": 4096}, evidence={})])
    for plan in plans:
        assert not isinstance(plan, PlanError), plan
        assert plan.tuning is None and "multi-node tp group" in plan.tuning_notes[0]


# --- sglang-deploy plan ------------------------------------------------------------------------


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def inventory(tmp_path, repo_root):
    path = tmp_path / "a6000.py"
    shutil.copy(repo_root / "inventory" / "a6000.py", path)
    return path


def test_plan_reads_the_records_beside_the_inventory(inventory):
    save_record(records_path(inventory), record())
    save_record(records_path(inventory), record(dataclasses.replace(A6000, sglang_version="0.5.19")))
    code, out, err = run("plan", str(inventory), "--explain")
    assert code == 0, err
    assert ("Tuning    record measured on a6000-1 (2026-11-30, decode objective, 12 trials): the tuned layer sets "
            "chunked_prefill_size, speculative_num_draft_tokens, speculative_num_steps") in out
    assert ("Tuning    tuning record for SGLang 0.5.19 not applied: this host runs 0.5.23 (measured on a6000-1, "
            "2026-11-30)") in out
    line = next(li for li in out.splitlines() if li.strip().startswith("speculative_num_steps"))
    assert line.split()[1:3] == ["2", "tuned"] and line.endswith(STEPS_REASON)
    code, out, err = run("plan", str(inventory), "--json")
    (host,) = json.loads(out)
    assert host["tuning"]["record"]["measured_on"] == "a6000-1"
    assert host["tuning"]["record"]["intents"]["speculative_num_steps"] == 2
    assert "trials" not in host["tuning"]["record"]
    assert "--speculative-num-steps" in host["argv"]
    assert host["argv"][host["argv"].index("--speculative-num-steps") + 1] == "2"


def test_plan_explains_a_record_it_did_not_apply(inventory):
    save_record(records_path(inventory), record(dataclasses.replace(A6000, sglang_version="0.5.19")))
    code, out, _ = run("plan", str(inventory), "--explain", "--sglang-version", "0.5.23")
    assert code == 0
    assert "tuning record for SGLang 0.5.19 not applied: this host runs 0.5.23" in out
    assert " tuned " not in out
    code, out, _ = run("plan", str(inventory), "--sglang-version", "0.5.19")
    assert code == 0 and "Tuning    record measured on a6000-1" in out


def test_plan_refuses_a_malformed_record_file(inventory):
    records_path(inventory).write_text("format: 1\nrecords:\n- objective: fast\n")
    code, out, err = run("plan", str(inventory))
    assert code == 2 and out == ""
    assert err.startswith(f"error: tuning records {records_path(inventory)}: records[0].hardware: missing")


def test_plan_without_records_shows_no_tuning(repo_root):
    code, out, _ = run("plan", str(repo_root / "inventory" / "a6000.py"), "--explain")
    assert code == 0 and "Tuning" not in out and " tuned " not in out


def test_print_plan_names_the_record():
    plan = plan_for(tuning=[record()])
    out = io.StringIO()
    print_plan(plan, render(plan), True, out)
    assert "the tuned layer sets speculative_num_steps" in out.getvalue()


# --- the deploy: where the records and the trial come from -------------------------------------


def test_the_inventory_file_is_the_argument_named_like_a_group(tmp_path, monkeypatch):
    (tmp_path / "a6000.py").write_text("")
    (tmp_path / "deploy.py").write_text("")
    monkeypatch.chdir(tmp_path)
    argv = ["pyinfra", "-y", "deploy.py", "a6000.py"]
    assert inventory_file(("a6000", "canary"), ["-y", "a6000.py", "deploy.py"]) == Path("a6000.py")
    assert inventory_file(("a6000",), argv[1:]).name == "a6000.py"
    assert inventory_file(("other",), argv[1:]) is None
    assert inventory_file(("missing",), ["missing.py"]) is None, "a file that does not exist is not an inventory"
    monkeypatch.setattr("sys.argv", argv)
    assert inventory_file(("a6000",)).name == "a6000.py"


def test_the_deploy_reads_the_records_once_from_the_env_or_beside_the_inventory(tmp_path, monkeypatch):
    inv = tmp_path / "fleet.py"
    inv.write_text("")
    save_record(records_path(inv), record())
    argv = [str(inv), "deploy.py"]
    assert tuning_file(("fleet",), RunContext(), argv) == records_path(inv)
    assert records_for("a6000-1", ("fleet",), RunContext(), argv) == (record(),)
    other = tmp_path / "elsewhere.yaml"
    save_record(other, record(dataclasses.replace(A6000, gpu_count=4)))
    env = RunContext(tuning_file=str(other))
    assert tuning_file(("fleet",), env, argv) == other
    (found,) = records_for("a6000-1", ("fleet",), env, argv)
    assert found.hardware.gpu_count == 4
    assert records_for("a6000-1", ("nothing",), RunContext(), argv) == ()
    # read once per run (the same records, not a second parse) and again when the file changes
    assert records_for("a6000-2", ("fleet",), env, argv)[0] is found
    save_record(other, record(dataclasses.replace(A6000, gpu_count=8)))
    assert [r.hardware.gpu_count for r in records_for("a6000-2", ("fleet",), env, argv)] == [4, 8]


def test_a_malformed_record_file_stops_the_host_naming_it(tmp_path):
    bad = tmp_path / "bad.tuning.yaml"
    bad.write_text("format: 3\n")
    with pytest.raises(PlanError) as info:
        records_for("a6000-1", (), RunContext(tuning_file=str(bad)), [])
    assert str(info.value) == f"host a6000-1: tuning records: tuning records {bad.resolve()}: format: must be 1, got 3"


def write_trial(tmp_path, **data):
    path = tmp_path / f"trial-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps(data))
    return RunContext(trial_file=str(path))


def test_the_trial_applies_to_the_host_it_names_only(tmp_path):
    env = write_trial(tmp_path, hosts=["a6000-1"], trial=3, intents={"speculative_num_steps": 5},
                      reason="exploring steps", gate={"concurrency": [1]})
    mine = trial_for("a6000-1", env)
    assert {k: (v.value, v.reason) for k, v in mine.items()} == {
        "speculative_num_steps": (5, "tuning trial 3: exploring steps")}
    assert trial_for("a6000-2", env) == {}
    assert trial_for("a6000-1", RunContext()) == {}
    plan = plan_for(trial=mine)
    assert layer_of(plan, "speculative_num_steps") == (5, "trial")
    assert plan.intents["speculative_num_steps"].reason == "tuning trial 3: exploring steps"


def test_a_trial_file_that_cannot_be_read_stops_the_host(tmp_path):
    env = write_trial(tmp_path, hosts=["a6000-1"], trial=1, intents={"speculative_num_steps": "three"})
    with pytest.raises(PlanError, match=r"trial.intents.speculative_num_steps: .*integer"):
        trial_for("a6000-1", env)
    assert trial_for("a6000-2", env) == {}, "another host's trial is not this host's business"
    env = write_trial(tmp_path, trial=1, intents={})
    with pytest.raises(PlanError, match=r"trial-1.json: hosts: expected list, got None"):
        trial_for("a6000-1", env)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(PlanError, match="not JSON"):
        trial_for("a6000-1", RunContext(trial_file=str(broken)))


def test_a_trial_file_rewritten_for_the_next_trial_is_read_again(tmp_path):
    path = tmp_path / "trial.json"
    path.write_text(json.dumps({"hosts": ["a6000-1"], "trial": 1, "intents": {"speculative_num_steps": 2}}))
    env = RunContext(trial_file=str(path))
    assert trial_for("a6000-1", env)["speculative_num_steps"].value == 2
    assert current_trial("a6000-1", env) is current_trial("a6000-1", env), "read once while it is unchanged"
    path.write_text(json.dumps({"hosts": ["a6000-1"], "trial": 2, "intents": {"speculative_num_steps": 4, "x": 1}}))
    with pytest.raises(PlanError, match="unknown intent 'x'"):
        trial_for("a6000-1", env)
    path.write_text(json.dumps({"hosts": ["a6000-1"], "trial": 3, "intents": {"speculative_num_steps": 5},
                                "reason": "steps up"}))
    assert trial_for("a6000-1", env)["speculative_num_steps"].reason == "tuning trial 3: steps up"
