"""Hardware model: probe JSON and declared hardware -> what the planner needs."""

from __future__ import annotations

import copy

import pytest

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.hardware import (check_declared_matches_probe, declared_hardware, memory_tier, parse_probe,
                                         select_gpus, topology_class)
from sglang_deploy.plan.profiles import load_knowledge

from tests.conftest import load_probe

K = load_knowledge()
ARCH_OF = K.arch_of_capability


def test_reference_probe_two_bridged_a6000():
    hw = parse_probe("a6000-1", load_probe("a6000x2-bridge"))
    gpus = select_gpus("a6000-1", hw, ARCH_OF)
    assert gpus.arch == "sm86"
    assert gpus.topology == "nvlink-pairs"
    assert gpus.p2p is True and gpus.geforce is False
    assert gpus.memory_tier == "lt60gb"
    assert gpus.indices == (0, 1)
    assert hw.driver_version == "580.65.06" and hw.source == "probe:nvml"


def test_h100_nvswitch_and_subsets():
    hw = parse_probe("h", load_probe("h100x8-nvswitch"))
    assert select_gpus("h", hw, ARCH_OF).topology == "nvswitch"
    assert select_gpus("h", hw, ARCH_OF).arch == "sm90"
    assert select_gpus("h", hw, ARCH_OF, [4, 5]).indices == (4, 5)


def test_four_a6000_as_two_pairs():
    hw = parse_probe("h", load_probe("a6000x4-two-bridges"))
    assert select_gpus("h", hw, ARCH_OF).topology == "nvlink-pairs"
    assert select_gpus("h", hw, ARCH_OF, [0, 2]).topology == "pcie"
    assert select_gpus("h", hw, ARCH_OF, [2, 3]).topology == "nvlink-pairs"


def test_geforce_without_p2p():
    gpus = select_gpus("g", parse_probe("g", load_probe("rtx4090x2-pcie")), ARCH_OF)
    assert gpus.arch == "sm89" and gpus.geforce and not gpus.p2p and gpus.topology == "pcie"


@pytest.mark.parametrize("links,nvswitch,expected", [
    ([["X", "PIX", "SYS"], ["PIX", "X", "SYS"], ["SYS", "SYS", "X"]], False, "pcie"),
    ([["X", "NV4", "NV4"], ["NV4", "X", "NV4"], ["NV4", "NV4", "X"]], False, "nvlink-all"),
    ([["X", "NV4", "NV4"], ["NV4", "X", "NV4"], ["NV4", "NV4", "X"]], True, "nvswitch"),
    ([["X", "NV2", "NV2"], ["NV2", "X", "SYS"], ["NV2", "SYS", "X"]], False, "nvlink-partial"),
])
def test_topology_classes(links, nvswitch, expected):
    assert topology_class(links, nvswitch, [0, 1, 2]) == expected


def test_mixed_gpus_are_an_error_unless_indices_pick_one_kind():
    hw = parse_probe("m", load_probe("mixed-a6000x2-3090"))
    with pytest.raises(PlanError) as exc:
        select_gpus("m", hw, ARCH_OF)
    assert exc.value.host == "m" and exc.value.field == "probe.gpus"
    assert "mixed GPUs" in str(exc.value) and "sglang_gpu_indices" in str(exc.value)
    assert select_gpus("m", hw, ARCH_OF, [0, 1]).model == "NVIDIA RTX A6000"
    with pytest.raises(PlanError, match="sglang_gpu_indices: index 7 is not a GPU"):
        select_gpus("m", hw, ARCH_OF, [0, 7])


def test_unknown_compute_capability_is_an_error_not_a_guess():
    probe = load_probe("a6000x2-bridge")
    for gpu in probe["gpus"]:
        gpu["compute_capability"] = "10.3"
    hw = parse_probe("b300", probe)
    with pytest.raises(PlanError) as exc:
        select_gpus("b300", hw, ARCH_OF)
    assert exc.value.field == "probe.gpus[0].compute_capability"
    assert "10.3" in str(exc.value) and "sm86" in str(exc.value)


