"""Put one model snapshot into the host's model store, verified, before the old server stops.

Run on the host as root with the SGLang venv's python (SGLang depends on huggingface_hub, which
lists the files and builds the URLs and auth headers). The store is a Hugging Face cache
directory (huggingface_hub/file_download.py: ``blobs/<etag>``, ``snapshots/<commit>/<file>`` a
relative symlink to the blob, ``refs/<revision>``); a snapshot is marked complete (a JSON
marker) only after every file's size, and sha256 where the Hub's file list gives one (LFS
files), was checked. A download is resumed from its partial file with an HTTP Range request.

``--prune`` removes old snapshots (never one a staged revision serves) and unlinked blobs.

Exit codes: 0 ready, 3 not enough free disk (one line, nothing changed), 4 a file failed
verification twice, 5 the Hub or the file list failed, 6 a local directory (source host) is
not a checkpoint. The token and the endpoint are read from the revision's root-only env file
(``--env-file``), never from argv.
"""

from __future__ import annotations

import argparse
import glob
import grp
import hashlib
import json
import os
import pwd
import shlex
import shutil
import sys
import time
import urllib.error
import urllib.request

PASSED_ENV = ("HF_ENDPOINT", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
CHUNK = 1 << 20
PARTIAL = ".sglang-deploy-partial"


def say(message: str) -> None:
    print(f"weights: {message}", flush=True)


def fail(code: int, message: str) -> "NoReturn":  # noqa: F821
    print(message, file=sys.stderr, flush=True)
    sys.exit(code)


def read_env_file(path: str) -> dict[str, str]:
    """KEY=VALUE lines of a systemd EnvironmentFile (values quoted as sglang_deploy.unitsyntax.env_quote does)."""
    out: dict[str, str] = {}
    if not path:
        return out
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, _, raw = line.partition("=")
            words = shlex.split(raw) if raw else [""]
            out[key.strip()] = words[0] if words else ""
    return out


def free_bytes(path: str) -> int:
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe) or "/"
    return shutil.disk_usage(probe).free


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


class Store:
    def __init__(self, store: str, repo: str, commit: str):
        self.repo_dir = os.path.join(store, "models--" + repo.replace("/", "--"))
        self.blobs = os.path.join(self.repo_dir, "blobs")
        self.snapshot = os.path.join(self.repo_dir, "snapshots", commit)
        self.marker = os.path.join(self.repo_dir, ".sglang-deploy-complete", commit)

    def blob(self, name: str) -> str:
        return os.path.join(self.blobs, name)


def list_files(repo: str, commit: str, token: str | None) -> list[dict]:
    """The snapshot's files from the Hub's model info with file metadata (huggingface_hub
    HfApi.model_info(files_metadata=True): each sibling's size, blob id and, for an LFS file,
    sha256): path, size, the blob name the cache uses (the LFS sha256, else the git blob id)."""
    from huggingface_hub import HfApi

    info = HfApi(token=token).model_info(repo, revision=commit, files_metadata=True)
    files = []
    for sib in info.siblings or []:
        lfs = sib.lfs
        sha = (lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)) if lfs else None
        if sib.size is None or not (sha or sib.blob_id):
            raise ValueError(f"the Hub gave no size or blob id for {sib.rfilename}")
        files.append({"path": sib.rfilename, "size": int(sib.size), "sha256": sha, "blob": sha or sib.blob_id})
    return files


def quick_check(store: Store) -> str | None:
    """None when the marker's files are all there with the size and mtime they had when verified."""
    try:
        with open(store.marker, encoding="utf-8") as fh:
            recorded = json.load(fh)["files"]
    except (OSError, ValueError, KeyError):
        return "no marker"
    for path, (size, mtime_ns) in recorded.items():
        try:
            st = os.stat(os.path.join(store.snapshot, path))
        except OSError:
            return f"{path} is missing"
        if st.st_size != size or st.st_mtime_ns != mtime_ns:
            return f"{path} changed since it was verified"
    return None


