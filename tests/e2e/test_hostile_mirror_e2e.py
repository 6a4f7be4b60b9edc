"""A hostile mirror against a throwaway host: `pyinfra INVENTORY deploy.py` with `HF_ENDPOINT` naming
the Hub stand-in in one of its hostile modes (sglang_deploy/simulator/hub/server.py, ``hostile``).

The host first serves a model deployed from the well-behaved stand-in. Then each hostile mode
is tried with a deploy of another model: the host must keep serving its old revision (same
server process, same unit, same current revision), one line of the deploy's output must name
what was refused, and nothing outside the model store may change on the host: every path the
host wrote under /etc, /root, /usr/local and /var/lib (the overlay's upper layer holds exactly
what the host changed, deletions and ownership changes included) is hashed before and after.

Two kinds of deploy: the listing and the file bodies reach only the host's stager (the
controller reads the model's facts from a local copy of its metadata and the revision is a
pinned commit, so the controller never asks the mirror), and the model info reaches the
controller first (its facts and the revision's commit), which must refuse it before the host
is touched.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_deploy.simulator.hub.repos import recorded_repos
from sglang_deploy.simulator.hub.server import HOSTILE_PAYLOAD, HubServer
from sglang_deploy.simulator.hub.weights import weight_files
from sglang_deploy.simulator.sglang_server.build import build_wheel
from sglang_deploy.simulator.testbed import Testbed, TestHost
from tests.conftest import ROOT
from tests.e2e.hub_hosts import STATE, STORE, boot_hub_host, hub_host_data, served_model_on

NAME = "e2e-hostile"
PORT = 31921
HUB_PORT = 31922
HF_TOKEN = "hf_e2e_hostile_TOKEN_value"
FIRST, OTHER = "Qwen/Qwen3.6-27B", "Qwen/Qwen3-32B"
MB = 1_000_000
WATCHED = ("etc", "root", "usr/local", "var/lib")


@pytest.fixture(scope="module")
def hub():
    repos = recorded_repos({FIRST: weight_files(FIRST, 8 * MB, shards=2), OTHER: weight_files(OTHER, 4 * MB, shards=2)},
                           only=[FIRST, OTHER])
    server = HubServer(repos, port=HUB_PORT)
    with server:
        yield server


@pytest.fixture(scope="module")
def host(testbed: Testbed, tmp_path_factory, hub) -> TestHost:
    return boot_hub_host(testbed, tmp_path_factory.mktemp("wheels"), NAME, lambda out: build_wheel("0.5.23", out))


def metadata_dir(hub: HubServer, model: str, where: Path) -> Path:
    """The model's metadata files (config, index, generation config) as a directory on the
    controller, so that the controller never asks the mirror."""
    where.mkdir(parents=True, exist_ok=True)
    for name, f in hub.repos[model].files.items():
        if name.endswith(".json"):
            (where / name).write_bytes(f.read(0, f.size))
    return where


def data(model: str, **extra) -> dict:
    return hub_host_data(NAME, model, PORT, HUB_PORT, **extra)


def run_deploy(testbed: Testbed, host: TestHost, tmp: Path, inventory_data: dict) -> subprocess.CompletedProcess:
    inventory = testbed.write_inventory(tmp / "inventory.py", [host], inventory_data, group="gpu_fleet")
    env = {**os.environ, "E2E_HF_TOKEN": HF_TOKEN, "HF_ENDPOINT": f"http://127.0.0.1:{HUB_PORT}",
           "XDG_CACHE_HOME": str(tmp / "cache")}
    env.pop("HF_HUB_OFFLINE", None)
    proc = subprocess.run([sys.executable, "-m", "pyinfra", "-y", "-v", str(inventory), "deploy.py"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert HF_TOKEN not in proc.stdout + proc.stderr
    return proc


def deploy_from_mirror_only(testbed: Testbed, host: TestHost, hub: HubServer, tmp: Path,
                            mode: str) -> subprocess.CompletedProcess:
    """Deploy OTHER with the mirror in ``mode``, where only the host's stager asks the mirror: the
    revision is its commit and the controller reads the facts from a copy of the metadata."""
    hub.hostile = mode
    try:
        return run_deploy(testbed, host, tmp, data(OTHER, sglang_model_revision=hub.repos[OTHER].commit,
                                                   sglang_model_dir=str(metadata_dir(hub, OTHER, tmp / "meta"))))
    finally:
        hub.hostile = None


def said(proc: subprocess.CompletedProcess) -> str:
    return (proc.stdout or "") + (proc.stderr or "")


def served_model() -> str | None:
    return served_model_on(PORT)


def upper(host: TestHost) -> Path:
    path = host.workdir / "upper" / "u"
    assert path.is_dir(), "the testbed's overlay upper layer moved"
    return path


def outside_store(host: TestHost) -> dict[str, tuple]:
    """Every path the host changed under the watched trees, outside the model store: its type,
    mode, owner, size, link target and content hash (whiteouts record deletions)."""
    top, store = upper(host), STORE.strip("/")
    seen: dict[str, tuple] = {}
    for tree in WATCHED:
        for dirpath, dirnames, filenames in os.walk(top / tree):
            rel_dir = os.path.relpath(dirpath, top)
            dirnames[:] = [d for d in dirnames if os.path.join(rel_dir, d) != store]
            for name in [*dirnames, *filenames]:
                rel = os.path.join(rel_dir, name)
                st = os.lstat(top / rel)
                digest = None
                if stat.S_ISREG(st.st_mode):
                    digest = hashlib.sha256((top / rel).read_bytes()).hexdigest()
                link = os.readlink(top / rel) if stat.S_ISLNK(st.st_mode) else None
                seen[rel] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid,
                             st.st_size if stat.S_ISREG(st.st_mode) else None, link, digest)
    return seen


def changed_outside_store(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """Paths added, removed or changed between two ``outside_store`` views, less the one thing
    a deploy stopped before the swap leaves by design: the new revision's files staged in the
    deploy's own state directory (``revisions/<hash>/``: unit, env file, nccl.conf, argv),
    which no running service reads and the next deploy replaces or prunes."""
    staged = STATE.strip("/") + "/revisions/"
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    return [p for p in changed if not (p.startswith(staged) and p not in before)]


def payload_anywhere(host: TestHost) -> list[str]:
    """Files the host holds (in its upper layer) whose content is the hostile mirror's payload."""
    top = upper(host)
    found = []
    for dirpath, _, filenames in os.walk(top):
        for name in filenames:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink() and p.stat().st_size == len(HOSTILE_PAYLOAD):
                if p.read_bytes() == HOSTILE_PAYLOAD:
                    found.append(str(p.relative_to(top)))
    return found


