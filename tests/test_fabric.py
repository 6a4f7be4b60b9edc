"""NVLS only on a ready NVLink fabric (issue 33 item 3): the probe's per-GPU ``fabric`` (NVML's
nvmlDeviceGetGpuFabricInfo[V]) read by the planner, judged for the GPUs a server uses, and the
topology rules turning NVLS off where a GPU has not registered with the fabric.

The fabric answers used here are recorded ones (tests/fixtures/probes/README.md and
sglang_deploy/simulator/boards/README.md say where each comes from): COMPLETED / SUCCESS on a
real HGX H100, IN_PROGRESS on a host whose Fabric Manager had not finished, COMPLETED with
INSUFFICIENT_RESOURCES, and NOT_STARTED, the first state NVML names."""

from __future__ import annotations

import copy
import io
import json

import pytest

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.fabric import NOT_READY, READY, UNKNOWN, Fabric, judge
from sglang_deploy.plan.hardware import parse_probe
from sglang_deploy.plan.output import print_plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.plan.spec import build_spec

from tests.conftest import ROOT, load_probe

BIG = {"sglang_model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"}  # TP 8 on the HGX H100
BOARDS = ROOT / "sglang_deploy" / "simulator" / "boards"

IN_PROGRESS = {"state": "IN_PROGRESS", "status": None}  # NVIDIA/gpu-operator#2511 (status N/A)
NOT_STARTED = {"state": "NOT_STARTED", "status": None}
FAILED = {"state": "COMPLETED", "status": "INSUFFICIENT_RESOURCES"}  # Azure/azhpc-images#506
READY_ANSWER = {"state": "COMPLETED", "status": "SUCCESS"}  # thamada/nvidia-smi gls/H100SXMx8_smi.py


def h100(**fabric_of: dict | None) -> dict:
    """The HGX H100 probe fixture with the fabric of some GPUs replaced (``g3=...``)."""
    probe = copy.deepcopy(load_probe("h100x8-nvswitch"))
    for key, value in fabric_of.items():
        probe["gpus"][int(key[1:])]["fabric"] = value
    return probe


def plan(probe: dict | None, host_data: dict | None = None, host: str = "h1"):
    return plan_host(build_spec(host, {}, {**BIG, **(host_data or {})}), probe=probe, sglang_version="0.5.23")


def nvls(p):
    return p.intents["nvls"]


# ---------------------------------------------------------------------------
# the probe's field, parsed


@pytest.mark.parametrize("answer, want", [
    (READY_ANSWER, Fabric("COMPLETED", "SUCCESS")),
    (IN_PROGRESS, Fabric("IN_PROGRESS", None)),
    (NOT_STARTED, Fabric("NOT_STARTED", None)),
    (FAILED, Fabric("COMPLETED", "INSUFFICIENT_RESOURCES")),
    ({"state": "UNREADABLE", "status": "UNKNOWN"}, Fabric("UNREADABLE", "UNKNOWN")),
    ({"state": "UNKNOWN_7", "status": None}, Fabric("UNKNOWN_7", None)),
    ({"state": "NOT_SUPPORTED", "status": None}, None),
    # before COMPLETED NVML's status means nothing ("must be checked only if state returns complete")
    ({"state": "IN_PROGRESS", "status": "SUCCESS"}, Fabric("IN_PROGRESS", None)),
    (None, None),
])
def test_each_fabric_state_parses(answer, want):
    hw = parse_probe("h1", h100(g2=answer))
    assert hw.gpus[2].fabric == want
    assert hw.gpus[0].fabric == Fabric("COMPLETED", "SUCCESS")
    assert hw.fabric_manager == "active"
    assert (want is not None and want.ready) == (answer == READY_ANSWER)


def test_an_older_probe_without_the_fields_still_parses():
    probe = load_probe("h100x8-nvswitch")
    for gpu in probe["gpus"]:
        del gpu["fabric"]
    del probe["fabric_manager"]
    hw = parse_probe("h1", probe)
    assert all(g.fabric is None for g in hw.gpus) and hw.fabric_manager is None


