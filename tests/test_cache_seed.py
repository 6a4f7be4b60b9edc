"""A rollout's compile-cache seed (sglang_deploy/lifecycle/cache_seed.py, deploy/cache_seed.py): whose
caches another host may start from, the manifest read as data, and each host's part in a run."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sglang_deploy.deploy import cache_seed as glue
from sglang_deploy.lifecycle import cache_seed
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.runcontext import RUN_ENV, RunContext, write
from tests.recorded_facts import QWEN3_32B, QWEN36_27B

A6000X2 = {"model": "RTX A6000", "count": 2}


def plan(name="gpu-1", facts=QWEN36_27B, gpus=A6000X2, port=30000, **intents):
    data = {"sglang_model": facts.model, "sglang_gpus": gpus, "sglang_intents": {"port": port, **intents}}
    return plan_host(build_spec(name, {}, data), sglang_version="0.5.23", facts=facts)


def test_hosts_of_one_class_share_a_key_and_anything_that_compiles_other_kernels_does_not():
    key = cache_seed.seed_key(plan())
    assert cache_seed.seed_key(plan("gpu-2", port=30007, host="0.0.0.0")) == key
    assert cache_seed.seed_key(plan(facts=QWEN3_32B)) != key  # another model: other shapes
    assert cache_seed.seed_key(plan(gpus={"model": "RTX A6000", "count": 4})) != key  # another layout
    assert cache_seed.seed_key(plan(gpus={"model": "L40S", "count": 2})) != key  # another architecture
    assert cache_seed.seed_key(plan(kv_cache_dtype="fp8_e4m3")) != key
    assert cache_seed.seed_key(dataclasses.replace(plan(), sglang_version="0.5.19")) != key
    assert cache_seed._class_argv(["--port", "1", "--tp-size", "2", "--host=::", "--model-path", "/m"]) == \
        ["--tp-size", "2"]


def manifest(of, **changes):
    return json.dumps({"key": of, "sha256": "a" * 64, "bytes": 1024, "source_host": "gpu-1",
                       "sglang_version": "0.5.23", **changes})


@pytest.mark.parametrize("changes, why", [
    ({"key": "b" * 24}, "not the manifest"), ({"sha256": "A" * 64}, "sha256"), ({"sha256": "../x"}, "sha256"),
    ({"bytes": 0}, "bytes"), ({"bytes": True}, "bytes"), ({"bytes": cache_seed.MAX_SEED_BYTES + 1}, "bytes"),
    ({"source_host": "a\x1b[2J"}, "source_host"), ({"sglang_version": ""}, "sglang_version"),
    ({"start_s": -1}, "start_s"), ({"start_s": "12"}, "start_s"), ({"start_s": True}, "start_s"),
])
def test_a_manifest_is_data_and_refused_naming_the_field(changes, why):
    key = "c" * 24
    with pytest.raises(ValueError, match=why):
        cache_seed.parse_manifest(manifest(key, **changes), key, "m.json")
    seed = cache_seed.parse_manifest(manifest(key), key, "m.json")
    assert seed.start_s is None and cache_seed.parse_manifest(manifest(key, start_s=42.5), key, "m").start_s == 42.5
    assert seed.bytes == 1024 and seed.describe() == "1024 bytes from gpu-1 (sha256 aaaaaaaaaaaa)"
    with pytest.raises(ValueError):
        cache_seed.parse_manifest("[" * 100, key, "m.json")
    with pytest.raises(ValueError):
        cache_seed.manifest_path("/s", "../../etc/passwd")
    with pytest.raises(ValueError):
        cache_seed.tar_path("/s", key, "z" * 64)


def test_each_host_takes_the_seed_offers_its_own_or_says_why_not(tmp_path, monkeypatch):
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    monkeypatch.setenv(RUN_ENV, write(RunContext(cache_seed_dir=str(seeds)), str(tmp_path / "run.json"))[RUN_ENV])
    p = plan()
    key = cache_seed.seed_key(p)
    first = glue.decide(p, "cold")
    assert first is not None and first.offer and first.take is None and first.key == key
    assert not glue.decide(p, "warm").offer  # a host with caches offers nothing it did not compile here
    (seeds / f"{key}.json").write_text(manifest(key))
    later = glue.decide(p, "cold")
    assert later.take is not None and later.take.sha256 == "a" * 64 and not later.offer
    warm = glue.decide(p, "unknown")
    assert warm.take is None and "hold something already" in warm.note
    (seeds / f"{key}.json").write_text("{not json")
    bad = glue.decide(p, "cold")
    assert bad.take is None and not bad.offer and "unreadable" in bad.note
    monkeypatch.delenv(RUN_ENV)
    assert glue.decide(p, "cold") is None  # not a rollout: no seed
