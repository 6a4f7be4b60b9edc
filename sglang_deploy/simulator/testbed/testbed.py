"""The :class:`Testbed`: boot several throwaway hosts, write their pyinfra inventory, tear
them all down and verify that nothing of them is left mounted or running."""

from __future__ import annotations

import ast
import atexit
import functools
import logging
import os
import pprint
import re
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import container, rootfs
from .errors import BootError, TestbedError, TestbedLeakError, missing_requirements, run
from .host import TestHost, allocate_port
from .mounts import mount_points_under

log = logging.getLogger(__name__)

#: How long a boot may take: sshd answering and systemd reporting boot done.
BOOT_TIMEOUT_S = 60.0
#: How long a container gets to power off after SIGTERM before it is killed.
POWEROFF_TIMEOUT_S = 30.0

_HOSTNAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


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

    def boot(self, names: Sequence[str], *, setup: Callable[[str, Path], None] | None = None,
             binds: Mapping[str, Sequence[tuple[Path, str]]] | None = None) -> list[TestHost]:
        """Boot one host per name, in parallel; return them in the same order.

        ``setup(name, root)`` runs for each host after its filesystem is
        prepared and before it boots: drop stand-ins or config into ``root``.
        Returns once every host's sshd accepts connections and systemd says
        the boot is done (``running``, or ``degraded``: the failed units are
        then in ``host.failed_units`` and a warning names them). If any host
        fails, every host of this call is torn down and :class:`BootError`
        is raised with the console log tails.

        ``binds[name]``: directories of this machine bind-mounted into that host, as
        ``(directory, path in the host)``; they must exist, and outlive the host (the
        caller removes them after ``close``).
        """
        with self._lock:
            self._check_names(names)
            self._ensure_key()
            for attempt in (1, 2):
                batch: list[TestHost] = []
                try:
                    self._boot(names, setup, batch, binds or {})
                    return batch
                except BootError as exc:
                    self._abandon(batch)
                    if attempt == 2 or not self._clean_for_retry(names, exc):
                        raise
                    warnings.warn(f"testbed: {', '.join(names)}: systemd-nspawn exited during boot; "
                                  f"booting once more:\n{exc}", stacklevel=2)
                except BaseException:
                    self._abandon(batch)
                    raise
            raise AssertionError("not reached")

    def _clean_for_retry(self, names: Sequence[str], exc: BootError) -> bool:
        """Whether a failed boot may be tried once more, its scratch removed: only when a container
        exited during boot (seen in CI on a loaded machine, with nothing on its console but
        nspawn's cleanup line; not a timeout, which a second try would only repeat) and every host
        of it is gone, nothing left mounted under its folder."""
        if "exited with status" not in str(exc):
            return False
        if any(name in self.hosts for name in names):
            return False
        for name in names:
            if mount_points_under(self.dir / name):
                return False
        for name in names:
            shutil.rmtree(self.dir / name, ignore_errors=True)
        return not any((self.dir / name).exists() for name in names)

    def _check_names(self, names: Sequence[str]) -> None:
        """Refuse a boot on a closed testbed, and names that repeat, are taken or are no hostnames."""
        if self._closed:
            raise TestbedError("testbed is closed")
        if len(set(names)) != len(names):
            raise ValueError(f"host names repeat: {list(names)}")
        for name in names:
            if name in self.hosts:
                raise ValueError(f"host {name!r} is already booted")
            if not _HOSTNAME.fullmatch(name):
                raise ValueError(f"host name {name!r}: use lowercase letters, digits and '-' (a hostname)")

    def _boot(self, names: Sequence[str], setup: Callable[[str, Path], None] | None, batch: list[TestHost],
              binds: Mapping[str, Sequence[tuple[Path, str]]]) -> None:
        """Prepare, start and wait for each host, adding it to ``batch`` as soon as it exists."""
        for name in names:
            workdir = self.dir / name
            host = TestHost(name=name, port=allocate_port(), root=workdir / "merged", key=self.key, workdir=workdir,
                            binds=tuple((Path(src), dest) for src, dest in binds.get(name, ())))
            batch.append(host)
            self.hosts[name] = host
            rootfs.prepare(host, self.key)
            if setup is not None:
                setup(name, host.root)
        started = time.monotonic()
        for host in batch:
            container.start(host, f"{self.dir.name}-{host.name}")
        wait_ready = functools.partial(container.wait_ready, boot_timeout=self.boot_timeout)
        errors = [
            f"{host.name}: {r!r}" if isinstance(r, Exception) else r
            for host, r in zip(batch, _in_parallel(wait_ready, batch))
            if r
        ]
        if errors:
            raise BootError("\n\n".join(errors))
        log.info("booted %s in %.1f s", ", ".join(names), time.monotonic() - started)

    def _abandon(self, batch: list[TestHost]) -> None:
        """Tear down the hosts of a failed boot; forget those that are gone."""
        teardown_errors = self._destroy_all(batch)
        for host in batch:
            # A host that could not be torn down stays listed, so
            # that close() tries again and reports it.
            stopped = host.process is None or host.process.poll() is not None
            if stopped and not host._mounts and not host.cgroups:
                self.hosts.pop(host.name, None)
        if teardown_errors:
            log.error("tearing down after a failed boot: %s", "; ".join(teardown_errors))

    def _ensure_key(self) -> None:
        if not self.key.exists():
            run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "testbed", "-f", self.key)

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
            '"""pyinfra inventory of throwaway testbed hosts (sglang_deploy/simulator/testbed); '
            'gone after teardown."""\n\n'
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
            # A process still listed after the stop (twelve of the released SGLang venv's, once, on a
            # loaded machine) is killed and waited for once more before it counts as a leak.
            for host in hosts:
                if container.host_pids(host):
                    container.reap(host)
            leaks = self._leaks(hosts)
            if not leaks and not mount_points_under(self.dir):
                shutil.rmtree(self.dir, ignore_errors=True)
            if leaks or errors:
                raise TestbedLeakError(f"testbed {self.dir} was not torn down cleanly:\n" + "\n".join(errors + leaks))

    def _destroy_all(self, hosts: list[TestHost]) -> list[str]:
        """Tear hosts down in parallel; return error messages (never raise)."""
        errors = []
        stop = functools.partial(container.stop, poweroff_timeout=self.poweroff_timeout)
        for host, result in zip(hosts, _in_parallel(stop, hosts)):
            errors += [f"{host.name}: teardown raised {result!r}"] if isinstance(result, Exception) else result
        return errors

    def _leaks(self, hosts: list[TestHost]) -> list[str]:
        """What of this testbed is still mounted or running (empty if nothing)."""
        leaks = [f"still mounted: {point}" for point in mount_points_under(self.dir)]
        for host in hosts:
            if host.process is not None and host.process.poll() is None:
                leaks.append(f"{host.name}: systemd-nspawn still running (pid {host.process.pid})")
            left = container.host_pids(host)
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
