"""What stops a testbed: the requirements check, the errors the testbed raises, and
running a command on this machine that raises one when it fails."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


class TestbedError(RuntimeError):
    """Base class of the testbed's errors."""


class BootError(TestbedError):
    """A host did not come up; the message carries its console log tail."""


class TestbedLeakError(TestbedError):
    """Teardown left something of the testbed mounted or running."""


class HostCommandError(subprocess.CalledProcessError):
    """A command run over SSH failed; unlike its base, str() shows the output."""

    def __init__(self, host: str, proc: subprocess.CompletedProcess) -> None:
        super().__init__(proc.returncode, proc.args, proc.stdout, proc.stderr)
        self.host = host

    def __str__(self) -> str:
        return (
            f"{self.host}: command exited {self.returncode}: {self.cmd[-1]!r}\n"
            f"--- stdout ---\n{self.stdout}--- stderr ---\n{self.stderr}"
        )


def missing_requirements() -> list[str]:
    """Why a testbed cannot run here (empty list when it can)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("not root (mount and systemd-nspawn need root)")
    for tool in ("systemd-nspawn", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            missing.append(f"{tool} not found")
    if not any(Path(p).is_file() for p in ("/usr/sbin/sshd", "/sbin/sshd")) and not shutil.which("sshd"):
        missing.append("sshd not found (package openssh-server)")
    return missing


def run(*argv: str | os.PathLike, timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Run a command on this machine; raise :class:`TestbedError` with its output when it fails."""
    proc = subprocess.run([str(a) for a in argv], check=False, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise TestbedError(f"{' '.join(map(str, argv))} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc
