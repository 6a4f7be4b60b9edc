"""A flipped byte in the served snapshot, on a throwaway host: deploy (weights from the Hub
stand-in), flip one byte of a served file (size and modification time kept), then
`sglang-deploy status --verify-weights` exits 1 naming the file; the same inventory deployed
again with `sglang_weights_verify: true` fetches that file again without a restart (the revision
is unchanged), and `status --verify-weights` exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_deploy.simulator.hub.repos import recorded_repos
from sglang_deploy.simulator.hub.server import HubServer
from sglang_deploy.simulator.hub.weights import weight_files
from sglang_deploy.simulator.testbed import Testbed, TestHost
from tests.conftest import ROOT
from tests.e2e.hub_hosts import STORE, boot_hub_host, hub_host_data, wheels_with_hub

NAME = "e2e-weights-verify"
PORT = 31931
HUB_PORT = 31932
HF_TOKEN = "hf_e2e_weights_verify_TOKEN"
MODEL = "Qwen/Qwen3.6-27B"
FILE = "model-00002-of-00003.safetensors"


@pytest.fixture(scope="module")
def hub():
    server = HubServer(recorded_repos({MODEL: weight_files(MODEL, 30_000_000, shards=3)}, only=[MODEL]),
                       port=HUB_PORT)
    with server:
        yield server


@pytest.fixture(scope="module")
def host(testbed: Testbed, tmp_path_factory, hub) -> TestHost:
    return boot_hub_host(testbed, tmp_path_factory.mktemp("wheels"), NAME, wheels_with_hub)


def inventory(testbed: Testbed, host: TestHost, tmp: Path, **extra) -> Path:
    data = hub_host_data(NAME, MODEL, PORT, HUB_PORT, **extra)
    return testbed.write_inventory(tmp / "inventory.py", [host], data, group="gpu_fleet")


def env() -> dict[str, str]:
    out = {**os.environ, "E2E_HF_TOKEN": HF_TOKEN, "HF_ENDPOINT": f"http://127.0.0.1:{HUB_PORT}"}
    out.pop("HF_HUB_OFFLINE", None)
    return out


def deploy(path: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "pyinfra", "-y", "-v", str(path), "deploy.py"], cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=600)
    assert HF_TOKEN not in proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    return proc


def status(path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "status", str(path),
                           "--verify-weights", "--json"], cwd=ROOT, env=env(), capture_output=True, text=True,
                          timeout=300)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    return proc, json.loads(proc.stdout)[0]


def main_pid(host: TestHost) -> int:
    return int(host.ssh("systemctl show -p MainPID --value sglang.service").stdout.strip())


def test_a_flipped_byte_is_weights_drift_and_a_verifying_deploy_fetches_it_again(testbed, host, hub, tmp_path):
    path = inventory(testbed, host, tmp_path)
    deploy(path)
    proc, row = status(path)
    assert proc.returncode == 0 and row["drift"]["weights"] == "same", proc.stdout

    snapshot = f"{STORE}/models--Qwen--Qwen3.6-27B/snapshots/{hub.repos[MODEL].commit}"
    host.ssh(f"python3 -c \"import os; p=os.path.realpath('{snapshot}/{FILE}'); st=os.stat(p); f=open(p,'r+b'); "
             f"f.seek(1000); b=f.read(1); f.seek(1000); f.write(bytes([b[0]^255])); f.close(); "
             f"os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))\"")
    proc, row = status(path)
    assert proc.returncode == 1 and row["state"] == "drifted" and row["drift"]["weights"] == "differs"
    assert any(p.startswith(f"weights drifted: {snapshot}/{FILE}: sha256") for p in row["problems"]), row

    plain = deploy(path)  # the bug: an unchanged revision skips the weights
    assert status(path)[0].returncode == 1, plain.stderr[-2000:]

    pid = main_pid(host)
    proc = deploy(inventory(testbed, host, tmp_path, sglang_weights_verify=True))
    said = proc.stdout + proc.stderr
    assert f"the re-hash found {FILE} sha256" in said and f"{FILE}: the stored blob fails verification" in said
    f = hub.repos[MODEL].files[FILE]
    digest = host.ssh(f"sha256sum $(realpath {snapshot}/{FILE})").stdout.split()[0]
    assert digest == f.etag()
    assert main_pid(host) == pid  # replaced beside the running server: no stop
    proc, row = status(path)
    assert proc.returncode == 0 and row["drift"]["weights"] == "same", proc.stdout
