"""The files the gate reads and writes: the shipped prompts, the plan to expect
(``sglang-deploy plan --json``), the baseline history (JSON lines) and the options file
the deploy hands to the gate on a GPU host.

Every file named on the command line is read through ``sglang_deploy.untrusted``: a regular
file only (a FIFO or a device is refused, never read, so ``check`` cannot block on one),
size-capped, strict JSON (no NaN, nesting capped); an API key file follows
``untrusted.check_token``."""

from __future__ import annotations

import collections
import errno
import importlib.resources
import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import yaml

from sglang_deploy.untrusted import (MAX_METADATA_BYTES, MAX_SECRET_BYTES, UntrustedInput, check_token, load_json,
                                     read_text_file)
from sglang_deploy.gate import verdict
from sglang_deploy.gate.errors import GateError
from sglang_deploy.gate.options import CheckOptions, HostRefs, from_file_dict
from sglang_deploy.gate.scrub import redact_url

if TYPE_CHECKING:
    from importlib.abc import Traversable  # importlib.resources.abc from 3.11 on

# through importlib.resources: the gate also runs from a zipapp on the GPU host (sglang_deploy/deploy/gatezip.py)
PROMPTS_FILE = importlib.resources.files("sglang_deploy") / "data" / "gate_prompts.yaml"


def load_prompts(path: Path | Traversable = PROMPTS_FILE) -> list[str]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    prompts = [str(p["text"]).strip() for p in (data or {}).get("prompts") or []]
    if not prompts:
        raise ValueError(f"{path.name} holds no prompts")
    return prompts


#: What every object of ``sglang-deploy plan --json`` carries (``sglang_deploy/plan/output.py``, ``plan_json``)
#: and the gate reads: a dict without them is not a plan, and comparing with it would
#: find no difference at all.
PLAN_FIELDS: dict[str, type | tuple[type, ...]] = {"host": str, "sglang_version": str, "intents": (list, dict)}
#: ``plan --json`` of a whole fleet (tens of kilobytes a host).
MAX_EXPECT_BYTES = 64 * 2 ** 20
#: A baseline history: one report a line, a few kilobytes each; 64 MiB holds tens of thousands.
MAX_BASELINE_BYTES = 64 * 2 ** 20
#: One line of it (a report with every request listed stays far below).
MAX_BASELINE_LINE = 4 * 2 ** 20
#: An options file: the options and one host's plan (tens of kilobytes).
MAX_OPTIONS_BYTES = MAX_METADATA_BYTES
#: Entries kept (the newest): the verdict looks at the last 20 of one key (verdict.RECENT).
MAX_BASELINE_ENTRIES = 10000


def _gate_error(option: str, exc: UntrustedInput) -> GateError:
    """GateError naming ``option`` from an UntrustedInput that names it too (said once)."""
    return GateError(option, str(exc).removeprefix(f"{option}: "))


def read_text(path: str, option: str, max_bytes: int = MAX_METADATA_BYTES) -> str:
    """A regular file's text (UTF-8) of at most ``max_bytes``, or GateError naming ``option``:
    missing, a folder, a FIFO or a device (refused before it is read), too large, unreadable
    or not UTF-8 all read as one line, never a traceback or a wait."""
    try:
        return read_text_file(path, option, max_bytes)
    except UntrustedInput as exc:
        raise _gate_error(option, exc) from None


def load_expect(path: str, host: str | None) -> dict[str, Any]:
    text = read_text(path, "--expect", MAX_EXPECT_BYTES)
    try:
        data = load_json(text, f"{path}", MAX_EXPECT_BYTES)
    except UntrustedInput as exc:
        raise GateError("--expect", str(exc).replace(f"{path}: not JSON", f"{path} is not JSON", 1)) from None
    try:
        plan = verdict.select_plan(data, host)
    except ValueError as exc:
        raise GateError("--expect", f"{path}: {exc}") from None
    missing = _missing_plan_fields(plan)
    if missing:
        raise GateError("--expect", f"{path}: not the output of 'sglang-deploy plan --json': "
                                    f"missing or wrong {missing}")
    return plan


def _missing_plan_fields(plan: dict[str, Any]) -> str:
    return ", ".join(f"{name} ({'/'.join(t.__name__ for t in (kind if isinstance(kind, tuple) else (kind,)))})"
                     for name, kind in PLAN_FIELDS.items() if not isinstance(plan.get(name), kind))


