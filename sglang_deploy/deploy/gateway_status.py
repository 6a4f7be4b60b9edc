"""`sglang-deploy status`'s read of the SGLang Model Gateways (sglang-router 0.3.2): one
``GET /workers`` per gateway, from the controller, every gateway at once and beside the SSH reads
of the serving hosts, each bounded by a timeout. Nothing is changed on a gateway.

The request and the checks of its answer are the deploy's client's
(``sglang_deploy/deploy/gateway_client.py``: size-bounded, the entries' types and URLs checked,
errors naming the gateway's URL and never its API key); what the list means, for the gateway's
own row and for each worker's, is decided in ``sglang_deploy/status/`` (``gateway_row``,
``add_gateways``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import gevent
import httpx

from sglang_deploy.deploy.gateway_client import Gateway, GatewayError, normalize_url
from sglang_deploy.status import GATEWAY_READ_TIMEOUT_S, GatewayRead, ListedWorker
from sglang_deploy.status.gateways import every_router
from sglang_deploy.untrusted import Scrubber, printable, redact_url, url_secrets


@dataclass(frozen=True)
class GatewayTarget:
    """Where a gateway is read and the API key its admin API wants (None: it has none)."""

    url: str
    api_key: str | None = field(default=None, repr=False)
    routers: tuple[str, ...] = ()  # a balanced gateway's routers, each read too (status.every_router)


def read_gateway(url: str, api_key: str | None, timeout_s: float = GATEWAY_READ_TIMEOUT_S,
                 *, transport: httpx.BaseTransport | None = None) -> GatewayRead:
    """The gateway's worker list (``GET /workers``, one request), or why it could not be read: it
    does not answer, it refuses the key (401), or its answer is not a worker list."""
    shown = redact_url(url)
    try:
        entries = Gateway(url, api_key, timeout_s, transport=transport).workers()
    except GatewayError as exc:
        return GatewayRead(url=shown, error=str(exc))
    return GatewayRead(url=shown, listed=tuple(ListedWorker(url=normalize_url(w.url), healthy=w.healthy)
                                               for w in entries))


class GatewayReads:
    """Every target's :func:`read_gateway` at once, one greenlet each: pyinfra's CLI package patches
    gevent into the standard library on import (``sglang_deploy/deploy/status.py`` imports it), so
    the requests wait on their sockets beside the SSH reads instead of one after another. Started
    on construction; :meth:`results` waits for them, at most twice the timeout and 5 s."""

    def __init__(self, targets: Mapping[str, GatewayTarget], timeout_s: float = GATEWAY_READ_TIMEOUT_S,
                 *, transport: httpx.BaseTransport | None = None):
        self.timeout_s = timeout_s
        self._shown = {name: redact_url(t.url) for name, t in targets.items()}
        self._greenlets = {name: gevent.spawn(_read, t, timeout_s, transport) for name, t in targets.items()}

    def results(self) -> dict[str, GatewayRead]:
        gevent.joinall(list(self._greenlets.values()), timeout=2 * self.timeout_s + 5)
        out = {}
        for name, greenlet in self._greenlets.items():
            value = greenlet.value if greenlet.ready() else None
            if isinstance(value, GatewayRead):
                out[name] = value
            else:
                greenlet.kill(block=False)
                out[name] = GatewayRead(url=self._shown[name], error=f"gateway {self._shown[name]}: list workers: "
                                                                     f"no answer within {2 * self.timeout_s + 5:g} s")
        return out


def _read(target: GatewayTarget, timeout_s: float, transport: httpx.BaseTransport | None) -> GatewayRead:
    try:
        front = read_gateway(target.url, target.api_key, timeout_s, transport=transport)
        return every_router(front, [read_gateway(url, target.api_key, timeout_s, transport=transport)
                                    for url in target.routers] if front.error is None else [])
    except Exception as exc:  # noqa: BLE001 -- one gateway's failure is its row, not a traceback
        shown = redact_url(target.url)
        detail = printable(Scrubber([target.api_key, *url_secrets(target.url)]).text(str(exc)))[:200]
        return GatewayRead(url=shown, error=f"gateway {shown}: list workers: {type(exc).__name__}: {detail}")
