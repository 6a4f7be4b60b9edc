"""The throwaway environment a wheel's parser is read in: the wheel unpacked
(never installed, only put on ``PYTHONPATH``), a CPU-only venv with torch and
the pure-Python import dependencies at the wheel's own pins, both cached per
version; and ``introspect.py`` run in it with a fixed minimal environment."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from scripts.catalogs.config import ENV_FORMAT, IMPORT_DEPS, PY_VERSION, TORCH_SPEC, log
from scripts.catalogs.wheels import sha256_of, wheel_requirements

#: The file run inside the venv; standard library only.
INTROSPECT = Path(__file__).resolve().parent / "introspect.py"


def find_python() -> str:
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == PY_VERSION:
        return sys.executable
    exe = shutil.which(f"python{PY_VERSION}")
    if exe is None:
        raise SystemExit(f"need a Python {PY_VERSION} interpreter (cp311 wheels)")
    return exe


def unpack_wheel(cache: Path, version: str, wheel: Path) -> Path:
    """The wheel's files in ``cache``, unpacked once per wheel digest."""
    digest = sha256_of(wheel)
    src = cache / f"src-{version}-{digest[:16]}"
    if not (src / ".complete").exists():
        if src.exists():
            shutil.rmtree(src)
        log(f"unpacking {wheel.name}")
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(src)
        (src / ".complete").write_text("ok\n")
    return src


def import_requirements(wheel: Path) -> list[str]:
    """torch (CPU) and ``IMPORT_DEPS``, each at the wheel's Requires-Dist specifier."""
    reqs = wheel_requirements(wheel)
    return [TORCH_SPEC] + [
        reqs.get(re.sub(r"[-_.]+", "-", d).lower(), d) for d in IMPORT_DEPS
    ]


def ensure_venv(cache: Path, version: str, wanted: list[str]) -> Path:
    """The python of a cached venv with ``wanted`` installed."""
    key = hashlib.sha256(
        json.dumps([ENV_FORMAT, PY_VERSION, wanted]).encode()
    ).hexdigest()[:16]
    venv = cache / f"venv-{version}-{key}"
    py = venv / "bin" / "python"
    if not (venv / ".complete").exists():
        if venv.exists():
            shutil.rmtree(venv)
        log(f"creating venv for {version}: {' '.join(wanted)}")
        subprocess.run([find_python(), "-m", "venv", str(venv)], check=True, stdout=sys.stderr)
        # torch first, so that nothing pulls the CUDA build.
        subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             "--prefer-binary", TORCH_SPEC],
            check=True, stdout=sys.stderr,  # stdout carries the results alone
        )
        subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             "--prefer-binary", *wanted],
            check=True, stdout=sys.stderr,
        )
        (venv / ".complete").write_text("\n".join(wanted) + "\n")
    return py


def ensure_env(cache: Path, version: str, wheel: Path) -> tuple[Path, Path]:
    """Return (venv python, unpacked source dir) for this wheel."""
    src = unpack_wheel(cache, version, wheel)
    py = ensure_venv(cache, version, import_requirements(wheel))
    return py, src


def run_in_env(py: Path, src: Path, cache: Path, mode: list[str]) -> None:
    """Run ``introspect.py MODE...`` with ``py``, ``src`` on ``PYTHONPATH`` and
    nothing else of this machine's environment (no ``SGLANG_*`` variables)."""
    home = cache / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": f"{py.parent}:/usr/bin:/bin",
        "HOME": str(home),
        "PYTHONPATH": str(src),
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
        "CUDA_VISIBLE_DEVICES": "",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TMPDIR": tempfile.gettempdir(),
    }
    with tempfile.TemporaryDirectory() as cwd:
        subprocess.run(
            [str(py), str(INTROSPECT), *mode],
            check=True, env=env, cwd=cwd,
        )
