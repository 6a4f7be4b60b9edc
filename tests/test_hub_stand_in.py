"""The Hub stand-in (sglang_deploy/simulator/hub): recorded checkpoints with their provenance,
derived sizes checked against recorded listings, and the Hub's HTTP shapes as the real
huggingface_hub client reads them."""

from __future__ import annotations

import json
import struct

import httpx
import pytest
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

from sglang_deploy.simulator.hub import derive, tensors
from sglang_deploy.simulator.hub.repos import CHECKPOINTS, TAG, recorded_repos
from sglang_deploy.simulator.hub.server import HubServer

# Recorded tensor listings of the published checkpoints (tensor count, parameters), as named
# in each provenance.json: the derivation of total_size must rebuild exactly these.
RECORDED_LISTINGS = {
    "Qwen--Qwen3-0.6B": (311, 751_632_384),
    "Qwen--Qwen3-32B": (707, 32_762_123_264),
    "Qwen--Qwen3-235B-A22B-Instruct-2507-FP8": (73_417, 235_107_904_512),
    "deepseek-ai--DeepSeek-V3": (91_991, 684_531_386_000),
    "Qwen--Qwen3.6-27B": (1_199, 27_781_427_952),
}
# Recorded byte totals (an index's total_size, or a test's tensor_bytes) for the same shapes.
RECORDED_TOTALS = {
    "meta-llama--Llama-3.3-70B-Instruct": 141_107_412_992,
    "meta-llama--Llama-3.1-8B": 16_060_522_496,
    "openai--gpt-oss-120b": 65_248_815_744,
    "mistralai--Mixtral-8x7B-v0.1": 93_405_585_408,
}
NAMES = sorted(p.name for p in CHECKPOINTS.iterdir() if (p / "config.json").is_file())


def test_at_least_ten_checkpoints_each_with_its_provenance():
    assert len(NAMES) >= 10
    for name in NAMES:
        prov = json.loads((CHECKPOINTS / name / "provenance.json").read_text())
        assert prov["model"] == name.replace("--", "/", 1)
        assert prov["files"]["config.json"]["repository"]
        index = CHECKPOINTS / name / "model.safetensors.index.json"
        assert index.is_file() == ("model.safetensors.index.json" in prov["files"])
        if index.is_file():
            assert prov["files"]["model.safetensors.index.json"]["derived"] is True


@pytest.mark.parametrize("name", sorted(RECORDED_LISTINGS))
def test_derivation_rebuilds_the_recorded_listing(name):
    built = derive.checkpoint_tensors(name)
    assert (len(built), tensors.parameters(built)) == RECORDED_LISTINGS[name]


@pytest.mark.parametrize("name", sorted(RECORDED_TOTALS))
def test_derivation_gives_the_recorded_total(name):
    assert tensors.total_size(derive.checkpoint_tensors(name)) == RECORDED_TOTALS[name]


def test_written_indexes_equal_their_derivation():
    assert derive.main(["--check"]) == 0


def test_gpt_oss_family_layout_matches_the_recorded_20b_listing():
    config = json.loads((CHECKPOINTS / "openai--gpt-oss-120b" / "config.json").read_text())
    config.update(num_hidden_layers=24, num_local_experts=32)   # gpt-oss-20b's shapes
    built = tensors.tensors_for(config)
    assert (len(built), tensors.parameters(built)) == (459, 11_956_805_184)


@pytest.fixture(scope="module")
def hub():
    with HubServer(recorded_repos(), tokens=("granted-token",)) as server:
        yield server


def test_model_info_and_download_through_the_real_client(hub, tmp_path):
    api = HfApi(endpoint=hub.url)
    info = api.model_info("Qwen/Qwen3-32B", files_metadata=True)
    sizes = {s.rfilename: s.size for s in info.siblings}
    assert sizes["config.json"] == (CHECKPOINTS / "Qwen--Qwen3-32B" / "config.json").stat().st_size
    assert len(info.sha) == 40 and api.model_info("Qwen/Qwen3-32B", revision=TAG).sha == info.sha
    path = hf_hub_download("Qwen/Qwen3-32B", "config.json", cache_dir=tmp_path, endpoint=hub.url)
    assert open(path, "rb").read() == (CHECKPOINTS / "Qwen--Qwen3-32B" / "config.json").read_bytes()
    assert info.sha in path


def test_single_file_checkpoint_serves_a_real_header_by_range(hub):
    url = f"{hub.url}/Qwen/Qwen3-0.6B/resolve/main/model.safetensors"
    with httpx.Client() as client:
        first = client.get(url, headers={"Range": "bytes=0-7"})
        assert first.status_code == 206 and first.headers["Content-Range"].startswith("bytes 0-7/")
        (length,) = struct.unpack("<Q", first.content)
        header = json.loads(client.get(url, headers={"Range": f"bytes=8-{7 + length}"}).content)
    header.pop("__metadata__")
    assert len(header) == 311
    data = sum(t["data_offsets"][1] - t["data_offsets"][0] for t in header.values())
    assert data == 2 * 751_632_384
    meta = get_hf_file_metadata(hf_hub_url("Qwen/Qwen3-0.6B", "model.safetensors", endpoint=hub.url))
    assert meta.size == 8 + length + data and len(meta.etag) == 64 and meta.commit_hash


def test_gated_repo_needs_the_granted_token(hub, tmp_path):
    repo, api = "meta-llama/Llama-3.3-70B-Instruct", HfApi(endpoint=hub.url)
    assert api.model_info(repo).gated == "manual"            # metadata stays public, as on the Hub
    url = f"{hub.url}/{repo}/resolve/main/config.json"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url).headers["X-Error-Code"] == "GatedRepo"
    assert httpx.get(url, headers={"Authorization": "Bearer other"}).status_code == 403
    with pytest.raises(GatedRepoError):
        hf_hub_download(repo, "config.json", cache_dir=tmp_path, endpoint=hub.url, token=False)
    assert hf_hub_download(repo, "config.json", cache_dir=tmp_path, endpoint=hub.url, token="granted-token")


def test_unknown_revision_repo_and_file_answer_as_the_hub(hub):
    api = HfApi(endpoint=hub.url)
    with pytest.raises(RevisionNotFoundError):
        api.model_info("Qwen/Qwen3-32B", revision="v9")
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("nobody/nothing", token=False)
    missing = httpx.get(f"{hub.url}/Qwen/Qwen3-32B/resolve/main/generation_config.json")
    assert (missing.status_code, missing.headers["X-Error-Code"]) == (404, "EntryNotFound")
    head = httpx.head(f"{hub.url}/Qwen/Qwen3-32B/resolve/{TAG}/config.json")
    assert head.status_code == 200 and head.headers["X-Repo-Commit"] == api.model_info("Qwen/Qwen3-32B").sha
