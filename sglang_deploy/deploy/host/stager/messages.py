"""How the weight stager speaks and stops (sglang_deploy/deploy/host/stage_weights.py): every line
it prints is one line, without control characters, without a secret; a refusal is one line and
an exit status. Standard library only: it runs on the GPU host.
"""

from __future__ import annotations

import re
import sys
import urllib.parse
from typing import NoReturn

# control characters (C0, DEL, C1) and bidirectional overrides: never in a name, never printed
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
SECRETS: list[str] = []  # the token and any HF_ENDPOINT credentials: masked in every line printed


class Refused(Exception):
    """Stops the host with one line; ``code`` is the exit status."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def scrub(text: str) -> str:
    """``text`` safe to print: one line, no control characters, no secret."""
    for secret in sorted(SECRETS, key=len, reverse=True):
        for form in {secret, urllib.parse.quote(secret, safe="")}:
            text = text.replace(form, "***")
    return CONTROLS.sub(" ", text)


def shown(name: object) -> str:
    """A name from a listing as it may be printed: escaped, never raw, bounded."""
    text = name if isinstance(name, str) else repr(name)
    text = text.encode("unicode_escape", "backslashreplace").decode("ascii")
    return text if len(text) <= 160 else text[:160] + "..."


def say(message: str) -> None:
    print(scrub(f"weights: {message}"), flush=True)


def fail(code: int, message: str) -> NoReturn:
    print(scrub(message), file=sys.stderr, flush=True)
    sys.exit(code)