def download(url: str, headers: dict[str, str], dest: str, size: int, stats: dict) -> None:
    """``url`` into ``dest``, resuming from what ``dest`` already holds (HTTP Range)."""
    have = os.path.getsize(dest) if os.path.exists(dest) else 0
    if have > size:
        os.remove(dest)
        have = 0
    if have == size:
        return
    req = urllib.request.Request(url)
    for key, value in headers.items():
        # The token must not follow a redirect to another host (the Hub sends LFS files to a CDN).
        (req.add_unredirected_header if key.lower() == "authorization" else req.add_header)(key, value)
    if have:
        req.add_header("Range", f"bytes={have}-")
    with urllib.request.urlopen(req, timeout=60) as resp:
        append = have and resp.status == 206
        if have and not append:
            say(f"the server ignored the Range request for {os.path.basename(dest)}: starting it over")
        elif have:
            say(f"resuming {os.path.basename(dest)} at byte {have}")
            stats["resumed"] += have
        with open(dest, "ab" if append else "wb") as out:
            for block in iter(lambda: resp.read(CHUNK), b""):
                out.write(block)
                stats["downloaded"] += len(block)


def verify(path: str, entry: dict) -> str | None:
    """None when ``path`` is the file the list describes, else what is wrong."""
    size = os.path.getsize(path)
    if size != entry["size"]:
        return f"size {size}, expected {entry['size']}"
    if entry["sha256"]:
        digest = sha256_of(path)
        if digest != entry["sha256"]:
            return f"sha256 {digest}, expected {entry['sha256']}"
    return None


def ensure_file(store: Store, entry: dict, fetch, stats: dict) -> None:
    """The verified blob of ``entry``, linked into the snapshot. ``fetch`` fills its partial file
    (None: the controller uploaded it already; then an incomplete one stops the host)."""
    blob = store.blob(entry["blob"])
    if os.path.exists(blob):
        problem = verify(blob, entry)
        if problem is None:
            link(store, entry)
            return
        say(f"{entry['path']}: the stored blob fails verification ({problem}): fetching it again")
        os.remove(blob)
    partial = blob + PARTIAL
    for attempt in (1, 2):
        if fetch is not None:
            fetch(entry, partial, stats)
        elif not os.path.exists(partial) or os.path.getsize(partial) != entry["size"]:
            have = os.path.getsize(partial) if os.path.exists(partial) else 0
            fail(7, f"{entry['path']}: {have} of {entry['size']} bytes arrived from the controller; deploy again to "
                    "resume")
        problem = verify(partial, entry)
        if problem is None:
            os.replace(partial, blob)
            link(store, entry)
            return
        os.remove(partial)
        say(f"{entry['path']}: the fetched file fails verification ({problem})" +
            (": fetching it again" if attempt == 1 and fetch is not None else ""))
        if fetch is None:
            break
    fail(4, f"{entry['path']} of {store.snapshot} failed verification; nothing is served from it")


def link(store: Store, entry: dict) -> None:
    """snapshots/<commit>/<path> -> ../../blobs/<blob>, relative, as huggingface_hub._create_symlink makes it."""
    dest = os.path.join(store.snapshot, entry["path"])
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    target = os.path.relpath(store.blob(entry["blob"]), os.path.dirname(dest))
    if os.path.islink(dest) and os.readlink(dest) == target:
        return
    if os.path.lexists(dest):
        os.remove(dest)
    os.symlink(target, dest)


def owner_ids(owner: str) -> tuple[int, int]:
    user, _, group = owner.partition(":")
    return pwd.getpwnam(user).pw_uid, grp.getgrnam(group or user).gr_gid


def chown_tree(path: str, owner: str) -> None:
    uid, gid = owner_ids(owner)
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)]:
            os.lchown(name, uid, gid)