@pytest.mark.parametrize("mutate,field", [
    (lambda p: p.update(gpus=[]), "probe.gpus"),
    (lambda p: p["gpus"][1].update(index=5), "probe.gpus[1].index"),
    (lambda p: p["gpus"][0].update(compute_capability="sm86"), "probe.gpus[0].compute_capability"),
    (lambda p: p["gpus"][0].pop("memory_total_mib"), "probe.gpus[0].memory_total_mib"),
    (lambda p: p["topology"].update(links=[["X", "NV4"], ["PIX", "X"]]), "probe.topology.links[0][1]"),
    (lambda p: p["topology"].update(links=[["X", "QPI"], ["QPI", "X"]]), "probe.topology.links[0][1]"),
    (lambda p: p["topology"].update(p2p_read=[[None, True]]), "probe.topology.p2p_read"),
    (lambda p: p.update(schema=2), "probe.schema"),
])
def test_bad_probe_names_the_field(mutate, field):
    probe = copy.deepcopy(load_probe("a6000x2-bridge"))
    mutate(probe)
    with pytest.raises(PlanError) as exc:
        parse_probe("gpu-7", probe)
    assert exc.value.host == "gpu-7" and exc.value.field == field


def test_declared_hardware_matches_the_probe_shape():
    hw = declared_hardware("a", {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"}, K.gpus)
    gpus = select_gpus("a", hw, ARCH_OF)
    probed = select_gpus("a", parse_probe("a", load_probe("a6000x2-bridge")), ARCH_OF)
    for attr in ("arch", "topology", "p2p", "geforce", "memory_tier", "count"):
        assert getattr(gpus, attr) == getattr(probed, attr), attr
    assert gpus.source == "declared"


def test_declared_defaults_and_geforce_p2p():
    h100 = select_gpus("h", declared_hardware("h", {"model": "H100 SXM", "count": 8}, K.gpus), ARCH_OF)
    assert h100.topology == "nvswitch" and h100.arch == "sm90"
    g = select_gpus("g", declared_hardware("g", {"model": "RTX 4090", "count": 2}, K.gpus), ARCH_OF)
    assert g.geforce and not g.p2p


@pytest.mark.parametrize("declared,field,text", [
    ({"model": "RTX 9999", "count": 2}, "sglang_gpus.model", "unknown GPU model"),
    ({"model": "RTX A6000", "count": 0}, "sglang_gpus.count", "positive integer"),
    ({"model": "RTX A6000", "count": 2, "topology": "nvswitch"}, "sglang_gpus.topology", "not an SXM"),
    ({"model": "L40S", "count": 2, "topology": "nvlink-pairs"}, "sglang_gpus.topology", "no NVLink"),
    ({"model": "RTX A6000", "count": 2, "topology": "ring"}, "sglang_gpus.topology", "unknown topology"),
    ({"model": "RTX A6000", "count": 2, "gpus": 2}, "sglang_gpus.gpus", "unknown key"),
    ("2x A6000", "sglang_gpus", "mapping"),
])
def test_bad_declared_hardware(declared, field, text):
    with pytest.raises(PlanError) as exc:
        declared_hardware("host-a", declared, K.gpus)
    assert exc.value.field == field and text in str(exc.value)
    assert str(exc.value).startswith("host host-a: ")


def test_declared_versus_probe_mismatch_says_both():
    declared = declared_hardware("a", {"model": "H100 SXM", "count": 8}, K.gpus)
    probed = parse_probe("a", load_probe("a6000x2-bridge"))
    with pytest.raises(PlanError) as exc:
        check_declared_matches_probe("a", declared, probed, K.gpus)
    assert "8x H100 80GB HBM3" in str(exc.value) and "2x NVIDIA RTX A6000" in str(exc.value)
    fewer = declared_hardware("a", {"model": "RTX A6000", "count": 4}, K.gpus)
    with pytest.raises(PlanError, match="sglang_gpus.count: inventory declares 4x RTX A6000, the host has 2"):
        check_declared_matches_probe("a", fewer, probed, K.gpus)


@pytest.mark.parametrize("mib,tier", [(16384, "lt20gb"), (24564, "lt35gb"), (49140, "lt60gb"),
                                      (81559, "lt160gb"), (143771, "lt160gb"), (183359, "ge160gb")])
def test_memory_tiers(mib, tier):
    assert memory_tier(mib) == tier


def test_unknown_p2p_on_geforce_means_no_p2p():
    probe = load_probe("rtx4090x2-pcie")
    probe["topology"]["p2p_read"] = None  # what the nvidia-smi fallback reports
    assert select_gpus("g", parse_probe("g", probe), ARCH_OF).p2p is False
    a6000 = load_probe("a6000x4-two-bridges")
    a6000["topology"]["p2p_read"] = None
    assert select_gpus("a", parse_probe("a", a6000), ARCH_OF).p2p is True
