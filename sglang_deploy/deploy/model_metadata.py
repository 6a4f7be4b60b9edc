"""Model facts for the planner, on the controller: the checkpoint's metadata files, never its weights.

Sources, first match wins:

1. a local directory: ``sglang_model_dir`` (a copy of the checkpoint, or of just its
   metadata files) or ``sglang_model`` itself when that path exists on the controller:
   ``config.json``, ``model.safetensors.index.json`` or else the safetensors headers
   (the 8-byte length and the JSON header of each ``*.safetensors``), ``generation_config.json``,
   ``tokenizer_config.json`` (its ``auto_map``: remote code the tokenizer needs);
2. the Hugging Face Hub over HTTP (``HF_ENDPOINT`` honoured, the token from
   ``sglang_secrets.hf_token``, ``sglang_model_revision`` resolved to a commit): the model
   info (huggingface_hub hf_api.py model_info, ``/api/models/{id}/revision/{rev}``) and
   the metadata files (``/{id}/resolve/{commit}/{file}``, file_download.py), safetensors
   headers by HTTP range; every successful fetch is written to the cache;
3. the cache on the controller: ``$XDG_CACHE_HOME/sglang-deploy/models/<org>--<name>/<commit>/``
   (``~/.cache`` without XDG_CACHE_HOME) and ``refs.json`` mapping revisions to commits,
   so a plan made once online works offline. ``HF_HUB_OFFLINE=1`` skips the Hub.

When no source answers the result is ``FactsUnavailable`` with one line naming the model
and each source's answer. The token only goes into the Authorization header: no error,
log or cache file holds it.

What a server or a file says is data (sglang_deploy/untrusted.py): every HTTP exchange has an
overall deadline and a body cap, JSON is parsed with depth and size caps, the file names a
listing gives are checked before they reach a URL, and the cache writes only its fixed file
names under ``<org>--<name>/<commit>/``. One Hub per host: the controller's ``HF_ENDPOINT``
(facts) and the host's ``sglang_env.HF_ENDPOINT`` (weights) naming two Hubs is refused.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Protocol
from urllib.parse import quote

import httpx

from sglang_deploy.deploy.secrets import read_secrets
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.modelfacts import (CheckpointError, FactsLookup, FactsUnavailable, ModelFacts,
                                           facts_from_metadata)
from sglang_deploy.plan.spec import DeploySpec, build_spec
from sglang_deploy.untrusted import (MAX_METADATA_BYTES, Scrubber, UntrustedInput, check_token, load_json,
                                     printable, read_part, read_text_file, redact_url, url_secrets)
from sglang_deploy.plan.weights import (COMMIT, DEFAULT_ENDPOINT, endpoint_key, host_endpoint, repo_id_problem,
                                        revision_problem)

TIMEOUT = httpx.Timeout(10.0, connect=3.0)   # each connect and read; the deadline bounds the whole exchange
DEADLINE_S = 60.0         # one HTTP exchange: connect, redirects, headers and the whole body
BUDGET_S = 600.0          # every exchange of one model's fetch together
CONFIG, INDEX, GENERATION = "config.json", "model.safetensors.index.json", "generation_config.json"
TOKENIZER = "tokenizer_config.json"   # its auto_map: a tokenizer that needs the repository's code
HEADERS_FILE = "safetensors_headers.json"   # cache only: data bytes per *.safetensors, from their headers
# the only names the cache writes in a commit folder
CACHE_FILES = (CONFIG, INDEX, GENERATION, TOKENIZER, HEADERS_FILE)
MAX_HEADER = 100 * 1024 * 1024               # safetensors refuses larger headers (safetensors' MAX_HEADER_SIZE)
MAX_BODY = MAX_METADATA_BYTES                # model info, config.json, the index: no real one nears 16 MiB
MAX_SAFETENSORS_FILES = 1024                 # headers fetched without an index (DeepSeek-V3: 163 shards)
MAX_FILE_NAME = 1024


class MetadataError(Exception):
    """One source could not give the facts; the message is one line naming the source."""


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


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "sglang-deploy" / "models"


# ---- source 1: a local directory -------------------------------------------------------------

def _json_file(model: str, path: Path) -> Any:
    """A metadata file: a regular file (a FIFO is refused, not read) of at most MAX_BODY bytes,
    strict JSON nested at most untrusted.MAX_DEPTH deep."""
    try:
        return load_json(read_text_file(path, path.name, MAX_BODY), str(path), MAX_BODY)
    except UntrustedInput as exc:
        raise MetadataError(printable(str(exc))) from None


def safetensors_data_bytes(header: Mapping[str, Any]) -> int:
    """The tensor data a safetensors header describes (its data_offsets)."""
    if not isinstance(header, Mapping):
        raise MetadataError("the safetensors header is not a JSON object")
    total = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = entry["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise MetadataError(f"safetensors header entry {printable(name)[:80]!r} has no data_offsets") from None
        if not (isinstance(start, int) and isinstance(end, int) and not isinstance(start, bool)
                and not isinstance(end, bool) and 0 <= start <= end <= 2 ** 63):
            raise MetadataError(f"safetensors header entry {printable(name)[:80]!r} has bad data_offsets")
        total += end - start
    return total


def _parse_header(data: bytes, where: str) -> int:
    try:
        header = load_json(data, where, MAX_HEADER)
    except UntrustedInput as exc:
        raise MetadataError(f"the safetensors header: {printable(str(exc))}") from None
    try:
        return safetensors_data_bytes(header)
    except MetadataError as exc:
        raise MetadataError(f"{where}: {exc}") from None


def _header_length(raw: bytes, where: str) -> int:
    if len(raw) < 8:
        raise MetadataError(f"{where} is too short for a safetensors file")
    (length,) = struct.unpack("<Q", raw[:8])
    if length > MAX_HEADER:
        raise MetadataError(f"{where}: a safetensors header of {length} bytes is more than the {MAX_HEADER} accepted")
    if length < 2:
        raise MetadataError(f"{where}: a safetensors header of {length} bytes cannot be a JSON object")
    return length


def _local_header_bytes(path: Path) -> int:
    """The 8-byte length and the JSON header only (a regular file; a FIFO is refused, not read)."""
    try:
        length = _header_length(read_part(path, path.name, 0, 8), str(path))
        data = read_part(path, path.name, 8, length)
    except UntrustedInput as exc:
        raise MetadataError(printable(str(exc))) from None
    if len(data) < length:
        raise MetadataError(f"{path}: the safetensors header is cut short ({len(data)} of {length} bytes)")
    return _parse_header(data, str(path))


def _present(path: Path) -> bool:
    """Whether ``path`` is there at all: a FIFO or a folder under a metadata file's name is then
    refused by the reader, not passed over as absent."""
    return os.path.lexists(path)


def read_directory(model: str, directory: Path, revision: str | None = None) -> ModelFacts:
    if not _present(directory / CONFIG):
        raise MetadataError(f"directory {directory} has no {CONFIG}")
    config = _json_file(model, directory / CONFIG)
    index = _json_file(model, directory / INDEX) if _present(directory / INDEX) else None
    generation = _json_file(model, directory / GENERATION) if _present(directory / GENERATION) else None
    tokenizer = _json_file(model, directory / TOKENIZER) if _present(directory / TOKENIZER) else None
    headers = None
    if index is None:
        if _present(directory / HEADERS_FILE):
            sizes = _json_file(model, directory / HEADERS_FILE)
            if not isinstance(sizes, dict) or len(sizes) > MAX_SAFETENSORS_FILES:
                raise MetadataError(f"{directory / HEADERS_FILE} is not a mapping of at most "
                                    f"{MAX_SAFETENSORS_FILES} file names to sizes")
            headers = list(sizes.values())
        else:
            names = sorted(directory.glob("*.safetensors"))
            if len(names) > MAX_SAFETENSORS_FILES:
                raise MetadataError(f"directory {directory} holds {len(names)} *.safetensors files, more than the "
                                    f"{MAX_SAFETENSORS_FILES} whose headers are read")
            headers = [_local_header_bytes(p) for p in names]
    try:
        return facts_from_metadata(model, revision, f"directory {directory}", config, index, generation, headers,
                                   tokenizer)
    except CheckpointError as exc:
        raise MetadataError(str(exc).removeprefix(f"{model}: ")) from None


# ---- source 3: the cache ---------------------------------------------------------------------

class ModelCache:
    """``<root>/<org>--<name>/<commit>/`` holds a commit's metadata files; ``refs.json`` maps
    each revision asked for to the commit it resolved to."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def model_dir(self, model: str) -> Path:
        """``<root>/<org>--<name>``: a Hub id has no '--', '..' or second '/' (repo_id_problem),
        so the folder is one name of the root's and one id's only."""
        if problem := repo_id_problem(model):
            raise MetadataError(f"{model!r}: {problem}")
        return self.root / model.replace("/", "--")

    def refs(self, model: str) -> dict[str, str]:
        """Revision -> commit; an unreadable, hostile or odd refs.json counts as none."""
        try:
            refs = load_json(read_text_file(self.model_dir(model) / "refs.json", "refs.json"), "refs.json")
        except (UntrustedInput, MetadataError):
            return {}
        if not isinstance(refs, dict):
            return {}
        return {k: v for k, v in refs.items()
                if revision_problem(k) is None and isinstance(v, str) and COMMIT.match(v)}

    def commit_dir(self, model: str, revision: str | None) -> Path | None:
        rev = revision or "main"
        if repo_id_problem(model) or revision_problem(rev):
            return None
        commit = rev if COMMIT.match(rev) else self.refs(model).get(rev)
        path = self.model_dir(model) / commit if commit else None
        return path if path is not None and (path / CONFIG).is_file() else None

    def store(self, model: str, revision: str | None, commit: str, files: Mapping[str, bytes]) -> Path:
        """Only the fixed names (CACHE_FILES) under a validated id and commit: nothing a server
        sends becomes a path."""
        if not COMMIT.match(commit) or revision_problem(revision or "main"):
            raise MetadataError(f"not a commit id: {printable(commit)[:60]!r}")
        if unknown := set(files) - set(CACHE_FILES):
            raise MetadataError(f"the cache does not store {sorted(unknown)}")
        target = self.model_dir(model) / commit
        target.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            tmp = target / f".{name}.tmp"
            tmp.write_bytes(data)
            tmp.replace(target / name)
        refs = self.refs(model)
        refs[revision or "main"] = commit
        tmp = self.model_dir(model) / ".refs.json.tmp"
        tmp.write_text(json.dumps(refs, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(self.model_dir(model) / "refs.json")
        return target


# ---- source 2: the Hub -----------------------------------------------------------------------

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

        headers = dict(self._auth)
        if byte_range:
            headers["Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
        rest = left()
        # each read waits at most the time left (and a quarter of the deadline, so that a
        # trickle ends close to it: the deadline is checked between chunks)
        read = min(TIMEOUT.read or deadline, rest, max(deadline / 4, 0.05))
        timeout = httpx.Timeout(read, connect=min(TIMEOUT.connect or rest, rest), pool=min(rest, 10.0))
        chunks: list[bytes] = []
        total = 0
        try:
            with self.client.stream("GET", url, params=params, headers=headers, timeout=timeout) as response:
                if response.status_code >= 400:
                    raise self.fail(str(_hub_error(response, what, revision)))
                skip = 0
                if byte_range is not None:
                    if response.status_code == 200:
                        skip = byte_range[0]   # the whole file: the range starts that far in
                    elif not response.headers.get("Content-Range", f"bytes {byte_range[0]}-").startswith(
                            f"bytes {byte_range[0]}-"):
                        raise self.fail(f"{what}: the server answered another byte range than asked")
                for chunk in response.iter_bytes():
                    left()
                    if skip:
                        cut = min(skip, len(chunk))
                        chunk, skip = chunk[cut:], skip - cut
                    chunks.append(chunk)
                    total += len(chunk)
                    if total > max_bytes or (byte_range is not None and total >= max_bytes):
                        break   # closing the response drops the rest unread
        except httpx.TimeoutException as exc:
            raise self.fail(f"{what}: no answer within {read:g} s ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            first = str(exc).splitlines()[0] if str(exc) else "failed"
            raise self.fail(f"{what}: {type(exc).__name__}: {first}") from None
        data = b"".join(chunks)
        if byte_range is not None:
            return data[:max_bytes]
        if len(data) > max_bytes:
            raise self.fail(f"{what}: the answer is larger than the {max_bytes} bytes accepted; not read further")
        return data

    def _json(self, data: bytes, what: str) -> Any:
        try:
            return load_json(data, what, MAX_BODY)
        except UntrustedInput as exc:
            raise self.fail(str(exc)) from None

    def model_info(self, model: str, revision: str) -> tuple[str, dict[str, int | None]]:
        """(the commit, {filename: size}) of the model at a revision."""
        if problem := repo_id_problem(model):
            raise MetadataError(f"{model!r}: {problem}")
        if problem := revision_problem(revision):
            raise MetadataError(f"revision: {problem}")
        url = f"{self.settings.endpoint}/api/models/{model}/revision/{quote(revision, safe='')}"
        info = self._json(self._exchange(url, "model info", revision, MAX_BODY, params={"blobs": "true"}),
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

    def file(self, model: str, commit: str, name: str, byte_range: tuple[int, int] | None = None,
             max_bytes: int = MAX_BODY) -> bytes:
        if repo_id_problem(model) or not COMMIT.match(commit) or sibling_problem(name):
            raise MetadataError(f"{printable(name)[:80]!r}: not a file of a Hub model at a commit")
        url = f"{self.settings.endpoint}/{model}/resolve/{commit}/{quote(name)}"
        if byte_range is not None:
            max_bytes = byte_range[1] - byte_range[0] + 1
        return self._exchange(url, name, commit, max_bytes, byte_range=byte_range)

    def header_bytes(self, model: str, commit: str, name: str) -> int:
        length = _header_length(self.file(model, commit, name, (0, 7)), name)
        data = self.file(model, commit, name, (8, 7 + length))
        if len(data) < length:
            raise MetadataError(f"{name}: the safetensors header is cut short ({len(data)} of {length} bytes)")
        return _parse_header(data, name)


def _hub_client(hub: HubSettings, client: httpx.Client | None) -> HubClient:
    return HubClient(hub, client)


def fetch_model(model: str, revision: str | None = None, hub: HubSettings | None = None,
                cache: ModelCache | None = None, client: httpx.Client | None = None) -> tuple[ModelFacts, Path]:
    """``models fetch``: the Hub only (the point is to fill the cache); MetadataError says why not."""
    hub = hub or HubSettings.from_environ()
    cache = cache or ModelCache(cache_root())
    if not _looks_like_repo_id(model):
        raise MetadataError(f"{model!r} is not a Hub id (org/name: {repo_id_problem(model) or 'no org'})")
    if revision is not None and (problem := revision_problem(revision)):
        raise MetadataError(f"revision {revision!r}: {problem}")
    with _hub_client(hub, client) as hub_client:
        facts = fetch_from_hub(model, revision, hub_client, cache)
    path = cache.commit_dir(model, facts.revision)
    assert path is not None
    return facts, path


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
            return _facts_at(model, cached, commit, f"hub {hub.settings.shown} (commit {commit}, cached files)")
        if CONFIG not in siblings:
            raise MetadataError(f"revision {rev!r} has no {CONFIG}")
        files = {name: hub.file(model, commit, name) for name in (CONFIG, INDEX, GENERATION, TOKENIZER)
                 if name in siblings}
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
                                    list(sizes.values()) if sizes is not None else None, parsed.get(TOKENIZER))
    except CheckpointError as exc:
        raise MetadataError(str(exc).removeprefix(f"{model}: ")) from None
    cache.store(model, rev, commit, files)
    return facts


def _facts_at(model: str, directory: Path, commit: str | None, source: str) -> ModelFacts:
    return dataclasses.replace(read_directory(model, directory, commit), source=source)


# ---- all sources -----------------------------------------------------------------------------

def local_directory(model: str, model_dir: str | None) -> Path | None:
    """``sglang_model_dir``, else ``sglang_model`` when that path exists on the controller
    (a local path wins over a Hub id, as transformers' from_pretrained decides)."""
    if model_dir:
        return Path(model_dir).expanduser()
    candidate = Path(model).expanduser()
    return candidate if candidate.exists() else None


def _looks_like_repo_id(model: str) -> bool:
    """An org/name Hub id (sglang_deploy.plan.weights.repo_id_problem: the Hub's own grammar)."""
    return isinstance(model, str) and "/" in model and repo_id_problem(model) is None


def resolve_facts(model: str, revision: str | None = None, model_dir: str | None = None,
                  hub: HubSettings | None = None, cache: ModelCache | None = None,
                  client: httpx.Client | None = None) -> FactsLookup:
    """The facts from the first source that answers, or FactsUnavailable saying what each said.
    A directory named by the inventory is the only source tried for it: a wrong one is said,
    not passed over."""
    hub = hub or HubSettings.from_environ()
    cache = cache or ModelCache(cache_root())
    directory = local_directory(model, model_dir)
    if directory is not None:
        named = "sglang_model_dir" if model_dir else None  # a path in sglang_model is also the server's
        if not directory.is_dir():
            return FactsUnavailable(model, f"{directory} is not a directory on the controller", named)
        try:
            return read_directory(model, directory, revision if revision and COMMIT.match(revision) else None)
        except MetadataError as exc:
            return FactsUnavailable(model, f"directory: {exc}", named)
    said = []
    if not _looks_like_repo_id(model):
        return FactsUnavailable(model, f"{model!r} is neither a directory on the controller nor a Hub id")
    if revision is not None and (problem := revision_problem(revision)):
        return FactsUnavailable(model, f"revision {revision!r}: {problem}")
    if hub.offline:
        said.append("hub skipped (HF_HUB_OFFLINE)")
    else:
        scrub = Scrubber([hub.token, *url_secrets(hub.endpoint)])
        try:
            with _hub_client(hub, client) as hub_client:
                return fetch_from_hub(model, revision, hub_client, cache)
        except (MetadataError, OSError) as exc:
            said.append(f"hub {hub.shown}: {printable(scrub.text(str(exc)))}")
    cached = cache.commit_dir(model, revision)
    if cached is not None:
        try:
            return _facts_at(model, cached, cached.name, f"cache {cached}")
        except MetadataError as exc:
            said.append(f"cache: {exc}")
    else:
        said.append(f"no cached copy of revision {revision or 'main'!r}")
    return FactsUnavailable(model, "; ".join(said))


def facts_endpoint(spec: DeploySpec, environ: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """(the Hub the facts come from, why there is none): one Hub per host. The controller's
    ``HF_ENDPOINT`` and the host's ``sglang_env.HF_ENDPOINT`` naming two Hubs (scheme, host,
    port and path compared; credentials and a trailing slash aside) is refused: the facts' commit
    pins the weights the host downloads. With only one of them set, that one is the facts' Hub."""
    env = os.environ if environ is None else environ
    controller = (env.get("HF_ENDPOINT") or "").strip().rstrip("/") or None
    host = host_endpoint(spec)
    if controller and host and endpoint_key(controller) != endpoint_key(host):
        return controller, (f"the controller's HF_ENDPOINT {redact_url(controller)} (where the plan reads the model's "
                            f"facts) and this host's sglang_env.HF_ENDPOINT {redact_url(host)} (where it downloads the "
                            "weights) are two Hubs; the facts' commit pins the weights, so both must name one Hub: "
                            "set them alike (or unset the controller's)")
    return controller or host or DEFAULT_ENDPOINT, None


def _token(spec: DeploySpec, environ: Mapping[str, str] | None) -> str | None:
    refs = [ref for ref in spec.secrets if ref.name == "hf_token"]
    if not refs:
        return None
    try:
        return read_secrets(spec.host, refs, environ).get("HF_TOKEN")
    except PlanError:
        return None   # the deploy reports an unreadable secret; the facts go on without it


_MEMO: dict[tuple, FactsLookup] = {}


def facts_for_specs(specs: Iterable[DeploySpec], environ: Mapping[str, str] | None = None,
                    cache: ModelCache | None = None, memo: dict[tuple, FactsLookup] | None = None
                    ) -> dict[str, FactsLookup]:
    """Facts per host, resolved once per (model, revision, directory, endpoint, token)."""
    memo = _MEMO if memo is None else memo
    cache = cache or ModelCache(cache_root(environ))
    out: dict[str, FactsLookup] = {}
    with httpx.Client(timeout=TIMEOUT, follow_redirects=True) as client:   # one connection pool for all models
        for spec in specs:
            base = HubSettings.from_environ(environ)
            where, two_hubs = facts_endpoint(spec, environ)
            if two_hubs and not base.offline and not spec.model_dir:
                out[spec.host] = FactsUnavailable(spec.model_path, two_hubs, "sglang_env.HF_ENDPOINT")
                continue
            # sglang_secrets.hf_token is the token of the host's Hub: sent to that Hub only
            own = endpoint_key(where) == endpoint_key(host_endpoint(spec) or DEFAULT_ENDPOINT)
            token = _token(spec, environ) if own else None
            hub = dataclasses.replace(base, endpoint=where, token=token)
            key = (spec.model_path, spec.model_revision, spec.model_dir, hub.endpoint, hub.offline, token,
                   str(cache.root))
            if key not in memo:
                found = resolve_facts(spec.model_path, spec.model_revision, spec.model_dir, hub, cache, client)
                withheld = not own and any(ref.name == "hf_token" for ref in spec.secrets)
                if withheld and isinstance(found, FactsUnavailable):
                    found = dataclasses.replace(found, reason=(
                        f"{found.reason}; sglang_secrets.hf_token was not sent to {redact_url(where)}: it is the "
                        f"token of {redact_url(host_endpoint(spec) or DEFAULT_ENDPOINT)}, where the host downloads"))
                memo[key] = found
            out[spec.host] = memo[key]
    return out


class InventoryEntry(Protocol):
    """A host as an inventory gives it (sglang_deploy/deploy/inventory.py ``InventoryHost``)."""
    @property
    def name(self) -> str: ...
    @property
    def group_data(self) -> dict[str, Any]: ...
    @property
    def host_data(self) -> dict[str, Any]: ...


def facts_for_hosts(hosts: Iterable[InventoryEntry],
                    built: Mapping[str, DeploySpec | PlanError] | None = None) -> dict[str, FactsLookup]:
    """Each inventory host's model facts, resolved once per model (``facts_for_specs``); a host
    whose data is wrong gets none here: planning it reports its error, naming host and field.
    ``built``: the hosts' specs already built (``tpgroups.build_specs``), else built here."""
    specs = []
    for h in hosts:
        spec = built.get(h.name) if built is not None else None
        if spec is None:
            try:
                spec = build_spec(h.name, h.group_data, h.host_data)
            except PlanError:
                continue
        if isinstance(spec, DeploySpec):
            specs.append(spec)
    return facts_for_specs(specs)
