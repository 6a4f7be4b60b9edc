"""The gate waits for readiness as long as the unit's own start allows (sglang_deploy/deploy/context.py
Prepared.ready_timeout_s): a slow, healthy first start that systemd's TimeoutStartSec admits is not
rolled back by a fixed 900 s; `sglang_gate.ready_timeout_s` still sets it."""

from __future__ import annotations

from types import SimpleNamespace

from sglang_deploy.deploy.context import Prepared
from sglang_deploy.plan.spec import build_spec

MINIMAL = {"sglang_model": "Qwen/Qwen3.6-27B", "sglang_gpus": {"model": "RTX A6000", "count": 2}}


def prepared(data: dict, timeout_start_s: int) -> Prepared:
    p = object.__new__(Prepared)
    object.__setattr__(p, "spec", build_spec("gpu-1", {}, {**MINIMAL, **data}))
    object.__setattr__(p, "plan", SimpleNamespace(timeout_start_s=timeout_start_s))
    return p


def test_the_units_start_timeout_is_the_gates_unless_set():
    assert prepared({}, 1800).ready_timeout_s == 1800.0  # the model profile's 30 minutes, not 900 s
    assert prepared({"sglang_gate": {"ready_timeout_s": 300}}, 1800).ready_timeout_s == 300.0
