"""The GPU health host script (sglang_deploy/deploy/host/gpu_health.py) against the NVML stand-in:
healthy boards as the recorded nvidia-smi -q of such boards show them, every fault file of
sglang_deploy/simulator/boards/faults, the server's processes told from foreign ones, XID lines
in the driver's format, and the script run as the host runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_deploy.deploy.host import gpu_health
from tests.conftest import ROOT
from tests.test_gpu_probe import PROFILES, STANDINS, load_standin

SCRIPT = ROOT / "sglang_deploy" / "deploy" / "host" / "gpu_health.py"
FAULTS = PROFILES / "faults"
GIB = 1024 ** 3

# XID lines as NVIDIA's "GPU Memory Error Management" document (its XID log examples) and the
# XID catalog print them; the first with dmesg's timestamp in front.
XID_LINES = [
    "[ 1234.567890] NVRM: Xid (PCI:0000:2a:00): 79, pid=2345, name=python3, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:2A:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No",
    "NVRM: Xid (PCI:0000:18:00): 64, pid='<unknown>', name=<unknown>, Row Remapper: Failed to remap row",
    "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error",
    "kernel: usb 1-1: new high-speed USB device",
]


def health(monkeypatch, tmp_path: Path, board: str, fault: str | None = None, *, pids=(), log=None,
           **changes) -> dict:
    """read_health against ``board`` (with ``fault`` as its faults file, ``changes`` over the profile)."""
    data = json.loads((PROFILES / f"{board}.json").read_text())
    data.update(changes)
    (tmp_path / "nvml.json").write_text(json.dumps(data))
    if fault:
        shutil.copy(FAULTS / f"{fault}.json", tmp_path / "gpu-faults.json")
    nv = load_standin(monkeypatch, tmp_path / "nvml.json")
    return gpu_health.read_health(nv, pids, log)


@pytest.mark.parametrize("board", ["a6000x2-bridge", "h100x8-nvswitch", "rtx4090x2-pcie"])
def test_a_healthy_board_reports_what_nvidia_smi_shows_for_one(monkeypatch, tmp_path, board):
    doc = health(monkeypatch, tmp_path, board, log=[])
    assert doc["error"] is None and doc["schema"] == 1
    ecc_board = board.startswith("h100")  # the A6000 and 4090 profiles run with ECC off (their full memory)
    for i, gpu in enumerate(doc["gpus"]):
        assert gpu["index"] == i and gpu["uuid"].startswith("GPU-") and gpu["bus_id"].startswith("00000000:")
        assert gpu["ecc"] == ({"uncorrected": 0, "corrected": 0} if ecc_board else None)
        assert gpu["retired_pages"] is None  # Ampere and later: N/A, row remapping instead
        assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
        assert gpu["clocks_event_reasons"] == ["gpu_idle"]
        assert gpu["foreign_processes"] == [] and gpu["foreign_memory_bytes"] == 0
        assert gpu["xid"] == {"count": 0, "last": None}
    assert json.loads(json.dumps(doc)) == doc


@pytest.mark.parametrize("fault, board, index, field, want", [
    ("row-remap-failure", "a6000x2-bridge", 1, "remapped_rows",
     {"correctable": 0, "uncorrectable": 1, "pending": False, "failure": True}),
    ("row-remap-pending", "h100x8-nvswitch", 0, "remapped_rows",
     {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False}),
    ("ecc-uncorrected", "h100x8-nvswitch", 3, "ecc", {"uncorrected": 2, "corrected": 5}),
    ("hw-thermal-slowdown", "rtx4090x2-pcie", 0, "clocks_event_reasons", ["hw_slowdown", "hw_thermal_slowdown"]),
    ("foreign-process", "a6000x2-bridge", 0, "foreign_processes", [{"pid": 4242, "used_bytes": 2 * GIB}]),
])
def test_each_fault_file_shows_on_its_gpu_alone(monkeypatch, tmp_path, fault, board, index, field, want):
    healthy = health(monkeypatch, tmp_path, board)
    faulty = health(monkeypatch, tmp_path, board, fault)
    assert faulty["gpus"][index][field] == want != healthy["gpus"][index][field]
    for i, (a, b) in enumerate(zip(healthy["gpus"], faulty["gpus"])):
        if i != index:
            assert a == b
    if fault == "foreign-process":
        assert faulty["gpus"][0]["foreign_memory_bytes"] == 2 * GIB
    (tmp_path / "gpu-faults.json").unlink()  # removed: healthy again, read on every call
    assert health(monkeypatch, tmp_path, board) == healthy


def test_retired_pages_on_a_board_that_retires_pages(monkeypatch, tmp_path):
    """Pre-Ampere boards retire pages (nvmlDeviceGetRetiredPages lists addresses, the pending status
    is NVML_FEATURE_ENABLED while a retirement waits for a reset): counted, pending a bool."""
    data = json.loads((PROFILES / "h100x8-nvswitch.json").read_text())
    data["gpus"][2]["health"]["retired_pages"] = {"single_bit": ["0x1f2e3000", "0x1f2e4000"],
                                                  "double_bit": ["0x2a000000"], "pending": True}
    data["gpus"][3]["health"]["retired_pages"] = {"single_bit": [], "double_bit": [], "pending": False}
    (tmp_path / "nvml.json").write_text(json.dumps(data))
    doc = gpu_health.read_health(load_standin(monkeypatch, tmp_path / "nvml.json"), (), None)
    assert doc["gpus"][2]["retired_pages"] == {"single_bit": 2, "double_bit": 1, "pending": True}
    assert doc["gpus"][3]["retired_pages"] == {"single_bit": 0, "double_bit": 0, "pending": False}
    assert all(g["xid"] is None for g in doc["gpus"])  # no kernel log given: unknown, not zero


def test_the_server_and_its_children_are_not_foreign(monkeypatch, tmp_path):
    procs = [{"pid": 100, "gpus": [0, 1], "used_memory_bytes": 40 * GIB},  # the server
             {"pid": 101, "gpus": [1], "used_memory_bytes": 30 * GIB},  # its TP worker
             {"pid": 555, "gpus": [1], "used_memory_bytes": GIB},  # someone else's
             {"pid": 556, "gpus": [1]}]  # NVML cannot tell its memory
    graphics = [{"pid": 555, "gpus": [1], "used_memory_bytes": 2 * GIB}]  # in both lists: once, the larger
    doc = health(monkeypatch, tmp_path, "a6000x2-bridge", pids={100, 101}, processes=procs,
                 graphics_processes=graphics)
    assert doc["gpus"][0]["foreign_processes"] == [] and doc["gpus"][0]["foreign_memory_bytes"] == 0
    assert doc["gpus"][1]["foreign_processes"] == [{"pid": 555, "used_bytes": 2 * GIB},
                                                   {"pid": 556, "used_bytes": None}]
    assert doc["gpus"][1]["foreign_memory_bytes"] == 2 * GIB
    everyone = health(monkeypatch, tmp_path, "a6000x2-bridge", pids=(), processes=procs)
    assert everyone["gpus"][1]["foreign_memory_bytes"] == 71 * GIB


def test_not_supported_calls_are_null_and_a_lost_gpu_is_an_error(monkeypatch, tmp_path):
    doc = health(monkeypatch, tmp_path, "h100x8-nvswitch",
                 errors={"nvmlDeviceGetTotalEccErrors": "NOT_SUPPORTED", "nvmlDeviceGetRemappedRows": "NOT_SUPPORTED",
                         "nvmlDeviceGetCurrentClocksEventReasons": "FUNCTION_NOT_FOUND"})
    gpu = doc["gpus"][0]
    assert doc["error"] is None and gpu["ecc"] is None and gpu["remapped_rows"] is None
    assert gpu["clocks_event_reasons"] == ["gpu_idle"]  # from the older ...ThrottleReasons
    lost = health(monkeypatch, tmp_path, "h100x8-nvswitch", errors={"nvmlDeviceGetRemappedRows": "GPU_IS_LOST"})
    assert lost["gpus"] == [] and "GPU is lost" in lost["error"]
    none = gpu_health.read_health(load_standin(monkeypatch, tmp_path / "absent.json"), (), [])
    assert none == {"schema": 1, "error": "NVML failed to start: NVML Shared Library Not Found", "gpus": []}
    assert gpu_health.read_health(None, (), [])["error"] == "pynvml not installed"


def test_xid_lines_are_counted_per_gpu_by_bus_id(monkeypatch, tmp_path):
    doc = health(monkeypatch, tmp_path, "h100x8-nvswitch", log=XID_LINES)
    by_bus = {g["bus_id"]: g["xid"] for g in doc["gpus"]}
    assert by_bus["00000000:2A:00.0"] == {"count": 2, "last": 94}
    assert by_bus["00000000:18:00.0"] == {"count": 1, "last": 64}
    assert by_bus["00000000:3A:00.0"] == {"count": 0, "last": None}  # SXid and other lines are not XIDs
    flood = ["NVRM: Xid (PCI:0000:18:00): 13, pid=1, Graphics Exception"] * (gpu_health.MAX_KERNEL_LOG_LINES + 50)
    assert gpu_health.parse_xids(flood)[(0, 0x18, 0)]["count"] == gpu_health.MAX_KERNEL_LOG_LINES


def test_reason_names_follow_nvml_h_bits():
    assert gpu_health.reason_names(0) == []
    assert gpu_health.reason_names(0x1 | 0x4 | 0x80) == ["gpu_idle", "sw_power_cap", "hw_power_brake_slowdown"]
    assert gpu_health.reason_names(0x1000) == ["bit_0x1000"]


def test_server_pids_walk_proc_for_descendants(tmp_path):
    def proc(pid, ppid, comm="python3"):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194304 0\n")

    proc(1, 0, "systemd")
    proc(100, 1)
    proc(101, 100, "sglang::scheduler ) (x")  # comm with a parenthesis and spaces
    proc(102, 101)
    proc(200, 1)
    (tmp_path / "self").mkdir()
    assert gpu_health.server_pids(100, str(tmp_path)) == {100, 101, 102}
    assert gpu_health.server_pids(None, str(tmp_path)) == set()
    assert gpu_health.server_pids(7, str(tmp_path / "nope")) == {7}


def run_script(tmp_path: Path, *args: str, board: str = "a6000x2-bridge") -> dict:
    shutil.copy(PROFILES / f"{board}.json", tmp_path / "nvml.json")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(STANDINS), "SGLANG_TESTBED_NVML": str(tmp_path / "nvml.json")}
    done = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert len(done.stdout.splitlines()) == 1
    return json.loads(done.stdout)


def test_the_script_runs_standalone_with_a_kernel_log_file(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("\n".join(XID_LINES + ["NVRM: Xid (PCI:0000:21:00): 48, pid=9, DBE"]) + "\n")
    shutil.copy(FAULTS / "row-remap-failure.json", tmp_path / "gpu-faults.json")
    doc = run_script(tmp_path, "--server-pid", str(os.getpid()), "--kernel-log", str(log))
    assert doc["gpus"][1]["xid"] == {"count": 1, "last": 48} and doc["gpus"][0]["xid"]["count"] == 0
    assert doc["gpus"][1]["remapped_rows"]["failure"] is True
    assert all(g["xid"] is None for g in run_script(tmp_path, "--kernel-log", "none")["gpus"])
    assert all(g["xid"] is None for g in run_script(tmp_path, "--kernel-log", str(tmp_path / "missing"))["gpus"])
    older = json.loads((PROFILES / "a6000x2-bridge.json").read_text())
    older["absent_functions"] = ["nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetGraphicsRunningProcesses"]
    (tmp_path / "older.json").write_text(json.dumps(older))
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(STANDINS), "SGLANG_TESTBED_NVML": str(tmp_path / "older.json")}
    done = subprocess.run([sys.executable, str(SCRIPT), "--kernel-log", "none"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert json.loads(done.stdout)["gpus"][0]["clocks_event_reasons"] == ["gpu_idle"]  # an older nvidia-ml-py


def test_journal_reading_tells_no_xids_from_no_log(monkeypatch, tmp_path):
    def journal(script: str) -> list[str] | None:
        path = tmp_path / "journalctl"
        path.write_text("#!/bin/sh\n" + script)
        path.chmod(0o755)
        monkeypatch.setattr(gpu_health, "JOURNAL_COMMAND", [str(path)])
        monkeypatch.setattr(gpu_health.os, "geteuid", lambda: 0)
        return gpu_health.journal_xid_lines(timeout=5)

    assert journal(f"printf '%s\\n' '{XID_LINES[1]}'\n") == [XID_LINES[1]]
    assert journal("echo '-- No entries --'; exit 1\n") == []  # -g matched nothing
    assert journal("echo 'Compiled without pattern matching support' >&2; exit 1\n") is None
    assert journal("sleep 10\n") is None  # too slow: not read, never waited for
    monkeypatch.setattr(gpu_health, "JOURNAL_COMMAND", [str(tmp_path / "absent")])
    assert gpu_health.journal_xid_lines() is None
