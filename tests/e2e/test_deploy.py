"""`pyinfra INVENTORY deploy.py` against throwaway hosts with real systemd and sshd.

Two hosts at once: one stands in for 2x RTX A6000 (NVLink bridge), one for
8x H100 SXM (NVSwitch). Their GPUs are stood in for at the NVML boundary
(sglang_deploy/simulator/nvml/pynvml with sglang_deploy/simulator/boards profiles), so the
deploy's probe runs unchanged; SGLang is the simulated package
(sglang_deploy/simulator/sglang_server), installed by the deploy's own install step from a
wheel directory on the host. Every assertion reads the host itself: files,
systemctl, the journal, the HTTP API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from sglang_deploy.deploy.inventory import load_inventory
from sglang_deploy.plan.inventory_plan import offline_weights
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.plan.spec import build_spec
from tests.conftest import ROOT, load_probe
from tests.e2e.conftest import NOT_ABOUT_SPEED
from sglang_deploy.simulator.testbed import Testbed, TestHost, fleet
from sglang_deploy.simulator.testbed.fleet import BROKEN_VERSION, build_wheels
from sglang_deploy.simulator.testbed.gpu import stage_gpu_host

HF_TOKEN = "hf_e2e_SECRET_token_value"
#: The reference host: other files plan their own hosts from its data (host_data(REFERENCE)) without
#: booting it, so they may run in another lane (tests/test_ci_lanes.py reads the names they boot).
REFERENCE = "e2e-a6000"
PORTS = {"e2e-a6000": 31801, "e2e-h100": 31802}
BOARDS = {"e2e-a6000": "a6000x2-bridge", "e2e-h100": "h100x8-nvswitch"}


def _setup(wheels: Path):
    return lambda name, root: stage_gpu_host(root, wheels, BOARDS[name])


def boot_a6000_hosts(testbed: Testbed, tmp_path_factory, names: list[str],
                     extra: Callable[[str, Path], None] | None = None) -> dict[str, TestHost]:
    """Boot throwaway hosts staged as 2x RTX A6000 with the simulated SGLang wheels
    (``extra`` stages more before boot), by name."""
    wheels = tmp_path_factory.mktemp("wheels")
    build_wheels(wheels)

    def setup(name: str, root: Path) -> None:
        stage_gpu_host(root, wheels, "a6000x2-bridge")
        if extra is not None:
            extra(name, root)

    return {h.name: h for h in testbed.boot(names, setup=setup)}


def host_data(name: str, **intents) -> dict:
    """Its inventory data; the gate judges no speed (NOT_ABOUT_SPEED): these hosts' simulated servers
    share this machine's cores, and a deploy's prefill and 8-stream figures move with its load."""
    return {**fleet.host_data(BOARDS[name], PORTS[name], **intents), "sglang_gate": dict(NOT_ABOUT_SPEED)}


@pytest.fixture(scope="module")
def hosts(testbed: Testbed, tmp_path_factory) -> dict[str, TestHost]:
    wheels = tmp_path_factory.mktemp("wheels")
    build_wheels(wheels)
    booted = testbed.boot(list(BOARDS), setup=_setup(wheels))
    return {h.name: h for h in booted}


def deploy(testbed: Testbed, hosts: dict[str, TestHost], tmp: Path, data: dict[str, dict],
           limit: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    inventory = testbed.write_inventory(tmp / "inventory.py", hosts.values(), data, group="gpu_fleet")
    argv = [sys.executable, "-m", "pyinfra", "-y", str(inventory), "deploy.py"]
    if limit:
        argv[4:4] = ["--limit", limit]
    env = {**os.environ, "E2E_HF_TOKEN": HF_TOKEN}
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def expected_files(inventory: Path, name: str):
    entry = next(h for h in load_inventory(str(inventory)) if h.name == name)
    spec = build_spec(name, entry.group_data, entry.host_data)
    plan = plan_host(spec, probe=load_probe(BOARDS[name]), weights=offline_weights(spec))
    return plan, render(plan, {"HF_TOKEN": HF_TOKEN})


def main_pid(host: TestHost) -> int:
    return int(host.ssh("systemctl show -p MainPID --value sglang.service").stdout.strip())


def wait_healthy(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"no healthy server on port {port} after {timeout} s")
        time.sleep(0.2)


def server_info(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/get_server_info", timeout=5) as resp:
        return json.loads(resp.read())


def starts_since(host: TestHost, since: float) -> int:
    out = host.ssh(f"journalctl -u sglang.service -o cat --since @{int(since)} --no-pager").stdout
    return sum(1 for line in out.splitlines() if line.startswith("Started "))


def test_deploy_converges_and_is_idempotent(testbed, hosts, tmp_path):
    data = {name: host_data(name) for name in hosts}
    first = deploy(testbed, hosts, tmp_path, data)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert HF_TOKEN not in first.stdout + first.stderr

    for name, host in hosts.items():
        plan, files = expected_files(tmp_path / "inventory.py", name)
        root = host.root
        assert (root / "etc/systemd/system/sglang.service").read_text() == files.unit
        assert (root / "etc/sglang/sglang.env").read_text() == files.env
        assert (root / "etc/nccl.conf").read_text() == files.nccl_conf
        assert host.ssh("stat -c '%a %U' /etc/sglang/sglang.env").stdout.split() == ["600", "root"]
        assert host.ssh("systemctl is-active sglang.service").stdout.strip() == "active"
        assert host.ssh("systemctl is-enabled sglang.service").stdout.strip() == "enabled"
        wait_healthy(PORTS[name])
        info = server_info(PORTS[name])
        assert info["version"] == plan.sglang_version
        assert info["tp_size"] == plan.intents["tp_size"].value
        # the running process got exactly the planned argv
        cmdline = host.ssh(f"tr '\\0' '\\n' < /proc/{main_pid(host)}/cmdline").stdout.splitlines()
        assert cmdline[cmdline.index("sglang.launch_server") + 1:] == plan.argv

    pids = {name: main_pid(h) for name, h in hosts.items()}
    second = deploy(testbed, hosts, tmp_path, data)
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    for name, host in hosts.items():
        assert main_pid(host) == pids[name], f"{name} restarted on a no-op deploy"
    assert "Restart the service" not in second.stdout and "Stage the new revision" not in second.stdout


def test_changed_intent_restarts_exactly_once(testbed, hosts, tmp_path):
    data = {name: host_data(name) for name in hosts}
    assert deploy(testbed, hosts, tmp_path, data).returncode == 0
    a6000, h100 = hosts["e2e-a6000"], hosts["e2e-h100"]
    before = {name: main_pid(h) for name, h in hosts.items()}
    since = time.time()
    time.sleep(1.1)  # journal --since has one-second resolution
    data["e2e-a6000"] = host_data("e2e-a6000", mem_fraction_static=0.8)
    result = deploy(testbed, hosts, tmp_path, data)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert main_pid(a6000) != before["e2e-a6000"]
    assert starts_since(a6000, since) == 1
    assert main_pid(h100) == before["e2e-h100"] and starts_since(h100, since) == 0
    wait_healthy(PORTS["e2e-a6000"])
    assert server_info(PORTS["e2e-a6000"])["mem_fraction_static"] == 0.8
    # the previous revision is kept for rollback
    state = a6000.root / "var/lib/sglang-deploy/sglang"
    previous = (state / "previous").read_text().strip()
    assert (state / "revisions" / previous / "sglang.service").is_file()


#: What a refused deploy must leave as it found it on the host, besides the server's process.
LIVE_FILES = ("etc/systemd/system/sglang.service", "etc/sglang/sglang.env", "etc/nccl.conf")


def deployed_and_running(testbed: Testbed, hosts: dict[str, TestHost],
                         tmp: Path) -> tuple[dict[str, dict], TestHost, int, dict[str, bytes]]:
    """A good deploy of every host, then e2e-a6000's server pid and live files: (data, host, pid, files)."""
    data = {name: host_data(name) for name in hosts}
    assert deploy(testbed, hosts, tmp, data).returncode == 0
    host = hosts["e2e-a6000"]
    wait_healthy(PORTS["e2e-a6000"])
    return data, host, main_pid(host), {p: (host.root / p).read_bytes() for p in LIVE_FILES}


