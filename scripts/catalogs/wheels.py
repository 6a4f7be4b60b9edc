"""The released sglang wheels: found in a directory or downloaded (always the
same file, for cp311 on manylinux_2_34_x86_64), checked against ``KNOWN_WHEELS``,
and their ``Requires-Dist`` read."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from scripts.catalogs.config import KNOWN_WHEELS, PLATFORM, PY_VERSION, log


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def find_wheel(wheel_dir: Path, version: str) -> Path | None:
    found = sorted(wheel_dir.glob(f"sglang-{version}-*.whl"))
    if version in KNOWN_WHEELS:
        name = KNOWN_WHEELS[version][0]
        found = [p for p in found if p.name == name] or found
    return found[0] if found else None


def download_wheel(wheel_dir: Path, version: str) -> Path:
    wheel_dir.mkdir(parents=True, exist_ok=True)
    log(f"downloading sglang=={version} into {wheel_dir}")
    subprocess.run(
        [
            sys.executable, "-m", "pip", "download", "--no-deps",
            "--only-binary=:all:", "--python-version", PY_VERSION,
            "--implementation", "cp", "--abi", "cp" + PY_VERSION.replace(".", ""),
            "--platform", PLATFORM, "-d", str(wheel_dir), f"sglang=={version}",
        ],
        check=True, stdout=sys.stderr,  # stdout carries the results alone (--check-argv's JSON lines)
    )
    wheel = find_wheel(wheel_dir, version)
    if wheel is None:
        raise SystemExit(f"pip download gave no sglang-{version} wheel")
    return wheel


def ensure_wheel(wheel_dir: Path, version: str) -> Path:
    wheel = find_wheel(wheel_dir, version)
    if wheel is None:
        wheel = download_wheel(wheel_dir, version)
    digest = sha256_of(wheel)
    known = KNOWN_WHEELS.get(version)
    if known is not None and (wheel.name, digest) != known:
        raise SystemExit(
            f"{wheel.name} sha256 {digest} differs from the known wheel "
            f"{known[0]} {known[1]}; refusing to build a different catalog"
        )
    if known is None:
        log(
            f"note: {version} is not in KNOWN_WHEELS; add "
            f'"{version}": ("{wheel.name}", "{digest}")'
        )
    return wheel


def wheel_requirements(wheel: Path) -> dict[str, str]:
    """Requires-Dist of the wheel: normalised name -> requirement string
    (entries with extras markers are skipped)."""
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(
            n for n in zf.namelist() if n.endswith(".dist-info/METADATA")
        )
        meta = zf.read(meta_name).decode()
    reqs: dict[str, str] = {}
    for line in meta.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        req, _, marker = req.partition(";")
        if "extra ==" in marker:
            continue
        m = re.match(r"\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(.*)", req)
        if not m:
            continue
        name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
        reqs[name] = (name + m.group(3).replace(" ", "")).strip()
    return reqs
