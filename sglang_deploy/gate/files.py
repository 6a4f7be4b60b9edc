"""The files the gate reads and writes: the shipped prompts, the plan to expect
(``sglang-deploy plan --json``) and the baseline history (JSON lines)."""

from __future__ import annotations

import importlib.resources
import json
import os
from pathlib import Path
from typing import Any

import httpx
import yaml

from . import verdict
from .errors import GateError
from .options import CheckOptions
from .scrub import redact_url

# through importlib.resources: the gate also runs from a zipapp on the GPU host (roles/gatezip.py)
PROMPTS_FILE = importlib.resources.files("sglang_deploy") / "data" / "gate_prompts.yaml"


def load_prompts(path: Path | importlib.resources.abc.Traversable = PROMPTS_FILE) -> list[str]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    prompts = [str(p["text"]).strip() for p in (data or {}).get("prompts") or []]
    if not prompts:
        raise ValueError(f"{path.name} holds no prompts")
    return prompts


#: What every object of ``sglang-deploy plan --json`` carries (``plan_output.plan_json``)
#: and the gate reads: a dict without them is not a plan, and comparing with it would
#: find no difference at all.
PLAN_FIELDS = {"host": str, "sglang_version": str, "intents": (list, dict)}


def read_text(path: str, option: str) -> str:
    """A file's text (UTF-8), or GateError naming ``option``: missing, a folder, unreadable or
    not UTF-8 all read as one line, never a traceback."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise GateError(option, f"{path} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise GateError(option, f"cannot read {path}: {exc.strerror or exc}") from None


def load_expect(path: str, host: str | None) -> dict[str, Any]:
    text = read_text(path, "--expect")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise GateError("--expect", f"{path} is not JSON: {exc}") from None
    try:
        plan = verdict.select_plan(data, host)
    except ValueError as exc:
        raise GateError("--expect", f"{path}: {exc}") from None
    missing = [f"{name} ({'/'.join(t.__name__ for t in (kind if isinstance(kind, tuple) else (kind,)))})"
               for name, kind in PLAN_FIELDS.items() if not isinstance(plan.get(name), kind)]
    if missing:
        raise GateError("--expect", f"{path}: not the output of 'sglang-deploy plan --json': "
                                    f"missing or wrong {', '.join(missing)}")
    return plan


def read_key(text: str, option: str) -> str:
    """The API key out of a file's text or a variable's value: one line of visible ASCII
    (it travels in an HTTP header). The message never quotes the key."""
    key = text.strip()
    if not key:
        raise GateError(option, "the key is empty")
    if "\n" in key or "\r" in key:
        raise GateError(option, "the key spans several lines; give one line")
    bad = [i for i, ch in enumerate(key) if not 0x21 <= ord(ch) <= 0x7E]
    if bad:
        raise GateError(option, f"the key holds {len(bad)} character(s) that are not visible ASCII "
                                f"(first at position {bad[0]}); an HTTP header cannot carry them")
    return key


def check_files(opts: CheckOptions) -> None:
    """GateError naming the option when a file the gate reads late (--baseline, after the
    measurement) cannot be read, or one it writes (--baseline with --record) cannot be
    written, and when the URL is one httpx cannot send to: checked before any work."""
    try:
        httpx.URL(opts.url)
    except Exception as exc:  # httpx.InvalidURL and the like; its message may quote the URL
        raise GateError("--url", f"{redact_url(opts.url)!r} is not a valid URL ({type(exc).__name__})") from None
    if opts.baseline:
        read_baseline(opts.baseline)
        if opts.record:
            check_writable(opts.baseline, "--baseline", make_parents=True)


def check_writable(path: str, option: str, make_parents: bool = False) -> None:
    """GateError naming ``option`` unless ``path`` can be written (appended to, when it
    exists: nothing in it changes). Run before any work, so that a measurement or a
    deploy is never lost to an output path that was wrong from the start."""
    p = Path(path)
    if p.is_dir():
        raise GateError(option, f"cannot write {path}: it is a folder")
    try:
        if p.exists():
            with p.open("a", encoding="utf-8"):
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


def read_baseline(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Entries of a JSON-lines baseline file (oldest first) and warnings."""
    p = Path(path)
    if not p.exists():
        return [], [f"baseline file {path} does not exist yet: no baseline rule applied"]
    text = read_text(path, "--baseline")
    entries, bad = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(obj, dict):
            entries.append(obj)
        else:
            bad += 1
    warnings = [f"baseline file {path}: {bad} line(s) are not JSON objects and were skipped"] if bad else []
    return entries, warnings


def append_baseline(path: str, report: dict[str, Any]) -> None:
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(report, separators=(",", ":"), sort_keys=True) + "\n")
