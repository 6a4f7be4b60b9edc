"""A follower node (``--node-rank`` >= 1) of a multi-node instance: joins
rank 0, runs this node's schedulers, and serves only SGLang's dummy health
endpoints; no tokenizer, no HTTP API."""

from __future__ import annotations

import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Optional, Tuple
from urllib.parse import urlsplit

from sglang._sim import multinode
from sglang._sim.console import log
from sglang._sim.faults import Faults
from sglang._sim.workers import TPWorkers, local_ranks


class FollowerHandler(BaseHTTPRequestHandler):
    """SGLang's dummy health server on a follower node (utils/common.py
    launch_dummy_health_check_server): 200 on /health, /health_generate, /ping."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        body = b"" if path in ("/health", "/health_generate", "/ping") else b'{"detail":"Not Found"}'
        self.send_response(200 if not body else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _HealthServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: Tuple[str, int], handler: Any):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)


def run(info: Dict[str, Any], cfg: Dict[str, Any], faults: Faults, crash_at: float,
        stop: threading.Event, nnodes: int, node_rank: int) -> int:
    """A node rank >= 1: join rank 0, run this node's schedulers, serve only the dummy health
    endpoints; exit 1 when rank 0 is lost, 0 on rank 0's shutdown broadcast or SIGTERM."""
    addr = str(info.get("dist_init_addr") or "")
    follower = multinode.Follower(addr, node_rank, nnodes)
    workers = TPWorkers.spawn_ranks(local_ranks(info, nnodes, node_rank))
    httpd: Optional[ThreadingHTTPServer] = None
    log(f"Node rank {node_rank} of {nnodes}: joining rank 0 at {addr} (simulated torch.distributed); no "
        "tokenizer or HTTP API on this node")
    try:
        if time.monotonic() >= crash_at:  # crash_after_s 0: dies before it ever joins rank 0
            faults.crash()
            return 1
        code = _join(follower, cfg, faults, crash_at, stop)
        if code is not None:
            return code
        log(f"Joined rank 0 at {addr}: scheduler(s) of TP ranks {', '.join(map(str, workers.ranks))} running")
        if cfg.get("follower_health_server", True):
            httpd = _serve_health(info)
            if httpd is None:
                return 1
        return _watch(follower, workers, faults, crash_at, stop, node_rank)
    finally:
        follower.close()
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        workers.stop()


def _join(follower: multinode.Follower, cfg: Dict[str, Any], faults: Faults, crash_at: float,
          stop: threading.Event) -> Optional[int]:
    """Join rank 0 (retrying, in a thread, so that a crash fault can strike meanwhile);
    None once joined, else the exit code."""
    result: Dict[str, Any] = {}

    def join() -> None:
        try:
            result["joined"] = follower.join(float(cfg["dist_init_timeout_s"]), stop)
        except multinode.RendezvousError as e:
            result["error"] = str(e)

    joiner = threading.Thread(target=join, name="join", daemon=True)
    joiner.start()
    while joiner.is_alive():
        if time.monotonic() >= crash_at:
            faults.crash()
            stop.set()
            return 1
        joiner.join(0.05)
    if "error" in result:
        print(result["error"], file=sys.stderr, flush=True)
        return 1
    if not result.get("joined"):
        log("Received a stop signal before joining: shutting down")
        return 0
    return None


def _serve_health(info: Dict[str, Any]) -> Optional[ThreadingHTTPServer]:
    """The dummy health server, serving in a thread; None when the port cannot be bound."""
    host, port = str(info.get("host") or "127.0.0.1"), int(info.get("port") or 30000)
    try:
        httpd = _HealthServer((host, port), FollowerHandler)
    except OSError as e:
        print(f"sglang (simulated): cannot listen on {host}:{port} (the follower's health endpoint): {e}",
              file=sys.stderr, flush=True)
        return None
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="health",
                     daemon=True).start()
    log(f"Follower health endpoint on http://{host}:{port}/health (simulated dummy server)")
    return httpd


def _watch(follower: multinode.Follower, workers: TPWorkers, faults: Faults, crash_at: float,
           stop: threading.Event, node_rank: int) -> int:
    """Until a stop: the exit code on a crash, rank 0's stop or loss, or a dead TP worker."""
    while not stop.wait(max(0.0, min(0.05, crash_at - time.monotonic()))):
        if time.monotonic() >= crash_at:
            faults.crash()
            return 1
        if follower.shutdown_requested.is_set():
            log("Received ShutdownReq from rank 0: shutting down")
            return 0
        if follower.lost:
            print(multinode.nccl_error(f"node rank {node_rank}: {follower.lost}"), file=sys.stderr, flush=True)
            return 1
        dead = workers.dead()
        if dead:
            print(f"sglang (simulated): {dead}; shutting down", file=sys.stderr, flush=True)
            return 1
    log("Received a stop signal: shutting down")
    return 0
