"""`sglang-deploy demo` on this machine: boots a throwaway host (sglang_deploy/simulator/testbed), deploys the
reference plan to it with simulated GPUs and server, gates it, prints it all and tears down.
Asserted from outside: exit code, output, and that nothing of the host is left mounted or running."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                pids.append(int(entry.name))
    return pids


def test_demo_deploys_the_reference_plan_gates_it_and_tears_down(tmp_path):
    report = tmp_path / "demo.json"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "demo", "--json", str(report)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    elapsed = time.monotonic() - t0
    out = proc.stdout
    assert proc.returncode == 0, out[-6000:] + proc.stderr[-4000:]
    result = json.loads(report.read_text())
    assert result["mode"] == "testbed", result.get("fallback_reason")
    assert "SIMULATED: the GPUs" in out
    # the plan: the reference host's data on the demo's port
    argv = result["plan"]["argv"]
    assert shlex.join(argv) in out
    assert argv[argv.index("--model-path") + 1] == "Qwen/Qwen3.6-27B" and "--speculative-algorithm" in argv
    # the real deploy ran and its gate passed
    assert result["deploy"]["exit_code"] == 0 and "deploy succeeded" in out
    assert "Prove the launch flags with the installed SGLang" in out and "gate passed" in out
    gate = result["gate"]
    assert gate["kind"] == "gate" and gate["verdict"] == "pass" and gate["revision"]
    simulated = result["simulated"]["server"]["decode_tok_s"]
    # within what a busy machine does to a timed stream: this test is not about speed
    assert gate["decode_tok_s"] == pytest.approx(simulated, rel=0.25)
    assert gate["target_tok_s"] < simulated
    assert gate["key"]["hardware"] == "2x NVIDIA RTX A6000 (sm86)"  # as the NVML stand-in answered the probe
    assert not [d for d in gate["server_config_diffs"] if d["fails"]]
    assert "PASS" in out
    # read back by `sglang-deploy status`: the revision the gate passed, every column green
    assert result["status"]["exit_code"] == 0
    row = next(line for line in out.splitlines() if line.startswith("  | demo-a6000"))
    assert row.split()[1:4] == ["demo-a6000", "ok", gate["revision"]], row
    # the continuous check the deploy installed ran once and passed, and status shows its line
    assert result["watch"]["exit_code"] == 0 and result["watch"]["line"].startswith("watch: pass"), result["watch"]
    assert "LAST WATCH" in out and row.rstrip().endswith("ago") and " pass " in row.split("tok/s", 1)[1], row
    # torn down: nothing of the throwaway host left mounted or running
    assert result["teardown"] == "clean" and "nothing left mounted or running" in out
    scratch = result["testbed_dir"]
    assert not Path(scratch).exists()
    assert scratch not in Path("/proc/self/mountinfo").read_text()
    assert not Path(f"/proc/{result['nspawn_pid']}").exists()
    assert _processes_mentioning(scratch) == []
    print(f"\nsglang-deploy demo (throwaway host): {elapsed:.1f} s")
