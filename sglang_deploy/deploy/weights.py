"""The weights' glue: resolve the revision to a commit on the controller, then put the snapshot
into the host's model store, verified, before the old server stops (sglang_deploy/deploy/host/stage_weights.py
on the host, with the SGLang venv's python). What to do is the core's (sglang_deploy.plan.weights).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from io import BytesIO
from pathlib import Path
from typing import Mapping

from pyinfra import logger
from pyinfra.api import StringCommand
from pyinfra.api.host import Host

from sglang_deploy.deploy.hostscript import embedded
from sglang_deploy.deploy.model_metadata import HubClient, HubSettings, MetadataError
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.caches import ALLOWANCE_BYTES, Caches
from sglang_deploy.plan.modelfacts import FactsLookup
from sglang_deploy.plan.spec import DeploySpec
from sglang_deploy.untrusted import redact_url
from sglang_deploy.plan.weights import COMMIT, DEFAULT_ENDPOINT, Weights, facts_commit, host_endpoint, plan_weights

STAGE_SCRIPT = Path(__file__).resolve().parent / "host" / "stage_weights.py"


def endpoint(spec: DeploySpec) -> str:
    """The Hub the host downloads from: ``HF_ENDPOINT`` in ``sglang_env`` (a mirror, an air-gapped
    Hub; one with credentials is kept among the spec's secrets), else huggingface_hub's default
    (huggingface_hub.constants.ENDPOINT). Shown only through redact_url."""
    return host_endpoint(spec) or DEFAULT_ENDPOINT


def resolve_commit(spec: DeploySpec, token: str | None) -> str:
    """The commit ``sglang_model_revision`` names now, from the Hub's model-info API (the metadata
    client's ``model_info``, the call huggingface_hub.HfApi.model_info makes). A failure stops the
    host before any change, saying how to proceed."""
    ws = spec.weights
    assert ws is not None
    if COMMIT.match(ws.revision):
        return ws.revision
    base = endpoint(spec)
    hint = ("pin sglang_model_revision to a commit (40 hex digits), or set sglang_model_source: server to let "
            "SGLang download at start, after the old server stopped")
    try:
        with HubClient(HubSettings(endpoint=base, token=token)) as hub:
            commit, _ = hub.model_info(spec.model_path, ws.revision)
    except MetadataError as exc:
        raise PlanError(spec.host, "sglang_model_revision", f"cannot resolve {ws.revision!r} of {spec.model_path} "
                        f"on {redact_url(base)}: {exc}; {hint}") from None
    return commit


def weights_for(spec: DeploySpec, secrets: Mapping[str, str], facts: FactsLookup | None = None) -> Weights | None:
    """The host's weights, with the commit a deploy needs (None for a spec without weight settings):
    the commit the model's facts were read at (sglang_deploy/deploy/model_metadata.py resolved the revision
    already), else the Hub's answer for the revision."""
    ws = spec.weights
    if ws is None:
        return None
    commit = None
    if ws.source == "hub":
        commit = facts_commit(facts) or resolve_commit(spec, secrets.get("HF_TOKEN"))
    elif ws.source == "controller":
        commit = controller_commit(controller_files(spec.host, str(ws.controller_dir)))
    return plan_weights(spec.host, spec.model_path, ws, commit, endpoint(spec))


_LISTS: dict[tuple[str, tuple], list[dict]] = {}


