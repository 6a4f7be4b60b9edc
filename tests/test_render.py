"""Rendered files: unit contents, systemd's own verifier, golden files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import exec_lines, launcher_code, render
from sglang_deploy.plan.spec import build_spec

GOLDEN = Path(__file__).resolve().parent / "golden"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None and not os.environ.get("CI"),
    reason="systemd-analyze missing (Debian package systemd); .ci/run installs it",
)

REFERENCE = {
    "sglang_model": "Qwen/Qwen3.6-27B",
    "sglang_gpus": {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"},
    "sglang_intents": {"mem_fraction_static": 0.88},
    "sglang_secrets": {"hf_token": {"env": "HF_TOKEN"}, "api_key": {"env": "SGLANG_API_KEY"}},
}


def plan_for(data, version=None, host="h1"):
    return plan_host(build_spec(host, {}, data), sglang_version=version)


def systemd_verify(unit_text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    unit = tmp_path / "sglang-test.service"
    unit.write_text(unit_text)
    return subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", str(unit)],
                          capture_output=True, text=True, timeout=60)


def fake_venvs_dir(tmp_path: Path, version: str) -> str:
    """A venvs dir whose sglang-<version>/bin/python exists, so verify can check ExecStart's binary."""
    bin_dir = tmp_path / "venvs" / f"sglang-{version}" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(shutil.which("python3") or "/usr/bin/python3")
    return str(tmp_path / "venvs")


def test_unit_has_the_required_service_settings():
    files = render(plan_for(REFERENCE))
    unit = files.unit
    for line in ("Type=simple", "User=sglang", "Group=sglang", "WorkingDirectory=/var/lib/sglang",
                 "EnvironmentFile=/etc/sglang/sglang.env", "Restart=on-failure", "RestartSec=15",
                 "TimeoutStartSec=1800", "TimeoutStopSec=120", "KillMode=control-group", "LimitNOFILE=65536",
                 "LimitMEMLOCK=infinity", "WantedBy=multi-user.target", "StartLimitBurst=5"):
        assert f"\n{line}\n" in unit, line
    # with an API key the server starts through the launcher, which appends --api-key from the environment
    assert "ExecStart=/opt/sglang/sglang-0.5.23/bin/python -c \"import os, runpy, sys; " in unit
    assert ("runpy.run_module('sglang.launch_server', run_name='__main__', alter_sys=True)\" \\\n"
            "    --model-path Qwen/Qwen3.6-27B") in unit
    assert '--json-model-override-args "{\\"language_model_only\\": true}"' in unit
    assert "--api-key" not in unit.split("alter_sys=True)")[1]  # not among the ExecStart words
    # without one: plain python -m sglang.launch_server
    plain = {k: v for k, v in REFERENCE.items() if k != "sglang_secrets"}
    plain_unit = render(plan_for(plain)).unit
    assert "ExecStart=/opt/sglang/sglang-0.5.23/bin/python -m sglang.launch_server \\\n    --model-path" in plain_unit


def test_launcher_passes_the_key_in_process_never_in_argv(tmp_path):
    """Run the unit's launcher code for real against a stand-in sglang.launch_server that
    reports what SGLang would parse, what the process's argv is, and what its children inherit."""
    pkg = tmp_path / "sglang"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(
        "import json, os, sys\n"
        "if __name__ == '__main__':\n"
        "    cmdline = open('/proc/self/cmdline', 'rb').read().split(b'\\0')\n"
        "    print(json.dumps({'parsed': sys.argv[1:], 'cmdline': [c.decode() for c in cmdline if c],\n"
        "                      'inherited': 'SGLANG_API_KEY' in os.environ, 'main': __name__}))\n")
    code = launcher_code([("--api-key", "SGLANG_API_KEY")])
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(tmp_path), "SGLANG_API_KEY": "sk-LAUNCH"}
    out = subprocess.run([sys.executable, "-c", code, "--model-path", "m", "--port", "30000"], env=env,
                         capture_output=True, text=True, check=True, timeout=30).stdout
    seen = json.loads(out)
    assert seen["parsed"] == ["--model-path", "m", "--port", "30000", "--api-key", "sk-LAUNCH"]
    assert not any("sk-LAUNCH" in c for c in seen["cmdline"]) and not seen["inherited"]
    assert seen["main"] == "__main__"
    # no key in the environment: nothing appended
    env.pop("SGLANG_API_KEY")
    out = subprocess.run([sys.executable, "-c", code, "--model-path", "m"], env=env, capture_output=True, text=True,
                         check=True, timeout=30).stdout
    assert json.loads(out)["parsed"] == ["--model-path", "m"]


