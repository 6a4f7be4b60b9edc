"""A stand-in for the Hugging Face Hub's HTTP API: only the endpoints sglang-deploy uses.

- ``GET /api/models/{repo_id}`` and ``GET /api/models/{repo_id}/revision/{revision}``:
  the model info of huggingface_hub's ``HfApi.model_info`` (hf_api.py): id, modelId,
  sha, gated, tags, siblings [{rfilename}], and with ``?blobs=true`` each sibling's
  size, blobId and, for an LFS file, lfs {sha256, size, pointerSize}.
- ``GET`` / ``HEAD /{repo_id}/resolve/{revision}/{filename}`` (constants.py
  HUGGINGFACE_CO_URL_TEMPLATE): the file, with ``X-Repo-Commit``, ``ETag`` (the git
  blob sha1, or the sha256 of an LFS file, as file_download.get_hf_file_metadata reads
  it), ``Content-Length``, ``Accept-Ranges``; a ``Range: bytes=a-b`` answers 206. File
  bodies go out at ``rate_bytes_s`` when set (a slow mirror).

Errors carry the Hub's ``X-Error-Code`` (utils/_http.py hf_raise_for_status):
``RepoNotFound`` (401 without a token, 404 with one), ``RevisionNotFound`` (404),
``EntryNotFound`` (404), ``GatedRepo`` (a gated repo's files: 401 without a token, 403
with a token that was not granted). Model info stays public for gated repos, as on the Hub.

HOSTILE mode (a hostile mirror, for tests of what the host-side stager does with it): set
``server.hostile`` (constructor ``hostile=``, or on a running server) to one name of ``HOSTILE``
or a collection of them; ``None`` or empty is the well-behaved Hub.

- ``traversal``: the listing adds ``../../hostile-x`` and ``a/../../hostile-b``;
  ``absolute``: ``/tmp/sglang-hostile-absolute``; ``control-names``: a name with an escape
  sequence and a line break, and one with backslashes; ``bad-hashes``: a blob id and an LFS
  sha256 holding ``..`` (names in ``server.hostile_names`` replace the default ones of these
  modes). Every such entry is listed with the size and blob id of ``HOSTILE_PAYLOAD``, and
  any file name the repo does not hold is served as that payload, so a stager that trusts
  the names would write it.
- ``listing``: ``server.hostile_siblings`` (a list of raw sibling dicts) is the whole listing;
  a file name in ``server.hostile_files`` ({name: bytes}) is served with those bytes.
- ``long-body``: a file body carries ``hostile_extra_bytes`` more bytes than listed (the
  Content-Length says so too).
- ``trickle`` / ``trickle-info``: a file body / the model info goes out one byte every
  ``hostile_delay_s`` seconds.
- ``ignore-range``: a Range request is answered 200 with the whole file.
- ``huge-json``: the model info is ``hostile_json_bytes`` of valid JSON (a padding string);
  ``deep-json``: its siblings nest ``hostile_json_depth`` lists deep.
- ``echo-token``: every file and model-info request is answered 401 with the request's
  Authorization header echoed in the reason phrase, the X-Error-Message header and the body.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterable, Mapping
from urllib.parse import parse_qs, unquote, urlsplit

from sglang_deploy.simulator.hub.repos import HubFile, HubRepo, git_blob_sha1

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
HOSTILE = frozenset({"traversal", "absolute", "control-names", "bad-hashes", "listing", "long-body", "trickle",
                     "trickle-info", "ignore-range", "huge-json", "deep-json", "echo-token"})
#: What a hostile listing's extra entries describe, and what an unknown file name is served as.
HOSTILE_PAYLOAD = b"written by a hostile mirror\n"
_HOSTILE_NAMES = {"traversal": ("../../hostile-x", "a/../../hostile-b"),
                  "absolute": ("/tmp/sglang-hostile-absolute",),
                  "control-names": ("evil\x1b[2J\nname.json", "dir\\..\\..\\hostile.json")}


class HubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, repos: Mapping[str, HubRepo], port: int = 0, tokens: tuple[str, ...] = (),
                 rate_bytes_s: float | None = None, hostile: str | Iterable[str] | None = None):
        self.repos = dict(repos)
        # A hostile mirror (see the module docstring); tests may change these while the server runs.
        self.hostile = hostile
        self.hostile_names: list[str] = []
        self.hostile_siblings: list = []
        self.hostile_files: dict[str, bytes] = {}
        self.hostile_delay_s = 2.0
        self.hostile_extra_bytes = 1 << 20
        self.hostile_json_bytes = 80 * 2 ** 20
        self.hostile_json_depth = 100_000
        # Throttle of every file body, bytes/s per request (None: as fast as the socket goes); a
        # slow mirror. Tests may change it while the server runs.
        self.rate_bytes_s = rate_bytes_s
        self.bytes_sent = 0
        self.tokens = set(tokens)            # tokens granted access to the gated repos
        self.requests: list[tuple[str, str]] = []   # (method, path) seen, for tests
        self._thread: threading.Thread | None = None
        super().__init__(("127.0.0.1", port), _Handler)

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that gives up on a trickle (its deadline) is expected: no traceback for it.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)

    @property
    def hostile(self) -> frozenset[str]:
        return self._hostile

    @hostile.setter
    def hostile(self, value: str | Iterable[str] | None) -> None:
        modes = frozenset([value] if isinstance(value, str) else value or ())
        unknown = sorted(modes - HOSTILE)
        if unknown:
            raise ValueError(f"unknown hostile mode(s) {unknown}; known: {sorted(HOSTILE)}")
        self._hostile = modes

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> "HubServer":
        self._thread = threading.Thread(target=self.serve_forever, name="hub-stand-in", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    server: HubServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True   # headers and body go out in separate writes: no 40 ms delayed-ACK stall

    def log_message(self, *args: object) -> None:   # quiet: tests read server.requests
        pass

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)

    def _route(self, head: bool) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        self.server.requests.append((self.command, path))
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+?)(?:/revision/(.+))?", path)
        if m and not head:
            return self._model_info(m.group(1), m.group(2) or "main", parse_qs(parts.query))
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            return self._resolve(m.group(1), m.group(2), m.group(3), head)
        self._error(404, None, "Not Found")

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return auth[7:] if auth.startswith("Bearer ") else None

    def _repo(self, repo_id: str) -> HubRepo | None:
        repo = self.server.repos.get(repo_id)
        if repo is None:
            status = 404 if self._token() else 401
            self._error(status, "RepoNotFound", "Repository Not Found")
        return repo

    def _commit(self, repo: HubRepo, revision: str) -> str | None:
        commit = repo.resolve(revision)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    def _model_info(self, repo_id: str, revision: str, query: dict) -> None:
        hostile = self.server.hostile
        if "echo-token" in hostile:
            return self._echo_token()
        repo = self._repo(repo_id)
        if repo is None or self._commit(repo, revision) is None:
            return
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for name, f in sorted(repo.files.items()):
            entry: dict = {"rfilename": name}
            if blobs:
                entry.update(blobId=f.blob_id(), size=f.size)
                if f.lfs:
                    entry["lfs"] = {"sha256": f.etag(), "size": f.size, "pointerSize": len(f.lfs_pointer())}
            siblings.append(entry)
        siblings += self._hostile_siblings()
        if "listing" in hostile:
            siblings = list(self.server.hostile_siblings)
        body = {"_id": repo.commit[:24], "id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": False,
                "gated": "manual" if repo.gated else False, "disabled": False, "tags": ["transformers", "safetensors"],
                "library_name": "transformers", "siblings": siblings}
        headers = {"Content-Type": "application/json; charset=utf-8"}
        if "deep-json" in hostile:
            depth = self.server.hostile_json_depth
            raw = json.dumps({**body, "siblings": "@"}).encode()
            return self._send(200, raw.replace(b'"@"', b"[" * depth + b"]" * depth), headers)
        if "huge-json" in hostile:
            head, tail = json.dumps({**body, "padding": "@"}).encode().split(b'"@"')
            pad = max(0, self.server.hostile_json_bytes - len(head) - len(tail) - 2)
            self._send(200, None, {**headers, "Content-Length": str(len(head) + pad + 2 + len(tail))})
            self.wfile.write(head + b'"')
            for start in range(0, pad, 1 << 20):
                self.wfile.write(b"a" * min(1 << 20, pad - start))
            self.wfile.write(b'"' + tail)
            return None
        raw = json.dumps(body).encode()
        if "trickle-info" in hostile:
            self._send(200, None, {**headers, "Content-Length": str(len(raw))})
            return self._trickle(raw)
        self._send(200, raw, headers)
        return None

    def _hostile_siblings(self) -> list[dict]:
        """The extra entries of the name and hash modes, each describing HOSTILE_PAYLOAD."""
        size, blob_id = len(HOSTILE_PAYLOAD), git_blob_sha1(HOSTILE_PAYLOAD)
        out = []
        for mode in ("traversal", "absolute", "control-names"):
            if mode in self.server.hostile:
                for name in self.server.hostile_names or _HOSTILE_NAMES[mode]:
                    out.append({"rfilename": name, "blobId": blob_id, "size": size})
        if "bad-hashes" in self.server.hostile:
            out.append({"rfilename": "hostile-blob.json", "blobId": "../../../hostile-blob", "size": size})
            out.append({"rfilename": "hostile-lfs.safetensors", "blobId": blob_id, "size": size,
                        "lfs": {"sha256": "../../../../hostile-sha256", "size": size, "pointerSize": 130}})
        return out

    def _echo_token(self) -> None:
        echoed = self.headers.get("Authorization", "")
        body = json.dumps({"error": f"token {echoed} is not valid"}).encode()
        self.send_response(401, f"Unauthorized {echoed}")
        for key, value in {"Content-Type": "application/json", "X-Error-Message": f"bad token {echoed}",
                           "Content-Length": str(len(body))}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _trickle(self, data: bytes) -> None:
        for i in range(len(data)):
            self.wfile.write(data[i:i + 1])
            self.wfile.flush()
            time.sleep(self.server.hostile_delay_s)

    def _resolve(self, repo_id: str, revision: str, filename: str, head: bool) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        if repo.gated and self._token() not in self.server.tokens:
            status = 403 if self._token() else 401
            self._error(status, "GatedRepo", f"Access to model {repo_id} is restricted.")
            return
        commit = self._commit(repo, revision)
        if commit is None:
            return
        hostile = self.server.hostile
        if "echo-token" in hostile:
            return self._echo_token()
        f = repo.files.get(filename)
        if "listing" in hostile and filename in self.server.hostile_files:
            f = HubFile.from_bytes(self.server.hostile_files[filename], lfs=False)
        if f is None and hostile & {"traversal", "absolute", "control-names", "bad-hashes", "listing"}:
            f = HubFile.from_bytes(HOSTILE_PAYLOAD, lfs=False)
        if f is None:
            self._error(404, "EntryNotFound", f"{filename} does not exist on \"{revision}\"")
            return
        start, end, status = 0, f.size, 200
        rng = None if "ignore-range" in hostile else _RANGE.match(self.headers.get("Range", "").strip())
        if rng and (rng.group(1) or rng.group(2)):
            if rng.group(1):
                start, end = int(rng.group(1)), (int(rng.group(2)) + 1 if rng.group(2) else f.size)
            else:
                start, end = max(0, f.size - int(rng.group(2))), f.size
            end = min(end, f.size)
            if start >= f.size or start >= end:
                self._send(416, b"", {"Content-Range": f"bytes */{f.size}"})
                return
            status = 206
        extra = self.server.hostile_extra_bytes if "long-body" in hostile else 0
        headers = {"X-Repo-Commit": commit, "ETag": f'"{f.etag()}"', "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream", "Content-Length": str(end - start + extra)}
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{f.size}"
        self._send(status, None, headers)
        if head:
            return None
        if "trickle" in hostile:
            return self._trickle(f.read(start, end))
        self._body(f, start, end)
        if extra:
            self.wfile.write(b"\xee" * extra)
        return None

    def _body(self, f, start: int, end: int) -> None:
        t0, sent = time.monotonic(), 0
        rate = self.server.rate_bytes_s
        step = 1 << 22 if not rate else max(1 << 14, min(1 << 20, int(rate / 10)))
        for pos in range(start, end, step):
            chunk = f.read(pos, min(end, pos + step))
            self.wfile.write(chunk)
            sent += len(chunk)
            self.server.bytes_sent += len(chunk)
            rate = self.server.rate_bytes_s
            if rate:
                time.sleep(max(0.0, t0 + sent / rate - time.monotonic()))

    def _error(self, status: int, code: str | None, message: str) -> None:
        headers = {"Content-Type": "application/json; charset=utf-8", "X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(status, json.dumps({"error": message}).encode(), headers)

    def _send(self, status: int, body: bytes | None, headers: dict[str, str]) -> None:
        self.send_response(status)
        if body is not None and "Content-Length" not in headers:
            headers["Content-Length"] = str(len(body))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if body and self.command != "HEAD":  # noqa: SIM102
            self.wfile.write(body)
