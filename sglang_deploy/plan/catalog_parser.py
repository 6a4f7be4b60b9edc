"""A catalog's options as a real ``argparse`` parser, and the argv check on it.

A catalog records each option the way the released SGLang parser declares it
(``sglang/srt/server_args.py``, ``ServerArgs.add_cli_args``: a plain
``argparse.ArgumentParser``): option strings, ``nargs``, ``type``, choices,
``const``, and the retired flags whose action calls ``parser.error()``.
:class:`CatalogParser` hands those to ``argparse`` and lets it parse, so exact
and abbreviated options (``allow_abbrev``), ``--opt=value``, negative numbers
as values, ``nargs``, type conversion and choices are decided by the standard
library, with its own error messages.  The catalogs were recorded under
Python 3.11 (the agreement tests run there); under another Python the rules
of that Python's argparse apply, as they would to SGLang's own parser.

argparse stops at its first error; :meth:`CatalogParser.check` goes on and
returns every problem, in the order argparse meets them (the first one is
what argparse reports): ambiguous prefixes, errors while consuming options
(argv order), missing required options, then the unrecognized leftovers.

Pure module: no I/O.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Iterable, Mapping, NoReturn, Protocol, Sequence

__all__ = ["REJECTION_KINDS", "CatalogParser", "OptionSpec", "Rejection", "TypeRefusal", "converter"]


@dataclass(frozen=True)
class OptionSpec:
    """One option string of the parser (aliases share everything but ``option``)."""

    option: str
    dest: str
    takes_value: bool
    nargs: None | str | int
    choices: tuple[str, ...] | None
    value_type: str
    action: str
    deprecated: bool
    replacement: str | None
    help: str
    default: Any
    option_strings: tuple[str, ...] = ()
    const: Any = None
    required: bool = False
    error: str | None = None
    replacement_options: tuple[str, ...] = ()
    type_params: Mapping[str, Any] | None = field(default=None, repr=False)
    choice_values: tuple[Any, ...] | None = field(default=None, repr=False)

    def __hash__(self) -> int:  # defaults / type_params may be lists or dicts
        return hash((self.option, self.dest, self.action))

    @property
    def name(self) -> str:
        """How argparse names the argument in its errors: ``--a/--b``."""
        return "/".join(self.option_strings or (self.option,))

    @property
    def aliases(self) -> tuple[str, ...]:
        """The other option strings of the same argument."""
        return tuple(o for o in self.option_strings if o != self.option)

    @classmethod
    def from_json(cls, option: str, d: Mapping[str, Any]) -> "OptionSpec":
        raw_choices = d.get("choices")
        return cls(
            option=option,
            dest=d["dest"],
            takes_value=bool(d["takes_value"]),
            nargs=d.get("nargs"),
            choices=None if raw_choices is None else tuple(str(c) for c in raw_choices),
            value_type=d.get("value_type") or "str",
            action=d["action"],
            deprecated=bool(d.get("deprecated", False)),
            replacement=d.get("replacement"),
            help=d.get("help") or "",
            default=d.get("default"),
            option_strings=tuple(d.get("option_strings") or (option,)),
            const=d.get("const"),
            required=bool(d.get("required", False)),
            error=d.get("error"),
            replacement_options=tuple(d.get("replacement_options") or ()),
            type_params=d.get("type_params"),
            choice_values=None if raw_choices is None else tuple(raw_choices),
        )


class ParserSource(Protocol):
    """What a parser is built from (``catalog.Catalog``)."""

    @property
    def options(self) -> Mapping[str, OptionSpec]: ...

    @property
    def allow_abbrev(self) -> bool: ...

    @property
    def prefix_chars(self) -> str: ...

    @property
    def prog(self) -> str | None: ...

#: Every ``Rejection.kind`` that :meth:`CatalogParser.check` can return.
REJECTION_KINDS = (
    "unknown",  # argparse: unrecognized arguments: --foo
    "ambiguous",  # argparse: ambiguous option: --x could match --x-a, --x-b
    "missing-value",  # argparse: expected one argument / at least one ...
    "bad-choice",  # argparse: invalid choice: 'x' (choose from ...)
    "bad-type",  # argparse: invalid int value: 'x' (or the type's own message)
    "unexpected-value",  # argparse: ignored explicit argument 'v' (--flag=v)
    "positional",  # argparse: unrecognized arguments: stray
    "removed",  # the option's action calls parser.error() (flag retired)
    "missing-required",  # argparse: the following arguments are required
)


@dataclass(frozen=True)
class Rejection:
    """One reason why argparse would refuse the argv."""

    arg: str
    kind: str
    message: str


# --------------------------------------------------------------------------
# value types: SGLang's ``type=`` functions, named in the catalog
# --------------------------------------------------------------------------


class TypeRefusal(Exception):
    """The type function refused the string with its own message."""


def _human_readable_int(value: str) -> int:
    # sglang.srt.utils.common.human_readable_int (0.5.15 .. 0.5.23)
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if m:
        number, suffix = m.groups()
        if suffix in iec:
            if "." in number:
                raise TypeRefusal(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * iec[suffix]
        try:
            return int(Decimal(number) * si[suffix])
        except InvalidOperation as e:  # pragma: no cover - regex guarantees digits
            raise TypeRefusal(str(e)) from e
    try:
        return int(value)
    except ValueError:
        raise TypeRefusal(
            f"Invalid integer value: '{value}'. Use a plain integer, SI suffixes "
            "(1k, 1M), or IEC suffixes (1Ki, 1Mi). Suffixes are case-sensitive."
        ) from None


def _strict_json(value: str) -> Any:
    def no_constants(name: str) -> Any:
        raise ValueError(f"invalid JSON constant {name}")

    return json.loads(value, parse_constant=no_constants)


def _json_list_type(value: str) -> Any:
    # orjson.loads: strict JSON (no NaN/Infinity)
    try:
        return _strict_json(value)
    except ValueError:
        raise TypeRefusal(f"Invalid JSON list: {value}. Please provide a valid JSON list.") from None


def _nullable_str(value: str) -> str | None:
    return None if not value or value == "None" else value


def _cuda_graph_backend(value: str) -> str:
    if value == "tc_piecewise":
        raise TypeRefusal("tc_piecewise was removed; select breakable, full, or disabled")
    return value


def _cuda_graph_config(value: str, params: Mapping[str, Any] | None = None) -> Any:
    # sglang.srt.model_executor.cuda_graph_config.parse_cuda_graph_config_arg;
    # phases / allowed keys / backend check come from the catalog.
    try:
        parsed = json.loads(value)
    except ValueError as e:
        raise TypeRefusal(f"--cuda-graph-config must be JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise TypeRefusal(f"--cuda-graph-config must be a JSON object, got {type(parsed).__name__}")
    if not params:
        return parsed
    phases = tuple(params.get("phases") or ())
    allowed = params.get("allowed_keys") or {}
    for phase, settings in parsed.items():
        phase = str(phase)
        if phase not in phases:
            raise TypeRefusal(
                f"--cuda-graph-config: unknown phase '{phase}', expected one of {phases}"
            )
        if not isinstance(settings, dict):
            raise TypeRefusal(
                f"--cuda-graph-config['{phase}'] must be a JSON object, got "
                f"{type(settings).__name__}"
            )
        if params.get("backend_checked") and "backend" in settings:
            _cuda_graph_backend(settings["backend"])
        keys = tuple(allowed.get(phase, ()))
        for key in settings:
            if key not in keys:
                raise TypeRefusal(
                    f"--cuda-graph-config['{phase}']: unknown key '{key}', expected one of {keys}"
                )
    return parsed


_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "upper": str.upper,
    "lower": str.lower,
    "json": json.loads,
    "human_readable_int": _human_readable_int,
    "json_list_type": _json_list_type,
    "nullable_str": _nullable_str,
    "parse_cuda_graph_backend_arg": _cuda_graph_backend,
    "parse_cuda_graph_config_arg": _cuda_graph_config,
}

_WITH_PARAMS = {"parse_cuda_graph_config_arg"}


def converter(value_type: str, params: Mapping[str, Any] | None = None) -> Callable[[str], Any] | None:
    """The converter for a catalog ``value_type``; None when unknown (the
    value is then taken as is: the validator cannot run foreign code)."""
    if value_type in _CONVERTERS:
        return _CONVERTERS[value_type]
    short = value_type.rsplit(".", 1)[-1]
    conv = _CONVERTERS.get(short)
    if conv is not None and short in _WITH_PARAMS:
        return lambda v: conv(v, params)  # type: ignore[call-arg]
    return conv


def _type_function(spec: OptionSpec) -> Callable[[str], Any] | None:
    """``type=`` for argparse: a TypeRefusal becomes the message argparse
    prints; TypeError / ValueError give its ``invalid <name> value: 'v'``."""
    conv = converter(spec.value_type, spec.type_params)
    if conv is None:
        return None

    def convert(value: str) -> Any:
        try:
            return conv(value)
        except TypeRefusal as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    # argparse names the type by __name__; SGLang passes json.loads itself
    name = spec.value_type.rsplit(".", 1)[-1]
    convert.__name__ = "loads" if name == "json" else name
    return convert


# --------------------------------------------------------------------------
# the parser
# --------------------------------------------------------------------------


class _Refused(Exception):
    """``parser.error(message)``: argparse would print it and exit 2."""


class _Removed(_Refused):
    """A retired option's action called ``parser.error()``."""


