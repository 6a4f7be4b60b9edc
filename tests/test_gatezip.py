"""The gate's zipapp (sglang_deploy/deploy/gatezip.py), as the deploy runs it on a host: with a Python
that has none of the controller's packages (isolated, no site-packages), its options in a file.
What it carries is the gate, the core modules it imports and its libraries; what a real gate run
imports from it is the gate and the core alone (no planner, no Jinja2)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

from sglang_deploy.deploy import gatezip
from sglang_deploy.gate.options import CheckOptions, HostRefs, to_file_dict
from tests.test_check_cli import LOADED, plain, plan_file  # noqa: F401 (fixtures: the simulated server)
from tests.test_layout import PACKAGE, imports

#: Never in the zip, never imported by a gate run.
FORBIDDEN = ("jinja2", "markupsafe", "sglang_deploy.plan", "sglang_deploy.tuning", "sglang_deploy.deploy",
             "sglang_deploy.commands", "sglang_deploy.simulator", "pyinfra", "gevent")

# Runs the zipapp as `python -I -S gate.pyz ARGS` does, then writes every module the run imported
# (name -> file) and its exit code to OUT.
DUMP_IMPORTS = """\
import json, runpy, sys
pyz, out = sys.argv[1], sys.argv[2]
sys.argv = [pyz, *sys.argv[3:]]
code = 0
try:
    runpy.run_path(pyz, run_name="__main__")
except SystemExit as exc:
    code = exc.code
finally:
    with open(out, "w") as fh:
        modules = {name: getattr(m, "__file__", None) for name, m in list(sys.modules.items())}
        json.dump({"exit": code, "modules": modules}, fh)
