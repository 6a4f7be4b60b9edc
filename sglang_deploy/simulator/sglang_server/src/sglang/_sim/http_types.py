"""What the endpoints see of a request handler, and what the HTTP server sees of the app:
the two sides of ``httpd.py`` as protocols, so that neither side imports the other."""

from __future__ import annotations

import socket
from typing import Any, BinaryIO, Callable, Dict, Optional, Protocol, Tuple


class Handler(Protocol):
    """``httpd.Handler`` as the endpoints use it."""

    app: Any  # the running App
    body: bytes  # the request body
    wfile: BinaryIO
    connection: socket.socket

    def send_response(self, code: int, message: Optional[str] = None) -> None: ...
    def send_header(self, keyword: str, value: str) -> None: ...
    def end_headers(self) -> None: ...
    def send_json(self, status: int, obj: Any, headers: Optional[Dict[str, str]] = None) -> None: ...
    def send_empty(self, status: int) -> None: ...
    def send_error_json(self, status: int, message: str, kind: str = "BadRequestError") -> None: ...


#: path -> (methods, endpoint)
Route = Tuple[Tuple[str, ...], Callable[[Handler], None]]


class RoutedApp(Protocol):
    """``app.App`` as the HTTP server uses it."""

    def routes(self) -> Dict[str, Route]: ...
    def intercept(self, handler: Handler, method: str, path: str) -> bool: ...
