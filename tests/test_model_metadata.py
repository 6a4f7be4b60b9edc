"""Model facts on the controller (sglang_deploy/deploy/model_metadata.py) against the Hub stand-in: every
recorded checkpoint via the Hub, gated access, a missing revision, a mirror via HF_ENDPOINT,
the cache (cold, warm, offline, filled by `models fetch`) and a local directory."""

from __future__ import annotations

import io
import json
import logging
import shutil
from pathlib import Path

import pytest

# `plan` loads pyinfra, whose CLI package monkey-patches the standard library with gevent on
# import: load it before any Hub stand-in thread starts, so that every server thread and every
# client in this module live on the same (patched) threads and sockets, as in the real command.
import sglang_deploy.deploy.inventory  # noqa: F401
from sglang_deploy.deploy import model_metadata as mm
from sglang_deploy.commands.cli import main
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.inventory_plan import plan_inventory
from sglang_deploy.plan.modelfacts import FactsUnavailable, ModelFacts, facts_from_metadata
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.simulator.hub.repos import CHECKPOINTS, recorded_repos
from sglang_deploy.simulator.hub.server import HubServer
from sglang_deploy.plan.spec import build_spec
from tests.conftest import free_port

TOKEN = "hf_granted_0123456789abcdef"
NAMES = sorted(p.name for p in CHECKPOINTS.iterdir() if (p / "config.json").is_file())
H100 = {"model": "H100 80GB HBM3", "count": 8, "topology": "nvswitch"}


@pytest.fixture(scope="module")
def hub():
    with HubServer(recorded_repos(), tokens=(TOKEN,)) as server:
        yield server


@pytest.fixture
def cache(tmp_path):
    return mm.ModelCache(tmp_path / "models")


def online(hub, token=TOKEN):
    return mm.HubSettings(endpoint=hub.url, token=token)


def recorded_facts(name: str) -> ModelFacts:
    d = CHECKPOINTS / name
    index = d / "model.safetensors.index.json"
    return facts_from_metadata(name.replace("--", "/", 1), None, "recorded",
                               json.loads((d / "config.json").read_text()),
                               json.loads(index.read_text()) if index.is_file() else None)


def same_facts(a: ModelFacts, b: ModelFacts) -> bool:
    skip = {"revision", "source", "total_weight_bytes"}
    left, right = ({k: v for k, v in f.as_dict().items() if k not in skip} for f in (a, b))
    return left == right


@pytest.mark.parametrize("name", NAMES)
def test_every_recorded_checkpoint_through_the_hub(hub, cache, name):
    model = name.replace("--", "/", 1)
    facts = mm.resolve_facts(model, hub=online(hub), cache=cache)
    assert isinstance(facts, ModelFacts), facts
    assert facts.revision == hub.repos[model].commit and facts.source.startswith(f"hub {hub.url}")
    expected = recorded_facts(name)
    assert same_facts(facts, expected)
    if expected.total_weight_bytes is None:   # one model.safetensors: summed from its header, read by range
        assert facts.total_weight_bytes == 2 * 751_632_384
    else:
        assert facts.total_weight_bytes == expected.total_weight_bytes


def test_gated_model_needs_the_token_which_never_shows(hub, cache, caplog, capsys):
    caplog.set_level(logging.DEBUG)
    model = "meta-llama/Llama-3.3-70B-Instruct"
    without = mm.resolve_facts(model, hub=online(hub, token=None), cache=cache)
    assert isinstance(without, FactsUnavailable) and "gated repository" in without.reason and "401" in without.reason
    wrong = mm.resolve_facts(model, hub=online(hub, token="hf_not_granted_secret"), cache=cache)
    assert isinstance(wrong, FactsUnavailable) and "403" in wrong.reason
    assert "hf_not_granted_secret" not in wrong.reason and "\n" not in wrong.reason
    granted = mm.resolve_facts(model, hub=online(hub), cache=cache)
    assert isinstance(granted, ModelFacts) and granted.num_hidden_layers == 80
    written = "".join(p.read_text() for p in cache.root.rglob("*") if p.is_file())
    out = capsys.readouterr()
    for text in (written, out.out, out.err, caplog.text, granted.source):
        assert TOKEN not in text and "hf_not_granted_secret" not in text