@pytest.mark.parametrize("answer, field, words", [
    ([3], "probe.gpus[4].fabric", "must be an object"),
    ("COMPLETED", "probe.gpus[4].fabric", "must be an object"),
    ({"state": 3, "status": 0}, "probe.gpus[4].fabric.state", "must be an NVML fabric state"),
    ({"state": 10 ** 100}, "probe.gpus[4].fabric.state", "must be an NVML fabric state"),
    ({"state": True}, "probe.gpus[4].fabric.state", "must be an NVML fabric state"),
    ({"state": "completed", "status": "SUCCESS"}, "probe.gpus[4].fabric.state", "must be an NVML fabric state"),
    ({"state": "UNKNOWN_" + "9" * 400}, "probe.gpus[4].fabric.state", "must be an NVML fabric state"),
    ({"state": "COMPLETED " * 10_000}, "probe.gpus[4].fabric.state", "must be an NVML fabric state"),
    ({"status": "SUCCESS"}, "probe.gpus[4].fabric.state", "must be an NVML fabric state"),
    ({"state": "COMPLETED", "status": 0}, "probe.gpus[4].fabric.status", "must be SUCCESS"),
    ({"state": "COMPLETED", "status": 10 ** 100}, "probe.gpus[4].fabric.status", "must be SUCCESS"),
    ({"state": "COMPLETED", "status": ["SUCCESS"]}, "probe.gpus[4].fabric.status", "must be SUCCESS"),
    ({"state": "COMPLETED", "status": "X" * 49}, "probe.gpus[4].fabric.status", "must be SUCCESS"),
    ({"state": "COMPLETED", "status": "SUCCESS; rm -rf /"}, "probe.gpus[4].fabric.status", "must be SUCCESS"),
    ({"state": "COMPLETED", "status": None}, "probe.gpus[4].fabric.status", "missing"),
    ({"state": "COMPLETED"}, "probe.gpus[4].fabric.status", "missing"),
])
def test_bad_fabric_values_are_refused_naming_host_and_field(answer, field, words):
    with pytest.raises(PlanError) as err:
        parse_probe("gpu-h100-7", h100(g4=answer))
    assert err.value.host == "gpu-h100-7" and err.value.field == field
    assert words in err.value.message
    assert len(str(err.value)) < 300  # a huge value is cut short, not echoed


@pytest.mark.parametrize("value", [1, True, "Active", "active; reboot", "a" * 33, ["active"], {"state": "active"}])
def test_a_bad_fabric_manager_answer_is_refused(value):
    probe = h100()
    probe["fabric_manager"] = value
    with pytest.raises(PlanError) as err:
        parse_probe("gpu-h100-7", probe)
    assert (err.value.host, err.value.field) == ("gpu-h100-7", "probe.fabric_manager")


# ---------------------------------------------------------------------------
# judged for the GPUs a server uses


def test_judge_names_every_gpu_not_ready_up_to_a_bound():
    gpus = [(i, Fabric("IN_PROGRESS", None)) for i in range(8)]
    check = judge(gpus, "probe:nvml", "failed")
    assert check.status == NOT_READY
    assert check.detail == ("NVML reports GPU 0 IN_PROGRESS, GPU 1 IN_PROGRESS, GPU 2 IN_PROGRESS, GPU 3 IN_PROGRESS "
                            "and 4 more GPUs not ready")
    assert check.service == "failed"  # said in a warning, never in a rendered reason
    assert judge([(0, None), (1, None)], "probe:nvml", None).status == UNKNOWN
    assert judge([(0, Fabric("COMPLETED", "SUCCESS"))], "declared", None).status == UNKNOWN
    mixed = judge([(0, Fabric("COMPLETED", "SUCCESS")), (1, None)], "probe:nvml", None)
    assert mixed.status == UNKNOWN and mixed.detail.startswith("GPU 1 reports no fabric state")
    assert judge([(0, Fabric("COMPLETED", "SUCCESS"))], "probe:nvml", None).status == READY


# ---------------------------------------------------------------------------
# the plan


def test_completed_with_success_keeps_nvls_on_and_says_the_fabric_is_ready():
    p = plan(h100())
    n = nvls(p)
    assert (n.value, n.layer) == (True, "topology")
    assert "the fabric is ready: NVML reports GPUs 0, 1, 2, 3, 4, 5, 6, 7 COMPLETED with status SUCCESS" in n.reason
    assert "--enable-nccl-nvls" in p.argv and p.env["NCCL_NVLS_ENABLE"] == "1"


