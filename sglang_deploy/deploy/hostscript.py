"""Run one of this repo's self-contained scripts on a host without installing anything."""

from __future__ import annotations

import base64
import shlex
from pathlib import Path
from typing import Sequence


def embedded(script: Path, interpreter: str = "python3", args: Sequence[str] = (),
             options: Sequence[str] = ()) -> str:
    """A shell command that writes ``script`` to a private temp file, runs it (``interpreter
    options... file args...``), removes it, keeps its exit code."""
    payload = base64.b64encode(script.read_bytes()).decode()
    flags = "".join(f"{shlex.quote(o)} " for o in options)
    quoted = " ".join(shlex.quote(a) for a in args)
    return (f"f=$(mktemp) && echo {payload} | base64 -d > \"$f\" && "
            f"{{ {shlex.quote(interpreter)} {flags}\"$f\" {quoted}; rc=$?; rm -f \"$f\"; (exit $rc); }}")