def controller_files(host: str, directory: str) -> list[dict]:
    """Every file of a checkpoint directory on the controller with its size and sha256 (the blob
    name in the store); computed once per directory state (paths, sizes, mtimes) per run."""
    root = Path(directory)
    if not (root / "config.json").is_file():
        raise PlanError(host, "sglang_model_source", f"controller: {directory} has no config.json: not a checkpoint "
                        "directory on the controller")
    paths = sorted(p for p in root.rglob("*") if p.is_file() and not any(part.startswith(".") for part in
                                                                         p.relative_to(root).parts))
    key = (directory, tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in paths))
    if key not in _LISTS:
        files = []
        for p in paths:
            sha = file_sha256(p)
            files.append({"path": str(p.relative_to(root)), "size": p.stat().st_size, "sha256": sha, "blob": sha})
        _LISTS[key] = files
    return _LISTS[key]


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file on the controller, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def controller_commit(files: list[dict]) -> str:
    """The snapshot name of a controller directory: a digest of its file list (paths, sizes,
    sha256), 40 hex digits like a Hub commit, so changed files make a new snapshot and unit."""
    return hashlib.sha1(json.dumps(files, sort_keys=True).encode()).hexdigest()


def stage_command(weights: Weights, python: str, env_file: str, owner: str, host_name: str,
                  caches: Caches | None = None) -> str | None:
    """The host command that puts the plan's weights on the host (None: nothing to stage): the
    Hub's snapshot into the model store (free disk checked first; resumable; every file's size and
    sha256 verified; marked complete last), or a host directory checked.

    + python: the SGLang venv's python (it carries huggingface_hub)
    + env_file: the staged revision's root-only env file: HF_TOKEN and HF_ENDPOINT are read there
    + owner: ``user:group`` owning the store
    + caches: the version's compile caches, whose allowance (less what they hold) the disk check counts too
    """
    if weights.source == "host":
        return embedded(STAGE_SCRIPT, python, ["--host", host_name, "--check-dir", weights.model])
    if not weights.staged or weights.source != "hub":
        return None
    return embedded(STAGE_SCRIPT, python, [
        "--host", host_name, "--store", weights.store, "--repo", weights.model, "--commit", str(weights.commit),
        "--revision", weights.revision or "", "--env-file", env_file, "--margin-bytes", str(weights.margin_bytes),
        "--owner", owner, *(["--verify"] if weights.verify else []),
        *(["--cache-dir", caches.dir, "--cache-bytes", str(ALLOWANCE_BYTES)] if caches is not None else [])])


def prune_command(weights: Weights, state_dir: str, host_name: str) -> str | None:
    """After a passing gate: per model, the ``sglang_model_keep`` newest snapshots stay, and always
    those a staged revision (the running or the previous one) serves; None when nothing is staged."""
    if weights.source not in ("hub", "controller") or not weights.staged:
        return None
    return embedded(STAGE_SCRIPT, "python3", ["--host", host_name, "--prune", "--store", weights.store,
                                              "--state-dir", state_dir, "--keep", str(weights.keep)])


def run_callback(state, host: Host, command: str | None) -> bool:
    """Run a weights command on the host, its lines in the deploy's output (the host's failure
    line in red); False (the host fails) when it fails."""
    if command is None:
        return True
    ok, out, err = _sh(host, command)
    for line in out.splitlines():
        if line.strip():
            host.log(line)
    if not ok:
        for line in (err.strip() or "the weights command failed").splitlines():
            host.log_styled(line, fg="red", log_func=logger.error)
    return ok


class _Slice:
    """A file-like view of ``path`` from ``start`` to ``end``, read in chunks by the upload."""

    def __init__(self, path: Path, start: int, end: int):
        self.fh, self.start, self.end = path.open("rb"), start, end
        self.seek(0)

    def seek(self, offset: int, whence: int = 0) -> int:
        """Only from the slice's start (pyinfra rewinds an upload's source with seek(0))."""
        if whence != 0:
            raise OSError("a slice seeks from its start only")
        self.fh.seek(self.start + offset)
        self.left = self.end - self.start - offset
        return offset

    def tell(self) -> int:
        return self.end - self.start - self.left

    def read(self, size: int = -1) -> bytes:
        size = self.left if size is None or size < 0 else min(size, self.left)
        data = self.fh.read(size)
        self.left -= len(data)
        return data

    def close(self) -> None:
        self.fh.close()


SYNC_PIECE = 256 * 2 ** 20  # appended to the partial file one piece at a time: a cut costs one piece


