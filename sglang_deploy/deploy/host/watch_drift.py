"""Drift against the deployed revision, on the GPU host (a module of deploy/host/watch.py, shipped
beside it: deploy/watching.py SCRIPTS): the unit's state, the staged copies' sha256 against the
live unit, env file and nccl.conf, the running process's argv against the staged unit's
``ExecStart``, the SGLang installed in the revision's venv against its ``version`` file, and a
slice of the served snapshot re-hashed per run. Standard library only, and the rules' zip
(``sglang_deploy.hostrules``) that watch.py puts on sys.path.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import time
from typing import TYPE_CHECKING, Any

from sglang_deploy.hostrules.metrics import DRIFT_KEYS

if TYPE_CHECKING or __package__:  # from a checkout (the tests, the type check): the package's module
    from .watch_io import MAX_FILE, load_json_file, read_bytes, read_small, run, sha256_of, write_atomic
else:  # on the host: the file beside it, on sys.path (watch.py put its folder there)
    from watch_io import MAX_FILE, load_json_file, read_bytes, read_small, run, sha256_of, write_atomic

VERSION_TEXT = re.compile(r"[0-9A-Za-z.+!-]{1,64}\Z")
FILE_NAMES = {"unit": "sglang.service", "env": "sglang.env", "nccl_conf": "nccl.conf"}  # lifecycle/revision.py


# -- the unit and the running process ----------------------------------------------------


def unit_state(unit: str) -> dict:
    _, out = run(["systemctl", "show", "-p", "ActiveState", "-p", "SubState", "-p", "MainPID", unit], 10)
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    pid = props.get("MainPID", "")
    return {"active": props.get("ActiveState", ""), "sub": props.get("SubState", ""),
            "pid": int(pid) if pid.isdigit() and int(pid) > 0 else None}


_SAFE_WORD = re.compile(r"[A-Za-z0-9_./:=,@+-]+\Z")  # unitsyntax._EXEC_SAFE


def exec_start_words(unit_text: str) -> list[str]:
    """The argv of the unit's ``ExecStart=`` in the form the deploy writes it
    (sglang_deploy/plan/render.py ``exec_lines``, sglang_deploy/unitsyntax.py ``exec_quote``):
    backslash-newline continuations; words either plain (the characters of ``_SAFE_WORD``), a
    lone ``\\;`` or double-quoted with ``\\\\``, ``\\"``, ``%%`` and ``$$`` inside (systemd.service(5),
    "Command lines"). Anything else raises ValueError: it is not what the deploy wrote."""
    lines = unit_text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("ExecStart=")]
    if len(starts) != 1:
        raise ValueError(f"{len(starts)} ExecStart= lines")
    i = starts[0]
    text = lines[i][len("ExecStart="):]
    while text.endswith("\\") and i + 1 < len(lines):
        i += 1
        text = text[:-1] + " " + lines[i]
    words: list[str] = []
    pos, n = 0, len(text)
    while pos < n:
        if text[pos] in " \t":
            pos += 1
            continue
        if text[pos] == '"':
            pos += 1
            out = []
            while True:
                if pos >= n:
                    raise ValueError("an unterminated quote")
                c = text[pos]
                if c == '"':
                    pos += 1
                    break
                if c == "\\" and pos + 1 < n and text[pos + 1] in '\\"':
                    out.append(text[pos + 1])
                    pos += 2
                elif c in "%$" and pos + 1 < n and text[pos + 1] == c:
                    out.append(c)
                    pos += 2
                elif c in "\\%$":
                    raise ValueError(f"{c!r} unescaped in a quoted word")
                else:
                    out.append(c)
                    pos += 1
            if pos < n and text[pos] not in " \t":
                raise ValueError("a quoted word runs into another")
            words.append("".join(out))
            continue
        end = pos
        while end < n and text[end] not in " \t":
            end += 1
        word = text[pos:end]
        if word == "\\;":
            words.append(";")
        elif _SAFE_WORD.match(word):
            words.append(word)
        else:
            raise ValueError(f"the word {word[:40]!r} is not in the deploy's quoting")
        pos = end
    if not words or not words[0].startswith("/"):
        raise ValueError("the command is not an absolute path")
    return words


def proc_cmdline(pid: int) -> list[str] | None:
    data = read_bytes(f"/proc/{pid}/cmdline", 1 << 20)
    if data is None:
        try:  # /proc files are not regular files for fstat's S_ISREG on every kernel: read plainly
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                data = fh.read(1 << 20)
        except OSError:
            return None
    return [w.decode("utf-8", "surrogateescape") for w in data.split(b"\0")[:-1]] if data else None


_NOT_VERSION_BYTE = re.compile(rb"[^0-9A-Za-z.+!-]")  # VERSION_TEXT's characters


def printable_version(raw: bytes) -> str:
    """A version as a dist-info folder's name or its METADATA spells it, as bytes (a name need not
    be UTF-8: os.fsencode gives back the bytes the file system holds), in VERSION_TEXT's characters
    and at most 64 of them: any other byte reads as ``?``. Such a name can never equal the
    revision's version (which VERSION_TEXT admits), so it reads as a mismatch, and what the
    history, the state and the metrics name is printable ASCII."""
    return _NOT_VERSION_BYTE.sub(b"?", raw[:64]).decode("ascii")


def installed_version(venvs_dir: str, version: str) -> str | None:
    """The SGLang installed in ``<venvs_dir>/sglang-<version>``: its dist-info's METADATA
    ``Version`` (what importlib.metadata reads), the folder name when METADATA has none; several
    dist-info folders or a name and a METADATA that disagree read as ``<a>+<b>``-style mismatch."""
    found = sorted(glob.glob(os.path.join(glob.escape(venvs_dir), f"sglang-{glob.escape(version)}", "lib",
                                          "python3*", "site-packages", "sglang-*.dist-info")))[:4]
    seen: list[str] = []
    for d in found:
        name_version = os.fsencode(os.path.basename(d))[len("sglang-"):-len(".dist-info")]
        meta = read_bytes(os.path.join(d, "METADATA"), 1 << 20) or b""
        m = re.search(rb"^Version:[ \t]*(\S+)[ \t]*$", meta, re.M)
        for v in (printable_version(name_version), printable_version(m.group(1)) if m else None):
            if v and v not in seen:
                seen.append(v)
    if not seen:
        return None
    return seen[0] if len(seen) == 1 else ",".join(seen)


# -- drift ----------------------------------------------------------------------------


def drift_checks(cfg: dict, ref: str | None, unit: dict, notes: list[str]) -> tuple[dict, str | None]:
    """(drift flags, installed SGLang version)."""
    drift = dict.fromkeys(DRIFT_KEYS, False)
    if ref is None:
        notes.append("no deployed revision to compare with")
        return drift, None
    rdir = os.path.join(cfg["state_dir"], "revisions", ref)
    for key, name in FILE_NAMES.items():
        staged = sha256_of(os.path.join(rdir, name))
        if staged is None:
            notes.append(f"{key}: revision {ref} has no staged copy to compare with")
            continue
        drift[key] = sha256_of(cfg["live"][key]) != staged
    staged_unit = read_bytes(os.path.join(rdir, FILE_NAMES["unit"]), MAX_FILE)
    if unit["pid"] is not None and staged_unit is not None:
        try:
            expected = exec_start_words(staged_unit.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            notes.append(f"argv: the staged unit's ExecStart cannot be read ({exc})")
        else:
            running = proc_cmdline(unit["pid"])
            if running is None:
                notes.append("argv: the server's command line cannot be read")
            else:
                drift["argv"] = running != expected
    version = read_small(os.path.join(rdir, "version"), 128)
    installed = None
    if version and VERSION_TEXT.match(version):
        installed = installed_version(cfg["venvs_dir"], version)
        drift["sglang_version"] = installed != version
    else:
        notes.append(f"sglang_version: revision {ref} records no version")
    return drift, installed


def weights_check(cfg: dict, deadline: float, notes: list[str]) -> bool:
    """A slice of the served snapshot re-hashed (stage_weights.py --verify-served with a byte
    budget, from where the last run stopped); True while a file found bad has not been found good
    since. The cursor file holds the snapshot, the next file and the bad files, all data."""
    budget = cfg["verify_weights_bytes"]
    script = os.path.join(cfg["watch_dir"], "stage_weights.py")
    cursor_path = os.path.join(cfg["watch_dir"], "weights-cursor.json")
    if budget <= 0:
        return False
    cursor: Any
    try:
        cursor = load_json_file(cursor_path, 1 << 20)
    except (ValueError, UnicodeDecodeError, RecursionError):
        cursor = {}
    if not isinstance(cursor, dict):
        cursor = {}
    start = cursor.get("next") if isinstance(cursor.get("next"), str) else ""
    bad: dict[str, str] = cursor["bad"] if isinstance(cursor.get("bad"), dict) else {}
    seconds = max(5.0, deadline - time.monotonic())
    code, out = run([sys.executable, "-I", script, "--host", "localhost", "--verify-served", "--state-dir",
                     cfg["state_dir"], "--verify-from", start, "--verify-budget-bytes", str(budget),
                     "--verify-deadline-s", f"{seconds:.0f}"], seconds + 5)
    result: Any
    try:
        result = json.loads(out.strip().splitlines()[-1]) if code == 0 else None
    except (ValueError, IndexError):
        result = None
    if not isinstance(result, dict):
        notes.append("weights: the re-hash did not answer")
        return bool(bad)
    if result.get("served") is None:
        return False
    if result.get("served") != cursor.get("served"):
        bad = {}
    for path in result.get("checked") or []:
        if isinstance(path, str):
            bad.pop(path, None)
    for entry in result.get("bad") or []:
        if isinstance(entry, list) and len(entry) == 2 and all(isinstance(x, str) for x in entry):
            bad[entry[0][:1024]] = entry[1][:300]
    if result.get("error"):
        notes.append(f"weights: {str(result['error'])[:200]}")
    new = {"served": result.get("served"), "next": result.get("next") or "", "bad": dict(list(bad.items())[:1000])}
    write_atomic(cursor_path, json.dumps(new, sort_keys=True).encode(), 0o600)
    for path, problem in list(bad.items())[:3]:
        notes.append(f"weights: {path}: {problem}")
    return bool(bad)
