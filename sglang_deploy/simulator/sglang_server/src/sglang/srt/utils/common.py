"""Argument types of SGLang's parser (``sglang.srt.utils.common``), re-made
from their documented behaviour.  Errors are ``argparse.ArgumentTypeError`` so
argparse reports the type's own message, as the real ones do."""

from __future__ import annotations

import argparse
import json
import re
from decimal import Decimal
from typing import Any, Optional

_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")


def human_readable_int(value: str) -> int:
    """``4096``, ``4k`` (SI, decimals allowed: ``1.5k``) or ``4Ki`` (IEC, integers only)."""
    value = value.strip()
    m = _HUMAN.fullmatch(value)
    if m:
        number, suffix = m.groups()
        if suffix in _IEC:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * _IEC[suffix]
        return int(Decimal(number) * _SI[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{value}'. Use a plain integer, SI suffixes "
            "(1k, 1M), or IEC suffixes (1Ki, 1Mi). Suffixes are case-sensitive."
        ) from None


def strict_json(value: str) -> Any:
    """JSON without NaN / Infinity (what orjson accepts)."""

    def no_constants(name: str) -> Any:
        raise ValueError(f"invalid JSON constant {name}")

    return json.loads(value, parse_constant=no_constants)


def json_list_type(value: str) -> Any:
    try:
        return strict_json(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid JSON list: {value}. Please provide a valid JSON list."
        ) from None


def nullable_str(value: str) -> Optional[str]:
    if not value or value == "None":
        return None
    return value
