"""The balancer's runtime API against the REAL HAProxy (Debian's haproxy), started here in
master-worker mode from the configuration the deploy renders, in front of two small HTTP servers
that stand in for two routers (``GET /health`` 200, ``/slow`` answering once the test releases it).

- drain, maintenance and ready through the admin socket (``deploy.balancer.Balancer``): a drained
  router gets no new request, ``wait_idle`` waits for the one in flight on it;
- a reload (SIGUSR2 to the master, what the unit's ExecReload does) under a client load refuses
  no connection and fails no request;
- a stopped router is taken out by the balancer's own check, and requests go to the other.
"""

from __future__ import annotations

import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from sglang_deploy.deploy.balancer import Balancer
from sglang_deploy.plan.gateway import gateway_settings
from sglang_deploy.plan.gateway_tier import HAPROXY, admin_socket, render_balancer_config

def setup_module() -> None:
    if not Path(HAPROXY).exists():
        pytest.fail(f"{HAPROXY}: Debian's haproxy is not installed (.ci/run installs it)", pytrace=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics_port(port: int, router_port: int) -> int:
    """A free port whose block of three (the balancer's metrics and each of two routers') meets
    neither the gateway's port nor the two routers' ports: two ports the kernel handed out one after
    the other are often neighbours (port 60231 was both once)."""
    taken = {port, router_port, router_port + 1}
    while True:
        first = free_port()
        if first + 2 <= 65535 and not taken & {first, first + 1, first + 2}:
            return first


class Router(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, name: str):
        self.name = name
        self.served = 0
        # `/slow` answers once the test releases it (at most 60 s): a pause of fixed length ran out
        # before the test had looked, on a loaded machine where each balancer query took a second
        self.release = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path != "/health":
                    server.served += 1
                if self.path == "/slow":
                    server.release.wait(60)
                body = name.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = self
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.fixture
def haproxy(tmp_path):
    routers = [Router("router0"), Router("router1")]
    port = free_port()
    base = routers[0].server_address[1]
    service = f"sgd-test-lb-{os.getpid()}"
    venv = tmp_path / "venvs" / "sglang-router-0.3.2" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    settings = gateway_settings("gw-test", {"sglang_gateway": {
        "routers": 2, "port": port, "host": "127.0.0.1", "router_port": base, "metrics_port": metrics_port(port, base),
        "service_name": service, "venvs_dir": str(tmp_path / "venvs"), "request_timeout": 10}})
    assert settings is not None
    # The rendered configuration, with router 1's address where this test's second server listens.
    cfg = render_balancer_config("gw-test", settings).replace(
        f"127.0.0.1:{base + 1} check", f"127.0.0.1:{routers[1].server_address[1]} check")
    path = tmp_path / "haproxy.cfg"
    path.write_text(cfg)
    run_dir = Path(admin_socket(settings)).parent
    run_dir.mkdir(mode=0o700, exist_ok=True)
    assert subprocess.run([HAPROXY, "-c", "-q", "-f", str(path)]).returncode == 0
    proc = subprocess.Popen([HAPROXY, "-W", "-f", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def run(command: str) -> tuple[bool, str]:
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=30)
        return done.returncode == 0, done.stdout

    balancer = Balancer(run, settings)
    deadline = time.monotonic() + 20
    while True:
        try:
            if all(s.up for s in balancer.servers().values()) and len(balancer.servers()) == 2:
                break
        except Exception:  # noqa: BLE001 -- not listening yet
            pass
        assert time.monotonic() < deadline, "haproxy did not come up"
        time.sleep(0.1)
    try:
        yield balancer, f"http://127.0.0.1:{port}", routers, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for r in routers:
            r.release.set()
            r.shutdown()
            r.server_close()
        shutil.rmtree(run_dir, ignore_errors=True)


def get(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def test_a_drained_router_gets_no_new_request_and_its_request_in_flight_is_waited_for(haproxy):
    balancer, url, routers, _ = haproxy
    balancer.set_state(1, "maint")
    slow = threading.Thread(target=get, args=(url + "/slow", 60))
    slow.start()
    time.sleep(0.3)
    assert balancer.servers()["router0"].sessions == 1
    balancer.set_state(0, "drain")
    balancer.set_state(1, "ready")
    assert balancer.wait_idle(0, 0.5) == (False, 1)  # the slow request is still on it
    before = routers[0].served
    assert {get(url + "/x") for _ in range(6)} == {"router1"}  # no new request to the drained router
    assert balancer.wait_idle(0, 0.5) == (False, 1)  # still there: drained, not cut
    routers[0].release.set()
    assert balancer.wait_idle(0, 30.0) == (True, 0)
    slow.join()
    assert routers[0].served == before
    balancer.set_state(0, "maint")
    assert balancer.servers()["router0"].status == "MAINT"
    balancer.set_state(0, "ready")
    balancer.wait_up((0, 1), 10)
    assert {get(url + "/x") for _ in range(8)} == {"router0", "router1"}


def test_a_reload_refuses_no_connection(haproxy):
    _, url, _, proc = haproxy
    failures: list[str] = []
    done = threading.Event()
    count = [0]

    def client() -> None:
        while not done.is_set():
            try:
                get(url + "/x", timeout=5)
                count[0] += 1
            except OSError as exc:
                failures.append(repr(exc))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for _ in range(3):
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGUSR2)  # the unit's ExecReload: the master starts a new worker
    time.sleep(1.0)
    done.set()
    for t in threads:
        t.join()
    assert count[0] > 50 and failures == [], (count[0], failures[:3])


def test_a_dead_router_is_taken_out_by_the_check(haproxy):
    balancer, url, routers, _ = haproxy
    routers[0].shutdown()
    routers[0].server_close()
    stopped = time.monotonic()
    # fall 2 at 1 s: about two intervals on a quiet machine; a loaded one delays HAProxy's checks (a
    # CI run read 3.6 s), so the bound only says the check took it out, not how fast
    while not balancer.servers()["router0"].status.startswith("DOWN"):
        assert time.monotonic() - stopped < 15, balancer.servers()
        time.sleep(0.1)
    assert {get(url + "/x") for _ in range(4)} == {"router1"}
