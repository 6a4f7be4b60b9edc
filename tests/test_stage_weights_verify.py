"""stage_weights.py's re-hash of a complete snapshot against the manifest its marker records:
``--verify-served`` (read-only, for ``sglang-deploy status --verify-weights``) and ``--verify``
(a deploy: a corrupt file in a snapshot marked complete is fetched again), against the Hub
stand-in. The marker is a file in a store the service user owns: a hostile one is refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_deploy.simulator.hub.repos import recorded_repos
from sglang_deploy.simulator.hub.server import HubServer
from sglang_deploy.simulator.hub.weights import weight_files
from tests.test_stage_weights import REPO, SCRIPT, SIZE, run, snapshot

NAME = "model-00002-of-00002.safetensors"


@pytest.fixture
def hub():
    server = HubServer(recorded_repos({REPO: weight_files(REPO, SIZE, shards=2)}, only=[REPO]))
    with server:
        yield server


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """One download, for the tests that only change what it left: (the Hub, the store's folder).
    Each such test works on its own copy (links kept, as the Hub cache's are relative)."""
    server = HubServer(recorded_repos({REPO: weight_files(REPO, SIZE, shards=2)}, only=[REPO]))
    tmp = tmp_path_factory.mktemp("staged")
    with server:
        assert run(server, tmp).returncode == 0
    return server, tmp / "store"


def copy_of(staged, tmp: Path) -> HubServer:
    """The staged store copied into ``tmp``; the Hub it came from (stopped: only its names are read)."""
    server, store = staged
    shutil.copytree(store, tmp / "store", symlinks=True)
    return server


def serve(tmp: Path, snap: Path) -> Path:
    """A state directory whose running revision serves ``snap``."""
    state = tmp / "state"
    (state / "revisions" / "0123456789abcdef").mkdir(parents=True, exist_ok=True)
    (state / "current").write_text("0123456789abcdef\n")
    (state / "revisions" / "0123456789abcdef" / "argv.json").write_text(
        json.dumps(["python", "-m", "sglang.launch_server", "--model-path", str(snap)]))
    return state


def verify_served(state: Path, *extra: str) -> dict:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--host", "gpu1", "--verify-served", "--state-dir",
                           str(state), *extra], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def flip(path: Path, keep_mtime: bool = True) -> None:
    """One byte flipped, size and (by default) modification time kept: only a hash sees it."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def marker(hub: HubServer, tmp: Path) -> Path:
    return tmp / "store/models--Qwen--Qwen3-0.6B/.sglang-deploy-complete" / hub.repos[REPO].commit


def test_the_marker_records_a_manifest_and_a_clean_snapshot_verifies(hub, tmp_path):
    assert run(hub, tmp_path).returncode == 0
    files = hub.repos[REPO].files
    recorded = json.loads(marker(hub, tmp_path).read_text())["files"]
    assert {p: v[2] for p, v in recorded.items()} == {p: f.etag() for p, f in files.items()}
    got = verify_served(serve(tmp_path, snapshot(hub, tmp_path)))
    assert got["served"] == str(snapshot(hub, tmp_path))
    assert got["finished"] and got["bad"] == [] and got["error"] is None
    assert got["files"] == len(files) and got["bytes"] == sum(f.size for f in files.values())


def test_a_flipped_byte_and_a_missing_file_are_named(staged, tmp_path):
    hub = copy_of(staged, tmp_path)
    snap = snapshot(hub, tmp_path)
    flip((snap / NAME).resolve())
    (snap / "config.json").unlink()
    got = verify_served(serve(tmp_path, snap))
    assert got["finished"]
    bad = dict(got["bad"])
    assert set(bad) == {NAME, "config.json"}
    assert bad[NAME].startswith("sha256 ") and bad["config.json"] == "missing"


def test_a_running_revision_without_a_store_snapshot_has_nothing_to_verify(tmp_path):
    assert verify_served(serve(tmp_path, tmp_path / "ckpt")) == {"served": None}
    assert verify_served(tmp_path / "nowhere") == {"served": None}


def test_the_deadline_bounds_the_work(staged, tmp_path):
    hub = copy_of(staged, tmp_path)
    got = verify_served(serve(tmp_path, snapshot(hub, tmp_path)), "--verify-deadline-s", "0")
    assert not got["finished"] and "deadline passed after 0 of" in got["error"]


@pytest.mark.parametrize("body, why", [
    ('{"files": {"../../etc/passwd": [1, 1, "' + "a" * 64 + '"]}}', "'..' segment"),
    ('{"files": {"/etc/shadow": [1, 1, "' + "a" * 64 + '"]}}', "an absolute path"),
    ('{"files": {"a\\u001b[2Jb": [1, 1, "' + "a" * 64 + '"]}}', "control character"),
    ('{"files": {"x": [1, 1, "../../../etc/passwd"]}}', "not 40 or 64 lowercase hex"),
    ('{"files": {"x": [-1, 1, "' + "a" * 40 + '"]}}', "not an integer in range"),
    ('{"files": {"x": [1e400, 1, "' + "a" * 40 + '"]}}', "not an integer in range"),
    ('{"files": {"x": {"size": 1}}}', "not [size, mtime_ns, blob]"),
    ('{"files": {"x": [NaN, 1, "' + "a" * 40 + '"]}}', "not one this script wrote"),
    ('{"files": ' + "[" * 100_000 + "]" * 100_000 + "}", "not one this script wrote"),
    ('{"files": "x"}', "not one this script wrote"),
    ("not json", "not one this script wrote"),
])
def test_a_hostile_marker_is_refused_and_nothing_is_read_outside(staged, tmp_path, body, why):
    hub = copy_of(staged, tmp_path)
    marker(hub, tmp_path).write_text(body)
    got = verify_served(serve(tmp_path, snapshot(hub, tmp_path)))
    assert not got["finished"] and why in got["error"] and got["files"] == 0
    assert "\x1b" not in json.dumps(got, ensure_ascii=False)


def test_a_marker_that_is_a_link_or_a_fifo_is_not_followed(staged, tmp_path):
    hub = copy_of(staged, tmp_path)
    mark = marker(hub, tmp_path)
    mark.unlink()
    secret = tmp_path / "secret.json"
    secret.write_text('{"files": {}}')
    mark.symlink_to(secret)
    got = verify_served(serve(tmp_path, snapshot(hub, tmp_path)))
    assert "no completion marker" in got["error"]
    mark.unlink()
    os.mkfifo(mark)
    got = verify_served(serve(tmp_path, snapshot(hub, tmp_path)))
    assert "not a plain file" in got["error"]


def test_a_snapshot_link_pointing_outside_the_store_is_named_not_followed(staged, tmp_path):
    hub = copy_of(staged, tmp_path)
    snap = snapshot(hub, tmp_path)
    outside = tmp_path / "outside"
    outside.write_bytes((snap / NAME).read_bytes())
    (snap / NAME).unlink()
    (snap / NAME).symlink_to(outside)
    bad = dict(verify_served(serve(tmp_path, snap))["bad"])
    assert bad == {NAME: "not the link to its blob"}


def test_deploy_verify_fetches_a_corrupt_file_of_a_complete_snapshot_again(hub, tmp_path):
    assert run(hub, tmp_path).returncode == 0
    snap = snapshot(hub, tmp_path)
    blob = (snap / NAME).resolve()
    flip(blob)  # size and mtime kept: the quick check alone sees nothing
    plain = run(hub, tmp_path)
    assert plain.returncode == 0 and "already in" in plain.stdout
    sent = hub.bytes_sent
    proc = run(hub, tmp_path, "--verify")
    assert proc.returncode == 0, proc.stderr
    assert f"the re-hash found {NAME} sha256" in proc.stdout
    assert f"{NAME}: the stored blob fails verification" in proc.stdout
    f = hub.repos[REPO].files[NAME]
    assert blob.read_bytes() == f.read(0, f.size)
    assert hub.bytes_sent - sent == f.size  # only the bad file
    clean = run(hub, tmp_path, "--verify")
    assert clean.returncode == 0 and "all match" in clean.stdout and "already in" in clean.stdout
    assert verify_served(serve(tmp_path, snap))["bad"] == []


def test_deploy_verify_restages_a_snapshot_whose_marker_has_no_hashes(hub, tmp_path):
    assert run(hub, tmp_path).returncode == 0
    mark = marker(hub, tmp_path)
    old = json.loads(mark.read_text())
    old["files"] = {p: v[:2] for p, v in old["files"].items()}  # as an older script wrote it
    mark.write_text(json.dumps(old))
    assert run(hub, tmp_path).returncode == 0  # the quick check still accepts it
    proc = run(hub, tmp_path, "--verify")
    assert proc.returncode == 0 and "records no hashes" in proc.stdout
    assert all(len(v) == 3 for v in json.loads(mark.read_text())["files"].values())

