"""What `status` shows of a host's secrets: none. An argv's credential flags and the controller's
secrets masked (:func:`argv_changes`), and a drifted file's ``--diff`` redacted on both sides
(:func:`unified_diff`). Pure."""

from __future__ import annotations

import difflib
import re
from typing import Iterable, Sequence

from sglang_deploy.secrecy import CREDENTIAL_NAME
from sglang_deploy.untrusted import MASK, Scrubber, printable, redact_url


# ``NAME=value`` (an env file's line, ``Environment=NAME=value`` in a unit) whose name says it holds a
# credential (sglang_deploy/secrecy.py CREDENTIAL_NAME): the value is masked, quotes and spaces in it too.
_ASSIGNMENT = re.compile(r"(?<![A-Za-z0-9_])(?P<name>[A-Za-z0-9_]*(?:" + CREDENTIAL_NAME.pattern + r")[A-Za-z0-9_]*)"
                         r"=(?P<value>\"(?:[^\"\\]|\\.)*\"?|'[^']*'?|\S*)", re.IGNORECASE)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")


# ---- the running argv against the unit ----------------------------------------------------------

_CREDENTIAL_FLAG = re.compile(r"--?[A-Za-z0-9_-]*(?:" + CREDENTIAL_NAME.pattern + r")[A-Za-z0-9_-]*", re.IGNORECASE)


def _masked_words(words: Sequence[str], scrubber: Scrubber | None) -> list[str]:
    """argv words safe to show: a credential flag's value (``--api-key X``, ``--x-token=X``) and every
    secret the controller knows masked, controls removed, each word bounded."""
    out: list[str] = []
    hide_next = False
    for word in words:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        flag, eq, _ = word.partition("=")
        if _CREDENTIAL_FLAG.fullmatch(flag):
            if eq:
                out.append(f"{flag}={MASK}")
            else:
                out.append(word)
                hide_next = True
            continue
        text = scrubber.text(word) if scrubber is not None else word
        out.append(printable(text)[:80])
    return out


def argv_changes(expected: Sequence[str], running: Sequence[str], scrubber: Scrubber | None = None,
                 limit: int = 3) -> list[str]:
    """Where the running argv departs from the unit's, as ``unit 'A' -> running 'B'`` (masked)."""
    a, b = _masked_words(expected, scrubber), _masked_words(running, scrubber)
    changes = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag != "equal":
            changes.append(f"unit {' '.join(a[i1:i2])[:160]!r} -> running {' '.join(b[j1:j2])[:160]!r}")
    return changes[:limit] + ([f"{len(changes) - limit} more change(s)"] if len(changes) > limit else [])

# ---- secrets out of a diff ----------------------------------------------------------------------

def _credentials(text: str) -> dict[str, list[str]]:
    """Every ``NAME=value`` of ``text`` whose name says it is a credential: name -> its values."""
    found: dict[str, list[str]] = {}
    for m in _ASSIGNMENT.finditer(text):
        found.setdefault(m.group("name"), []).append(m.group("value"))
    return found


def redact(text: str, scrubber: Scrubber | None = None, changed: Iterable[str] = ()) -> str:
    """A host's file made safe to show: every secret the controller knows (``scrubber``) masked,
    the value of every ``NAME=value`` whose name says it is a credential
    (``sglang_deploy/secrecy.py`` ``CREDENTIAL_NAME``) masked, credentials in URLs masked, and
    terminal controls removed. Applied line by line to both sides of a diff; a credential named in
    ``changed`` reads ``NAME=*** (changed)``, so a diff shows that a secret changed, never what to."""
    changed = set(changed)
    if scrubber is not None:
        text = scrubber.text(text)

    def assignment(m: re.Match[str]) -> str:
        name = m.group("name")
        return f"{name}={MASK} (changed)" if name in changed else f"{name}={MASK}"

    out = []
    for line in text.split("\n"):
        line = _ASSIGNMENT.sub(assignment, line)
        line = _URL.sub(lambda m: redact_url(m.group(0)), line)
        out.append(printable(line))
    return "\n".join(out)


def unified_diff(key: str, path: str, live: str, staged: str, rev: str | None,
                 scrubber: Scrubber | None = None) -> str:
    """The live file against the deployed revision's copy, both redacted first (:func:`redact`)."""
    before, after = _credentials(staged), _credentials(live)
    changed = {name for name in after if name in before and after[name] != before[name]}
    a = redact(staged, scrubber).splitlines(keepends=True)
    b = redact(live, scrubber, changed).splitlines(keepends=True)
    lines = difflib.unified_diff(a, b, fromfile=f"{path} (revision {rev or '?'})", tofile=f"{path} (live)")
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
