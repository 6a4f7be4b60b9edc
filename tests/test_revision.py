"""Revisions and the deploy's decisions, from host state snapshots (no host needed)."""

from __future__ import annotations

from sglang_deploy.plan.render import RenderedFiles
from sglang_deploy.lifecycle.revision import FILE_NAMES, HostState, decide, revision_id, sha256

FILES = RenderedFiles(unit="[Service]\nExecStart=/x\n", env="A=1\n", nccl_conf="NCCL_DEBUG=WARN\n")
REV = revision_id(FILES, "0.5.23")


def state(**kw):
    base = dict(systemd=True, installed_version=None, live_sha256={k: None for k in FILE_NAMES},
                staged=frozenset(), current=None, previous=None, deployed=None, enabled=False, active=False)
    base.update(kw)
    return HostState(**base)


def deployed_state(**kw):
    live = {k: sha256(getattr(FILES, k)) for k in FILE_NAMES}
    return state(**{**dict(installed_version="0.5.23", live_sha256=live, staged=frozenset({REV}), current=REV,
                            deployed=REV, enabled=True, active=True), **kw})


def test_revision_depends_on_every_file_and_the_version():
    assert len(REV) == 16
    assert revision_id(FILES, "0.5.19") != REV
    for key in ("unit", "env", "nccl_conf"):
        changed = RenderedFiles(**{**FILES.as_dict(), key: getattr(FILES, key) + "#\n"})
        assert revision_id(changed, "0.5.23") != REV


def test_first_deploy_does_everything():
    a = decide(state(), FILES, REV, "0.5.23")
    assert a.install and a.stage and a.swap == ("unit", "env", "nccl_conf") and a.daemon_reload and a.enable
    assert a.restart and a.new_current == REV and a.new_previous is None


def test_second_deploy_does_nothing():
    a = decide(deployed_state(), FILES, REV, "0.5.23")
    assert not a.changes


def test_lost_restart_is_not_lost():
    # files were swapped in, then the deploy died before the restart: the marker still says old
    a = decide(deployed_state(deployed="0000000000000000"), FILES, REV, "0.5.23")
    assert a.restart and not a.swap and not a.stage


def test_new_revision_keeps_the_previous_and_prunes_older():
    new = RenderedFiles(unit=FILES.unit + "# changed\n", env=FILES.env, nccl_conf=FILES.nccl_conf)
    rev2 = revision_id(new, "0.5.23")
    a = decide(deployed_state(staged=frozenset({REV, "old1"}), previous="old1"), new, rev2, "0.5.23")
    assert a.swap == ("unit",) and a.daemon_reload and a.restart and a.stage
    assert (a.new_current, a.new_previous) == (rev2, REV)
    assert a.prune == ("old1",)


def test_env_only_change_needs_no_daemon_reload():
    new = RenderedFiles(unit=FILES.unit, env="A=2\n", nccl_conf=FILES.nccl_conf)
    a = decide(deployed_state(), new, revision_id(new, "0.5.23"), "0.5.23")
    assert a.swap == ("env",) and not a.daemon_reload and a.restart


def test_a_stopped_service_is_started_again():
    assert decide(deployed_state(active=False), FILES, REV, "0.5.23").restart


def test_unit_written_but_never_loaded_is_reloaded():
    a = decide(deployed_state(deployed="0000000000000000", unit_needs_reload=True), FILES, REV, "0.5.23")
    assert a.daemon_reload and a.restart and not a.swap


def test_missing_service_account_is_created_even_when_all_else_is_deployed():
    a = decide(deployed_state(account=False), FILES, REV, "0.5.23")
    assert a.account and a.changes and not a.restart
    assert not decide(deployed_state(), FILES, REV, "0.5.23").account


# --- after the gate (sglang_deploy.rollout) ---------------------------------

from sglang_deploy.gate import outcomes, unit  # noqa: E402
from sglang_deploy.lifecycle import rollback_policy  # noqa: E402


