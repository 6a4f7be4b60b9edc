"""The weights part of a plan: sources, the store's layout, the unit and argv that serve a snapshot."""

from __future__ import annotations

import pytest

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.plan.weights import plan_weights, repo_folder_name
from tests.conftest import load_probe

COMMIT = "0123456789abcdef0123456789abcdef01234567"
A6000 = {"sglang_model": "Qwen/Qwen3.6-27B", "sglang_gpus": {"model": "RTX A6000", "count": 2,
                                                            "topology": "nvlink-pairs"}}


def _plan(data: dict, commit: str | None = COMMIT, endpoint: str | None = None):
    spec = build_spec("gpu1", {}, data)
    weights = plan_weights("gpu1", spec.model_path, spec.weights, commit, endpoint)
    return plan_host(spec, probe=load_probe("a6000x2-bridge"), weights=weights)


def test_store_layout_is_the_hugging_face_cache():
    # huggingface_hub.file_download.repo_folder_name(repo_id="Qwen/Qwen3.6-27B", repo_type="model")
    assert repo_folder_name("Qwen/Qwen3.6-27B") == "models--Qwen--Qwen3.6-27B"
    assert repo_folder_name("gpt2") == "models--gpt2"


def test_hub_source_serves_the_snapshot_offline_under_the_model_id():
    plan = _plan(A6000)
    snapshot = f"/var/lib/sglang/models/models--Qwen--Qwen3.6-27B/snapshots/{COMMIT}"
    argv = plan.argv
    assert argv[argv.index("--model-path") + 1] == snapshot
    assert argv[argv.index("--served-model-name") + 1] == "Qwen/Qwen3.6-27B"
    assert plan.env["HF_HUB_OFFLINE"] == "1"
    files = render(plan)
    assert "# Weights: the Hub at https://huggingface.co, Qwen/Qwen3.6-27B revision main" in files.unit
    marker = f"/var/lib/sglang/models/models--Qwen--Qwen3.6-27B/.sglang-deploy-complete/{COMMIT}"
    assert f"ExecStartPre=/usr/bin/test -f {marker}" in files.unit
    assert plan.as_dict()["weights"]["model_path"] == snapshot


def test_a_served_model_name_in_the_inventory_wins():
    plan = _plan({**A6000, "sglang_intents": {"served_model_name": "qwen"}})
    assert plan.argv[plan.argv.index("--served-model-name") + 1] == "qwen"


def test_a_commit_revision_needs_no_hub_and_a_new_commit_is_a_new_unit():
    data = {**A6000, "sglang_model_revision": COMMIT, "sglang_model_store": "/srv/models"}
    plan = _plan(data, commit=None)
    assert f"/srv/models/models--Qwen--Qwen3.6-27B/snapshots/{COMMIT}" in plan.argv
    other = _plan(data, commit=None, endpoint="http://mirror:8080")
    assert "the Hub at http://mirror:8080" in render(other).unit
    assert render(_plan(A6000, commit="f" * 40)).unit != render(_plan(A6000)).unit


def test_without_a_commit_the_plan_says_so_and_stages_nothing():
    plan = _plan(A6000, commit=None)
    assert plan.argv[plan.argv.index("--model-path") + 1] == "Qwen/Qwen3.6-27B"
    assert "HF_HUB_OFFLINE" not in plan.env
    assert any("commit not resolved here" in w for w in plan.warnings)


def test_server_source_keeps_the_download_at_start():
    plan = _plan({**A6000, "sglang_model_source": "server"})
    assert plan.argv[plan.argv.index("--model-path") + 1] == "Qwen/Qwen3.6-27B"
    assert "--served-model-name" not in plan.argv
    assert "after the old server stopped" in render(plan).unit


def test_host_source_is_a_local_path_served_as_is():
    plan = _plan({**A6000, "sglang_model": "/models/qwen"}, commit=None)
    assert plan.argv[plan.argv.index("--model-path") + 1] == "/models/qwen"
    assert plan.env["HF_HUB_OFFLINE"] == "1"
    assert "ExecStartPre" not in render(plan).unit


@pytest.mark.parametrize("data, field", [
    ({"sglang_model_source": "ftp"}, "sglang_model_source"),
    ({"sglang_model_source": "controller:relative"}, "sglang_model_source"),
    ({"sglang_model_source": "host"}, "sglang_model_source"),
    ({"sglang_model": "/models/x", "sglang_model_source": "hub"}, "sglang_model"),
    ({"sglang_model_store": "models"}, "sglang_model_store"),
    ({"sglang_model_store": "/"}, "sglang_model_store"),
    ({"sglang_model_revision": "a b"}, "sglang_model_revision"),
    ({"sglang_model_keep": 1}, "sglang_model_keep"),
    ({"sglang_model_disk_margin_mib": -1}, "sglang_model_disk_margin_mib"),
])
def test_bad_weights_settings_name_the_host_and_field(data, field):
    with pytest.raises(PlanError) as err:
        build_spec("gpu1", {}, {**A6000, **data})
    assert err.value.host == "gpu1" and err.value.field == field