def _sh(host: Host, command: str) -> tuple[bool, str, str]:
    ok, output = host.run_shell_command(StringCommand(command), print_output=False, print_input=False)
    return ok, "\n".join(output.stdout_lines), "\n".join(output.stderr_lines)


def sync_callback(state, host: Host, weights: Weights, python: str, owner: str) -> bool:
    """:func:`sync`; a failure fails the host with its one line (the old server keeps serving)."""
    try:
        return sync(host, weights, python, owner)
    except Exception as exc:  # noqa: BLE001 -- one line on the host's failure, never a traceback
        for line in str(exc).splitlines() or [type(exc).__name__]:
            host.log_styled(line, fg="red", log_func=logger.error)
        return False


def sync(host: Host, weights: Weights, python: str, owner: str) -> bool:
    """Copy a controller directory into the host's store over the host's own connection: the
    disk checked first (the host script, ``--plan-only``), every missing byte appended to the
    blob's partial file piece by piece (an interrupted copy resumes), then the host script
    verifies every sha256, links the snapshot and writes the marker."""
    files = controller_files(host.name, str(weights.controller_dir))
    ok, tmp, _ = _sh(host, "mktemp -d /tmp/sglang-sync.XXXXXXXX")
    tmp = tmp.strip()
    if not ok or not tmp.startswith("/tmp/sglang-sync."):
        raise RuntimeError("cannot make a temporary directory on the host")
    try:
        host.put_file(BytesIO(json.dumps(files).encode()), f"{tmp}/files.json", print_output=False,
                      print_input=False)
        args = ["--host", host.name, "--store", weights.store, "--repo", weights.model, "--commit",
                str(weights.commit), "--files-json", f"{tmp}/files.json", "--margin-bytes",
                str(weights.margin_bytes), "--owner", owner]
        ok, out, err = _sh(host, embedded(STAGE_SCRIPT, python, [*args, "--plan-only"]))
        if not ok:
            raise RuntimeError(err.strip() or out.strip() or "the host script failed")
        answer = json.loads(out.strip().splitlines()[-1])
        if not answer["complete"]:
            _upload_missing(host, weights, files, answer["have"], tmp, python, owner)
        ok, out, err = _sh(host, embedded(STAGE_SCRIPT, python, args))
        if not ok:
            raise RuntimeError(err.strip() or out.strip() or "the host script failed")
        for line in out.splitlines():
            host.log(line)
        return True
    finally:
        _sh(host, f"rm -rf {shlex.quote(tmp)}")


def _upload_missing(host: Host, weights: Weights, files: list[dict], have: dict, tmp: str, python: str,
                    owner: str) -> None:
    """Each file's missing bytes, piece by piece: uploaded into the private temporary directory,
    then appended by the host script (``--append-piece``), which opens the store's folders and the
    partial file without following links: the store belongs to the service user, and a shell's
    ``>>`` as root would follow a link planted there."""
    root = Path(str(weights.controller_dir))
    for f in files:
        done = have.get(f["blob"], 0)
        if done < 0 or done >= f["size"]:
            continue
        if done:
            host.log(f"weights: resuming {f['path']} at byte {done}")
        for start in range(done, f["size"], SYNC_PIECE):
            piece = _Slice(root / f["path"], start, min(f["size"], start + SYNC_PIECE))
            try:
                if not host.put_file(piece, f"{tmp}/piece", print_output=False, print_input=False):
                    raise RuntimeError(f"upload of {f['path']} failed at byte {start}")
            finally:
                piece.close()
            ok, out, err = _sh(host, embedded(STAGE_SCRIPT, python, [
                "--host", host.name, "--store", weights.store, "--repo", weights.model, "--commit",
                str(weights.commit), "--owner", owner, "--append-piece", f"{tmp}/piece", "--blob", f["blob"],
                "--offset", str(start)]))
            if not ok:
                raise RuntimeError(f"{f['path']}: {err.strip() or out.strip() or 'the append failed'}")