def stage(args: argparse.Namespace) -> None:
    """The snapshot into the store: from the Hub, or (``--files-json``) from what the controller
    uploaded into the partial files (their list is the controller's, with every sha256)."""
    env = read_env_file(args.env_file)
    for key in PASSED_ENV:
        if env.get(key):
            os.environ[key] = env[key]
    os.environ.pop("HF_HUB_OFFLINE", None)
    token = env.get("HF_TOKEN") or os.environ.get("HF_TOKEN") or None
    store = Store(args.store, args.repo, args.commit)
    stale = quick_check(store)
    if stale is None:
        say(f"{args.repo} {args.commit} already in {args.store}, verified")
        if args.plan_only:
            print(json.dumps({"complete": True}))
        return
    if args.files_json:
        with open(args.files_json, encoding="utf-8") as fh:
            files, fetch = json.load(fh), None
    else:
        files, fetch = hub_files(args, token)
    check_disk(args, store, files)
    if args.plan_only:  # the controller's sync asks how much of each file is already here
        have = {}
        for f in files:
            blob = store.blob(f["blob"])
            have[f["blob"]] = -1 if os.path.exists(blob) else (
                os.path.getsize(blob + PARTIAL) if os.path.exists(blob + PARTIAL) else 0)
        print(json.dumps({"complete": False, "have": have}))
        return
    if os.path.exists(store.marker):
        say(f"the snapshot was verified before but {stale}: verifying every file again")
        os.remove(store.marker)
    os.makedirs(store.blobs, exist_ok=True)
    os.makedirs(store.snapshot, exist_ok=True)
    stats = {"downloaded": 0, "resumed": 0}
    t0 = time.time()
    for f in files:
        ensure_file(store, f, fetch, stats)
    if args.revision and args.revision != args.commit:
        os.makedirs(os.path.join(store.repo_dir, "refs"), exist_ok=True)
        with open(os.path.join(store.repo_dir, "refs", args.revision.replace("/", "%2F")), "w") as fh:
            fh.write(args.commit)
    write_marker(store, files, t0, stats)
    os.chown(args.store, *owner_ids(args.owner))
    chown_tree(store.repo_dir, args.owner)
    total = sum(f["size"] for f in files)
    say(f"{args.repo} {args.commit}: {len(files)} files, {total} bytes verified in {args.store} "
        f"({stats['downloaded']} downloaded, resumed after {stats['resumed']}, {time.time() - t0:.1f} s)")


def hub_files(args: argparse.Namespace, token: str | None):
    """The Hub's file list, and a fetch(entry, dest, stats) that downloads one file into ``dest``."""
    try:
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers
    except ImportError as exc:
        fail(5, f"huggingface_hub is not importable with {sys.executable} ({exc}); SGLang depends on it")
    try:
        files = list_files(args.repo, args.commit, token)
    except Exception as exc:  # noqa: BLE001 -- any Hub error ends here with one line
        fail(5, f"{args.host}: cannot list {args.repo} at {args.commit} on {os.environ.get('HF_ENDPOINT') or 'the Hub'}: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    headers = build_hf_headers(token=token)

    def fetch(entry: dict, dest: str, stats: dict) -> None:
        download(hf_hub_url(args.repo, entry["path"], revision=args.commit), headers, dest, entry["size"], stats)

    return files, fetch


def check_disk(args: argparse.Namespace, store: Store, files: list[dict]) -> None:
    """Stop (exit 3, one line, nothing written) unless the store's file system holds what is missing plus the margin."""
    total = sum(f["size"] for f in files)
    present = 0
    for f in files:
        blob = store.blob(f["blob"])
        if os.path.exists(blob):
            present += min(os.path.getsize(blob), f["size"])
        elif os.path.exists(blob + PARTIAL):
            present += min(os.path.getsize(blob + PARTIAL), f["size"])
    needed = max(0, total - present) + args.margin_bytes
    free = free_bytes(args.store)
    if free < needed:
        fail(3, f"{args.host}: sglang_model_store {args.store}: {needed} bytes needed ({needed / 2 ** 30:.2f} GiB: "
                f"{total - present} of the {total} bytes of {args.repo} not yet in the store, plus the "
                f"{args.margin_bytes}-byte margin), {free} bytes free ({free / 2 ** 30:.2f} GiB); nothing was changed")


def write_marker(store: Store, files: list[dict], t0: float, stats: dict) -> None:
    recorded = {}
    for f in files:
        st = os.stat(os.path.join(store.snapshot, f["path"]))
        recorded[f["path"]] = [st.st_size, st.st_mtime_ns]
    os.makedirs(os.path.dirname(store.marker), exist_ok=True)
    tmp = store.marker + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"files": recorded, "started_at": t0, "verified_at": time.time(),
                   "downloaded_bytes": stats["downloaded"]}, fh)
    os.replace(tmp, store.marker)


