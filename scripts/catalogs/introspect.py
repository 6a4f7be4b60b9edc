"""Runs INSIDE the throwaway venv (standard library only, run as a file, never
imported by the host side): reads the version's real ``launch_server`` parser.

    python introspect.py --_dump RAW.json
    python introspect.py --_check ARGVS.json --_version X.Y.Z

``--_dump`` installs an import hook that replaces, only for imports made by
``sglang.*`` modules, every top-level module that is not installed by an empty
stand-in whose attributes are ``MagicMock`` objects; calls the version's own
``prepare_server_args([])`` with ``ArgumentParser.parse_args`` patched to
capture the parser and stop; and writes ``parser._actions`` as JSON (any value
derived from a stand-in aborts).  ``--_check`` runs each argv of a JSON list
through the same parser, stopped right after argparse returns, and prints one
JSON line per argv.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import io
import json
import re
import sys
import types
from pathlib import Path
from unittest import mock

# Stand-in modules (with a fake distribution version) visible to every
# importer: packages that exist for CUDA only but that transformers must see.
STANDIN_DISTS = {"torchvision": "0.28.0"}


class _Captured(Exception):
    pass


def _standin_module(name: str):
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


class _StandinLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return _standin_module(spec.name)

    def exec_module(self, module):
        pass


class _FakeDist(importlib.metadata.Distribution):
    def __init__(self, name: str, version: str):
        self._text = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"

    def read_text(self, filename):
        return self._text if filename in ("METADATA", "PKG-INFO") else None

    def locate_file(self, path):
        return None


def _install_stub_finder() -> list[str]:
    """Stand-ins for modules that cannot be installed on a CPU-only host.

    ``STANDIN_DISTS`` are visible to everyone (with a fake distribution
    version, because transformers refuses image processors without
    torchvision); any other top-level module that is not installed is stubbed
    only when an ``sglang.*`` module imports it, so third-party availability
    probes (``try: import flash_attn``) keep seeing the truth.
    """
    stubbed: list[str] = []

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
        return importlib.machinery.ModuleSpec(name, _StandinLoader(), is_package=True)

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

        def find_distributions(self, context=None):
            # importlib.metadata always passes a context; the stdlib's own default is an empty one
            if context is None:
                context = importlib.metadata.DistributionFinder.Context()
            name = (context.name or "").replace("-", "_").lower()
            if name in STANDIN_DISTS:
                return iter([_FakeDist(name, STANDIN_DISTS[name])])
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
    """Parameters of a custom ``type=`` function that sglang_deploy/plan/catalog_parser.py
    needs to rebuild it as the ``type=`` of the argparse parser it makes from
    the catalog (read from the real module, probed where the behaviour is not
    data)."""
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


def _action_record(act: argparse.Action) -> dict:
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
    return {
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


def _dump(out_path: str) -> None:
    sa, stubbed = _prepare_import()
    parser = _capture_parser(sa)
    actions = [_action_record(act) for act in parser._actions]
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--_dump", dest="dump", default=None)
    ap.add_argument("--_check", dest="check", default=None)
    ap.add_argument("--_version", dest="inner_version", default="")
    args = ap.parse_args(argv)
    if args.dump:
        _dump(args.dump)
    elif args.check:
        _check_argv(args.check, args.inner_version)
    else:
        ap.error("--_dump or --_check is required")
    return 0


if __name__ == "__main__":
    # The host side's modules sit next to this file: keep them out of the
    # imports of sglang and its dependencies.
    if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
        del sys.path[0]
    sys.exit(main())
