"""SGLang's custom argparse actions (``sglang.srt.arg_groups.argparse_actions``
in 0.5.15+, ``sglang.srt.server_args`` in 0.5.9), re-made: deprecated options
are accepted with a warning on stderr; an option whose catalog entry carries
an ``error`` (a removed flag) makes the parser exit 2 with that message."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional


def warn_deprecated(option_string: Optional[str], new_flag: Optional[str], what: str = "") -> None:
    msg = f"WARNING: The argument '{option_string}' is deprecated"
    if new_flag:
        msg += f"; use '{new_flag}' instead"
    if what:
        msg += f" ({what})"
    print(msg + ".", file=sys.stderr, flush=True)


class DeprecatedAction(argparse.Action):
    """A retired flag: a warning, or parser.error() when ``error_message`` is set."""

    def __init__(self, option_strings, dest, nargs=0, error_message=None, new_flag=None, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)
        self.error_message = error_message
        self.new_flag = new_flag

    def __call__(self, parser, namespace, values, option_string=None):
        if self.error_message:
            parser.error(self.error_message)
        warn_deprecated(option_string, self.new_flag, "ignored")


class DeprecatedAliasStoreAction(argparse.Action):
    """An old spelling that stores into the new option's dest."""

    def __init__(self, option_strings, dest, new_flag=None, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new_flag = new_flag

    def __call__(self, parser, namespace, values, option_string=None):
        warn_deprecated(option_string, self.new_flag)
        setattr(namespace, self.dest, values)


class DeprecatedStoreTrueAction(argparse.Action):
    def __init__(self, option_strings, dest, default=False, new_flag=None, **kwargs):
        kwargs.pop("nargs", None)
        kwargs.pop("const", None)
        super().__init__(option_strings, dest, nargs=0, const=True, default=default, **kwargs)
        self.new_flag = new_flag

    def __call__(self, parser, namespace, values, option_string=None):
        warn_deprecated(option_string, self.new_flag)
        setattr(namespace, self.dest, True)


class DeprecatedStoreConstAction(argparse.Action):
    """An old flag that sets the new option's dest to a fixed value
    (``--disable-piecewise-cuda-graph`` = ``--cuda-graph-backend-prefill disabled``).
    With ``nargs=None`` it takes (and validates) a value but stores the constant."""

    def __init__(self, option_strings, dest, nargs=0, const_value: Any = True, new_flag=None, **kwargs):
        kwargs.pop("const", None)
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)
        self.const_value = const_value
        self.new_flag = new_flag

    def __call__(self, parser, namespace, values, option_string=None):
        warn_deprecated(option_string, self.new_flag)
        setattr(namespace, self.dest, self.const_value)


class LoRAPathAction(argparse.Action):
    """``--lora-paths name=path ...``: a {name: path} mapping."""

    def __call__(self, parser, namespace, values, option_string=None):
        paths = {}
        for item in values or []:
            if "=" in item:
                name, path = item.split("=", 1)
            else:
                name, path = item, item
            paths[name] = path
        setattr(namespace, self.dest, paths)
