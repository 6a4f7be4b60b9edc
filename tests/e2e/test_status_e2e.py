"""`sglang-deploy status` against throwaway hosts deployed by the real deploy: green after a deploy,
a unit edited by hand named as drift (and shown by --diff, the env file's secret never), green again
once restored, a stopped server not active, a host nobody answers for unreachable; nothing on any
host changes. Each status run's wall time is printed (run with -s to see it)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sglang_deploy.simulator.testbed import Testbed, TestHost, fleet
from tests.conftest import ROOT
from tests.e2e.conftest import NOT_ABOUT_SPEED
from tests.e2e.test_deploy import HF_TOKEN, boot_a6000_hosts, wait_healthy

PORTS = {"e2e-status-a": 31881, "e2e-status-b": 31882}
GONE_PORT = 31883  # the unreachable host's server port, never served
UNIT = "/etc/systemd/system/sglang.service"
ENV_FILE = "/etc/sglang/sglang.env"
ENV = {**os.environ, fleet.TOKEN_ENV: HF_TOKEN}


@pytest.fixture(scope="module")
def hosts(testbed: Testbed, tmp_path_factory) -> dict[str, TestHost]:
    return boot_a6000_hosts(testbed, tmp_path_factory, list(PORTS))


def host_data(port: int) -> dict:
    """A 2x RTX A6000 stand-in serving on ``port``; its gate judges no speed (NOT_ABOUT_SPEED): these
    tests are about what status reads, and the hosts share this machine's cores."""
    return {**fleet.host_data("a6000x2-bridge", port), "sglang_gate": dict(NOT_ABOUT_SPEED)}


@pytest.fixture(scope="module")
def inventory(testbed: Testbed, hosts: dict[str, TestHost], tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("status") / "inventory.py"
    data = {name: host_data(port) for name, port in PORTS.items()}
    testbed.write_inventory(path, hosts.values(), data, group="gpu_fleet")
    result = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(path), "deploy.py"], cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    for port in PORTS.values():
        wait_healthy(port)
    return path


def status(inventory: Path, *args: str, label: str = "") -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "status", str(inventory), *args],
                            cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - t0
    print(f"\nstatus {label or ' '.join(args)}: {seconds:.2f} s, exit {result.returncode}\n{result.stdout}")
    output = result.stdout + result.stderr
    assert "Traceback" not in output and HF_TOKEN not in output, output[-4000:]
    return result, seconds


def rows(result: subprocess.CompletedProcess) -> dict[str, dict]:
    return {row["host"]: row for row in json.loads(result.stdout)}


def snapshot(host: TestHost) -> dict[str, str]:
    """What status must never change on a host."""
    out = host.ssh("cd /var/lib/sglang-deploy/sglang && find . -type f -exec sha256sum {} + | sort; "
                   f"sha256sum {UNIT} {ENV_FILE} /etc/nccl.conf; systemctl show -p MainPID --value sglang.service")
    return {"state": out.stdout}


def test_status_green_after_a_deploy_and_timed(hosts, inventory):
    before = {name: snapshot(h) for name, h in hosts.items()}
    one, one_s = status(inventory, "--limit", "e2e-status-a", label="1 host")
    assert one.returncode == 0, one.stdout + one.stderr
    both, both_s = status(inventory, label="2 hosts")
    assert both.returncode == 0, both.stdout + both.stderr
    lines = both.stdout.splitlines()
    assert lines[0].split()[:2] == ["HOST", "STATE"] and len(lines) == 3  # no notes: nothing to say
    assert all(line.split()[1] == "ok" for line in lines[1:])
    data, _ = status(inventory, "--json")
    assert data.returncode == 0
    for row in rows(data).values():
        assert row["state"] == "ok" and row["revision"]["pending"] is False
        assert row["revision"]["running"] == row["revision"]["deployed"] == row["revision"]["planned"]
        assert row["server"]["active_state"] == "active" and row["server"]["main_pid"] > 0
        # argv "same": the ExecStart= parser read the rendered unit as systemd did (the process's /proc cmdline)
        assert row["drift"] == {"unit": "same", "env": "same", "nccl_conf": "same", "argv": "same"}
        assert row["gpus"]["summary"] == "2x RTX A6000 ok" and row["gpus"]["count"] == 2
        assert all(g["xid"] == {"count": 0, "last": None} for g in row["gpus"]["devices"])  # the journal was read
        assert row["last_gate"]["verdict"] == "pass" and row["last_gate"]["decode_tok_s"] > 0
        assert row["sglang"]["installed"] == row["sglang"]["planned"]
    assert {name: snapshot(h) for name, h in hosts.items()} == before
    print(f"\nstatus wall time: 1 host {one_s:.2f} s, 2 hosts {both_s:.2f} s")


