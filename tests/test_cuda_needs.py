"""The driver and GPU check (plan/cuda_needs.py, data/cuda_needs.yaml): a host whose NVIDIA driver
cannot run the torch an SGLang version installs is refused while planning, before anything is
installed or stopped, in one line naming the host, the field and both versions.

The hosts are the probe stand-ins of tests/fixtures/probes (their driver: NVIDIA's CUDA 13.0 GA
driver, 580.65.06). The old-driver case is the reference board's answer with only its driver fields
changed back to what the fixtures read before (550.127.05, CUDA 12.4), labelled OLD_DRIVER below.
"""

from __future__ import annotations

import copy
import io

import pytest

from sglang_deploy.commands.cli import main
from sglang_deploy.errors import PlanError
from sglang_deploy.plan import cuda_needs
from sglang_deploy.plan.catalog import SUPPORTED_VERSIONS
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.spec import build_spec

from tests.conftest import load_probe

REFERENCE = {
    "sglang_model": "Qwen/Qwen3.6-27B",
    "sglang_gpus": {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"},
}
CUDA13 = ("0.5.15", "0.5.19", "0.5.23")  # torch 2.11.0 / 2.13.0 / 2.14.1, CUDA 13.0 builds


def with_driver(board: str, driver_version: str | None, cuda: object) -> dict:
    """A recorded board's probe answer with only its driver fields changed."""
    probe = copy.deepcopy(load_probe(board))
    probe["driver_version"] = driver_version
    probe["cuda_driver_version"] = cuda
    return probe


#: The reference board (2x RTX A6000) with the driver the probe fixtures read before this check:
#: 550.127.05, whose CUDA driver version is 12.4 (the R550 branch). Only these two fields differ.
OLD_DRIVER = with_driver("a6000x2-bridge", "550.127.05", "12.4")


def plan(probe=None, version="0.5.23", host="gpu-1", data=None):
    spec = build_spec(host, {}, data or REFERENCE)
    return plan_host(spec, probe=probe, sglang_version=version)


# --- the data ----------------------------------------------------------------------------------


def test_every_supported_version_has_an_entry_and_nothing_else_has():
    """A new SGLang version (a new catalog) without its needs recorded fails here."""
    assert set(cuda_needs.needs().versions) == set(SUPPORTED_VERSIONS)


def test_the_recorded_needs():
    got = {v: (n.torch.value, n.torch_cuda.value, n.kernels_cuda_major.value, n.family)
           for v, n in cuda_needs.needs().versions.items()}
    assert got == {
        "0.5.9": ("2.9.1", (12, 8), 12, 12),
        "0.5.15": ("2.11.0", (13, 0), 13, 13),
        "0.5.19": ("2.13.0", (13, 0), 13, 13),
        "0.5.23": ("2.14.1", (13, 0), 13, 13),
    }
    assert cuda_needs.needs().families == {12: 525, 13: 580}
    for n in cuda_needs.needs().versions.values():
        assert {(8, 0), (8, 6), (9, 0), (10, 0), (12, 0)} <= set(n.cubin.value)
        assert all(s.source for s in (n.torch, n.torch_cuda, n.cubin, n.kernels_cuda_major))


def _raw():
    import yaml
    from importlib import resources

    return yaml.safe_load(resources.files("sglang_deploy").joinpath("data", "cuda_needs.yaml").read_text())


@pytest.mark.parametrize("where", ["torch", "torch_cuda", "torch_archs", "kernels"])
def test_an_entry_without_its_source_is_refused(where):
    raw = _raw()
    del raw["versions"]["0.5.23"][where]["source"]
    with pytest.raises(cuda_needs.NeedsDataError, match=f"versions.0.5.23.{where}: missing source"):
        cuda_needs.load_needs(raw)


def test_a_build_of_an_unknown_cuda_family_is_refused():
    raw = _raw()
    raw["versions"]["0.5.23"]["torch_cuda"]["version"] = "14.0"
    with pytest.raises(cuda_needs.NeedsDataError, match="CUDA 14 has no driver family"):
        cuda_needs.load_needs(raw)


# --- each version against the boards ---------------------------------------------------------


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
@pytest.mark.parametrize("board", ["a6000x2-bridge", "h100x8-nvswitch", "rtx4090x2-pcie",
                                   "a6000x4-two-bridges", "mixed-a6000x2-3090"])
def test_every_board_runs_every_version(board, version):
    data = {"sglang_model": "Qwen/Qwen3-32B", "sglang_intents": {"tp_size": 2}}
    if board == "mixed-a6000x2-3090":
        data["sglang_gpu_indices"] = [0, 1]
    p = plan(load_probe(board), version, data=data)
    assert p.driver is not None and p.driver.status == "ok", p.driver
    assert p.driver.cuda_driver_version == "13.0"
    assert not [w for w in p.warnings if w.startswith("driver:")]


@pytest.mark.parametrize("version", CUDA13)
def test_an_r550_driver_is_refused_for_a_cuda_13_build(version):
    torch = cuda_needs.needs().versions[version].torch.value
    with pytest.raises(PlanError) as caught:
        plan(OLD_DRIVER, version)
    e = caught.value
    assert (e.host, e.field) == ("gpu-1", "cuda_driver_version")
    assert str(e).startswith(f"host gpu-1: cuda_driver_version: the driver supports CUDA 12.4; SGLang {version} "
                             f"installs torch {torch} built for CUDA 13.0, which needs a driver of CUDA 13.0 or "
                             "newer (R580+")
    assert "SGLang 0.5.9 runs on this driver" in e.message
    assert "\n" not in str(e)


def test_an_r550_driver_runs_0_5_9_through_minor_version_compatibility():
    """torch 2.9.1 is a CUDA 12.8 build: a CUDA 12.4 driver runs it, with NVIDIA's limits, and says so."""
    p = plan(OLD_DRIVER, "0.5.9")
    assert p.driver.status == "minor-compat"
    [warning] = [w for w in p.warnings if w.startswith("driver:")]
    assert "CUDA 12.4, older than CUDA 12.8" in warning and "minor version compatibility" in warning


@pytest.mark.parametrize("cuda,status", [("12.8", "ok"), ("12.9", "ok"), ("13.0", "ok"), ("13.2", "ok"),
                                         ("12.0", "minor-compat"), ("11.8", None)])
def test_0_5_9_against_drivers_of_each_family(cuda, status):
    """The reference board with only its CUDA driver version changed (the driver string left null)."""
    probe = with_driver("a6000x2-bridge", None, cuda)
    if status is None:
        with pytest.raises(PlanError, match=r"cuda_driver_version: the driver supports CUDA 11\.8; SGLang 0\.5\.9 "
                                            r"installs torch 2\.9\.1 built for CUDA 12\.8, which needs a driver of "
                                            r"CUDA 12\.0 or newer \(R525\+"):
            plan(probe, "0.5.9")
        return
    assert plan(probe, "0.5.9").driver.status == status


@pytest.mark.parametrize("cuda", ["13.0", "13.1", "13.2", "14.0"])
@pytest.mark.parametrize("version", CUDA13)
def test_a_cuda_13_build_runs_on_any_driver_of_cuda_13_or_newer(version, cuda):
    assert plan(with_driver("h100x8-nvswitch", None, cuda), version,
                data={"sglang_model": "Qwen/Qwen3-32B", "sglang_intents": {"tp_size": 8}}).driver.status == "ok"


@pytest.mark.parametrize("cuda", ["12.9", "12.8", "12.0", "11.8"])
def test_a_cuda_12_driver_is_refused_for_0_5_23(cuda):
    with pytest.raises(PlanError, match=f"host gpu-1: cuda_driver_version: the driver supports CUDA {cuda}; "):
        plan(with_driver("a6000x2-bridge", None, cuda), "0.5.23")


# --- the GPU's architecture ---------------------------------------------------------------------


def judge(version, cuda="13.0", cc="8.6", model="NVIDIA RTX A6000", source="probe:nvml", custom=False):
    warnings: list[str] = []
    return cuda_needs.judge("gpu-1", version, cuda, cc, model, source, custom, warnings), warnings


@pytest.mark.parametrize("cc", ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "12.0", "12.1"])
@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_the_architectures_the_builds_carry_kernels_for(version, cc):
    """8.9 (Ada) runs torch's 8.6 kernels, 10.3 its 10.0 and 12.1 its 12.0: same major, newer minor."""
    assert judge(version, cc=cc)[0].status == "ok"


