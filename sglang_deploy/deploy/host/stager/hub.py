"""The weight stager's HTTP, every exchange under an overall deadline: the listing
``--allowance-s``, a file its size at ``--min-rate`` bytes/s plus ``--allowance-s``. A body longer
than listed is cut at the listed size (never written past it) and then verified; a 200 answer to
a Range request starts the file over. Redirects: at most 5, http/https only, the token only to
the endpoint's own host. Standard library only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from sglang_deploy.deploy.host.stager.inputs import MAX_LISTING, siblings_files
from sglang_deploy.deploy.host.stager.messages import Refused, say, shown
from sglang_deploy.deploy.host.stager.store import CHUNK, write_all

MAX_REDIRECTS = 5


class Watch:
    """One exchange's deadline: when it passes, every socket the exchange opened is shut down, so
    no trickle (of headers or body) outlives it; reads also time out at the time left."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.socks: list[socket.socket] = []
        self.expired = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def _expire(self) -> None:
        self.expired = True
        for sock in self.socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0 or self.expired:
            raise TimeoutError(f"no answer within the {self.seconds:.0f} s deadline")
        return left

    def __enter__(self) -> "Watch":
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def _watched(base: type, watch: Watch) -> type:
    class Connection(base):  # type: ignore[misc, valid-type]
        def connect(self) -> None:
            self.timeout = watch.left()
            super().connect()
            watch.socks.append(self.sock)
    return Connection


def _handlers(watch: Watch) -> list[urllib.request.BaseHandler]:
    """urllib's http and https handlers, their connections under ``watch``."""
    class Http(urllib.request.HTTPHandler):
        def http_open(self, req):  # noqa: ANN001
            return self.do_open(_watched(http.client.HTTPConnection, watch), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req):  # noqa: ANN001
            return self.do_open(_watched(http.client.HTTPSConnection, watch), req, context=self._context)

    return [Http(), Https()]


class _Redirect(urllib.request.HTTPRedirectHandler):
    """At most MAX_REDIRECTS, http/https only; the Authorization header only to the endpoint's host
    (the Hub sends LFS files to a CDN, which must not see the token)."""
    max_redirections = MAX_REDIRECTS

    def __init__(self, origin: str, auth: str | None):
        super().__init__()
        self.origin, self.auth = origin, auth

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001
        parts = urllib.parse.urlsplit(urllib.parse.urljoin(req.full_url, newurl))
        if parts.scheme not in ("http", "https"):
            raise urllib.error.HTTPError(req.full_url, code, "a redirect to a scheme other than http(s)", headers, fp)
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and self.auth and f"{parts.scheme}://{parts.netloc}" == self.origin:
            new.add_unredirected_header("Authorization", self.auth)
        return new


class Client:
    def __init__(self, endpoint: str, auth: str | None):
        self.endpoint, self.auth = endpoint, auth
        parts = urllib.parse.urlsplit(endpoint)
        self.origin = f"{parts.scheme}://{parts.netloc}"

    def open(self, url: str, watch: Watch, headers: dict[str, str] | None = None):
        opener = urllib.request.build_opener(urllib.request.ProxyHandler(), _Redirect(self.origin, self.auth),
                                             *_handlers(watch))
        req = urllib.request.Request(url, headers={"User-Agent": "sglang-deploy-stager", **(headers or {})})
        if self.auth:
            req.add_unredirected_header("Authorization", self.auth)
        return opener.open(req, timeout=watch.left())


def read_block(resp, watch: Watch, size: int) -> bytes:  # noqa: ANN001
    """At most ``size`` bytes, one socket read, which times out at the deadline."""
    sock = watch.socks[-1] if watch.socks else None
    if sock is not None:
        sock.settimeout(watch.left())
    try:
        block = resp.read1(size)
    except (OSError, http.client.HTTPException, ValueError):
        watch.left()
        raise
    if not block:
        watch.left()
    return block


def http_problem(exc: BaseException) -> str:
    """One line for a failed exchange; only the status and the Hub's error code of an HTTP error
    (its reason and body are the server's text and may echo anything)."""
    if isinstance(exc, urllib.error.HTTPError):
        code = exc.headers.get("X-Error-Code", "") if exc.headers else ""
        return f"HTTP {exc.code}" + (f" ({code})" if re.fullmatch(r"[A-Za-z]{1,40}", code or "") else "")
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def fetch_listing(client: Client, repo: str, commit: str, seconds: float, where: str) -> list[dict]:
    """The model info with file metadata, as huggingface_hub HfApi.model_info(files_metadata=True)
    requests it (hf_api.py: ``/api/models/{repo}/revision/{revision}`` with ``blobs=True``)."""
    url = f"{client.endpoint}/api/models/{repo}/revision/{commit}?blobs=true"
    chunks, total = [], 0
    try:
        with Watch(seconds) as watch, client.open(url, watch) as resp:
            while True:
                block = read_block(resp, watch, min(CHUNK, MAX_LISTING + 1 - total))
                if not block:
                    break
                chunks.append(block)
                total += len(block)
                if total > MAX_LISTING:
                    raise Refused(5, f"{where}: the model info is larger than {MAX_LISTING} bytes; nothing was written")
    except Refused:
        raise
    except Exception as exc:  # noqa: BLE001 -- any transport failure is one line
        raise Refused(5, f"{where}: cannot list the files: {http_problem(exc)}") from None

    def no_constant(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    try:
        info = json.loads(b"".join(chunks), parse_constant=no_constant)
    except RecursionError:
        raise Refused(5, f"{where}: the model info nests too deep; nothing was written") from None
    except ValueError as exc:
        raise Refused(5, f"{where}: the model info is not JSON ({str(exc).splitlines()[0][:80]})") from None
    return siblings_files(info, commit, where)


def download(client: Client, url: str, fd: int, size: int, args: argparse.Namespace, name: str,
             stats: dict) -> None:
    """``url`` into the open partial file ``fd``, resuming from what it holds (HTTP Range); never
    more than ``size`` bytes are written (a longer body is cut, the hash decides)."""
    have = os.fstat(fd).st_size
    if have > size:
        os.ftruncate(fd, 0)
        have = 0
    if have == size:
        return
    seconds = size / args.min_rate + args.allowance_s
    with Watch(seconds) as watch, client.open(url, watch, {"Range": f"bytes={have}-"} if have else None) as resp:
        if have and resp.status != 206:
            say(f"the server ignored the Range request for {name}: starting it over")
            os.ftruncate(fd, 0)
            have = 0
        elif have:
            got = re.match(r"bytes (\d+)-", resp.headers.get("Content-Range", ""))
            if not got or int(got.group(1)) != have:
                raise ValueError(f"the server answered the Range request from byte "
                                 f"{shown(got.group(1) if got else '?')}, not {have}")
            say(f"resuming {name} at byte {have}")
            stats["resumed"] += have
        os.lseek(fd, have, os.SEEK_SET)
        left = size - have
        while left > 0:
            block = read_block(resp, watch, min(CHUNK, left))
            if not block:
                break
            write_all(fd, block)
            left -= len(block)
            stats["downloaded"] += len(block)
