"""Where a host's model weights come from, and where they live on it: the model store.

Pure: the settings (``sglang_model_source``, ``sglang_model_store``, ...), the store's
layout and the disk arithmetic. The glue that resolves a revision to a commit, checks the
disk and downloads, syncs or checks the files is ``sglang_deploy/deploy/weights.py`` and its host script
``sglang_deploy/deploy/host/stage_weights.py``.

The store is a Hugging Face cache directory (``huggingface_hub.constants.HF_HUB_CACHE``
layout, ``huggingface_hub/file_download.py``: ``models--{org}--{name}/{blobs,refs,snapshots/
<commit>}``), so ``hf_hub_download(cache_dir=store)`` fills it, ``huggingface-cli scan-cache``
lists it, and SGLang loads a snapshot directory like any local checkpoint.

Sources:

- ``hub``: downloaded on the host, pinned to the commit the revision resolves to, verified,
  then marked complete; the unit serves the snapshot with ``HF_HUB_OFFLINE=1``.
- ``controller:/PATH``: a checkpoint directory on the controller, copied into the store
  (as snapshot ``local-<digest of the file list>``), verified by size and sha256.
- ``host``: ``sglang_model`` is a directory already on the host: only checked before the stop.
- ``server``: SGLang downloads the model itself when it starts (the old behaviour; the old
  server is already stopped then, so the download is downtime).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlsplit

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.settings import DEFAULTS
from sglang_deploy.plan.spec_checks import shown
from sglang_deploy.unitsyntax import ControlCharacter, reject_control
from sglang_deploy.untrusted import redact_url

SOURCES = ("hub", "server", "host", "controller:/PATH")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
DEFAULT_ENDPOINT = "https://huggingface.co"  # huggingface_hub.constants.ENDPOINT
# A Hub repo id: huggingface_hub/utils/_validators.py REPO_ID_REGEX and validate_repo_id: one
# optional namespace, ASCII letters, digits, '_', '-', '.', each part starting and ending with a
# letter or digit ('\b' around [\w\-.]), at most 96 characters a part, no '--' or '..', not
# ending in '.git'. So '.', '..' and 'a/..' are never ids (they would name another directory).
_REPO_ID = re.compile(r"(?:\b[\w\-.]{1,96}\b/)?\b[\w\-.]{1,96}\b", re.ASCII)
# A revision: a branch, tag, commit or 'refs/pr/N'; a git ref name has no empty, '.' or '..'
# part (git's check_refname_format), no control characters or spaces; bounded.
_REVISION_PART = re.compile(r"[A-Za-z0-9_.\-]+")
MAX_REVISION = 256
# System directories: a store there, or one that holds one of them, would be owned by the
# service user and pruned; a store under the first group is refused too.
_SYSTEM_TREES = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/boot", "/dev", "/proc", "/sys", "/run", "/var/run",
                 "/var/lock")
_SYSTEM_DIRS = (*_SYSTEM_TREES, "/usr/local", "/usr/local/bin", "/usr/local/lib", "/usr/local/sbin",
                "/var", "/var/lib", "/var/log", "/var/cache", "/var/tmp", "/var/spool", "/var/mail", "/var/opt",
                "/root", "/home", "/tmp", "/opt", "/srv", "/mnt", "/media", "/snap")
_PATH = re.compile(r"^/[^\s\"'\\$%;]*$")
#: Directory, inside a repo folder of the store, holding one marker per verified snapshot.
MARKER_DIR = ".sglang-deploy-complete"


@dataclass(frozen=True)
class WeightsSettings:
    """The inventory's say on the weights (validated; no I/O)."""

    source: str  # "hub", "server", "host" or "controller"
    revision: str  # branch, tag or commit (hub only)
    store: str
    margin_bytes: int
    keep: int
    controller_dir: str | None = None  # source "controller": the directory on the controller
    verify: bool = False  # sglang_weights_verify


@dataclass(frozen=True)
class Weights:
    """What the plan does with the weights on one host."""

    source: str
    model: str  # the id (or path) the inventory names: the served model name
    revision: str | None
    commit: str | None  # hub: the resolved commit; controller: the snapshot's content digest
    store: str
    origin: str  # in words, for the plan, --explain and the unit comment
    margin_bytes: int
    keep: int
    controller_dir: str | None = None
    verify: bool = False  # re-hash the served snapshot on every deploy (not part of the revision)

    @property
    def staged(self) -> bool:
        """Whether the deploy puts the weights on the host before the stop (and the unit serves them offline)."""
        return self.source in ("hub", "controller") and self.commit is not None

    @property
    def repo_dir(self) -> str:
        return f"{self.store}/{repo_folder_name(self.model)}"

    @property
    def snapshot_dir(self) -> str:
        """What ``--model-path`` names: the verified snapshot (a plain directory path for ``host``)."""
        if self.source == "host" or not self.staged:
            return self.model
        return f"{self.repo_dir}/snapshots/{self.commit}"

    @property
    def marker(self) -> str:
        """Written only after every file of the snapshot was verified."""
        return f"{self.repo_dir}/{MARKER_DIR}/{self.commit}"

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "model": self.model, "revision": self.revision, "commit": self.commit,
                "store": self.store, "model_path": self.snapshot_dir, "origin": self.origin,
                "staged_before_stop": self.staged or self.source == "host"}


