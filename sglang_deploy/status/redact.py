"""What `status` shows of a host's secrets: none. An argv's credential flags and the controller's
secrets masked (:func:`argv_changes`), and a drifted file's ``--diff`` redacted on both sides
(:func:`unified_diff`). Pure."""

from __future__ import annotations

import difflib
import re
from typing import Iterable, Sequence

from sglang_deploy.secrecy import CREDENTIAL_NAME
from sglang_deploy.untrusted import MASK, Scrubber, printable, redact_url


# A name, then ``=`` with blanks around it as systemd takes them in an env file (src/basic/env-file.c,
# parse_env_file_internal: white space before and after the '=' is skipped): each position of the
# text is looked at a bounded number of times (an identifier is consumed whole), so a line of any
# length costs linear time. A name longer than MAX_NAME is no credential's.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_NAME = 256
# A URL's start: the scheme bounded (RFC 3986 schemes are short) and not inside a longer word, so
# that a long run of letters is not tried from each of its positions (quadratic backtracking).
_URL = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,31}://\S+")


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

def _value_end(text: str, i: int) -> int:
    """Where the value that starts at ``text[i]`` (just past ``=``) ends, as systemd reads an env
    file (src/basic/env-file.c parse_env_file_internal, from its PRE_VALUE state; systemd.exec(5),
    EnvironmentFile=): at the first line end (``\\n`` or ``\\r``) outside quotes and not escaped by a
    backslash. Quoted pieces (``'...'`` verbatim, ``"..."`` with backslash escapes) may span lines,
    and after a closing quote the value goes on: ``"a"b``, ``'a' 'b'`` and ``"a"\\<newline>b`` are
    each one value. Inside an unquoted piece a quote is just a character. One pass, each
    character looked at once."""
    n = len(text)
    quoted = True  # PRE_VALUE: a quote opens a quoted piece; after other text (VALUE) it does not
    while i < n:
        c = text[i]
        if c in "\n\r":
            return i
        if c == "\\":  # VALUE_ESCAPE: the next character is the value's, a line end eaten (a continuation)
            i, quoted = i + 2, False
            continue
        if quoted and c in "\"'":
            i += 1
            while i < n and text[i] != c:
                i += 2 if c == '"' and text[i] == "\\" else 1
            i += 1
            continue  # back in PRE_VALUE
        if c not in " \t":
            quoted = False
        i += 1
    return n


def _assignments(text: str) -> list[tuple[str, int, int]]:
    """Every ``NAME = value`` of ``text`` (an env file's line, ``Environment=NAME=value`` in a unit)
    whose name says it holds a credential (sglang_deploy/secrecy.py CREDENTIAL_NAME): (name, where
    its value starts, where it ends). The value runs as systemd reads it (:func:`_value_end`)."""
    out: list[tuple[str, int, int]] = []
    pos, n = 0, len(text)
    while True:
        m = _NAME.search(text, pos)
        if m is None:
            return out
        name, pos = m.group(0), m.end()
        if m.start() > 0 and (text[m.start() - 1].isalnum() or text[m.start() - 1] == "_"):
            continue  # the tail of a longer word
        i = pos
        while i < n and text[i] in " \t":
            i += 1
        if i >= n or text[i] != "=" or len(name) > MAX_NAME or not CREDENTIAL_NAME.search(name):
            continue
        i += 1
        while i < n and text[i] in " \t":
            i += 1
        end = min(n, _value_end(text, i))
        out.append((name, i, end))
        pos = max(end, pos)


_KEY_END = re.compile(r"[\n\r=]")
_COMMENT_STOP = re.compile(r"[\n\r\\]")