@pytest.mark.parametrize("answer, said", [
    (NOT_STARTED, "GPU 5 NOT_STARTED"),
    (IN_PROGRESS, "GPU 5 IN_PROGRESS"),
    (FAILED, "GPU 5 COMPLETED with status INSUFFICIENT_RESOURCES"),
    ({"state": "UNREADABLE", "status": "UNKNOWN"}, "GPU 5 UNREADABLE (NVML error UNKNOWN)"),
])
def test_a_gpu_not_registered_turns_nvls_off_naming_it_and_its_state(answer, said):
    p = plan(h100(g5=answer))
    n = nvls(p)
    assert (n.value, n.layer) == (False, "topology")
    assert "the NVLink fabric is not ready" in n.reason and said in n.reason
    assert "nvidia-fabricmanager" not in n.reason  # the rendered reason: a service's state changes no revision
    assert "NVLink fabric not-ready: nvidia-fabricmanager.service is active" in p.warnings
    assert "--enable-nccl-nvls" not in p.argv and p.env["NCCL_NVLS_ENABLE"] == "0"
    # the rest of the plan is what a ready fabric gives
    ready = plan(h100())
    assert {k: r.value for k, r in p.intents.items() if k != "nvls"} == \
        {k: r.value for k, r in ready.intents.items() if k != "nvls"}


def test_a_not_ready_fabric_wins_over_inventory_data_with_a_warning():
    p = plan(h100(g0=IN_PROGRESS), {"sglang_intents": {"nvls": True}})
    assert nvls(p).value is False and "--enable-nccl-nvls" not in p.argv
    assert any(w.startswith("nvls=True (host layer) overridden to False: the NVLink fabric is not ready")
               and "GPU 0 IN_PROGRESS" in w for w in p.warnings)


def test_only_the_gpus_the_server_uses_are_judged():
    # GPU 7 is not ready; a server on GPUs 0-3 keeps NVLS (4 GPUs over NVSwitch)
    p = plan(h100(g7=IN_PROGRESS), {"sglang_model": "Qwen/Qwen3-32B", "sglang_gpu_indices": [0, 1, 2, 3],
                                    "sglang_intents": {"tp_size": 4}})
    assert nvls(p).value is True and "GPUs 0, 1, 2, 3 COMPLETED" in nvls(p).reason


def test_unknown_fabric_keeps_todays_plan_and_says_so():
    old = h100()
    for gpu in old["gpus"]:
        del gpu["fabric"]
    del old["fabric_manager"]
    p = plan(old)
    assert nvls(p).value is True and "--enable-nccl-nvls" in p.argv
    assert "whether the NVLink fabric is ready is unknown (the probe reports no fabric state" in nvls(p).reason
    declared = plan(None, {"sglang_gpus": {"model": "H100 SXM", "count": 8, "topology": "nvswitch"}})
    assert nvls(declared).value is True
    assert "unknown (declared hardware: NVML's fabric state is not read" in nvls(declared).reason
    # one GPU without a state, the others ready: unknown, not off
    partly = plan(h100(g6=None))
    assert nvls(partly).value is True and "GPU 6 reports no fabric state" in nvls(partly).reason
    # the argv is today's in every unknown case
    assert p.argv == declared.argv == partly.argv == plan(h100()).argv


def test_pcie_and_bridged_boards_are_unchanged():
    for name in ("a6000x2-bridge", "rtx4090x2-pcie", "a6000x4-two-bridges"):
        probe = load_probe(name)
        assert all(g["fabric"] is None for g in probe["gpus"])
        p = plan_host(build_spec("h1", {}, {"sglang_model": "Qwen/Qwen3-8B"}), probe=probe, sglang_version="0.5.23")
        assert nvls(p).value is False and "fabric" not in nvls(p).reason


def test_plan_explain_prints_the_reason():
    p = plan(h100(g3=IN_PROGRESS))
    out = io.StringIO()
    print_plan(p, render(p), True, out)
    text = out.getvalue()
    assert "the NVLink fabric is not ready" in text and "GPU 3 IN_PROGRESS" in text
    assert "nvmlDeviceGetGpuFabricInfo" in text  # the rule's source


