"""`pyinfra INVENTORY deploy.py` with a tuning record beside the inventory, and with a tuning
trial: the running server gets the tuned (or trial) flags, on the host the trial names only."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_deploy.deploy.inventory import load_inventory
from sglang_deploy.plan.inventory_plan import offline_weights
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.plan.tuning_record import TuningRecord, hardware_class
from sglang_deploy.plan.tuning_record_file import records_path, save_record
from tests.conftest import ROOT, load_probe
from tests.e2e.test_deploy import HF_TOKEN, REFERENCE, boot_a6000_hosts, host_data, main_pid
from sglang_deploy.runcontext import RUN_ENV, RunContext
from sglang_deploy.runcontext import write as write_run

NAME = "e2e-tuned"  # its own host: the testbed is shared by the session's e2e modules
PORT = 31911  # unused by the other e2e modules


def data() -> dict:
    """The reference host's data (2x RTX A6000, Qwen3.6-27B), on this test's own port."""
    base = host_data(REFERENCE)
    return {**base, "sglang_intents": {**base["sglang_intents"], "port": PORT}}


@pytest.fixture(scope="module")
def host(testbed, tmp_path_factory):
    return boot_a6000_hosts(testbed, tmp_path_factory, [NAME])[NAME]


def run_deploy(testbed, host, tmp: Path,
               env_extra: dict[str, str] | None = None) -> tuple[Path, subprocess.CompletedProcess]:
    inventory = testbed.write_inventory(tmp / "fleet.py", [host], {NAME: data()}, group="gpu_fleet")
    env = {k: v for k, v in os.environ.items() if k != RUN_ENV}
    env.update({"E2E_HF_TOKEN": HF_TOKEN, **(env_extra or {})})
    result = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(inventory), "deploy.py"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return inventory, result


def running_argv(host) -> list[str]:
    cmdline = host.ssh(f"tr '\\0' '\\n' < /proc/{main_pid(host)}/cmdline").stdout.splitlines()
    return cmdline[cmdline.index("sglang.launch_server") + 1:]


def offline_plan(inventory: Path, **spec_changes):
    entry = next(h for h in load_inventory(str(inventory)) if h.name == NAME)
    spec = build_spec(NAME, entry.group_data, entry.host_data)
    return plan_host(dataclasses.replace(spec, **spec_changes), probe=load_probe("a6000x2-bridge"),
                     weights=offline_weights(spec))


def test_the_deploy_applies_the_record_beside_the_inventory_and_a_trial_for_its_host(testbed, host, tmp_path):
    inventory, _ = run_deploy(testbed, host, tmp_path)
    untuned = running_argv(host)
    assert "--chunked-prefill-size" not in untuned

    record = TuningRecord(
        hardware=hardware_class(offline_plan(inventory)), objective="decode",
        intents={"chunked_prefill_size": 4096, "speculative_num_steps": 2, "speculative_num_draft_tokens": 3},
        evidence={"speculative_num_steps": {"value": 2, "objective": 61.2,
                                            "runner_up": {"value": 3, "objective": 57.1}}},
        measured_on=NAME, measured_at="2026-11-30T20:00:00+00:00", trial_count=3, tool_version="0.1.0")
    save_record(records_path(inventory), record)
    run_deploy(testbed, host, tmp_path)
    tuned = running_argv(host)
    assert tuned[tuned.index("--chunked-prefill-size") + 1] == "4096"
    assert tuned[tuned.index("--speculative-num-steps") + 1] == "2"
    assert tuned[tuned.index("--port") + 1] == str(PORT)

    # A trial for another host changes nothing here: no restart.
    pid = main_pid(host)
    other = tmp_path / "trial-other.json"
    other.write_text(json.dumps({"hosts": ["someone-else"], "trial": 1, "intents": {"chunked_prefill_size": 2048},
                                 "reason": "r", "gate": {}}))
    _, result = run_deploy(testbed, host, tmp_path,
                           write_run(RunContext(trial_file=str(other)), str(tmp_path / "run-other.json")))
    assert main_pid(host) == pid and "Restart the service" not in result.stdout

    # A trial for this host is its top layer.
    mine = tmp_path / "trial-mine.json"
    mine.write_text(json.dumps({"hosts": [NAME], "trial": 2, "intents": {"chunked_prefill_size": 2048},
                                "reason": "smaller chunks", "gate": {}}))
    run_deploy(testbed, host, tmp_path, write_run(RunContext(trial_file=str(mine)), str(tmp_path / "run-mine.json")))
    trial = running_argv(host)
    assert trial[trial.index("--chunked-prefill-size") + 1] == "2048"
    assert trial[trial.index("--speculative-num-steps") + 1] == "2", "the record still sets what the trial does not"
