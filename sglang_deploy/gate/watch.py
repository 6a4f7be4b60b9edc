"""The gate's watch on the server's systemd unit: read through a shell command (on this
machine or over the deploy's SSH connection), on every readiness poll and from a thread
through the measurement. A unit that failed, stopped or restarted raises ``ServiceDown``."""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
import time
from typing import Callable

from sglang_deploy.gate import unit
from sglang_deploy.gate.errors import ServiceDown
from sglang_deploy.gate.options import UnitWatch
from sglang_deploy.gate.unit import UnitStatus
from sglang_deploy.untrusted import UntrustedInput, read_text_file

#: Seconds between two readings of the unit through the measurement.
EVERY_S = 1.0


def local_shell(command: str) -> str:
    """Run a shell command on this machine; its stdout (``check --watch-unit`` on the host)."""
    try:
        proc = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return ""
    return proc.stdout


class SystemdWatch:
    """One systemd unit, read through ``run`` (a shell command in, its stdout out): on this
    machine (:func:`local_shell`) or over the deploy's SSH connection. The first reading is
    the unit as the restart left it; any later one that shows it failed, stopped, restarting
    or on another main PID raises :class:`ServiceDown`. Safe to call from two threads."""

    def __init__(self, run: Callable[[str], str], unit: str, every_s: float = EVERY_S):
        self.run, self.unit, self.every_s = run, unit, every_s
        self.first: UnitStatus | None = None
        self.last_check = float("-inf")
        self.lock = threading.Lock()

    def status(self) -> UnitStatus:
        props = " ".join(f"-p {p}" for p in unit.UNIT_PROPERTIES)
        return unit.parse_unit_status(self.run(f"systemctl show {props} {shlex.quote(self.unit)}"))

    def failure(self) -> str | None:
        with self.lock:
            now = self.status()
            self.last_check = time.monotonic()
            if self.first is None:
                self.first = now
            return unit.unit_failure(self.first, now)

    def check(self, force: bool = False) -> None:
        """Raise ServiceDown (with the journal tail) when the unit is down; at most once per
        ``every_s`` unless ``force``."""
        if not force and time.monotonic() - self.last_check < self.every_s:
            return
        why = self.failure()
        if why:
            raise ServiceDown(self.unit, why, self.journal())

    def journal(self) -> str:
        return self.run(f"journalctl -u {shlex.quote(self.unit)} -n {unit.JOURNAL_LINES} --no-pager -o cat")


class AbortFileWatch(SystemdWatch):
    """A :class:`SystemdWatch` that also reads the gate as failed once ``path`` exists: its
    first line is the reason, the rest journal lines to report. The deploy's controller
    writes it when what it watches elsewhere fails (another member of a multi-node group)
    while this gate runs on rank 0's host."""

    def __init__(self, run: Callable[[str], str], unit: str, path: str, every_s: float = EVERY_S):
        super().__init__(run, unit, every_s)
        self.path = path
        self.aborted_journal = ""

    def failure(self) -> str | None:
        why = super().failure()
        if why:
            return why
        if not os.path.lexists(self.path):
            return None
        try:  # a regular file only, read without blocking: a FIFO put there must not hang the gate
            text = read_text_file(self.path, "abort file", 64 * 1024)
        except (OSError, UntrustedInput) as exc:
            if not os.path.lexists(self.path):
                return None  # gone between the two looks
            return f"{self.path} appeared, and is not a file the gate reads ({exc})"
        reason, _, self.aborted_journal = text.partition("\n")
        return reason.strip() or f"{self.path} appeared"

    def journal(self) -> str:
        own = super().journal()
        return f"{own.rstrip()}\n{self.aborted_journal}" if self.aborted_journal else own


def local_watch(unit_name: str | None, abort_file: str | None = None) -> SystemdWatch | None:
    """The watch of a unit on this machine (``check --watch-unit``, the options file's
    ``watch_unit``), also failing the gate once ``abort_file`` appears; None without a unit."""
    if not unit_name:
        return None
    if abort_file:
        return AbortFileWatch(local_shell, unit_name, abort_file)
    return SystemdWatch(local_shell, unit_name)


class WatchThread:
    """Checks ``watch`` about once a second in a thread while the measurement runs; on a
    failure it sets ``cancel`` (the streams stop at their next chunk) and keeps the error."""

    def __init__(self, watch: UnitWatch | None):
        self.watch = watch
        self.cancel = threading.Event()
        self.error: ServiceDown | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> WatchThread:
        if self.watch is not None:
            self._thread = threading.Thread(target=self._loop, name="gate-watch", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        assert self.watch is not None
        while not self._stop.wait(self.watch.every_s):
            try:
                self.watch.check(force=True)
            except ServiceDown as exc:
                self.error = exc
                self.cancel.set()
                return
            except Exception:  # noqa: BLE001 -- a watch that cannot read systemd must not end the gate
                continue

    def final_check(self) -> None:
        """After the measurement: the failure the thread saw, else one last reading of the unit."""
        if self.error is not None:
            raise self.error
        if self.watch is not None:
            self.watch.check(force=True)

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=35)
