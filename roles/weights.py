"""The weights' glue: resolve the revision to a commit on the controller, then put the snapshot
into the host's model store, verified, before the old server stops (roles/scripts/stage_weights.py
on the host, with the SGLang venv's python). What to do is the core's (sglang_deploy.weights).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import httpx
from pyinfra.api import operation

from roles.hostscript import embedded
from sglang_deploy.errors import PlanError
from sglang_deploy.modelfacts import FactsLookup
from sglang_deploy.spec import DeploySpec
from sglang_deploy.weights import COMMIT, DEFAULT_ENDPOINT, Weights, facts_commit, plan_weights

STAGE_SCRIPT = Path(__file__).resolve().parent / "scripts" / "stage_weights.py"
RESOLVE_TIMEOUT_S = 20.0


def endpoint(spec: DeploySpec) -> str:
    """The Hub the host downloads from: ``HF_ENDPOINT`` in ``sglang_env`` (a mirror, an air-gapped
    Hub), else huggingface_hub's default (huggingface_hub.constants.ENDPOINT)."""
    return (spec.extra_env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def resolve_commit(spec: DeploySpec, token: str | None) -> str:
    """The commit ``sglang_model_revision`` names now, from the Hub's model-info API (the call
    huggingface_hub.HfApi.model_info makes: ``GET /api/models/{repo}/revision/{revision}``, whose
    ``sha`` is the commit). A failure stops the host before any change, saying how to proceed."""
    ws = spec.weights
    assert ws is not None
    if COMMIT.match(ws.revision):
        return ws.revision
    base = endpoint(spec)
    url = f"{base}/api/models/{spec.model_path}/revision/{ws.revision}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    hint = ("pin sglang_model_revision to a commit (40 hex digits), or set sglang_model_source: server to let "
            "SGLang download at start, after the old server stopped")
    try:
        resp = httpx.get(url, headers=headers, timeout=RESOLVE_TIMEOUT_S, follow_redirects=True)
    except httpx.HTTPError as exc:
        raise PlanError(spec.host, "sglang_model_revision", f"cannot resolve {ws.revision!r} of {spec.model_path} "
                        f"on {base}: {type(exc).__name__}; {hint}") from None
    if resp.status_code != 200:
        why = {401: "unauthorized (a gated model needs sglang_secrets.hf_token)", 403: "forbidden (gated: accept "
               "its terms with the token's account)", 404: "no such model or revision"}.get(resp.status_code,
                                                                                      f"HTTP {resp.status_code}")
        raise PlanError(spec.host, "sglang_model_revision", f"cannot resolve {ws.revision!r} of {spec.model_path} "
                        f"on {base}: {why}; {hint}")
    try:
        sha = resp.json().get("sha")
    except ValueError:
        sha = None
    if not isinstance(sha, str) or not COMMIT.match(sha):
        raise PlanError(spec.host, "sglang_model_revision", f"{base} gave no commit for {ws.revision!r} of "
                        f"{spec.model_path}; {hint}")
    return sha


def weights_for(spec: DeploySpec, secrets: Mapping[str, str], facts: FactsLookup | None = None) -> Weights | None:
    """The host's weights, with the commit a deploy needs (None for a spec without weight settings):
    the commit the model's facts were read at (roles/model_metadata.py resolved the revision
    already), else the Hub's answer for the revision."""
    ws = spec.weights
    if ws is None:
        return None
    commit = None
    if ws.source == "hub":
        commit = facts_commit(facts) or resolve_commit(spec, secrets.get("HF_TOKEN"))
    elif ws.source == "controller":
        raise PlanError(spec.host, "sglang_model_source", "controller: sync is not implemented yet; use hub or host")
    return plan_weights(spec.host, spec.model_path, ws, commit, endpoint(spec))


@operation(is_idempotent=False)
def stage_weights(weights: Weights, python: str, env_file: str, owner: str, host_name: str):
    """
    Put the plan's weights on the host before the old server stops: the Hub's snapshot into the
    model store (free disk checked first; resumable; every file's size and sha256 verified;
    marked complete last), or a host directory checked. A failure stops the host with one line.

    + weights: the plan's weights (``sglang_deploy.weights.Weights``)
    + python: the SGLang venv's python (it carries huggingface_hub)
    + env_file: the staged revision's root-only env file: HF_TOKEN and HF_ENDPOINT are read there
    + owner: ``user:group`` owning the store
    + host_name: the inventory name, for the messages
    """
    if weights.source == "host":
        yield embedded(STAGE_SCRIPT, python, ["--host", host_name, "--check-dir", weights.model])
        return
    if not weights.staged:
        return
    yield embedded(STAGE_SCRIPT, python, [
        "--host", host_name, "--store", weights.store, "--repo", weights.model, "--commit", str(weights.commit),
        "--revision", weights.revision or "", "--env-file", env_file, "--margin-bytes", str(weights.margin_bytes),
        "--owner", owner])




@operation(is_idempotent=False)
def prune_weights(weights: Weights, state_dir: str, host_name: str):
    """
    Prune the model store after a passing gate: per model, the ``sglang_model_keep`` newest
    snapshots stay, and always those a staged revision (the running or the previous one) serves.

    + weights: the plan's weights (its store and keep count)
    + state_dir: the deploy's state directory on the host (its staged revisions' argv)
    """
    if weights.source not in ("hub", "controller"):
        return
    yield embedded(STAGE_SCRIPT, "python3", ["--host", host_name, "--prune", "--store", weights.store,
                                             "--state-dir", state_dir, "--keep", str(weights.keep)])
