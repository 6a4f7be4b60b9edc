"""sglang_deploy/deploy/host/stage_weights.py against a hostile mirror (the Hub stand-in's hostile modes): what
the Hub sends is data, never a path; links planted in the store lead nowhere; every exchange ends
by its deadline; secrets are never printed. ``CASES`` and ``run_case`` are also what
benchmarks/stager_throughput.py counts against the script before and after this change.

A case is *handled* when nothing outside the store changed (every file of the scratch root
hashed before and after, decoys planted around the store), the store's pre-existing folders kept
their owner, no secret was printed, it ended within its deadline, and either it was refused
(non-zero exit, one line on stderr, no traceback) or, for the cases a safe stager may finish
(a longer body cut at the listed size, an ignored Range request), the snapshot holds exactly the
listed content."""

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
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_deploy.simulator.hub.repos import HubFile, HubRepo, git_blob_sha1
from sglang_deploy.simulator.hub.server import HOSTILE_PAYLOAD as PAYLOAD
from sglang_deploy.simulator.hub.server import HubServer

SCRIPT = Path(__file__).resolve().parents[1] / "sglang_deploy" / "deploy" / "host" / "stage_weights.py"
REPO = "org/hostile-model"
REPO_DIR = "models--org--hostile-model"
TOKEN = "hf_secret_token_value_42"
ENDPOINT_PASSWORD = "endpointpass77"
CONFIG = b'{"architectures": ["X"], "hidden_size": 8}\n'
WEIGHTS = bytes(range(256)) * 1024  # 256 KiB
NOBODY = 65534


def repo() -> HubRepo:
    return HubRepo(REPO, {"config.json": HubFile.from_bytes(CONFIG, lfs=False),
                          "model.safetensors": HubFile.from_bytes(WEIGHTS, lfs=True)})


def good_listing(r: HubRepo) -> list[dict]:
    out = []
    for name, f in sorted(r.files.items()):
        entry = {"rfilename": name, "blobId": f.blob_id(), "size": f.size}
        if f.lfs:
            entry["lfs"] = {"sha256": f.etag(), "size": f.size, "pointerSize": 130}
        out.append(entry)
    return out


# ---- scratch root: decoys around the store, hashed before and after ---------------------------