# ---------------------------------------------------------------------------
# the simulated NVML, in process: the probe's reader against the stand-in's answers


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """The stand-in pynvml serving a copy of the H100 board whose GPU fabrics a test sets."""
    from sglang_deploy.simulator.nvml import pynvml as nvml

    def serve(**fabric_of):
        data = json.loads((BOARDS / "h100x8-nvswitch.json").read_text())
        for key, value in fabric_of.items():
            data["gpus"][int(key[1:])]["fabric"] = value
        path = tmp_path / "nvml.json"
        path.write_text(json.dumps(data))
        monkeypatch.setenv("SGLANG_TESTBED_NVML", str(path))
        nvml.nvmlInit()
        return nvml

    yield serve
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError:
        pass


@pytest.mark.parametrize("answer, want", [
    (None, {"state": "COMPLETED", "status": "SUCCESS"}),  # the board as shipped
    ({"state": "IN_PROGRESS"}, {"state": "IN_PROGRESS", "status": None}),
    ({"state": "NOT_STARTED"}, {"state": "NOT_STARTED", "status": None}),
    ({"state": "COMPLETED", "status": "INSUFFICIENT_RESOURCES"},
     {"state": "COMPLETED", "status": "INSUFFICIENT_RESOURCES"}),
    ({"state": "NOT_SUPPORTED"}, None),
])
def test_the_probe_reads_each_state_from_the_simulated_nvml(standin, answer, want):
    from sglang_deploy.deploy.host import gpu_probe

    nvml = standin(**({} if answer is None else {"g1": answer}))
    handle = nvml.nvmlDeviceGetHandleByIndex(1)
    assert gpu_probe._fabric(nvml, handle) == want
    # and the answer parses as the planner reads it
    assert parse_probe("h1", h100(g1=want)).gpus[1].fabric == (
        None if want is None else Fabric(want["state"], want["status"]))


def test_the_simulated_call_fills_the_structure_as_nvml_does(standin):
    import ctypes

    nvml = standin()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    info = nvml.c_nvmlGpuFabricInfoV_t()
    assert info.version == nvml.nvmlGpuFabricInfo_v2
    assert nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info)) == nvml.NVML_SUCCESS
    assert (info.state, info.status, info.cliqueId, bytes(info.clusterUuid), info.healthMask) == (
        nvml.NVML_GPU_FABRIC_STATE_COMPLETED, nvml.NVML_SUCCESS, 0, bytes(16), 0)
    old = nvml.c_nvmlGpuFabricInfo_t()
    nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(old))
    assert old.state == nvml.NVML_GPU_FABRIC_STATE_COMPLETED
    wrong = nvml.c_nvmlGpuFabricInfoV_t()
    wrong.version = 1
    with pytest.raises(nvml.NVMLError) as err:
        nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(wrong))
    assert err.value.value == nvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


def test_the_stand_in_has_nvidia_ml_py_s_shapes():
    """Field names and order, structure version and constants as the released nvidia-ml-py
    (pynvml.py) defines them, where it is installed."""
    real = pytest.importorskip("pynvml")
    if not hasattr(real, "c_nvmlGpuFabricInfoV_t"):
        pytest.skip("this nvidia-ml-py predates nvmlDeviceGetGpuFabricInfoV")
    from sglang_deploy.simulator.nvml import pynvml as standin

    for name in ("c_nvmlGpuFabricInfo_t", "c_nvmlGpuFabricInfoV_t"):
        assert [f[0] for f in getattr(standin, name)._fields_] == [f[0] for f in getattr(real, name)._fields_]
    for name in ("nvmlGpuFabricInfo_v2", "NVML_GPU_FABRIC_STATE_NOT_SUPPORTED", "NVML_GPU_FABRIC_STATE_NOT_STARTED",
                 "NVML_GPU_FABRIC_STATE_IN_PROGRESS", "NVML_GPU_FABRIC_STATE_COMPLETED",
                 "NVML_ERROR_INSUFFICIENT_RESOURCES", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH"):
        assert getattr(standin, name) == getattr(real, name), name
