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
import grp
import json
import os
import pwd
import shutil
import stat
import sys
import time
import urllib.parse

# Its parts (sglang_deploy/deploy/host/stager/, standard library only) travel with it: the deploy
# runs it as a zipapp that holds them (sglang_deploy/deploy/hostscript.py embedded), the continuous
# check's copy has them beside it as stager.zip (deploy/watching.py). From a checkout (the tests)
# the package itself is importable.
_PARTS_ZIP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stager.zip")
if os.path.isfile(_PARTS_ZIP):
    sys.path.insert(0, _PARTS_ZIP)
from sglang_deploy.deploy.host.stager.hub import Client, download, fetch_listing, http_problem  # noqa: E402
from sglang_deploy.deploy.host.stager.inputs import (HEX64, MAX_LISTING, check_args, check_files,  # noqa: E402
                                                     check_token, read_env_file, split_endpoint)
from sglang_deploy.deploy.host.stager.messages import SECRETS, Refused, fail, say, shown  # noqa: E402
from sglang_deploy.deploy.host.stager.prune import prune  # noqa: E402
from sglang_deploy.deploy.host.stager.rehash import verify_served, verify_snapshot  # noqa: E402
from sglang_deploy.deploy.host.stager.store import (CHUNK, MARKS, PARTIAL, Store, ensure_file,  # noqa: E402
                                                    quick_check, write_all)

PASSED_ENV = ("HF_ENDPOINT", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
DEFAULT_ENDPOINT = "https://huggingface.co"  # huggingface_hub/constants.py ENDPOINT


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
                    write_all(fd, block)
        finally:
            os.close(fd)
    finally:
        store.close()


def _size(path: str) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


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
    """Stop (exit 3, one line, nothing written) unless the store's file system holds what is missing plus the
    margin, and room for the SGLang version's compile caches (``--cache-dir``: what it lacks of ``--cache-bytes``)."""
    total = sum(f["size"] for f in files)
    present = 0
    for f in files:
        blob = os.path.join(store.blobs, f["blob"])
        present += min(_size(blob) or _size(blob + PARTIAL), f["size"])
    needed = max(0, total - present) + args.margin_bytes
    cache = max(0, args.cache_bytes - _tree_bytes(args.cache_dir)) if args.cache_dir else 0
    what = (f"{total - present} of the {total} bytes of {args.repo} not yet in the store, plus the "
            f"{args.margin_bytes}-byte margin")
    probe, cache_probe = _existing(args.store), _existing(args.cache_dir or args.store)
    if cache and os.stat(probe).st_dev == os.stat(cache_probe).st_dev:
        needed += cache
        what += f", plus {cache} bytes for the compile caches in {args.cache_dir}"
    elif cache and shutil.disk_usage(cache_probe).free < cache:
        free = shutil.disk_usage(cache_probe).free
        fail(3, f"{args.host}: sglang_cache_dir {args.cache_dir}: {cache} bytes needed for the compile caches "
                f"({cache / 2 ** 30:.2f} GiB), {free} bytes free ({free / 2 ** 30:.2f} GiB); nothing was changed")
    free = shutil.disk_usage(probe).free
    if free < needed:
        fail(3, f"{args.host}: sglang_model_store {args.store}: {needed} bytes needed ({needed / 2 ** 30:.2f} GiB: "
                f"{what}), {free} bytes free ({free / 2 ** 30:.2f} GiB); nothing was changed")


def _existing(path: str) -> str:
    """``path`` or its nearest existing parent."""
    while not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    return path


def _tree_bytes(path: str) -> int:
    """The bytes of the regular files under ``path`` (links not followed; 0 when it is missing)."""
    total = 0
    for top, _, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total


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
    parser.add_argument("--cache-dir", default="", help="the SGLang version's compile-cache directory (disk check)")
    parser.add_argument("--cache-bytes", type=int, default=0,
                        help="room the disk check keeps for --cache-dir, less what it already holds")
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
