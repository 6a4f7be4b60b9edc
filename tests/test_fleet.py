"""The rollout's plan from an inventory, before anything runs: waves, canary, TP groups,
settings from inventory data, --limit, and bad input (exit 2, nothing touched)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from sglang_deploy.commands.rollout import RolloutError, RolloutOptions, plan_rollout, rollout

ROOT = Path(__file__).resolve().parent.parent


def names(waves):
    return [list(w.hosts) for w in waves]


def test_shipped_fleet_gateway_then_canary_first_and_the_tp_group_in_one_wave():
    hosts, waves, max_fail = plan_rollout(RolloutOptions(str(ROOT / "inventory/fleet.py")))
    assert [h.name for h in hosts][:2] == ["gw-01", "a6000-01"] and max_fail == 0
    plan = names(waves)
    assert plan[0] == ["gw-01"] and waves[0].reason == "a gateway host, before the workers; one gateway host at a time"
    assert plan[1] == ["a6000-01"] and waves[1].reason == "canary group"
    assert [w.number for w in waves] == list(range(1, len(waves) + 1))
    tp = next(w for w in plan if "h100-tp16-a" in w)
    assert "h100-tp16-b" in tp  # never split
    assert sorted(h for w in plan for h in w) == sorted(h.name for h in hosts)


def write(tmp_path: Path, body: str) -> str:
    path = tmp_path / "inv.py"
    path.write_text(body)
    return str(path)


BASE = '{"sglang_model": "Qwen/Qwen3.6-27B", "sglang_gpus": {"model": "RTX A6000", "count": 2}}'


def test_settings_from_inventory_data_and_flags_win(tmp_path):
    inv = write(tmp_path, f"fleet = ([(f'h{{i}}', {BASE}) for i in range(1, 7)], "
                          "{'sglang_rollout': {'waves': '2,50%', 'max_fail': 1}})\n")
    _, waves, max_fail = plan_rollout(RolloutOptions(inv))
    assert names(waves) == [["h1", "h2"], ["h3", "h4", "h5"], ["h6"]] and max_fail == 1
    _, waves, max_fail = plan_rollout(RolloutOptions(inv, waves="3", max_fail=0))
    assert names(waves) == [["h1", "h2", "h3"], ["h4", "h5", "h6"]] and max_fail == 0


def test_limit_takes_names_groups_and_globs(tmp_path):
    inv = write(tmp_path, f"east = [('e1', {BASE}), ('e2', {BASE})]\nwest = [('w1', {BASE}), ('w2', {BASE})]\n")
    hosts, _, _ = plan_rollout(RolloutOptions(inv, limit=["west"]))
    assert [h.name for h in hosts] == ["w1", "w2"]
    hosts, _, _ = plan_rollout(RolloutOptions(inv, limit=["e*,w2"]))
    assert [h.name for h in hosts] == ["e1", "e2", "w2"]
    with pytest.raises(RolloutError, match="matches no host"):
        plan_rollout(RolloutOptions(inv, limit=["nope"]))


def test_a_tp_group_is_limited_whole_or_not_at_all():
    with pytest.raises(RolloutError, match="TP group qwen3-235b-tp16 .* h100-tp16-b is a member"):
        plan_rollout(RolloutOptions(str(ROOT / "inventory/fleet.py"), limit=["h100-tp16-a"]))
    hosts, waves, _ = plan_rollout(RolloutOptions(str(ROOT / "inventory/fleet.py"), limit=["h100_tp16"]))
    assert names(waves) == [["h100-tp16-a", "h100-tp16-b"]]


@pytest.mark.parametrize("body, opts, message", [
    ("fleet = [('a', {**B, 'sglang_rollout': {'waves': '1'}}), ('b', {**B, 'sglang_rollout': {'waves': '2'}})]\n",
     {}, "sglang_rollout.waves: hosts disagree"),
    ("fleet = [('a', {**B, 'sglang_rollout': {'wave': '1'}})]\n", {}, "sglang_rollout.wave: unknown setting"),
    ("fleet = [('a', {**B, 'sglang_rollout': {'waves': '0%'}})]\n", {}, "sglang_rollout.waves: 0% is not"),
    ("fleet = [('a', B)]\n", {"max_fail": -1}, "max_fail: must be a whole number"),
    ("fleet = [('a', B)]\n", {"waves": "x"}, "--waves: 'x' is neither"),
])
def test_bad_input_is_exit_2_before_anything_runs(tmp_path, body, opts, message):
    inv = write(tmp_path, f"B = {BASE}\n" + body)
    out, err = io.StringIO(), io.StringIO()
    code, summary = rollout(RolloutOptions(inv, **opts), out, err)
    assert code == 2 and message in err.getvalue(), err.getvalue()
    assert out.getvalue() == "" and summary.hosts == []


TWO_GROUPS = f"east = [('e1', {BASE}), ('e2', {BASE})]\nwest = [('w1', {BASE}), ('w2', {BASE})]\n"


@pytest.mark.parametrize("limit, named", [
    (["e1,nope"], "nope"),  # a misspelt host next to a real one is not dropped silently
    (["west", "westt"], "westt"),  # a misspelt group
    (["e1,zz*"], "zz*"),  # a glob that matches nothing
    (["nope,e9"], "nope, e9"),
])
def test_limit_naming_what_the_inventory_lacks_is_exit_2_naming_it(tmp_path, limit, named):
    inv = write(tmp_path, TWO_GROUPS)
    with pytest.raises(RolloutError, match=f"--limit {re.escape(named)}: matches no host or group"):
        plan_rollout(RolloutOptions(inv, limit=limit))
    out, err = io.StringIO(), io.StringIO()
    code, summary = rollout(RolloutOptions(inv, limit=limit), out, err)
    assert code == 2 and named in err.getvalue() and out.getvalue() == "" and summary.hosts == []


@pytest.mark.parametrize("limit", [[""], [",, ,"]])
def test_an_empty_limit_is_refused_not_read_as_every_host(tmp_path, limit):
    with pytest.raises(RolloutError, match="--limit .*names no host or group"):
        plan_rollout(RolloutOptions(write(tmp_path, TWO_GROUPS), limit=limit))


def _json_paths(tmp_path: Path) -> dict[str, tuple[str, str]]:
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    return {
        "missing folder": (str(tmp_path / "no" / "such" / "s.json"), "cannot write"),
        "a directory": (str(tmp_path / "adir"), "is a directory"),
        "under a file": (str(tmp_path / "afile" / "s.json"), "cannot write"),
        "empty": ("", "empty file name"),
        "the inventory": (str(tmp_path / "inv.py"), "is the inventory itself"),
    }


@pytest.mark.parametrize("case", ["missing folder", "a directory", "under a file", "empty", "the inventory"])
def test_an_unwritable_json_path_is_exit_2_before_any_wave(tmp_path, case):
    inv = write(tmp_path, TWO_GROUPS)
    path, message = _json_paths(tmp_path)[case]
    out, err = io.StringIO(), io.StringIO()
    code, summary = rollout(RolloutOptions(inv, json_path=path), out, err)
    assert code == 2 and message in err.getvalue() and "--json" in err.getvalue(), err.getvalue()
    assert out.getvalue() == "" and summary.hosts == []
    assert Path(inv).read_text() == TWO_GROUPS


def test_a_writable_json_path_is_probed_without_leaving_a_file(tmp_path):
    inv = write(tmp_path, TWO_GROUPS)
    path = tmp_path / "summary.json"
    plan_rollout(RolloutOptions(inv, json_path=str(path)))
    assert not path.exists()
    path.write_text("old")
    plan_rollout(RolloutOptions(inv, json_path=str(path)))
    assert path.read_text() == "old"


# --- each host's result record, from the host's state before the deploy -------------------

def _record(tmp_path: Path, monkeypatch, *, current: str | None, previous: str | None, deployed: str | None,
            active: bool = True, outcome: str | None = None, step: str | None = None,
            rollback_ok: bool | None = None) -> dict:
    """The record sglang_deploy/deploy/results.py writes for a host in this state, deploying revision NEW."""
    import json
    from types import SimpleNamespace

    from sglang_deploy.deploy.results import record_result
    from sglang_deploy.gate import outcomes
    from sglang_deploy.lifecycle import rollback_policy
    from sglang_deploy.lifecycle.revision import FILE_NAMES, HostState, decide, sha256

    live = {k: sha256(getattr(FILES, k)) if current == NEW else "other" for k in FILE_NAMES}
    state = HostState(systemd=True, installed_version="0.5.23", live_sha256=live,
                      staged=frozenset(r for r in (current, previous, deployed) if r), current=current,
                      previous=previous, deployed=deployed, enabled=True, active=active)
    actions = decide(state, FILES, NEW, "0.5.23")
    prepared = SimpleNamespace(state=state, actions=actions, revision=NEW,
                               rollback=rollback_policy.rollback_plan(state, actions, NEW))
    gate = SimpleNamespace(outcome=outcomes.Outcome(outcome, "gate said so") if outcome else None, step=step,
                           rollback_ok=rollback_ok, report=None, downtime=None)
    ctx = SimpleNamespace(host=SimpleNamespace(name="h1"), prepared=prepared, gate=gate, tp=None, error=None,
                          ok=True, replica=0, replicas=1)
    out = tmp_path / "results.jsonl"
    use_results_file(monkeypatch, out)
    record_result(ctx)
    return json.loads(out.read_text().splitlines()[-1])


def use_results_file(monkeypatch, path: Path) -> None:
    """The run context a rollout hands each of its pyinfra runs (sglang_deploy/runcontext.py), naming ``path``."""
    from sglang_deploy import runcontext

    env = runcontext.write(runcontext.RunContext(results_file=str(path)), str(path.with_suffix(".run.json")))
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def _files():
    from sglang_deploy.plan.render import RenderedFiles
    from sglang_deploy.lifecycle.revision import revision_id

    files = RenderedFiles(unit="[Service]\nExecStart=/x\n", env="A=1\n", nccl_conf="NCCL_DEBUG=WARN\n")
    return files, revision_id(files, "0.5.23")


FILES, NEW = _files()
OLD, OLDER = "0ld0ld0ld0ld0ld0", "01de401de401de40"


def test_an_unchanged_host_ran_the_new_revision_before_and_after(tmp_path, monkeypatch):
    # already deployed, with a previous revision staged (the rollback target): that
    # target is not what the host ran
    rec = _record(tmp_path, monkeypatch, current=NEW, previous=OLD, deployed=NEW)
    assert rec["result"] == "unchanged"
    assert rec["old_revision"] == rec["new_revision"] == rec["running_revision"] == NEW


def test_a_passed_host_ran_its_current_revision_before(tmp_path, monkeypatch):
    rec = _record(tmp_path, monkeypatch, current=OLD, previous=OLDER, deployed=OLD, outcome="pass",
                  step="mark-deployed")
    assert rec["result"] == "passed"
    assert (rec["old_revision"], rec["new_revision"], rec["running_revision"]) == (OLD, NEW, NEW)


def test_a_rolled_back_host_runs_the_rollback_target(tmp_path, monkeypatch):
    rec = _record(tmp_path, monkeypatch, current=OLD, previous=OLDER, deployed=OLD, outcome="fail",
                  step="rollback", rollback_ok=True)
    assert rec["result"] == "rolled back"
    assert (rec["old_revision"], rec["new_revision"], rec["running_revision"]) == (OLD, NEW, OLD)


def test_a_host_that_ran_the_new_revision_unproven_rolls_back_to_the_previous_one(tmp_path, monkeypatch):
    # the new revision was left running unproven by an earlier deploy (not marked deployed):
    # it is restarted and gated again; a failure rolls back to the previous revision
    rec = _record(tmp_path, monkeypatch, current=NEW, previous=OLD, deployed=OLD, outcome="fail",
                  step="rollback", rollback_ok=True)
    assert rec["result"] == "rolled back"
    assert (rec["old_revision"], rec["new_revision"], rec["running_revision"]) == (NEW, NEW, OLD)


def test_a_first_deploy_ran_nothing_before(tmp_path, monkeypatch):
    rec = _record(tmp_path, monkeypatch, current=None, previous=None, deployed=None, active=False,
                  outcome="pass", step="mark-deployed")
    assert (rec["result"], rec["old_revision"], rec["running_revision"]) == ("passed", None, NEW)


# --- the rollout's end, with the waves' pyinfra runs stood in for ---------------------------

@pytest.mark.parametrize("failing, max_fail, code, completed, halted", [
    ({"h4"}, 0, 1, True, None),  # over the budget in the last wave: nothing left to halt
    ({"h2"}, 0, 1, False, "wave 2 had 1 failure(s), more than --max-fail 0: h2; later waves not started"),
    ({"h4"}, 1, 3, True, None),  # within the budget
    (set(), 0, 0, True, None),
])
def test_how_a_rollout_ends(tmp_path, monkeypatch, failing, max_fail, code, completed, halted):
    import sglang_deploy.commands.rollout as fleet

    inv = write(tmp_path, f"fleet = [(f'h{{i}}', {BASE}) for i in range(1, 5)]\n")
    ran: list[tuple[str, ...]] = []

    def fake_run_wave(opts, wave, out, total):
        ran.append(wave.hosts)
        records = {h: {"host": h, "result": "rolled back" if h in failing else "passed"} for h in wave.hosts}
        return fleet.WaveRun(wave, records, 0, 0.1, {})

    monkeypatch.setattr(fleet, "run_wave", fake_run_wave)
    out, err = io.StringIO(), io.StringIO()
    got, summary = rollout(RolloutOptions(inv, waves="1,2", max_fail=max_fail, json_path=str(tmp_path / "s.json")),
                           out, err)
    doc = __import__("json").loads((tmp_path / "s.json").read_text())
    assert (got, doc["completed"], doc["halted"]) == (code, completed, halted), out.getvalue()
    last_over = completed and bool(failing) and len(failing) > max_fail
    assert bool(doc["over_budget"]) == (len(failing) > max_fail)
    assert ("completed with failures beyond the budget in the last wave" in out.getvalue()) == last_over
    assert ("HALTED" in out.getvalue()) == (not completed)
    assert len(ran) == (2 if halted else 3)


GATEWAY_FLEET = (
    "sglang_gateways = [('gw', {'sglang_gateway': {'port': 30000}})]\n"
    f"fleet = [(f'h{{i}}', {{**{BASE}, 'sglang_gateways': ['gw']}}) for i in range(1, 6)]\n"
)


@pytest.mark.parametrize("max_unavailable, steps", [
    (None, [("h2",), ("h3",), ("h4",), ("h5",)]),  # the default: one of the gateway's workers at a time
    ("2", [("h2", "h3"), ("h4", "h5")]),
    ("40%", [("h2", "h3"), ("h4", "h5")]),  # 40% of its 5 workers
    ("100%", [("h2", "h3", "h4", "h5")]),
])
def test_a_wave_runs_in_steps_that_keep_each_gateway_to_max_unavailable(tmp_path, monkeypatch, max_unavailable,
                                                                        steps):
    import sglang_deploy.commands.rollout as fleet

    inv = write(tmp_path, GATEWAY_FLEET)
    ran: list[tuple[str, ...]] = []

    def fake_run_wave(opts, wave, out, total):
        ran.append(wave.hosts)
        return fleet.WaveRun(wave, {h: {"host": h, "result": "passed"} for h in wave.hosts}, 0, 0.1, {})

    monkeypatch.setattr(fleet, "run_wave", fake_run_wave)
    out = io.StringIO()
    code, summary = rollout(RolloutOptions(inv, waves="1,4", max_unavailable=max_unavailable), out, io.StringIO())
    assert code == 0, out.getvalue()
    # the gateway host alone first, then the canary, then the second wave in steps
    assert ran == [("gw",), ("h1",), *steps], out.getvalue()
    if len(steps) > 1:
        assert f"in {len(steps)} steps" in out.getvalue()


def test_a_failed_step_stops_the_wave_before_its_next_step(tmp_path, monkeypatch):
    import sglang_deploy.commands.rollout as fleet

    inv = write(tmp_path, GATEWAY_FLEET)
    ran: list[tuple[str, ...]] = []

    def fake_run_wave(opts, wave, out, total):
        ran.append(wave.hosts)
        return fleet.WaveRun(wave, {h: {"host": h, "result": "rolled back" if h == "h2" else "passed"}
                                    for h in wave.hosts}, 0, 0.1, {})

    monkeypatch.setattr(fleet, "run_wave", fake_run_wave)
    code, summary = rollout(RolloutOptions(inv, waves="1,4"), io.StringIO(), io.StringIO())
    assert code == 1 and ran == [("gw",), ("h1",), ("h2",)]
    assert {r["host"]: r["result"] for r in summary.as_dict()["hosts"]}["h3"] == "not reached"


def test_a_bad_max_unavailable_is_exit_2_naming_it(tmp_path):
    err = io.StringIO()
    code, _ = rollout(RolloutOptions(write(tmp_path, GATEWAY_FLEET), max_unavailable="0"), io.StringIO(), err)
    assert code == 2 and "--max-unavailable" in err.getvalue(), err.getvalue()


# --- a gateway host's record (sglang_deploy/deploy/gateway.py writes it on every path) ------

GW_NEW, GW_OLD = "9a7e9a7e9a7e9a7e", "0a7e0a7e0a7e0a7e"


@pytest.mark.parametrize("kwargs, result, running", [
    (dict(restarted=False), "unchanged", GW_NEW),
    (dict(restarted=True, gated="gateway http://gw:30000: 4 worker(s) listed, 4 serving"), "passed", GW_NEW),
    (dict(restarted=True, why="workers that answer but are not listed: http://w1:30000", rolled_back=True),
     "rolled back", GW_OLD),
    (dict(restarted=True, why="did not answer as ready within 60 s", rolled_back=False),
     "failed to roll back", GW_OLD),
    # no previous revision: the new one stays live, unmarked, and the host failed
    (dict(restarted=True, why="did not answer as ready within 60 s"), "failed", GW_NEW),
])
def test_a_gateway_hosts_record_is_counted_like_any_hosts(kwargs, result, running):
    from sglang_deploy.lifecycle.rollback_policy import gateway_result, host_records

    old = GW_NEW if not kwargs["restarted"] else GW_OLD
    rec = gateway_result("gw", old_revision=old, new_revision=GW_NEW, **kwargs)
    assert (rec["result"], rec["running_revision"], rec["new_revision"]) == (result, running, GW_NEW)
    if "why" in kwargs:
        assert kwargs["why"] in rec["summary"]
    if "gated" in kwargs:
        assert rec["summary"] == kwargs["gated"]
    # the rollout's reading (host_records, then the summary's row) keeps it
    from sglang_deploy.waves import host_row
    row = host_row(1, "gw", host_records([rec])["gw"])
    assert row["result"] == result and row["wave"] == 1


def test_a_gateway_host_that_cannot_be_planned_records_why():
    from sglang_deploy.lifecycle.rollback_policy import gateway_result

    rec = gateway_result("gw", old_revision=None, new_revision=None, restarted=False,
                         error="[gw] sglang_gateway.port: must be 1-65535")
    assert rec["result"] == "failed" and rec["summary"] == "[gw] sglang_gateway.port: must be 1-65535"


def test_a_rollout_whose_gateway_host_wrote_its_record_goes_on_to_its_workers(tmp_path, monkeypatch):
    """The wave runner reads the records the deploy wrote: the gateway's wave (its own record, as
    deploy.gateway writes it, unchanged) passes and the workers' waves follow."""
    import json

    import sglang_deploy.commands.rollout as fleet
    from sglang_deploy.deploy.results import append_record
    from sglang_deploy.lifecycle.rollback_policy import gateway_result, host_result

    inv = write(tmp_path, GATEWAY_FLEET)
    ran: list[tuple[str, ...]] = []

    def fake_run_wave(opts, wave, out, total):
        ran.append(wave.hosts)
        path = tmp_path / f"wave{len(ran)}.jsonl"
        use_results_file(monkeypatch, path)
        for h in wave.hosts:
            append_record(gateway_result(h, old_revision=GW_NEW, new_revision=GW_NEW, restarted=False) if h == "gw"
                          else host_result(h, old_revision=OLD, new_revision=NEW, restarted=False))
        records = fleet.host_records(json.loads(line) for line in path.read_text().splitlines())
        return fleet.WaveRun(wave, records, 0, 0.1, {})

    monkeypatch.setattr(fleet, "run_wave", fake_run_wave)
    out = io.StringIO()
    code, summary = rollout(RolloutOptions(inv, waves="1,4"), out, io.StringIO())
    assert code == 0, out.getvalue()
    assert ran == [("gw",), ("h1",), ("h2",), ("h3",), ("h4",), ("h5",)]
    assert {r["host"]: r["result"] for r in summary.as_dict()["hosts"]} == {
        "gw": "unchanged", **{f"h{i}": "unchanged" for i in range(1, 6)}}
