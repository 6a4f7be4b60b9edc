"""Model facts from the Hugging Face Hub (model_metadata.py's source 2): the Hub's settings
(``HF_ENDPOINT``, ``HF_HUB_OFFLINE``, the token), a client of its metadata endpoints with a
deadline per exchange and a budget per model, and one model's fetch: its revision resolved to a
commit, the metadata files downloaded (the safetensors headers by HTTP range when there is no
index), read, then cached (model_files.py).
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping
from urllib.parse import quote

import httpx

from sglang_deploy.deadline import DeadlinePassed, within
from sglang_deploy.deploy.model_files import (BOUNDS, CONFIG, GENERATION, HEADERS_FILE, HF_QUANT, INDEX,
                                              MAX_SAFETENSORS_FILES, METADATA_FILES, TOKENIZER, MetadataError,
                                              ModelCache, facts_at, header_length, load_metadata, parse_header)
from sglang_deploy.plan.modelfacts import CheckpointError, ModelFacts, facts_from_metadata
from sglang_deploy.plan.weights import COMMIT, DEFAULT_ENDPOINT, repo_id_problem, revision_problem
from sglang_deploy.untrusted import (Scrubber, UntrustedInput, check_token, load_json, printable, redact_url,
                                     url_secrets)

TIMEOUT = httpx.Timeout(10.0, connect=3.0)   # each connect and read; the deadline bounds the whole exchange
DEADLINE_S = 60.0         # one HTTP exchange: connect, redirects, headers and the whole body
BUDGET_S = 600.0          # every exchange of one model's fetch together
MAX_FILE_NAME = 1024
# The model-info answer (?blobs=true): about 250 bytes a file with its blob id and LFS sha256,
# so 16 MiB lists some 65,000 files; a checkpoint repository lists tens to a few hundred
# (moonshotai/Kimi-K3: 96 shards and its code and tokenizer files).
MAX_MODEL_INFO_BYTES = 16 * 2 ** 20


class AnswerTooLarge(MetadataError):
    """An answer longer than its bound; the rest of it was not read."""


@dataclass(frozen=True)
class HubSettings:
    endpoint: str = DEFAULT_ENDPOINT
    token: str | None = None
    offline: bool = False
    deadline_s: float = DEADLINE_S   # one HTTP exchange, overall
    budget_s: float = BUDGET_S       # one model's fetch, overall

    @property
    def shown(self) -> str:
        """The endpoint as messages and the plan show it: without credentials."""
        return redact_url(self.endpoint)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None, token: str | None = None) -> "HubSettings":
        env = os.environ if environ is None else environ
        offline = env.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
        return cls(endpoint=(env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"), token=token or None,
                   offline=offline)


def _hub_error(response: httpx.Response, what: str, revision: str) -> MetadataError:
    code = response.headers.get("X-Error-Code", "")
    status = response.status_code
    if code == "RevisionNotFound" or (status == 404 and what == "model info" and not code):
        return MetadataError(f"revision {revision!r} not found ({status})")
    if code == "GatedRepo":
        return MetadataError(f"gated repository: its files need a token granted access (sglang_secrets.hf_token), "
                             f"got {status}")
    if code == "RepoNotFound" or status in (401, 403):
        return MetadataError(f"repository not found or not accessible with the given token ({status})")
    if code == "EntryNotFound":
        return MetadataError(f"{what} not found at that revision ({status})")
    return MetadataError(f"{what}: HTTP {status}")


def sibling_problem(name: Any) -> str | None:
    """Why a file name from the model info cannot go into a URL (or a path), or None: a relative
    path in the repository, without '..', a leading '/' or '\\', or control characters."""
    if not isinstance(name, str) or not name or len(name) > MAX_FILE_NAME:
        return "not a file name"
    if name.startswith(("/", "\\")) or "\\" in name or ".." in name or "" in name.split("/"):
        return f"{printable(name)[:80]!r} is not a relative path inside the repository"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in name):
        return f"{printable(name)[:80]!r} holds control characters"
    return None


class HubClient:
    """The Hub's metadata endpoints over one httpx client; the token rides in its headers only.

    Every exchange ends within ``settings.deadline_s`` (and a fetch within ``settings.budget_s``):
    the body is streamed, the deadline checked between chunks, and each read waits at most the
    time left; bodies stop at their cap. Every message is scrubbed of the token and of the
    endpoint's credentials, and of terminal controls."""

    def __init__(self, settings: HubSettings, client: httpx.Client | None = None):
        self.settings = settings
        self.scrubber = Scrubber([settings.token, *url_secrets(settings.endpoint)])
        token = None
        if settings.token:
            try:
                token = check_token(settings.token, "the Hub token")
            except UntrustedInput as exc:
                raise MetadataError(str(exc)) from None
        self._own = client is None
        # httpx drops Authorization on a redirect to another origin (httpx/_client.py
        # Client._redirect_headers): the token goes to the endpoint it was given for only.
        self.client = client or httpx.Client(timeout=TIMEOUT, follow_redirects=True)
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        self._budget_end: float | None = None

    def __enter__(self) -> "HubClient":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._own:
            self.client.close()

    def fail(self, text: str) -> MetadataError:
        """One line, without a secret or a terminal control, whatever the server or httpx said."""
        return MetadataError(printable(self.scrubber.text(text))[:500])

    @contextmanager
    def budget(self) -> Iterator[None]:
        """Bound every exchange inside to ``settings.budget_s`` together."""
        outer = self._budget_end
        self._budget_end = time.monotonic() + self.settings.budget_s
        if outer is not None:
            self._budget_end = min(outer, self._budget_end)
        try:
            yield
        finally:
            self._budget_end = outer

    def _exchange(self, url: str, what: str, revision: str, max_bytes: int, *, params: Mapping[str, str] | None = None,
                  byte_range: tuple[int, int] | None = None) -> bytes:
        """The body of one GET (at most ``max_bytes``; with ``byte_range``, those bytes only, even
        when the server answers 200 with the whole file), within the deadline."""
        deadline = self.settings.deadline_s
        end = time.monotonic() + deadline
        if self._budget_end is not None and self._budget_end < end:
            end, deadline = self._budget_end, self.settings.budget_s

        def left() -> float:
            rest = end - time.monotonic()
            if rest <= 0:
                raise self.fail(f"{what}: no complete answer within {deadline:g} s")
            return rest

        # identity only: an answer is read as sent, never decompressed (httpx decodes a chunk whole,
        # so 12 KB of gzip inside gzip became 1 GiB before any cap between chunks; a mirror that
        # compresses anyway is refused, naming the encoding)
        headers = {"Accept-Encoding": "identity", **self._auth}
        if byte_range:
            headers["Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
        rest = left()
        # each read waits at most the time left (and a quarter of the deadline, so that a
        # trickle ends close to it: the deadline is checked between chunks)
        read = min(TIMEOUT.read or deadline, rest, max(deadline / 4, 0.05))
        timeout = httpx.Timeout(read, connect=min(TIMEOUT.connect or rest, rest), pool=min(rest, 10.0))
        chunks: list[bytes] = []
        total = 0

        def exchange() -> None:
            nonlocal total
            with self.client.stream("GET", url, params=params, headers=headers, timeout=timeout) as response:
                if response.status_code >= 400:
                    raise self.fail(str(_hub_error(response, what, revision)))
                encoding = response.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    raise self.fail(f"{what}: an answer in content encoding {encoding[:40]!r} (asked for identity; "
                                    "not decoded)")
                skip = 0
                if byte_range is not None:
                    if response.status_code == 200:
                        skip = byte_range[0]   # the whole file: the range starts that far in
                    elif not response.headers.get("Content-Range", f"bytes {byte_range[0]}-").startswith(
                            f"bytes {byte_range[0]}-"):
                        raise self.fail(f"{what}: the server answered another byte range than asked")
                for chunk in response.iter_bytes():  # identity (refused otherwise): the bytes as sent
                    left()
                    if skip:
                        cut = min(skip, len(chunk))
                        chunk, skip = chunk[cut:], skip - cut
                    chunks.append(chunk)
                    total += len(chunk)
                    if total > max_bytes or (byte_range is not None and total >= max_bytes):
                        break   # closing the response drops the rest unread

        try:
            # one deadline over connect, headers and body: a Hub that trickles its headers keeps
            # every read under its timeout (sglang_deploy.deadline); the thread is left to end
            within(rest + 1.0, exchange)
        except DeadlinePassed:
            raise self.fail(f"{what}: no complete answer within {deadline:g} s") from None
        except httpx.InvalidURL as exc:  # not an httpx.HTTPError: an endpoint such as http://host:18x99
            raise self.fail(f"{what}: the Hub endpoint is not a URL httpx can use: {exc}") from None
        except httpx.TimeoutException as exc:
            raise self.fail(f"{what}: no answer within {read:g} s ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            first = str(exc).splitlines()[0] if str(exc) else "failed"
            raise self.fail(f"{what}: {type(exc).__name__}: {first}") from None
        data = b"".join(chunks)
        if byte_range is not None:
            return data[:max_bytes]
        if len(data) > max_bytes:
            raise AnswerTooLarge(str(self.fail(f"{what}: the answer is larger than the {max_bytes} bytes accepted; "
                                               "not read further")))
        return data

    def _json(self, data: bytes, what: str) -> Any:
        """The model info, or a metadata file (``what`` its name) within its BOUNDS."""
        try:
            if what in BOUNDS:
                return load_metadata(what, data, what)
            return load_json(data, what, MAX_MODEL_INFO_BYTES)
        except UntrustedInput as exc:
            raise self.fail(str(exc)) from None

    def model_info(self, model: str, revision: str) -> tuple[str, dict[str, int | None]]:
        """(the commit, {filename: size}) of the model at a revision."""
        if problem := repo_id_problem(model):
            raise MetadataError(f"{model!r}: {problem}")
        if problem := revision_problem(revision):
            raise MetadataError(f"revision: {problem}")
        url = f"{self.settings.endpoint}/api/models/{model}/revision/{quote(revision, safe='')}"
        info = self._json(self._exchange(url, "model info", revision, MAX_MODEL_INFO_BYTES, params={"blobs": "true"}),
                          "model info")
        listing = info.get("siblings") if isinstance(info, dict) else None
        if not isinstance(info, dict) or not isinstance(listing if listing is not None else [], list):
            raise MetadataError("model info is not the Hub's JSON (no sha or siblings)")
        commit = info.get("sha")
        if not isinstance(commit, str) or not COMMIT.match(commit):
            raise MetadataError(f"model info gives no commit id for revision {revision!r}")
        siblings: dict[str, int | None] = {}
        for entry in listing or []:
            name = entry.get("rfilename") if isinstance(entry, dict) else None
            problem = sibling_problem(name)
            if problem or not isinstance(name, str):  # sibling_problem refuses anything but a str
                raise MetadataError(f"model info lists a file that is not one: {problem}")
            size = entry.get("size")
            siblings[name] = size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None
        return commit, siblings

    def file(self, model: str, commit: str, name: str, byte_range: tuple[int, int] | None = None) -> bytes:
        """A metadata file (at most its BOUNDS' bytes; past them the rest is not read), or with
        ``byte_range`` those bytes of any file."""
        if repo_id_problem(model) or not COMMIT.match(commit) or sibling_problem(name):
            raise MetadataError(f"{printable(name)[:80]!r}: not a file of a Hub model at a commit")
        url = f"{self.settings.endpoint}/{model}/resolve/{commit}/{quote(name)}"
        if byte_range is not None:
            return self._exchange(url, name, commit, byte_range[1] - byte_range[0] + 1, byte_range=byte_range)
        bound = BOUNDS.get(name)
        if bound is None:
            raise MetadataError(f"{printable(name)[:80]!r}: not a metadata file this tool reads")
        try:
            return self._exchange(url, name, commit, bound.max_bytes)
        except AnswerTooLarge as exc:
            raise AnswerTooLarge(str(self.fail(bound.refusal(str(exc))))) from None

    def header_bytes(self, model: str, commit: str, name: str) -> int:
        length = header_length(self.file(model, commit, name, (0, 7)), name)
        data = self.file(model, commit, name, (8, 7 + length))
        if len(data) < length:
            raise MetadataError(f"{name}: the safetensors header is cut short ({len(data)} of {length} bytes)")
        return parse_header(data, name)


def fetch_from_hub(model: str, revision: str | None, hub: HubClient, cache: ModelCache) -> ModelFacts:
    """Resolve the revision, reuse a cached copy of that commit or download the metadata files
    (and only the safetensors headers when there is no index), cache them, read the facts."""
    rev = revision or "main"
    if problem := revision_problem(rev):
        raise MetadataError(f"revision {rev!r}: {problem}")
    with hub.budget():
        commit, siblings = hub.model_info(model, rev)
        if (cached := cache.commit_dir(model, commit)) is not None:
            cache.store(model, rev, commit, {})
            return facts_at(model, cached, commit, f"hub {hub.settings.shown} (commit {commit}, cached files)")
        if CONFIG not in siblings:
            raise MetadataError(f"revision {rev!r} has no {CONFIG}")
        files = {name: hub.file(model, commit, name) for name in METADATA_FILES if name in siblings}
        sizes = None
        if INDEX not in files:
            # the top-level weights SGLang loads; a subfolder (original/, ...) holds other formats
            names = sorted(n for n in siblings if n.endswith(".safetensors") and "/" not in n)
            if len(names) > MAX_SAFETENSORS_FILES:
                raise MetadataError(f"revision {rev!r} lists {len(names)} *.safetensors files and no index, more than "
                                    f"the {MAX_SAFETENSORS_FILES} whose headers are read")
            sizes = {n: hub.header_bytes(model, commit, n) for n in names}
            files[HEADERS_FILE] = (json.dumps(sizes, indent=2) + "\n").encode()
    # the facts are read before anything is cached: a hostile answer leaves no file behind
    parsed = {name: hub._json(data, name) for name, data in files.items() if name != HEADERS_FILE}
    try:
        facts = facts_from_metadata(model, commit, f"hub {hub.settings.shown} (commit {commit})", parsed[CONFIG],
                                    parsed.get(INDEX), parsed.get(GENERATION),
                                    list(sizes.values()) if sizes is not None else None, parsed.get(TOKENIZER),
                                    parsed.get(HF_QUANT))
    except CheckpointError as exc:
        raise MetadataError(str(exc).removeprefix(f"{model}: ")) from None
    cache.store(model, rev, commit, files)
    return facts
