"""SIMULATED ``sglang.srt.server_args``: the parser of the real SGLang
version this wheel stands in for, built from its embedded option catalog.

``ServerArgs.add_cli_args(parser)`` adds exactly the catalog's options (with
their actions, nargs, types, choices, defaults, deprecated aliases and
removed flags); ``prepare_server_args(argv)`` builds the parser as the real
one does and parses, so a refused argv exits 2 with argparse's message.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Dict, List

from sglang._sim import catalog as _catalog
from sglang.srt.arg_groups.argparse_actions import (  # noqa: F401  (0.5.9 kept them here)
    DeprecatedAction,
    LoRAPathAction,
)

#: Dests whose values never appear in logs or in /server_info.
SECRET_DEST = re.compile(r"(^|_)(api_key|password|secret)$|^(hf_)?token$")

#: 0.5.9 parses some sizes into long dests; its ServerArgs.from_cli_args copies them.
_LONG_DESTS = {
    "tensor_parallel_size": "tp_size",
    "data_parallel_size": "dp_size",
    "pipeline_parallel_size": "pp_size",
    "expert_parallel_size": "ep_size",
    "moe_data_parallel_size": "moe_dp_size",
    "attention_context_parallel_size": "attn_cp_size",
}


class ServerArgs:
    """The parsed arguments: one attribute per dest of the version's parser."""

    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        _catalog.add_arguments(parser, _catalog.load())

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> "ServerArgs":
        values = dict(vars(args))
        for long, short in _LONG_DESTS.items():
            if long in values and short not in values:
                values[short] = values[long]
        return cls(**values)

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)

    def redacted(self) -> Dict[str, Any]:
        return {
            k: ("<redacted>" if SECRET_DEST.search(k) and v not in (None, "") else v)
            for k, v in self.__dict__.items()
        }

    def __repr__(self) -> str:
        return "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items()) + ")"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ServerArgs) and other.__dict__ == self.__dict__


def make_parser() -> argparse.ArgumentParser:
    """The parser ``prepare_server_args`` uses (``prog`` as the version's)."""
    prog = _catalog.load().get("parser", {}).get("prog") or "sglang serve"
    parser = argparse.ArgumentParser(prog=prog)
    ServerArgs.add_cli_args(parser)
    return parser


def prepare_server_args(argv: List[str]) -> ServerArgs:
    """Parse ``argv`` (no program name) like the real ``prepare_server_args``;
    argparse exits 2 on a refused argv."""
    parser = make_parser()
    raw_args = parser.parse_args(list(argv))
    return ServerArgs.from_cli_args(raw_args)