def test_status_of_more_hosts_costs_about_the_same(testbed, hosts, inventory, tmp_path):
    """Six inventory entries, three names for each booted host (its own connection each): the read
    is parallel, so the wall time grows far slower than the host count. The host's name is part of
    its rendered files, so an alias plans another revision than the one deployed: ``pending``."""
    entries, data = [], {}
    for i in range(3):
        for name, host in hosts.items():
            alias = name if i == 0 else f"{name}-alias{i}"
            entries.append(TestHost(name=alias, port=host.port, root=host.root, key=testbed.key, workdir=host.workdir))
            data[alias] = host_data(PORTS[name])
    path = testbed.write_inventory(tmp_path / "inventory.py", entries, data, group="gpu_fleet")
    result, seconds = status(path, "--json", label="6 hosts")
    assert result.returncode == 1 and len(rows(result)) == 6
    for name, row in rows(result).items():
        assert row["state"] == ("pending" if "alias" in name else "ok"), row
        assert row["revision"]["pending"] is ("alias" in name) and row["drift"]["unit"] == "same"
    print(f"\nstatus wall time: 6 host entries {seconds:.2f} s")


def test_a_unit_edited_by_hand_is_drift_and_diff_shows_it(hosts, inventory):
    host = hosts["e2e-status-a"]
    original = host.ssh(f"cat {UNIT}").stdout
    env_original = host.ssh(f"cat {ENV_FILE}").stdout
    assert HF_TOKEN in env_original
    host.ssh(f"printf '%s\\n' '# edited by hand' >> {UNIT}")
    try:
        result, _ = status(inventory)
        assert result.returncode == 1
        row = next(line for line in result.stdout.splitlines() if line.startswith("e2e-status-a "))
        assert row.split()[1] == "drifted" and " unit " in row
        assert f"e2e-status-a: unit drifted: {UNIT} differs from revision" in result.stdout
        # the env file edited too: a secret's new value and a new secret, masked in --diff and --json
        host.ssh(f"sed -i 's/{HF_TOKEN}/hf_edited_SECRET_value/' {ENV_FILE} && "
                 f"printf '%s\\n' 'EXTRA_TOKEN=zz-hand-added-secret' >> {ENV_FILE}")
        shown, _ = status(inventory, "--diff")
        assert shown.returncode == 1
        assert "+# edited by hand" in shown.stdout and f"--- {UNIT} (revision" in shown.stdout
        assert "+HF_TOKEN=*** (changed)" in shown.stdout and "+EXTRA_TOKEN=***" in shown.stdout
        data, _ = status(inventory, "--json", "--diff")
        doc = rows(data)["e2e-status-a"]
        assert doc["drift"] == {"unit": "differs", "env": "differs", "nccl_conf": "same", "argv": "same"}
        assert "+# edited by hand" in doc["diff"]["unit"]
        for out in (shown.stdout, data.stdout):
            assert "hf_edited_SECRET_value" not in out and "zz-hand-added-secret" not in out
    finally:
        (host.root / UNIT.lstrip("/")).write_text(original)
        (host.root / ENV_FILE.lstrip("/")).write_text(env_original)
    restored, _ = status(inventory)
    assert restored.returncode == 0, restored.stdout


def test_a_stopped_server_is_not_active(hosts, inventory):
    host = hosts["e2e-status-b"]
    host.ssh("systemctl stop sglang.service")
    try:
        result, _ = status(inventory, "--json")
        assert result.returncode == 1
        row = rows(result)["e2e-status-b"]
        assert row["state"] == "down" and row["server"]["active_state"] == "inactive"
        assert row["server"]["main_pid"] is None and row["server"]["uptime_s"] is None
        assert rows(result)["e2e-status-a"]["state"] == "ok"
    finally:
        host.ssh("systemctl start sglang.service")
    wait_healthy(PORTS["e2e-status-b"])