def assert_untouched(host: TestHost, pid: int, live: dict[str, bytes]) -> None:
    """The server kept its process, its files their bytes, and it still serves."""
    assert main_pid(host) == pid
    for path, content in live.items():
        assert (host.root / path).read_bytes() == content, path
    wait_healthy(PORTS["e2e-a6000"])


def test_installed_parser_refusal_stops_before_restart(testbed, hosts, tmp_path):
    data, host, pid, live = deployed_and_running(testbed, hosts, tmp_path)
    data["e2e-a6000"] = {**host_data("e2e-a6000"), "sglang_version": BROKEN_VERSION}
    result = deploy(testbed, hosts, tmp_path, data, limit="e2e-a6000")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"SGLang {BROKEN_VERSION} installed on this host refuses the planned launch flags" in output
    assert "--mamba-radix-cache-strategy" in output
    assert_untouched(host, pid, live)


def test_a_driver_too_old_for_the_installed_torch_is_refused_before_anything_changes(testbed, hosts, tmp_path):
    """The host's NVML reports an R550 driver (CUDA 12.4, as driver 550.127.05 does) and the inventory
    installs SGLang from the default index, whose torch for 0.5.23 is a CUDA 13.0 build: the plan
    refuses the host, naming both numbers, before the install and the stop; the running server and its
    files stay as they are. (The testbed's own find-links install is one the plan cannot judge: a
    custom index chooses the torch build, and the plan says so.)"""
    data, host, pid, live = deployed_and_running(testbed, hosts, tmp_path)
    board = host.root / "etc/sglang-testbed/nvml.json"
    recorded = board.read_bytes()
    board.write_text(json.dumps({**json.loads(recorded), "driver_version": "550.127.05", "cuda_driver_version": 12040}))
    default_index = {k: v for k, v in data["e2e-a6000"].items() if not k.startswith("sglang_pip_")}
    try:
        result = deploy(testbed, hosts, tmp_path, {**data, "e2e-a6000": default_index}, limit="e2e-a6000")
    finally:
        board.write_bytes(recorded)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-4000:]
    assert "cuda_driver_version: the driver supports CUDA 12.4; SGLang " in output, output[-4000:]
    assert "which needs a driver of CUDA 13.0 or newer" in output
    assert_untouched(host, pid, live)


