"""Peer transfers over PCIe judged by the bridges, over real SSH on a throwaway host: the deploy's
GPU probe and its PCIe reader (deploy/host/pcie_paths.py) run there, the reader on the host's own
/sys/bus/pci/devices, here the stand-in tree of NVIDIA/nccl#2079's machine (its GPUs' bridges with
ACS control 0x001d: sglang_deploy/simulator/sysfs.py) mounted over it, and the simulated NVML
answering for an RTX A6000 pair without its NVLink bridge at that machine's GPU addresses (P2P OK,
as NVML said there).

The first deploy plans around the redirect (no custom allreduce, NCCL_P2P_DISABLE=1, each saying
why); the bridges' ACS is then cleared, as the reporter cleared it (setpci ECAP_ACS+6.w=0000), and
the next deploy brings P2P back with SGLang's own P2P test before custom allreduce. When that
test's result says the copy failed, the deploy after it plans P2P off again, naming the result, and
removes a result from before the last boot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sglang_deploy.simulator import sysfs
from sglang_deploy.simulator.testbed import fleet
from sglang_deploy.simulator.testbed.gpu import stage_gpu_host
from sglang_deploy.simulator.testbed.fleet import build_wheels
import pytest

from tests.conftest import ROOT
from tests.e2e.conftest import NOT_ABOUT_SPEED
from tests.e2e.test_deploy import wait_healthy

NAME = "e2e-pcie"
PORT = 31875  # distinct from every other e2e file: the session's hosts share this machine's network
BUS = ("00000000:41:00.0", "00000000:61:00.0")  # nccl#2079's GPUs, as NVML writes the addresses
BRIDGES = ("0000:40:01.1", "0000:60:01.1")


def _board(root: Path) -> None:
    """The A6000 board without its bridge, at the recorded GPUs' addresses (NODE, P2P OK)."""
    path = root / "etc/sglang-testbed/nvml.json"
    board = json.loads(path.read_text())
    for gpu, bus in zip(board["gpus"], BUS):
        gpu["pci_bus_id"], gpu["nvlinks"] = bus, []
    board["topology"] = [[None, "NODE"], ["NODE", None]]
    board["p2p"]["NVLINK"] = [[None, "NS"], ["NS", None]]
    path.write_text(json.dumps(board))


def _deploy(testbed, host, tmp_path: Path) -> subprocess.CompletedProcess:
    data = {**fleet.host_data("a6000x2-bridge", PORT), "sglang_gate": dict(NOT_ABOUT_SPEED)}
    del data["sglang_gpus"]  # the probe says what the host has: two GPUs over PCIe
    data["sglang_intents"]["tp_size"] = 2
    tmp_path.mkdir(exist_ok=True)
    inventory = testbed.write_inventory(tmp_path / "inventory.py", [host], {NAME: data}, group="gpu_fleet")
    return subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(inventory), "deploy.py"], cwd=ROOT,
                          env={**os.environ, fleet.TOKEN_ENV: "hf_e2e"}, capture_output=True, text=True, timeout=400)


def _argv(host) -> str:
    return (host.root / "etc/systemd/system/sglang.service").read_text()


@pytest.fixture(scope="module")
def booted(testbed, tmp_path_factory):
    """The host and its sysfs tree (nccl#2079's bridges, ACS redirecting)."""
    wheels = tmp_path_factory.mktemp("wheels")
    build_wheels(wheels)
    tree = sysfs.build(tmp_path_factory.mktemp("sysfs"), sysfs.RECORDED["nccl-2079-acs-redirect"],
                       mounted_at=sysfs.ON_HOST)

    def setup(name: str, root: Path) -> None:
        stage_gpu_host(root, wheels, "a6000x2-bridge")
        _board(root)

    host, = testbed.boot([NAME], setup=setup, binds={NAME: sysfs.binds(tree)})
    return host, tree


