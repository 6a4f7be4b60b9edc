"""The rollout's plan from an inventory, before anything runs: waves, canary, TP groups,
settings from inventory data, --limit, and bad input (exit 2, nothing touched)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from roles.fleet import RolloutError, RolloutOptions, plan_rollout, rollout

ROOT = Path(__file__).resolve().parent.parent


def names(waves):
    return [list(w.hosts) for w in waves]


def test_shipped_fleet_canary_first_and_the_tp_group_in_one_wave():
    hosts, waves, max_fail = plan_rollout(RolloutOptions(str(ROOT / "inventory/fleet.py")))
    assert [h.name for h in hosts][:1] == ["a6000-01"] and max_fail == 0
    plan = names(waves)
    assert plan[0] == ["a6000-01"] and waves[0].reason == "canary group"
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
