"""The GPU probe (sglang_deploy/deploy/host/gpu_probe.py), run as the deploy runs it: a separate
python process, here against the NVML and nvidia-smi stand-ins
(sglang_deploy/simulator/nvml) answering from device profiles (sglang_deploy/simulator/boards)."""

from __future__ import annotations

import ast
import ctypes
import importlib.util
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_deploy.deploy.host import gpu_probe
from sglang_deploy.plan.hardware import parse_probe, select_gpus
from sglang_deploy.plan.profiles import load_knowledge

from tests.conftest import ROOT, load_probe

PROBE = ROOT / "sglang_deploy" / "deploy" / "host" / "gpu_probe.py"
STANDINS = ROOT / "sglang_deploy" / "simulator" / "nvml"
PROFILES = ROOT / "sglang_deploy" / "simulator" / "boards"
ARCH_OF = load_knowledge().arch_of_capability
BOARDS = ["a6000x2-bridge", "h100x8-nvswitch", "rtx4090x2-pcie"]
NO_DRIVER_LINE = "no NVIDIA driver on this host (NVML: NVML Shared Library Not Found; nvidia-smi: not found)"


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A PATH with a python3 (for the nvidia-smi stand-in's #!) and nothing else."""
    path = tmp_path / "bin"
    path.mkdir()
    py = path / "python3"
    py.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    py.chmod(0o755)
    return path


@pytest.fixture
def smi_dir(bin_dir: Path) -> Path:
    """bin_dir plus the nvidia-smi stand-in."""
    (bin_dir / "nvidia-smi").symlink_to(STANDINS / "nvidia-smi")
    return bin_dir


def run_probe(profile: Path | str | None, path_dir: Path, *, nvml: str = "standin",
              script: Path = PROBE) -> subprocess.CompletedProcess:
    """nvml: "standin" (PYTHONPATH=stand-ins), "none" (python -I -S: no pynvml), "real" (the venv's)."""
    env = {"PATH": str(path_dir), "LANG": "C.UTF-8", "HOME": str(path_dir)}
    if profile is not None:
        env["SGLANG_TESTBED_NVML"] = str(profile)
    argv = [sys.executable, str(script)]
    if nvml == "standin":
        env["PYTHONPATH"] = str(STANDINS)
    elif nvml == "none":
        argv = [sys.executable, "-I", "-S", str(script)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=str(path_dir))


def ok_json(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return json.loads(done.stdout)


def one_line(done: subprocess.CompletedProcess, code: int) -> str:
    assert done.returncode == code, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def write_profile(tmp_path: Path, base: str | None, **changes) -> Path:
    data = json.loads((PROFILES / f"{base}.json").read_text()) if base else {}
    data.update(changes)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    return path


EXPECTED = {
    "a6000x2-bridge": dict(arch="sm86", topology="nvlink-pairs", p2p=True, nvswitch=False, geforce=False),
    "h100x8-nvswitch": dict(arch="sm90", topology="nvswitch", p2p=True, nvswitch=True, geforce=False),
    "rtx4090x2-pcie": dict(arch="sm89", topology="pcie", p2p=False, nvswitch=False, geforce=True),
}


# ---------------------------------------------------------------------------
# NVML path


@pytest.mark.parametrize("board", BOARDS)
def test_nvml_path_reproduces_the_probe_fixture(board, bin_dir):
    probe = ok_json(run_probe(PROFILES / f"{board}.json", bin_dir))
    fixture = load_probe(board)
    assert probe["source"] == "nvml"
    for key in ("schema", "source", "driver_version", "cuda_driver_version", "gpus", "topology"):
        assert probe[key] == fixture[key], key
    assert set(probe) == set(fixture)

    hw = parse_probe(board, probe)
    gpus = select_gpus(board, hw, ARCH_OF)
    want = EXPECTED[board]
    assert (gpus.arch, gpus.topology, gpus.p2p, gpus.nvswitch, gpus.geforce) == (
        want["arch"], want["topology"], want["p2p"], want["nvswitch"], want["geforce"])
    assert hw.source == "probe:nvml"


def test_probe_runs_standalone_from_any_directory(tmp_path, bin_dir):
    alone = tmp_path / "elsewhere" / "gpu_probe.py"
    alone.parent.mkdir()
    shutil.copy(PROBE, alone)
    probe = ok_json(run_probe(PROFILES / "a6000x2-bridge.json", bin_dir, script=alone))
    assert probe["gpus"] == load_probe("a6000x2-bridge")["gpus"]


def test_probe_runs_from_stdin_as_the_deploy_sends_it(bin_dir):
    """sglang_deploy/deploy/facts.py pipes the file into `python3 -`."""
    env = {"PATH": str(bin_dir), "PYTHONPATH": str(STANDINS),
           "SGLANG_TESTBED_NVML": str(PROFILES / "rtx4090x2-pcie.json")}
    done = subprocess.run([sys.executable, "-"], input=PROBE.read_text(), env=env, capture_output=True,
                          text=True, timeout=120)
    assert ok_json(done)["topology"] == load_probe("rtx4090x2-pcie")["topology"]


@pytest.mark.parametrize("how", ["errors", "absent_functions"])
def test_nvswitch_inferred_where_remote_device_type_is_missing(tmp_path, bin_dir, how):
    name = "nvmlDeviceGetNvLinkRemoteDeviceType"
    change = {"errors": {name: "FUNCTION_NOT_FOUND"}} if how == "errors" else {"absent_functions": [name]}
    probe = ok_json(run_probe(write_profile(tmp_path, "h100x8-nvswitch", **change), bin_dir))
    assert probe["topology"] == load_probe("h100x8-nvswitch")["topology"]

    probe = ok_json(run_probe(write_profile(tmp_path, "a6000x2-bridge", **change), bin_dir))
    assert probe["topology"] == load_probe("a6000x2-bridge")["topology"]


# ---------------------------------------------------------------------------
# The NVLink fabric (nvmlDeviceGetGpuFabricInfo[V]); the recorded answers: tests/test_fabric.py


def h100_with_fabrics(tmp_path: Path, fabrics: dict, **changes) -> Path:
    """The HGX H100 board with some GPUs' ``fabric`` replaced (index -> profile entry)."""
    data = json.loads((PROFILES / "h100x8-nvswitch.json").read_text())
    for index, fabric in fabrics.items():
        data["gpus"][index]["fabric"] = fabric
    data.update(changes)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    return path


def systemctl_standin(bin_dir: Path, answer: str) -> Path:
    """A `systemctl` on PATH that answers `is-active` with ``answer`` and notes each call."""
    calls = bin_dir / "systemctl.calls"
    script = bin_dir / "systemctl"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\necho {answer}\n[ "{answer}" = active ]\n')
    script.chmod(0o755)
    return calls


def test_probe_reports_each_gpus_fabric_state(tmp_path, bin_dir):
    calls = systemctl_standin(bin_dir, "failed")
    profile = h100_with_fabrics(tmp_path, {
        1: {"state": "IN_PROGRESS"},
        2: {"state": "NOT_STARTED"},
        3: {"state": "COMPLETED", "status": "INSUFFICIENT_RESOURCES"},
        4: {"state": "NOT_SUPPORTED"},
        5: None,
    })
    probe = ok_json(run_probe(profile, bin_dir))
    assert [g["fabric"] for g in probe["gpus"]] == [
        {"state": "COMPLETED", "status": "SUCCESS"}, {"state": "IN_PROGRESS", "status": None},
        {"state": "NOT_STARTED", "status": None}, {"state": "COMPLETED", "status": "INSUFFICIENT_RESOURCES"},
        None, None, {"state": "COMPLETED", "status": "SUCCESS"}, {"state": "COMPLETED", "status": "SUCCESS"}]
    assert probe["fabric_manager"] == "failed"
    assert calls.read_text() == "is-active nvidia-fabricmanager.service\n"
    hw = parse_probe("g", probe)
    assert [g.fabric.ready if g.fabric else None for g in hw.gpus] == [True, False, False, False, None, None,
                                                                       True, True]


def test_probe_asks_systemd_only_where_a_gpu_is_on_a_fabric(tmp_path, bin_dir):
    calls = systemctl_standin(bin_dir, "active")
    probe = ok_json(run_probe(PROFILES / "a6000x2-bridge.json", bin_dir))
    assert [g["fabric"] for g in probe["gpus"]] == [None, None] and probe["fabric_manager"] is None
    assert not calls.exists()
    probe = ok_json(run_probe(PROFILES / "h100x8-nvswitch.json", bin_dir))
    assert probe["fabric_manager"] == "active" == load_probe("h100x8-nvswitch")["fabric_manager"]
    assert [g["fabric"] for g in probe["gpus"]] == [g["fabric"] for g in load_probe("h100x8-nvswitch")["gpus"]]


def test_a_systemctl_that_hangs_costs_the_bound_not_the_probe(tmp_path, bin_dir):
    script = bin_dir / "systemctl"
    script.write_text("#!/bin/sh\nexec /bin/sleep 120\n")
    script.chmod(0o755)
    probe = ok_json(run_probe(PROFILES / "h100x8-nvswitch.json", bin_dir))
    assert probe["fabric_manager"] is None
    assert probe["gpus"][0]["fabric"] == {"state": "COMPLETED", "status": "SUCCESS"}
    assert gpu_probe.SYSTEMCTL_TIMEOUT_S == 10


@pytest.mark.parametrize("change", [
    {"absent_functions": ["nvmlDeviceGetGpuFabricInfoV"]},          # nvidia-ml-py before the V call
    {"errors": {"nvmlDeviceGetGpuFabricInfoV": "FUNCTION_NOT_FOUND"}},  # a driver before it
    {"errors": {"nvmlDeviceGetGpuFabricInfoV": "ARGUMENT_VERSION_MISMATCH"}},
])
def test_probe_falls_back_to_the_unversioned_call(tmp_path, bin_dir, change):
    profile = h100_with_fabrics(tmp_path, {2: {"state": "IN_PROGRESS"}}, **change)
    probe = ok_json(run_probe(profile, bin_dir))
    assert probe["gpus"][2]["fabric"] == {"state": "IN_PROGRESS", "status": None}
    assert probe["gpus"][0]["fabric"] == {"state": "COMPLETED", "status": "SUCCESS"}


@pytest.mark.parametrize("change", [
    {"absent_functions": ["nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"]},
    {"errors": {"nvmlDeviceGetGpuFabricInfoV": "FUNCTION_NOT_FOUND",
                "nvmlDeviceGetGpuFabricInfo": "FUNCTION_NOT_FOUND"}},
])
def test_probe_without_the_calls_reports_no_fabric_and_the_plan_is_todays(tmp_path, bin_dir, change):
    probe = ok_json(run_probe(h100_with_fabrics(tmp_path, {}, **change), bin_dir))
    assert [g["fabric"] for g in probe["gpus"]] == [None] * 8 and probe["fabric_manager"] is None
    assert parse_probe("g", probe).gpus[0].fabric is None


def test_an_nvml_error_on_the_fabric_call_is_reported_not_fatal(tmp_path, bin_dir):
    profile = h100_with_fabrics(tmp_path, {}, errors={"nvmlDeviceGetGpuFabricInfoV": "UNKNOWN"})
    probe = ok_json(run_probe(profile, bin_dir))
    assert [g["fabric"] for g in probe["gpus"]] == [{"state": "UNREADABLE", "status": "UNKNOWN"}] * 8
    assert parse_probe("g", probe).gpus[0].fabric.ready is False


def test_unsupported_calls_are_no_data_not_a_crash(tmp_path, bin_dir):
    profile = write_profile(tmp_path, "rtx4090x2-pcie", errors={
        "nvmlDeviceGetBrand": "NOT_SUPPORTED",
        "nvmlDeviceGetP2PStatus": "NOT_SUPPORTED",
        "nvmlDeviceGetTopologyCommonAncestor": "NOT_SUPPORTED",
        "nvmlSystemGetCudaDriverVersion_v2": "FUNCTION_NOT_FOUND",
    })
    probe = ok_json(run_probe(profile, bin_dir))
    assert [g["brand"] for g in probe["gpus"]] == [None, None]
    assert probe["topology"] == {"links": [["X", "SYS"], ["SYS", "X"]],
                                 "p2p_read": [[None, None], [None, None]], "nvswitch": False}
    assert probe["cuda_driver_version"] == "13.0"  # from nvmlSystemGetCudaDriverVersion
    gpus = select_gpus("g", parse_probe("g", probe), ARCH_OF)
    assert gpus.geforce  # from the name when NVML gives no brand


# ---------------------------------------------------------------------------
# nvidia-smi fallback


@pytest.mark.parametrize("board", BOARDS)
def test_nvidia_smi_fallback_gives_the_same_gpus_and_links(board, smi_dir):
    probe = ok_json(run_probe(PROFILES / f"{board}.json", smi_dir, nvml="none"))
    fixture = load_probe(board)
    assert probe["source"] == "nvidia-smi"
    for key in ("schema", "driver_version", "cuda_driver_version"):
        assert probe[key] == fixture[key], key
    # the fabric state is NVML's alone: the fallback reports none (the planner: unknown)
    assert probe["gpus"] == [{**gpu, "fabric": None} for gpu in fixture["gpus"]]
    assert probe["fabric_manager"] is None
    assert probe["topology"]["links"] == fixture["topology"]["links"]
    assert probe["topology"]["nvswitch"] == fixture["topology"]["nvswitch"]
    assert probe["topology"]["p2p_read"] is None

    hw = parse_probe(board, probe)
    gpus = select_gpus(board, hw, ARCH_OF)
    want = EXPECTED[board]
    assert (gpus.arch, gpus.topology, gpus.geforce) == (want["arch"], want["topology"], want["geforce"])
    assert hw.source == "probe:nvidia-smi"


def test_fallback_when_nvml_library_is_missing_but_nvidia_smi_works(tmp_path, smi_dir):
    """The bindings are there, libnvidia-ml is not found by them: nvidia-smi answers."""
    real = run_probe(PROFILES / "a6000x2-bridge.json", smi_dir, nvml="real")
    if real.returncode == 0 and json.loads(real.stdout)["source"] == "nvml":
        pytest.skip("this machine has a real NVML library")
    probe = ok_json(real)
    assert probe["source"] == "nvidia-smi"
    assert probe["topology"]["links"] == load_probe("a6000x2-bridge")["topology"]["links"]


def test_parse_topo_matrix_real_layouts():
    one = "\x1b[4m\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \t0-31\t0\t\tN/A\n\nLegend:\n"
    assert gpu_probe.parse_topo_matrix(one, 1) == [["X"]]
    nics = (
        "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tSOC\tPXB\t0-23\t0\t\tN/A\n"
        "GPU1\tSOC\t X \tSYS\t24-47\t1\t\tN/A\n"
        "NIC0\tPXB\tSYS\t X \n\nLegend:\n  X    = Self\n"
    )
    assert gpu_probe.parse_topo_matrix(nics, 2) == [["X", "SYS"], ["SYS", "X"]]
    assert gpu_probe.parse_topo_matrix("garbage", 2) is None
    assert gpu_probe.parse_topo_matrix(nics, 3) is None  # not the GPUs the query listed


@pytest.mark.parametrize("name,brand", [
    ("NVIDIA RTX A6000", "NVIDIA_RTX"), ("NVIDIA RTX 6000 Ada Generation", "NVIDIA_RTX"),
    ("NVIDIA GeForce RTX 4090", "GEFORCE"), ("NVIDIA H100 80GB HBM3", "NVIDIA"),
    ("Quadro RTX 8000", "QUADRO_RTX"), ("Tesla V100-SXM2-32GB", "TESLA"), ("NVIDIA TITAN RTX", "TITAN"),
])
def test_brand_from_name(name, brand):
    assert gpu_probe._brand_from_name(name) == brand


def test_nvswitch_from_topo_alone():
    def mesh(n, nv):
        return [["X" if i == j else nv for j in range(n)] for i in range(n)]
    assert gpu_probe._smi_nvswitch(mesh(8, "NV18")) is True   # HGX H100
    assert gpu_probe._smi_nvswitch(mesh(8, "NV12")) is True   # HGX A100
    assert gpu_probe._smi_nvswitch(mesh(4, "NV4")) is False   # HGX A100 4-GPU: direct mesh
    assert gpu_probe._smi_nvswitch(mesh(2, "NV4")) is False


# ---------------------------------------------------------------------------
# No driver, no GPU, failures


def test_no_driver_and_no_nvidia_smi(bin_dir, tmp_path):
    line = one_line(run_probe(tmp_path / "absent.json", bin_dir), 3)
    assert line == NO_DRIVER_LINE


def test_no_driver_without_pynvml(bin_dir, tmp_path):
    line = one_line(run_probe(tmp_path / "absent.json", bin_dir, nvml="none"), 3)
    assert line == "no NVIDIA driver on this host (NVML: pynvml not installed; nvidia-smi: not found)"


def test_no_driver_with_nvidia_smi_that_cannot_reach_it(smi_dir, tmp_path):
    line = one_line(run_probe(tmp_path / "absent.json", smi_dir), 3)
    assert line.startswith("no NVIDIA driver on this host (NVML: NVML Shared Library Not Found; nvidia-smi: ")
    assert "couldn't communicate with the NVIDIA driver" in line

    profile = write_profile(tmp_path, "a6000x2-bridge", driver_loaded=False)
    line = one_line(run_probe(profile, smi_dir), 3)
    assert line.startswith("no NVIDIA driver on this host (NVML: Driver Not Loaded; nvidia-smi: ")


def test_real_nvidia_ml_py_on_this_gpu_less_machine(bin_dir):
    pytest.importorskip("pynvml")
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        pass
    else:
        pytest.skip("this machine has an NVIDIA driver")
    assert one_line(run_probe(None, bin_dir, nvml="real"), 3) == NO_DRIVER_LINE


@pytest.mark.parametrize("nvml,dir_fixture", [("standin", "bin_dir"), ("none", "smi_dir")])
def test_driver_but_no_gpu(tmp_path, request, nvml, dir_fixture):
    profile = write_profile(tmp_path, None, driver_version="550.127.05", cuda_driver_version=12040, gpus=[])
    line = one_line(run_probe(profile, request.getfixturevalue(dir_fixture), nvml=nvml), 3)
    assert line == "NVIDIA driver present but no GPU"


def test_unexpected_failures_are_exit_4_with_one_line(tmp_path, bin_dir, smi_dir):
    profile = write_profile(tmp_path, "a6000x2-bridge", errors={"nvmlDeviceGetName": "GPU_IS_LOST"})
    assert "GPU is lost" in one_line(run_probe(profile, bin_dir), 4)

    profile = write_profile(tmp_path, "a6000x2-bridge", errors={"nvmlInit": "NO_PERMISSION"})
    assert one_line(run_probe(profile, bin_dir), 4) == "NVML failed to start: Insufficient Permissions"

    profile.write_text("{not json")
    line = one_line(run_probe(profile, bin_dir), 4)
    assert line.startswith("gpu probe failed: ProfileError: ")

    line = one_line(run_probe(profile, smi_dir, nvml="none"), 4)
    assert line.startswith("nvidia-smi --query-gpu=index,name,uuid,compute_cap,memory.total,pci.bus_id failed")


# ---------------------------------------------------------------------------
# The probe file itself


def test_probe_is_stdlib_only_and_python39_syntax():
    source = PROBE.read_text()
    tree = ast.parse(source, feature_version=(3, 9))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert imported - set(sys.stdlib_module_names) == {"pynvml"}
    assert source.startswith("#!/usr/bin/env python3\n")


# ---------------------------------------------------------------------------
# The stand-ins are faithful to nvidia-ml-py and nvidia-smi


def load_standin(monkeypatch, profile: Path | str):
    monkeypatch.setenv("SGLANG_TESTBED_NVML", str(profile))
    package = STANDINS / "pynvml"
    spec = importlib.util.spec_from_file_location("_standin_pynvml_under_test", package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        for name in [n for n in sys.modules if n == spec.name or n.startswith(spec.name + ".")]:
            del sys.modules[name]
    return module


def test_standin_matches_nvidia_ml_py(monkeypatch, tmp_path):
    real = pytest.importorskip("pynvml")
    if not hasattr(real, "nvmlDeviceGetNvLinkRemoteDeviceType"):
        pytest.skip("an nvidia-ml-py older than the stand-in")
    fake = load_standin(monkeypatch, tmp_path / "absent.json")
    functions = [n for n, v in vars(fake).items() if n.startswith("nvml") and inspect.isfunction(v)]
    assert "nvmlDeviceGetComputeRunningProcesses" in functions
    for name in functions:
        assert hasattr(real, name), name
        assert list(inspect.signature(getattr(fake, name)).parameters) == \
            list(inspect.signature(getattr(real, name)).parameters), name
    for name, value in vars(fake).items():
        if name.startswith("NVML_") and isinstance(value, (int, str, tuple)):
            assert getattr(real, name) == value, name
        if name.startswith("NVMLError_"):
            assert getattr(real, name).__name__ == value.__name__
    for cls in ("nvmlPciInfo_t", "c_nvmlMemory_t"):
        assert getattr(fake, cls)._fields_ == getattr(real, cls)._fields_
    with pytest.raises(fake.NVMLError_LibraryNotFound) as exc:
        fake.nvmlInit()
    assert str(exc.value) == "NVML Shared Library Not Found"


def test_standin_return_types(monkeypatch):
    nv = load_standin(monkeypatch, PROFILES / "a6000x2-bridge.json")
    with pytest.raises(nv.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()
    nv.nvmlInit()
    try:
        h = nv.nvmlDeviceGetHandleByIndex(0)
        assert nv.nvmlDeviceGetMemoryInfo(h).total == 49140 * 1024 * 1024
        pci = nv.nvmlDeviceGetPciInfo(h)
        assert pci.busId == b"00000000:01:00.0" and pci.busIdLegacy == b"0000:01:00.0" and pci.bus == 1
        assert nv.nvmlDeviceGetCudaComputeCapability(h) == (8, 6)
        assert nv.nvmlDeviceGetBrand(h) == nv.NVML_BRAND_NVIDIA_RTX
        assert nv.nvmlDeviceGetNvLinkRemotePciInfo(h, 3).busId == b"00000000:21:00.0"
        with pytest.raises(nv.NVMLError_InvalidArgument):
            nv.nvmlDeviceGetNvLinkState(h, 4)
        with pytest.raises(ctypes.ArgumentError):  # nvidia-ml-py's tuple constant, as ctypes treats it
            nv.nvmlDeviceGetP2PStatus(h, nv.nvmlDeviceGetHandleByIndex(1), nv.NVML_P2P_CAPS_INDEX_READ)
        assert nv.nvmlDeviceGetP2PStatus(h, nv.nvmlDeviceGetHandleByIndex(1), 0) == nv.NVML_P2P_STATUS_OK
        assert nv.nvmlDeviceGetComputeRunningProcesses(h) == []
    finally:
        nv.nvmlShutdown()


def test_standin_processes_inline_file_and_directory(monkeypatch, tmp_path):
    base = json.loads((PROFILES / "a6000x2-bridge.json").read_text())
    gib = 1024 ** 3

    def pids(profile_changes):
        path = tmp_path / "p.json"
        path.write_text(json.dumps({**base, **profile_changes}))
        nv = load_standin(monkeypatch, path)
        nv.nvmlInit()
        try:
            hs = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
            return [[(p.pid, p.usedGpuMemory) for p in nv.nvmlDeviceGetComputeRunningProcesses(h)] for h in hs], \
                nv.nvmlDeviceGetMemoryInfo(hs[0]).used
        finally:
            nv.nvmlShutdown()

    entry = {"pid": 4242, "gpus": [0, "GPU-00000000-0000-0000-0000-000000000001"], "used_memory_bytes": gib}
    assert pids({"processes": [entry]}) == ([[(4242, gib)], [(4242, gib)]], gib)

    (tmp_path / "procs.json").write_text(json.dumps([{"pid": 7, "gpus": [1]}]))
    assert pids({"processes": "procs.json"}) == ([[], [(7, None)]], 0)

    procs = tmp_path / "procs.d"
    assert pids({"processes": "procs.d"}) == ([[], []], 0)  # not there yet: nothing runs
    procs.mkdir()
    (procs / f"{os.getpid()}.json").write_text(json.dumps({"pid": os.getpid(), "used_memory_bytes": 2 * gib}))
    (procs / "999999999.json").write_text(json.dumps({"pid": 999999999, "gpus": [0]}))
    got, used = pids({"processes": str(procs), "processes_must_be_alive": True})
    assert got == [[(os.getpid(), 2 * gib)], [(os.getpid(), 2 * gib)]] and used == 2 * gib


def test_nvidia_smi_standin_queries(tmp_path, smi_dir):
    base = json.loads((PROFILES / "h100x8-nvswitch.json").read_text())
    base["processes"] = [{"pid": 31337, "gpus": [3], "used_memory_bytes": 1024 ** 3}]
    profile = tmp_path / "h.json"
    profile.write_text(json.dumps(base))
    env = {"PATH": str(smi_dir), "SGLANG_TESTBED_NVML": str(profile)}

    def smi(*args):
        done = subprocess.run(["nvidia-smi", *args], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert smi("--query-gpu=index,memory.total", "--format=csv").splitlines()[:2] == [
        "index, memory.total [MiB]", "0, 81559 MiB"]
    assert smi("--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits").strip() == \
        "31337, GPU-00000000-0000-0000-0000-000000000003, 1024"
    assert "CUDA Version: 13.0" in smi() and "Driver Version: 580.65.06" in smi()
    assert smi("-L").splitlines()[0] == "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)"
    assert os.access(STANDINS / "nvidia-smi", os.X_OK)
    assert gpu_probe.parse_topo_matrix(smi("topo", "-m"), 8) == load_probe("h100x8-nvswitch")["topology"]["links"]