@pytest.mark.parametrize("version", CUDA13)
def test_volta_is_refused_by_the_cuda_13_builds(version):
    with pytest.raises(PlanError) as caught:
        judge(version, cc="7.0", model="Tesla V100-SXM2-32GB")
    e = caught.value
    assert (e.host, e.field) == ("gpu-1", "compute_capability")
    assert e.message.startswith("the Tesla V100-SXM2-32GB is compute capability 7.0; SGLang")
    assert "7.5, 8.0, 8.6, 9.0, 10.0, 12.0 only" in e.message


def test_volta_runs_the_cuda_12_8_build_of_0_5_9():
    assert judge("0.5.9", cuda="12.8", cc="7.0", model="Tesla V100-SXM2-32GB")[0].status == "ok"


def test_an_architecture_of_another_major_is_refused_whatever_its_minor():
    """Thor (11.0) has no kernels in torch's x86 builds: 10.0's do not run on 11.x."""
    with pytest.raises(PlanError, match="compute_capability: the Thor is compute capability 11.0"):
        judge("0.5.23", cc="11.0", model="Thor")


# --- unknown: not refused, said -------------------------------------------------------------------


def test_declared_hardware_is_not_judged_and_the_explain_says_so():
    p = plan(None, "0.5.23")
    assert p.driver.status == "not-judged"
    assert "declared hardware" in p.driver.summary and "CUDA 13.0 or newer (R580+)" in p.driver.summary
    assert not [w for w in p.warnings if w.startswith("driver:")]
    assert p.as_dict()["driver"]["status"] == "not-judged"


