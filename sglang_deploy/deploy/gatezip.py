"""The gate as one self-contained file for the GPU host: a zipapp of the gate
(``sglang_deploy/gate``), the core modules it imports, its prompts, and the pure-Python
libraries it needs (httpx and its dependencies, PyYAML), taken from the controller's own
environment. Neither the planner, the tuner, the deploy, the commands nor Jinja2 travel.

Why: a server bound to loopback can only be measured on its host, and the host
has no sglang-deploy (and the SGLang venv need not have httpx or PyYAML). The
zipapp runs with the venv's Python in isolated mode (``python -I gate.pyz check
--options FILE``, the gate's own entry point: sglang_deploy/gate/main.py): the zip
is first on ``sys.path``, so what the venv has cannot shadow it, and nothing is
installed on the host. It even runs without any site-packages (``-S``;
tests/test_gatezip.py proves that, and which modules a real run imports). A
compiled speed-up (PyYAML's libyaml binding) cannot load from a zip; the library
falls back to its pure-Python code, which is all the gate needs.
"""

from __future__ import annotations

import functools
import importlib
import io
import zipfile
from pathlib import Path

import sglang_deploy

#: Of the package: the package's marker, the core modules the gate imports (tests/test_gatezip.py
#: checks the list against the gate's imports), the gate itself, and the gate's data.
GATE_CORE = ("untrusted.py", "deadline.py")
GATE_DATA = ("data/gate_prompts.yaml",)
#: What the gate imports besides the package, directly or through httpx. Optional ones (absent on
#: newer Pythons) are skipped when not installed.
LIBRARIES = ("httpx", "httpcore", "h11", "anyio", "sniffio", "idna", "certifi", "yaml", "typing_extensions",
             "exceptiongroup")
REQUIRED = ("httpx", "httpcore", "h11", "anyio", "idna", "certifi", "yaml")
# The zipapp's entry point, run on the host: the gate's own, never the CLI.
MAIN = "import sys\nfrom sglang_deploy.gate.main import main\nsys.exit(main())\n"
# Fixed timestamp: the same sources give the same bytes.
_EPOCH = (2020, 1, 1, 0, 0, 0)
_COMPILED = (".so", ".pyd", ".pyc", ".c", ".pyx")


def _package_files() -> list[tuple[Path, str]]:
    """(file, name in the zip) of the package's part the gate runs from."""
    root = Path(sglang_deploy.__file__).resolve().parent
    files = [root / "__init__.py", *(root / name for name in GATE_CORE), *(root / name for name in GATE_DATA)]
    files += [p for p in (root / "gate").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts and p.suffix not in _COMPILED]
    return [(p, f"sglang_deploy/{p.relative_to(root).as_posix()}") for p in sorted(files)]


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
        if not path.is_file() or "__pycache__" in path.parts or path.suffix in _COMPILED:
            continue
        out.append((path, f"{name}/{path.relative_to(root).as_posix()}"))
    return out


def _zip(entries: list[tuple[Path | None, str]]) -> bytes:
    """A zip of ``entries`` ((file or None for the zipapp's entry point, name in the zip)), the same
    bytes for the same sources."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, arcname in entries:
            info = zipfile.ZipInfo(arcname, _EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, MAIN if path is None else path.read_bytes())
    return buf.getvalue()


@functools.lru_cache(maxsize=1)
def build() -> bytes:
    """The zipapp's bytes (built once per controller process)."""
    entries = [(None, "__main__.py"), *_package_files(), *(e for name in LIBRARIES for e in _module_files(name))]
    return b"#!/usr/bin/env python3\n" + _zip(entries)


@functools.lru_cache(maxsize=1)
def rules_zip() -> bytes:
    """``sglang_deploy.hostrules`` (the rules the continuous check judges the host by, standard
    library only) as a zip for the host's ``sys.path``: deploy/host/watch.py imports it from there."""
    root = Path(sglang_deploy.__file__).resolve().parent
    files = [root / "__init__.py", *sorted((root / "hostrules").glob("*.py"))]
    return _zip([(p, f"sglang_deploy/{p.relative_to(root).as_posix()}") for p in files])