def test_rollback_target_is_the_replaced_revision_with_markers_as_before():
    new = RenderedFiles(unit=FILES.unit + "# changed\n", env=FILES.env, nccl_conf=FILES.nccl_conf)
    rev2 = revision_id(new, "0.5.23")
    st = deployed_state(staged=frozenset({REV, "old1"}), previous="old1")
    plan = rollback_policy.rollback_plan(st, decide(st, new, rev2, "0.5.23"), rev2)
    assert plan == rollback_policy.RollbackPlan(target=REV, previous="old1")
    # first deploy: nothing to roll back to
    assert rollback_policy.rollback_plan(state(), decide(state(), FILES, REV, "0.5.23"), REV) is None


def test_unit_watch_sees_crash_restart_and_stop():
    first = unit.parse_unit_status("ActiveState=active\nSubState=running\nResult=success\nNRestarts=0\nMainPID=42\n")
    assert first.main_pid == 42 and unit.unit_failure(first, first) is None
    auto = unit.parse_unit_status("ActiveState=activating\nSubState=auto-restart\nResult=exit-code\nNRestarts=0\n"
                                     "MainPID=0\n")
    assert "about to restart" in unit.unit_failure(first, auto)
    again = unit.parse_unit_status("ActiveState=active\nSubState=running\nNRestarts=1\nMainPID=50\n")
    assert "restarted it 1 time" in unit.unit_failure(first, again)
    assert "failed" in unit.unit_failure(first, unit.UnitStatus("failed", "failed", "exit-code"))


def test_outcomes_and_steps():
    passed = outcomes.classify({"verdict": "pass", "rules": [{"detail": "decode 200 tok/s reaches target 100"}]})
    assert passed.passed and rollback_policy.next_step(passed, True) == rollback_policy.MARK_DEPLOYED
    slow = outcomes.classify({"verdict": "fail", "reasons": ["decode 40 tok/s is 60.0% below target 100"]})
    assert slow.kind == outcomes.FAIL and rollback_policy.next_step(slow, True) == rollback_policy.ROLLBACK
    assert rollback_policy.next_step(slow, False) == rollback_policy.STOP
    crashed = outcomes.classify({"verdict": "error", "error": {"step": "measure", "message": "stream broke"}},
                               failure="the unit failed", journal="boom\n")
    assert crashed.kind == outcomes.CRASHED and "boom" in crashed.summary
    unreachable = outcomes.classify({"verdict": "error", "error": {
        "step": "ready", "message": "the server is unreachable: nothing answered within 900 s"}})
    assert unreachable.kind == outcomes.UNREACHABLE and unreachable.summary.startswith("gate could not measure")
    assert rollback_policy.next_step(unreachable, True) == rollback_policy.KEEP_UNPROVEN
    never = outcomes.classify({"verdict": "error", "error": {
        "step": "ready", "message": "the server never became ready within 900 s (last: /health answered 503)"}})
    assert never.kind == outcomes.NOT_READY and rollback_policy.next_step(never, True) == rollback_policy.ROLLBACK
    msg = rollback_policy.failure_message("sglang", "new", slow, rollback_policy.ROLLBACK, "prev",
                                          "ready again after 1 s")
    assert "below target" in msg and "rolled back to revision prev" in msg
    assert "stopped" in rollback_policy.failure_message("sglang", "new", slow, rollback_policy.STOP, None, None)
    kept = rollback_policy.failure_message("sglang", "new", unreachable, rollback_policy.KEEP_UNPROVEN, "prev", None)
    assert "NOT marked deployed" in kept


def test_history_entry_feeds_the_baseline_only_for_measured_gates():
    report = {"verdict": "pass", "decode_tok_s": 200.0, "key": {"hardware": "2x X (sm86)"},
              "server": {"version": "0.5.23"}, "rules": []}
    gate = outcomes.history_entry("gate", "r1", outcomes.classify(report), report, {"model": "m"}, "0.5.23")
    assert gate["verdict"] == "pass" and gate["decode_tok_s"] == 200.0 and gate["revision"] == "r1"
    back = outcomes.history_entry("rollback", "r0", outcomes.Outcome(outcomes.PASS, "ready"), None, {}, "0.5.23")
    assert back["verdict"] == "ready" and back["decode_tok_s"] is None
    assert outcomes.hardware_key(2, "NVIDIA RTX A6000", "8.6") == "2x NVIDIA RTX A6000 (sm86)"