def _env_file_assignments(text: str, comment_continues: bool) -> list[tuple[str, int, int]]:
    """Every assignment systemd itself reads from ``text`` as an ``EnvironmentFile=`` whose key says
    it holds a credential: (key, where its value starts, where it ends), the value from just past
    ``=``. The file is walked as parse_env_file_internal walks it (src/basic/env-file.c: blanks and
    line ends before a key skipped, ``#`` and ``;`` start a comment, a key runs to ``=`` and loses
    its trailing blanks, a line end before ``=`` drops it, the value as :func:`_value_end` reads it,
    the text read up to a NUL), so every assignment is found where systemd finds it, whatever a
    value before it swallowed (a continued line, a quote spanning lines) or a key's spelling
    (``export X``, ``X-Y``: systemd drops those names, a key that merely contains a credential's
    name is masked all the same). ``comment_continues``: a comment line ending in a backslash
    swallows the next line (systemd before v254; later versions end the comment there). Each
    character is looked at a bounded number of times."""
    out: list[tuple[str, int, int]] = []
    body = text.split("\0", 1)[0]  # read as a C string
    n, i = len(body), 0
    while i < n:
        c = text[i]
        if c in " \t\n\r":  # PRE_KEY
            i += 1
        elif c in "#;":  # COMMENT, COMMENT_ESCAPE
            i += 1
            while i < n:
                m = _COMMENT_STOP.search(text, i, n)
                if m is None:
                    i = n
                elif m.group() != "\\":
                    i = m.end()
                    break
                elif m.end() < n and text[m.end()] in "\n\r" and not comment_continues:
                    i = m.end() + 1
                    break
                else:
                    i = m.end() + 1
        else:  # KEY
            m = _KEY_END.search(text, i, n)
            if m is None:
                break
            if m.group() == "=":
                key = text[i:m.start()].rstrip(" \t")
                start = m.end()
                while start < n and body[start] in " \t":  # PRE_VALUE skips them: not the value's
                    start += 1
                end = min(n, _value_end(body, start))
                if CREDENTIAL_NAME.search(key):
                    out.append((key, start, end))
                i = end
            else:
                i = m.end()
    return out


def _spans(text: str) -> list[tuple[str, int, int]]:
    """Every credential assignment's value in ``text``, found both ways: as a name anywhere followed
    by ``=`` (a unit's ``Environment=NAME=value``, any text) and as systemd reads an env file (either
    way it treats a continued comment), sorted by where the value starts. Spans may overlap."""
    found = _assignments(text) + _env_file_assignments(text, True) + _env_file_assignments(text, False)
    return sorted(found, key=lambda span: (span[1], span[2]))


def _credentials(text: str) -> dict[str, list[str]]:
    """Every credential assignment of ``text``: name -> its values."""
    found: dict[str, list[str]] = {}
    for name, start, end in _spans(text):
        found.setdefault(name, []).append(text[start:end])
    return found


def _mask_assignments(text: str, changed: set[str]) -> str:
    """``text`` with every credential assignment's value masked (``(changed)`` after a name in
    ``changed``); overlapping values are masked as one."""
    parts: list[str] = []
    merged: list[tuple[int, int, set[str]]] = []
    last = 0
    for name, start, end in _spans(text):
        if merged and start <= merged[-1][1]:
            merged[-1][2].add(name)
            merged[-1] = (merged[-1][0], max(merged[-1][1], end), merged[-1][2])
        else:
            merged.append((start, end, {name}))
    for start, end, names in merged:
        parts += [text[last:start], MASK + (" (changed)" if names & changed else "")]
        last = end
    return "".join(parts) + text[last:]


def redact(text: str, scrubber: Scrubber | None = None, changed: Iterable[str] = ()) -> str:
    """A host's file made safe to show: every secret the controller knows (``scrubber``) masked,
    the value of every ``NAME=value`` whose name says it is a credential
    (``sglang_deploy/secrecy.py`` ``CREDENTIAL_NAME``) masked, credentials in URLs masked, and
    terminal controls removed. Applied line by line to both sides of a diff; a credential named in
    ``changed`` reads ``NAME=*** (changed)``, so a diff shows that a secret changed, never what to."""
    changed = set(changed)
    if scrubber is not None:
        text = scrubber.text(text)
    text = _mask_assignments(text, changed)  # over the whole text: a value may continue on the next line
    out = []
    for line in text.split("\n"):
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