def test_service_settings_come_from_inventory():
    data = {**REFERENCE, "sglang_user": "llm", "sglang_service_name": "qwen", "sglang_timeout_start_s": 600,
            "sglang_workdir": "/srv/llm", "sglang_venvs_dir": "/srv/llm"}
    plan = plan_for(data)
    unit = render(plan).unit
    assert "\nUser=llm\n" in unit and "\nGroup=llm\n" in unit and "\nTimeoutStartSec=600\n" in unit
    assert "EnvironmentFile=/etc/sglang/qwen.env" in unit and "ExecStart=/srv/llm/sglang-0.5.23/bin/python" in unit
    assert plan.service.unit_path == "/etc/systemd/system/qwen.service"


def test_exec_lines_group_each_option_with_its_values():
    lines = exec_lines("/v/bin/python", ["--a", "1", "--b", "--c", "x y", "-1.5"])
    assert lines == ["/v/bin/python -m sglang.launch_server", "--a 1", "--b", '--c "x y" -1.5']


def test_values_with_systemd_specials_are_quoted_in_the_unit():
    data = {**REFERENCE, "sglang_intents": {"served_model_name": "qwen 50% $HOME \\ \"q\""}}
    unit = render(plan_for(data)).unit
    assert '--served-model-name "qwen 50%% $$HOME \\\\ \\"q\\""' in unit


def test_control_characters_never_reach_a_file():
    data = {**REFERENCE, "sglang_env": {"HF_HOME": "/data/hf\nEVIL=1"}}
    with pytest.raises(PlanError) as exc:
        render(plan_for(data))
    assert exc.value.field == "sglang_env.HF_HOME"


@needs_systemd
@pytest.mark.parametrize("inventory_data,version", [
    (REFERENCE, "0.5.23"), (REFERENCE, "0.5.19"), (REFERENCE, "0.5.15"), (REFERENCE, "0.5.9"),
    ({"sglang_model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "sglang_gpus": {"model": "H100 SXM", "count": 8},
      "sglang_intents": {"served_model_name": "odd name 100% $x \\ \"y\" ;"}}, "0.5.23"),
])
def test_rendered_units_pass_systemd_analyze_verify(inventory_data, version, tmp_path):
    data = {**inventory_data, "sglang_venvs_dir": fake_venvs_dir(tmp_path, version)}
    unit = render(plan_for(data, version)).unit
    result = systemd_verify(unit, tmp_path)
    assert result.returncode == 0, result.stderr
    # verify exits 0 on unknown keys but prints them: any output is a finding
    assert result.stdout == "" and result.stderr == "", result.stderr


@needs_systemd
def test_systemd_verify_would_catch_a_broken_unit(tmp_path):
    """The check above can fail: a unit with a bad key and a missing binary is reported."""
    unit = render(plan_for(REFERENCE)).unit.replace("KillMode=control-group", "KillMode=control-groups")
    result = systemd_verify(unit, tmp_path)
    assert result.returncode != 0 or result.stderr
    assert "KillMode" in result.stderr or "/opt/sglang/sglang-0.5.23/bin/python" in result.stderr


# --- golden files: the reference deployment (0.5.23, 0.5.19) and the H100 host ------------------

GOLDEN_CASES = {
    "a6000-sglang-0.5.23": ("inventory/a6000.py", "0.5.23"),
    "a6000-sglang-0.5.19": ("inventory/a6000.py", "0.5.19"),
    "h100-sglang-0.5.23": ("inventory/h100.py", "0.5.23"),
}
FILES = {"unit": "sglang.service", "env": "sglang.env", "nccl_conf": "nccl.conf"}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_files(case, repo_root):
    from sglang_deploy.deploy.inventory import load_inventory

    inventory, version = GOLDEN_CASES[case]
    (host,) = load_inventory(str(repo_root / inventory))
    plan = plan_host(build_spec(host.name, host.group_data, host.host_data), sglang_version=version)
    rendered = render(plan).as_dict()
    folder = GOLDEN / case
    if os.environ.get("UPDATE_GOLDEN"):
        folder.mkdir(parents=True, exist_ok=True)
        for key, name in FILES.items():
            (folder / name).write_text(rendered[key])
    for key, name in FILES.items():
        assert rendered[key] == (folder / name).read_text(), f"{case}/{name} differs (UPDATE_GOLDEN=1 to rewrite)"
