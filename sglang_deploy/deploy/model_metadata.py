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

Sources 1 and 3 read files (model_files.py), source 2 asks the Hub (model_hub.py); this module
tries them in order, per host.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol

import httpx

from sglang_deploy.deploy.model_files import MetadataError, ModelCache, cache_root, facts_at, read_directory
from sglang_deploy.deploy.model_hub import TIMEOUT, HubClient, HubSettings, fetch_from_hub
from sglang_deploy.deploy.secrets import read_secrets
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.modelfacts import FactsLookup, FactsUnavailable, ModelFacts
from sglang_deploy.plan.spec import DeploySpec, build_spec
from sglang_deploy.untrusted import Scrubber, printable, redact_url, url_secrets
from sglang_deploy.plan.weights import (COMMIT, DEFAULT_ENDPOINT, endpoint_key, host_endpoint, repo_id_problem,
                                        revision_problem)


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
            return facts_at(model, cached, cached.name, f"cache {cached}")
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