def plant(root: Path) -> Path:
    """Decoys around the store (``root/a/b/store``); the store's parent folders exist."""
    for rel, data in {"etc/passwd": b"root:x:0:0\n", "decoy-top": b"top\n", "a/decoy-a": b"a\n",
                      "a/b/decoy-b": b"b\n", "a/b/store-sibling/x": b"x\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root / "a" / "b" / "store"


def fingerprint(root: Path, store: Path) -> dict[str, tuple]:
    """Every entry of ``root`` outside ``store``: kind, content hash or link target, owner, mode."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        here = Path(dirpath)
        if here == store or store in here.parents:
            dirs[:] = []
            continue
        for name in dirs + files:
            p = here / name
            if p == store:
                continue
            st_ = p.lstat()
            if p.is_symlink():
                what = ("link", os.readlink(p))
            elif p.is_file():
                what = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                what = ("dir",)
            out[str(p.relative_to(root))] = (*what, st_.st_uid, st_.st_mode)
    return out


# ---- the cases ---------------------------------------------------------------------------------

def _listing(server: HubServer, root: Path, siblings: list, files: dict | None = None) -> None:
    server.hostile = "listing"
    server.hostile_siblings = siblings
    server.hostile_files = files or {}


def _with(entry: dict, **changes) -> list[dict]:
    r = repo()
    base = good_listing(r)
    return base + [{**entry, **changes}]


P_ENTRY = {"rfilename": "payload.json", "blobId": git_blob_sha1(PAYLOAD), "size": len(PAYLOAD)}


def _names(*names: str):
    return lambda server, root: _listing(server, root, [*good_listing(repo()),
                                                        *({**P_ENTRY, "rfilename": n} for n in names)])


def _abs(server: HubServer, root: Path) -> None:
    _listing(server, root, _with(P_ENTRY, rfilename=str(root / "decoy-top")))


def _blob(blob_id: str, lfs: str | None = None):
    def setup(server: HubServer, root: Path) -> None:
        entry = {**P_ENTRY, "blobId": blob_id.format(root=root)}
        if lfs is not None:
            entry["lfs"] = {"sha256": lfs.format(root=root), "size": len(PAYLOAD), "pointerSize": 130}
        _listing(server, root, _with(entry))
    return setup


def _planted(kind: str):
    """A link planted in the store, pointing at a decoy outside it."""
    def setup(server: HubServer, root: Path) -> None:
        r = server.repos[REPO]
        store = root / "a/b/store" / REPO_DIR
        cfg = r.files["config.json"].blob_id()
        if kind == "blobs-dir":
            store.mkdir(parents=True)
            (store / "blobs").symlink_to(root / "etc")
        elif kind == "snapshot-dir":
            (store / "snapshots").mkdir(parents=True)
            (store / "snapshots" / r.commit).symlink_to(root / "etc")
        elif kind == "partial":
            (store / "blobs").mkdir(parents=True)
            (store / "blobs" / f"{cfg}.sglang-deploy-partial").symlink_to(root / "etc" / "passwd")
        elif kind == "blob":
            (store / "blobs").mkdir(parents=True)
            (store / "blobs" / cfg).symlink_to(root / "etc" / "passwd")
        elif kind == "hardlink":
            (store / "blobs").mkdir(parents=True)
            os.link(root / "etc" / "passwd", store / "blobs" / f"{cfg}.sglang-deploy-partial")
        elif kind == "refs-dir":
            store.mkdir(parents=True)
            (store / "refs").symlink_to(root / "etc")
    return setup


def _owned(server: HubServer, root: Path) -> None:
    store = root / "a/b/store"
    (store / REPO_DIR / "blobs").mkdir(parents=True)
    for p in (store, store / REPO_DIR, store / REPO_DIR / "blobs"):
        os.chown(p, NOBODY, NOBODY)


def _modes(*modes: str, **attrs):
    def setup(server: HubServer, root: Path) -> None:
        server.hostile = modes
        for key, value in attrs.items():
            setattr(server, key, value)
    return setup


def _resume_ignored(server: HubServer, root: Path) -> None:
    blobs = root / "a/b/store" / REPO_DIR / "blobs"
    blobs.mkdir(parents=True)
    f = server.repos[REPO].files["model.safetensors"]
    (blobs / f"{f.etag()}.sglang-deploy-partial").write_bytes(WEIGHTS[:1000])
    server.hostile = "ignore-range"


def _wrong_content(server: HubServer, root: Path) -> None:
    bad = CONFIG.replace(b"8", b"9")  # same size, other content (remote code would run what is served)
    _listing(server, root, good_listing(repo()), {"config.json": bad})


# (class, name, setup, outcome "refuse" | "stage", extra: token / endpoint credentials / deadline)
CASES: list[dict] = [
    *({"cls": "names: traversal", "name": n, "setup": _names(n)} for n in
      ("../../../../../decoy-top", "a/../../../../../../decoy-a", "./payload.json", "a//b.json", "x/..", ".")),
    {"cls": "names: absolute", "name": "absolute path into the scratch root", "setup": _abs},
    *({"cls": "names: control/backslash", "name": repr(n), "setup": _names(n)} for n in
      ("evil\x1b[2J\nname.json", "a\\..\\..\\b.json", "nul\x00.json", "bidi\u202e.json")),
    {"cls": "names: duplicate/clash", "name": "listed twice", "setup": _names("config.json")},
    {"cls": "names: duplicate/clash", "name": "file and folder", "setup": _names("config.json/x")},
    {"cls": "hashes", "name": "blob id with ..", "setup": _blob("../../../../../decoy-top")},
    {"cls": "hashes", "name": "blob id absolute", "setup": _blob("{root}/decoy-top")},
    {"cls": "hashes", "name": "sha256 with ..", "setup": _blob(git_blob_sha1(PAYLOAD), "../../../../../decoy-top")},
    {"cls": "hashes", "name": "sizes: negative", "setup": lambda s, r: _listing(s, r, _with(P_ENTRY, size=-1))},
    {"cls": "hashes", "name": "sizes: not an int", "setup": lambda s, r: _listing(s, r, _with(P_ENTRY, size="16"))},
    *({"cls": "planted links", "name": k, "setup": _planted(k)} for k in
      ("blobs-dir", "snapshot-dir", "partial", "blob", "hardlink", "refs-dir")),
    {"cls": "owner", "name": "store root owned by someone else", "setup": _owned, "outcome": "stage"},
    {"cls": "deadline", "name": "file trickle", "setup": _modes("trickle", hostile_delay_s=0.5), "deadline": 3},
    {"cls": "deadline", "name": "listing trickle", "setup": _modes("trickle-info", hostile_delay_s=0.5),
     "deadline": 3},
    {"cls": "json", "name": "huge model info", "setup": _modes("huge-json")},
    {"cls": "json", "name": "deeply nested model info", "setup": _modes("deep-json")},
    {"cls": "body", "name": "body longer than listed", "setup": _modes("long-body"), "outcome": "stage"},
    {"cls": "body", "name": "Range ignored on resume", "setup": _resume_ignored, "outcome": "stage"},
    {"cls": "verify", "name": "non-LFS file, right size, wrong content", "setup": _wrong_content},
    {"cls": "secrets", "name": "token echoed by the server", "setup": _modes("echo-token")},
    {"cls": "secrets", "name": "password in HF_ENDPOINT echoed", "setup": _modes("echo-token"), "endpoint_auth": True},
    {"cls": "secrets", "name": "token with a control character", "setup": lambda s, r: None,
     "token": TOKEN + "\x1b[0m"},
]


def supports_deadlines(script: Path) -> bool:
    return "--allowance-s" in script.read_text()


def run_case(script: Path, case: dict, root: Path, python: str = sys.executable) -> dict:
    """One case against ``script`` in a fresh scratch root: the outcome and whether it was handled."""
    store = plant(root)
    r = repo()
    with HubServer({REPO: r}) as server:
        case["setup"](server, root)
        token = case.get("token", TOKEN)
        endpoint = server.url
        if case.get("endpoint_auth"):
            endpoint = endpoint.replace("http://", f"http://user:{ENDPOINT_PASSWORD}@")
        env_file = root / "sglang.env"
        env_file.write_text(f"HF_ENDPOINT={endpoint}\nHF_TOKEN='{token}'\n" if not case.get("endpoint_auth")
                            else f"HF_ENDPOINT={endpoint}\n")
        before = fingerprint(root, store)
        owners = {p: p.stat().st_uid for p in (store, store / REPO_DIR, store / REPO_DIR / "blobs") if p.exists()}
        argv = [python, str(script), "--host", "gpu1", "--store", str(store), "--repo", REPO, "--commit", r.commit,
                "--revision", "main", "--env-file", str(env_file), "--owner", "root:root"]
        deadline = case.get("deadline", 60)
        if supports_deadlines(script):
            argv += ["--allowance-s", str(deadline), "--min-rate", str(1 << 20)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        t0 = time.monotonic()
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=deadline + 10, env=env,
                                  errors="backslashreplace")
            code, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            code, out, err = None, str(exc.stdout or ""), str(exc.stderr or "")
        wall = time.monotonic() - t0
        after = fingerprint(root, store)
    printed = out + err
    secrets = [s for s in (TOKEN, ENDPOINT_PASSWORD, token) if s]
    checks = {
        "outside unchanged": before == after,
        "owners kept": all(p.stat().st_uid == uid for p, uid in owners.items() if p.exists()),
        "no secret printed": not any(s in printed for s in secrets),
        "within deadline": code is not None and wall <= deadline + 5,
        "no traceback": "Traceback" not in printed,
    }
    if case.get("outcome") == "stage":
        snap = store / REPO_DIR / "snapshots" / r.commit
        staged = code == 0 and all((snap / n).is_file() and (snap / n).read_bytes() == f.read(0, f.size)
                                   for n, f in r.files.items())
        refused = code not in (0, None) and len(err.strip().splitlines()) == 1
        checks["staged exactly, or refused in one line"] = staged or refused
    else:
        checks["refused in one line"] = code not in (0, None) and len(err.strip().splitlines()) == 1
    return {"code": code, "stdout": out, "stderr": err, "wall": wall, "checks": checks,
            "handled": all(checks.values())}


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