class _Stop(Exception):
    """``--help``: argparse would print and exit 0."""


class _Parser(argparse.ArgumentParser):
    """Raises instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise _Refused(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise _Stop()


class _Action(argparse.Action):
    """Stores the values; ``--help`` stops the parse, and a retired option
    refuses it the way SGLang's ``DeprecatedAction(error_message=...)`` does."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, stop: bool = False,
                 error: str | None = None, **kw: Any) -> None:
        super().__init__(option_strings, dest, **kw)
        self.stop, self.error = stop, error

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        if self.stop:
            raise _Stop()
        if self.error:
            raise _Removed(self.error)
        setattr(namespace, self.dest, values)


def _build(catalog: ParserSource, strict: bool) -> _Parser:
    """The catalog's parser.  Each argument's dest is its name (``--a/--b``),
    so the parsed namespace says which arguments were given.  Not ``strict``:
    no types, choices or retired-option errors, only how args are consumed."""
    parser = _Parser(prog=catalog.prog, usage="", add_help=False, allow_abbrev=catalog.allow_abbrev,
                     prefix_chars=catalog.prefix_chars, argument_default=argparse.SUPPRESS,
                     exit_on_error=False)
    done = set()
    for spec in catalog.options.values():
        if spec.option_strings in done:
            continue
        done.add(spec.option_strings)
        convert = _type_function(spec) if strict else None
        typed: dict[str, Any] = {} if convert is None else {"type": convert}  # argparse's default: no conversion
        parser.add_argument(
            *spec.option_strings, action=_Action, dest=spec.name, nargs=spec.nargs, const=spec.const, **typed,
            choices=spec.choice_values if strict else None,
            stop=spec.action in ("help", "version"), error=spec.error if strict else None,
        )
    return parser


