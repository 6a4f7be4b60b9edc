"""Put one model snapshot into the host's model store, verified, before the old server stops.

Run on the host as root with the SGLang venv's python; the script needs only the standard
library. The store is a Hugging Face cache directory (huggingface_hub/file_download.py:
``blobs/<etag>``, ``snapshots/<commit>/<file>`` a relative symlink to the blob,
``refs/<revision>``); a snapshot is marked complete (a JSON marker) only after every file was
checked: an LFS file against its sha256, any other file (config.json, the tokenizer, code)
against its git blob id (sha1 of ``b"blob <size>\\0"`` + content, git's object format). A
download is resumed from its partial file with an HTTP Range request.

What the Hub, a mirror or ``--files-json`` sends is data, never a path: every file name, blob
id, sha256 and size is checked before the first byte is written (a relative POSIX path without
``.``/``..``/empty segments, control characters or backslashes; 40/64 lowercase hex; bounded
sizes and counts; no duplicates); anything else stops the host with one line naming the entry.
The store is changed only through directories the script opened without following links, so a
link planted in the store leads nowhere outside it; only what this run created gets ``--owner``.
Every HTTP exchange has an overall deadline: the listing ``--allowance-s``, a file its size at
``--min-rate`` bytes/s plus ``--allowance-s``. A body longer than listed is cut at the listed
size (never written past it) and then verified; a 200 answer to a Range request starts the file
over. Redirects: at most 5, http/https only, the token only to the endpoint's own host.

``--prune`` removes old snapshots (never one a staged revision serves) and unlinked blobs.

Exit codes: 0 ready, 1 an unexpected local error (one line), 2 a bad argument or env file
(HF_TOKEN not one line of visible ASCII, HF_ENDPOINT not http/https), 3 not enough free disk
(one line, nothing changed), 4 a file failed verification twice, 5 the Hub or the file list
failed (unreachable, an HTTP error, a deadline passed, a listing entry refused: nothing
written), 6 a local directory (source host) is not a checkpoint, 7 a file the controller
uploads is incomplete, 8 the store holds something this script did not make where it would
write (a link, a folder, a hard-linked file): nothing outside the store was touched. The token
and the endpoint are read from the revision's root-only env file (``--env-file``), never from
argv; neither the token nor a password in HF_ENDPOINT is ever printed.
"""

from __future__ import annotations

import argparse
import errno
import glob
import grp
import hashlib
import http.client
import json
import os
import pwd
import re
import shlex
import shutil
import socket
import stat
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import NoReturn

