"""SIMULATED multi-node SGLang (``--nnodes N``): the rendezvous and the lost-peer failures.

Real SGLang over several hosts: every node runs the same command but for
``--node-rank``; rank 0 hosts torch.distributed's TCP store at
``--dist-init-addr`` and the other ranks join it; NCCL then connects all TP
ranks, and a rank that dies takes the others down with an NCCL error. Only
rank 0 runs the tokenizer and the HTTP API; a follower (node rank >= 1) runs
schedulers only and, from 0.5.x, a dummy health server (``/health``,
``/health_generate``, ``/ping`` answer 200) on its own ``--host``/``--port``.
A follower ignores SIGTERM and waits for rank 0's ShutdownReq broadcast
(SGLang 0.5.23 ``entrypoints/engine.py``).

Here one TCP connection per follower stands in for all of that:

* rank 0 listens on the rendezvous port (all interfaces, as torch's store
  does) and counts followers; it is not ready until all N-1 have joined;
* a follower connects (retrying every 0.2 s, as torch does, for
  ``dist_init_timeout_s``) and sends ``JOIN <rank> <nnodes>``; rank 0 answers
  ``OK`` or ``ERR <why>`` (a rank out of range, taken, or another nnodes);
* when the connection drops, the other side exits 1 with an NCCL-like error
  (rank 0: a follower is gone; a follower: rank 0 is gone);
* rank 0 stopping cleanly (SIGTERM) sends ``SHUTDOWN`` (the ShutdownReq
  broadcast) and the followers exit 0. A follower here exits 0 on SIGTERM
  too (the real one waits for rank 0's broadcast).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Dict, Optional, Tuple

JOIN, OK, ERR, SHUTDOWN = "JOIN", "OK", "ERR", "SHUTDOWN"


class RendezvousError(RuntimeError):
    """The rendezvous failed; the message reads like torch's."""


def parse_addr(text: str) -> Tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT``."""
    text = str(text or "").strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.lstrip(":")
    else:
        host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise RendezvousError(f"ValueError: --dist-init-addr must be HOST:PORT, got {text!r}")
    return host, int(port)


def nccl_error(detail: str) -> str:
    return ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp, remote process exited or "
            f"there was a network error, NCCL version 2.27.3 (SIMULATED: {detail})\n"
            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
            "prematurely.")


def _readline(sock: socket.socket, buf: bytearray) -> Optional[str]:
    """One line from ``sock`` (None at EOF); blocks."""
    while b"\n" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            return None
        buf.extend(chunk)
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line.decode("utf-8", "replace").strip()


class Leader:
    """Rank 0: the rendezvous listener and its followers' connections."""

    def __init__(self, addr: str, nnodes: int):
        self.host, self.port = parse_addr(addr)
        self.nnodes = nnodes
        self.lock = threading.Lock()
        self.followers: Dict[int, socket.socket] = {}
        self.all_joined = threading.Event()
        self.lost: Optional[str] = None  # why a joined follower is gone
        self.closing = False
        self.sock: Optional[socket.socket] = None

    def listen(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", self.port))
            sock.listen(16)
        except OSError as e:
            sock.close()
            raise RendezvousError(
                "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                f"address. port: {self.port}, useIpv6: {family == socket.AF_INET6}, code: {-(e.errno or 0)}, "
                f"name: {e.strerror}") from None
        self.sock = sock
        threading.Thread(target=self._accept, name="rendezvous", daemon=True).start()

    def joined(self) -> int:
        with self.lock:
            return len(self.followers)

    def _accept(self) -> None:
        assert self.sock is not None
        while not self.closing:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True).start()

    def _serve(self, conn: socket.socket, peer) -> None:
        buf = bytearray()
        try:
            conn.settimeout(10)
            line = _readline(conn, buf) or ""
            conn.settimeout(None)
        except OSError:
            conn.close()
            return
        words = line.split()
        try:
            rank, nnodes = int(words[1]), int(words[2])
            assert words[0] == JOIN
        except (IndexError, ValueError, AssertionError):
            conn.close()
            return
        with self.lock:
            why = None
            if nnodes != self.nnodes:
                why = f"rank {rank} says --nnodes {nnodes}, rank 0 has {self.nnodes}"
            elif not 1 <= rank < self.nnodes:
                why = f"node rank {rank} is out of range for --nnodes {self.nnodes}"
            elif rank in self.followers:
                why = f"node rank {rank} has already joined"
            if why is None:
                self.followers[rank] = conn
                if len(self.followers) == self.nnodes - 1:
                    self.all_joined.set()
        try:
            conn.sendall(f"{ERR} {why}\n".encode() if why else f"{OK}\n".encode())
        except OSError:
            pass
        if why:
            print(f"sglang (simulated): rendezvous refused {peer[0]}: {why}", flush=True)
            conn.close()
            return
        print(f"[rendezvous] node rank {rank} joined from {peer[0]} ({self.joined()}/{self.nnodes - 1} followers)",
              flush=True)
        # Watch the connection: the follower never sends more; EOF means it is gone.
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        with self.lock:
            if not self.closing and self.lost is None:
                self.lost = f"node rank {rank} ({peer[0]}) disconnected"

    def shutdown(self) -> None:
        """The ShutdownReq broadcast: followers stop cleanly."""
        with self.lock:
            self.closing = True
            conns = list(self.followers.values())
        for conn in conns:
            try:
                conn.sendall(f"{SHUTDOWN}\n".encode())
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass


class Follower:
    """A node rank >= 1: one connection to rank 0's rendezvous."""

    def __init__(self, addr: str, rank: int, nnodes: int):
        self.host, self.port = parse_addr(addr)
        self.rank, self.nnodes = rank, nnodes
        self.sock: Optional[socket.socket] = None
        self.lost: Optional[str] = None  # rank 0 went away
        self.shutdown_requested = threading.Event()
        self.closing = False

    def join(self, timeout_s: float, stop: threading.Event) -> bool:
        """Connect and join, retrying until ``timeout_s``; False when ``stop`` was set first."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while not stop.is_set():
            try:
                sock = socket.create_connection((self.host, self.port), timeout=2)
            except OSError as e:
                last = e.strerror or str(e)
                if time.monotonic() > deadline:
                    raise RendezvousError(
                        f"torch.distributed.DistStoreError: Timed out after {timeout_s:g} seconds waiting to "
                        f"connect to the store at {self.host}:{self.port} (rank 0): {last}") from None
                stop.wait(0.2)
                continue
            buf = bytearray()
            try:
                sock.sendall(f"{JOIN} {self.rank} {self.nnodes}\n".encode())
                answer = _readline(sock, buf) or ""
            except OSError:
                answer = ""
            if answer == OK:
                sock.settimeout(None)
                self.sock = sock
                threading.Thread(target=self._watch, args=(buf,), name="rank0-link", daemon=True).start()
                return True
            sock.close()
            if answer.startswith(ERR):
                raise RendezvousError(f"RuntimeError: rendezvous refused by rank 0: {answer[len(ERR):].strip()}")
            stop.wait(0.2)  # rank 0 was not ready to talk yet: retry
        return False

    def _watch(self, buf: bytearray) -> None:
        assert self.sock is not None
        while True:
            try:
                line = _readline(self.sock, buf)
            except OSError:
                line = None
            if line == SHUTDOWN:
                self.shutdown_requested.set()
                return
            if line is None:
                if not self.closing:
                    self.lost = f"rank 0 at {self.host}:{self.port} is gone"
                return

    def close(self) -> None:
        self.closing = True
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()
