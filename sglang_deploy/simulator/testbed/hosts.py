"""Throwaway "GPU hosts" for end-to-end tests: systemd-nspawn containers.

SIMULATOR ONLY (the demo and the tests). Nothing here is used on a real GPU host.

Each host is this machine's own OS, booted by ``systemd-nspawn`` from an
overlay mount (``lowerdir=/``) whose upper layer is a tmpfs, so every write
the host makes (deploys, logs, tmpfiles clean-up) lands in memory and
vanishes at teardown. The host runs real systemd as PID 1 and a real sshd on
``127.0.0.1:<its own port>``; tests reach it with ``ssh`` or pyinfra exactly
as they would reach a GPU server. The containers share this machine's
network namespace, hence one sshd port per host and masked services that
would bind fixed ports.

Never boot systemd on this machine's real root filesystem: its tmpfiles set
up wipes ``/tmp`` and it would start services against the real files. This
module only ever boots ``<scratch>/<host>/merged``, the overlay.

Typical use::

    with Testbed() as bed:
        gpu1, gpu2 = bed.boot(["gpu1", "gpu2"])
        gpu1.ssh("systemctl is-system-running")
        bed.write_inventory(tmp / "inventory.py", [gpu1, gpu2], {"gpu1": {"x": 1}})

Layout of one testbed (``tempfile.mkdtemp(prefix="testbed-")``)::

    testbed-XXXX/
        id_ed25519, id_ed25519.pub   key pair, root's authorized key on every host
        <host>/upper/                tmpfs: overlay upper (u/) and work (w/) dirs
        <host>/merged/               overlay of / : the host's root filesystem
        <host>/console.log           systemd-nspawn's console (boot log)

Each container also gets a cgroup of its own on this machine, named
``<scratch folder name>-<host>`` (see :func:`_systemd_cgroup_dirs`), and a
private tmpfs on ``/tmp``: files a host writes to its ``/tmp`` are not visible
under ``host.root / "tmp"`` from outside; use ``host.ssh`` for those.

Teardown (:meth:`Testbed.close`, also run at interpreter exit) powers every
container off, unmounts, deletes the scratch folder and then *verifies* that
nothing of the testbed is still mounted or running, raising otherwise.
"""

from __future__ import annotations

import ast
import atexit
import logging
import os
import pprint
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: How long a boot may take: sshd answering and systemd reporting boot done.
BOOT_TIMEOUT_S = 60.0
#: How long a container gets to power off after SIGTERM before it is killed.
POWEROFF_TIMEOUT_S = 30.0

#: Ports for the hosts' sshd are drawn from here: below Linux's default
#: ephemeral range (32768-60999), so outgoing connections cannot take them.
PORT_RANGE = (20000, 32000)

#: Units of this image that must not run in a throwaway host, masked by a
#: /dev/null symlink in the host's /etc/systemd/system. The containers share
#: this machine's network, so anything binding a fixed port would collide
#: (with this machine or with the other hosts), and anything managing the
#: network would reconfigure this machine's. Periodic jobs are masked so they
#: cannot start in the middle of a test. Masking a unit that does not exist
#: is harmless.
MASKED_UNITS = (
    # Fixed ports: PostgreSQL (5432) and socket-activated ssh (22). Our sshd
    # runs as ssh.service on the host's own port instead.
    "postgresql.service",
    "postgresql@.service",
    "ssh.socket",
    # Would manage the shared network / clock of this machine.
    "systemd-networkd.service",
    "systemd-networkd.socket",
    "systemd-networkd-wait-online.service",
    "systemd-resolved.service",
    "systemd-timesyncd.service",
    "systemd-time-wait-sync.service",
    # Periodic and boot-time housekeeping: slow, noisy, irrelevant here.
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "man-db.timer",
    "packagekit.service",
)

_HOSTNAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")

_SSH_OPTIONS = (
    "-F", "/dev/null",  # ignore this machine's ssh_config
    "-o", "StrictHostKeyChecking=no",
    "-o", "UserKnownHostsFile=/dev/null",
    "-o", "BatchMode=yes",
    "-o", "IdentitiesOnly=yes",
    "-o", "LogLevel=ERROR",
    "-o", "ConnectTimeout=10",
)  # fmt: skip


