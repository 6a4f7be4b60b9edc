"""What the gateway's end-to-end files share: the pinned sglang-router's wheels for the gateway host,
the boot of a gateway host and its serving hosts, reading a gateway's worker list, a poller of that
list in a thread, and a command run while something is polled.

Each file keeps its own hosts, ports and inventory (they run one after another in one process,
beside the other e2e files)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pytest

from sglang_deploy.simulator.sglang_server.build import build_wheel
from sglang_deploy.simulator.testbed import Testbed, TestHost, fleet
from sglang_deploy.simulator.testbed.gpu import stage_gpu_host
from tests.e2e.conftest import in_ci

REPO = Path(__file__).resolve().parents[2]
ROUTER_VERSION = "0.3.2"
ROUTER_WHEELS = Path.home() / ".cache" / "sglang-deploy-e2e" / "router-wheels"
ROUTER_WHEELS_ON_HOST = "/opt/sglang-router-wheels"


def router_wheels() -> Path:
    """sglang-router and its dependencies as wheels, downloaded once with this machine's pip
    configuration and kept for later runs (the gateway host installs from them offline)."""
    if any(ROUTER_WHEELS.glob(f"sglang_router-{ROUTER_VERSION}-*.whl")):
        return ROUTER_WHEELS
    tmp = ROUTER_WHEELS.with_name(f"{ROUTER_WHEELS.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q",
                           f"sglang-router=={ROUTER_VERSION}", "-d", str(tmp)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        why = f"cannot download sglang-router {ROUTER_VERSION} wheels: {proc.stderr[-2000:]}"
        if in_ci():
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    shutil.rmtree(ROUTER_WHEELS, ignore_errors=True)
    os.replace(tmp, ROUTER_WHEELS)  # whole, or not there: a later run never sees half a download
    return ROUTER_WHEELS


def boot_gateway_fleet(testbed: Testbed, tmp_path_factory, gateway: str, servers: Iterable[str], board: str,
                       sim: Mapping) -> dict[str, TestHost]:
    """The gateway host (the router's wheels bound in) and the serving hosts (the NVML stand-in of
    ``board``, the simulated SGLang with behaviour ``sim``), booted together, by name."""
    wheels = router_wheels()
    sim_wheels = tmp_path_factory.mktemp("wheels")
    build_wheel(fleet.VERSIONS[0], sim_wheels)
    fleet.build_engine_wheels(sim_wheels)  # a prefill or decode server's deploy installs one

    def setup(name: str, root: Path) -> None:
        if name != gateway:
            stage_gpu_host(root, sim_wheels, board, sim=dict(sim))

    booted = testbed.boot([gateway, *servers], setup=setup, binds={gateway: [(wheels, ROUTER_WHEELS_ON_HOST)]})
    return {h.name: h for h in booted}


class GatewayView:
    """A gateway's worker list as its admin API gives it (``GET /workers``), read with its key."""

    def __init__(self, url: str, key: str):
        self.url, self.key = url, key

    def workers(self) -> dict[str, dict]:
        """The gateway's workers, by URL."""
        req = urllib.request.Request(f"{self.url}/workers", headers={"Authorization": f"Bearer {self.key}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return {w["url"]: w for w in json.loads(resp.read())["workers"]}

    def wait_healthy(self, urls: Iterable[str], timeout: float = 60) -> dict[str, dict]:
        """Until the gateway answers and lists every one of ``urls`` healthy; its list."""
        wanted = list(urls)
        deadline = time.monotonic() + timeout
        listed: dict[str, dict] | str = "no answer"
        while True:
            try:
                listed = self.workers()
                if all(listed.get(u, {}).get("is_healthy") is True for u in wanted):
                    return listed
            except OSError as exc:
                listed = f"{type(exc).__name__}: {exc}"
            if time.monotonic() > deadline:
                raise AssertionError(f"the gateway does not list {wanted} healthy within {timeout:g} s: {listed}")
            time.sleep(0.3)


class ListPoller:
    """Reads a gateway's worker list every ``poll_s`` in a thread, handing each read to
    :meth:`observe` (a read that fails is counted in ``errors``); a context manager."""

    def __init__(self, view: GatewayView, poll_s: float = 0.2):
        self.view, self.poll_s = view, poll_s
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)

    def observe(self, listed: dict[str, dict], now: float) -> None:
        raise NotImplementedError

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.observe(self.view.workers(), time.monotonic())
            except OSError:
                self.errors += 1
            self._stop.wait(self.poll_s)


def run_polling(argv: list[str], cwd: Path, env: Mapping[str, str], poller: ListPoller,
                timeout: float = 500) -> tuple[int, str]:
    """Run ``argv`` to its end (killed past ``timeout``) with ``poller`` reading the gateway meanwhile:
    (exit status, stdout and stderr together)."""
    with poller:
        proc = subprocess.Popen(argv, cwd=cwd, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        try:
            output, _ = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return proc.returncode, output


def deploy_inventory(inventory: Path, env: Mapping[str, str], say: Callable[[str], None], what: str,
                     timeout: float = 500) -> None:
    """The whole inventory deployed with `pyinfra -y INVENTORY deploy.py` (a module fixture's
    first deploy); fails with the output's tail unless it exits 0; says how long it took."""
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(inventory), "deploy.py"], cwd=REPO,
                          env=dict(env), capture_output=True, text=True, timeout=timeout)
    output = inventory.parent / "deploy-output.txt"  # the whole output, beside the inventory
    output.write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"(all of it: {output}) " + (proc.stdout + proc.stderr)[-8000:]
    say(f"initial deploy of {what}: {time.monotonic() - t:.1f} s")


def status_rows(inventory: Path, env: Mapping[str, str]) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    """`sglang-deploy status INVENTORY --json`: the process and its rows by host."""
    proc = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "status", str(inventory), "--json"],
                          cwd=REPO, env=dict(env), capture_output=True, text=True, timeout=300)
    return proc, {r["host"]: r for r in json.loads(proc.stdout)}