PASSED_ENV = ("HF_ENDPOINT", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
DEFAULT_ENDPOINT = "https://huggingface.co"  # huggingface_hub/constants.py ENDPOINT
CHUNK = 1 << 20
PARTIAL = ".sglang-deploy-partial"
MARKS = ".sglang-deploy-complete"
MAX_FILES = 100_000
MAX_PATH = 1024          # bytes of a file name (UTF-8)
MAX_SEGMENT = 255        # bytes of one of its segments (a file system's name limit)
MAX_SIZE = 1 << 44       # 16 TiB: no single checkpoint file comes near
MAX_LISTING = 64 << 20   # the model-info answer
MAX_REDIRECTS = 5
HEX40, HEX64 = re.compile(r"[0-9a-f]{40}\Z"), re.compile(r"[0-9a-f]{64}\Z")
# huggingface_hub/utils/_validators.py REPO_ID_REGEX (ASCII), without "--" or ".." (validate_repo_id)
REPO_ID = re.compile(r"(?:[A-Za-z0-9_.-]{1,96}/)?[A-Za-z0-9_.-]{1,96}\Z")
# control characters (C0, DEL, C1) and bidirectional overrides: never in a name, never printed
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
SECRETS: list[str] = []  # the token and any HF_ENDPOINT credentials: masked in every line printed


class Refused(Exception):
    """Stops the host with one line; ``code`` is the exit status."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def scrub(text: str) -> str:
    """``text`` safe to print: one line, no control characters, no secret."""
    for secret in sorted(SECRETS, key=len, reverse=True):
        for form in {secret, urllib.parse.quote(secret, safe="")}:
            text = text.replace(form, "***")
    return CONTROLS.sub(" ", text)


def shown(name: object) -> str:
    """A name from a listing as it may be printed: escaped, never raw, bounded."""
    text = name if isinstance(name, str) else repr(name)
    text = text.encode("unicode_escape", "backslashreplace").decode("ascii")
    return text if len(text) <= 160 else text[:160] + "..."


def say(message: str) -> None:
    print(scrub(f"weights: {message}"), flush=True)


def fail(code: int, message: str) -> NoReturn:
    print(scrub(message), file=sys.stderr, flush=True)
    sys.exit(code)


# ---- what comes from outside ------------------------------------------------------------------

def check_name(name: object) -> str | None:
    """None when ``name`` is a relative POSIX path the snapshot can hold, else what is wrong."""
    if not isinstance(name, str) or not name:
        return "not a non-empty string"
    if CONTROLS.search(name) or "\\" in name:
        return "a control character or backslash in the name"
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return "not UTF-8"
    if len(encoded) > MAX_PATH:
        return f"longer than {MAX_PATH} bytes"
    if name.startswith("/"):
        return "an absolute path"
    for segment in name.split("/"):
        if segment in ("", ".", ".."):
            return "an empty, '.' or '..' segment"
        if len(segment.encode("utf-8")) > MAX_SEGMENT:
            return f"a segment longer than {MAX_SEGMENT} bytes"
    return None


def check_size(size: object) -> bool:
    return type(size) is int and 0 <= size <= MAX_SIZE


def check_files(entries: object, where: str) -> list[dict]:
    """Raw listing entries -> checked ``{"path", "size", "sha256", "blob"}``; the first bad one stops
    the host (exit 5) before anything is written. ``blob`` is the file's name under ``blobs/``:
    the LFS sha256, else the git blob id (40 hex, verified as git hashes the content)."""
    if not isinstance(entries, list):
        raise Refused(5, f"{where}: the file list is not a list")
    if len(entries) > MAX_FILES:
        raise Refused(5, f"{where}: {len(entries)} files listed, more than the {MAX_FILES} accepted")
    files: list[dict] = []
    paths: set[str] = set()
    for entry in entries:
        name = entry.get("path") if isinstance(entry, dict) else entry
        problem = None
        if not isinstance(entry, dict):
            problem = "not an object"
        elif (problem := check_name(name)) is None:
            sha, blob = entry.get("sha256"), entry.get("blob")
            if not check_size(entry.get("size")):
                problem = f"size {shown(entry.get('size'))} is not an integer in 0..{MAX_SIZE}"
            elif sha is not None and not (isinstance(sha, str) and HEX64.match(sha)):
                problem = f"sha256 {shown(sha)} is not 64 lowercase hex digits"
            elif sha is not None and blob != sha:
                problem = f"blob {shown(blob)} is not its sha256"
            elif sha is None and not (isinstance(blob, str) and HEX40.match(blob)):
                problem = f"blob id {shown(blob)} is not 40 lowercase hex digits"
            elif name in paths:
                problem = "listed twice"
        if problem or not isinstance(name, str):  # a name check_name passed is a str
            raise Refused(5, f"{where}: listing entry {shown(name)} refused: {problem}; nothing was written")
        paths.add(name)
        files.append({"path": name, "size": entry["size"], "sha256": sha, "blob": blob})
    dirs = {p.rsplit("/", i)[0] for p in paths for i in range(1, p.count("/") + 1)}
    clash = sorted(paths & dirs)
    if clash:
        raise Refused(5, f"{where}: listing entry {shown(clash[0])} refused: both a file and a folder; nothing "
                         "was written")
    return files


def siblings_files(info: object, commit: str, where: str) -> list[dict]:
    """The model info's siblings (huggingface_hub hf_api.py ModelInfo: rfilename, size, blobId,
    lfs.sha256) as checked entries."""
    if not isinstance(info, dict) or not isinstance(info.get("siblings"), list):
        raise Refused(5, f"{where}: the model info has no list of files")
    if info.get("sha") not in (None, commit):
        raise Refused(5, f"{where}: the model info is of commit {shown(info.get('sha'))}, not {commit}")
    raw = []
    for sib in info["siblings"][:MAX_FILES + 1]:
        if not isinstance(sib, dict):
            raw.append(sib)
            continue
        lfs = sib.get("lfs")
        sha = lfs.get("sha256") if isinstance(lfs, dict) else (lfs if lfs is not None else None)
        raw.append({"path": sib.get("rfilename"), "size": sib.get("size"), "sha256": sha,
                    "blob": sha if sha is not None else sib.get("blobId")})
    return check_files(raw, where)


def check_args(args: argparse.Namespace) -> None:
    if args.repo is None or not REPO_ID.match(args.repo) or "--" in args.repo or ".." in args.repo or \
            any(seg in (".", "..") or seg.startswith((".", "-")) for seg in args.repo.split("/")):
        fail(2, f"{args.host}: --repo {shown(args.repo)} is not a Hub repository id (org/name)")
    if args.commit is None or not HEX40.match(args.commit):
        fail(2, f"{args.host}: --commit {shown(args.commit)} is not 40 lowercase hex digits")
    rev = args.revision or ""
    if rev and (len(rev) > 200 or CONTROLS.search(rev) or "\\" in rev or
                any(seg in ("", ".", "..") for seg in rev.split("/"))):
        fail(2, f"{args.host}: --revision {shown(rev)} is not a revision name")
    if not (args.min_rate > 0 and args.allowance_s > 0):
        fail(2, f"{args.host}: --min-rate and --allowance-s must be positive")


def check_token(token: str, host: str) -> str:
    """A token is one line of visible ASCII (it travels in an HTTP header); never quoted."""
    bad = [i for i, ch in enumerate(token) if not 0x21 <= ord(ch) <= 0x7E]
    if bad:
        fail(2, f"{host}: HF_TOKEN in the env file holds {len(bad)} character(s) that are not visible ASCII "
                f"(first at position {bad[0]}); an HTTP header cannot carry it")
    return token


def split_endpoint(url: str, host: str) -> tuple[str, str | None]:
    """HF_ENDPOINT without its credentials (masked from now on), and those credentials."""
    parts = urllib.parse.urlsplit(url.rstrip("/"))
    netloc = parts.netloc
    userinfo, _, hostport = netloc.rpartition("@")
    if userinfo:
        SECRETS.extend(s for s in {userinfo, urllib.parse.unquote(userinfo), *userinfo.split(":", 1)} if len(s) >= 3)
    if parts.scheme not in ("http", "https") or not hostport or CONTROLS.search(url):
        fail(2, f"{host}: HF_ENDPOINT {shown(scrub(url))} is not an http(s) URL")
    return urllib.parse.urlunsplit((parts.scheme, hostport, parts.path, "", "")), userinfo or None


# ---- HTTP with an overall deadline ------------------------------------------------------------

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
            _write_all(fd, block)
            left -= len(block)
            stats["downloaded"] += len(block)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# ---- the store, reached only through directories opened without following links -----------------

class Store:
    """The repo's folders in the store, opened (made when missing) from the store root down with
    O_NOFOLLOW; what this run makes goes to ``owner``, nothing that was there changes owner."""

    def __init__(self, root: str, repo: str, commit: str, ids: tuple[int, int]):
        self.root, self.commit, self.ids = root, commit, ids
        self.name = "models--" + repo.replace("/", "--")
        self.repo_dir = os.path.join(root, self.name)
        self.blobs = os.path.join(self.repo_dir, "blobs")
        self.snapshot = os.path.join(self.repo_dir, "snapshots", commit)
        self.marker = os.path.join(self.repo_dir, MARKS, commit)
        self.fds: dict[str, int] = {}

    def open(self) -> None:
        made = not os.path.lexists(self.root)
        os.makedirs(self.root, exist_ok=True)
        root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        if made:
            os.fchown(root, *self.ids)
        repo = self.subdir(root, self.name, self.root)
        self.fds = {"repo": repo, "blobs": self.subdir(repo, "blobs", self.repo_dir),
                    "snaps": self.subdir(self.subdir(repo, "snapshots", self.repo_dir), self.commit,
                                         os.path.join(self.repo_dir, "snapshots"))}
        os.close(root)

    def subdir(self, parent: int, name: str, where: str) -> int:
        """The folder ``name`` in ``parent`` (made, and given to the owner, when missing)."""
        try:
            return os.open(name, DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            os.mkdir(name, 0o755, dir_fd=parent)
            fd = os.open(name, DIR_FLAGS, dir_fd=parent)
            os.fchown(fd, *self.ids)
            return fd
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise Refused(8, f"{os.path.join(where, name)} is a link or not a folder; the store holds "
                                 "something this script did not make; nothing outside the store was touched") from None
            raise

    def kind(self, dir_fd: int, name: str, where: str) -> str | None:
        """None (absent) or "file" (a regular file with one link); anything else is refused."""
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise Refused(8, f"{os.path.join(where, name)} is not a plain file this script wrote (a link, a folder "
                             "or a hard link); remove it and deploy again; nothing outside the store was touched")
        return "file"

    def open_file(self, dir_fd: int, name: str, where: str, write: bool = False) -> int:
        """A regular file with one link, opened without following a link (made when ``write``)."""
        flags = (os.O_RDWR | os.O_CREAT if write else os.O_RDONLY) | os.O_NOFOLLOW | os.O_NONBLOCK | \
            getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
                self.kind(dir_fd, name, where)  # raises the one line
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            self.kind(dir_fd, name, where)
        os.set_blocking(fd, True)
        return fd

    def write_file(self, dir_fd: int, name: str, data: bytes, where: str) -> None:
        """``name`` replaced, atomically, by a new file holding ``data`` (given to the owner)."""
        tmp = f".{name}.tmp"
        if self.kind(dir_fd, tmp, where):
            os.unlink(tmp, dir_fd=dir_fd)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
        try:
            _write_all(fd, data)
            os.fchown(fd, *self.ids)
        finally:
            os.close(fd)
        self.kind(dir_fd, name, where)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}


def marker_entry_problem(path: object, value: object) -> str | None:
    """None when ``path: value`` is a marker entry this script writes: ``[size, mtime_ns, blob]``
    (``blob``: the sha256 of an LFS file, else its git blob id) or, from an older script,
    ``[size, mtime_ns]``. The marker is a file in a store the service user owns: data, checked
    as a listing is (names through check_name, sizes bounded, digests 40 or 64 hex)."""
    problem = check_name(path)
    if problem is not None:
        return f"entry {shown(path)}: {problem}"
    if not isinstance(value, list) or len(value) not in (2, 3):
        return f"entry {shown(path)}: not [size, mtime_ns, blob]"
    if not check_size(value[0]) or type(value[1]) is not int:
        return f"entry {shown(path)}: a size or time that is not an integer in range"
    if len(value) == 3 and not (isinstance(value[2], str) and (HEX40.match(value[2]) or HEX64.match(value[2]))):
        return f"entry {shown(path)}: blob {shown(value[2])} is not 40 or 64 lowercase hex digits"
    return None


def read_marker(store: Store) -> dict:
    """The marker's ``files`` (path -> entry), read without following a link and size-capped;
    ValueError (one line) for anything this script would not have written."""
    try:
        repo = os.open(store.repo_dir, DIR_FLAGS)
    except OSError:
        raise ValueError("no marker") from None
    try:
        marks = _open_dir(repo, MARKS)
        if marks is None:
            raise ValueError("no marker")
        try:
            fd = os.open(store.commit, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=marks)
        except OSError:
            raise ValueError("no marker") from None
        finally:
            os.close(marks)
    finally:
        os.close(repo)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_LISTING:
            raise ValueError("the marker is not a plain file of at most 64 MiB")
        chunks, total = [], 0
        while total <= MAX_LISTING:
            block = os.read(fd, CHUNK)
            if not block:
                break
            chunks.append(block)
            total += len(block)
    finally:
        os.close(fd)

    def no_constant(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    try:
        recorded = json.loads(b"".join(chunks), parse_constant=no_constant)["files"]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise ValueError("the marker is not one this script wrote") from None
    if not isinstance(recorded, dict) or len(recorded) > MAX_FILES:
        raise ValueError("the marker is not one this script wrote")
    return recorded


def quick_check(store: Store) -> str | None:
    """None when the marker's files are all there with the size and mtime they had when verified."""
    try:
        recorded = read_marker(store)
    except ValueError as exc:
        return "no marker" if str(exc) == "no marker" else "the marker is not one this script wrote"
    for path, value in recorded.items():
        if marker_entry_problem(path, value) is not None:
            return "the marker is not one this script wrote"
        size, mtime_ns = value[:2]
        try:
            st = os.stat(os.path.join(store.snapshot, path))
        except OSError:
            return f"{shown(path)} is missing"
        if st.st_size != size or st.st_mtime_ns != mtime_ns:
            return f"{shown(path)} changed since it was verified"
    return None


