"""Model facts for the planner, on the controller: the checkpoint's metadata files, never its weights.

Sources, first match wins:

1. a local directory: ``sglang_model_dir`` (a copy of the checkpoint, or of just its
   metadata files) or ``sglang_model`` itself when that path exists on the controller:
   ``config.json``, ``model.safetensors.index.json`` or else the safetensors headers
   (the 8-byte length and the JSON header of each ``*.safetensors``), ``generation_config.json``;
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
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping
from urllib.parse import quote

import httpx

from roles.secrets import read_secrets
from sglang_deploy.errors import PlanError
from sglang_deploy.modelfacts import CheckpointError, FactsLookup, FactsUnavailable, ModelFacts, facts_from_metadata
from sglang_deploy.spec import DeploySpec
from sglang_deploy.weights import COMMIT, DEFAULT_ENDPOINT

TIMEOUT = httpx.Timeout(10.0, connect=3.0)
CONFIG, INDEX, GENERATION = "config.json", "model.safetensors.index.json", "generation_config.json"
HEADERS_FILE = "safetensors_headers.json"   # cache only: data bytes per *.safetensors, from their headers
MAX_HEADER = 100 * 1024 * 1024               # safetensors refuses larger headers (safetensors' MAX_HEADER_SIZE)


class MetadataError(Exception):
    """One source could not give the facts; the message is one line naming the source."""


@dataclass(frozen=True)
class HubSettings:
    endpoint: str = DEFAULT_ENDPOINT
    token: str | None = None
    offline: bool = False

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
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MetadataError(f"cannot read {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MetadataError(f"{path} is not JSON ({type(exc).__name__})") from None


def safetensors_data_bytes(header: Mapping[str, Any]) -> int:
    """The tensor data a safetensors header describes (its data_offsets)."""
    total = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = entry["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise MetadataError(f"safetensors header entry {name!r} has no data_offsets") from None
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end):
            raise MetadataError(f"safetensors header entry {name!r} has bad data_offsets")
        total += end - start
    return total


def _parse_header(data: bytes, where: str) -> int:
    try:
        return safetensors_data_bytes(json.loads(data))
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        raise MetadataError(f"{where}: the safetensors header is not a JSON object") from None


def _local_header_bytes(path: Path) -> int:
    with path.open("rb") as handle:
        raw = handle.read(8)
        if len(raw) < 8:
            raise MetadataError(f"{path} is too short for a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER:
            raise MetadataError(f"{path}: safetensors header of {length} bytes is too large")
        return _parse_header(handle.read(length), str(path))


def read_directory(model: str, directory: Path, revision: str | None = None) -> ModelFacts:
    if not (directory / CONFIG).is_file():
        raise MetadataError(f"directory {directory} has no {CONFIG}")
    config = _json_file(model, directory / CONFIG)
    index = _json_file(model, directory / INDEX) if (directory / INDEX).is_file() else None
    generation = _json_file(model, directory / GENERATION) if (directory / GENERATION).is_file() else None
    headers = None
    if index is None:
        if (directory / HEADERS_FILE).is_file():
            headers = list(_json_file(model, directory / HEADERS_FILE).values())
        else:
            headers = [_local_header_bytes(p) for p in sorted(directory.glob("*.safetensors"))]
    try:
        return facts_from_metadata(model, revision, f"directory {directory}", config, index, generation, headers)
    except CheckpointError as exc:
        raise MetadataError(str(exc).removeprefix(f"{model}: ")) from None


# ---- source 3: the cache ---------------------------------------------------------------------

class ModelCache:
    """``<root>/<org>--<name>/<commit>/`` holds a commit's metadata files; ``refs.json`` maps
    each revision asked for to the commit it resolved to."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def model_dir(self, model: str) -> Path:
        return self.root / model.replace("/", "--")

    def refs(self, model: str) -> dict[str, str]:
        try:
            refs = json.loads((self.model_dir(model) / "refs.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in refs.items() if isinstance(v, str) and COMMIT.match(v)} if isinstance(refs, dict) else {}

    def commit_dir(self, model: str, revision: str | None) -> Path | None:
        rev = revision or "main"
        commit = rev if COMMIT.match(rev) else self.refs(model).get(rev)
        path = self.model_dir(model) / commit if commit else None
        return path if path is not None and (path / CONFIG).is_file() else None

    def store(self, model: str, revision: str | None, commit: str, files: Mapping[str, bytes]) -> Path:
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


class HubClient:
    """The Hub's metadata endpoints over one httpx client; the token rides in its headers only."""

    def __init__(self, settings: HubSettings, client: httpx.Client | None = None):
        self.settings = settings
        self._own = client is None
        self.client = client or httpx.Client(timeout=TIMEOUT, follow_redirects=True)
        self._auth = {"Authorization": f"Bearer {settings.token}"} if settings.token else {}

    def __enter__(self) -> "HubClient":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._own:
            self.client.close()

    def _get(self, url: str, what: str, revision: str, **kw: Any) -> httpx.Response:
        try:
            response = self.client.get(url, headers={**kw.pop("headers", {}), **self._auth}, **kw)
        except httpx.HTTPError as exc:
            raise MetadataError(f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'failed'}"
                                ) from None
        if response.status_code >= 400:
            raise _hub_error(response, what, revision)
        return response

    def model_info(self, model: str, revision: str) -> tuple[str, dict[str, int | None]]:
        """(the commit, {filename: size}) of the model at a revision."""
        url = f"{self.settings.endpoint}/api/models/{model}/revision/{quote(revision, safe='')}"
        response = self._get(url, "model info", revision, params={"blobs": "true"})
        try:
            info = response.json()
            commit = info["sha"]
            siblings = {s["rfilename"]: s.get("size") for s in info.get("siblings") or []}
        except (ValueError, KeyError, TypeError):
            raise MetadataError("model info is not the Hub's JSON (no sha or siblings)") from None
        if not isinstance(commit, str) or not COMMIT.match(commit):
            raise MetadataError(f"model info gives no commit id for revision {revision!r}")
        return commit, siblings

    def file(self, model: str, commit: str, name: str, byte_range: tuple[int, int] | None = None) -> bytes:
        url = f"{self.settings.endpoint}/{model}/resolve/{commit}/{quote(name)}"
        headers = {"Range": f"bytes={byte_range[0]}-{byte_range[1]}"} if byte_range else {}
        return self._get(url, name, commit, headers=headers).content

    def header_bytes(self, model: str, commit: str, name: str) -> int:
        head = self.file(model, commit, name, (0, 7))
        if len(head) < 8:
            raise MetadataError(f"{name}: too short for a safetensors file")
        (length,) = struct.unpack("<Q", head[:8])
        if length > MAX_HEADER:
            raise MetadataError(f"{name}: safetensors header of {length} bytes is too large")
        return _parse_header(self.file(model, commit, name, (8, 7 + length))[:length], name)


def _hub_client(hub: HubSettings, client: httpx.Client | None) -> HubClient:
    return HubClient(hub, client)


def fetch_model(model: str, revision: str | None = None, hub: HubSettings | None = None,
                cache: ModelCache | None = None, client: httpx.Client | None = None) -> tuple[ModelFacts, Path]:
    """``models fetch``: the Hub only (the point is to fill the cache); MetadataError says why not."""
    hub = hub or HubSettings.from_environ()
    cache = cache or ModelCache(cache_root())
    if not _looks_like_repo_id(model):
        raise MetadataError(f"{model!r} is not a Hub id (org/name)")
    with _hub_client(hub, client) as hub_client:
        facts = fetch_from_hub(model, revision, hub_client, cache)
    path = cache.commit_dir(model, facts.revision)
    assert path is not None
    return facts, path


def fetch_from_hub(model: str, revision: str | None, hub: HubClient, cache: ModelCache) -> ModelFacts:
    """Resolve the revision, reuse a cached copy of that commit or download the metadata files
    (and only the safetensors headers when there is no index), cache them, read the facts."""
    rev = revision or "main"
    commit, siblings = hub.model_info(model, rev)
    if (cached := cache.commit_dir(model, commit)) is not None:
        cache.store(model, rev, commit, {})
        return _facts_at(model, cached, commit, f"hub {hub.settings.endpoint} (commit {commit}, cached files)")
    if CONFIG not in siblings:
        raise MetadataError(f"revision {rev!r} has no {CONFIG}")
    files = {name: hub.file(model, commit, name) for name in (CONFIG, INDEX, GENERATION) if name in siblings}
    if INDEX not in files:
        # the top-level weights SGLang loads; a subfolder (original/, ...) holds other formats
        sizes = {n: hub.header_bytes(model, commit, n) for n in sorted(siblings)
                 if n.endswith(".safetensors") and "/" not in n}
        files[HEADERS_FILE] = (json.dumps(sizes, indent=2) + "\n").encode()
    where = cache.store(model, rev, commit, files)
    return _facts_at(model, where, commit, f"hub {hub.settings.endpoint} (commit {commit})")


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
    return bool(re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", model))


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
    if hub.offline:
        said.append("hub skipped (HF_HUB_OFFLINE)")
    else:
        try:
            with _hub_client(hub, client) as hub_client:
                return fetch_from_hub(model, revision, hub_client, cache)
        except (MetadataError, OSError) as exc:
            said.append(f"hub {hub.endpoint}: {exc}")
    cached = cache.commit_dir(model, revision)
    if cached is not None:
        try:
            return _facts_at(model, cached, cached.name, f"cache {cached}")
        except MetadataError as exc:
            said.append(f"cache: {exc}")
    else:
        said.append(f"no cached copy of revision {revision or 'main'!r}")
    return FactsUnavailable(model, "; ".join(said))


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
            token = _token(spec, environ)
            hub = HubSettings.from_environ(environ, token)
            key = (spec.model_path, spec.model_revision, spec.model_dir, hub.endpoint, hub.offline, token,
                   str(cache.root))
            if key not in memo:
                memo[key] = resolve_facts(spec.model_path, spec.model_revision, spec.model_dir, hub, cache, client)
            out[spec.host] = memo[key]
    return out
