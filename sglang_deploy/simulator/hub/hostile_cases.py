"""SIMULATOR ONLY: the hostile mirror's cases: the Hub stand-in (``server.py``'s hostile modes)
set up to attack the host-side weight stager (sglang_deploy/deploy/host/stage_weights.py), and
:func:`run_case`, which runs a stager script against one case and judges it. The stager's tests
(tests/test_stage_weights_hostile.py) require every case handled; benchmarks/stager_throughput.py
counts them against the script before and after a change.

A case is *handled* when nothing outside the store changed (every file of the scratch root
hashed before and after, decoys planted around the store), the store's pre-existing folders kept
their owner, no secret was printed, it ended within its deadline, and either it was refused
(non-zero exit, one line on stderr, no traceback) or, for the cases a safe stager may finish
(a longer body cut at the listed size, an ignored Range request), the snapshot holds exactly the
listed content.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from sglang_deploy.simulator.hub.repos import HubFile, HubRepo, git_blob_sha1
from sglang_deploy.simulator.hub.server import HOSTILE_PAYLOAD as PAYLOAD
from sglang_deploy.simulator.hub.server import HubServer

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
