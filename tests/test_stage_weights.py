"""sglang_deploy/deploy/host/stage_weights.py against the Hub stand-in, run here as the deploy runs it on a host
(with a python that has huggingface_hub): disk check, download, verification, marker, resume,
corruption, and a store huggingface_hub itself recognises."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import scan_cache_dir, try_to_load_from_cache

from sglang_deploy.simulator.hub.repos import recorded_repos
from sglang_deploy.simulator.hub.server import HubServer
from sglang_deploy.simulator.hub.weights import weight_files

SCRIPT = Path(__file__).resolve().parents[1] / "sglang_deploy" / "deploy" / "host" / "stage_weights.py"
REPO = "Qwen/Qwen3-0.6B"
SIZE = 6_000_000
OWNER = f"{pwd.getpwuid(os.getuid()).pw_name}:{grp.getgrgid(os.getgid()).gr_name}"


@pytest.fixture
def hub():
    server = HubServer(recorded_repos({REPO: weight_files(REPO, SIZE, shards=2)}, only=[REPO]))
    with server:
        yield server


def run(hub: HubServer, tmp: Path, *extra: str, token: str = "hf_test_token_value") -> subprocess.CompletedProcess:
    env_file = tmp / "sglang.env"
    env_file.write_text(f"# test\nHF_HUB_OFFLINE=1\nHF_ENDPOINT={hub.url}\nHF_TOKEN='{token}'\n")
    env_file.chmod(0o600)
    commit = hub.repos[REPO].commit
    argv = [sys.executable, str(SCRIPT), "--host", "gpu1", "--store", str(tmp / "store"), "--repo", REPO,
            "--commit", commit, "--revision", "main", "--env-file", str(env_file), "--owner", OWNER, *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert token not in proc.stdout + proc.stderr
    return proc


def snapshot(hub: HubServer, tmp: Path) -> Path:
    return tmp / "store" / "models--Qwen--Qwen3-0.6B" / "snapshots" / hub.repos[REPO].commit


def test_downloads_verifies_and_marks_a_snapshot_huggingface_hub_recognises(hub, tmp_path):
    proc = run(hub, tmp_path)
    assert proc.returncode == 0, proc.stderr
    snap = snapshot(hub, tmp_path)
    files = hub.repos[REPO].files
    for name, f in files.items():
        assert (snap / name).read_bytes() == f.read(0, f.size)
        assert os.readlink(snap / name).startswith("../../blobs/")
    marker = json.loads((tmp_path / "store/models--Qwen--Qwen3-0.6B/.sglang-deploy-complete" /
                         hub.repos[REPO].commit).read_text())
    assert set(marker["files"]) == set(files) and marker["verified_at"] >= marker["started_at"]
    # huggingface_hub's own cache readers see the snapshot (and the ref of "main").
    cached = try_to_load_from_cache(REPO, "config.json", cache_dir=tmp_path / "store", revision="main")
    assert cached == str(snap / "config.json")
    repos = scan_cache_dir(tmp_path / "store").repos
    assert [r.repo_id for r in repos] == [REPO] and len(next(iter(repos)).revisions) == 1
    sent = hub.bytes_sent
    again = run(hub, tmp_path)
    assert again.returncode == 0 and "already in" in again.stdout and hub.bytes_sent == sent


def test_too_little_disk_stops_before_anything_is_written(hub, tmp_path):
    proc = run(hub, tmp_path, "--margin-bytes", str(2 ** 60))
    assert proc.returncode == 3
    line = proc.stderr.strip()
    assert "\n" not in line and line.startswith("gpu1: sglang_model_store")
    total = sum(f.size for f in hub.repos[REPO].files.values())
    assert f"{2 ** 60 + total} bytes needed" in line and "bytes free" in line
    assert not (tmp_path / "store").exists()


def test_a_partial_download_is_resumed_with_a_range_request(hub, tmp_path):
    files = hub.repos[REPO].files
    name = "model-00001-of-00002.safetensors"
    f = files[name]
    blobs = tmp_path / "store/models--Qwen--Qwen3-0.6B/blobs"
    blobs.mkdir(parents=True)
    half = f.size // 2
    (blobs / f"{f.etag()}.sglang-deploy-partial").write_bytes(f.read(0, half))
    proc = run(hub, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"resuming {f.etag()}.sglang-deploy-partial at byte {half}" in proc.stdout
    assert hub.bytes_sent == sum(x.size for x in files.values()) - half
    assert (snapshot(hub, tmp_path) / name).read_bytes() == f.read(0, f.size)


def test_a_corrupted_file_is_detected_and_fetched_again(hub, tmp_path):
    assert run(hub, tmp_path).returncode == 0
    name = "model-00002-of-00002.safetensors"
    path = (snapshot(hub, tmp_path) / name).resolve()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte flipped
    path.write_bytes(bytes(data))
    proc = run(hub, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"{name} changed since it was verified" in proc.stdout
    assert f"{name}: the stored blob fails verification (sha256" in proc.stdout
    f = hub.repos[REPO].files[name]
    assert path.read_bytes() == f.read(0, f.size)


def test_a_checkpoint_directory_on_the_host_is_only_checked(tmp_path):
    (tmp_path / "ckpt").mkdir()
    argv = [sys.executable, str(SCRIPT), "--host", "gpu1", "--check-dir", str(tmp_path / "ckpt")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 6 and "no config.json there" in proc.stderr
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    assert subprocess.run(argv, capture_output=True, text=True, timeout=60).returncode == 0


def test_prune_keeps_the_newest_and_every_snapshot_a_staged_revision_serves(tmp_path):
    store, state = tmp_path / "store", tmp_path / "state"
    repo = store / "models--org--m"
    commits = [c * 40 for c in "abcd"]  # oldest first
    for i, commit in enumerate(commits):
        blob = repo / "blobs" / f"blob{i}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(b"x" * (i + 1))
        snap = repo / "snapshots" / commit
        snap.mkdir(parents=True)
        (snap / "model.safetensors").symlink_to(f"../../blobs/blob{i}")
        mark = repo / ".sglang-deploy-complete" / commit
        mark.parent.mkdir(exist_ok=True)
        mark.write_text("{}")
        os.utime(mark, (1000 + i, 1000 + i))
    (repo / "blobs" / "blobX.sglang-deploy-partial").write_bytes(b"half")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commits[1])
    # The previous revision serves the oldest snapshot.
    rev = state / "revisions" / "r1"
    rev.mkdir(parents=True)
    (rev / "argv.json").write_text(json.dumps(["--model-path", str(repo / "snapshots" / commits[0])]))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--host", "gpu1", "--prune", "--store", str(store),
                           "--state-dir", str(state), "--keep", "2"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    left = sorted(p.name for p in (repo / "snapshots").iterdir())
    # kept: the one in use (a...), then the newest (d...): two in all
    assert left == sorted([commits[0], commits[3]])
    assert sorted(p.name for p in (repo / "blobs").iterdir()) == ["blob0", "blob3", "blobX.sglang-deploy-partial"]
    assert not (repo / "refs" / "main").exists()
    assert sorted(p.name for p in (repo / ".sglang-deploy-complete").iterdir()) == sorted([commits[0], commits[3]])


def test_a_controller_directory_is_listed_with_sha256_and_named_by_its_content(tmp_path):
    from sglang_deploy.deploy.weights import controller_commit, controller_files
    from sglang_deploy.errors import PlanError

    with pytest.raises(PlanError) as err:
        controller_files("gpu1", str(tmp_path))
    assert err.value.field == "sglang_model_source" and "no config.json" in err.value.message
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"w" * 1000)
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "junk").write_text("x")  # hidden: not part of the checkpoint
    files = controller_files("gpu1", str(tmp_path))
    assert [f["path"] for f in files] == ["config.json", "model.safetensors"]
    assert files[1]["sha256"] == hashlib.sha256(b"w" * 1000).hexdigest() == files[1]["blob"]
    first = controller_commit(files)
    assert len(first) == 40 and controller_commit(controller_files("gpu1", str(tmp_path))) == first
    (tmp_path / "config.json").write_text('{"a": 1}')
    assert controller_commit(controller_files("gpu1", str(tmp_path))) != first


def test_it_runs_on_a_host_with_only_what_the_deploy_ships(hub, tmp_path):
    """On the GPU host the stager has the standard library and its parts as the deploy ships them
    (sglang_deploy/deploy/hostscript.py): the deploy's command runs the zipapp of the script and its
    parts; the continuous check's copy has stager.zip beside it (deploy/watching.py). Without
    site-packages (``-S``) the package is importable from nothing else, so each run proves its form."""
    import shutil

    from sglang_deploy.deploy.hostscript import PARTS, embedded, parts_zip
    from sglang_deploy.deploy.weights import STAGE_SCRIPT

    env_file = tmp_path / "sglang.env"
    env_file.write_text(f"HF_ENDPOINT={hub.url}\nHF_TOKEN='hf_test_token_value'\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    args = ["--host", "gpu1", "--store", str(tmp_path / "store"), "--repo", REPO, "--commit", hub.repos[REPO].commit,
            "--revision", "main", "--env-file", str(env_file), "--owner", OWNER]
    command = embedded(STAGE_SCRIPT, sys.executable, args, options=["-I", "-S"])
    staged = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, env=env,
                            cwd=tmp_path)
    assert staged.returncode == 0 and "verified in" in staged.stdout, staged.stderr
    snap = snapshot(hub, tmp_path)

    state = tmp_path / "state"
    (state / "revisions" / "0123456789abcdef").mkdir(parents=True)
    (state / "current").write_text("0123456789abcdef\n")
    (state / "revisions" / "0123456789abcdef" / "argv.json").write_text(json.dumps(["--model-path", str(snap)]))
    wdir = tmp_path / "watch"
    wdir.mkdir()
    shutil.copy(STAGE_SCRIPT, wdir / STAGE_SCRIPT.name)
    argv = [sys.executable, "-I", "-S", str(wdir / STAGE_SCRIPT.name), "--host", "localhost", "--verify-served",
            "--state-dir", str(state)]
    alone = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert "No module named 'sglang_deploy'" in alone.stderr  # the zip is what it needs
    shipped = parts_zip(STAGE_SCRIPT)
    assert shipped is not None and shipped == parts_zip(STAGE_SCRIPT)  # the same bytes: nothing re-uploaded
    (wdir / f"{PARTS[STAGE_SCRIPT.name]}.zip").write_bytes(shipped)
    checked = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    result = json.loads(checked.stdout.strip().splitlines()[-1])
    assert result["served"] == str(snap) and result["finished"] and result["bad"] == []
    assert result["files"] == len(hub.repos[REPO].files)
