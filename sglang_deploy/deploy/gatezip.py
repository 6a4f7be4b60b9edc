"""The gate as one self-contained file for the GPU host: a zipapp of ``sglang_deploy``
and the pure-Python libraries its ``check`` command imports, taken from the
controller's own environment.

Why: a server bound to loopback can only be measured on its host, and the host
has no sglang-deploy (and the SGLang venv need not have httpx or PyYAML). The
zipapp runs with the venv's Python in isolated mode (``python -I gate.pyz
check ...``): the zip is first on ``sys.path``, so what the venv has cannot
shadow it, and nothing is installed on the host. It even runs without any
site-packages (``-S``; tests/test_gatezip.py proves that). Compiled speed-ups
(PyYAML's libyaml binding, MarkupSafe's C module) cannot load from a zip; each
library falls back to its pure-Python code, which is all the gate needs.
"""

from __future__ import annotations

import functools
import importlib
import io
import zipfile
from pathlib import Path

# What the `check` command imports, directly or through httpx / Jinja2.
# Optional ones (absent on newer Pythons) are skipped when not installed.
PACKAGES = ("sglang_deploy", "httpx", "httpcore", "h11", "anyio", "sniffio", "idna", "certifi", "yaml",
            "jinja2", "markupsafe", "typing_extensions", "exceptiongroup")
REQUIRED = ("sglang_deploy", "httpx", "httpcore", "h11", "anyio", "idna", "certifi", "yaml", "jinja2", "markupsafe")
# The zipapp's entry point, run on the host (the glue itself never imports the CLI).
MAIN = "import sys\nfrom sglang_deploy.commands import cli\nsys.exit(cli.main())\n"
# Fixed timestamp: the same sources give the same bytes.
_EPOCH = (2020, 1, 1, 0, 0, 0)


def _module_files(name: str) -> list[tuple[Path, str]]:
    """(file, name in the zip) of one importable package or single-file module; [] if absent."""
    try:
        module = importlib.import_module(name)
    except ImportError:
        if name in REQUIRED:
            raise
        return []
    origin = Path(module.__file__ or "")
    if origin.name != "__init__.py":
        return [(origin, origin.name)]
    root = origin.parent
    out = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".so", ".pyd", ".pyc", ".c", ".pyx"):
            continue
        if name == "sglang_deploy" and path.relative_to(root).parts[0] == "simulator":
            continue  # the stand-ins never travel to a real host
        out.append((path, f"{name}/{path.relative_to(root).as_posix()}"))
    return out


@functools.lru_cache(maxsize=1)
def build() -> bytes:
    """The zipapp's bytes (built once per controller process)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        entries = [(None, "__main__.py")] + [e for name in PACKAGES for e in _module_files(name)]
        for path, arcname in entries:
            info = zipfile.ZipInfo(arcname, _EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, MAIN if path is None else path.read_bytes())
    return b"#!/usr/bin/env python3\n" + buf.getvalue()
