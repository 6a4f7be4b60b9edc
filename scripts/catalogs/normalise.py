"""The actions ``introspect.py`` dumped -> the catalog: one entry per option
string (sets sorted, function types named, deprecations and their replacements
read from the help), written as canonical JSON (sorted keys, nothing that
depends on the machine or the time)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from scripts.catalogs.config import FORMAT_VERSION, PY_VERSION

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


def _replacement(a: dict, deprecated: bool, help_full: str,
                 all_strings: set[str]) -> tuple[str | None, list[str]]:
    """The replacement a deprecated option names (its ``new_flag``, else "use
    --x" in its help) and those of its option strings the parser has."""
    replacement = a["extra"].get("new_flag")
    if deprecated and replacement is None:
        m = _USE_INSTEAD.search(help_full)
        if m:
            replacement = m.group(1).rstrip(".,;)")
    repl_opts: list[str] = []
    if replacement:
        for cand in expand_braces(replacement):
            tok = re.match(r"--[A-Za-z0-9][A-Za-z0-9\-]*", cand)
            if tok and tok.group(0) in all_strings and tok.group(0) not in repl_opts:
                repl_opts.append(tok.group(0))
    return replacement, repl_opts


def action_entry(a: dict, all_strings: set[str]) -> dict:
    """The catalog entry of one dumped action (shared by its option strings)."""
    cls = a["class_name"]
    action_name = BUILTIN_ACTIONS.get(cls, cls) if a["class_builtin"] else cls
    hidden = a["help"] == argparse.SUPPRESS
    help_full = "" if hidden else (a["help"] or "")
    help_first = help_full.strip().splitlines()[0].strip() if help_full.strip() else ""
    deprecated = "deprecated" in cls.lower() or bool(
        _DEPRECATED_HELP.match(help_full.strip())
    )
    replacement, repl_opts = _replacement(a, deprecated, help_full, all_strings)
    error = a["extra"].get("error_message") if "error_message" in a["extra"] else None
    nargs = a["nargs"]
    return {
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


def normalise(raw: dict, wheel: Path, digest: str, version: str) -> dict:
    options: dict[str, dict] = {}
    all_strings = {s for a in raw["actions"] for s in a["option_strings"]}
    positionals = []
    for a in raw["actions"]:
        entry = action_entry(a, all_strings)
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
