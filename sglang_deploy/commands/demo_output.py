"""What `sglang-deploy demo` prints and writes: section headings, a command's output streamed
indented (stopped after its timeout), the gate's line of the host's history.jsonl as a short
table, the JSON report.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from sglang_deploy.commands.demo_setup import DEPLOY_TIMEOUT_S, REPO


def _section(out: TextIO, title: str) -> None:
    out.write(f"\n## {title}\n\n")
    out.flush()


def _write_json(path: str | None, result: dict[str, Any], err: TextIO) -> bool:
    if not path:
        return True
    try:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2, default=str)
            fh.write("\n")
    except OSError as exc:
        err.write(f"error: --json: cannot write {path}: {exc.strerror or exc}\n")
        return False
    return True


def _stream(argv: list[str], out: TextIO, timeout: float = DEPLOY_TIMEOUT_S) -> int:
    """Run ``argv`` in the checkout, its output (stdout and stderr) indented into ``out``;
    stopped after ``timeout`` seconds, or when the demo is interrupted."""
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace", bufsize=1)
    timer = threading.Timer(timeout, proc.terminate)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write("  | " + line)
            out.flush()
        rc = proc.wait()
        if not timer.is_alive():
            out.write(f"  (stopped: it did not finish within {timeout:g} s)\n")
        return rc
    finally:
        timer.cancel()
        if proc.poll() is None:  # interrupted: stop it
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _last_gate(history: Path) -> dict[str, Any] | None:
    try:
        lines = history.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("kind") == "gate":
            return entry
    return None


def format_gate_entry(entry: Mapping[str, Any]) -> str:
    """One history.jsonl gate line as a short table."""
    lines = [f"revision {entry.get('revision')}  SGLang {entry.get('sglang_version')}  "
             f"{(entry.get('key') or {}).get('hardware') or ''}".rstrip()]
    decode, target, ttft = entry.get("decode_tok_s"), entry.get("target_tok_s"), entry.get("ttft_s")
    lines.append(f"  decode tok/s (median, 1 stream)  {decode:.1f}" if decode is not None else
                 "  decode tok/s  -")
    if target is not None:
        lines[-1] += f"   target {target:g}"
    if ttft is not None:
        lines.append(f"  TTFT ms (median)                 {ttft * 1000:.1f}")
    diffs = entry.get("server_config_diffs") or []
    if diffs:
        for d in diffs:
            lines.append(f"  config: {d.get('message')}{'  [fails the gate]' if d.get('fails') else ''}")
    else:
        lines.append("  configuration: the server resolved what the plan asked for (no differences)")
    lines.append(str(entry.get("verdict") or "?").upper() + (f": {entry['summary']}" if entry.get("summary") else ""))
    lines.extend(f"  - {r}" for r in entry.get("reasons") or [])
    return "\n".join(lines) + "\n"
