"""`sglang-deploy tune` end to end on a throwaway host: every trial is the real deploy over
SSH to real systemd, the server is the simulated SGLang with a planted performance model
(sglang_deploy/simulator/sglang_server, behaviour key ``performance``).

Planted: MTP at 4 steps is the fastest single stream (62 tok/s vs 56 at 3 steps), 5 steps
crashes two seconds after start, and a memory fraction of 0.95 runs out of memory while
SGLang captures its CUDA graphs. The tuner must find 4 steps at 0.88, record both failures
with their cause, and leave the host on the revision it ran before, byte for byte and gated
again; interrupted, it must do the same; with --apply it deploys the winner.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_deploy import HF_TOKEN, REFERENCE, ROOT, boot_a6000_hosts, deploy, host_data
from tests.e2e.test_gate_deploy import history, marker
from sglang_deploy.simulator.testbed import Testbed, TestHost
from tests.e2e.conftest import NOT_ABOUT_SPEED

NAME = "e2e-tune"
PORT = 31901
LIVE = ("etc/systemd/system/sglang.service", "etc/sglang/sglang.env", "etc/nccl.conf")
FAST_GATE = {"repeats": 2, "max_tokens": 64, "ready_timeout_s": 120, **NOT_ABOUT_SPEED}
#: The planted model (sglang_deploy/simulator/sglang_server/src/sglang/_sim/perf.py): with these
#: numbers expected() gives 47.2 / 56.2 / 62.3 / 65.8 tok/s at 2 / 3 / 4 / 5 MTP steps (top-k 1),
#: and 5 steps is planted to crash.
PERFORMANCE = {
    "decode_tok_s": 20.0, "accept_alpha": 0.95, "accept_decay": 0.95, "draft_step_cost": 0.02,
    "verify_token_cost": 0.05, "weights_fraction": 0.552, "kv_tokens_per_fraction": 1000000,
    "oom_above_mem_fraction": 0.93, "crash_when": [{"speculative_num_steps": 5}], "crash_after_s": 2,
}
SIM = {"startup_delay_s": 0.5, "architectures": ["Qwen3_5ForConditionalGeneration"], "performance": PERFORMANCE}
#: MTP steps and the memory fraction only (an empty list takes a setting out of the search; the
#: layout too: 2x A6000 accepts TP 2 and TP 1 x DP 2, and with it in, --apply's two-value search ran
#: 16 trials where 5 prove the point; the layout's search is tests/test_tune_layout.py's).
SPACE = {"tp_size": [], "speculative_num_steps": [2, 3, 4, 5], "speculative_eagle_topk": [1],
         "speculative_algorithm": [], "speculative_num_draft_tokens": [], "mem_fraction_static": [0.88, 0.95],
         "prefill_cuda_graph": [],
         "custom_all_reduce": [], "cuda_graph_max_bs_decode": [], "max_running_requests": [],
         "chunked_prefill_size": []}
ONLY = {**{k: [] for k in SPACE if k != "speculative_num_steps"}, "speculative_eagle_topk": [1]}


@pytest.fixture(scope="module")
def tune_host(testbed: Testbed, tmp_path_factory) -> TestHost:
    def sim(name: str, root: Path) -> None:
        (root / "etc/sglang-sim.json").write_text(json.dumps(SIM))

    return boot_a6000_hosts(testbed, tmp_path_factory, [NAME], extra=sim)[NAME]


def data() -> dict:
    base = host_data(REFERENCE)
    base["sglang_intents"] = {**base["sglang_intents"], "port": PORT, "host": "0.0.0.0"}
    return {**base, "sglang_target_tok_s": 30.0, "sglang_gate": FAST_GATE}


def live(host: TestHost) -> dict[str, bytes]:
    return {p: (host.root / p).read_bytes() for p in LIVE}


def fresh_start(testbed: Testbed, host: TestHost, tmp: Path) -> tuple[Path, str, dict[str, bytes]]:
    """The inventory deployed and gated (the start every tune needs); no tuning record yet."""
    result = deploy(testbed, {NAME: host}, tmp, {NAME: data()})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    inventory = tmp / "inventory.py"
    rev = marker(host, "current")
    assert rev and marker(host, "deployed") == rev
    return inventory, rev, live(host)


def tune(inventory: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "sglang_deploy.commands.cli", "tune", str(inventory), "--host", NAME, *args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "E2E_HF_TOKEN": HF_TOKEN})


def test_tune_finds_the_planted_best_records_failures_and_returns_the_host(testbed, tune_host, tmp_path):
    inventory, original, before = fresh_start(testbed, tune_host, tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    out = tmp_path / "tune.json"
    t0 = time.monotonic()
    result = tune(inventory, "--space", str(space), "--budget", "12", "--json", str(out))
    elapsed = time.monotonic() - t0
    log = result.stdout[-6000:] + result.stderr[-3000:]
    assert result.returncode == 0, log
    summary = json.loads(out.read_text())
    best = summary["best"]["config"]
    assert best["speculative_num_steps"] == 4 and best["mem_fraction_static"] == 0.88, log

    rows = summary["trials"]
    oom = [r for r in rows if r["config"].get("mem_fraction_static") == 0.95]
    crash = [r for r in rows if r["config"].get("speculative_num_steps") == 5]
    assert oom and all(r["status"] == "infeasible" and "out of GPU memory" in r["cause"] for r in oom), log
    assert crash and all(r["status"] == "infeasible" and r["cause"].startswith("crashed") for r in crash), log
    ok = {r["config"]["speculative_num_steps"]: r["objective"] for r in rows
          if r["status"] == "ok" and r["config"]["mem_fraction_static"] == 0.88}
    assert ok[4] > ok[3], ok  # the start (3 steps) and the planted best; 2 steps only if the search went there
    assert ok.get(2, 0) < ok[3], ok

    # Back on the revision it ran, byte for byte, and gated again (a gate line of that revision,
    # after the trials); no trial wrote the host's history.
    assert marker(tune_host, "current") == original and marker(tune_host, "deployed") == original
    assert live(tune_host) == before
    entries = history(tune_host)
    assert entries[-1]["kind"] == "gate" and entries[-1]["revision"] == original and entries[-1]["verdict"] == "pass"
    assert {e["revision"] for e in entries if e["kind"] == "gate"} == {original}
    assert summary["restored"] is True

    records = yaml.safe_load((tmp_path / "inventory.tuning.yaml").read_text())
    (rec,) = records["records"]
    assert rec["intents"]["speculative_num_steps"] == 4 and rec["measured_on"] == NAME
    assert rec["hardware"]["gpu_model"] == "RTX A6000" and rec["hardware"]["gpu_count"] == 2
    assert rec["hardware"]["sglang_version"] == "0.5.23" and rec["trial_count"] == len(rows)
    assert len(rec["trials"]) == len(rows)

    # Another host of the same class, planned offline from its declared hardware: the tuned layer.
    other = tmp_path / "fleet.py"
    other.write_text(f"fleet = [('a6000-2', {data()!r})]\n")
    (tmp_path / "fleet.tuning.yaml").write_text((tmp_path / "inventory.tuning.yaml").read_text())
    plan = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "plan", str(other), "--explain"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    steps = next(line for line in plan.stdout.splitlines() if line.strip().startswith("speculative_num_steps"))
    assert "tuned" in steps and "4" in steps, plan.stdout[-3000:]
    assert f"measured on {NAME}" in plan.stdout
    print(f"\ntune of {len(rows)} trials: {elapsed:.1f} s; tuner overhead {summary['overhead_s']} s")


def test_interrupted_tune_returns_the_host_and_writes_no_record(testbed, tune_host, tmp_path):
    inventory, original, before = fresh_start(testbed, tune_host, tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({**ONLY, "speculative_num_steps": [2, 3, 4]}))
    argv = [sys.executable, "-m", "sglang_deploy.commands.cli", "tune", str(inventory), "--host", NAME,
            "--space", str(space), "--apply"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "E2E_HF_TOKEN": HF_TOKEN})
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("trial  1") and line.rstrip().endswith("deploying"):
            proc.send_signal(signal.SIGINT)  # while the first trial deploys
            break
    lines += proc.stdout.readlines()
    code = proc.wait(timeout=600)
    log = "".join(lines)[-6000:]
    assert code == 3, log
    assert "SIGINT" in log and "returned:" in log
    assert not any(line.startswith("trial  2") for line in lines), log  # no trial after the interrupt
    assert marker(tune_host, "current") == original and live(tune_host) == before
    assert not (tmp_path / "inventory.tuning.yaml").exists()  # interrupted: no record, no --apply


def test_apply_deploys_the_winner_through_the_deploy(testbed, tune_host, tmp_path):
    inventory, original, _ = fresh_start(testbed, tune_host, tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({**ONLY, "speculative_num_steps": [3, 4]}))
    result = tune(inventory, "--space", str(space), "--apply")
    log = result.stdout[-6000:] + result.stderr[-3000:]
    assert result.returncode == 0, log
    now = marker(tune_host, "current")
    assert now != original and marker(tune_host, "deployed") == now, log
    unit = (tune_host.root / LIVE[0]).read_text()
    assert "--speculative-num-steps 4" in unit or "--speculative-num-steps=4" in unit, unit
    last = history(tune_host)[-1]
    assert last["kind"] == "gate" and last["revision"] == now and last["verdict"] == "pass"
