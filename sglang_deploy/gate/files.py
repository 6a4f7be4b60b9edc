"""The files the gate reads and writes: the shipped prompts, the plan to expect
(``sglang-deploy plan --json``) and the baseline history (JSON lines)."""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path
from typing import Any

import yaml

from . import verdict
from .errors import GateError

# through importlib.resources: the gate also runs from a zipapp on the GPU host (roles/gatezip.py)
PROMPTS_FILE = importlib.resources.files("sglang_deploy") / "data" / "gate_prompts.yaml"


def load_prompts(path: Path | importlib.resources.abc.Traversable = PROMPTS_FILE) -> list[str]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    prompts = [str(p["text"]).strip() for p in (data or {}).get("prompts") or []]
    if not prompts:
        raise ValueError(f"{path.name} holds no prompts")
    return prompts


def load_expect(path: str, host: str | None) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise GateError("--expect", f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise GateError("--expect", f"{path} is not JSON: {exc}") from None
    try:
        return verdict.select_plan(data, host)
    except ValueError as exc:
        raise GateError("--expect", f"{path}: {exc}") from None


def read_baseline(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Entries of a JSON-lines baseline file (oldest first) and warnings."""
    p = Path(path)
    if not p.exists():
        return [], [f"baseline file {path} does not exist yet: no baseline rule applied"]
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise GateError("--baseline", f"cannot read {path}: {exc.strerror or exc}") from None
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