class TestbedError(RuntimeError):
    """Base class of this module's errors."""


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


# --- small process and mount helpers -------------------------------------


def _run(*argv: str | os.PathLike, timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Run a command on this machine; raise with its output when it fails."""
    proc = subprocess.run([str(a) for a in argv], check=False, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise TestbedError(f"{' '.join(map(str, argv))} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def _mount_points_under(directory: Path) -> list[str]:
    """Mount points at or below ``directory`` in this process's mount namespace."""
    prefix = str(directory).rstrip("/")
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            point = _unescape_mountinfo(line.split()[4])
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return found


def _unescape_mountinfo(field_: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_)


def _is_mounted(path: Path) -> bool:
    return str(path).rstrip("/") in _mount_points_under(path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _children_of(ppid: int) -> list[int]:
    """Direct children of ``ppid`` (scans /proc; CONFIG_PROC_CHILDREN may be off)."""
    children = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # Field 4 is the ppid; the command name (field 2) may contain spaces.
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[1]) == ppid:
            children.append(int(entry.name))
    return children


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _pids_in_namespace(ns: str) -> list[int]:
    """Every process (as seen from here) living in PID namespace ``ns``."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _pid_namespace(int(entry.name)) == ns:
            pids.append(int(entry.name))
    return pids


def _systemd_cgroup_dirs() -> list[Path]:
    """This process's cgroup in each hierarchy a container's systemd manages.

    That is the cgroup2 (unified) hierarchy and, on a hybrid or legacy
    machine, the v1 ``name=systemd`` one. systemd-nspawn hands its own cgroup
    (in these hierarchies) to the container's systemd as the container's
    root cgroup, so two containers started from the same cgroup would share
    one tree and trip over each other's units ("Failed to attach to cgroup").
    """
    own: dict[str, str] = {}  # "0::" for cgroup2, "name=systemd" for v1
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hid, controllers, path = line.split(":", 2)
        if hid == "0" and controllers == "":
            own["unified"] = path
        elif "name=systemd" in controllers.split(","):
            own["systemd"] = path
    dirs = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            fstype, _source, options = post.split()[:3]
            point = _unescape_mountinfo(pre.split()[4])
            if fstype == "cgroup2" and "unified" in own:
                dirs.append(Path(point + own["unified"]))
            elif fstype == "cgroup" and "name=systemd" in options.split(",") and "systemd" in own:
                dirs.append(Path(point + own["systemd"]))
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def _cgroup_pids(cgroup: Path) -> list[int]:
    """Processes in ``cgroup`` and all its descendants."""
    pids = []
    for procs in cgroup.rglob("cgroup.procs"):
        try:
            pids += [int(p) for p in procs.read_text().split()]
        except OSError:
            pass
    return pids


def _remove_cgroup(cgroup: Path) -> str | None:
    """rmdir a cgroup tree bottom-up (cgroupfs allows rmdir of empty groups only)."""
    if not cgroup.exists():
        return None
    for _ in range(20):
        for dirpath, _dirnames, _files in sorted(os.walk(cgroup), key=lambda w: -len(w[0])):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass
        if not cgroup.exists():
            return None
        time.sleep(0.1)
    return f"could not remove cgroup {cgroup} (processes left: {_cgroup_pids(cgroup)})"


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


_ports_lock = threading.Lock()
_ports_taken: set[int] = set()  # handed out by this process, not yet released


def _allocate_port() -> int:
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


def _release_port(port: int) -> None:
    with _ports_lock:
        _ports_taken.discard(port)


# --- one host ----------------------------------------------------------------


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


# --- the testbed -----------------------------------------------------------------


class Testbed:
    """A set of throwaway hosts sharing one scratch folder and one SSH key.

    Use as a context manager, or call :meth:`close` yourself; it also runs at
    interpreter exit, and calling it twice is harmless.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        *,
        boot_timeout: float = BOOT_TIMEOUT_S,
        poweroff_timeout: float = POWEROFF_TIMEOUT_S,
        scratch_parent: str | os.PathLike | None = None,
    ) -> None:
        missing = missing_requirements()
        if missing:
            raise TestbedError("cannot run a testbed here: " + "; ".join(missing))
        self.boot_timeout = boot_timeout
        self.poweroff_timeout = poweroff_timeout
        self.dir = Path(tempfile.mkdtemp(prefix="testbed-", dir=scratch_parent)).resolve()
        self.key = self.dir / "id_ed25519"
        self.hosts: dict[str, TestHost] = {}
        self._lock = threading.RLock()
        self._closed = False
        atexit.register(self.close)

    # context manager

    def __enter__(self) -> Testbed:  # noqa: PYI034 (typing.Self needs Python 3.11)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getitem__(self, name: str) -> TestHost:
        return self.hosts[name]

    # boot

    def boot(self, names: Sequence[str], *, setup: Callable[[str, Path], None] | None = None) -> list[TestHost]:
        """Boot one host per name, in parallel; return them in the same order.

        ``setup(name, root)`` runs for each host after its filesystem is
        prepared and before it boots: drop stand-ins or config into ``root``.
        Returns once every host's sshd accepts connections and systemd says
        the boot is done (``running``, or ``degraded``: the failed units are
        then in ``host.failed_units`` and a warning names them). If any host
        fails, every host of this call is torn down and :class:`BootError`
        is raised with the console log tails.
        """
        with self._lock:
            if self._closed:
                raise TestbedError("testbed is closed")
            if len(set(names)) != len(names):
                raise ValueError(f"host names repeat: {list(names)}")
            for name in names:
                if name in self.hosts:
                    raise ValueError(f"host {name!r} is already booted")
                if not _HOSTNAME.fullmatch(name):
                    raise ValueError(f"host name {name!r}: use lowercase letters, digits and '-' (a hostname)")
            self._ensure_key()
            batch: list[TestHost] = []
            try:
                for name in names:
                    workdir = self.dir / name
                    host = TestHost(
                        name=name, port=_allocate_port(), root=workdir / "merged", key=self.key, workdir=workdir
                    )
                    batch.append(host)
                    self.hosts[name] = host
                    self._prepare(host)
                    if setup is not None:
                        setup(name, host.root)
                started = time.monotonic()
                for host in batch:
                    self._start(host)
                errors = [
                    f"{host.name}: {r!r}" if isinstance(r, Exception) else r
                    for host, r in zip(batch, _in_parallel(self._wait_ready, batch))
                    if r
                ]
                if errors:
                    raise BootError("\n\n".join(errors))
                log.info("booted %s in %.1f s", ", ".join(names), time.monotonic() - started)
            except BaseException:
                teardown_errors = self._destroy_all(batch)
                for host in batch:
                    # A host that could not be torn down stays listed, so
                    # that close() tries again and reports it.
                    stopped = host.process is None or host.process.poll() is not None
                    if stopped and not host._mounts and not host.cgroups:
                        self.hosts.pop(host.name, None)
                if teardown_errors:
                    log.error("tearing down after a failed boot: %s", "; ".join(teardown_errors))
                raise
            return batch

    def _ensure_key(self) -> None:
        if not self.key.exists():
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "testbed", "-f", self.key)

    def _prepare(self, host: TestHost) -> None:
        """Scratch folder, tmpfs + overlay mounts, and the host's own config."""
        name = host.name
        upper, merged = host.workdir / "upper", host.root
        merged.mkdir(parents=True)
        upper.mkdir()

        _run("mount", "-t", "tmpfs", "-o", "mode=0755", f"testbed-{name}", upper)
        host._mounts.append(upper)
        (upper / "u").mkdir()
        (upper / "w").mkdir()
        _run(
            "mount", "-t", "overlay", f"testbed-{name}",
            "-o", f"lowerdir=/,upperdir={upper}/u,workdir={upper}/w", merged,
        )  # fmt: skip
        host._mounts.append(merged)

        root = merged
        # Root logs in with the testbed's key only.
        ssh_dir = root / "root" / ".ssh"
        ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        ssh_dir.chmod(0o700)
        authorized = ssh_dir / "authorized_keys"
        authorized.write_text(Path(f"{self.key}.pub").read_text())
        authorized.chmod(0o600)
        # sshd on its own loopback port. sshd_config includes sshd_config.d/
        # before its own settings and the first value wins, so these stick.
        sshd_d = root / "etc" / "ssh" / "sshd_config.d"
        sshd_d.mkdir(parents=True, exist_ok=True)
        (sshd_d / "00-testbed.conf").write_text(
            "# Throwaway test host (sglang_deploy/simulator/testbed): loopback only, key login for root.\n"
            f"Port {host.port}\n"
            "ListenAddress 127.0.0.1\n"
            "PermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\n"
            "UseDNS no\n"
        )
        # Services that would fight over ports or this machine's network.
        units = root / "etc" / "systemd" / "system"
        units.mkdir(parents=True, exist_ok=True)
        for unit in self._units_to_mask():
            link = units / unit
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to("/dev/null")
        # A plain Debian root account: this machine's own shell setup (pyenv, cargo on
        # PATH) would make `python3` on the test host this machine's toolchain, not the
        # distribution's, unlike a real GPU host.
        for dotfile in (".bashrc", ".profile"):
            skel = Path("/etc/skel") / dotfile
            (root / "root" / dotfile).write_text(skel.read_text() if skel.is_file() else "")
        # Identity: own hostname and machine id.
        (root / "etc" / "hostname").write_text(f"{name}\n")
        (root / "etc" / "machine-id").write_text(uuid.uuid4().hex + "\n")
        hosts_file = root / "etc" / "hosts"
        existing = hosts_file.read_text() if hosts_file.exists() else ""
        if existing and not existing.endswith("\n"):
            existing += "\n"
        hosts_file.write_text(existing + f"127.0.1.1\t{name}\n")

    @staticmethod
    def _units_to_mask() -> list[str]:
        units = list(MASKED_UNITS)
        # One postgresql@<version>-<cluster> instance per cluster of this image.
        for conf in sorted(Path("/etc/postgresql").glob("*/*/postgresql.conf")):
            units.append(f"postgresql@{conf.parent.parent.name}-{conf.parent.name}.service")
        return units

    def _start(self, host: TestHost) -> None:
        """Start systemd-nspawn in its own session and cgroup, console to console.log."""
        # Each container gets a cgroup of its own (see _systemd_cgroup_dirs):
        # a shell joins it, then execs nspawn, so nspawn starts inside it.
        join = []
        for parent in _systemd_cgroup_dirs():
            cgroup = parent / f"{self.dir.name}-{host.name}"
            cgroup.mkdir()
            host.cgroups.append(cgroup)
            join.append(f"echo $$ > '{cgroup}/cgroup.procs'")
        with open(host.console_log, "wb") as console:
            host.process = subprocess.Popen(
                [
                    "sh", "-c", " && ".join([*join, 'exec "$@"']), "testbed-nspawn",
                    "systemd-nspawn",
                    "-D", str(host.root),
                    f"--machine={host.name}",
                    # No systemd manages this machine: without these two,
                    # nspawn exits ("Failed to open system bus").
                    "--register=no",
                    "--keep-unit",
                    "--settings=no",  # ignore any .nspawn files on this machine
                    "--link-journal=no",
                    # A private /tmp: booting empties /tmp (tmpfiles "D
                    # /tmp"), which over the overlay would race with this
                    # machine's real /tmp changing underneath it.
                    "--tmpfs=/tmp",
                    "--console=pipe",
                    "-b",
                ],
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # setsid: own process group, no tty
            )  # fmt: skip

    def _wait_ready(self, host: TestHost) -> str | None:
        """Wait for sshd, then for systemd's boot to finish. Return an error or None."""
        deadline = time.monotonic() + self.boot_timeout
        assert host.process is not None

        def failure(why: str) -> str:
            return f"{host.name} (port {host.port}): {why}\n--- console log tail ---\n{host.console_tail()}"

        # 1. sshd accepts a TCP connection and greets with its banner.
        while True:
            if host.process.poll() is not None:
                return failure(f"systemd-nspawn exited with status {host.process.returncode} during boot")
            self._find_pid_namespace(host)
            if _ssh_banner(host.port).startswith("SSH-"):
                self._find_pid_namespace(host)
                break
            if time.monotonic() > deadline:
                return failure(f"sshd did not answer on 127.0.0.1:{host.port} within {self.boot_timeout:.0f} s")
            time.sleep(0.2)

        # 2. systemd finished booting. The bound is on our side: --wait
        # itself would wait forever for a job that never ends.
        remaining = max(5.0, deadline - time.monotonic())
        try:
            proc = host.ssh("systemctl is-system-running --wait", check=False, timeout=remaining)
        except subprocess.TimeoutExpired:
            try:
                jobs = host.ssh("systemctl list-jobs --no-pager", check=False, timeout=10).stdout
            except subprocess.TimeoutExpired:
                jobs = "(systemctl list-jobs timed out too)"
            return failure(f"boot did not finish within {self.boot_timeout:.0f} s; pending jobs:\n{jobs}")
        state = proc.stdout.strip()
        if state == "running":
            return None
        if state == "degraded":
            failed = host.ssh("systemctl --failed --no-legend --plain --no-pager", check=False).stdout
            host.failed_units = [line.split()[0] for line in failed.splitlines() if line.strip()]
            warnings.warn(f"testbed host {host.name} is degraded; failed units: {host.failed_units}", stacklevel=2)
            return None
        return failure(f"systemctl is-system-running answered {state!r} ({proc.stderr.strip()})")

    @staticmethod
    def _find_pid_namespace(host: TestHost) -> None:
        """Remember the container's PID namespace (teardown proves it empty).

        The container's PID 1 is a child of systemd-nspawn living in a PID
        namespace of its own; nspawn's other children live in ours.
        """
        if host._pidns is not None or host.process is None:
            return
        own = _pid_namespace(os.getpid())
        for child in _children_of(host.process.pid):
            ns = _pid_namespace(child)
            if ns and ns != own:
                host._pidns = ns

    # inventory

    def write_inventory(
        self,
        path: str | os.PathLike,
        hosts: Iterable[TestHost],
        data_per_host: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        group: str = "testbed",
    ) -> Path:
        """Write a pyinfra inventory file listing ``hosts`` in group ``group``.

        Each entry is :meth:`TestHost.inventory_entry` plus, when given,
        ``data_per_host[host.name]`` (literal Python values only; they win
        over the connection settings on a clash).
        """
        if not group.isidentifier():
            raise ValueError(f"group {group!r} is not a Python identifier")
        entries = []
        for host in hosts:
            name, data = host.inventory_entry()
            data.update((data_per_host or {}).get(name, {}))
            entries.append((name, data))
        body = pprint.pformat(entries, sort_dicts=False, width=100)
        if ast.literal_eval(body) != entries:
            raise ValueError("host data must be made of Python literals (str, int, float, bool, None, lists, dicts)")
        path = Path(path)
        path.write_text(
            '"""pyinfra inventory of throwaway testbed hosts (sglang_deploy/simulator/testbed); gone after teardown."""\n\n'
            f"{group} = {body}\n"
        )
        return path

    # teardown

    def close(self) -> None:
        """Power off every host, unmount, delete the scratch folder, verify.

        Safe to call more than once, and after a failed boot. Raises
        :class:`TestbedLeakError` if anything is still mounted or running.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            atexit.unregister(self.close)
            hosts = list(self.hosts.values())
            errors = self._destroy_all(hosts)
            leaks = self._leaks(hosts)
            if not leaks and not _mount_points_under(self.dir):
                shutil.rmtree(self.dir, ignore_errors=True)
            if leaks or errors:
                raise TestbedLeakError(f"testbed {self.dir} was not torn down cleanly:\n" + "\n".join(errors + leaks))

    def _destroy_all(self, hosts: list[TestHost]) -> list[str]:
        """Tear hosts down in parallel; return error messages (never raise)."""
        errors = []
        for host, result in zip(hosts, _in_parallel(self._destroy, hosts)):
            errors += [f"{host.name}: teardown raised {result!r}"] if isinstance(result, Exception) else result
        return errors

    def _destroy(self, host: TestHost) -> list[str]:
        """Stop one host's container and unmount its filesystem."""
        errors: list[str] = []
        proc = host.process
        if proc is not None and proc.poll() is None:
            # SIGTERM: nspawn asks the container's systemd to power off.
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=self.poweroff_timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s did not power off in %.0f s; killing it", host.name, self.poweroff_timeout)
                self._kill(host)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    errors.append(f"{host.name}: systemd-nspawn (pid {proc.pid}) survived SIGKILL")
        # Container processes are reaped by the kernel once its PID 1 is
        # gone; give that a moment, then kill any stragglers.
        for _ in range(50):
            if not self._host_pids(host):
                break
            time.sleep(0.1)
        else:
            self._kill(host)
            time.sleep(0.5)
        for cgroup in list(host.cgroups):
            err = _remove_cgroup(cgroup)
            if err:
                errors.append(f"{host.name}: {err}")
            else:
                host.cgroups.remove(cgroup)
        # Unmount in reverse order: the overlay, then its tmpfs upper layer.
        for mount_point in list(reversed(host._mounts)):
            err = _umount(mount_point)
            if err:
                errors.append(f"{host.name}: {err}")
            else:
                host._mounts.remove(mount_point)
        _release_port(host.port)
        if not _mount_points_under(host.workdir):
            shutil.rmtree(host.workdir, ignore_errors=True)
        return errors

    @staticmethod
    def _host_pids(host: TestHost) -> set[int]:
        """Every process still alive of this host: its PID namespace and cgroups."""
        pids = set(_pids_in_namespace(host._pidns)) if host._pidns else set()
        for cgroup in host.cgroups:
            pids.update(_cgroup_pids(cgroup))
        return pids

    @classmethod
    def _kill(cls, host: TestHost) -> None:
        """SIGKILL nspawn, its process group and everything in the container."""
        pids = cls._host_pids(host)
        if host.process is not None and host.process.poll() is None:
            try:
                os.killpg(host.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _leaks(self, hosts: list[TestHost]) -> list[str]:
        """What of this testbed is still mounted or running (empty if nothing)."""
        leaks = [f"still mounted: {point}" for point in _mount_points_under(self.dir)]
        for host in hosts:
            if host.process is not None and host.process.poll() is None:
                leaks.append(f"{host.name}: systemd-nspawn still running (pid {host.process.pid})")
            left = self._host_pids(host)
            if left:
                leaks.append(f"{host.name}: container processes still running: {sorted(left)}")
            leaks += [f"{host.name}: cgroup left: {cgroup}" for cgroup in host.cgroups if cgroup.exists()]
        return leaks


def _in_parallel(fn: Callable[[TestHost], Any], hosts: Sequence[TestHost]) -> list[Any]:
    """``[fn(h) for h in hosts]``, run in one thread per host.

    An exception ``fn`` raises takes the place of its result (so that it is
    not lost in a thread). Where threads cannot start (during interpreter
    shutdown, i.e. when close() runs from atexit) the hosts are handled one
    after another.
    """
    results: list[Any] = [None] * len(hosts)

    def work(i: int) -> None:
        try:
            results[i] = fn(hosts[i])
        except Exception as e:  # noqa: BLE001 - handed to the caller
            results[i] = e

    threads = []
    for i in range(len(hosts)):
        thread = threading.Thread(target=work, args=(i,), name=f"testbed-{hosts[i].name}", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # "can't create new thread at interpreter shutdown"
            work(i)
        else:
            threads.append(thread)
    for thread in threads:
        thread.join()
    return results


def _ssh_banner(port: int) -> str:
    """The first bytes an SSH server on 127.0.0.1:port sends, or '' if none."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            return s.recv(64).decode("ascii", "replace")
    except OSError:
        return ""


def _umount(mount_point: Path) -> str | None:
    """Unmount; retry while busy; lazy unmount only as the last resort."""
    if not _is_mounted(mount_point):
        return None
    last = ""
    for _ in range(20):
        proc = subprocess.run(["umount", str(mount_point)], check=False, capture_output=True, text=True)
        if proc.returncode == 0 or not _is_mounted(mount_point):
            return None
        last = proc.stderr.strip()
        time.sleep(0.25)
    log.warning("umount %s kept failing (%s); detaching it lazily", mount_point, last)
    proc = subprocess.run(["umount", "-l", str(mount_point)], check=False, capture_output=True, text=True)
    if proc.returncode == 0 and not _is_mounted(mount_point):
        return None
    return f"could not unmount {mount_point}: {last} / lazy: {proc.stderr.strip()}"
