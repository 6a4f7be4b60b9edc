"""A peer on loopback that answers HTTP requests with raw bytes (nothing above TCP is simulated):
the hostile router, server or Hub of tests/test_hostile_router.py and
benchmarks/status_hostile_gateway.py. A stand-in, shipped with the simulator."""

from __future__ import annotations

import socket
import threading
from typing import Callable

#: What the peer does with one accepted connection, after reading the request: (conn, stop).
Behave = Callable[[socket.socket, threading.Event], None]


class RawServer:
    """Accepts connections on loopback (a port the kernel picks) and answers each with
    ``behave(conn, stop)`` in a thread of its own; :meth:`close` sets ``stop`` and stops accepting."""

    def __init__(self, behave: Behave) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.behave, self.stop = behave, threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            self.behave(conn, self.stop)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
