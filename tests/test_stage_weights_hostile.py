"""sglang_deploy/deploy/host/stage_weights.py against a hostile mirror (the Hub stand-in's hostile modes): what
the Hub sends is data, never a path; links planted in the store lead nowhere; every exchange ends
by its deadline; secrets are never printed. The cases, ``run_case`` and what *handled* means:
sglang_deploy/simulator/hub/hostile_cases.py (benchmarks/stager_throughput.py counts the same
cases against the script before and after a change)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_deploy.simulator.hub.hostile_cases import (CASES, CONFIG, ENDPOINT_PASSWORD, NOBODY, REPO, REPO_DIR,
                                                       TOKEN, WEIGHTS, fingerprint, plant, repo, run_case)
from sglang_deploy.simulator.hub.repos import git_blob_sha1
from sglang_deploy.simulator.hub.server import HubServer

SCRIPT = Path(__file__).resolve().parents[1] / "sglang_deploy" / "deploy" / "host" / "stage_weights.py"


@pytest.mark.parametrize("case", CASES, ids=[f"{c['cls']}: {c['name']}" for c in CASES])
def test_every_hostile_case_is_handled(case, tmp_path):
    result = run_case(SCRIPT, case, tmp_path)
    assert result["handled"], (result["checks"], result["code"], result["stderr"][-2000:])
    if case.get("outcome") != "stage":
        assert result["code"] in (2, 4, 5, 8), result


def _one_line(tmp_path: Path, case: dict) -> str:
    result = run_case(SCRIPT, case, tmp_path)
    assert result["handled"], result
    return result["stderr"].strip()


def test_a_bad_name_is_named_escaped_before_anything_is_written(tmp_path):
    result = run_case(SCRIPT, next(c for c in CASES if "evil" in c["name"]), tmp_path)
    assert result["code"] == 5
    line = result["stderr"].strip()
    assert "\x1b" not in line and "evil\\x1b[2J\\nname.json" in line and "nothing was written" in line
    assert not (tmp_path / "a/b/store").exists()


def test_a_planted_link_stops_the_host_with_exit_8(tmp_path):
    case = next(c for c in CASES if c["name"] == "blobs-dir")
    result = run_case(SCRIPT, case, tmp_path)
    assert result["code"] == 8 and "is a link or not a folder" in result["stderr"]
    assert sorted(p.name for p in (tmp_path / "etc").iterdir()) == ["passwd"]


def test_only_what_this_run_made_gets_the_owner(tmp_path):
    case = next(c for c in CASES if c["cls"] == "owner")
    case = {**case, "outcome": "stage"}
    result = run_case(SCRIPT, case, tmp_path)
    assert result["code"] == 0 and result["handled"], result
    store = tmp_path / "a/b/store"
    assert store.stat().st_uid == NOBODY and (store / REPO_DIR).stat().st_uid == NOBODY
    assert (store / REPO_DIR / "blobs").stat().st_uid == NOBODY
    assert (store / REPO_DIR / "snapshots").stat().st_uid == 0


def test_a_trickle_ends_at_the_deadline_in_one_line(tmp_path):
    case = next(c for c in CASES if c["name"] == "file trickle")
    result = run_case(SCRIPT, case, tmp_path)
    assert result["code"] == 5 and result["wall"] < case["deadline"] + 3
    assert "deadline" in result["stderr"] and "config.json" in result["stderr"]


def test_a_longer_body_is_cut_at_the_listed_size(tmp_path):
    case = next(c for c in CASES if c["cls"] == "body" and "longer" in c["name"])
    result = run_case(SCRIPT, case, tmp_path)
    assert result["code"] == 0
    blobs = tmp_path / "a/b/store" / REPO_DIR / "blobs"
    assert sum(p.stat().st_size for p in blobs.iterdir()) == len(CONFIG) + len(WEIGHTS)


def test_an_ignored_range_starts_the_file_over(tmp_path):
    case = next(c for c in CASES if "Range" in c["name"])
    result = run_case(SCRIPT, case, tmp_path)
    assert result["code"] == 0 and "ignored the Range request" in result["stdout"]


def test_a_non_lfs_file_is_checked_by_its_git_blob_id(tmp_path):
    case = next(c for c in CASES if c["cls"] == "verify")
    result = run_case(SCRIPT, case, tmp_path)
    assert result["code"] == 4 and "config.json" in result["stderr"]
    assert "git blob id" in result["stdout"]


@pytest.mark.parametrize("name", ["token echoed by the server", "password in HF_ENDPOINT echoed"])
def test_secrets_are_never_printed(name, tmp_path):
    case = next(c for c in CASES if c["name"] == name)
    result = run_case(SCRIPT, case, tmp_path)
    assert result["code"] == 5 and "HTTP 401" in result["stderr"]
    assert TOKEN not in result["stderr"] and ENDPOINT_PASSWORD not in result["stderr"]
    if "ENDPOINT" in name:
        assert "user:***@" not in result["stderr"] or "***" in result["stderr"]


def test_bad_arguments_are_refused_in_one_line(tmp_path):
    for extra in (["--repo", "../etc"], ["--commit", "../../x"], ["--revision", "../../x"], ["--repo", "a/."]):
        argv = [sys.executable, str(SCRIPT), "--host", "gpu1", "--store", str(tmp_path / "s"), "--repo", REPO,
                "--commit", "a" * 40, *extra]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "s").exists()


def _append(store: Path, piece: Path, blob: str, offset: int) -> subprocess.CompletedProcess:
    import grp
    import pwd
    owner = f"{pwd.getpwuid(os.getuid()).pw_name}:{grp.getgrgid(os.getgid()).gr_name}"
    return subprocess.run([sys.executable, str(SCRIPT), "--host", "gpu1", "--store", str(store), "--repo", REPO,
                           "--commit", "c" * 40, "--owner", owner, "--append-piece", str(piece), "--blob", blob,
                           "--offset", str(offset)], capture_output=True, text=True, timeout=60)


def test_the_controllers_upload_is_appended_without_following_a_planted_link(tmp_path):
    """The controller's pieces (source controller:) reach the partial file through the script's
    link-refusing opens: a partial file the service user replaced by a link to a file outside the
    store stops the host (exit 8) and the file outside keeps its bytes."""
    store = plant(tmp_path)
    blob = hashlib.sha256(b"weights").hexdigest()
    piece = tmp_path / "piece"
    piece.write_bytes(b"0123456789")
    assert _append(store, piece, blob, 0).returncode == 0
    partial = store / REPO_DIR / "blobs" / f"{blob}.sglang-deploy-partial"
    assert partial.read_bytes() == b"0123456789"
    wrong = _append(store, piece, blob, 3)  # a piece that does not continue the file is refused
    assert wrong.returncode == 7 and "holds 10 bytes" in wrong.stderr and partial.read_bytes() == b"0123456789"
    assert _append(store, piece, blob, 10).returncode == 0 and partial.stat().st_size == 20
    partial.unlink()
    partial.symlink_to(tmp_path / "etc" / "passwd")
    before = fingerprint(tmp_path, store)
    proc = _append(store, piece, blob, 0)
    assert proc.returncode == 8 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert fingerprint(tmp_path, store) == before
    assert (tmp_path / "etc" / "passwd").read_bytes() == b"root:x:0:0\n"


def test_prune_never_follows_a_link_out_of_the_store(tmp_path):
    store = plant(tmp_path)
    repo_dir = store / REPO_DIR
    old, new = "a" * 40, "b" * 40
    for commit in (old, new):
        (repo_dir / "snapshots" / commit).mkdir(parents=True)
    (repo_dir / "snapshots" / old / "evil").symlink_to(tmp_path / "etc")     # a link inside an old snapshot
    (repo_dir / "blobs").mkdir()
    (repo_dir / "blobs" / "outside").symlink_to(tmp_path / "etc" / "passwd")  # a blob that is a link
    (store / "models--x--y").symlink_to(tmp_path / "a")                        # a repo folder that is a link
    (repo_dir / "refs").symlink_to(tmp_path / "etc")
    os.utime(repo_dir / "snapshots" / old, (1000, 1000))
    before = fingerprint(tmp_path, store)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--host", "gpu1", "--prune", "--store", str(store),
                           "--state-dir", str(tmp_path / "state"), "--keep", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert fingerprint(tmp_path, store) == before
    assert (repo_dir / "blobs" / "outside").is_symlink() and not (repo_dir / "snapshots" / old).exists()


# ---- property: for any listing, staged inside the store or stopped; nothing outside changes -----

_stage = None


def _module():
    global _stage
    if _stage is None:
        spec = importlib.util.spec_from_file_location("stage_weights_under_test", SCRIPT)
        _stage = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_stage)
    return _stage


def stage_in_process(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                _module().main(argv)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return code, out.getvalue(), err.getvalue()


HOSTILE_SEGMENTS = ["..", ".", "", "/", "\\", "\x00", "\x1b[2J", "\n", "\u202e", "etc", "decoy-top", "a" * 256]
segment = st.one_of(st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True), st.sampled_from(HOSTILE_SEGMENTS),
                    st.text(max_size=6))
name = st.one_of(st.lists(segment, min_size=1, max_size=4).map("/".join), st.text(max_size=20),
                 st.sampled_from(["../../../../../decoy-top", "/etc/passwd", "a/../../b", "config.json"]))
hexish = st.one_of(st.from_regex(r"[0-9a-f]{40}", fullmatch=True), st.from_regex(r"[0-9a-f]{64}", fullmatch=True),
                   st.sampled_from(["../../../../../decoy-top", "..", "A" * 40, "0" * 39, ""]), st.text(max_size=70),
                   st.none(), st.integers())
size = st.one_of(st.integers(min_value=-5, max_value=64), st.sampled_from([2 ** 50, 2 ** 70, 1.5, True, "3"]),
                 st.none())


@st.composite
def listing(draw):
    """Good entries (served content, right hashes), some with one field replaced by a drawn one."""
    entries, files = [], {}
    for _ in range(draw(st.integers(1, 4))):
        n = draw(name)
        data = draw(st.binary(max_size=48))
        lfs = draw(st.booleans())
        entry = {"rfilename": n, "size": len(data), "blobId": git_blob_sha1(data)}
        if lfs:
            entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        broken = draw(st.sampled_from(["none", "none", "blobId", "sha256", "size", "raw"]))
        if broken == "blobId":
            entry["blobId"] = draw(hexish)
        elif broken == "sha256":
            entry["lfs"] = {"sha256": draw(hexish), "size": len(data)}
        elif broken == "size":
            entry["size"] = draw(size)
        elif broken == "raw":
            entry = draw(st.one_of(st.none(), st.integers(), st.text(max_size=5), st.just([])))
        entries.append(entry)
        if isinstance(n, str):
            files[n] = data
    return entries, files


@pytest.fixture(scope="module")
def listing_hub():
    with HubServer({REPO: repo()}, hostile="listing") as server:
        yield server


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(drawn=listing())
def test_any_listing_is_staged_in_the_store_or_stops_before_writing(listing_hub, drawn):
    entries, files = drawn
    listing_hub.hostile_siblings, listing_hub.hostile_files = entries, files
    root = Path(tempfile.mkdtemp(prefix="stage-prop-"))
    try:
        store = plant(root)
        env_file = root / "sglang.env"
        env_file.write_text(f"HF_ENDPOINT={listing_hub.url}\nHF_TOKEN={TOKEN}\n")
        before = fingerprint(root, store)
        code, out, err = stage_in_process([
            "--host", "gpu1", "--store", str(store), "--repo", REPO, "--commit", listing_hub.repos[REPO].commit,
            "--revision", "main", "--env-file", str(env_file), "--owner", "root:root", "--allowance-s", "10"])
        assert fingerprint(root, store) == before
        assert TOKEN not in out + err and "Traceback" not in err
        if code == 0:
            snap = store / REPO_DIR / "snapshots" / listing_hub.repos[REPO].commit
            for entry in entries:
                data = (snap / entry["rfilename"]).read_bytes()
                assert len(data) == entry["size"]
            assert snap.resolve().is_relative_to(store.resolve())
        else:
            assert code in (3, 4, 5), (code, err)
            assert len(err.strip().splitlines()) == 1, err
            if code in (3, 5):
                assert not store.exists(), err
    finally:
        shutil.rmtree(root)


def test_the_stand_in_hostile_listing_serves_what_it_was_given(listing_hub):
    listing_hub.hostile_siblings = [{"rfilename": "../x", "size": 1, "blobId": "0" * 40}]
    info = json.loads(urllib_get(f"{listing_hub.url}/api/models/{REPO}/revision/main?blobs=true"))
    assert info["siblings"] == listing_hub.hostile_siblings


def urllib_get(url: str) -> bytes:
    import urllib.request
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.read()
