#!/usr/bin/env python3
"""Build the per-version catalogs of SGLang's ``launch_server`` command-line options.

Usage::

    python scripts/build_catalogs.py [--versions 0.5.9,0.5.15,...]
        [--wheel-dir DIR] [--out sglang_deploy/data/catalogs] [--cache-dir DIR]
    python scripts/build_catalogs.py --versions 0.5.23 --check-argv ARGVS.json

Method (the "import" way: the catalog is read from the real parser)
--------------------------------------------------------------------
For each version:

1. Take ``sglang-<version>-*.whl`` from ``--wheel-dir``; if absent, download
   it with ``pip download --no-deps --only-binary=:all: --python-version 3.11
   --implementation cp --abi cp311 --platform manylinux_2_34_x86_64``, so the
   same file comes every time.  Its sha256 is compared with ``KNOWN_WHEELS``
   (a mismatch stops the build) and recorded in the catalog.
2. Unpack the wheel into a cache directory (never installed, only put on
   ``PYTHONPATH``).
3. Create a throwaway venv in the cache directory (default
   ``$XDG_CACHE_HOME/sglang-deploy-catalogs``, else ``~/.cache/...``; override
   with ``--cache-dir``) with the CPU build of torch (``TORCH_SPEC``) and the
   pure-Python dependencies the import of ``sglang.srt.server_args`` needs
   (``IMPORT_DEPS``), each at the version specifier the wheel's own
   ``Requires-Dist`` gives (e.g. ``transformers==4.57.1`` for 0.5.9).
4. In that venv, run this same file in its internal ``--_dump`` mode: it
   installs an import hook that replaces, only for imports made by
   ``sglang.*`` modules, every top-level module that is not installed
   (GPU-only packages: sgl_kernel, flashinfer, flash_attn, torchvision,
   torchcodec, ...) by an empty stand-in module whose attributes are
   ``MagicMock`` objects.  It then calls the version's own
   ``prepare_server_args([])`` with ``ArgumentParser.parse_args`` patched to
   capture the parser and stop, so the parser is built exactly as
   ``python -m sglang.launch_server`` builds it (same constructor arguments,
   same ``ServerArgs.add_cli_args``), and walks ``parser._actions``.  Any value
   derived from a stand-in (a ``MagicMock`` in choices, defaults, types...)
   aborts the build, so stand-ins cannot leak into a catalog.  The environment
   is reduced to a fixed minimal one (no ``SGLANG_*`` variables: some choices
   depend on them).
5. Normalise (sorted keys, sets sorted, function types described by name,
   addresses stripped) and write ``sglang-<version>.json``.  Nothing in the
   file depends on the machine or the time, so the same wheel gives a
   byte-identical file.

``--check-argv FILE.json`` (FILE: a JSON list of argv lists) runs each argv
through the version's REAL parser (``prepare_server_args`` with
``parse_args`` stopped right after argparse returns) and prints one JSON line
per argv: ``{"argv": [...], "accepted": bool, "error": str|null}``.  Use it to
cross-check ``sglang_deploy.catalog.Catalog.check``.

Adding a version
----------------
Run ``python scripts/build_catalogs.py --versions X.Y.Z``.  The first run
downloads the wheel and prints its sha256; add it to ``KNOWN_WHEELS`` and to
``DEFAULT_VERSIONS``, rerun, and commit the JSON.  If the import fails
because a new pure-Python dependency is needed at import time, add its
distribution name to ``IMPORT_DEPS`` (GPU-only packages are stubbed
automatically).  The venvs are cached per version and dependency set; delete
the cache directory to rebuild them.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

FORMAT_VERSION = 1
DEFAULT_VERSIONS = ("0.5.9", "0.5.15", "0.5.19", "0.5.23")
KNOWN_WHEELS = {
    "0.5.9": (
        "sglang-0.5.9-py3-none-any.whl",
        "8a936c4d25fea605f44254e533cff2144c73ceffbc1f8738aba393461bbb64d1",
    ),
    "0.5.15": (
        "sglang-0.5.15-cp311-cp311-manylinux_2_34_x86_64.whl",
        "21492759b4b99e117bd81610f633422f3fdae2896c2cde6931eab886deccc44f",
    ),
    "0.5.19": (
        "sglang-0.5.19-cp311-cp311-manylinux_2_34_x86_64.whl",
        "425e87377e725d03db8262382008f3fd9561a6cf5d82f485f8b9929f02ffe12b",
    ),
    "0.5.23": (
        "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
        "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937",
    ),
}
PY_VERSION = "3.11"
PLATFORM = "manylinux_2_34_x86_64"
TORCH_SPEC = "torch==2.13.0"  # CPU build; its version does not shape the parser.
# Distributions installed for the import (specifier taken from the wheel's
# Requires-Dist when it names them; unpinned otherwise).
IMPORT_DEPS = (
    "aiohttp",
    "dill",
    "einops",
    "fastapi",
    "ipython",
    "msgspec",
    "numpy",
    "openai",
    "orjson",
    "packaging",
    "partial-json-parser",
    "pillow",
    "psutil",
    "pybase64",
    "pydantic",
    "pyzmq",
    "regex",
    "requests",
    "setproctitle",
    "tokenizers",
    "tqdm",
    "transformers",
    "uvicorn",
    "uvloop",
    "xgrammar",
)
# Stand-in modules (with a fake distribution version) visible to every
# importer: packages that exist for CUDA only but that transformers must see.
STANDIN_DISTS = {"torchvision": "0.28.0"}
ENV_FORMAT = 1  # bump to force the cached venvs to be rebuilt

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "sglang_deploy" / "data" / "catalogs"


# --------------------------------------------------------------------------
# Host side: wheels, venvs, normalisation
# --------------------------------------------------------------------------


def log(msg: str) -> None:
    print(f"[build_catalogs] {msg}", file=sys.stderr, flush=True)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache"
    )
    return Path(base) / "sglang-deploy-catalogs"


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


def ensure_wheel(wheel_dir: Path, version: str) -> Path:
    wheel = find_wheel(wheel_dir, version)
    if wheel is None:
        wheel_dir.mkdir(parents=True, exist_ok=True)
        log(f"downloading sglang=={version} into {wheel_dir}")
        subprocess.run(
            [
                sys.executable, "-m", "pip", "download", "--no-deps",
                "--only-binary=:all:", "--python-version", PY_VERSION,
                "--implementation", "cp", "--abi", "cp" + PY_VERSION.replace(".", ""),
                "--platform", PLATFORM, "-d", str(wheel_dir), f"sglang=={version}",
            ],
            check=True,
        )
        wheel = find_wheel(wheel_dir, version)
        if wheel is None:
            raise SystemExit(f"pip download gave no sglang-{version} wheel")
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


def find_python() -> str:
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == PY_VERSION:
        return sys.executable
    exe = shutil.which(f"python{PY_VERSION}")
    if exe is None:
        raise SystemExit(f"need a Python {PY_VERSION} interpreter (cp311 wheels)")
    return exe


def ensure_env(cache: Path, version: str, wheel: Path) -> tuple[Path, Path]:
    """Return (venv python, unpacked source dir) for this wheel."""
    digest = sha256_of(wheel)
    src = cache / f"src-{version}-{digest[:16]}"
    if not (src / ".complete").exists():
        if src.exists():
            shutil.rmtree(src)
        log(f"unpacking {wheel.name}")
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(src)
        (src / ".complete").write_text("ok\n")

    reqs = wheel_requirements(wheel)
    wanted = [TORCH_SPEC] + [
        reqs.get(re.sub(r"[-_.]+", "-", d).lower(), d) for d in IMPORT_DEPS
    ]
    key = hashlib.sha256(
        json.dumps([ENV_FORMAT, PY_VERSION, wanted]).encode()
    ).hexdigest()[:16]
    venv = cache / f"venv-{version}-{key}"
    py = venv / "bin" / "python"
    if not (venv / ".complete").exists():
        if venv.exists():
            shutil.rmtree(venv)
        log(f"creating venv for {version}: {' '.join(wanted)}")
        subprocess.run([find_python(), "-m", "venv", str(venv)], check=True)
        # torch first, so that nothing pulls the CUDA build.
        subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             "--prefer-binary", TORCH_SPEC],
            check=True,
        )
        subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             "--prefer-binary", *wanted],
            check=True,
        )
        (venv / ".complete").write_text("\n".join(wanted) + "\n")
    return py, src


def run_in_env(py: Path, src: Path, cache: Path, mode: list[str]) -> None:
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
            [str(py), str(Path(__file__).resolve()), *mode],
            check=True, env=env, cwd=cwd,
        )


BUILTIN_ACTIONS = {
    "_StoreAction": "store",
    "_StoreConstAction": "store_const",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_CountAction": "count",
    "_HelpAction": "help",
    "_VersionAction": "version",
    "_ExtendAction": "extend",
    "BooleanOptionalAction": "boolean_optional",
}

_DEPRECATED_HELP = re.compile(r"^\W*(deprecated|removed)\b", re.I)
_USE_INSTEAD = re.compile(
    r"\b(?:use|alias for)\s+['`\"]?(--[A-Za-z0-9][\w\-{},=<>|.]*(?:\s+<[^>]+>)?)",
    re.I,
)


def expand_braces(text: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", text)
    if not m:
        return [text]
    out = []
    for alt in m.group(1).split(","):
        out.extend(expand_braces(text[: m.start()] + alt + text[m.end():]))
    return out


def normalise(raw: dict, wheel: Path, digest: str, version: str) -> dict:
    options: dict[str, dict] = {}
    all_strings = {s for a in raw["actions"] for s in a["option_strings"]}
    positionals = []
    for a in raw["actions"]:
        cls = a["class_name"]
        action_name = BUILTIN_ACTIONS.get(cls, cls) if a["class_builtin"] else cls
        hidden = a["help"] == argparse.SUPPRESS
        help_full = "" if hidden else (a["help"] or "")
        help_first = help_full.strip().splitlines()[0].strip() if help_full.strip() else ""
        deprecated = "deprecated" in cls.lower() or bool(
            _DEPRECATED_HELP.match(help_full.strip())
        )
        replacement = a["extra"].get("new_flag")
        if deprecated and replacement is None:
            m = _USE_INSTEAD.search(help_full)
            if m:
                replacement = m.group(1).rstrip(".,;)")
        repl_opts = []
        if replacement:
            for cand in expand_braces(replacement):
                tok = re.match(r"--[A-Za-z0-9][A-Za-z0-9\-]*", cand)
                if tok and tok.group(0) in all_strings and tok.group(0) not in repl_opts:
                    repl_opts.append(tok.group(0))
        error = a["extra"].get("error_message") if "error_message" in a["extra"] else None
        nargs = a["nargs"]
        entry = {
            "dest": a["dest"],
            "option_strings": a["option_strings"],
            "action": action_name,
            "action_class": a["class_path"],
            "nargs": nargs,
            "takes_value": nargs != 0,
            "const": a["const"],
            "default": a["default"],
            "value_type": a["type"],
            "type_params": a["type_params"],
            "choices": a["choices"],
            "required": a["required"],
            "deprecated": deprecated,
            "replacement": replacement,
            "replacement_options": repl_opts,
            "error": error,
            "help": help_first,
            "hidden": hidden,
            "metavar": a["metavar"],
        }
        if not a["option_strings"]:
            positionals.append(entry)
            continue
        for s in a["option_strings"]:
            if s in options:
                raise SystemExit(f"{version}: option {s} registered twice")
            # "order": registration order, which argparse follows when it
            # lists the candidates of an ambiguous prefix
            options[s] = dict(entry, option=s, order=len(options))
    return {
        "format": FORMAT_VERSION,
        "sglang_version": version,
        "wheel": {"filename": wheel.name, "sha256": digest},
        "method": (
            "import: sglang.srt.server_args.prepare_server_args built the parser "
            "in a CPU-only venv (GPU-only modules stubbed); parser._actions walked"
        ),
        "python": PY_VERSION,
        "parser": raw["parser"],
        "import_stubs": raw["stubs"],
        "mutually_exclusive_groups": raw["mutex_groups"],
        "positionals": positionals,
        "options": options,
    }


def dump_json(obj) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def build(version: str, wheel_dir: Path, out: Path, cache: Path) -> Path:
    wheel = ensure_wheel(wheel_dir, version)
    digest = sha256_of(wheel)
    py, src = ensure_env(cache, version, wheel)
    with tempfile.TemporaryDirectory() as td:
        raw_path = Path(td) / "raw.json"
        log(f"{version}: reading the parser")
        run_in_env(py, src, cache, ["--_dump", str(raw_path)])
        raw = json.loads(raw_path.read_text())
    catalog = normalise(raw, wheel, digest, version)
    text = dump_json(catalog)
    for leak in (str(cache), str(wheel_dir.resolve()), os.path.expanduser("~")):
        if leak and leak != "/" and leak in text:
            raise SystemExit(f"{version}: machine path {leak!r} would be written")
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"sglang-{version}.json"
    target.write_text(text)
    log(f"{version}: {len(catalog['options'])} option strings -> {target}")
    return target


# --------------------------------------------------------------------------
# Inside the throwaway venv
# --------------------------------------------------------------------------


class _Captured(Exception):
    pass


def _install_stub_finder() -> list[str]:
    """Stand-ins for modules that cannot be installed on a CPU-only host.

    ``STANDIN_DISTS`` are visible to everyone (with a fake distribution
    version, because transformers refuses image processors without
    torchvision); any other top-level module that is not installed is stubbed
    only when an ``sglang.*`` module imports it, so third-party availability
    probes (``try: import flash_attn``) keep seeing the truth.
    """
    import importlib.abc
    import importlib.machinery
    import importlib.metadata
    import types
    from unittest import mock

    stubbed: list[str] = []

    def make_module(name: str):
        m = types.ModuleType(name)
        m.__path__ = []
        m.__version__ = STANDIN_DISTS.get(name.partition(".")[0], "0.0.0")

        def __getattr__(attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            v = mock.MagicMock(name=f"{name}.{attr}")
            setattr(m, attr, v)
            return v

        m.__getattr__ = __getattr__
        return m

    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            return make_module(spec.name)

        def exec_module(self, module):
            pass

    class FakeDist(importlib.metadata.Distribution):
        def __init__(self, name: str, version: str):
            self._text = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"

        def read_text(self, filename):
            return self._text if filename in ("METADATA", "PKG-INFO") else None

        def locate_file(self, path):
            return None

    def imported_by_sglang() -> bool:
        f = sys._getframe(2)
        while f is not None:
            n = f.f_globals.get("__name__", "")
            if not n.startswith(("importlib", "_frozen_importlib")) and n != __name__:
                return n == "sglang" or n.startswith("sglang.")
            f = f.f_back
        return False

    def stub_spec(name: str, top: str):
        if top not in stubbed:
            stubbed.append(top)
        return importlib.machinery.ModuleSpec(name, Loader(), is_package=True)

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            top = name.partition(".")[0]
            if top in stubbed or top in STANDIN_DISTS:
                return stub_spec(name, top)
            if "." in name or top in sys.stdlib_module_names or top == "sglang":
                return None
            for finder in sys.meta_path:
                if finder is self:
                    continue
                try:
                    spec = finder.find_spec(name, path, target)
                except Exception:
                    spec = None
                if spec is not None:
                    return spec
            if not imported_by_sglang():
                return None
            return stub_spec(name, top)

        def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
            name = (context.name or "").replace("-", "_").lower()
            if name in STANDIN_DISTS:
                return iter([FakeDist(name, STANDIN_DISTS[name])])
            return iter(())

    sys.meta_path.insert(0, Finder())
    return stubbed


def _prepare_import():
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    # ``python -m sglang.launch_server`` gives argparse this program name.
    sys.argv = ["launch_server.py"]
    stubbed = _install_stub_finder()
    # Let transformers probe (and cache) which optional packages exist before
    # any sglang import creates a stand-in, so that it does not mistake one
    # for the real package.  STANDIN_DISTS are meant to be seen.
    with contextlib.suppress(Exception):
        import transformers.utils.import_utils as iu

        for n in sorted(dir(iu)):
            if n.startswith("is_") and n.endswith("_available"):
                with contextlib.suppress(Exception):
                    getattr(iu, n)()
    with contextlib.redirect_stdout(io.StringIO()):
        # What ``python -m sglang.launch_server`` imports before it parses
        # (some choices depend on which registries are already imported).
        importlib.import_module("sglang.launch_server")
        import sglang.srt.server_args as sa
    return sa, stubbed


def _capture_parser(sa) -> argparse.ArgumentParser:
    captured = {}
    orig = argparse.ArgumentParser.parse_args

    def fake_parse_args(self, args=None, namespace=None):
        captured["parser"] = self
        raise _Captured()

    argparse.ArgumentParser.parse_args = fake_parse_args
    try:
        sa.prepare_server_args([])
    except _Captured:
        pass
    finally:
        argparse.ArgumentParser.parse_args = orig
    if "parser" not in captured:
        raise SystemExit("prepare_server_args did not call parse_args")
    return captured["parser"]


def _is_mock(obj) -> bool:
    from unittest import mock

    return isinstance(obj, mock.Base) or "MagicMock" in repr(obj)


def _describe_callable(fn) -> str:
    import json as _json

    if fn is None or fn is str:
        return "str"
    if fn is int:
        return "int"
    if fn is float:
        return "float"
    if fn is str.upper:
        return "upper"
    if fn is str.lower:
        return "lower"
    if fn is _json.loads:
        return "json"
    mod = getattr(fn, "__module__", None) or type(fn).__module__
    qual = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{mod}.{qual}"


def _type_params(fn) -> dict | None:
    """Parameters of a custom ``type=`` function that the validator in
    sglang_deploy/catalog.py needs in order to replay it (read from the real
    module, probed where the behaviour is not data)."""
    name = getattr(fn, "__name__", "")
    if name == "parse_cuda_graph_config_arg":
        import importlib

        mod = importlib.import_module(fn.__module__)
        allowed = {str(k): list(v) for k, v in mod.ALLOWED_KEYS_PER_PHASE.items()}
        phases = [str(p) for p in mod.Phase.ALL]
        try:
            fn(json.dumps({phases[0]: {"backend": "tc_piecewise"}}))
            backend_checked = False
        except Exception:
            backend_checked = True
        return {
            "phases": phases,
            "allowed_keys": allowed,
            "backend_checked": backend_checked,
        }
    return None


def _jsonable(obj):
    import enum
    import math

    if _is_mock(obj):
        raise SystemExit(f"a stand-in module leaked into the parser: {obj!r}")
    if obj is None or isinstance(obj, (bool, int, str)):
        if isinstance(obj, enum.Enum):
            return _jsonable(obj.value)
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else repr(obj)
    if isinstance(obj, (list, tuple)):
        return [_jsonable(x) for x in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted((_jsonable(x) for x in obj), key=lambda x: json.dumps(x))
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, enum.Enum):
        return _jsonable(obj.value)
    if callable(obj):
        return "<" + _describe_callable(obj) + ">"
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(obj))


def _dump(out_path: str) -> None:
    sa, stubbed = _prepare_import()
    parser = _capture_parser(sa)
    actions = []
    for act in parser._actions:
        cls = type(act)
        extra = {}
        for k in ("new_flag", "error_message", "const_value"):
            if k in vars(act):
                extra[k] = _jsonable(vars(act)[k])
        if _is_mock(act.type) or _is_mock(cls):
            raise SystemExit(f"stand-in leaked into {act.option_strings}")
        choices = act.choices
        if choices is not None:
            if isinstance(choices, (set, frozenset)):
                choices = sorted(choices, key=lambda x: (type(x).__name__, x))
            elif not isinstance(choices, (list, tuple)):
                choices = list(choices)
        actions.append(
            {
                "option_strings": list(act.option_strings),
                "dest": act.dest,
                "class_name": cls.__name__,
                "class_path": f"{cls.__module__}.{cls.__qualname__}",
                "class_builtin": cls.__module__ == "argparse",
                "nargs": act.nargs,
                "const": _jsonable(act.const),
                "default": _jsonable(act.default),
                "type": _describe_callable(act.type),
                "type_params": _jsonable(_type_params(act.type)),
                "choices": _jsonable(choices),
                "required": bool(act.required),
                "help": act.help if isinstance(act.help, str) else None,
                "metavar": _jsonable(act.metavar),
                "extra": extra,
            }
        )
    mutex = [
        sorted(s for a in g._group_actions for s in (a.option_strings or [a.dest]))
        for g in parser._mutually_exclusive_groups
    ]
    raw = {
        "parser": {
            "prog": parser.prog,
            "allow_abbrev": parser.allow_abbrev,
            "prefix_chars": parser.prefix_chars,
            "fromfile_prefix_chars": parser.fromfile_prefix_chars,
            "add_help": parser.add_help,
            "exit_on_error": parser.exit_on_error,
            "argument_default": _jsonable(parser.argument_default),
        },
        "stubs": sorted(set(stubbed)),
        "mutex_groups": mutex,
        "actions": actions,
    }
    Path(out_path).write_text(json.dumps(raw, sort_keys=True))


def _check_argv(in_path: str, version: str) -> None:
    sa, _ = _prepare_import()
    argvs = json.loads(Path(in_path).read_text())
    orig = argparse.ArgumentParser.parse_args

    def stop_after_parse(self, args=None, namespace=None):
        ns = orig(self, args, namespace)
        raise _Captured(ns)

    argparse.ArgumentParser.parse_args = stop_after_parse
    for argv in argvs:
        err = io.StringIO()
        accepted, message = False, None
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                sa.prepare_server_args(list(argv))
            except _Captured:
                accepted = True
            except SystemExit as e:
                message = err.getvalue().strip().splitlines()[-1:] or [f"exit {e.code}"]
                message = message[0]
                if e.code == 0:
                    accepted, message = True, "exit 0 (help/version)"
            except Exception as e:  # an action or type function raised
                message = f"{type(e).__name__}: {e}"
        print(
            json.dumps(
                {"version": version, "argv": argv, "accepted": accepted, "error": message}
            ),
            flush=True,
        )


# --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", default=",".join(DEFAULT_VERSIONS))
    ap.add_argument("--wheel-dir", type=Path, default=None,
                    help="where wheels are looked up / downloaded "
                         "(default: <cache-dir>/wheels)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--check-argv", type=Path, default=None, metavar="FILE.json")
    ap.add_argument("--_dump", dest="dump", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_check", dest="check", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_version", dest="inner_version", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.dump:
        _dump(args.dump)
        return 0
    if args.check:
        _check_argv(args.check, args.inner_version)
        return 0

    cache = (args.cache_dir or default_cache_dir()).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    wheel_dir = (args.wheel_dir or cache / "wheels").resolve()
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]

    if args.check_argv is not None:
        for version in versions:
            wheel = ensure_wheel(wheel_dir, version)
            py, src = ensure_env(cache, version, wheel)
            run_in_env(
                py, src, cache,
                ["--_check", str(args.check_argv.resolve()), "--_version", version],
            )
        return 0

    for version in versions:
        build(version, wheel_dir, args.out, cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