def test_an_unreachable_host_gets_its_row_and_exit_2(testbed, hosts, inventory, tmp_path):
    with socket.socket() as s:  # a port nothing listens on: the host is gone
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    gone = TestHost(name="e2e-status-gone", port=closed, root=tmp_path, key=testbed.key, workdir=tmp_path)
    data = {name: host_data(port) for name, port in PORTS.items()}
    data["e2e-status-gone"] = host_data(GONE_PORT)
    path = testbed.write_inventory(tmp_path / "inventory.py", [*hosts.values(), gone], data, group="gpu_fleet")
    result, seconds = status(path, label="2 hosts + 1 unreachable")
    assert result.returncode == 2
    row = next(line for line in result.stdout.splitlines() if line.startswith("e2e-status-gone "))
    assert row.split()[1] == "unreachable"
    assert "e2e-status-gone: unreachable: " in result.stdout
    assert [line.split()[1] for line in result.stdout.splitlines()[1:3]] == ["ok", "ok"]
    data_run, _ = status(path, "--json", "--limit", "e2e-status-gone")
    assert data_run.returncode == 2 and rows(data_run)["e2e-status-gone"]["reachable"] is False


FAULTS = ROOT / "sglang_deploy" / "simulator" / "boards" / "faults"
PROBE_UNIT = "/etc/systemd/system/argv-probe.service"


def test_argv_drift_and_an_injected_gpu_fault_turn_the_row_red_and_back(hosts, inventory):
    """On host a: the unit's ExecStart= edited by hand and reloaded without a restart is argv
    drift; a row remap failure the NVML stand-in reports (a faults file) degrades the row (exit 1)
    and its removal heals it. Also: ExecStart= lines systemd itself splits, read back by the parser."""
    from sglang_deploy.unitsyntax import parse_exec_start

    t0 = time.monotonic()
    host = hosts["e2e-status-a"]
    # systemd's own word splitting against the parser: a unit whose process prints nothing and sleeps
    exec_start = (r"""/usr/bin/python3 -c "import time; time.sleep(120)" 'a b' a"b c"d \x41 \101 %% $$HOME """
                  r"""'it''s' "q\"q" \; --x=\s""")
    host.ssh(f"cat > {PROBE_UNIT} <<'EOF'\n[Service]\nExecStart={exec_start}\nEOF\n"
             "systemctl daemon-reload && systemctl start argv-probe.service")
    try:
        pid = host.ssh("systemctl show -p MainPID --value argv-probe.service").stdout.strip()
        raw = host.ssh(f"base64 -w0 /proc/{pid}/cmdline").stdout.strip()
        real = [w.decode() for w in base64.b64decode(raw).rstrip(b"\0").split(b"\0")]
        assert parse_exec_start(f"[Service]\nExecStart={exec_start}\n") == real, real
    finally:
        host.ssh(f"systemctl stop argv-probe.service; rm -f {PROBE_UNIT}; systemctl daemon-reload")

    original = host.ssh(f"cat {UNIT}").stdout
    host.ssh(f"sed -i 's/--port {PORTS['e2e-status-a']}/--port 31899/' {UNIT} && systemctl daemon-reload")
    try:
        result, _ = status(inventory, "--json", label="argv drift")
        doc = rows(result)["e2e-status-a"]
        assert result.returncode == 1 and doc["state"] == "drifted"
        assert doc["drift"]["unit"] == "differs" and doc["drift"]["argv"] == "differs"
        assert any("the live unit's ExecStart=" in p and "31899" in p for p in doc["problems"]), doc["problems"]
        assert rows(result)["e2e-status-b"]["state"] == "ok"
    finally:
        (host.root / UNIT.lstrip("/")).write_text(original)
        host.ssh("systemctl daemon-reload")

    faults = host.root / "etc/sglang-testbed/gpu-faults.json"
    shutil.copy(FAULTS / "row-remap-failure.json", faults)
    try:
        red, _ = status(inventory, label="gpu fault")
        assert red.returncode == 1
        line = next(x for x in red.stdout.splitlines() if x.startswith("e2e-status-a "))
        assert line.split()[1] == "degraded" and "2x RTX A6000: gpu1 row-remap failure" in line
        assert "e2e-status-a: gpu 1: a row remap failed" in red.stdout
        data, _ = status(inventory, "--json")
        assert rows(data)["e2e-status-a"]["gpus"]["devices"][1]["remapped_rows"]["failure"] is True
    finally:
        faults.unlink()
    green, _ = status(inventory, label="healed")
    assert green.returncode == 0, green.stdout
    print(f"\nargv drift + GPU fault test: {time.monotonic() - t0:.2f} s")