"""


def _names() -> list[str]:
    with zipfile.ZipFile(io.BytesIO(gatezip.build())) as zf:
        return zf.namelist()


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def test_zipapp_is_self_contained_and_reproducible():
    data = gatezip.build()
    assert data.startswith(b"#!")
    assert gatezip.build.__wrapped__() == data  # same sources, same bytes
    names = _names()
    assert "__main__.py" in names and "sglang_deploy/data/gate_prompts.yaml" in names
    for package in ("httpx", "httpcore", "h11", "anyio", "idna", "certifi", "yaml"):
        assert any(n.startswith(package + "/") for n in names), package
    assert not any(n.endswith((".so", ".pyc")) or "__pycache__" in n for n in names)


def test_zipapp_carries_the_gate_and_the_core_it_needs_alone():
    names = _names()
    ours = sorted(n for n in names if n.startswith("sglang_deploy/") and not n.startswith("sglang_deploy/gate/"))
    assert ours == ["sglang_deploy/__init__.py", "sglang_deploy/data/gate_prompts.yaml",
                    "sglang_deploy/deadline.py", "sglang_deploy/untrusted.py"]
    gate = {n.removeprefix("sglang_deploy/gate/") for n in names if n.startswith("sglang_deploy/gate/")}
    assert gate == {p.name for p in (PACKAGE / "gate").glob("*.py")} and "main.py" in gate
    tops = {n.split("/")[0].removesuffix(".py") for n in names}
    assert not {t for t in tops if _forbidden(t)}, tops
    assert not [n for n in names if _forbidden(n.removesuffix(".py").replace("/", "."))]
    with zipfile.ZipFile(io.BytesIO(gatezip.build())) as zf:
        main = zf.read("__main__.py").decode()
    assert "sglang_deploy.gate.main" in main and "commands" not in main


def test_the_core_modules_in_the_zip_are_the_ones_the_gate_imports():
    core = set()
    for path in (PACKAGE / "gate").glob("*.py"):
        for name in imports(path):
            parts = name.split(".")
            if parts[0] == "sglang_deploy" and len(parts) > 1 and (PACKAGE / f"{parts[1]}.py").is_file():
                core.add(f"{parts[1]}.py")  # a top-level module of the package: the core
    assert core == set(gatezip.GATE_CORE)


def _run(pyz: Path, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    dump = tmp_path / "imports.json"
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", DUMP_IMPORTS, str(pyz), str(dump), *args],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    return proc, json.loads(dump.read_text())


def test_a_real_gate_run_from_an_options_file_imports_the_gate_and_the_core_alone(plain, plan_file, tmp_path):  # noqa: F811
    pyz = tmp_path / "gate.pyz"
    pyz.write_bytes(gatezip.build())
    key = tmp_path / "key"
    key.write_text("sekrit")
    baseline = tmp_path / "history.jsonl"
    plan = json.loads(plan_file.read_text())[0]
    # the plan's configuration (TP 2, MTP) differs from this server's: listed, failing nothing (fail_on none)
    opts = CheckOptions(url=plain.url, target_tok_s=150, repeats=2, max_tokens=41, expect_plan=plan,
                        fail_on=frozenset(), nvml=True, baseline=str(baseline), record=True, concurrency=(1, 2),
                        slo={"ttft_p90": 5.0}, api_key="sekrit")
    options = tmp_path / "options.json"
    options.write_text(json.dumps(to_file_dict(opts, HostRefs(api_key_file=str(key)))))
    assert "sekrit" not in options.read_text()  # the key travels by its file alone
    report = tmp_path / "report.json"
    proc, dump = _run(pyz, tmp_path, "check", "--options", str(options), "--json", str(report))
    assert dump["exit"] == 0, proc.stdout + proc.stderr
    result = json.loads(report.read_text())
    # the simulated 200 tok/s, within what a busy machine does to a timed stream (this test is not about speed)
    assert result["verdict"] == "pass" and abs(result["decode_tok_s"] - 200) / 200 < LOADED
    assert [lv["concurrency"] for lv in result["load"]] == [1, 2] and result["slo"] == {"ttft_p90": 5.0}
    assert any(d["field"] == "tp_size" and not d["fails"] for d in result["server_config_diffs"])
    assert any("--nvml" in w for w in result["warnings"])  # no pynvml in an isolated Python: a warning
    assert len(baseline.read_text().splitlines()) == 1  # recorded
    assert "sekrit" not in proc.stdout + proc.stderr + report.read_text() + baseline.read_text()
    modules = dump["modules"]
    assert "sglang_deploy.gate.main" in modules and "sglang_deploy.gate.run" in modules and "httpx" in modules
    assert not sorted(m for m in modules if _forbidden(m))
    ours = {m for m in modules if m.startswith("sglang_deploy")}
    assert {m for m in ours if not m.startswith("sglang_deploy.gate")} == {"sglang_deploy", "sglang_deploy.untrusted",
                                                                           "sglang_deploy.deadline"}
    # everything outside the standard library came from the zip (nothing from a site-packages)
    stdlib = set(sys.stdlib_module_names)
    outside = {m: f for m, f in modules.items() if m.split(".")[0] not in stdlib and f and not f.startswith(str(pyz))}
    assert not outside, outside
    # nothing came from the controller's site-packages
    probe = subprocess.run([sys.executable, "-I", "-S", "-c", "import httpx"], capture_output=True)
    assert probe.returncode != 0


def test_bad_options_file_exits_2_naming_the_key(tmp_path):
    pyz = tmp_path / "gate.pyz"
    pyz.write_bytes(gatezip.build())
    data = to_file_dict(CheckOptions(url="http://127.0.0.1:9"))
    options = tmp_path / "options.json"
    options.write_text(json.dumps({**data, "repeats": 0}))
    proc, dump = _run(pyz, tmp_path, "check", "--options", str(options))
    assert dump["exit"] == 2 and f"error: --options: {options}: repeats: must be at least 1" in proc.stderr


def test_sample_gpus_from_the_zipapp_without_nvml(tmp_path):
    """The controller's gate samples the host's GPUs with `gate.pyz sample-gpus`: without
    NVML it says why in the samples file (exit 3), never a traceback."""
    pyz = tmp_path / "gate.pyz"
    pyz.write_bytes(gatezip.build())
    out = tmp_path / "nvml.json"
    proc, dump = _run(pyz, tmp_path, "sample-gpus", "--out", str(out), "--max-seconds", "0")
    assert dump["exit"] == 3, proc.stderr
    assert json.loads(out.read_text())["error"].startswith("NVML unavailable")
    assert not sorted(m for m in dump["modules"] if _forbidden(m))