def repo_folder_name(model: str) -> str:
    """``models--org--name``: huggingface_hub.file_download.repo_folder_name for a model repo."""
    return "--".join(["models", *model.split("/")])


def repo_id_problem(model: Any) -> str | None:
    """Why ``model`` is not a Hugging Face model id (huggingface_hub validate_repo_id), or None."""
    if not isinstance(model, str):
        return "not a string"
    if model.count("/") > 1 or not _REPO_ID.fullmatch(model):
        return ("not a Hugging Face model id ([org/]name: letters, digits, '_', '-', '.', each part starting and "
                "ending with a letter or digit, at most 96 characters a part)")
    if "--" in model or ".." in model or model.endswith(".git"):
        return "not a Hugging Face model id (no '--' or '..', not ending in '.git')"
    return None


def revision_problem(revision: Any) -> str | None:
    """Why ``revision`` is not a branch, tag or commit name, or None: '/'-separated parts of
    letters, digits, '_', '-', '.', none empty, '.' or '..', at most MAX_REVISION characters."""
    if not isinstance(revision, str) or not revision:
        return "not a branch, tag or commit name"
    if len(revision) > MAX_REVISION:
        return f"longer than {MAX_REVISION} characters"
    parts = revision.split("/")
    if not all(_REVISION_PART.fullmatch(p) and p not in (".", "..") for p in parts) or ".." in revision:
        return ("not a branch, tag or commit name ('/'-separated parts of letters, digits, '_', '-', '.'; no "
                "empty, '.' or '..' part)")
    return None


def store_problem(store: Any) -> str | None:
    """Why ``store`` cannot be the model store, or None: an absolute, normal path (no '.', '..' or
    empty part) that is not a system directory, nor a parent of one, nor inside /etc, /usr, ..."""
    if not isinstance(store, str) or not _PATH.match(store) or any(ord(c) < 0x20 or ord(c) == 0x7F for c in store):
        return "must be an absolute path without spaces, quotes, '$', '%' or ';'"
    path = store[:-1] if store.endswith("/") and len(store) > 1 else store
    parts = path.split("/")[1:]
    if path == "/" or any(p in ("", ".", "..") for p in parts):
        return "must be a normal absolute path below / (no empty, '.' or '..' part)"
    for system in _SYSTEM_DIRS:
        if path == system or system.startswith(path + "/"):
            return f"is the system directory {system} or holds it; the store is a directory of its own"
    tree = next((t for t in _SYSTEM_TREES if path.startswith(t + "/")), None)
    if tree is None and parts[0].startswith("lib"):
        tree = "/" + parts[0]
    if tree is not None:
        return f"is inside the system directory {tree}; the store is a directory of its own"
    return None


