"""One overall deadline for a blocking exchange with a peer that may be hostile (core: standard
library alone).

An HTTP client's timeouts bound each socket operation, not the exchange: a peer that sends its
status line and then one header line a second, or a body one byte at a time, keeps every read
under its timeout and the exchange alive for as long as it likes. :func:`within` runs the
exchange in a daemon thread and waits for it at most ``seconds``: past that it calls ``abort``
(which closes what the exchange reads from, so that the thread ends) and raises
:class:`DeadlinePassed`; the caller gets its answer, or the error, by the deadline either way.
Under gevent's patching (pyinfra's CLI) the thread is a greenlet and the wait cooperative.
"""

from __future__ import annotations

import threading
from typing import Callable, TypeVar

T = TypeVar("T")


class DeadlinePassed(Exception):
    """The exchange did not end within its deadline."""


def within(seconds: float, exchange: Callable[[], T], abort: Callable[[], object] = lambda: None) -> T:
    """``exchange()``'s result, or its exception, if it ends within ``seconds``; else ``abort()``
    is called and DeadlinePassed raised (the thread is left to end on its own)."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = exchange()
        except BaseException as exc:  # noqa: BLE001 -- handed to the caller as it is
            box["error"] = exc

    thread = threading.Thread(target=run, name="deadline", daemon=True)
    thread.start()
    thread.join(max(0.0, seconds))
    if thread.is_alive():
        try:
            abort()
        except Exception:  # noqa: BLE001 -- aborting is best effort; the deadline stands
            pass
        raise DeadlinePassed(f"no whole answer within {seconds:g} s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]
