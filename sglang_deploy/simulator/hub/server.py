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
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Mapping
from urllib.parse import parse_qs, unquote, urlsplit

from sglang_deploy.simulator.hub.repos import HubRepo

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class HubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, repos: Mapping[str, HubRepo], port: int = 0, tokens: tuple[str, ...] = (),
                 rate_bytes_s: float | None = None):
        self.repos = dict(repos)
        # Throttle of every file body, bytes/s per request (None: as fast as the socket goes); a
        # slow mirror. Tests may change it while the server runs.
        self.rate_bytes_s = rate_bytes_s
        self.bytes_sent = 0
        self.tokens = set(tokens)            # tokens granted access to the gated repos
        self.requests: list[tuple[str, str]] = []   # (method, path) seen, for tests
        self._thread: threading.Thread | None = None
        super().__init__(("127.0.0.1", port), _Handler)

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
        body = {"_id": repo.commit[:24], "id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": False,
                "gated": "manual" if repo.gated else False, "disabled": False, "tags": ["transformers", "safetensors"],
                "library_name": "transformers", "siblings": siblings}
        self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json; charset=utf-8"})

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
        f = repo.files.get(filename)
        if f is None:
            self._error(404, "EntryNotFound", f"{filename} does not exist on \"{revision}\"")
            return
        start, end, status = 0, f.size, 200
        rng = _RANGE.match(self.headers.get("Range", "").strip())
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
        headers = {"X-Repo-Commit": commit, "ETag": f'"{f.etag()}"', "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream", "Content-Length": str(end - start)}
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{f.size}"
        self._send(status, None, headers)
        if not head:
            self._body(f, start, end)

    def _body(self, f, start: int, end: int) -> None:
        t0, sent = time.monotonic(), 0
        step = 1 << 22 if not self.server.rate_bytes_s else max(1 << 14, min(1 << 20, int(self.server.rate_bytes_s / 10)))
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
