"""The checks every inventory value goes through before a setting reads it: text that can be
written into a file, non-empty strings, absolute paths, positive integers and finite numbers with
their upper bounds, pip URLs (never echoed: they may hold credentials), and a key's default from
the table of inventory keys (``settings.SETTINGS``). Each error names the host and the key.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.settings import DEFAULTS
from sglang_deploy.plan.spec_checks import shown
from sglang_deploy.secrecy import type_name
from sglang_deploy.unitsyntax import ControlCharacter, reject_control


def check_text(host: str, field: str, value: str) -> str:
    """Reject newline and other control characters: they would break a file."""
    try:
        reject_control(value)
    except ControlCharacter as exc:
        raise PlanError(host, field, f"contains a control character ({exc.char!r}); refusing to write it into "
                                     "a file") from None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PlanError(host, field, f"is not valid text (character {exc.object[exc.start]!r} has no UTF-8 form); "
                        "refusing to write it into a file") from None
    return value


def text_value(host: str, key: str, value: Any, pattern: re.Pattern[str] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise PlanError(host, key, f"must be a non-empty string, got {shown(value)}")
    check_text(host, key, value)
    if pattern is not None and not pattern.match(value):
        raise PlanError(host, key, f"{value!r} is not a valid name")
    return value


def abs_path(host: str, key: str, value: Any) -> str:
    value = text_value(host, key, value)
    if not value.startswith("/") or any(c in value for c in " \"'\\$%;"):
        raise PlanError(host, key, f"must be an absolute path without spaces, quotes, '$', '%' or ';', got {value!r}")
    return value.rstrip("/") or "/"


def value_of(data: Mapping[str, Any], key: str) -> Any:
    """The key's value, else its default from the table of inventory keys."""
    return data.get(key, DEFAULTS[key])


# Upper bounds: a larger value is a typo, and past them systemd cannot parse the unit's
# time values (microseconds in 64 bits) or the kernel refuses the limit (fs.nr_open).
MAX_SECONDS = 365 * 24 * 3600
MAX_NOFILE = 2 ** 30


def pos_int(host: str, key: str, value: Any, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PlanError(host, key, f"must be a positive integer, got {shown(value)}")
    if maximum is not None and value > maximum:
        raise PlanError(host, key, f"must be at most {maximum}, got {shown(value)}")
    return value


def finite_number(host: str, key: str, value: Any) -> float:
    """A finite number (NaN compares false with every bound, infinity would wait forever)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise PlanError(host, key, f"must be a number, got {shown(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise PlanError(host, key, f"must be a finite number, got {shown(value)}")
    return number


def pip_url(host: str, key: str, value: Any) -> str:
    """A pip URL setting: checked like a string, but a wrong type is not echoed (it may hold credentials)."""
    if not isinstance(value, str) or not value:
        raise PlanError(host, key, f"must be a non-empty string, got {type_name(value)}")
    return check_text(host, key, value)
