"""The `sglang-deploy plan` contract: human output, JSON fields, exit codes."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from sglang_deploy.commands.cli import COMMANDS, build_parser, main

REQUIRED_KEYS = {"host", "arch", "sglang_version", "argv", "env", "intents", "warnings", "files"}


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_plan_json_contract(repo_root):
    code, out, err = run("plan", str(repo_root / "inventory/a6000.py"), "--json")
    assert code == 0, err
    (host,) = json.loads(out)
    assert REQUIRED_KEYS <= set(host)
    assert host["host"] == "a6000-1" and host["arch"] == "sm86" and host["sglang_version"] == "0.5.23"
    assert all(isinstance(a, str) for a in host["argv"])
    assert {"name", "value", "layer", "reason"} <= set(host["intents"][0])
    assert set(host["files"]) == {"unit", "env", "nccl_conf"}
    assert host["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert "HF_TOKEN" not in host["env"]


def test_plan_human_output_explains(repo_root):
    code, out, _ = run("plan", str(repo_root / "inventory/a6000.py"), "--explain")
    assert code == 0
    assert "sm86" in out and "nvlink-pairs" in out
    assert "nvls" in out and "SM86 has no NVLink SHARP" in out
    assert "--speculative-num-steps 3" in out
    assert "--- /etc/systemd/system/sglang.service (unit)" in out
    code, out, _ = run("plan", str(repo_root / "inventory/h100.py"))
    assert code == 0
    assert "HF_TOKEN='<redacted>'" in out and "SGLANG_API_KEY='<redacted>'" in out


def test_version_override_and_host_filter(repo_root):
    code, out, _ = run("plan", str(repo_root / "inventory/a6000.py"), "--json", "--sglang-version", "0.5.9",
                       "--host", "a6000-1")
    assert code == 0
    (host,) = json.loads(out)
    assert host["sglang_version"] == "0.5.9" and "--enable-piecewise-cuda-graph" in host["argv"]
    assert any(w.startswith("text_only") for w in host["warnings"])
    code, _, err = run("plan", str(repo_root / "inventory/a6000.py"), "--host", "nope")
    assert code == 2 and "nope not in" in err


def test_bad_host_data_exits_2_names_host_and_field(tmp_path):
    inv = tmp_path / "bad.py"
    inv.write_text(
        "hosts = [\n"
        " ('good-1', {'sglang_model': 'Qwen/Qwen3-32B', 'sglang_gpus': {'model': 'L40S', 'count': 2}}),\n"
        " ('bad-1', {'sglang_model': 'Qwen/Qwen3-32B', 'sglang_gpus': {'model': 'L40S', 'count': 2},\n"
        "            'sglang_intents': {'mem_fraction_static': 1.5}}),\n"
        "]\n")
    code, out, err = run("plan", str(inv), "--json")
    assert code == 2
    assert [h["host"] for h in json.loads(out)] == ["good-1"]
    assert err.strip() == ("error: host bad-1: sglang_intents.mem_fraction_static: mem_fraction_static must be "
                           "between 0 and 1 (exclusive), got 1.5")


def test_group_data_is_a_layer(tmp_path):
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "fleet.py").write_text("sglang_intents = {'context_length': 8192}\n")
    inv = tmp_path / "fleet.py"
    inv.write_text("hosts = [('n1', {'sglang_model': 'Qwen/Qwen3-32B', "
                   "'sglang_gpus': {'model': 'L40S', 'count': 1}})]\n")
    code, out, err = run("plan", str(inv), "--json")
    assert code == 0, err
    (host,) = json.loads(out)
    ctx = next(i for i in host["intents"] if i["name"] == "context_length")
    assert (ctx["value"], ctx["layer"]) == (8192, "group")


def test_missing_inventory_is_a_usage_error(tmp_path):
    code, _, err = run("plan", str(tmp_path / "none.py"))
    assert code == 2 and "no such file" in err


def test_console_script_default_inventory(repo_root):
    """The README quick start: `sglang-deploy plan` plans the shipped reference deployment."""
    result = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "plan"], cwd=repo_root,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("== a6000-1 ")


def test_help_speaks_to_the_user(capsys):
    """`--help` says what the tool does and lists every command; each command's help gives its exit codes."""
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: sglang-deploy [-h] COMMAND ...\n\nDeploy the SGLang LLM server")
    assert "top floor" not in text and "glue" not in text
    for name, summary in COMMANDS:
        assert f"  {name}" in text and summary in text
        with pytest.raises(SystemExit):
            build_parser().parse_args([name, "--help"])
        sub = capsys.readouterr().out
        assert sub.startswith(f"usage: sglang-deploy {name} ") and "exit codes: 0 " in sub