VERIFY_RATE = 32 << 20  # bytes/s the default --verify deadline allows for reading and hashing (far below a disk's)


def _open_link_dir(store: Store, snaps: int, dirs: list[str]) -> int | None:
    """The snapshot's subfolder holding a file's link, every folder opened without following a link."""
    fd = os.dup(snaps)
    for d in dirs:
        sub = _open_dir(fd, d)
        os.close(fd)
        if sub is None:
            return None
        fd = sub
    return fd


def _check_one(store: Store, snaps: int, blobs: int, path: str, size: int, blob: str, deadline: float) -> str | None:
    """None when ``path`` of the snapshot is the link to its blob and the blob has ``size`` bytes and
    hashes to ``blob``; else what is wrong. TimeoutError when the deadline passes while hashing."""
    *dirs, name = path.split("/")
    fd = _open_link_dir(store, snaps, dirs)
    if fd is None:
        return "missing"
    try:
        target = os.readlink(name, dir_fd=fd)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "not the link to its blob"
    finally:
        os.close(fd)
    if target != "../" * (len(dirs) + 2) + "blobs/" + blob:
        return "not the link to its blob"
    try:
        bfd = os.open(blob, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), dir_fd=blobs)
    except FileNotFoundError:
        return "missing (its blob is gone)"
    except OSError:
        return "its blob is not a plain file"
    try:
        st = os.fstat(bfd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return "its blob is not a plain file this script wrote"
        if st.st_size != size:
            return f"size {st.st_size}, expected {size}"
        os.set_blocking(bfd, True)
        h = hashlib.sha256() if len(blob) == 64 else hashlib.sha1(b"blob %d\0" % size)
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError
            block = os.read(bfd, CHUNK)
            if not block:
                break
            h.update(block)
        digest = h.hexdigest()
    finally:
        os.close(bfd)
    if digest != blob:
        return f"{'sha256' if len(blob) == 64 else 'git blob id'} {digest}, expected {blob}"
    return None


def verify_snapshot(store: Store, deadline_s: float | None = None, start: str = "",
                    budget_bytes: int | None = None) -> dict:
    """Re-hash every file of a complete snapshot against the manifest its marker recorded, reading
    only the snapshot's blobs (streamed) and stopping at the deadline (default: 60 s plus the
    snapshot's bytes at VERIFY_RATE). Changes nothing. The answer: ``files`` and ``bytes`` checked,
    ``seconds``, ``bad`` ([path, problem] for each mismatch or missing file), ``finished`` (False:
    the deadline passed, or nothing could be checked) and ``error`` (why nothing could be checked).

    A slice (the continuous check, sglang_deploy/deploy/host/watch.py): the files in name order
    from the first at or after ``start``, whole files until ``budget_bytes`` are read (at least
    one); ``checked`` lists them and ``next`` names the file the next slice starts at ("" once
    the last file was checked: the next slice starts over), so a snapshot of S bytes is covered
    in about S / budget runs."""
    t0 = time.monotonic()
    out: dict = {"files": 0, "bytes": 0, "seconds": 0.0, "bad": [], "finished": False, "error": None}
    if budget_bytes is not None:
        out.update(checked=[], next="")
    try:
        recorded = read_marker(store)
    except ValueError as exc:
        out["error"] = "the snapshot has no completion marker" if str(exc) == "no marker" else str(exc)
        return out
    entries = []
    for path, value in recorded.items():
        problem = marker_entry_problem(path, value)
        if problem is not None:
            out["error"] = f"the marker is not one this script wrote ({problem})"
            return out
        if len(value) != 3:
            out["error"] = "the marker records no hashes (the snapshot was staged by an older deploy)"
            return out
        entries.append((path, value[0], value[2]))
    entries.sort()
    if budget_bytes is not None:
        entries = [e for e in entries if e[0] >= start] or entries
        read = 0
        for i, (_, size, _) in enumerate(entries):
            if i and read + size > budget_bytes:
                out["next"] = entries[i][0]
                entries = entries[:i]
                break
            read += size
    total = sum(size for _, size, _ in entries)
    deadline = t0 + (deadline_s if deadline_s is not None else 60 + total / VERIFY_RATE)
    repo = snaps_parent = blobs = snaps = None
    try:
        try:  # the store's root is the inventory's path; below it, no link is followed
            root = os.open(store.root, DIR_FLAGS & ~os.O_NOFOLLOW)
        except OSError:
            root = None
        if root is not None:
            repo = _open_dir(root, store.name)
            os.close(root)
        if repo is not None:
            snaps_parent, blobs = _open_dir(repo, "snapshots"), _open_dir(repo, "blobs")
            snaps = _open_dir(snaps_parent, store.commit) if snaps_parent is not None else None
        if snaps is None or blobs is None:
            out["bad"] = [[p, "missing"] for p, _, _ in entries]
            if budget_bytes is not None:
                out["checked"] = [p for p, _, _ in entries]
            out["finished"] = True
            return out
        for path, size, blob in sorted(entries):
            try:
                problem = _check_one(store, snaps, blobs, path, size, blob, deadline)
            except TimeoutError:
                out["error"] = (f"the {deadline - t0:.0f} s deadline passed after {out['files']} of {len(entries)} "
                                "files")
                return out
            out["files"] += 1
            out["bytes"] += size
            if budget_bytes is not None:
                out["checked"].append(path)
            if problem is not None:
                out["bad"].append([path, problem])
        out["finished"] = True
        return out
    finally:
        for fd in (repo, snaps_parent, blobs, snaps):
            if fd is not None:
                os.close(fd)
        out["seconds"] = round(time.monotonic() - t0, 3)


def served_store(state_dir: str) -> Store | None:
    """The store snapshot the running revision serves: the ``--model-path`` of the ``current``
    revision's argv.json when it is ``<store>/models--<name>/snapshots/<commit>``, else None."""
    try:
        current = _read_small_path(os.path.join(state_dir, "current")).strip()
        if not re.fullmatch(r"[0-9a-f]{16}", current):
            return None
        with open(os.path.join(state_dir, "revisions", current, "argv.json"), "rb") as fh:
            argv = json.loads(fh.read(1 << 20))
        path = argv[argv.index("--model-path") + 1]
    except (OSError, ValueError, IndexError, TypeError, AttributeError, RecursionError):
        return None
    if not isinstance(path, str) or CONTROLS.search(path) or not path.startswith("/"):
        return None
    snaps, commit = os.path.split(path.rstrip("/"))
    repo_dir, word = os.path.split(snaps)
    root, name = os.path.split(repo_dir)
    if word != "snapshots" or not HEX40.match(commit) or not name.startswith("models--") or not root:
        return None
    store = Store(root, "x", commit, (-1, -1))
    store.name, store.repo_dir = name, repo_dir
    store.blobs, store.snapshot = os.path.join(repo_dir, "blobs"), path.rstrip("/")
    store.marker = os.path.join(repo_dir, MARKS, commit)
    return store


def _read_small_path(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return os.read(fd, 256).decode("ascii", "replace")
    finally:
        os.close(fd)


def verify_served(args: argparse.Namespace) -> None:
    """``--verify-served``: one JSON line, the :func:`verify_snapshot` of the running revision's
    snapshot (``served``: its path, null when it serves none from a store); changes nothing."""
    store = served_store(args.state_dir or "")
    if store is None:
        print(json.dumps({"served": None}))
        return
    budget = args.verify_budget_bytes
    if budget is not None and budget <= 0:
        fail(2, f"{args.host}: --verify-budget-bytes must be > 0")
    result = verify_snapshot(store, args.verify_deadline_s, args.verify_from or "", budget)
    print(json.dumps({"served": store.snapshot, **result}))


def digest_of(fd: int, entry: dict) -> str:
    """The sha256 of an LFS file, else its git blob id (git's object format: sha1 of
    ``b"blob <size>\\0"`` + content, as the Hub's blobId of a non-LFS file)."""
    if entry["sha256"]:
        h = hashlib.sha256()
    else:
        h = hashlib.sha1(b"blob %d\0" % entry["size"])
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        block = os.read(fd, CHUNK)
        if not block:
            return h.hexdigest()
        h.update(block)


def verify(fd: int, entry: dict) -> str | None:
    """None when the open file is the file the list describes, else what is wrong."""
    size = os.fstat(fd).st_size
    if size != entry["size"]:
        return f"size {size}, expected {entry['size']}"
    digest = digest_of(fd, entry)
    if digest != entry["blob"]:
        return f"{'sha256' if entry['sha256'] else 'git blob id'} {digest}, expected {entry['blob']}"
    return None


def ensure_file(store: Store, entry: dict, fetch, stats: dict) -> None:
    """The verified blob of ``entry``, linked into the snapshot. ``fetch`` fills its partial file
    (None: the controller uploaded it already; then an incomplete one stops the host)."""
    blobs, blob = store.fds["blobs"], entry["blob"]
    if store.kind(blobs, blob, store.blobs):
        fd = store.open_file(blobs, blob, store.blobs)
        try:
            problem = verify(fd, entry)
        finally:
            os.close(fd)
        if problem is None:
            link(store, entry)
            return
        say(f"{shown(entry['path'])}: the stored blob fails verification ({problem}): fetching it again")
        os.unlink(blob, dir_fd=blobs)
    partial = blob + PARTIAL
    for attempt in (1, 2):
        if fetch is None and not store.kind(blobs, partial, store.blobs):
            fail(7, f"{shown(entry['path'])}: 0 of {entry['size']} bytes arrived from the controller; deploy again "
                    "to resume")
        fd = store.open_file(blobs, partial, store.blobs, write=fetch is not None)
        try:
            if fetch is not None:
                os.fchown(fd, *store.ids)
                fetch(entry, fd, partial, stats)
            elif os.fstat(fd).st_size != entry["size"]:
                fail(7, f"{shown(entry['path'])}: {os.fstat(fd).st_size} of {entry['size']} bytes arrived from the "
                        "controller; deploy again to resume")
            problem = verify(fd, entry)
            if problem is None:
                os.fchown(fd, *store.ids)
        finally:
            os.close(fd)
        if problem is None:
            store.kind(blobs, blob, store.blobs)
            os.replace(partial, blob, src_dir_fd=blobs, dst_dir_fd=blobs)
            link(store, entry)
            return
        os.unlink(partial, dir_fd=blobs)
        say(f"{shown(entry['path'])}: the fetched file fails verification ({problem})" +
            (": fetching it again" if attempt == 1 and fetch is not None else ""))
        if fetch is None:
            break
    fail(4, f"{shown(entry['path'])} of {store.snapshot} failed verification; nothing is served from it")


def link(store: Store, entry: dict) -> None:
    """snapshots/<commit>/<path> -> ../../blobs/<blob>, relative, as huggingface_hub._create_symlink
    makes it; every folder on the way opened without following a link."""
    *dirs, name = entry["path"].split("/")
    fd, where, opened = store.fds["snaps"], store.snapshot, []
    try:
        for d in dirs:
            fd = store.subdir(fd, d, where)
            opened.append(fd)
            where = os.path.join(where, d)
        target = "../" * (len(dirs) + 2) + "blobs/" + entry["blob"]
        try:
            if os.readlink(name, dir_fd=fd) == target:
                return
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            store.kind(fd, name, where)  # a folder or other: refused; a plain file: replaced below
        tmp = f".{name[:200]}.sglang-deploy-link"
        if _lexists(fd, tmp):
            os.unlink(tmp, dir_fd=fd)
        os.symlink(target, tmp, dir_fd=fd)
        os.chown(tmp, *store.ids, dir_fd=fd, follow_symlinks=False)
        os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        for d in opened:
            os.close(d)


def _lexists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def owner_ids(owner: str, host: str) -> tuple[int, int]:
    user, _, group = owner.partition(":")
    try:
        return pwd.getpwnam(user).pw_uid, grp.getgrnam(group or user).gr_gid
    except KeyError:
        fail(2, f"{host}: --owner {shown(owner)}: no such user or group")


def stage(args: argparse.Namespace) -> None:
    """The snapshot into the store: from the Hub, or (``--files-json``) from what the controller
    uploaded into the partial files (their list is the controller's, with every sha256)."""
    check_args(args)
    env = read_env_file(args.env_file, args.host)
    for key in PASSED_ENV:
        if env.get(key):
            os.environ[key] = env[key]
    os.environ.pop("HF_HUB_OFFLINE", None)
    token = env.get("HF_TOKEN") or os.environ.get("HF_TOKEN") or None
    if token:
        SECRETS.append(token)
        check_token(token, args.host)
    store = Store(args.store, args.repo, args.commit, owner_ids(args.owner, args.host))
    stale = quick_check(store)
    if stale is None and args.verify:
        # Sizes and times can be kept by whoever changes a file: re-hash the snapshot against its
        # manifest. A mismatch drops the marker, and the staging below verifies every file against
        # the listing and fetches the bad ones into their partial files, renamed over the old blob:
        # a new inode, so the running server (whose weights are loaded, its open files untouched)
        # keeps serving; the next restart, gated as always, loads the good file.
        result = verify_snapshot(store, args.verify_deadline_s)
        timed_out = bool(result["error"]) and "deadline" in result["error"]
        if result["bad"] or (result["error"] and not timed_out):
            stale = "; ".join(f"{shown(p)} {why}" for p, why in result["bad"][:5]) or result["error"]
            say(f"{args.repo} {args.commit}: the re-hash found {stale}")
        elif result["error"]:
            say(f"{args.repo} {args.commit}: not re-hashed whole: {result['error']}")
        else:
            say(f"{args.repo} {args.commit}: {result['files']} files, {result['bytes']} bytes re-hashed in "
                f"{result['seconds']:.1f} s: all match")
    if stale is None:
        say(f"{args.repo} {args.commit} already in {args.store}, verified")
        if args.plan_only:
            print(json.dumps({"complete": True}))
        return
    if args.files_json:
        try:
            with open(args.files_json, "rb") as fh:
                raw = json.loads(fh.read(MAX_LISTING + 1))
        except (OSError, ValueError, RecursionError) as exc:
            fail(5, f"{args.host}: --files-json: cannot read the controller's file list ({type(exc).__name__})")
        files, fetch = check_files(raw, f"{args.host}: --files-json"), None
    else:
        files, fetch = hub_files(args, token)
    check_disk(args, store, files)
    if args.plan_only:  # the controller's sync asks how much of each file is already here
        have = {}
        for f in files:
            have[f["blob"]] = -1 if os.path.lexists(os.path.join(store.blobs, f["blob"])) else (
                _size(os.path.join(store.blobs, f["blob"] + PARTIAL)))
        print(json.dumps({"complete": False, "have": have}))
        return
    store.open()
    marks = store.subdir(store.fds["repo"], MARKS, store.repo_dir)
    if store.kind(marks, args.commit, os.path.dirname(store.marker)):
        say(f"the snapshot was verified before but {stale}: verifying every file again")
        os.unlink(args.commit, dir_fd=marks)
    stats = {"downloaded": 0, "resumed": 0}
    t0 = time.time()
    for f in files:
        ensure_file(store, f, fetch, stats)
    if args.revision and args.revision != args.commit:
        refs = store.subdir(store.fds["repo"], "refs", store.repo_dir)
        store.write_file(refs, args.revision.replace("/", "%2F"), args.commit.encode(),
                         os.path.join(store.repo_dir, "refs"))
        os.close(refs)
    write_marker(store, marks, files, t0, stats)
    os.close(marks)
    store.close()
    total = sum(f["size"] for f in files)
    say(f"{args.repo} {args.commit}: {len(files)} files, {total} bytes verified in {args.store} "
        f"({stats['downloaded']} downloaded, resumed after {stats['resumed']}, {time.time() - t0:.1f} s)")


def append_piece(args: argparse.Namespace) -> None:
    """The controller's upload (source ``controller:``): one piece of a blob, put by the controller
    into its private temporary directory, appended to the blob's partial file when that holds
    exactly ``--offset`` bytes. Through the same link-refusing opens as a download: the store
    belongs to the service user, and a link planted there must not lead root's write elsewhere."""
    check_args(args)
    if not HEX64.match(args.blob or "") or args.offset is None or args.offset < 0:
        fail(2, f"{args.host}: --append-piece needs --blob (a sha256) and --offset >= 0")
    store = Store(args.store, args.repo, args.commit, owner_ids(args.owner, args.host))
    store.open()
    try:
        fd = store.open_file(store.fds["blobs"], args.blob + PARTIAL, store.blobs, write=True)
        try:
            have = os.fstat(fd).st_size
            if have != args.offset:
                fail(7, f"{args.host}: {args.blob}{PARTIAL} holds {have} bytes, the piece starts at byte "
                        f"{args.offset}; deploy again to resume")
            os.fchown(fd, *store.ids)
            os.lseek(fd, 0, os.SEEK_END)
            with open(args.append_piece, "rb") as src:
                for block in iter(lambda: src.read(CHUNK), b""):
                    _write_all(fd, block)
        finally:
            os.close(fd)
    finally:
        store.close()


def _size(path: str) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def read_env_file(path: str, host: str) -> dict[str, str]:
    """KEY=VALUE lines of a systemd EnvironmentFile (values quoted as sglang_deploy.unitsyntax.env_quote does)."""
    out: dict[str, str] = {}
    if not path:
        return out
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read(1 << 20).splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        fail(2, f"{host}: --env-file: cannot read it ({type(exc).__name__})")
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        try:
            words = shlex.split(raw) if raw else [""]
        except ValueError:
            fail(2, f"{host}: --env-file: the value of {shown(key.strip())} is not quoted properly")
        out[key.strip()] = words[0] if words else ""
    return out


def hub_files(args: argparse.Namespace, token: str | None):
    """The Hub's file list, and a fetch(entry, fd, name, stats) that downloads one file into ``fd``."""
    endpoint, userinfo = split_endpoint(os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT, args.host)
    auth = f"Bearer {token}" if token else None
    if auth is None and userinfo:
        import base64
        auth = "Basic " + base64.b64encode(urllib.parse.unquote(userinfo).encode()).decode()
        SECRETS.append(auth[6:])
    client = Client(endpoint, auth)
    where = f"{args.host}: {args.repo} at {args.commit} on {endpoint}"
    files = fetch_listing(client, args.repo, args.commit, args.allowance_s, where)

    def fetch(entry: dict, fd: int, name: str, stats: dict) -> None:
        # huggingface_hub/file_download.py hf_hub_url: {endpoint}/{repo}/resolve/{revision}/{quoted filename}
        url = f"{endpoint}/{args.repo}/resolve/{args.commit}/{urllib.parse.quote(entry['path'])}"
        try:
            download(client, url, fd, entry["size"], args, name, stats)
        except Exception as exc:  # noqa: BLE001 -- any transport failure is one line; the partial file stays
            raise Refused(5, f"{where}: {shown(entry['path'])}: {http_problem(exc)}; deploy again to resume") from None

    return files, fetch


def check_disk(args: argparse.Namespace, store: Store, files: list[dict]) -> None:
    """Stop (exit 3, one line, nothing written) unless the store's file system holds what is missing plus the margin."""
    total = sum(f["size"] for f in files)
    present = 0
    for f in files:
        blob = os.path.join(store.blobs, f["blob"])
        present += min(_size(blob) or _size(blob + PARTIAL), f["size"])
    needed = max(0, total - present) + args.margin_bytes
    probe = args.store
    while not os.path.exists(probe):
        probe = os.path.dirname(probe) or "/"
    free = shutil.disk_usage(probe).free
    if free < needed:
        fail(3, f"{args.host}: sglang_model_store {args.store}: {needed} bytes needed ({needed / 2 ** 30:.2f} GiB: "
                f"{total - present} of the {total} bytes of {args.repo} not yet in the store, plus the "
                f"{args.margin_bytes}-byte margin), {free} bytes free ({free / 2 ** 30:.2f} GiB); nothing was changed")


def write_marker(store: Store, marks: int, files: list[dict], t0: float, stats: dict) -> None:
    recorded = {}
    for f in files:
        st = os.stat(os.path.join(store.snapshot, f["path"]))
        recorded[f["path"]] = [st.st_size, st.st_mtime_ns, f["blob"]]  # the manifest --verify re-hashes against
    body = json.dumps({"files": recorded, "started_at": t0, "verified_at": time.time(),
                       "downloaded_bytes": stats["downloaded"]})
    store.write_file(marks, store.commit, body.encode(), os.path.dirname(store.marker))


def check_dir(args: argparse.Namespace) -> None:
    """Source host: the directory must be a checkpoint SGLang can load offline."""
    if not os.path.isfile(os.path.join(args.check_dir, "config.json")):
        fail(6, f"{args.host}: sglang_model {args.check_dir}: no config.json there; nothing was changed")
    say(f"{args.check_dir} holds a checkpoint (config.json present)")


# ---- prune ------------------------------------------------------------------------------------

def _model_paths(state_dir: str) -> set[str]:
    """The --model-path of every revision staged on the host (the current and the previous one)."""
    paths = set()
    for name in glob.glob(os.path.join(state_dir, "revisions", "*", "argv.json")):
        try:
            with open(name, encoding="utf-8") as fh:
                argv = json.load(fh)
            paths.add(os.path.realpath(argv[argv.index("--model-path") + 1]))
        except (OSError, ValueError, IndexError, TypeError, AttributeError, RecursionError):
            continue
    return paths


def _entries(dir_fd: int) -> list[os.DirEntry]:
    with os.scandir(dir_fd) as it:
        return sorted(it, key=lambda e: e.name)


def _open_dir(parent: int, name: str) -> int | None:
    """A folder in ``parent``, never through a link (None: absent, a link or not a folder)."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError:
        return None


def _remove_tree(parent: int, name: str) -> None:
    """``name`` in ``parent`` and what it holds, links removed as links, never followed."""
    fd = _open_dir(parent, name)
    if fd is None:
        os.unlink(name, dir_fd=parent)
        return
    try:
        for entry in _entries(fd):
            if entry.is_dir(follow_symlinks=False):
                _remove_tree(fd, entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _link_targets(fd: int, out: set[str]) -> None:
    """The blob names the links under ``fd`` point at (the last segment of each link's target)."""
    for entry in _entries(fd):
        if entry.is_symlink():
            out.add(os.readlink(entry.name, dir_fd=fd).rstrip("/").rsplit("/", 1)[-1])
        elif entry.is_dir(follow_symlinks=False):
            sub = _open_dir(fd, entry.name)
            if sub is not None:
                try:
                    _link_targets(sub, out)
                finally:
                    os.close(sub)


def prune(args: argparse.Namespace) -> None:
    """Per model folder of the store keep the ``--keep`` newest verified snapshots, and always
    those a staged revision serves (the running and the previous one); remove the rest, their
    markers and refs, and the blobs no remaining snapshot links to (partial downloads stay).
    Only real folders ``models--*`` are entered, never through a link; only snapshots and markers
    named by a commit (40 hex), refs (plain files) naming a removed commit, and plain files in
    ``blobs`` are removed."""
    protected = _model_paths(args.state_dir)
    try:
        root = os.open(args.store, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    real_root = os.path.realpath(args.store)
    try:
        for top in _entries(root):
            if top.name.startswith("models--") and top.is_dir(follow_symlinks=False):
                repo = _open_dir(root, top.name)
                if repo is not None:
                    try:
                        _prune_repo(args, repo, top.name, os.path.join(real_root, top.name), protected)
                    finally:
                        os.close(repo)
    finally:
        os.close(root)


def _prune_repo(args: argparse.Namespace, repo: int, name: str, real: str, protected: set[str]) -> None:
    snaps, marks, refs, blobs = (_open_dir(repo, d) for d in ("snapshots", MARKS, "refs", "blobs"))
    try:
        if snaps is None:
            return
        commits = [e.name for e in _entries(snaps) if HEX40.match(e.name) and e.is_dir(follow_symlinks=False)]

        def age(commit: str) -> float:
            for fd in (marks, snaps):
                if fd is not None:
                    try:
                        st = os.stat(commit, dir_fd=fd, follow_symlinks=False)
                        if fd == snaps or stat.S_ISREG(st.st_mode):
                            return st.st_mtime
                    except OSError:
                        continue
            return 0.0

        kept = [c for c in commits if os.path.join(real, "snapshots", c) in protected]
        for commit in sorted(commits, key=age, reverse=True):
            if commit in kept:
                continue
            if len(kept) < args.keep:
                kept.append(commit)
                continue
            _remove_tree(snaps, commit)
            if marks is not None and _is_file(marks, commit):
                os.unlink(commit, dir_fd=marks)
            if refs is not None:
                for ref in _entries(refs):
                    if ref.is_file(follow_symlinks=False) and _read_small(refs, ref.name).strip() == commit:
                        os.unlink(ref.name, dir_fd=refs)
            say(f"pruned {name} snapshot {commit}")
        linked: set[str] = set()
        for commit in kept:
            fd = _open_dir(snaps, commit)
            if fd is not None:
                try:
                    _link_targets(fd, linked)
                finally:
                    os.close(fd)
        for blob in _entries(blobs) if blobs is not None else []:
            if not blob.name.endswith(PARTIAL) and blob.is_file(follow_symlinks=False) and blob.name not in linked:
                os.unlink(blob.name, dir_fd=blobs)
    finally:
        for fd in (snaps, marks, refs, blobs):
            if fd is not None:
                os.close(fd)


def _is_file(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _read_small(dir_fd: int, name: str) -> str:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return ""
    try:
        return os.read(fd, 256).decode("ascii", "replace")
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True, help="the host's inventory name, for messages")
    parser.add_argument("--store")
    parser.add_argument("--repo")
    parser.add_argument("--commit")
    parser.add_argument("--revision")
    parser.add_argument("--env-file", default="")
    parser.add_argument("--margin-bytes", type=int, default=0)
    parser.add_argument("--owner", default="root:root")
    parser.add_argument("--check-dir")
    parser.add_argument("--files-json", help="the file list of a snapshot the controller uploads (no Hub)")
    parser.add_argument("--plan-only", action="store_true",
                        help="check the disk, print how much of each file is here as JSON, change nothing")
    parser.add_argument("--min-rate", type=float, default=float(1 << 20),
                        help="bytes/s a download may not fall below on average: a file's deadline is its size at "
                             "this rate plus --allowance-s (default 1 MiB/s)")
    parser.add_argument("--allowance-s", type=float, default=60.0,
                        help="seconds every HTTP exchange gets on top (the listing's whole deadline; default 60)")
    parser.add_argument("--append-piece", metavar="FILE",
                        help="append FILE (a piece of the controller's upload) to --blob's partial file at --offset")
    parser.add_argument("--blob", help="with --append-piece: the blob's sha256")
    parser.add_argument("--offset", type=int, help="with --append-piece: the bytes the partial file holds already")
    parser.add_argument("--verify", action="store_true",
                        help="re-hash a snapshot marked complete against its manifest; a mismatch stages it again")
    parser.add_argument("--verify-served", action="store_true",
                        help="re-hash the snapshot the running revision (--state-dir) serves; JSON out, no change")
    parser.add_argument("--verify-deadline-s", type=float, default=None,
                        help="seconds a re-hash may take (default 60 plus the snapshot's size at 32 MiB/s)")
    parser.add_argument("--verify-budget-bytes", type=int, default=None,
                        help="with --verify-served: re-hash whole files, in name order, until this many bytes are "
                             "read (at least one file); the answer's next names where the next slice starts")
    parser.add_argument("--verify-from", default="", help="with --verify-budget-bytes: the first file of the slice")
    parser.add_argument("--prune", action="store_true", help="prune old snapshots of --store")
    parser.add_argument("--state-dir", help="with --prune: the deploy's state directory (its staged revisions)")
    parser.add_argument("--keep", type=int, default=2)
    args = parser.parse_args(argv)
    del SECRETS[:]
    try:
        if args.verify_served:
            verify_served(args)
        elif args.prune:
            prune(args)
        elif args.append_piece:
            append_piece(args)
        elif args.check_dir:
            check_dir(args)
        else:
            stage(args)
    except Refused as exc:
        fail(exc.code, str(exc))
    except OSError as exc:  # one line, never a traceback
        fail(1, f"{args.host}: {type(exc).__name__}: {exc.strerror or exc}"
                f"{' (' + shown(exc.filename) + ')' if exc.filename else ''}")


if __name__ == "__main__":
    main()
