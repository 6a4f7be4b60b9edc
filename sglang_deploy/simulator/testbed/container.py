"""One host's container on this machine: start systemd-nspawn, wait for the boot, stop it.

Stopping powers the container off, kills whatever is left of it, removes its
cgroups and unmounts its root filesystem; what is left after that is what
teardown reports as a leak (see :func:`host_pids`).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import warnings

from .host import TestHost, release_port
from .mounts import mount_points_under, umount
from .processes import cgroup_pids, children_of, pid_namespace, pids_in_namespace, remove_cgroup, systemd_cgroup_dirs

log = logging.getLogger(__name__)


# --- boot ---------------------------------------------------------------------


#: systemd-nspawn's per-machine folder for propagated mounts (src/nspawn/nspawn.c).
PROPAGATE_DIR = "/run/systemd/nspawn/propagate"


def _nspawn_running(name: str) -> bool:
    """Whether a systemd-nspawn process for machine ``name`` runs on this machine."""
    want = f"--machine={name}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read(1 << 16).split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"systemd-nspawn") and want in argv:
            return True
    return False


def clear_stale_propagate(name: str) -> bool:
    """Remove machine ``name``'s propagate folder when it is left over (no nspawn of that name
    runs): where /run is not a tmpfs, as here, nspawn's rm_rf refuses to touch it ("Attempted to
    remove disk file system under ...", src/basic/rm-rf.c) and the boot exits 255. Whether one
    was removed."""
    path = os.path.join(PROPAGATE_DIR, name)
    if not os.path.lexists(path) or _nspawn_running(name):
        return False
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)


def start(host: TestHost, cgroup_name: str) -> None:
    """Start systemd-nspawn in its own session and cgroup, console to console.log.

    ``cgroup_name`` names the container's own cgroup under this process's
    cgroup in each hierarchy (see :func:`systemd_cgroup_dirs`).
    """
    if clear_stale_propagate(host.name):
        log.warning("testbed host %s: removed a propagate folder left by an earlier run", host.name)
    # Each container gets a cgroup of its own: a shell joins it, then execs
    # nspawn, so nspawn starts inside it.
    join = []
    for parent in systemd_cgroup_dirs():
        cgroup = parent / cgroup_name
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
                # machine's real /tmp changing underneath it. A host given
                # a directory of its own for /tmp (binds) gets that instead.
                *([] if any(dest == "/tmp" for _, dest in host.binds) else ["--tmpfs=/tmp"]),
                *(f"--bind={source}:{dest}" for source, dest in host.binds),
                "--console=pipe",
                "-b",
            ],
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # setsid: own process group, no tty
        )  # fmt: skip


def wait_ready(host: TestHost, boot_timeout: float) -> str | None:
    """Wait for sshd, then for systemd's boot to finish. Return an error or None."""
    deadline = time.monotonic() + boot_timeout
    assert host.process is not None

    def failure(why: str) -> str:
        return f"{host.name} (port {host.port}): {why}\n--- console log tail ---\n{host.console_tail()}"

    # 1. sshd accepts a TCP connection and greets with its banner.
    while True:
        if host.process.poll() is not None:
            return failure(f"systemd-nspawn exited with status {host.process.returncode} during boot")
        _find_pid_namespace(host)
        if _ssh_banner(host.port).startswith("SSH-"):
            _find_pid_namespace(host)
            break
        if time.monotonic() > deadline:
            return failure(f"sshd did not answer on 127.0.0.1:{host.port} within {boot_timeout:.0f} s")
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
        return failure(f"boot did not finish within {boot_timeout:.0f} s; pending jobs:\n{jobs}")
    state = proc.stdout.strip()
    if state == "running":
        return None
    if state == "degraded":
        failed = host.ssh("systemctl --failed --no-legend --plain --no-pager", check=False).stdout
        host.failed_units = [line.split()[0] for line in failed.splitlines() if line.strip()]
        warnings.warn(f"testbed host {host.name} is degraded; failed units: {host.failed_units}", stacklevel=2)
        return None
    return failure(f"systemctl is-system-running answered {state!r} ({proc.stderr.strip()})")


def _find_pid_namespace(host: TestHost) -> None:
    """Remember the container's PID namespace (teardown proves it empty).

    The container's PID 1 is a child of systemd-nspawn living in a PID
    namespace of its own; nspawn's other children live in ours.
    """
    if host._pidns is not None or host.process is None:
        return
    own = pid_namespace(os.getpid())
    for child in children_of(host.process.pid):
        ns = pid_namespace(child)
        if ns and ns != own:
            host._pidns = ns


def _ssh_banner(port: int) -> str:
    """The first bytes an SSH server on 127.0.0.1:port sends, or '' if none."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            return s.recv(64).decode("ascii", "replace")
    except OSError:
        return ""


# --- teardown -----------------------------------------------------------------


#: Tenths of a second a SIGKILLed straggler may take to be gone before the teardown reports it.
STRAGGLER_WAIT_STEPS = 300


def stop(host: TestHost, poweroff_timeout: float) -> list[str]:
    """Stop one host's container and unmount its filesystem."""
    errors: list[str] = []
    proc = host.process
    if proc is not None and proc.poll() is None:
        # SIGTERM: nspawn asks the container's systemd to power off.
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=poweroff_timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s did not power off in %.0f s; killing it", host.name, poweroff_timeout)
            _kill(host)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                errors.append(f"{host.name}: systemd-nspawn (pid {proc.pid}) survived SIGKILL")
    # Container processes are reaped by the kernel once its PID 1 is
    # gone; give that a moment, then kill any stragglers and wait for them to
    # go: on a loaded machine five SIGKILLed processes of a real SGLang venv
    # were still listed half a second later, and the teardown called that a leak.
    for _ in range(50):
        if not host_pids(host):
            break
        time.sleep(0.1)
    else:
        reap(host)
    for cgroup in list(host.cgroups):
        err = remove_cgroup(cgroup)
        if err:
            errors.append(f"{host.name}: {err}")
        else:
            host.cgroups.remove(cgroup)
    # Unmount in reverse order: the overlay, then its tmpfs upper layer.
    for mount_point in list(reversed(host._mounts)):
        err = umount(mount_point)
        if err:
            errors.append(f"{host.name}: {err}")
        else:
            host._mounts.remove(mount_point)
    release_port(host.port)
    if not mount_points_under(host.workdir):
        shutil.rmtree(host.workdir, ignore_errors=True)
    return errors


def reap(host: TestHost) -> set[int]:
    """SIGKILL what is left of the host and wait up to STRAGGLER_WAIT_STEPS tenths of a second for
    it to be gone; what is still there then."""
    _kill(host)
    for _ in range(STRAGGLER_WAIT_STEPS):
        left = host_pids(host)
        if not left:
            return left
        time.sleep(0.1)
    return host_pids(host)


def host_pids(host: TestHost) -> set[int]:
    """Every process still alive of this host: its PID namespace and cgroups."""
    pids = set(pids_in_namespace(host._pidns)) if host._pidns else set()
    for cgroup in host.cgroups:
        pids.update(cgroup_pids(cgroup))
    return pids


def _kill(host: TestHost) -> None:
    """SIGKILL nspawn, its process group and everything in the container."""
    pids = host_pids(host)
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
