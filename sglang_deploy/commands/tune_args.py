"""`sglang-deploy tune`'s arguments that are numbers, parsed with their bounds before any
arithmetic (``--budget``, ``--concurrency``), and the command's error."""

from __future__ import annotations

import math
import re

from sglang_deploy.gate import load
from sglang_deploy.gate.options import LIMITS
from sglang_deploy.untrusted import shown


class TuneError(Exception):
    """Bad input or a host that cannot be tuned: exit 2, nothing on any host changed."""


_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(s|m|h)\s*$", re.ASCII)
_TRIALS = re.compile(r"^[0-9]+$", re.ASCII)
#: --budget's bounds: a tuning run of more trials or longer than this is a typo (an extra digit,
#: a pasted number), refused by name before any arithmetic on it.
MAX_BUDGET_TRIALS = 10000
MAX_BUDGET_S = 30 * 24 * 3600.0


def parse_budget(text: str) -> tuple[int | None, float | None]:
    """``--budget``: a number of trials (``12``) or a duration (``900s``, ``30m``, ``2h``), ASCII
    digits only (``str.isdigit`` also takes '²', which ``int`` refuses), bounded by
    MAX_BUDGET_TRIALS and MAX_BUDGET_S before any arithmetic."""
    text = (text or "").strip()
    quoted = shown(text)
    if _TRIALS.match(text):
        digits = text.lstrip("0")
        if len(digits) > len(str(MAX_BUDGET_TRIALS)) or int(digits or "0") > MAX_BUDGET_TRIALS:
            raise TuneError(f"--budget {quoted}: at most {MAX_BUDGET_TRIALS} trials")
        n = int(digits or "0")
        if n < 1:
            raise TuneError(f"--budget {quoted}: at least one trial")
        return n, None
    m = _DURATION.match(text)
    if not m:
        raise TuneError(f"--budget {quoted}: a number of trials (12) or a duration (900s, 30m, 2h)")
    whole = m.group(1).partition(".")[0].lstrip("0")
    seconds = float(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)] if len(whole) <= 12 else math.inf
    if not seconds <= MAX_BUDGET_S:
        raise TuneError(f"--budget {quoted}: at most {MAX_BUDGET_S / 86400:g} days ({MAX_BUDGET_S:g}s)")
    if seconds <= 0:
        raise TuneError(f"--budget {quoted}: must be above zero")
    return None, seconds


def parse_levels(text: str) -> tuple[int, ...]:
    """``--concurrency 1,8,32``: the gate's own parser, then the gate's bounds."""
    try:
        given = load.parse_levels(text or "")
    except ValueError as exc:
        raise TuneError(f"--concurrency {text!r}: {exc}") from None
    levels = (given,) if isinstance(given, int) else given
    top = LIMITS["--concurrency"]
    for c in levels:
        if not 1 <= c <= top:
            raise TuneError(f"--concurrency {text}: {c} is not a whole number from 1 to {top}")
    return tuple(sorted(set(levels)))