def test_token_comes_from_sglang_secrets(hub, tmp_path):
    token_file = tmp_path / "hf_token"
    token_file.write_text(TOKEN + "\n")
    # the token belongs to the host's Hub (sglang_env.HF_ENDPOINT): the facts come from the same one
    spec = build_spec("h1", {}, {"sglang_model": "meta-llama/Llama-3.3-70B-Instruct", "sglang_gpus": H100,
                                 "sglang_secrets": {"hf_token": {"file": str(token_file)}},
                                 "sglang_env": {"HF_ENDPOINT": hub.url + "/"}})
    env = {"HF_ENDPOINT": hub.url, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    facts = mm.facts_for_specs([spec], environ=env, memo={})["h1"]
    assert isinstance(facts, ModelFacts) and facts.num_key_value_heads == 8
    # a controller HF_ENDPOINT of its own (the host downloads from huggingface.co) never gets it
    other = build_spec("h1", {}, {"sglang_model": "meta-llama/Llama-3.3-70B-Instruct", "sglang_gpus": H100,
                                  "sglang_secrets": {"hf_token": {"file": str(token_file)}}})
    facts = mm.facts_for_specs([other], environ={**env, "XDG_CACHE_HOME": str(tmp_path / "xdg2")}, memo={})["h1"]
    assert isinstance(facts, FactsUnavailable) and "gated repository" in facts.reason
    assert "sglang_secrets.hf_token was not sent" in facts.reason and TOKEN not in facts.reason


def test_missing_revision_is_one_line(hub, cache):
    facts = mm.resolve_facts("Qwen/Qwen3-32B", revision="v9", hub=online(hub), cache=cache)
    assert isinstance(facts, FactsUnavailable)
    assert facts.reason == (f"hub {hub.url}: revision 'v9' not found (404); no cached copy of revision 'v9'")


def test_revision_tag_and_commit_pin_the_same_facts(hub, cache):
    commit = hub.repos["Qwen/Qwen3-32B"].commit
    by_tag = mm.resolve_facts("Qwen/Qwen3-32B", revision="recorded", hub=online(hub), cache=cache)
    by_commit = mm.resolve_facts("Qwen/Qwen3-32B", revision=commit, hub=online(hub), cache=cache)
    assert by_tag.revision == by_commit.revision == commit
    assert cache.refs("Qwen/Qwen3-32B") == {"recorded": commit, commit: commit}


def test_mirror_via_hf_endpoint(tmp_path):
    with HubServer(recorded_repos(only=["Qwen/Qwen3-0.6B"])) as mirror:
        hub = mm.HubSettings.from_environ({"HF_ENDPOINT": mirror.url + "/"})
        facts = mm.resolve_facts("Qwen/Qwen3-0.6B", hub=hub, cache=mm.ModelCache(tmp_path))
        assert isinstance(facts, ModelFacts) and facts.source.startswith(f"hub {mirror.url} ")
        assert ("GET", "/api/models/Qwen/Qwen3-0.6B/revision/main") in mirror.requests


def test_cold_then_warm_cache_then_offline(tmp_path):
    cache = mm.ModelCache(tmp_path)
    server = HubServer(recorded_repos(only=["Qwen/Qwen3-30B-A3B"]), port=free_port()).start()
    hub = mm.HubSettings(endpoint=server.url)
    try:
        cold = mm.resolve_facts("Qwen/Qwen3-30B-A3B", hub=hub, cache=cache)
        files = [p for m, p in server.requests if "/resolve/" in p]
        assert sorted(Path(p).name for p in files) == ["config.json", "model.safetensors.index.json"]
        server.requests.clear()
        warm = mm.resolve_facts("Qwen/Qwen3-30B-A3B", hub=hub, cache=cache)
        assert [p for m, p in server.requests] == ["/api/models/Qwen/Qwen3-30B-A3B/revision/main"]
        assert warm.source.endswith("cached files)") and same_facts(cold, warm)
    finally:
        server.stop()
    offline = mm.resolve_facts("Qwen/Qwen3-30B-A3B", hub=hub, cache=cache)
    assert isinstance(offline, ModelFacts) and offline.source.startswith("cache ")
    assert offline.revision == cold.revision and same_facts(cold, offline)
    assert offline.total_weight_bytes == cold.total_weight_bytes == 61_064_245_248
    skipped = mm.resolve_facts("Qwen/Qwen3-30B-A3B", hub=mm.HubSettings(endpoint=hub.endpoint, offline=True),
                               cache=cache)
    assert skipped.source.startswith("cache ")


def test_no_source_says_so_in_one_line(tmp_path):
    facts = mm.resolve_facts("Qwen/Qwen3-32B", hub=mm.HubSettings(endpoint=f"http://127.0.0.1:{free_port()}"),
                             cache=mm.ModelCache(tmp_path))
    assert isinstance(facts, FactsUnavailable) and "\n" not in facts.reason
    assert "ConnectError" in facts.reason and "no cached copy of revision 'main'" in facts.reason


def _inventory(tmp_path: Path, model: str, **extra: str) -> Path:
    data = {"sglang_model": model, "sglang_gpus": H100, **extra}
    inv = tmp_path / "inv.py"
    inv.write_text(f"hosts = [(\"h1\", {data!r})]\n")
    return inv


def test_models_fetch_then_offline_plan(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    out, err = io.StringIO(), io.StringIO()
    assert main(["models", "fetch", "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "--revision", "recorded"],
                out, err) == 0, err.getvalue()
    commit = hub.repos["Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"].commit
    assert f"-> commit {commit}" in out.getvalue() and "config.json, model.safetensors.index.json" in out.getvalue()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")   # the Hub is gone
    spec = build_spec("h1", {}, {"sglang_model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "sglang_gpus": H100,
                                 "sglang_model_revision": "recorded"})
    facts = mm.facts_for_specs([spec], memo={})
    [plan] = plan_inventory([("h1", {}, {"sglang_model": spec.model_path, "sglang_gpus": H100,
                                         "sglang_model_revision": "recorded"})], facts=facts)
    assert plan.model_facts.source.startswith("cache ") and plan.model_facts.revision == commit
    assert plan.model_facts.quantization.weight_block_size == (128, 128)
    inv = _inventory(tmp_path, "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", sglang_model_revision="recorded")
    assert main(["plan", str(inv)], io.StringIO(), io.StringIO()) == 0


def test_models_fetch_errors_are_one_line(hub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    out, err = io.StringIO(), io.StringIO()
    assert main(["models", "fetch", "meta-llama/Llama-3.3-70B-Instruct"], out, err) == 2
    assert err.getvalue().count("\n") == 1 and "gated repository" in err.getvalue()
    assert main(["models", "fetch", "./local"], out, err := io.StringIO()) == 2
    assert "not a Hub id" in err.getvalue()


def test_local_directory_sources(tmp_path, hub):
    copy = tmp_path / "Qwen3.6-27B"
    shutil.copytree(CHECKPOINTS / "Qwen--Qwen3.6-27B", copy)
    seen = len(hub.requests)
    by_dir = mm.resolve_facts("Qwen/Qwen3.6-27B", model_dir=str(copy), hub=online(hub), cache=mm.ModelCache(tmp_path))
    assert by_dir.source == f"directory {copy}" and by_dir.mtp_layers == 1 and by_dir.vision
    assert len(hub.requests) == seen   # the first source answered: the Hub was not asked
    by_path = mm.resolve_facts(str(copy), hub=online(hub), cache=mm.ModelCache(tmp_path))
    assert by_path.full_attention_layers == 16
    missing = mm.resolve_facts("Qwen/Qwen3.6-27B", model_dir=str(tmp_path / "nope"), cache=mm.ModelCache(tmp_path))
    assert isinstance(missing, FactsUnavailable) and "is not a directory" in missing.reason
    assert missing.field == "sglang_model_dir"
    # A wrong sglang_model_dir is bad data: the plan refuses naming the key, it does not fall back.
    data = {"sglang_model": "Qwen/Qwen3.6-27B", "sglang_model_dir": str(tmp_path / "nope"),
            "sglang_gpus": {"model": "RTX A6000", "count": 2}}
    with pytest.raises(PlanError) as err:
        plan_host(build_spec("h1", {}, data), facts=missing)
    assert err.value.field == "sglang_model_dir" and "nope is not a directory" in str(err.value)


def test_local_directory_sums_safetensors_headers(tmp_path):
    repo = recorded_repos(only=["Qwen/Qwen3-0.6B"])["Qwen/Qwen3-0.6B"]
    weights = repo.files["model.safetensors"]
    head = weights.read(0, 8)
    length = int.from_bytes(head, "little")
    d = tmp_path / "small"
    d.mkdir()
    (d / "config.json").write_bytes(repo.files["config.json"].read(0, 10_000))
    (d / "model.safetensors").write_bytes(weights.read(0, 8 + length))   # the header alone is read
    facts = mm.resolve_facts("Qwen/Qwen3-0.6B", model_dir=str(d), cache=mm.ModelCache(tmp_path))
    assert facts.total_weight_bytes == 2 * 751_632_384


def test_a_broken_local_config_names_the_field(tmp_path):
    d = tmp_path / "broken"
    d.mkdir()
    config = json.loads((CHECKPOINTS / "Qwen--Qwen3-32B" / "config.json").read_text())
    del config["num_attention_heads"]
    (d / "config.json").write_text(json.dumps(config))
    facts = mm.resolve_facts("Qwen/Qwen3-32B", model_dir=str(d), cache=mm.ModelCache(tmp_path))
    assert isinstance(facts, FactsUnavailable)
    assert facts.reason == "directory: config.json has no num_attention_heads"


def test_inventory_keys_are_checked():
    with pytest.raises(PlanError, match="sglang_model_dir.*absolute path"):
        build_spec("h1", {}, {"sglang_model": "m/x", "sglang_model_dir": "relative/dir"})
    with pytest.raises(PlanError, match="sglang_model_revision.*not a branch, tag or commit name"):
        build_spec("h1", {}, {"sglang_model": "m/x", "sglang_model_revision": "a b"})


def test_the_deploy_resolves_the_weights_commit_with_the_same_hub_client(hub):
    """sglang_deploy/deploy/weights.resolve_commit (a deploy without facts) asks the model-info API through
    HubClient: the commit, or one PlanError naming sglang_model_revision, the token never in it."""
    import sglang_deploy.deploy.weights as rw

    def spec(model: str, revision: str = "main"):
        return build_spec("h1", {}, {"sglang_model": model, "sglang_gpus": H100, "sglang_model_revision": revision,
                                     "sglang_env": {"HF_ENDPOINT": hub.url}})

    assert rw.resolve_commit(spec("Qwen/Qwen3-0.6B"), None) == hub.repos["Qwen/Qwen3-0.6B"].commit
    assert rw.resolve_commit(spec("Qwen/Qwen3-0.6B", "c" * 40), None) == "c" * 40   # pinned: no Hub call
    with pytest.raises(PlanError) as err:
        rw.resolve_commit(spec("Qwen/Qwen3-0.6B", "no-such-branch"), TOKEN)
    assert err.value.field == "sglang_model_revision"
    assert "not found" in str(err.value) and "pin sglang_model_revision" in str(err.value)
    assert TOKEN not in str(err.value)