def test_interrupted_deploy_converges(testbed, hosts, tmp_path):
    """Files swapped in but the restart never ran (deploy killed): the next deploy restarts."""
    data = {name: host_data(name) for name in hosts}
    assert deploy(testbed, hosts, tmp_path, data).returncode == 0
    host = hosts["e2e-a6000"]
    data["e2e-a6000"] = host_data("e2e-a6000", context_length=16384)
    inventory = testbed.write_inventory(tmp_path / "inventory.py", hosts.values(), data, group="gpu_fleet")
    plan, files = expected_files(inventory, "e2e-a6000")
    # Simulate the kill: write the new unit by hand, as a deploy would have before dying.
    (host.root / "etc/systemd/system/sglang.service").write_text(files.unit)
    pid = main_pid(host)
    result = deploy(testbed, hosts, tmp_path, data)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert main_pid(host) != pid
    wait_healthy(PORTS["e2e-a6000"])
    assert server_info(PORTS["e2e-a6000"])["context_length"] == 16384


def test_dry_run_changes_nothing_and_shows_no_secret(testbed, hosts, tmp_path):
    data = {name: host_data(name) for name in hosts}
    assert deploy(testbed, hosts, tmp_path, data).returncode == 0
    host = hosts["e2e-a6000"]
    pid = main_pid(host)
    env_before = (host.root / "etc/sglang/sglang.env").read_bytes()
    data["e2e-a6000"] = host_data("e2e-a6000", mem_fraction_static=0.7)
    inventory = testbed.write_inventory(tmp_path / "inventory.py", hosts.values(), data, group="gpu_fleet")
    result = subprocess.run([sys.executable, "-m", "pyinfra", "--dry", "--diff", str(inventory), "deploy.py"],
                            cwd=ROOT, env={**os.environ, "E2E_HF_TOKEN": HF_TOKEN}, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert "Stage the new revision" in output and "Restart the service" in output
    diff = [line.strip() for line in output.splitlines() if "--mem-fraction-static" in line]
    assert [d.split()[0] for d in diff] == ["-", "+"] and "0.88" in diff[0] and "0.7" in diff[1]
    assert HF_TOKEN not in output
    assert main_pid(host) == pid
    assert (host.root / "etc/sglang/sglang.env").read_bytes() == env_before


def test_old_service_processes_are_gone_after_a_restart(testbed, hosts, tmp_path):
    data = {name: host_data(name) for name in hosts}
    assert deploy(testbed, hosts, tmp_path, data).returncode == 0
    host = hosts["e2e-h100"]  # TP 8: the simulated server runs 7 worker children
    cgroup = host.ssh("systemctl show -p ControlGroup --value sglang.service").stdout.strip()
    old = host.ssh(f"for d in /sys/fs/cgroup /sys/fs/cgroup/unified /sys/fs/cgroup/systemd; do "
                   f"[ -f $d{cgroup}/cgroup.procs ] && cat $d{cgroup}/cgroup.procs && break; done").stdout.split()
    assert len(old) >= 8
    data["e2e-h100"] = host_data("e2e-h100", context_length=8192)
    assert deploy(testbed, hosts, tmp_path, data).returncode == 0
    alive = host.ssh("for p in " + " ".join(old) + "; do [ -d /proc/$p ] && echo $p; done; true").stdout.split()
    assert alive == []
    # the deploy recorded them before stopping, for its wait until they were gone
    recorded = host.ssh("cat /var/lib/sglang-deploy/sglang/old-pids").stdout.split()
    assert sorted(recorded) == sorted(old)


def test_probe_contradicting_inventory_and_missing_driver_stop_the_host(testbed, hosts, tmp_path):
    data = {name: host_data(name) for name in hosts}
    assert deploy(testbed, hosts, tmp_path, data).returncode == 0
    host = hosts["e2e-h100"]
    pid = main_pid(host)
    wrong = {**host_data("e2e-h100"), "sglang_gpus": {"model": "H200", "count": 8}}
    result = deploy(testbed, hosts, tmp_path, {**data, "e2e-h100": wrong}, limit="e2e-h100")
    assert result.returncode != 0
    assert "inventory declares 8x H200, the host has 8x NVIDIA H100 80GB HBM3" in result.stdout + result.stderr
    host.ssh("mv /etc/sglang-testbed/nvml.json /etc/sglang-testbed/nvml.json.off")
    try:
        result = deploy(testbed, hosts, tmp_path, data, limit="e2e-h100")
    finally:
        host.ssh("mv /etc/sglang-testbed/nvml.json.off /etc/sglang-testbed/nvml.json")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "GPU probe: no NVIDIA driver on this host" in output and "Traceback" not in output
    assert main_pid(host) == pid