def serving_state(host: TestHost) -> tuple:
    pid = host.ssh("systemctl show -p MainPID --value sglang.service").stdout.strip()
    return (pid, (host.root / "etc/systemd/system/sglang.service").read_text(),
            host.ssh(f"cat {STATE}/current").stdout, served_model())


def test_first_deploy_from_the_well_behaved_mirror_serves(testbed, host, hub, tmp_path):
    proc = run_deploy(testbed, host, tmp_path, data(FIRST))
    assert proc.returncode == 0, said(proc)[-5000:]
    assert served_model() == FIRST


# (mode, what the refusal line names)
HOST_SIDE = [
    ("traversal", "../../hostile-x"),
    ("absolute", "/tmp/sglang-hostile-absolute"),
    ("bad-hashes", ".."),
]


@pytest.mark.parametrize("mode,named", HOST_SIDE, ids=[m for m, _ in HOST_SIDE])
def test_a_hostile_listing_or_body_stops_the_host_before_anything_outside_the_store_changes(
        testbed, host, hub, tmp_path, mode, named):
    before, serving = outside_store(host), serving_state(host)
    assert serving[3] == FIRST
    proc = deploy_from_mirror_only(testbed, host, hub, tmp_path, mode)
    out = said(proc)
    assert proc.returncode != 0, out[-5000:]
    refusals = [line for line in out.splitlines() if named in line and "weights" not in line.split(":")[0]]
    assert refusals, out[-5000:]
    assert serving_state(host) == serving, "the host stopped serving its old revision"
    assert changed_outside_store(before, outside_store(host)) == []
    assert payload_anywhere(host) == []
    assert not (host.root / "tmp/sglang-hostile-absolute").exists()


def test_a_hostile_model_info_stops_the_deploy_on_the_controller(testbed, host, hub, tmp_path):
    before, serving = outside_store(host), serving_state(host)
    hub.hostile = "deep-json"
    try:
        proc = run_deploy(testbed, host, tmp_path, data(OTHER))
    finally:
        hub.hostile = None
    out = said(proc)
    assert proc.returncode != 0, out[-5000:]
    assert "Traceback" not in out and "RecursionError" not in out, out[-5000:]
    assert any("sglang_model_revision" in line and "nested" in line for line in out.splitlines()), out[-5000:]
    assert serving_state(host) == serving and changed_outside_store(before, outside_store(host)) == []


def test_a_mirror_echoing_the_token_never_gets_it_printed(testbed, host, hub, tmp_path):
    serving = serving_state(host)
    proc = deploy_from_mirror_only(testbed, host, hub, tmp_path, "echo-token")
    assert proc.returncode != 0  # run_deploy asserted the token is in none of its output
    assert serving_state(host) == serving


def test_bodies_longer_than_listed_are_cut_at_the_listed_size_and_verified(testbed, host, hub, tmp_path):
    proc = deploy_from_mirror_only(testbed, host, hub, tmp_path, "long-body")
    assert proc.returncode == 0, said(proc)[-5000:]
    snapshot = host.root / STORE.lstrip("/") / "models--Qwen--Qwen3-32B" / "snapshots" / hub.repos[OTHER].commit
    for name, f in hub.repos[OTHER].files.items():
        assert (snapshot / name).read_bytes() == f.read(0, f.size), name
    assert served_model() == OTHER
