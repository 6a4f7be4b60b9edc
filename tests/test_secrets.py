"""Secrets are read on the controller and only ever reach the env file."""

from __future__ import annotations

import pytest

from roles.secrets import read_secrets
from sglang_deploy.errors import PlanError
from sglang_deploy.planner import plan_host
from sglang_deploy.render import render
from sglang_deploy.spec import build_spec

DATA = {
    "sglang_model": "Qwen/Qwen3-32B",
    "sglang_gpus": {"model": "L40S", "count": 2},
}


def test_env_and_file_sources(tmp_path):
    key_file = tmp_path / "api-key"
    key_file.write_text("sk-from-file\n")
    spec = build_spec("h", {}, {**DATA, "sglang_secrets": {"hf_token": {"env": "CTRL_HF"},
                                                           "api_key": {"file": str(key_file)}}})
    values = read_secrets("h", spec.secrets, {"CTRL_HF": "hf_abc"})
    assert values == {"HF_TOKEN": "hf_abc", "SGLANG_API_KEY": "sk-from-file"}
    files = render(plan_host(spec), values)
    assert "HF_TOKEN=hf_abc" in files.env and "SGLANG_API_KEY=sk-from-file" in files.env
    assert "hf_abc" not in files.unit and "sk-from-file" not in files.unit


def test_missing_secret_stops_the_host_without_echoing_anything(tmp_path):
    spec = build_spec("h", {}, {**DATA, "sglang_secrets": {"hf_token": {"env": "CTRL_HF"}}})
    with pytest.raises(PlanError, match=r"host h: sglang_secrets.hf_token: \$CTRL_HF is not set"):
        read_secrets("h", spec.secrets, {})
    spec = build_spec("h", {}, {**DATA, "sglang_secrets": {"api_key": {"file": str(tmp_path / "nope")}}})
    with pytest.raises(PlanError, match="sglang_secrets.api_key: cannot read"):
        read_secrets("h", spec.secrets, {})
