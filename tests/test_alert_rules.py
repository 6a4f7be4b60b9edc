"""The shipped Prometheus alert rules (monitoring/prometheus/): Prometheus's own `promtool` checks
them and runs their unit tests (series that fire each alert, and series that must not); a rule
made wrong is caught by those unit tests; every metric the rules and their tests name is one the
watch writes (sglang_deploy/deploy/host/watch.py, the contract of docs/monitoring.md); every
alert has its runbook section in docs/monitoring.md.

promtool comes with Debian's `prometheus` package (.ci/run installs it). Without it the promtool
tests are skipped with the reason, except when ``CI`` is set: there they fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sglang_deploy.hostrules import metrics as watch  # the check's metrics (its contract with the rules)
from tests.conftest import ROOT

PROMETHEUS = ROOT / "monitoring" / "prometheus"
RULES = PROMETHEUS / "sglang-deploy-alerts.yml"
UNIT_TESTS = PROMETHEUS / "sglang-deploy-alerts.test.yml"
DOC = ROOT / "docs" / "monitoring.md"
METRIC_NAME = re.compile(r"\bsglang_deploy_[a-z0-9_]+")


def promtool() -> str:
    path = shutil.which("promtool")
    if path:
        return path
    reason = "promtool not found (Debian package prometheus)"
    if os.environ.get("CI"):
        pytest.fail(reason + " (CI is set, so this fails instead of skipping; see .ci/run)", pytrace=False)
    pytest.skip(reason)


def run_promtool(*args: str | Path, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120)


def rules() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def rule_tests() -> list[dict]:
    return yaml.safe_load(UNIT_TESTS.read_text())["tests"]


def test_promtool_accepts_the_rules():
    result = run_promtool("check", "rules", RULES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass():
    result = run_promtool("test", "rules", UNIT_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


#: Rules made wrong on purpose, each in a way one of the unit tests must notice: what it breaks -> (old, new).
MISTAKES = {
    "at exactly the tolerance it fires": ("            < on (instance, job, service)\n",
                                          "            <= on (instance, job, service)\n"),
    "a counter reset to zero still fires": ("expr: sglang_deploy_gpu_ecc_uncorrected_errors_total > 0\n",
                                            "expr: sglang_deploy_gpu_ecc_uncorrected_errors_total >= 0\n"),
    "the driver's thermal slowdown is no slowdown": ("|hw_power_brake_slowdown|sw_thermal_slowdown\"}",
                                                     "|hw_power_brake_slowdown\"}"),
    "a down service also pages as a failing check": (
        "          unless on (instance, job, service) sglang_deploy_service_up == 0\n", ""),
    "a skip no longer keeps staleness quiet": ("            unless on (instance, job, service)\n            time()",
                                               "            and on (instance, job, service)\n            time()"),
}


@pytest.mark.parametrize("what", MISTAKES)
def test_a_rule_made_wrong_fails_the_unit_tests(tmp_path, what):
    """The unit tests can fail: each of these changes to the rules breaks at least one of them."""
    old, new = MISTAKES[what]
    text = RULES.read_text()
    assert text.count(old) == 1, old
    (tmp_path / RULES.name).write_text(text.replace(old, new))
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    assert run_promtool("check", "rules", RULES.name, cwd=tmp_path).returncode == 0  # still a valid rule
    result = run_promtool("test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert result.returncode != 0, f"{what}: the unit tests did not notice\n{result.stdout}"


def test_every_rule_fires_in_a_unit_test_and_every_alert_has_a_quiet_case():
    fired: set[tuple[str, tuple]] = set()
    quiet: set[str] = set()
    for case in rule_tests():
        for check in case["alert_rule_test"]:
            if not check.get("exp_alerts"):
                quiet.add(check["alertname"])
            for alert in check.get("exp_alerts") or []:
                labels = alert["exp_labels"]
                fired.add((check["alertname"], (labels["severity"], labels.get("problem"))))
    for rule in rules():
        key = (rule["alert"], (rule["labels"]["severity"], rule["labels"].get("problem")))
        assert key in fired, f"no unit test fires {key}"
        assert rule["alert"] in quiet, f"no unit test where {rule['alert']} must stay quiet"


def test_every_metric_named_is_one_the_watch_writes():
    """Names in the expressions, the annotations' queries and the unit tests' series: a misspelt
    name would make an alert that can never fire, and promtool cannot see that."""
    written = set(watch.METRICS)
    in_rules = set(METRIC_NAME.findall(RULES.read_text()))
    in_tests = {METRIC_NAME.match(case_series["series"]).group(0)
                for case in rule_tests() for case_series in case["input_series"]}
    assert in_rules and in_tests
    assert in_rules <= written, f"the rules name metrics the watch never writes: {sorted(in_rules - written)}"
    assert in_tests <= written, f"the unit tests feed metrics the watch never writes: {sorted(in_tests - written)}"
    # the docs' table is the same contract
    in_doc = set(re.findall(r"^\| `(sglang_deploy_[a-z0-9_]+)`", DOC.read_text(), flags=re.M))
    assert in_doc == written, f"docs/monitoring.md's table differs from the watch: {sorted(in_doc ^ written)}"


def test_every_label_the_rules_match_on_is_one_the_watch_writes():
    """The clock reasons the slowdown rule selects are reasons the watch writes, always (0 or 1)."""
    slowdown = next(r for r in rules() if r["labels"].get("problem") == "hw_slowdown")
    reasons = re.search(r'reason=~"([a-z_|]+)"', slowdown["expr"]).group(1).split("|")
    assert set(reasons) <= set(watch.CLOCK_REASONS)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a markdown heading."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_has_severity_summary_and_a_runbook_section():
    anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", DOC.read_text(), flags=re.M)}
    for rule in rules():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"], rule["alert"]
        assert "{{ $labels.instance }}" in notes["summary"] and "{{ $labels.service }}" in notes["description"]
        page, _, anchor = notes["runbook"].partition("#")
        assert page == "docs/monitoring.md" and anchor == rule["alert"].lower(), notes["runbook"]
        assert anchor in anchors, f"docs/monitoring.md has no section {rule['alert']}"


def test_the_gpu_alerts_judge_by_the_same_rules_as_status_and_the_check():
    """One judge per GPU fact: each GPU alert's expression is the one sglang_deploy/hostrules/gpu.py
    gives its kind (ALERT_EXPRESSIONS, built from FOREIGN_MEMORY_BYTES and SLOWDOWN_REASONS, which
    `status` and the continuous check use); a threshold changed on one side alone fails here."""
    from sglang_deploy.hostrules import gpu as gpu_rules

    def expr(rule: dict) -> str:
        return " ".join(rule["expr"].split())

    by_kind = {r["labels"]["problem"]: expr(r) for r in rules() if r.get("alert") == "SGLangDeployGpuErrors"}
    by_kind["foreign_memory"] = next(expr(r) for r in rules() if r.get("alert") == "SGLangDeployGpuForeignMemory")
    assert by_kind == gpu_rules.ALERT_EXPRESSIONS
    # and every kind of problem the rules find has its alert
    health = {"gpus": [{"index": 0, "ecc": {"uncorrected": 1, "corrected": 0},
                        "retired_pages": {"single_bit": 0, "double_bit": 0, "pending": True},
                        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": True, "failure": True},
                        "clocks_event_reasons": list(gpu_rules.SLOWDOWN_REASONS), "foreign_processes": [],
                        "foreign_memory_bytes": gpu_rules.FOREIGN_MEMORY_BYTES + 1, "xid": {"count": 1, "last": 79}}]}
    kinds = {f.kind for f in gpu_rules.problems(gpu_rules.findings(health))}
    assert kinds == set(gpu_rules.ALERT_EXPRESSIONS)