def read_options(path: str) -> tuple[CheckOptions, HostRefs]:
    """An options file (``gate check --options FILE``, written by the deploy): a regular file of
    at most MAX_OPTIONS_BYTES, strict JSON, every key checked (``options.from_file_dict``); its
    plan, when it holds one, has the fields of ``plan --json``. GateError names the key."""
    text = read_text(path, "--options", MAX_OPTIONS_BYTES)
    try:
        data = load_json(text, path, MAX_OPTIONS_BYTES)
    except UntrustedInput as exc:
        raise GateError("--options", str(exc)) from None
    opts, refs = from_file_dict(data, path)
    if refs.abort_file:  # opened by the watch whenever it appears: a FIFO there would block the gate
        try:
            check_regular(refs.abort_file, "abort_file")
        except GateError as exc:
            raise GateError("--options", f"{path}: abort_file: {exc.message}") from None
    missing = _missing_plan_fields(opts.expect_plan) if opts.expect_plan is not None else ""
    if missing:
        raise GateError("--options", f"{path}: expect_plan: not a plan of 'sglang-deploy plan --json': "
                                     f"missing or wrong {missing}")
    return opts, refs


def read_key(text: str, option: str) -> str:
    """The API key out of a file's text or a variable's value: ``untrusted.check_token``'s one
    rule (one line of visible ASCII: it travels in an HTTP header), as GateError naming
    ``option``. The message never quotes the key."""
    try:
        return check_token(text, option)
    except UntrustedInput as exc:
        raise _gate_error(option, exc) from None


def read_key_file(path: str, option: str = "--api-key-file") -> str:
    """The API key in a key file: a regular file of at most 64 KiB, then ``read_key``."""
    return read_key(read_text(path, option, MAX_SECRET_BYTES), option)


def _kind(mode: int) -> str:
    return ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
            "not a regular file")


def check_regular(path: str, option: str, doing: str = "read") -> None:
    """GateError naming ``option`` when ``path`` exists and is not a regular file (a FIFO, a
    device, a socket, a folder; a link is followed): judged by stat, which never opens it, so a
    FIFO cannot block the check. A path that does not exist (yet) passes."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise GateError(option, f"cannot {doing} {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise GateError(option, f"{path} is {_kind(st.st_mode)}, not a regular file; not opened")


def check_files(opts: CheckOptions) -> None:
    """GateError naming the option when a file the gate reads late (--baseline, after the
    measurement; the abort file, whenever it appears) cannot be read or is not a regular file,
    or one it writes (--baseline with --record) cannot be written, and when the URL is one
    httpx cannot send to: checked before any work."""
    try:
        httpx.URL(opts.url)
    except Exception as exc:  # httpx.InvalidURL and the like; its message may quote the URL
        raise GateError("--url", f"{redact_url(opts.url)!r} is not a valid URL ({type(exc).__name__})") from None
    if opts.baseline:
        read_baseline(opts.baseline)
        if opts.record:
            check_writable(opts.baseline, "--baseline", make_parents=True)
    abort_file = getattr(opts.watch, "path", None)  # watch.AbortFileWatch (check --abort-file)
    if isinstance(abort_file, str):
        check_regular(abort_file, "--abort-file")


def check_writable(path: str, option: str, make_parents: bool = False) -> None:
    """GateError naming ``option`` unless ``path`` can be written (appended to, when it
    exists: nothing in it changes). Run before any work, so that a measurement or a
    deploy is never lost to an output path that was wrong from the start."""
    p = Path(path)
    if p.is_dir():
        raise GateError(option, f"cannot write {path}: it is a folder")
    check_regular(path, option, "write")  # a FIFO would block the open below until a reader came
    try:
        if p.exists():
            os.close(_open_append(path))
            return
        parent = p.parent
        if make_parents:
            while not parent.exists() and parent != parent.parent:
                parent = parent.parent
        if not parent.is_dir():
            raise GateError(option, f"cannot write {path}: {parent} is not a folder")
        probe = parent / f".{p.name}.{os.getpid()}.probe"
        with probe.open("x", encoding="utf-8"):
            pass
        probe.unlink()
    except OSError as exc:
        raise GateError(option, f"cannot write {path}: {exc.strerror or exc}") from None


def _open_append(path: str) -> int:
    """A descriptor appending to an existing regular file: opened non-blocking (a FIFO put in its
    place since it was checked fails at once instead of waiting for a reader), checked with fstat;
    OSError otherwise."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"it is {_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_baseline(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Entries of a JSON-lines baseline file (oldest first) and warnings."""
    p = Path(path)
    if not p.exists():
        return [], [f"baseline file {path} does not exist yet: no baseline rule applied"]
    text = read_text(path, "--baseline", MAX_BASELINE_BYTES)
    entries: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_BASELINE_ENTRIES)
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:  # each line strict JSON, bounded (no NaN, nesting capped, no 10^5-digit number)
            obj = load_json(line, "--baseline", MAX_BASELINE_LINE)
        except UntrustedInput:
            bad += 1
            continue
        if isinstance(obj, dict):
            entries.append(obj)
        else:
            bad += 1
    warnings = [f"baseline file {path}: {bad} line(s) are not JSON objects and were skipped"] if bad else []
    return list(entries), warnings


def append_baseline(path: str, report: dict[str, Any]) -> None:
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    if not p.exists():
        p.touch()
    with os.fdopen(_open_append(path), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(report, separators=(",", ":"), sort_keys=True) + "\n")
