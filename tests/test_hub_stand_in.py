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


# ---- hostile mode (a hostile mirror for the host-side stager's tests) ---------------------------

@pytest.fixture
def small_hub():
    from sglang_deploy.simulator.hub.repos import HubFile, HubRepo

    repo = HubRepo("org/m", {"config.json": HubFile.from_bytes(b"{}\n", lfs=False),
                             "w.safetensors": HubFile.from_bytes(b"w" * 4096, lfs=True)})
    with HubServer({"org/m": repo}) as server:
        yield server


def _siblings(hub) -> list[dict]:
    return httpx.get(f"{hub.url}/api/models/org/m/revision/main?blobs=true").json()["siblings"]


def test_hostile_is_off_by_default_and_refuses_an_unknown_mode(small_hub):
    assert small_hub.hostile == frozenset()
    assert [s["rfilename"] for s in _siblings(small_hub)] == ["config.json", "w.safetensors"]
    with pytest.raises(ValueError, match="unknown hostile mode"):
        small_hub.hostile = "friendly"


def test_hostile_names_and_hashes_are_listed_and_served_on_a_running_server(small_hub):
    from sglang_deploy.simulator.hub.server import HOSTILE_PAYLOAD

    small_hub.hostile = ("traversal", "absolute", "control-names", "bad-hashes")
    names = [s["rfilename"] for s in _siblings(small_hub)]
    assert {"../../hostile-x", "a/../../hostile-b", "/tmp/sglang-hostile-absolute"} <= set(names)
    assert any("\x1b" in n for n in names) and any("\\" in n for n in names)
    bad = {s["rfilename"]: s for s in _siblings(small_hub)}
    assert ".." in bad["hostile-blob.json"]["blobId"] and ".." in bad["hostile-lfs.safetensors"]["lfs"]["sha256"]
    assert httpx.get(f"{small_hub.url}/org/m/resolve/main/unknown-name").content == HOSTILE_PAYLOAD
    small_hub.hostile_names = ["../custom"]
    small_hub.hostile = "traversal"
    assert [s["rfilename"] for s in _siblings(small_hub)][-1] == "../custom"
    small_hub.hostile = None
    assert len(_siblings(small_hub)) == 2


def test_hostile_bodies_longer_ignoring_range_and_trickling(small_hub):
    url = f"{small_hub.url}/org/m/resolve/main/w.safetensors"
    small_hub.hostile, small_hub.hostile_extra_bytes = "long-body", 100
    assert len(httpx.get(url).content) == 4096 + 100
    small_hub.hostile = "ignore-range"
    answer = httpx.get(url, headers={"Range": "bytes=10-"})
    assert answer.status_code == 200 and len(answer.content) == 4096
    small_hub.hostile, small_hub.hostile_delay_s = "trickle", 0.3
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(url, timeout=httpx.Timeout(5.0, read=0.1))


def test_hostile_json_huge_deep_and_echoed_token(small_hub):
    info = f"{small_hub.url}/api/models/org/m/revision/main?blobs=true"
    small_hub.hostile, small_hub.hostile_json_bytes = "huge-json", 3 * 2 ** 20
    body = httpx.get(info).content
    assert len(body) == 3 * 2 ** 20 and json.loads(body)["siblings"]
    small_hub.hostile, small_hub.hostile_json_depth = "deep-json", 5000
    with pytest.raises(RecursionError):
        json.loads(httpx.get(info).content)
    small_hub.hostile = "echo-token"
    answer = httpx.get(info, headers={"Authorization": "Bearer hf_echo_me"})
    assert answer.status_code == 401 and "hf_echo_me" in answer.text
    assert "hf_echo_me" in answer.headers["X-Error-Message"] and "hf_echo_me" in answer.reason_phrase


def test_hostile_listing_is_served_verbatim_with_its_files(small_hub):
    small_hub.hostile = "listing"
    small_hub.hostile_siblings = [{"rfilename": "config.json", "size": 3, "blobId": "0" * 40}, "junk"]
    small_hub.hostile_files = {"config.json": b"bad"}
    assert _siblings(small_hub) == small_hub.hostile_siblings
    assert httpx.get(f"{small_hub.url}/org/m/resolve/main/config.json").content == b"bad"
