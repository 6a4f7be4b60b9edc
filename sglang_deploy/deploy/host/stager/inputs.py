"""What comes from outside the weight stager, checked as data before the first byte is written:
the listing the Hub, a mirror or ``--files-json`` sends (every file name, blob id, sha256 and
size: a relative POSIX path without ``.``/``..``/empty segments, control characters or
backslashes; 40/64 lowercase hex; bounded sizes and counts; no duplicates), the arguments, the
revision's env file and a completion marker found in the store. Standard library only.
"""

from __future__ import annotations

import argparse
import re
import shlex
import urllib.parse

from sglang_deploy.deploy.host.stager.messages import CONTROLS, SECRETS, Refused, fail, scrub, shown

# Files in one snapshot: the Hub's own ceiling for a repository (its "repository limitations and
# recommendations": fewer than 100k files); a checkpoint lists tens to a few hundred
# (moonshotai/Kimi-K3: 96 weight shards).
MAX_FILES = 100_000
MAX_PATH = 1024          # bytes of a file name (UTF-8)
MAX_SEGMENT = 255        # bytes of one of its segments (a file system's name limit)
# One file: the Hub takes files of at most 50 GB (its upload limit); checkpoints shard at a few
# GB each. A mirror is not held to the Hub's limit: 16 TiB, over 300 times it.
MAX_SIZE = 1 << 44
# The model-info answer: about 250 bytes a file with its blob id, size and LFS sha256, so
# MAX_FILES files come to about 25 MB; not quite three times that.
MAX_LISTING = 64 << 20
HEX40, HEX64 = re.compile(r"[0-9a-f]{40}\Z"), re.compile(r"[0-9a-f]{64}\Z")
# huggingface_hub/utils/_validators.py REPO_ID_REGEX (ASCII), without "--" or ".." (validate_repo_id)
REPO_ID = re.compile(r"(?:[A-Za-z0-9_.-]{1,96}/)?[A-Za-z0-9_.-]{1,96}\Z")


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
