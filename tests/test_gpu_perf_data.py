"""Datasheet performance figures of data/gpus.yaml: present, sourced, consistent with each other."""

from __future__ import annotations

import copy
import math
from importlib import resources
from typing import Any

import pytest
import yaml

from sglang_deploy.plan.hardware import PERF_FIELDS, GpuDatabase, GpuModel
from sglang_deploy.plan.profiles import load_knowledge

RAW: list[dict[str, Any]] = yaml.safe_load(
    resources.files("sglang_deploy").joinpath("data", "gpus.yaml").read_text(encoding="utf-8"))
DB = load_knowledge().gpus
MODELS = DB.models


def cc(model: GpuModel) -> tuple[int, int]:
    major, minor = model.compute_capability.split(".")
    return int(major), int(minor)


def by(name: str) -> GpuModel:
    model = DB.lookup(name)
    assert model is not None, name
    return model


@pytest.mark.parametrize("entry", RAW, ids=[e["name"] for e in RAW])
def test_every_entry_states_every_figure_even_when_null(entry):
    # absent and null load alike; the data file writes each one, so a missing figure is a choice, not an oversight
    missing = [k for k in (*PERF_FIELDS, "perf_source") if k not in entry]
    assert not missing, f"{entry['name']}: {missing}"


@pytest.mark.parametrize("model", MODELS, ids=[m.name for m in MODELS])
def test_every_model_has_bandwidth_bf16_host_link_and_a_source(model):
    assert model.hbm_gbps is not None and model.bf16_tflops is not None and model.pcie_gbps is not None
    assert model.perf_source and "NVIDIA" in model.perf_source
    for key in PERF_FIELDS:
        value = getattr(model, key)
        assert value is None or (isinstance(value, float) and math.isfinite(value) and value > 0), (key, value)


@pytest.mark.parametrize("model", MODELS, ids=[m.name for m in MODELS])
def test_fp8_from_ada_on_and_fp4_from_blackwell_on(model):
    assert (model.fp8_tflops is not None) == (cc(model) >= (8, 9)), model.name
    assert (model.fp4_tflops is not None) == (cc(model) >= (10, 0)), model.name


@pytest.mark.parametrize("model", MODELS, ids=[m.name for m in MODELS])
def test_narrower_formats_are_not_slower(model):
    if model.fp8_tflops is not None:
        assert model.fp8_tflops >= model.bf16_tflops, model.name
    if model.fp4_tflops is not None:
        assert model.fp8_tflops is not None and model.fp4_tflops >= model.fp8_tflops, model.name


@pytest.mark.parametrize("model", MODELS, ids=[m.name for m in MODELS])
def test_nvlink_figure_exactly_where_the_model_has_nvlink(model):
    assert (model.nvlink_gbps is None) == (model.nvlink == "none"), model.name
    if model.nvlink == "sxm":
        # an SXM board's NVLink is far above its host link (GH200's host link is NVLink-C2C, as fast)
        assert model.pcie_gbps is not None and model.nvlink_gbps is not None
        assert model.nvlink_gbps >= model.pcie_gbps, model.name


@pytest.mark.parametrize("model", MODELS, ids=[m.name for m in MODELS])
def test_host_link_is_a_pcie_x16_figure_of_its_generation(model):
    if model.name.startswith("GH200"):
        assert model.pcie_gbps == 900 and "NVLink-C2C" in (model.perf_source or "")
    elif cc(model) >= (9, 0):
        assert model.pcie_gbps == 128, model.name  # Hopper and Blackwell: PCIe 5.0 x16
    else:
        assert model.pcie_gbps == 64, model.name  # Ampere and Ada: PCIe 4.0 x16


def fig(name: str, key: str) -> float:
    value = getattr(by(name), key)
    assert isinstance(value, float), (name, key, value)
    return value


def test_datasheet_orderings():
    assert fig("H200", "hbm_gbps") > fig("H100 SXM", "hbm_gbps") > fig("A100 80GB SXM", "hbm_gbps")
    assert fig("B200", "hbm_gbps") > fig("H200", "hbm_gbps")
    assert fig("B200", "bf16_tflops") > fig("H100 SXM", "bf16_tflops") > fig("A100 80GB SXM", "bf16_tflops")
    assert fig("B200", "nvlink_gbps") > fig("H100 SXM", "nvlink_gbps") > fig("A100 80GB SXM", "nvlink_gbps")
    assert fig("RTX 5090", "hbm_gbps") > fig("RTX 4090", "hbm_gbps") > fig("RTX 3090", "hbm_gbps")


@pytest.mark.parametrize("sxm, pcie", [("A100 80GB SXM", "A100 80GB PCIe"), ("H100 SXM", "H100 PCIe")])
def test_sxm_beats_the_pcie_card_of_the_same_chip(sxm, pcie):
    assert fig(sxm, "hbm_gbps") > fig(pcie, "hbm_gbps")
    assert fig(sxm, "bf16_tflops") >= fig(pcie, "bf16_tflops")  # A100: the same 312 on both
    assert fig(sxm, "nvlink_gbps") >= fig(pcie, "nvlink_gbps")  # A100: a bridge carries the same 600


def test_h100_sxm_beats_pcie_on_every_figure():
    for key in ("hbm_gbps", "bf16_tflops", "fp8_tflops", "nvlink_gbps"):
        assert fig("H100 SXM", key) > fig("H100 PCIe", key), key


def test_reference_figures():
    h100 = by("H100 80GB HBM3")
    assert (h100.hbm_gbps, h100.nvlink_gbps, h100.pcie_gbps) == (3350, 900, 128)
    assert h100.bf16_tflops == 1979 / 2 and h100.fp8_tflops == 3958 / 2  # the datasheet's sparsity figures, halved
    assert by("A100 80GB SXM").bf16_tflops == 312


def entry_of(name: str) -> dict[str, Any]:
    return copy.deepcopy(next(e for e in RAW if e["name"] == name))


@pytest.mark.parametrize("key", PERF_FIELDS)
@pytest.mark.parametrize("bad", [0, -1, -0.5, float("nan"), float("inf"), "3350", True, [3350], {"gbps": 1}])
def test_a_bad_figure_is_refused_naming_the_model_and_field(key, bad):
    entry = entry_of("H100 80GB HBM3")
    entry[key] = bad
    with pytest.raises(ValueError, match=rf"GPU model 'H100 80GB HBM3': {key} must be a positive finite number"
                                         r" or null, got "):
        GpuDatabase([entry])


@pytest.mark.parametrize("bad", ["", "  ", 42, ["NVIDIA datasheet"]])
def test_a_bad_perf_source_is_refused(bad):
    entry = entry_of("RTX A6000")
    entry["perf_source"] = bad
    with pytest.raises(ValueError, match=r"GPU model 'RTX A6000': perf_source must be a non-empty string"):
        GpuDatabase([entry])


def test_an_entry_without_figures_still_loads_as_before():
    entry = {k: v for k, v in entry_of("L4").items() if k not in (*PERF_FIELDS, "perf_source")}
    model = GpuDatabase([entry]).lookup("L4")
    assert model is not None and model.memory_mib == 23034 and model.planned_mib == 23034
    assert all(getattr(model, k) is None for k in (*PERF_FIELDS, "perf_source"))


def test_integers_load_as_floats():
    entry = entry_of("A10")
    assert isinstance(entry["hbm_gbps"], int)
    model = GpuDatabase([entry]).lookup("A10")
    assert model is not None and model.hbm_gbps == 600.0 and isinstance(model.hbm_gbps, float)
