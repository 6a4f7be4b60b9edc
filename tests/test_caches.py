"""The compile caches planned as part of the host (sglang_deploy/plan/caches.py): one directory per
SGLang version under ``sglang_cache_dir``, every cache variable the version reads in the service
environment and none it does not, the key's validation, the deploy's commands, the disk check's
share, and the simulated server's start model (sglang/_sim/startcache.py)."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import types
from pathlib import Path

import pytest

from sglang_deploy.deploy import caches as deploy_caches
from sglang_deploy.deploy.host import stage_weights
from sglang_deploy.deploy.weights import stage_command
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.caches import ALLOWANCE_BYTES, CACHE_VARIABLES, Caches
from sglang_deploy.plan.output import print_plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.plan.spec_checks import OWNED_ENV
from sglang_deploy.plan.weights import plan_weights
from tests.conftest import load_probe

REPO = Path(__file__).resolve().parent.parent
A6000 = {"sglang_model": "Qwen/Qwen3.6-27B", "sglang_gpus": {"model": "RTX A6000", "count": 2,
                                                            "topology": "nvlink-pairs"}}
COMMIT = "0123456789abcdef0123456789abcdef01234567"
COMMON = {"SGLANG_DG_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH",
          "FLASHINFER_WORKSPACE_BASE"}
#: What each supported version reads (sglang/srt/environ.py of each released wheel; see plan/caches.py).
EXPECTED = {
    "0.5.9": COMMON,  # no SGLANG_CACHE_DIR, no TileLang pinned
    "0.5.15": COMMON | {"SGLANG_CACHE_DIR"},  # tilelang==0.1.11, not redirected
    "0.5.19": COMMON | {"SGLANG_CACHE_DIR", "TILELANG_CACHE_DIR"},
    "0.5.23": COMMON | {"SGLANG_CACHE_DIR", "TILELANG_CACHE_DIR"},
}
SRC = Path.home() / ".cache" / "sglang-deploy-catalogs"


def _plan(data: dict, version: str = "0.5.23"):
    spec = build_spec("gpu1", {}, {**data, "sglang_version": version})
    weights = plan_weights("gpu1", spec.model_path, spec.weights, COMMIT, None)
    return plan_host(spec, probe=load_probe("a6000x2-bridge"), weights=weights)


@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_each_version_gets_every_cache_it_reads_and_none_it_does_not(version):
    plan = _plan(A6000, version)
    d = f"/var/lib/sglang/cache/sglang-{version}"
    planned = {k: v for k, v in plan.env.items() if k in CACHE_VARIABLES}
    assert set(planned) == EXPECTED[version]
    assert all(v == d or v.startswith(d + "/") for v in planned.values()), planned
    # 0.5.23's own layout under SGLANG_CACHE_DIR (srt/environ.py third_party_cache_defaults)
    assert planned["TRITON_CACHE_DIR"] == f"{d}/triton" and planned["TORCHINDUCTOR_CACHE_DIR"] == f"{d}/inductor"
    assert planned["CUDA_CACHE_PATH"] == f"{d}/nv" and planned["FLASHINFER_WORKSPACE_BASE"] == d
    assert planned["SGLANG_DG_CACHE_DIR"] == f"{d}/deep_gemm"
    env_file = render(plan).env
    for name, value in planned.items():
        assert f"\n{name}={value}\n" in env_file
    assert plan.as_dict()["caches"]["dir"] == d and plan.as_dict()["caches"]["env"] == planned


@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_the_table_agrees_with_the_released_sources(version):
    """Where the unpacked wheels are here (scripts/build_catalogs.py keeps them), each version's
    SGLANG_CACHE_DIR and its third_party_cache_defaults names are what the plan names."""
    found = sorted(SRC.glob(f"src-{version}-*/sglang/srt/environ.py"))
    if not found:
        pytest.skip(f"no unpacked sglang {version} under {SRC}")
    source = found[0].read_text()
    planned = {name for name, _, _ in Caches("/c", version).env()}
    assert ("SGLANG_CACHE_DIR = EnvStr(" in source) == ("SGLANG_CACHE_DIR" in planned)
    assert "SGLANG_DG_CACHE_DIR = EnvStr(" in source and "SGLANG_DG_CACHE_DIR" in planned
    body = re.search(r"def third_party_cache_defaults\(\).*?return \{(.*?)\n    \}", source, re.S)
    if body is not None:
        assert set(re.findall(r'"([A-Z_]+)":', body.group(1))) <= planned
    else:
        assert version in ("0.5.9", "0.5.15")
    compile_utils = found[0].parent / "layers" / "deep_gemm_wrapper" / "compile_utils.py"
    assert 'os.environ["DG_JIT_CACHE_DIR"]' in compile_utils.read_text()


def test_the_cache_root_moves_and_explain_says_where_and_why():
    plan = _plan({**A6000, "sglang_cache_dir": "/data/sglang-cache/"})
    assert plan.caches is not None and plan.caches.dir == "/data/sglang-cache/sglang-0.5.23"
    assert plan.env["SGLANG_CACHE_DIR"] == "/data/sglang-cache/sglang-0.5.23"
    import io
    out = io.StringIO()
    print_plan(plan, render(plan), True, out)
    line = next(x for x in out.getvalue().splitlines() if x.startswith("Caches"))
    assert "/data/sglang-cache/sglang-0.5.23" in line and "kept across restarts and rollbacks" in line
    assert "venv is gone" in line and "disk check" in line


def test_a_new_version_is_a_new_directory_and_a_new_revision():
    a, b = _plan(A6000, "0.5.19"), _plan(A6000, "0.5.23")
    assert a.caches.dir != b.caches.dir and render(a).env != render(b).env


@pytest.mark.parametrize("value,says", [
    ("relative/cache", "absolute path"),
    ("/", "normal absolute path"),
    ("/var/lib", "system directory"),
    ("/etc/sglang-cache", "inside the system directory /etc"),
    ("/usr/local/cache", "inside the system directory /usr"),
    ("/tmp", "system directory"),
    ("/var/lib/sglang/cache/../x", "normal absolute path"),
    ("/var/lib/sglang/my cache", "without spaces"),
    ("/var/lib/sglang/models", "the model store"),
    ("/var/lib/sglang/models/cache", "the model store"),
    ("/var/lib/sglang", "the model store"),  # above it
    ("/var/lib/sglang-deploy/cache", "the deploy's state"),
    ("/opt/sglang/cache", "the venvs"),
    ("/etc/sglang", "inside the system directory /etc"),
    (42, "absolute path"),
    (["/data"], "absolute path"),
])
def test_bad_cache_roots_are_refused_naming_host_and_field(value, says):
    with pytest.raises(PlanError) as exc:
        build_spec("gpu7", {}, {**A6000, "sglang_cache_dir": value})
    assert exc.value.host == "gpu7" and exc.value.field == "sglang_cache_dir", str(exc.value)
    assert says in exc.value.message, exc.value.message


def test_a_cache_root_apart_from_a_moved_store_and_venvs_is_accepted():
    spec = build_spec("gpu7", {}, {**A6000, "sglang_model_store": "/srv/models", "sglang_venvs_dir": "/srv/venvs",
                                   "sglang_cache_dir": "/srv/cache"})
    assert spec.cache_dir == "/srv/cache"
    with pytest.raises(PlanError, match="sglang_cache_dir: must be a directory of its own, not the env file.s dir"):
        build_spec("gpu7", {}, {**A6000, "sglang_config_dir": "/srv/etc", "sglang_cache_dir": "/srv/etc/c"})


def test_the_cache_variables_are_the_plans_not_sglang_envs():
    owned = {name for name, o in OWNED_ENV.items() if o.instead == "sglang_cache_dir"}
    assert owned == set(CACHE_VARIABLES)
    with pytest.raises(PlanError) as exc:
        build_spec("gpu1", {}, {**A6000, "sglang_env": {"TRITON_CACHE_DIR": "/x"}})
    assert exc.value.field == "sglang_env.TRITON_CACHE_DIR" and "sglang_cache_dir" in exc.value.message
    plan = _plan({**A6000, "sglang_env": {"TRITON_CACHE_DIR": "/x"}, "sglang_env_overrides": ["TRITON_CACHE_DIR"]})
    assert plan.env["TRITON_CACHE_DIR"] == "/x"  # a declared override wins, with a warning


def test_the_deploys_commands_run_below_the_root_as_the_service_user():
    plan = _plan({**A6000, "sglang_user": "svc", "sglang_group": "gpu"})
    ensure = deploy_caches.ensure_command(plan.caches, plan.service)
    assert ensure.startswith("if [ ! -e /var/lib/sglang/cache ]; then mkdir -p -m 0755 /var/lib/sglang/cache; fi")
    assert "chown -h svc:gpu /var/lib/sglang/cache" in ensure
    assert ("setpriv --reuid=svc --regid=gpu --init-groups mkdir -p -m 0750 /var/lib/sglang/cache/sglang-0.5.23 "
            "&& setpriv --reuid=svc --regid=gpu --init-groups sh -c") in ensure  # then the stale P2P results
    assert ensure.endswith("stale-p2p /var/lib/sglang/cache/sglang-0.5.23 'gpu_p2p_access_cache_for_*.json'")
    prune = deploy_caches.prune_command(plan.caches, plan.service)
    assert "setpriv --reuid=svc --regid=gpu --init-groups sh -c" in prune
    assert prune.endswith("prune-caches /var/lib/sglang/cache /opt/sglang sglang-0.5.23")


def test_the_weights_disk_check_counts_the_cache_allowance():
    plan = _plan(A6000)
    command = stage_command(plan.weights, python="py", env_file="/e", owner="sglang:sglang", host_name="gpu1",
                            caches=plan.caches)
    assert f"--cache-dir /var/lib/sglang/cache/sglang-0.5.23 --cache-bytes {ALLOWANCE_BYTES}" in command


def _disk(tmp_path: Path, monkeypatch, free: int, cached: int, allowance: int = 1000):
    store, cache = tmp_path / "store", tmp_path / "cache" / "sglang-0.5.23"
    (store / "blobs").mkdir(parents=True)
    cache.mkdir(parents=True)
    (cache / "kernel.bin").write_bytes(b"x" * cached)
    monkeypatch.setattr(stage_weights.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 ** 9, 0, free))
    args = argparse.Namespace(host="gpu1", store=str(store), repo="org/m", margin_bytes=100, cache_dir=str(cache),
                              cache_bytes=allowance)
    files = [{"path": "w.safetensors", "size": 500, "blob": "b" * 64}]
    stage_weights.check_disk(args, types.SimpleNamespace(blobs=str(store / "blobs")), files)


def test_a_cold_cache_needs_its_allowance_a_warm_one_does_not(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exc:
        _disk(tmp_path, monkeypatch, free=1500, cached=0)  # 500 + 100 + 1000 needed
    assert exc.value.code == 3
    err = capsys.readouterr().err
    assert "1600 bytes needed" in err and "plus 1000 bytes for the compile caches in" in err, err
    _disk(tmp_path / "warm", monkeypatch, free=1500, cached=800)  # 500 + 100 + 200: fits


def _startcache():
    path = REPO / "sglang_deploy/simulator/sglang_server/src/sglang/_sim/startcache.py"
    spec = importlib.util.spec_from_file_location("sim_startcache", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


INFO = {"model_path": "/m", "tp_size": 2, "dp_size": 1}


def test_the_simulated_start_is_cold_without_a_marker_and_warm_with_one(tmp_path):
    sc = _startcache()
    env = {"SGLANG_CACHE_DIR": str(tmp_path)}
    extra, marker, line = sc.start_delay({"cold_start_s": 6}, env, "0.5.23", INFO)
    assert extra == 6.0 and marker.startswith(str(tmp_path) + "/sglang-sim-start/0.5.23-") and "cold" in line
    assert sc.mark(marker) == "" and Path(marker).is_file()
    assert sc.start_delay({"cold_start_s": 6}, env, "0.5.23", INFO)[:2] == (0.0, marker)
    # another version, model or layout is cold again; the start model off reads and writes nothing
    assert sc.start_delay({"cold_start_s": 6}, env, "0.5.19", INFO)[0] == 6.0
    assert sc.start_delay({"cold_start_s": 6}, env, "0.5.23", {**INFO, "tp_size": 1})[0] == 6.0
    assert sc.start_delay({"cold_start_s": 6}, env, "0.5.23", {**INFO, "model_path": "/n"})[0] == 6.0
    assert sc.start_delay({"cold_start_s": 0}, env, "0.5.23", INFO) == (0.0, None, "")
    assert sc.start_delay({}, env, "0.5.23", INFO) == (0.0, None, "")


def test_the_simulated_start_uses_sglangs_default_without_the_variable_and_survives_a_read_only_cache(tmp_path,
                                                                                                       monkeypatch):
    sc = _startcache()
    monkeypatch.setenv("HOME", str(tmp_path))
    assert sc.cache_dir({}) == str(tmp_path / ".cache" / "sglang")
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert "cannot write the compile-cache marker" in sc.mark(str(blocked / "sglang-sim-start" / "x"))
    assert sc.mark(None) == ""


def test_the_simulator_config_knows_cold_start_s():
    text = (REPO / "sglang_deploy/simulator/sglang_server/src/sglang/_sim/config.py").read_text()
    assert '"cold_start_s": (0.0,' in text and '"cold_start_s")' in text