@dataclass(frozen=True)
class _Arg:
    """How argparse reads one arg before ``--``."""

    kind: str  # "plain", "option", "unknown" or "ambiguous"
    explicit: bool = False  # an option with its value attached (--opt=v)
    option: str = ""  # the option string it resolves to
    message: str = ""  # why it is ambiguous


def _rejection(arg: str, exc: Exception) -> Rejection:
    if isinstance(exc, _Removed):
        return Rejection(arg, "removed", str(exc))
    text = exc.message if isinstance(exc, argparse.ArgumentError) else str(exc)
    kind = next((k for prefix, k in _KINDS_BY_MESSAGE if text.startswith(prefix)), "bad-type")
    return Rejection(arg, kind, str(exc))


_KINDS_BY_MESSAGE = (  # argparse's messages; anything else is the type function's
    ("ambiguous option: ", "ambiguous"),
    ("expected ", "missing-value"),
    ("ignored explicit argument ", "unexpected-value"),
    ("invalid choice: ", "bad-choice"),
)


class CatalogParser:
    """The argparse parser of one catalog (build it once per catalog)."""

    def __init__(self, catalog: ParserSource) -> None:
        self.catalog = catalog
        self.parser = _build(catalog, strict=True)
        self._consuming: _Parser | None = None
        self._required = list(dict.fromkeys(s.name for s in catalog.options.values() if s.required))

    def _consume(self, args: list[str]) -> tuple[set[str], list[str]]:
        """The arguments given and the leftovers, ignoring types and choices."""
        if self._consuming is None:
            self._consuming = _build(self.catalog, strict=False)
        namespace, rest = self._consuming.parse_known_args(args)
        return set(vars(namespace)), rest

    def read(self, arg: str) -> _Arg:
        """Option or value, as argparse decides it.  This is the private
        ``ArgumentParser._parse_optional``: None for a value, else an
        ``(action, option_string, [sep,] explicit_arg)`` tuple (a list of
        them from Python 3.12.7); it calls ``error()`` when ambiguous."""
        try:
            found = self.parser._parse_optional(arg)
        except (_Refused, argparse.ArgumentError) as e:
            return _Arg("ambiguous", message=str(e))
        if found is None:
            return _Arg("plain")
        if isinstance(found, list):
            found = found[0]
        if found[0] is None:
            return _Arg("unknown")
        return _Arg("option", explicit=found[-1] is not None, option=found[1])

    def resolve(self, option: str) -> OptionSpec | None:
        read = self.read(option)
        return self.catalog.options[read.option] if read.kind == "option" else None

    def check(self, argv: Sequence[str], check_required: bool = True) -> list[Rejection]:
        """Every reason argparse would refuse ``argv``; empty when it accepts."""
        argv = [str(a) for a in argv]
        try:
            namespace, extras = self.parser.parse_known_args(argv)
        except _Stop:
            return []
        except (_Refused, argparse.ArgumentError):
            pass
        else:
            if not extras:  # the common case: one parse says all
                return self._missing(set(vars(namespace))) if check_required else []
        return self._every_problem(argv, check_required)

    def _segments(self, argv: list[str]) -> list[tuple[_Arg, list[str]]]:
        """argv cut before each option-like arg; after ``--`` every arg is plain."""
        cut = argv.index("--") if "--" in argv else len(argv)
        segments: list[tuple[_Arg, list[str]]] = []
        for arg in argv[:cut]:
            read = self.read(arg)
            if read.kind == "plain" and segments:
                segments[-1][1].append(arg)
            else:
                segments.append((read, [arg]))
        if cut < len(argv):
            segments.append((_Arg("plain"), argv[cut:]))
        return segments

    def _every_problem(self, argv: list[str], check_required: bool) -> list[Rejection]:
        """Parse option by option, going on after errors."""
        segments = self._segments(argv)
        ambiguous = [Rejection(args[0], "ambiguous", read.message)
                     for read, args in segments if read.kind == "ambiguous"]
        errors: list[Rejection] = []
        extras: list[Rejection] = []
        given: set[str] = set()
        for read, args in segments:
            rest = args
            if read.kind in ("unknown", "ambiguous"):
                if read.kind == "unknown":
                    extras.append(Rejection(args[0], "unknown", f"unrecognized arguments: {args[0]}"))
                rest = args[1:]
            elif read.kind == "option":
                try:
                    namespace, rest = self.parser.parse_known_args(args)
                    given.update(vars(namespace))
                except _Stop:  # argparse prints the help and exits 0: nothing after counts
                    return ambiguous + errors
                except (_Refused, argparse.ArgumentError) as e:
                    errors.append(_rejection(args[0], e))
                    rest = self._after_error(read, args, errors[-1].kind, given)
            extras.extend(Rejection(a, "positional", f"unrecognized arguments: {a}") for a in rest)
        missing = self._missing(given) if check_required else []
        return ambiguous + errors + missing + extras

    def _after_error(self, read: _Arg, args: list[str], kind: str, given: set[str]) -> list[str]:
        """The plain args left over once the option in ``args[0]`` failed."""
        if kind in ("missing-value", "unexpected-value"):
            # the args after an option without its value were meant as its
            # values: not reported again; after --opt=v they are leftovers
            return args[1:] if read.explicit else []
        taken, rest = self._consume(args)
        given.update(taken)
        return rest

    def _missing(self, given: Iterable[str]) -> list[Rejection]:
        given = set(given)
        names = [name for name in self._required if name not in given]
        if not names:
            return []
        return [Rejection("", "missing-required", "the following arguments are required: " + ", ".join(names))]
