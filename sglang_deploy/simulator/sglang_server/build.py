#!/usr/bin/env python3
"""Build the SIMULATED SGLang wheels, one per version, without network.

    python -m sglang_deploy.simulator.sglang_server.build --out DIR [--versions 0.5.9,0.5.23]
        [--catalogs DIR]

Each wheel is ``sglang-<version>-py3-none-any.whl``: the package in
``src/sglang`` with ``sglang/version.py`` set to the version and the
version's option catalog (``sglang_deploy/data/catalogs/sglang-<version>.json``)
embedded as ``sglang/_sim/catalog.json``.  The zip is written here with
``zipfile`` (METADATA, WHEEL, top_level.txt, entry_points.txt, RECORD with
sha256 hashes); no build backend, no dependencies.  Same inputs, same bytes.

Install one like the deployment does::

    pip install --no-index --find-links DIR sglang==0.5.23
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import zipfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
SRC = HERE / "src" / "sglang"
CATALOGS = HERE.parent.parent / "data" / "catalogs"
DEFAULT_VERSIONS = ("0.5.9", "0.5.15", "0.5.19", "0.5.23")

# 1980-01-01: the earliest date a zip entry can carry; fixed for reproducible bytes.
_DATE = (1980, 1, 1, 0, 0, 0)


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _package_files(version: str, catalog: bytes) -> List[Tuple[str, bytes]]:
    files: List[Tuple[str, bytes]] = []
    for path in sorted(SRC.rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
            continue
        rel = "sglang/" + path.relative_to(SRC).as_posix()
        if rel in ("sglang/version.py", "sglang/_sim/catalog.json"):
            continue
        files.append((rel, path.read_bytes()))
    files.append(("sglang/version.py", f'__version__ = "{version}"\n'.encode()))
    files.append(("sglang/_sim/catalog.json", catalog))
    return sorted(files)


def _metadata(version: str, requires: Sequence[str] = ()) -> bytes:
    return (
        "Metadata-Version: 2.1\n"
        "Name: sglang\n"
        f"Version: {version}\n"
        f"Summary: SIMULATED SGLang {version} for tests (parser and HTTP API stand-in; no model)\n"
        "License: Apache-2.0\n"
        "Requires-Python: >=3.9\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires) +
        "\n"
        "A stand-in for the real SGLang at its parser and HTTP boundaries, built by\n"
        "sglang-deploy's sglang_deploy/simulator/sglang_server/build.py. It is not SGLang.\n"
    ).encode()


def _wheel_meta() -> bytes:
    return (
        "Wheel-Version: 1.0\n"
        "Generator: sglang-deploy simulator/sglang_server/build.py\n"
        "Root-Is-Purelib: true\n"
        "Tag: py3-none-any\n"
    ).encode()


def build_wheel(version: str, out_dir: Path, catalogs_dir: Optional[Path] = None,
                requires: Sequence[str] = ()) -> Path:
    """One wheel. ``requires``: Requires-Dist lines, e.g. ``huggingface_hub`` as real SGLang
    declares it (the weight staging runs with the venv's huggingface_hub)."""
    catalogs_dir = Path(catalogs_dir or CATALOGS)
    source = catalogs_dir / f"sglang-{version}.json"
    if not source.is_file():
        raise FileNotFoundError(f"no catalog for SGLang {version}: {source}")
    catalog = source.read_bytes()
    data = json.loads(catalog)
    if data.get("sglang_version") != version:
        raise ValueError(f"{source} is the catalog of {data.get('sglang_version')!r}, not {version}")

    dist_info = f"sglang-{version}.dist-info"
    entries: List[Tuple[str, bytes]] = _package_files(version, catalog)
    meta: Dict[str, bytes] = {
        "METADATA": _metadata(version, requires),
        "WHEEL": _wheel_meta(),
        "top_level.txt": b"sglang\n",
    }
    if (data.get("parser") or {}).get("prog") == "sglang serve":
        meta["entry_points.txt"] = b"[console_scripts]\nsglang = sglang.cli.main:main\n"
    entries += [(f"{dist_info}/{name}", body) for name, body in sorted(meta.items())]
    return _write_wheel(entries, dist_info, Path(out_dir) / f"sglang-{version}-py3-none-any.whl")


#: SIMULATED KV transfer engines, one wheel each, under the package names and modules SGLang
#: imports (sglang_deploy/plan/transfer.py): module -> its stand-in's text. Each only imports, which is
#: all a simulated prefill or decode server asks of it (src/sglang/_sim/disagg.py); no KV moves.
ENGINE_STAND_INS = {
    "mooncake/engine.py": '"""SIMULATED mooncake.engine (sglang-deploy test stand-in, NOT Mooncake)."""\n\n\n'
                          'class TransferEngine:\n    """Nothing is transferred: a simulated SGLang server imports '
                          'it and no more."""\n',
    "nixl/_api.py": '"""SIMULATED nixl._api (sglang-deploy test stand-in, NOT NIXL)."""\n\n\n'
                    'class nixl_agent:  # noqa: N801 (NIXL\'s own name)\n    """Nothing is transferred."""\n',
}


def build_engine_wheel(package: str, version: str, out_dir: Path) -> Path:
    """A SIMULATED transfer engine's wheel, ``package`` (``mooncake-transfer-engine`` or ``nixl``) at
    ``version``: the stand-in of :data:`ENGINE_STAND_INS` whose top package it names."""
    top = "mooncake" if package.startswith("mooncake") else package
    dist = package.replace("-", "_")
    files = [(f"{top}/__init__.py", b'"""SIMULATED: a sglang-deploy test stand-in."""\n')]
    files += [(path, text.encode()) for path, text in ENGINE_STAND_INS.items() if path.startswith(top + "/")]
    dist_info = f"{dist}-{version}.dist-info"
    meta = (f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\nSummary: SIMULATED {package} "
            f"(sglang-deploy test stand-in; it transfers nothing)\n\n").encode()
    files += [(f"{dist_info}/METADATA", meta), (f"{dist_info}/WHEEL", _wheel_meta()),
              (f"{dist_info}/top_level.txt", f"{top}\n".encode())]
    return _write_wheel(files, dist_info, Path(out_dir) / f"{dist}-{version}-py3-none-any.whl")


def _write_wheel(entries: List[Tuple[str, bytes]], dist_info: str, wheel: Path) -> Path:
    """``entries`` and their RECORD zipped into ``wheel``, reproducibly."""
    record = "".join(f"{name},{_record_hash(body)},{len(body)}\n" for name, body in entries)
    record += f"{dist_info}/RECORD,,\n"
    entries = [*entries, (f"{dist_info}/RECORD", record.encode())]
    wheel.parent.mkdir(parents=True, exist_ok=True)
    tmp = wheel.with_suffix(".whl.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, body in entries:
            info = zipfile.ZipInfo(name, date_time=_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, body)
    tmp.replace(wheel)
    return wheel


def install_pd_venv(tmp: Path, env: Dict[str, str], timeout: float = 300) -> Path:
    """A throwaway venv under ``tmp`` with the simulated SGLang 0.5.23 and the simulated Mooncake
    engine its prefill and decode servers import, installed offline from wheels built here; its python.
    ``env``: pip's and venv's environment (the caller's, without its pip and Python variables)."""
    import subprocess

    from sglang_deploy.plan.transfer import ENGINES

    engine = ENGINES["mooncake"]
    build_wheels(["0.5.23"], tmp / "wheels")
    build_engine_wheel(engine.package, engine.version, tmp / "wheels")
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True, env=env)
    py = tmp / "venv" / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                    "--find-links", str(tmp / "wheels"), "sglang==0.5.23", engine.requirement], check=True,
                   env=env, timeout=timeout)
    return py


def build_wheels(
    versions: Optional[Iterable[str]] = None,
    out_dir: Path = Path("dist-sim"),
    catalogs_dir: Optional[Path] = None,
) -> List[Path]:
    """Build one wheel per version into ``out_dir``; their paths, in order."""
    return [build_wheel(v, Path(out_dir), catalogs_dir) for v in (versions or DEFAULT_VERSIONS)]


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="directory for the wheels")
    ap.add_argument("--versions", default=",".join(DEFAULT_VERSIONS),
                    help="comma-separated SGLang versions (default: %(default)s)")
    ap.add_argument("--catalogs", type=Path, default=None,
                    help="directory of sglang-<version>.json catalogs (default: the repo's)")
    ns = ap.parse_args(argv)
    versions = [v.strip() for v in ns.versions.split(",") if v.strip()]
    for wheel in build_wheels(versions, ns.out, ns.catalogs):
        print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
