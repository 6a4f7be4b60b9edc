"""`sglang-deploy demo --offline`: the fallback path (offline plan, then the gate against the
SIMULATED SGLang server started locally), its exit codes, and that it leaves nothing running.
The throwaway-host path is tests/e2e/test_demo.py."""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_deploy.commands import demo

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="starts a local server")


def test_offline_demo_plans_gates_and_stops_the_server(tmp_path):
    report = tmp_path / "demo.json"
    proc = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "demo", "--offline",
                           "--json", str(report)], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = proc.stdout
    result = json.loads(report.read_text())
    assert result["mode"] == "local" and result["exit_code"] == 0
    assert "Cannot boot a throwaway host here (--offline given)" in out
    assert "SIMULATED: the server" in out and "no GPU is involved" in out
    # the offline plan of the reference inventory, printed
    assert result["plan"]["host"] == "a6000-1" and "--speculative-algorithm" in result["plan"]["argv"]
    assert shlex.join(result["plan"]["argv"]) in out
    # the gate passed, measured the simulated rate, found the server configured as planned
    gate = result["gate"]
    assert gate["verdict"] == "pass" and "\nPASS\n" in out
    simulated = result["simulated"]["server"]["decode_tok_s"]
    # within what a busy machine does to a timed stream (a factor of two; the gate's own figure of the
    # PD test's decode server came out 25% high in one loaded CI run): this test is not about speed
    assert simulated / 2 <= gate["decode_tok_s"] <= simulated * 2
    assert not [d for d in gate["server_config_diffs"] if d["fails"]] and "[fails the gate]" not in out
    assert gate["target_tok_s"] == demo.TARGET_TOK_S < simulated
    # the server is gone
    pid = result["server_pid"]
    assert not Path(f"/proc/{pid}").exists(), f"simulated server pid {pid} still exists"
    assert result["server_left_running"] == []
    assert f"pid {pid} and its TP worker(s) gone" in out


def test_without_a_testbed_the_demo_says_why_falls_back_and_fails_with_the_gate(monkeypatch):
    from sglang_deploy.simulator import testbed

    monkeypatch.setattr(testbed, "missing_requirements", lambda: ["not root (mount and systemd-nspawn "
                                                                        "need root)", "systemd-nspawn not found"])
    monkeypatch.setattr(demo, "TARGET_TOK_S", 1000.0)  # far above the simulated rate
    monkeypatch.setattr(demo, "GATE", {**demo.GATE, "repeats": 1, "max_tokens": 32})
    out, err = io.StringIO(), io.StringIO()
    assert demo.run_demo(out=out, err=err) == 1
    text = out.getvalue()
    assert ("Cannot boot a throwaway host here (not root (mount and systemd-nspawn need root); "
            "systemd-nspawn not found)") in text
    assert "FAIL\n" in text and "below target 1000" in text
    assert "\ndemo FAILED in " in text and text.rstrip().endswith("s (local fallback)")


def test_demo_outside_a_checkout_says_so_and_exits_2(monkeypatch, tmp_path):
    monkeypatch.setattr(demo, "REPO", tmp_path)
    out, err = io.StringIO(), io.StringIO()
    assert demo.run_demo(out=out, err=err) == 2
    assert "runs from a checkout of sglang-deploy" in err.getvalue() and "deploy.py" in err.getvalue()
    assert out.getvalue() == ""
