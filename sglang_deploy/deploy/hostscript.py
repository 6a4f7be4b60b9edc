"""Run one of this repo's self-contained scripts on a host without installing anything."""

from __future__ import annotations

import base64
import io
import shlex
import zipfile
from pathlib import Path
from typing import Sequence

HOST_DIR = Path(__file__).resolve().parent / "host"
#: Host scripts with parts of their own: the script's name -> its package in deploy/host/ (standard
#: library only, nothing else of the project: tests/test_layout.py). The parts travel with it.
PARTS = {"stage_weights.py": "stager"}
# Fixed timestamp: the same sources give the same bytes (the watch uploads only what differs).
_EPOCH = (2020, 1, 1, 0, 0, 0)


def parts_zip(script: Path, main: bool = False) -> bytes | None:
    """The parts of ``script`` as a zip for the host's ``sys.path`` (None: it has none): its package
    with the package markers above it. With ``main``, the script too, as the zip's ``__main__.py``:
    python runs such a zip as the script with the zip first on ``sys.path`` (a zipapp, whatever
    its file is named), so the parts import from it and nothing the interpreter has can shadow them."""
    package = PARTS.get(script.name)
    if package is None:
        return None
    root = HOST_DIR.parents[1]  # sglang_deploy/
    files = [root / "__init__.py", root / "deploy" / "__init__.py", HOST_DIR / "__init__.py",
             *sorted((HOST_DIR / package).glob("*.py"))]
    entries = [(f"sglang_deploy/{p.relative_to(root).as_posix()}", p.read_bytes()) for p in files]
    if main:
        entries.insert(0, ("__main__.py", script.read_bytes()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, _EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    return buf.getvalue()


def embedded(script: Path, interpreter: str = "python3", args: Sequence[str] = (),
             options: Sequence[str] = ()) -> str:
    """A shell command that writes ``script`` to a private temp file, runs it (``interpreter
    options... file args...``), removes it, keeps its exit code. A script with parts (``PARTS``)
    is written as the zipapp of it and its parts (``parts_zip``)."""
    payload = base64.b64encode(parts_zip(script, main=True) or script.read_bytes()).decode()
    flags = "".join(f"{shlex.quote(o)} " for o in options)
    quoted = " ".join(shlex.quote(a) for a in args)
    return (f"f=$(mktemp) && echo {payload} | base64 -d > \"$f\" && "
            f"{{ {shlex.quote(interpreter)} {flags}\"$f\" {quoted}; rc=$?; rm -f \"$f\"; (exit $rc); }}")


def ascii_answer(script: str) -> str:
    """``script`` (a state read that prints ``key=value`` lines) with every byte of its output that is
    not printable ASCII or a line end turned into ``?`` on the host: a name or a file's text that is
    not UTF-8 (a revision folder's, a dist-info folder's, a marker's) would otherwise stop the SSH
    client's decoding of the whole answer (paramiko raises UnicodeDecodeError on the line). What may
    hold any byte is for the script to send in base64."""
    return "{ " + script.rstrip("\n") + "\n} | LC_ALL=C tr -c '\\n -~' '?'"
