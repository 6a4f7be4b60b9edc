"""The deploy's proof on the host (sglang_deploy/deploy/host/prove_argv.py), run as the deploy runs it, here
against the SIMULATED package (its parser is the catalog's); the released package's own
validation is proven in tests/e2e/test_real_sglang.py and benchmarks/proof_depth.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglang_deploy.deploy.inventory import load_inventory
from sglang_deploy.deploy.proof import proof_options, service_hub_cache
from sglang_deploy.plan.inventory_plan import plan_inventory
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.simulator.sglang_server.build import build_wheel
from sglang_deploy.plan.spec import build_spec
from tests.conftest import ROOT, load_probe

PROVE = ROOT / "sglang_deploy/deploy/host/prove_argv.py"
# the published config.json, recorded
CHECKPOINT = ROOT / "sglang_deploy/simulator/hub/checkpoints/Qwen--Qwen3.6-27B/config.json"


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> Path:
    """The simulated sglang 0.5.23 unpacked (what PYTHONPATH points at)."""
    out = tmp_path_factory.mktemp("sim")
    with zipfile.ZipFile(build_wheel("0.5.23", out)) as whl:
        whl.extractall(out / "site")
    return out / "site"


def reference_argv() -> list[str]:
    hosts = [(h.name, h.group_data, h.host_data) for h in load_inventory(str(ROOT / "inventory/a6000.py"))]
    return list(plan_inventory(hosts, sglang_version="0.5.23")[0].argv)


def prove(site: Path, tmp: Path, argv: list[str], *options: str) -> subprocess.CompletedProcess:
    (tmp / "argv.json").write_text(json.dumps(argv))
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site), "HOME": str(tmp)}
    return subprocess.run([sys.executable, str(PROVE), str(tmp / "argv.json"), *options],
                          capture_output=True, text=True, env=env, timeout=120)


def test_accepted_argv_without_the_checkpoint_config_is_the_parse_alone(simulated, tmp_path):
    proc = prove(simulated, tmp_path, reference_argv(), "--hf-hub-cache", str(tmp_path / "empty"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("SGLang 0.5.23 parses the planned launch flags; its own validation not run "
                                  "(the config.json of Qwen/Qwen3.6-27B is not on this host)")


def test_refused_flag_names_the_version_and_the_parser_complaint_in_one_line(simulated, tmp_path):
    proc = prove(simulated, tmp_path, reference_argv() + ["--enable-piecewise-cuda-graph"])
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "SGLang 0.5.23 installed on this host refuses the planned launch flags: "
        "unrecognized arguments: --enable-piecewise-cuda-graph"]
    assert proc.stdout == ""


def test_staged_snapshot_in_the_hub_cache_runs_the_validation_the_package_has(simulated, tmp_path):
    cache = tmp_path / "hub"
    repo = cache / "models--Qwen--Qwen3.6-27B"
    (repo / "snapshots" / "abc").mkdir(parents=True)
    shutil.copy(CHECKPOINT, repo / "snapshots" / "abc" / "config.json")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc")
    gpus = ["--gpus", "2", "--gpu-name", "RTX A6000", "--capability", "8.6", "--memory-mib", "49140"]
    proc = prove(simulated, tmp_path, reference_argv(), "--hf-hub-cache", str(cache), *gpus)
    assert proc.returncode == 0, proc.stderr
    # The simulated package has neither resolve_once nor check_server_args: only what ran is named.
    assert proc.stdout.startswith(f"SGLang 0.5.23 accepts the planned launch flags: prepare_server_args with "
                                  f"{repo}/snapshots/abc/config.json and 2x RTX A6000 (sm 8.6)")


def test_a_local_model_path_is_the_checkpoint(simulated, tmp_path):
    argv = reference_argv()
    argv[argv.index("--model-path") + 1] = str(CHECKPOINT.parent)
    gpus = ["--gpus", "2", "--gpu-name", "RTX A6000", "--capability", "8.6", "--memory-mib", "49140"]
    proc = prove(simulated, tmp_path, argv, *gpus)
    assert proc.returncode == 0, proc.stderr
    assert f"with {CHECKPOINT} and 2x RTX A6000" in proc.stdout


def test_proof_options_come_from_the_probe_and_the_service_cache():
    data = next(h for h in load_inventory(str(ROOT / "inventory/a6000.py"))).host_data
    plan = plan_host(build_spec("a6000-1", {}, data), probe=load_probe("a6000x2-bridge"))
    assert proof_options(plan) == ["--gpus", "2", "--gpu-name", "NVIDIA RTX A6000", "--capability", "8.6",
                                   "--memory-mib", "49140", "--hf-hub-cache", "/var/lib/sglang/.cache/huggingface/hub"]
    moved = plan_host(build_spec("a6000-1", {}, {**data, "sglang_env": {"HF_HOME": "/srv/hf"}}),
                      probe=load_probe("a6000x2-bridge"))
    assert service_hub_cache(moved) == "/srv/hf/hub"
