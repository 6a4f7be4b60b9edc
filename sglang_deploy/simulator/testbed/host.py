"""One throwaway host (:class:`TestHost`: its files, commands over SSH, its inventory entry)
and the loopback port its sshd listens on."""

from __future__ import annotations

import random
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import HostCommandError, TestbedError

#: Ports for the hosts' sshd are drawn from here: below Linux's default
#: ephemeral range (32768-60999), so outgoing connections cannot take them, and
#: below 30000, where the end-to-end files' servers have their fixed ports
#: (tests/test_e2e_ports.py): a host booted by one file never takes another's.
PORT_RANGE = (20000, 30000)

_SSH_OPTIONS = (
    "-F", "/dev/null",  # ignore this machine's ssh_config
    "-o", "StrictHostKeyChecking=no",
    "-o", "UserKnownHostsFile=/dev/null",
    "-o", "BatchMode=yes",
    "-o", "IdentitiesOnly=yes",
    "-o", "LogLevel=ERROR",
    "-o", "ConnectTimeout=10",
)  # fmt: skip


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


_ports_lock = threading.Lock()
_ports_taken: set[int] = set()  # handed out by this process, not yet released


def allocate_port() -> int:
    """A loopback port nobody listens on, not handed out before by this process.

    Other processes (another test session) may pick the same port between
    this check and sshd binding it; the boot then fails with sshd's error in
    the console log. Drawing at random from a wide range makes that unlikely.
    """
    with _ports_lock:
        for _ in range(1000):
            port = random.randrange(*PORT_RANGE)
            if port not in _ports_taken and _port_is_free(port):
                _ports_taken.add(port)
                return port
    raise TestbedError(f"no free port in {PORT_RANGE}")


def release_port(port: int) -> None:
    with _ports_lock:
        _ports_taken.discard(port)


@dataclass(eq=False)
class TestHost:
    """One booted throwaway host. Created by :meth:`Testbed.boot`.

    ``root`` is the host's root filesystem as seen from this machine (the
    merged overlay): read it for assertions, or write files into it. Writes
    never reach this machine's real filesystem.
    """

    __test__ = False  # not a pytest test class

    name: str
    port: int
    root: Path
    key: Path
    workdir: Path
    binds: tuple[tuple[Path, str], ...] = ()
    """Directories of this machine bind-mounted into the host: (directory, path in the host).
    Disk-backed room where the tmpfs upper layer is too small (a real SGLang venv is ~11 GB)."""
    failed_units: list[str] = field(default_factory=list)
    """Units that had failed when the host finished booting (state "degraded")."""
    process: subprocess.Popen | None = field(default=None, repr=False)
    _pidns: str | None = field(default=None, repr=False)
    cgroups: list[Path] = field(default_factory=list, repr=False)
    """The host's own cgroups on this machine (removed at teardown)."""
    _mounts: list[Path] = field(default_factory=list, repr=False)

    @property
    def console_log(self) -> Path:
        """systemd-nspawn's output: the container's boot and shutdown log."""
        return self.workdir / "console.log"

    @property
    def pid(self) -> int | None:
        """PID of the systemd-nspawn process (None before boot)."""
        return self.process.pid if self.process else None

    def console_tail(self, lines: int = 60) -> str:
        try:
            text = self.console_log.read_text(errors="replace")
        except OSError:
            return "(no console log)"
        return "\n".join(text.splitlines()[-lines:])

    def ssh_argv(self, cmd: str) -> list[str]:
        """The ssh command line that runs ``cmd`` as root on this host."""
        return ["ssh", "-i", str(self.key), "-p", str(self.port), *_SSH_OPTIONS, "root@127.0.0.1", cmd]

    def ssh(
        self, cmd: str, check: bool = True, timeout: float = 60.0, input: str | None = None
    ) -> subprocess.CompletedProcess:
        """Run a shell command as root on the host over real SSH.

        Returns the completed process (text stdout/stderr). With ``check``, a
        non-zero exit raises :class:`HostCommandError` showing the output.
        """
        proc = subprocess.run(
            self.ssh_argv(cmd),
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            raise HostCommandError(self.name, proc)
        return proc

    def inventory_entry(self) -> tuple[str, dict[str, Any]]:
        """This host as a pyinfra inventory entry ``(name, host data)``."""
        return (
            self.name,
            {
                "ssh_hostname": "127.0.0.1",
                "ssh_port": self.port,
                "ssh_user": "root",
                "ssh_key": str(self.key),
                "ssh_known_hosts_file": "/dev/null",
                "ssh_strict_host_key_checking": "no",
            },
        )