def test_a_probe_that_could_not_read_the_version_plans_with_a_warning():
    p = plan(with_driver("a6000x2-bridge", "550.127.05", None), "0.5.23")
    assert p.driver.status == "not-judged"
    [warning] = [w for w in p.warnings if w.startswith("driver:")]
    assert "the GPU probe could not read the driver's CUDA version" in warning


@pytest.mark.parametrize("key,value", [("sglang_pip_index_url", "https://mirror.example/simple"),
                                       ("sglang_pip_extra_index_urls", ["https://mirror.example/cu126"]),
                                       ("sglang_pip_find_links", "/srv/wheels")])
def test_an_install_from_another_index_is_not_judged(key, value):
    """Another index may carry another build of torch: an old driver is then the operator's choice."""
    p = plan(OLD_DRIVER, "0.5.23", data={**REFERENCE, key: value})
    assert p.driver.status == "not-judged" and key in p.driver.summary


def test_a_version_without_recorded_needs_is_not_refused():
    data = cuda_needs.Needs(versions={}, families={12: 525, 13: 580}, families_source="test")
    warnings: list[str] = []
    check = cuda_needs.judge("gpu-1", "0.5.23", "12.4", "8.6", "A6000", "probe:nvml", False, warnings, data)
    assert check.status == "not-judged" and warnings == [f"driver: {check.summary}"]


# --- the probe's value is untrusted ---------------------------------------------------------------


@pytest.mark.parametrize("value,expected", [("12.4", (12, 4)), ("13.0", (13, 0)), ("13.10", (13, 10)),
                                            ("13", (13, 0)), (None, None)])
def test_cuda_versions_the_probe_writes(value, expected):
    assert cuda_needs.parse_cuda_version("gpu-1", value) == expected


@pytest.mark.parametrize("value", [12040, 12.4, True, ["12.4"], "", "abc", "12.4.1", "12.", ".4", "v12.4",
                                   "100.0", "12.100", "0.9", "1" * 100_000, "12.4\n", "\x1b[31m12.4",
                                   "\u0661\u0662.\u0664", " 13.2 "])
def test_bad_cuda_versions_are_refused_naming_the_field(value):
    with pytest.raises(PlanError) as caught:
        cuda_needs.parse_cuda_version("gpu-1", value)
    e = caught.value
    assert (e.host, e.field) == ("gpu-1", "probe.cuda_driver_version")
    assert len(str(e)) < 200 and "\x1b" not in str(e) and "\n" not in str(e)


def test_a_bad_value_stops_the_plan():
    with pytest.raises(PlanError, match=r"host gpu-1: probe\.cuda_driver_version: must be a CUDA version string"):
        plan(with_driver("a6000x2-bridge", "550.127.05", 12040), "0.5.23")


# --- what the operator reads ------------------------------------------------------------------------


def test_plan_explain_says_what_the_driver_needs_and_why():
    out, err = io.StringIO(), io.StringIO()
    assert main(["plan", "--explain", "--sglang-version", "0.5.19"], out=out, err=err) == 0, err.getvalue()
    text = out.getvalue()
    [line] = [t for t in text.splitlines() if t.startswith("Driver")]
    assert "not judged (declared hardware" in line and "torch 2.13.0 built for CUDA 13.0" in line
    assert "Minor Version Compatibility" in text and "googlecolab/colabtools#6053" in text
    quiet = io.StringIO()
    assert main(["plan", "--sglang-version", "0.5.19"], out=quiet, err=err) == 0
    assert "Driver" not in quiet.getvalue()  # declared hardware, not judged: only --explain says it
