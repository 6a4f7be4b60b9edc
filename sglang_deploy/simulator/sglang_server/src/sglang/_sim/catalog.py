"""The embedded option catalog (``sglang/_sim/catalog.json``, written by
build.py from ``sglang_deploy/data/catalogs/sglang-<version>.json``) and the
argparse arguments made from it."""

from __future__ import annotations

import argparse
import json
import pkgutil
from functools import lru_cache
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from sglang.srt.arg_groups import argparse_actions as acts
from sglang.srt.model_executor.cuda_graph_config import (
    make_cuda_graph_config_parser,
    parse_cuda_graph_backend_arg,
)
from sglang.srt.utils.common import human_readable_int, json_list_type, nullable_str

_TYPES: Dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "json": json.loads,
    "upper": str.upper,
    "lower": str.lower,
    "human_readable_int": human_readable_int,
    "json_list_type": json_list_type,
    "nullable_str": nullable_str,
    "parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
}


@lru_cache(maxsize=None)
def load() -> Dict[str, Any]:
    raw = pkgutil.get_data("sglang._sim", "catalog.json")
    if raw is None:  # pragma: no cover - loader without get_data
        raise RuntimeError("the simulated sglang has no embedded catalog")
    return json.loads(raw.decode("utf-8"))


def value_type(spec: Mapping[str, Any]) -> Optional[Callable[[str], Any]]:
    """The ``type=`` of an option; None (value kept as given) when unknown."""
    name = spec.get("value_type") or "str"
    short = name.rsplit(".", 1)[-1]
    if short == "parse_cuda_graph_config_arg":
        return make_cuda_graph_config_parser(spec.get("type_params"))
    return _TYPES.get(name) or _TYPES.get(short)


def grouped_options(data: Mapping[str, Any]) -> List[Tuple[Tuple[str, ...], Dict[str, Any]]]:
    """One entry per argparse action, in registration order."""
    items = sorted(data["options"].items(), key=lambda kv: kv[1].get("order", 0))
    seen = set()
    out = []
    for option, spec in items:
        strings = tuple(spec.get("option_strings") or (option,))
        if strings in seen:
            continue
        seen.add(strings)
        out.append((strings, spec))
    return out


def _const_from_replacement(spec: Mapping[str, Any]) -> Any:
    # "--cuda-graph-backend-prefill=disabled" -> "disabled"
    repl = spec.get("replacement") or ""
    if spec.get("const") is not None:
        return spec["const"]
    if "=" in repl and " " not in repl.split("=", 1)[1]:
        return repl.split("=", 1)[1]
    return True


def _help(spec: Mapping[str, Any]) -> Optional[str]:
    if spec.get("hidden"):
        return argparse.SUPPRESS
    return (spec.get("help") or "").replace("%", "%%") or None


def add_arguments(parser: argparse.ArgumentParser, data: Mapping[str, Any]) -> None:
    """Add every option of the catalog to ``parser`` (its own -h/--help kept)."""
    for strings, spec in grouped_options(data):
        action = spec["action"]
        nargs = spec.get("nargs")
        common: Dict[str, Any] = {"dest": spec["dest"], "help": _help(spec)}
        if spec.get("required"):
            common["required"] = True
        if isinstance(spec.get("metavar"), str):
            common["metavar"] = spec["metavar"]
        default = spec.get("default")
        choices = spec.get("choices")
        typ = value_type(spec)
        valued: Dict[str, Any] = {}
        if nargs != 0:
            if typ is not None:
                valued["type"] = typ
            if choices is not None:
                valued["choices"] = list(choices)
            if nargs is not None:
                valued["nargs"] = nargs

        if action == "help":
            if any(s in parser._option_string_actions for s in strings):
                continue  # the parser's own (add_help=True)
            parser.add_argument(*strings, action="help", help=common["help"])
        elif action == "version":
            parser.add_argument(*strings, action="version", version=str(default))
        elif action == "store":
            if nargs == "?":
                valued["const"] = spec.get("const")
            parser.add_argument(*strings, action="store", default=default, **valued, **common)
        elif action in ("store_true", "store_false", "count"):
            parser.add_argument(*strings, action=action, default=default, **common)
        elif action in ("store_const", "append_const"):
            parser.add_argument(
                *strings, action=action, const=spec.get("const"), default=default, **common
            )
        elif action in ("append", "extend"):
            parser.add_argument(*strings, action=action, default=default, **valued, **common)
        elif action == "boolean_optional":
            generated = {"--no-" + s[2:] for s in strings if s.startswith("--")}
            own = [s for s in strings if s not in generated] or list(strings[:1])
            parser.add_argument(
                *own, action=argparse.BooleanOptionalAction, default=default, **common
            )
        elif action == "DeprecatedAction":
            parser.add_argument(
                *strings,
                action=acts.DeprecatedAction,
                nargs=0 if nargs is None else nargs,
                error_message=spec.get("error"),
                new_flag=spec.get("replacement"),
                default=default,
                **common,
            )
        elif action == "DeprecatedAliasStoreAction":
            parser.add_argument(
                *strings,
                action=acts.DeprecatedAliasStoreAction,
                new_flag=spec.get("replacement"),
                default=default,
                **valued,
                **common,
            )
        elif action == "DeprecatedStoreTrueAction":
            parser.add_argument(
                *strings,
                action=acts.DeprecatedStoreTrueAction,
                new_flag=spec.get("replacement"),
                default=default,
                **common,
            )
        elif action == "DeprecatedStoreConstAction":
            kw = dict(valued)
            kw.pop("nargs", None)
            parser.add_argument(
                *strings,
                action=acts.DeprecatedStoreConstAction,
                nargs=nargs,
                const_value=_const_from_replacement(spec),
                new_flag=spec.get("replacement"),
                default=default,
                **kw,
                **common,
            )
        elif action == "LoRAPathAction":
            parser.add_argument(
                *strings, action=acts.LoRAPathAction, default=default, **valued, **common
            )
        elif nargs == 0:  # an action class this simulator does not know: a flag
            parser.add_argument(
                *strings, action="store_const", const=spec.get("const", True), default=default,
                **common,
            )
        else:
            parser.add_argument(*strings, action="store", default=default, **valued, **common)
