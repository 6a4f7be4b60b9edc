"""The testbed itself: hosts boot, are isolated, take pyinfra deploys, leave nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sglang_deploy.simulator.testbed import BootError, HostCommandError, Testbed, TestHost


@pytest.fixture(scope="module")
def pair(testbed: Testbed) -> tuple[TestHost, TestHost]:
    """Two hosts booted at once on the session testbed."""
    a, b = testbed.boot(["tb-alpha", "tb-beta"])
    return a, b


def _our_processes(marker: str) -> list[str]:
    """Processes on this machine whose command line mentions ``marker``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


def _mounted_under(directory: Path) -> list[str]:
    text = Path("/proc/self/mountinfo").read_text()
    return [line for line in text.splitlines() if str(directory) in line]


def _pyinfra(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", *args],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"pyinfra {args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_each_host_is_its_own_booted_machine(pair: tuple[TestHost, TestHost]) -> None:
    assert pair[0].port != pair[1].port
    for host in pair:
        assert host.ssh("hostname").stdout.strip() == host.name
        state = host.ssh("systemctl is-system-running", check=False).stdout.strip()
        assert state in ("running", "degraded"), f"{host.name}: {state}; failed: {host.failed_units}"
        assert host.ssh("cat /proc/1/comm").stdout.strip() == "systemd"
        assert host.ssh("readlink /proc/1/exe").stdout.strip().endswith("/systemd")
        # Our sshd, not this machine's port 22 or another host's.
        assert f"127.0.0.1:{host.port}" in host.ssh("ss -ltn").stdout


def test_ssh_failure_shows_output(pair: tuple[TestHost, TestHost]) -> None:
    with pytest.raises(HostCommandError, match="no-such-file"):
        pair[0].ssh("cat /no-such-file")
    assert pair[0].ssh("exit 3", check=False).returncode == 3


def test_hosts_do_not_share_files(pair: tuple[TestHost, TestHost]) -> None:
    a, b = pair
    token = uuid.uuid4().hex
    # Written from outside, into a's root.
    (a.root / "root" / f"outside-{token}").write_text(token)
    assert a.ssh(f"cat /root/outside-{token}").stdout == token
    # Written from inside a, over SSH.
    a.ssh(f"echo {token} > /var/tmp/inside-{token}")
    assert (a.root / "var" / "tmp" / f"inside-{token}").read_text().strip() == token

    for name in (f"root/outside-{token}", f"var/tmp/inside-{token}"):
        assert not (b.root / name).exists()
        assert b.ssh(f"test -e /{name}", check=False).returncode == 1
        assert not (Path("/") / name).exists(), f"/{name} leaked onto this machine's real filesystem"


def test_pyinfra_deploys_to_both_hosts(pair: tuple[TestHost, TestHost], testbed: Testbed, tmp_path: Path) -> None:
    inventory = testbed.write_inventory(
        tmp_path / "inventory.py",
        pair,
        {host.name: {"testbed_greeting": f"hello {host.name}"} for host in pair},
    )

    proc = _pyinfra(str(inventory), "exec", "--", "hostname", cwd=tmp_path)
    for host in pair:
        assert host.name in proc.stdout + proc.stderr

    deploy = tmp_path / "deploy.py"
    deploy.write_text(
        "import io\n"
        "from pyinfra import host\n"
        "from pyinfra.operations import files, server\n"
        "files.put(name='marker', src=io.StringIO(host.data.testbed_greeting + '\\n'),\n"
        "          dest='/etc/testbed-marker', mode='644')\n"
        "server.shell(name='copy', commands=['cp /etc/testbed-marker /root/testbed-marker-copy'])\n"
    )
    _pyinfra(str(inventory), str(deploy), cwd=tmp_path)
    for host in pair:
        assert (host.root / "etc" / "testbed-marker").read_text() == f"hello {host.name}\n"
        assert host.ssh("cat /root/testbed-marker-copy").stdout == f"hello {host.name}\n"
    assert not Path("/etc/testbed-marker").exists()


def test_teardown_leaves_nothing_mounted_or_running() -> None:
    bed = Testbed()
    hosts = bed.boot(["tb-gamma", "tb-delta"])
    pids = [host.pid for host in hosts]
    cgroups = [cgroup for host in hosts for cgroup in host.cgroups]
    assert all(cgroup.is_dir() for cgroup in cgroups)
    assert all(pid is not None and Path(f"/proc/{pid}").exists() for pid in pids)
    assert len(_mounted_under(bed.dir)) == 4  # a tmpfs and an overlay per host
    for host in hosts:
        host.ssh("echo x > /root/written-before-close")

    bed.close()
    bed.close()  # harmless the second time

    assert _mounted_under(bed.dir) == []
    assert _our_processes(str(bed.dir)) == []
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists(), f"systemd-nspawn pid {pid} still exists"
    assert not bed.dir.exists()
    assert [cgroup for cgroup in cgroups if cgroup.exists()] == []
    with pytest.raises(RuntimeError, match="closed"):
        bed.boot(["tb-late"])


def test_failed_setup_tears_the_batch_down() -> None:
    def broken_setup(name: str, root: Path) -> None:
        raise ValueError(f"setup for {name} broke")

    with Testbed() as bed:
        with pytest.raises(ValueError, match="setup for tb-eps broke"):
            bed.boot(["tb-eps"], setup=broken_setup)
        assert _mounted_under(bed.dir) == []
        assert bed.hosts == {}
    assert not bed.dir.exists()


def test_boot_failure_reports_console_log() -> None:
    def break_sshd(name: str, root: Path) -> None:
        # setup runs after the testbed's own config: a bad sshd config keeps
        # ssh.service from ever starting, so the boot must time out.
        (root / "etc" / "ssh" / "sshd_config.d" / "99-broken.conf").write_text("NoSuchOption yes\n")

    with Testbed(boot_timeout=8) as bed:
        with pytest.raises(BootError, match="console log tail") as info:
            bed.boot(["tb-zeta"], setup=break_sshd)
        assert "tb-zeta" in str(info.value)
        assert _mounted_under(bed.dir) == []
        assert _our_processes(str(bed.dir)) == []


def test_a_container_that_exits_during_boot_is_booted_once_more(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first start of the host is a process that exits 255 at once (what a systemd-nspawn
    that dies during boot looks like to the testbed): the boot warns, removes that try's scratch
    and boots the host for real; a second such exit is an error."""
    from sglang_deploy.simulator.testbed import container

    real_start = container.start
    starts: list[str] = []

    def dying_start(host: TestHost, cgroup_name: str, dies: int = 1) -> None:
        starts.append(host.name)
        if len(starts) <= dies:
            host.process = subprocess.Popen(["sh", "-c", "exit 255"])
            return
        real_start(host, cgroup_name)

    monkeypatch.setattr(container, "start", dying_start)
    with Testbed() as bed:
        with pytest.warns(UserWarning, match="exited during boot; booting once more"):
            (host,) = bed.boot(["tb-eta"])
        assert starts == ["tb-eta", "tb-eta"] and host.ssh("hostname").stdout.strip() == "tb-eta"
    assert _mounted_under(bed.dir) == []

    starts.clear()
    monkeypatch.setattr(container, "start", lambda host, name: dying_start(host, name, dies=2))
    with Testbed() as bed:
        with pytest.warns(UserWarning), pytest.raises(BootError, match="exited with status 255"):
            bed.boot(["tb-theta"])
        assert starts == ["tb-theta", "tb-theta"] and bed.hosts == {}
        assert _mounted_under(bed.dir) == []
    assert not bed.dir.exists()