def endpoint_key(url: str) -> tuple[str, str, int | None, str]:
    """A Hub endpoint for comparison: scheme, host, port (the scheme's default filled in) and path,
    without credentials or a trailing slash."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return ("", url.strip(), None, "")
    scheme = parts.scheme.lower()
    port = port if port is not None else {"http": 80, "https": 443}.get(scheme)
    return (scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/"))


def is_local_path(model: str) -> bool:
    return model.startswith("/")


def weights_settings(host: str, data: Mapping[str, Any], model: str) -> WeightsSettings:
    """Validate the weights keys of one host's data (``model``: ``sglang_model``, already checked)."""
    raw = data.get("sglang_model_source")
    default = "host" if is_local_path(model) else "hub"
    source = default if raw is None else raw
    if not isinstance(source, str) or not source:
        raise PlanError(host, "sglang_model_source", f"must be one of {', '.join(SOURCES)}, got {shown(raw)}")
    _text(host, "sglang_model_source", source)
    controller_dir = None
    if source.startswith("controller:"):
        controller_dir = source.split(":", 1)[1].rstrip("/")
        if not _PATH.match(controller_dir) or controller_dir == "":
            raise PlanError(host, "sglang_model_source", "controller: needs an absolute path without spaces or "
                            f"quotes (a checkpoint directory on the controller), got {controller_dir!r}")
        source = "controller"
    elif source not in ("hub", "server", "host"):
        raise PlanError(host, "sglang_model_source", f"must be one of {', '.join(SOURCES)}, got {source!r}")
    if source == "host" and not is_local_path(model):
        raise PlanError(host, "sglang_model_source", f"'host' serves a directory already on the host: "
                        f"sglang_model must be its absolute path, got {model!r}")
    if source in ("hub", "controller") and is_local_path(model):
        raise PlanError(host, "sglang_model", f"is a path; source {source!r} needs the model's Hub id "
                        "(the served model name and the store's folder), or sglang_model_source: host")
    if source in ("hub", "controller") and (problem := repo_id_problem(model)):
        raise PlanError(host, "sglang_model", f"{shown(model)}: {problem}")
    revision = data.get("sglang_model_revision") or "main"
    if problem := revision_problem(revision):
        raise PlanError(host, "sglang_model_revision", f"must be a branch, tag or commit: {problem}, got "
                        f"{shown(revision)}")
    store = data.get("sglang_model_store", DEFAULTS["sglang_model_store"])
    if problem := store_problem(store):
        raise PlanError(host, "sglang_model_store", f"{problem}, got {shown(store)}")
    margin = data.get("sglang_model_disk_margin_mib", DEFAULTS["sglang_model_disk_margin_mib"])
    if isinstance(margin, bool) or not isinstance(margin, int) or margin < 0:
        raise PlanError(host, "sglang_model_disk_margin_mib", f"must be an integer >= 0, got {shown(margin)}")
    keep = data.get("sglang_model_keep", DEFAULTS["sglang_model_keep"])
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 2:
        raise PlanError(host, "sglang_model_keep", f"must be an integer >= 2 (the running and the previous "
                        f"revision's snapshots), got {shown(keep)}")
    verify = data.get("sglang_weights_verify", DEFAULTS["sglang_weights_verify"])
    if not isinstance(verify, bool):
        raise PlanError(host, "sglang_weights_verify", f"must be true or false, got {shown(verify)}")
    return WeightsSettings(source=source, revision=revision, store=store.rstrip("/"), margin_bytes=margin * 2 ** 20,
                           keep=keep, controller_dir=controller_dir, verify=verify)


def _text(host: str, key: str, value: str) -> None:
    try:
        reject_control(value)
    except ControlCharacter as exc:
        raise PlanError(host, key, f"contains a control character ({exc.char!r})") from None


def plan_weights(host: str, model: str, ws: WeightsSettings, commit: str | None, endpoint: str | None) -> Weights:
    """The weights part of a plan. ``commit``: for ``hub``, the commit the revision resolved to (the
    glue asks the Hub; a 40-hex revision is its own commit); for ``controller``, the digest of the
    directory's file list. Without it a staged source plans as the server's own download, and the
    deploy (which must have it) stops the host before any change."""
    if ws.source == "hub" and commit is None and COMMIT.match(ws.revision):
        commit = ws.revision
    where = redact_url(endpoint or DEFAULT_ENDPOINT)
    if ws.source == "hub":
        origin = (f"the Hub at {where}, {model} revision {ws.revision}" +
                  (f" (commit {commit})" if commit and commit != ws.revision else "") +
                  (f", downloaded into {ws.store} and verified before the old server stops" if commit else
                   ": commit not resolved here, so no staging is planned (a deploy resolves it or stops the host)"))
    elif ws.source == "controller":
        origin = (f"the controller's directory {ws.controller_dir}, copied into {ws.store} and verified before the "
                  "old server stops" + ("" if commit else " (not read here: a deploy reads it)"))
    elif ws.source == "host":
        origin = f"the directory {model} already on the host (checked before the old server stops)"
    else:
        origin = (f"SGLang itself when it starts ({where}, revision {ws.revision}): the download happens after the "
                  "old server stopped (sglang_model_source: server)")
    return Weights(source=ws.source, model=model, revision=ws.revision if ws.source == "hub" else None,
                   commit=commit, store=ws.store, origin=origin, margin_bytes=ws.margin_bytes, keep=ws.keep,
                   controller_dir=ws.controller_dir, verify=ws.verify)


def facts_commit(facts: Any) -> str | None:
    """The commit a model's facts (sglang_deploy.plan.modelfacts.ModelFacts) were read at, when they
    came from the Hub or its cache (a local directory has none unless a commit was pinned)."""
    revision = getattr(facts, "revision", None)
    return revision if isinstance(revision, str) and COMMIT.match(revision) else None


def host_endpoint(spec: Any) -> str | None:
    """The Hub a host (a ``spec.DeploySpec``) downloads from, as ``sglang_env.HF_ENDPOINT`` gives
    it (None: not set). One with credentials in it is a secret of the spec (kept for the root-only
    env file), so it is looked up there too; show it only through redact_url."""
    given = spec.extra_env.get("HF_ENDPOINT")
    if not given:
        given = next((ref.value for ref in spec.secrets if ref.kind == "inline" and ref.env_var == "HF_ENDPOINT"),
                     None)
    return given.strip().rstrip("/") if given else None
