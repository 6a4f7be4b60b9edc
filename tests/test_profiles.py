"""Knowledge as data: the shipped files load, and malformed data is refused."""

from __future__ import annotations

import pytest

from sglang_deploy.profiles import DataError, load_arch, load_knowledge, load_model


def test_shipped_data_covers_every_architecture():
    k = load_knowledge()
    assert sorted(k.archs) == ["sm100", "sm120", "sm80", "sm86", "sm89", "sm90"]
    assert k.arch_of_capability["8.6"] == "sm86" and k.arch_of_capability["12.0"] == "sm120"
    for arch in k.archs.values():
        assert all(s.reason for s in arch.settings)
    ids = [r.id for a in k.archs.values() for r in a.rules] + [r.id for r in k.topology_rules + k.model_rules]
    assert len(ids) == len(set(ids))
    assert k.model_for("Qwen/Qwen3.6-27B").key == "qwen3.6-27b"
    assert k.model_for("qwen/qwen3.6-27b/").key == "qwen3.6-27b"


def test_every_gpu_model_maps_to_an_architecture():
    k = load_knowledge()
    for model in k.gpus.models:
        assert model.compute_capability in k.arch_of_capability, model.name


def test_malformed_profiles_are_refused():
    with pytest.raises(DataError, match="missing capabilities"):
        load_arch({"arch": "sm75", "name": "Turing", "compute_capabilities": ["7.5"]}, "data/arch/sm75.yaml")
    with pytest.raises(DataError, match="needs a value and a reason"):
        load_model({"key": "m", "models": ["x"], "architecture": "X", "facts": {},
                    "intents": {"tp_size": {"value": 2}}}, "data/models/m.yaml")
    with pytest.raises(DataError, match="unknown intent 'tp'"):
        load_model({"key": "m", "models": ["x"], "architecture": "X", "facts": {},
                    "intents": {"tp": {"value": 2, "reason": "r"}}}, "data/models/m.yaml")


def test_a_rule_on_an_unknown_fact_is_a_data_error():
    arch = load_arch({"arch": "sm75", "name": "Turing", "compute_capabilities": ["7.5"], "capabilities": {},
                      "rules": [{"id": "x", "when": {"gpu_colour": "green"}, "set": {"nvls": False},
                                 "reason": "r"}]}, "data/arch/sm75.yaml")
    with pytest.raises(DataError, match="unknown fact 'gpu_colour'"):
        arch.rules[0].applies({"arch": "sm75"})
