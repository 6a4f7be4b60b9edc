"""Weights staged before the stop, on a throwaway host: `pyinfra INVENTORY deploy.py` with the
model's weights served by the Hub stand-in (sglang_deploy/simulator/hub, generated shards of a
few hundred MB at a throttled rate) and the simulated SGLang, which reads its weights from
--model-path and refuses a missing one offline. The tests run in order on one host: each
starts from what the previous one left (a serving server).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sglang_deploy.simulator.hub.repos import recorded_repos
from sglang_deploy.simulator.hub.server import HubServer
from sglang_deploy.simulator.hub.weights import weight_files
from sglang_deploy.simulator.testbed import Testbed, TestHost
from tests.conftest import ROOT
from tests.e2e.hub_hosts import STATE, STORE, boot_hub_host, hub_host_data, served_model_on, wheels_with_hub

NAME = "e2e-weights"
PORT = 31891
HUB_PORT = 31892
HF_TOKEN = "hf_e2e_weights_TOKEN_value"
FIRST, NEW, THIRD = "Qwen/Qwen3.6-27B", "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B"
MB = 1_000_000
SIZES = {FIRST: 20 * MB, NEW: 240 * MB, THIRD: 240 * MB}
@pytest.fixture(scope="module")
def hub():
    repos = recorded_repos({m: weight_files(m, size, shards=3) for m, size in SIZES.items()}, only=list(SIZES))
    server = HubServer(repos, port=HUB_PORT)
    with server:
        yield server


@pytest.fixture(scope="module")
def host(testbed: Testbed, tmp_path_factory, hub) -> TestHost:
    return boot_hub_host(testbed, tmp_path_factory.mktemp("wheels"), NAME, wheels_with_hub)


def data(model: str, **extra) -> dict:
    return hub_host_data(NAME, model, PORT, HUB_PORT, **extra)


def run_deploy(testbed: Testbed, host: TestHost, tmp: Path, inventory_data: dict, wait: bool = True):
    inventory = testbed.write_inventory(tmp / "inventory.py", [host], inventory_data, group="gpu_fleet")
    argv = [sys.executable, "-m", "pyinfra", "-y", "-v", str(inventory), "deploy.py"]
    # The controller reads the model's facts from the same Hub stand-in (sglang_deploy/deploy/model_metadata.py).
    env = {**os.environ, "E2E_HF_TOKEN": HF_TOKEN, "HF_ENDPOINT": f"http://127.0.0.1:{HUB_PORT}"}
    env.pop("HF_HUB_OFFLINE", None)
    if not wait:
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert HF_TOKEN not in proc.stdout + proc.stderr
    return proc


def served_model() -> str | None:
    return served_model_on(PORT)


def main_pid(host: TestHost) -> int:
    return int(host.ssh("systemctl show -p MainPID --value sglang.service").stdout.strip())


def marker(host: TestHost, hub: HubServer, model: str) -> Path:
    folder = "models--" + model.replace("/", "--")
    return host.root / STORE.lstrip("/") / folder / ".sglang-deploy-complete" / hub.repos[model].commit


def out(proc) -> str:
    return (proc.stdout or "")[-5000:] + (proc.stderr or "")[-3000:]


def said(proc) -> str:
    """What the deploy printed (pyinfra logs to stderr, command output to stdout)."""
    return (proc.stdout or "") + (proc.stderr or "")


class Poller:
    """Asks the server which model it serves every 50 ms; keeps (time, model) of each answer."""

    def __init__(self) -> None:
        self.answers: list[tuple[float, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            model = served_model()
            if model:
                self.answers.append((time.time(), model))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def test_first_deploy_serves_the_verified_snapshot_offline(testbed, host, hub, tmp_path):
    proc = run_deploy(testbed, host, tmp_path, data(FIRST))
    assert proc.returncode == 0, out(proc)
    commit = hub.repos[FIRST].commit
    snapshot = f"{STORE}/models--Qwen--Qwen3.6-27B/snapshots/{commit}"
    unit = (host.root / "etc/systemd/system/sglang.service").read_text()
    assert f"--model-path {snapshot}" in unit and f"--served-model-name {FIRST}" in unit
    assert "# Weights: the Hub at http://127.0.0.1" in unit
    assert "HF_HUB_OFFLINE=1" in (host.root / "etc/sglang/sglang.env").read_text()
    assert marker(host, hub, FIRST).is_file()
    assert host.ssh(f"stat -c %U {STORE}/models--Qwen--Qwen3.6-27B/blobs").stdout.strip() == "sglang"
    journal = host.ssh("journalctl -u sglang.service -o cat --no-pager").stdout
    assert f"Load weight begin: {snapshot}" in journal
    assert "serving gap" in said(proc)
    assert served_model() == FIRST  # the id, not the snapshot path


def test_a_new_model_downloads_while_the_old_server_keeps_serving(testbed, host, hub, tmp_path):
    old = served_model()
    assert old is not None
    hub.rate_bytes_s = 30 * MB  # 240 MB: about 8 s of download
    poller = Poller()
    try:
        proc = run_deploy(testbed, host, tmp_path, data(NEW))
    finally:
        poller.close()
        hub.rate_bytes_s = None
    assert proc.returncode == 0, out(proc)
    done = json.loads(marker(host, hub, NEW).read_text())
    assert done["verified_at"] - done["started_at"] > 5  # the throttle held: a real download
    last_old = max(t for t, m in poller.answers if m == old)
    first_new = min(t for t, m in poller.answers if m != old)
    # The old server answered after the new weights were complete: downloaded while it served.
    assert last_old > done["verified_at"], (last_old, done)
    gap = first_new - last_old
    record = json.loads(host.ssh(f"tail -n 1 {STATE}/history.jsonl").stdout)
    measured = record["downtime"]["serving_gap_s"]
    # The deploy's figure runs from its own stop stamp to the first answer on the host; the poller
    # here sees the old server's last answer and the new one's first over the network. They agree
    # within a poll and the SSH round trips; on a loaded machine those grow (1.6 s seen with two busy
    # loops beside CI), so the bound is what this test is about: the gap is a restart's, not a download's.
    assert measured is not None and gap - 1.0 < measured < gap + 4.0, (measured, gap)
    assert set(record["downtime"]["phases"]) == {"stop", "gpus_free", "start", "load", "kv_cache", "cuda_graphs",
                                                 "warmup", "ready"}
    assert gap < 8, "the download happened inside the serving gap"
    assert f"serving gap {measured:.2f} s" in said(proc)


def weight_gets(hub: HubServer, since: int) -> list[str]:
    """Weight shards requested since request number ``since`` (the controller's model facts read
    only metadata files: config.json, the index)."""
    return [path for method, path in hub.requests[since:] if method == "GET" and ".safetensors" in path
            and "/resolve/" in path and not path.endswith(".index.json")]


def test_a_rollback_to_the_previous_model_downloads_nothing(testbed, host, hub, tmp_path):
    mark = len(hub.requests)
    proc = run_deploy(testbed, host, tmp_path, data(FIRST))
    assert proc.returncode == 0, out(proc)
    assert weight_gets(hub, mark) == []
    assert f"{FIRST} {hub.repos[FIRST].commit} already in {STORE}, verified" in said(proc)
    assert served_model() is not None


def test_a_store_too_small_stops_the_host_before_any_change(testbed, host, hub, tmp_path):
    host.ssh("mkdir -p /srv/small && mount -t tmpfs -o size=64m tmpfs /srv/small")
    try:
        unit = (host.root / "etc/systemd/system/sglang.service").read_text()
        current = host.ssh(f"cat {STATE}/current").stdout
        pid, model = main_pid(host), served_model()
        proc = run_deploy(testbed, host, tmp_path, data(THIRD, sglang_model_store="/srv/small"))
        assert proc.returncode != 0
        lines = [line for line in said(proc).splitlines() if "sglang_model_store /srv/small" in line]
        assert lines and "bytes needed" in lines[0] and "bytes free" in lines[0], out(proc)
        assert (host.root / "etc/systemd/system/sglang.service").read_text() == unit
        assert host.ssh(f"cat {STATE}/current").stdout == current
        assert main_pid(host) == pid and served_model() == model
        assert host.ssh("ls -A /srv/small").stdout.strip() == ""
    finally:
        host.ssh("umount /srv/small", check=False)


def test_a_killed_download_resumes_and_is_never_served_half_written(testbed, host, hub, tmp_path):
    pid, model = main_pid(host), served_model()
    blobs = f"{STORE}/models--Qwen--Qwen3-30B-A3B/blobs"
    hub.rate_bytes_s = 20 * MB
    proc = run_deploy(testbed, host, tmp_path, data(THIRD), wait=False)
    try:
        deadline = time.monotonic() + 120
        while True:
            size = host.ssh(f"cat {blobs}/*.sglang-deploy-partial 2>/dev/null | wc -c", check=False).stdout.strip()
            if int(size or 0) > 40 * MB:
                break
            assert proc.poll() is None and time.monotonic() < deadline, "the download never got going"
            time.sleep(0.5)
        # Slowed before the kills, so they land mid-file however long they take on a loaded machine:
        # at 20 MB/s a 80 MB shard could finish (partial complete, nothing left to resume) in the
        # two seconds the kills took beside CI's lanes
        hub.rate_bytes_s = 2 * MB
        proc.kill()  # the controller goes away mid-download ...
        proc.wait(10)
        venv_python = "/opt/sglang/sglang-0.5.23/bin/python"
        pids = host.ssh(f"pgrep -f '^{venv_python} /tmp/'", check=False).stdout.split()
        assert pids, "the staging script was not running"
        host.ssh(f"kill -9 {' '.join(pids)}")  # ... and so does the download on the host
    finally:
        hub.rate_bytes_s = None
    assert not marker(host, hub, THIRD).exists()
    assert main_pid(host) == pid and served_model() == model  # the old server never stopped
    partial = int(host.ssh(f"cat {blobs}/*.sglang-deploy-partial | wc -c").stdout.strip())
    sent = hub.bytes_sent
    again = run_deploy(testbed, host, tmp_path, data(THIRD))
    assert again.returncode == 0, out(again)
    assert "resuming" in said(again)
    assert hub.bytes_sent - sent <= SIZES[THIRD] - partial + MB  # what was there is not fetched again
    assert marker(host, hub, THIRD).is_file() and served_model() != model


def test_a_corrupted_file_is_detected_and_fetched_again(testbed, host, hub, tmp_path):
    name = "model-00002-of-00003.safetensors"
    snapshot = f"{STORE}/models--Qwen--Qwen3-32B/snapshots/{hub.repos[NEW].commit}"
    host.ssh(f"python3 -c \"import os; p=os.path.realpath('{snapshot}/{name}'); f=open(p,'r+b'); f.seek(1000); "
             f"b=f.read(1); f.seek(1000); f.write(bytes([b[0]^255]))\"")
    proc = run_deploy(testbed, host, tmp_path, data(NEW))
    assert proc.returncode == 0, out(proc)
    assert f"{name} changed since it was verified" in said(proc)
    assert f"{name}: the stored blob fails verification (sha256" in said(proc)
    f = hub.repos[NEW].files[name]
    digest = host.ssh(f"sha256sum $(realpath {snapshot}/{name})").stdout.split()[0]
    assert digest == f.etag() and served_model() is not None


def test_a_controller_directory_is_copied_verified_and_old_snapshots_pruned(testbed, host, hub, tmp_path):
    from sglang_deploy.deploy.weights import controller_commit, controller_files

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for name, f in hub.repos[FIRST].files.items():  # the same checkpoint, as a directory on the controller
        (ckpt / name).write_bytes(f.read(0, f.size))
    folder = host.root / STORE.lstrip("/") / "models--Qwen--Qwen3.6-27B"
    mark = len(hub.requests)
    proc = run_deploy(testbed, host, tmp_path, data(FIRST, sglang_model_source=f"controller:{ckpt}"))
    assert proc.returncode == 0, out(proc)
    first = controller_commit(controller_files(NAME, str(ckpt)))
    assert (folder / ".sglang-deploy-complete" / first).is_file() and weight_gets(hub, mark) == []
    assert f"the controller's directory {ckpt}" in (host.root / "etc/systemd/system/sglang.service").read_text()
    assert served_model() == FIRST
    # A changed file is a new snapshot; the Hub's snapshot of this model, no longer served by the
    # running or the previous revision, is pruned (sglang_model_keep 2), the previous one is kept.
    (ckpt / "generation_config.json").write_text('{"temperature": 0.6}')
    proc = run_deploy(testbed, host, tmp_path, data(FIRST, sglang_model_source=f"controller:{ckpt}"))
    assert proc.returncode == 0, out(proc)
    second = controller_commit(controller_files(NAME, str(ckpt)))
    assert sorted(p.name for p in (folder / "snapshots").iterdir()) == sorted([first, second])
    assert f"pruned models--Qwen--Qwen3.6-27B snapshot {hub.repos[FIRST].commit}" in said(proc)
