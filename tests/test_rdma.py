"""A prefill or decode server's RDMA devices from the probe (sglang_deploy/plan/rdma.py): the probe's
sysfs reader (sglang_deploy/deploy/host/pcie_paths.py) against a stand-in sysfs tree laid out from a
recorded 8-GPU node with ten RDMA devices (deepseek-ai/DeepEP#223: sglang_deploy/simulator/sysfs.py
RECORDED, the GPUs served by the simulated NVML of an 8x H100 board at the tree's addresses), the
fact's reading of it, and the plan's --disaggregation-ib-device: the devices below each GPU's
switch, never a port that is down or a device on another socket."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from sglang_deploy.deploy.facts import GpuProbe
from sglang_deploy.deploy.host import gpu_probe, pcie_paths
from sglang_deploy.errors import PlanError
from sglang_deploy.plan import rdma, replicas
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.simulator import sysfs
from tests.conftest import ROOT

TREE = sysfs.RECORDED["deepep-223-h20x8"]
ROLE = {"sglang_model": "Qwen/Qwen3-32B", "sglang_gateways": ["gw"], "sglang_role": "prefill"}


@pytest.fixture
def probe(tmp_path, monkeypatch) -> dict:
    """The GPU probe and the PCIe reader, in process, as the deploy's fact reads their output."""
    from sglang_deploy.simulator.nvml import pynvml as nvml

    board = json.loads((ROOT / "sglang_deploy/simulator/boards/h100x8-nvswitch.json").read_text())
    for gpu, recorded in zip(board["gpus"], TREE.gpus):
        gpu["pci_bus_id"] = "0000" + recorded.address.upper()
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(board))
    monkeypatch.setenv("SGLANG_TESTBED_NVML", str(path))
    # NVSwitch GPUs: the probe asks systemd for the Fabric Manager; here it is up, without a process
    monkeypatch.setattr(gpu_probe, "_fabric_manager", lambda: "active")
    root = sysfs.build(Path(tempfile.mkdtemp(dir=tmp_path)), TREE)
    nvml.nvmlInit()
    try:
        printed = json.dumps(gpu_probe.probe_nvml(nvml), indent=1)
    finally:
        nvml.nvmlShutdown()
    lines = [*printed.splitlines(), "SGLANG_DEPLOY_RC=0", "SGLANG_DEPLOY_PCIE", json.dumps(pcie_paths.read(str(root)))]
    return GpuProbe().process(lines)


def test_the_reader_finds_every_device_its_port_state_and_place(tmp_path):
    got = pcie_paths.read(str(sysfs.build(tmp_path / "sys", TREE)))["rdma"]
    assert [d["name"] for d in got] == [f"mlx5_{i}" for i in range(10)]
    by = {d["name"]: d for d in got}
    assert by["mlx5_1"]["ports"] == [{"port": 1, "state": "DOWN", "link_layer": "Ethernet"}]
    assert by["mlx5_2"]["ports"] == [{"port": 1, "state": "ACTIVE", "link_layer": "InfiniBand"}]
    assert by["mlx5_2"]["bridges"] == list(TREE.gpus[0].bridges[:2]) + ["0000:02:01.0"]
    assert (by["mlx5_0"]["numa_node"], by["mlx5_9"]["numa_node"]) == (0, 1)
    assert pcie_paths.read(str(tmp_path / "nothing"))["rdma"] == []


def test_a_prefill_server_on_all_eight_gpus_gets_the_eight_compute_nics_in_gpu_order(probe):
    assert [d["name"] for d in probe["rdma"]] == [f"mlx5_{i}" for i in range(10)]
    plan = plan_host(build_spec("p1", {}, {**ROLE, "sglang_intents": {"tp_size": 8}}), probe=probe,
                     sglang_version="0.5.23")
    ib = plan.intents["disaggregation_ib_device"]
    assert ib.value == ",".join(f"mlx5_{i}" for i in range(2, 10)) and ib.layer == "topology"
    assert "GPU 0: mlx5_2 (below PCIe bridge 0000:01:00.0)" in ib.reason
    assert "mlx5_1 (no active port)" in ib.reason and "mlx5_0 (not the nearest" in ib.reason
    assert plan.argv[plan.argv.index("--disaggregation-ib-device") + 1] == ib.value


def test_each_replica_gets_the_devices_of_its_own_gpus(probe):
    spec = build_spec("p1", {}, {**ROLE, "sglang_intents": {"tp_size": 4, "dp_size": 2}})
    first = plan_host(spec, probe=probe, sglang_version="0.5.23")
    got = [plan_host(s, probe=probe, sglang_version="0.5.23").intents["disaggregation_ib_device"].value
           for s in replicas.replica_specs(spec, first)]
    assert got == ["mlx5_2,mlx5_3,mlx5_4,mlx5_5", "mlx5_6,mlx5_7,mlx5_8,mlx5_9"]


def test_the_inventory_wins_and_a_server_without_a_role_gets_none(probe):
    mine = plan_host(build_spec("p1", {}, {**ROLE, "sglang_intents": {"tp_size": 8, "disaggregation_ib_device":
                                                                      "mlx5_0"}}), probe=probe,
                     sglang_version="0.5.23")
    assert mine.intents["disaggregation_ib_device"].value == "mlx5_0"
    plain = plan_host(build_spec("w1", {}, {"sglang_model": "Qwen/Qwen3-32B", "sglang_intents": {"tp_size": 8}}),
                      probe=probe, sglang_version="0.5.23")
    assert isinstance(plain, Plan) and plain.intents["disaggregation_ib_device"].value is None
    assert "--disaggregation-ib-device" not in plain.argv


def test_devices_near_no_gpu_leave_the_choice_to_mooncake():
    far = rdma.RdmaDevice("mlx5_0", "0000:e1:00.0", ("0000:80:05.0",), 1, True, "InfiniBand")
    assert rdma.choose([(0, ("0000:00:01.0",), 0)], [far]) is None
    down = rdma.RdmaDevice("mlx5_1", "0000:04:00.0", ("0000:00:01.0",), 0, False, None)
    assert rdma.choose([(0, ("0000:00:01.0",), 0)], [down]) is None


@pytest.mark.parametrize("raw, field", [
    ("mlx5_0", "probe.rdma"),
    ([{"name": "mlx5_0;rm"}], "probe.rdma[0]"),
    ([{"name": "mlx5_0", "pci": "41:00.0"}], "probe.rdma[0].pci"),
    ([{"name": "mlx5_0", "numa_node": -1}], "probe.rdma[0].numa_node"),
    ([{"name": "mlx5_0", "bridges": ["x"]}], "probe.rdma[0].bridges"),
    ([{"name": f"mlx5_{i}"} for i in range(33)], "probe.rdma"),
])
def test_a_malformed_probe_is_refused_naming_the_field(raw, field):
    with pytest.raises(PlanError) as exc:
        rdma.parse_rdma("h1", raw)
    assert exc.value.field == field
