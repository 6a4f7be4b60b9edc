"""The command line of ``scripts/build_catalogs.py``: build each version's
catalog, run argv lists through each version's real parser, or find each
constraint's citations in each version's wheel."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from scripts.catalogs import citations
from scripts.catalogs.config import DEFAULT_OUT, DEFAULT_VERSIONS, default_cache_dir, log
from scripts.catalogs.normalise import dump_json, normalise
from scripts.catalogs.sources import read_sources
from scripts.catalogs.venvs import ensure_env, run_in_env, unpack_wheel
from scripts.catalogs.wheels import ensure_wheel, sha256_of


def read_catalog(py: Path, src: Path, cache: Path, wheel: Path, version: str) -> dict:
    """The catalog of the parser that ``src`` (the unpacked wheel) builds in
    the venv of ``py``."""
    with tempfile.TemporaryDirectory() as td:
        raw_path = Path(td) / "raw.json"
        log(f"{version}: reading the parser")
        run_in_env(py, src, cache, ["--_dump", str(raw_path)])
        raw = json.loads(raw_path.read_text())
    return normalise(raw, wheel, sha256_of(wheel), version)


def build(version: str, wheel_dir: Path, out: Path, cache: Path) -> Path:
    wheel = ensure_wheel(wheel_dir, version)
    py, src = ensure_env(cache, version, wheel)
    catalog = read_catalog(py, src, cache, wheel, version)
    # what the version decides about models, read from the same wheel's source (sources.py)
    catalog["model_support"] = read_sources(src)
    text = dump_json(catalog)
    for leak in (str(cache), str(wheel_dir.resolve()), os.path.expanduser("~")):
        if leak and leak != "/" and leak in text:
            raise SystemExit(f"{version}: machine path {leak!r} would be written")
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"sglang-{version}.json"
    target.write_text(text)
    log(f"{version}: {len(catalog['options'])} option strings -> {target}")
    return target


def check_argv(versions: list[str], argv_file: Path, wheel_dir: Path, cache: Path) -> None:
    """Print one JSON line per argv of ``argv_file`` and version: accepted or not. The
    constraints' citations and the catalog's model_support are checked on the same unpacked
    wheel first; the argvs are judged either way, and a failed check then stops the run."""
    problems: list[str] = []
    for version in versions:
        wheel = ensure_wheel(wheel_dir, version)
        py, src = ensure_env(cache, version, wheel)
        problems += check_citations(version, src)
        try:
            check_model_support(version, src)
        except SystemExit as exc:
            problems.append(str(exc))
        run_in_env(
            py, src, cache,
            ["--_check", str(argv_file.resolve()), "--_version", version],
        )
    if problems:
        raise SystemExit("\n".join(problems))


def check_citations(version: str, src: Path) -> list[str]:
    """Each citation of data/constraints.yaml that claims ``version``, looked up in the unpacked
    wheel at ``src`` (scripts/catalogs/citations.py); one line per one missing: row, version,
    file and name."""
    from sglang_deploy.plan.constraints import load_constraints

    rows = load_constraints()
    problems = citations.missing(src, version, rows)
    cited = sum(version in c.versions for r in rows for c in r.cites)
    log(f"{version}: {cited - len(problems)} of {cited} constraint citations found in the wheel")
    return problems


def citations_only(versions: list[str], wheel_dir: Path, cache: Path) -> int:
    """``--check-citations``: the wheels unpacked (no venv), every version's citations looked up."""
    problems: list[str] = []
    for version in versions:
        wheel = ensure_wheel(wheel_dir, version)
        problems += check_citations(version, unpack_wheel(cache, version, wheel))
    for line in problems:
        print(line)
    return 1 if problems else 0


def check_model_support(version: str, src: Path) -> None:
    """The packaged catalog's model_support must be what the wheel's source says today (the
    readers also fail when a function the constraints cite is gone): CI runs this with every
    --check-argv, on the wheels it unpacks anyway."""
    packaged = DEFAULT_OUT / f"sglang-{version}.json"
    if not packaged.is_file():
        return
    have = json.loads(packaged.read_text()).get("model_support")
    if have != read_sources(src):
        raise SystemExit(f"{version}: the catalog's model_support differs from the wheel's source; rebuild it "
                         "with scripts/build_catalogs.py")
    log(f"{version}: model_support matches the wheel's source")


def make_parser(description: str | None = None) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--versions", default=",".join(DEFAULT_VERSIONS))
    ap.add_argument("--wheel-dir", type=Path, default=None,
                    help="where wheels are looked up / downloaded "
                         "(default: <cache-dir>/wheels)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--check-argv", type=Path, default=None, metavar="FILE.json")
    ap.add_argument("--check-citations", action="store_true",
                    help="look up every citation of data/constraints.yaml in each version's wheel")
    return ap


def main(argv: list[str] | None = None, description: str | None = None) -> int:
    args = make_parser(description).parse_args(argv)
    cache = (args.cache_dir or default_cache_dir()).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    wheel_dir = (args.wheel_dir or cache / "wheels").resolve()
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]

    if args.check_citations:
        return citations_only(versions, wheel_dir, cache)
    if args.check_argv is not None:
        check_argv(versions, args.check_argv, wheel_dir, cache)
        return 0

    for version in versions:
        build(version, wheel_dir, args.out, cache)
    return 0
