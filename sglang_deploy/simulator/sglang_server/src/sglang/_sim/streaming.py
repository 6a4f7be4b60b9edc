"""SSE streaming of generated tokens on their schedule: the chunked
``text/event-stream`` framing, the timed send loop, and the deliberate hang of
``faults.stall_forever_after_tokens``."""

from __future__ import annotations

import json
import select
import socket
import time
from typing import Any, Callable, List, Optional, Tuple

from sglang._sim.engine import Plan, sleep_until
from sglang._sim.http_types import Handler


class Abandoned(Exception):
    """The response was given up on purpose (faults.stall_forever_after_tokens)."""


def start_stream(h: Handler) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.send_header("Cache-Control", "no-cache")
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()


def send_event(h: Handler, payload: Any) -> None:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    data = b"data: " + text.encode() + b"\n\n"
    h.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))


def end_stream(h: Handler) -> None:
    h.wfile.write(b"0\r\n\r\n")


def run_schedule(h: Handler, plan: Plan,
                 emit: Callable[[int, int], None]) -> Tuple[Optional[float], Optional[float]]:
    """Send chunks on schedule; (first, last) send times.  Recorded in the
    stats even when the client goes away half-way."""
    times: List[float] = []
    hang_at = plan.hang_index()
    try:
        for index, (due, start, size) in enumerate(plan.schedule()):
            if index == hang_at:
                hang(h)
            sleep_until(due)
            emit(start, size)
            times.append(time.monotonic())
    finally:
        h.app.engine.stats.record(plan, times[0] if times else None,
                                  times[-1] if times else None)
    return (times[0], times[-1]) if times else (None, None)


def hang(h: Handler) -> None:
    """Send nothing more but keep the connection open until the client
    closes it (or the server stops); then give the response up."""
    try:
        h.wfile.flush()
    except OSError:
        raise Abandoned() from None
    sock = h.connection
    while not h.app.stopping.is_set():
        try:
            readable, _, _ = select.select([sock], [], [], 0.25)
            if readable and not sock.recv(1, socket.MSG_PEEK):
                break  # EOF: the client gave up
        except (OSError, ValueError):
            break
        if readable:
            time.sleep(0.25)  # the client sent more; it is still there
    raise Abandoned()