def check_dir(args: argparse.Namespace) -> None:
    """Source host: the directory must be a checkpoint SGLang can load offline."""
    if not os.path.isfile(os.path.join(args.check_dir, "config.json")):
        fail(6, f"{args.host}: sglang_model {args.check_dir}: no config.json there; nothing was changed")
    say(f"{args.check_dir} holds a checkpoint (config.json present)")


def _model_paths(state_dir: str) -> set[str]:
    """The --model-path of every revision staged on the host (the current and the previous one)."""
    paths = set()
    for name in glob.glob(os.path.join(state_dir, "revisions", "*", "argv.json")):
        try:
            with open(name, encoding="utf-8") as fh:
                argv = json.load(fh)
            paths.add(os.path.realpath(argv[argv.index("--model-path") + 1]))
        except (OSError, ValueError, IndexError):
            continue
    return paths


def prune(args: argparse.Namespace) -> None:
    """Per model folder of the store keep the ``--keep`` newest verified snapshots, and always
    those a staged revision serves (the running and the previous one); remove the rest, their
    markers and refs, and the blobs no remaining snapshot links to (partial downloads stay)."""
    protected = _model_paths(args.state_dir)
    for repo_dir in sorted(glob.glob(os.path.join(args.store, "models--*"))):
        snaps = glob.glob(os.path.join(repo_dir, "snapshots", "*"))
        marks = os.path.join(repo_dir, ".sglang-deploy-complete")

        def age(snap: str) -> float:
            mark = os.path.join(marks, os.path.basename(snap))
            return os.path.getmtime(mark) if os.path.exists(mark) else os.path.getmtime(snap)

        kept = [s for s in snaps if os.path.realpath(s) in protected]
        for snap in sorted(snaps, key=age, reverse=True):
            if snap in kept:
                continue
            if len(kept) < args.keep:
                kept.append(snap)
                continue
            commit = os.path.basename(snap)
            shutil.rmtree(snap)
            for extra in (os.path.join(marks, commit),):
                if os.path.exists(extra):
                    os.remove(extra)
            for ref in glob.glob(os.path.join(repo_dir, "refs", "*")):
                with open(ref, encoding="utf-8") as fh:
                    if fh.read().strip() == commit:
                        os.remove(ref)
            say(f"pruned {os.path.basename(repo_dir)} snapshot {commit}")
        linked = set()
        for snap in kept:
            for root, _, files in os.walk(snap):
                linked.update(os.path.realpath(os.path.join(root, f)) for f in files)
        for blob in glob.glob(os.path.join(repo_dir, "blobs", "*")):
            if not blob.endswith(PARTIAL) and os.path.realpath(blob) not in linked:
                os.remove(blob)


def main() -> None:
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
    parser.add_argument("--prune", action="store_true", help="prune old snapshots of --store")
    parser.add_argument("--state-dir", help="with --prune: the deploy's state directory (its staged revisions)")
    parser.add_argument("--keep", type=int, default=2)
    args = parser.parse_args()
    if args.prune:
        prune(args)
    elif args.check_dir:
        check_dir(args)
    else:
        stage(args)


if __name__ == "__main__":
    main()
