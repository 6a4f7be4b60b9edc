"""The HTTP server of the simulated SGLang API: ``ThreadingHTTPServer`` with
a uvicorn-like handler that checks the API key and dispatches on the route
table of ``App.routes``."""

from __future__ import annotations

import json
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Optional
from urllib.parse import urlsplit

from sglang._sim.http_types import RoutedApp
from sglang._sim.streaming import Abandoned


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    disable_nagle_algorithm = True

    @property
    def app(self) -> RoutedApp:
        return self.server.app  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        print(f"INFO:     {self.client_address[0]}:{self.client_address[1]} - {format % args}",
              flush=True)

    def send_json(self, status: int, obj: Any, headers: Optional[Dict[str, str]] = None) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def send_empty(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def send_error_json(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        self.send_json(
            status,
            {"object": "error", "message": message, "type": kind, "param": None, "code": status},
        )

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def dispatch(self, method: str) -> None:
        path = urlsplit(self.path).path
        body = self.read_body() if method in ("POST", "PUT", "PATCH") else b""
        self.body = body
        app = self.app
        try:
            if app.intercept(self, method, path):
                return
            if (
                app.api_key
                and method != "OPTIONS"
                and not path.startswith("/health")
                and not path.startswith("/metrics")
                and self.headers.get("Authorization") != f"Bearer {app.api_key}"
            ):
                self.send_json(401, {"error": "Unauthorized"})
                return
            route = app.routes().get(path)
            if route is None:
                self.send_json(404, {"detail": "Not Found"})
                return
            methods, fn = route
            if method not in methods:
                self.send_json(405, {"detail": "Method Not Allowed"})
                return
            fn(self)
        except (BrokenPipeError, ConnectionResetError, Abandoned):
            self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802
        self.dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self.dispatch("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self.dispatch("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self.dispatch("DELETE")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # listen() backlog.  socketserver's default (request_queue_size = 5) overflows when a
    # client opens dozens of streams at once (the gate's --concurrency 64): the kernel drops
    # the excess handshakes and clients see "Connection reset by peer".  SGLang serves its
    # API with uvicorn, whose default backlog is 2048 (uvicorn/config.py, Config); the
    # kernel caps it at net.core.somaxconn.
    request_queue_size = 2048

    def __init__(self, host: str, port: int, app: RoutedApp):
        if ":" in host:
            self.address_family = socket.AF_INET6
        self.app = app
        super().__init__((host, port), Handler)