def test_acs_redirect_plans_p2p_off_and_cleared_acs_brings_it_back_tested(testbed, booted, tmp_path):
    host, tree = booted
    first = _deploy(testbed, host, tmp_path / "first")
    assert first.returncode == 0, (first.stdout + first.stderr)[-6000:]
    wait_healthy(PORT)
    nccl = (host.root / "etc/nccl.conf").read_text()
    assert "NCCL_P2P_DISABLE=1" in nccl
    assert "0000:40:01.1 (ACS control 0x001d: SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+)" in nccl, nccl
    unit = _argv(host)
    assert "--disable-custom-all-reduce" in unit and "--enable-p2p-check" not in unit
    assert "--tp-size 2" in unit
    # what the plan says without deciding on it reaches the operator: the IOMMU that translates
    assert "IOMMU translates the DMA of GPUs 0, 1 (iommu group type DMA)" in first.stdout + first.stderr

    # the reporter's fix, on the bridges the host reads: ACS control cleared
    for bridge in BRIDGES:
        config = next(tree.glob(f"devices/*/{bridge}/config"))
        config.write_bytes(sysfs.config_space(sysfs.AMD, 0))
    second = _deploy(testbed, host, tmp_path / "second")
    assert second.returncode == 0, (second.stdout + second.stderr)[-6000:]
    wait_healthy(PORT)
    assert "NCCL_P2P_DISABLE" not in (host.root / "etc/nccl.conf").read_text()
    unit = _argv(host)
    assert "--disable-custom-all-reduce" not in unit and "--enable-p2p-check" in unit

    # SGLang's P2P test, which --enable-p2p-check runs, finds the copy failing: its result where
    # SGLang writes it (custom_all_reduce_utils.py gpu_p2p_access_check, under SGLANG_CACHE_DIR), in its
    # format; a result from before the boot lies beside it
    cache = next((host.root / "var/lib/sglang/cache").glob("sglang-*"))
    (cache / "gpu_p2p_access_cache_for_0,1.json").write_text(json.dumps(
        {"0->0": True, "0->1": False, "1->0": False, "1->1": True}, indent=4))
    stale = cache / "gpu_p2p_access_cache_for_1,0.json"
    stale.write_text(json.dumps({"0->1": False, "1->0": False}))
    os.utime(stale, (0, 0))
    third = _deploy(testbed, host, tmp_path / "third")
    assert third.returncode == 0, (third.stdout + third.stderr)[-6000:]
    wait_healthy(PORT)
    nccl = (host.root / "etc/nccl.conf").read_text()
    assert "NCCL_P2P_DISABLE=1" in nccl and "SGLang's own P2P test failed between GPUs 0-1" in nccl, nccl
    assert f"{cache.name}/gpu_p2p_access_cache_for_0,1.json" in nccl
    assert "--disable-custom-all-reduce" in _argv(host)
    assert not stale.exists() and (cache / "gpu_p2p_access_cache_for_0,1.json").exists()  # only the stale one
    # status probes as the deploy does: the revision it plans is the one deployed, the test's result read
    seen = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "status",
                           str(tmp_path / "third" / "inventory.py"), "--json"], cwd=ROOT,
                          env={**os.environ, fleet.TOKEN_ENV: "hf_e2e"}, capture_output=True, text=True, timeout=300)
    assert seen.returncode == 0, (seen.stdout + seen.stderr)[-4000:]
    row, = json.loads(seen.stdout)
    assert row["revision"]["running"] == row["revision"]["deployed"] == row["revision"]["planned"], row["revision"]
    # and repeats what the preflight found, as warnings: the host serves as planned
    assert row["state"] == "ok", row
    assert any(w.startswith("preflight: PCIe P2P broken: SGLang's own P2P test failed between GPUs 0-1")
               for w in row["warnings"]), row["warnings"]
    assert any(w.startswith("preflight: IOMMU translates the DMA of GPUs 0, 1") for w in row["warnings"])

