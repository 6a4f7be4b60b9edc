"""Quoting for the three file formats a host gets.

* systemd ``ExecStart=`` (systemd.service(5), "Command lines"): words are split
  on whitespace, double/single quotes group, C escapes are decoded, ``%x`` is a
  specifier (``%%`` is a literal ``%``), ``$VAR`` / ``${VAR}`` are expanded
  from the environment (``$$`` is a literal ``$``) and a lone ``;`` was once a
  command separator (``\\;`` is a literal one).
* every other unit setting the deploy writes (``Description=``, ``User=``,
  ``WorkingDirectory=``, ``EnvironmentFile=``, ...): ``%x`` is a specifier there
  too (systemd.unit(5), "Specifiers"), so `unit_value` doubles each ``%``.
* systemd ``EnvironmentFile=`` (systemd.exec(5)): ``KEY=VALUE`` per line;
  single quotes keep everything literal, double quotes decode ``\\"``,
  ``\\\\``, ``\\$`` and ``\\```.
* NCCL's ``/etc/nccl.conf``: ``KEY=VALUE`` per line, no quoting at all, so
  values are restricted to characters that need none.

A newline or other control character can be expressed in none of these
without changing meaning, so it is rejected with `ControlCharacter`.
"""

from __future__ import annotations

import re

_EXEC_SAFE = re.compile(r"^[A-Za-z0-9_./:=,@+-]+$")
_ENV_SAFE = re.compile(r"^[A-Za-z0-9_./:=,@+-]*$")
_NCCL_SAFE = re.compile(r"^[A-Za-z0-9_.,:^=/+-]+$")


class ControlCharacter(ValueError):
    """A value holds a newline or other control character (``char``)."""

    def __init__(self, char: str, value: str) -> None:
        self.char = char
        super().__init__(f"control character {char!r} in {value!r}")


def reject_control(value: str) -> str:
    for ch in value:
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            raise ControlCharacter(ch, value)
    return value


def exec_quote(arg: str) -> str:
    """Quote one argv word for ``ExecStart=`` so systemd passes it through unchanged."""
    reject_control(arg)
    if arg == ";":
        return "\\;"
    if _EXEC_SAFE.match(arg):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def unit_value(value: str) -> str:
    """A value for a unit setting other than ``ExecStart=``: taken literally, ``%`` escaped."""
    reject_control(value)
    return value.replace("%", "%%")


def exec_reference(variable: str) -> str:
    """An argv word systemd fills in from the service environment, e.g. ``${SGLANG_API_KEY}``."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", variable):
        raise ValueError(f"not an environment variable name: {variable!r}")
    return "${" + variable + "}"


def env_quote(value: str) -> str:
    """Quote one value for a systemd ``EnvironmentFile=``."""
    reject_control(value)
    if _ENV_SAFE.match(value) and value:
        return value
    if "'" not in value:
        return f"'{value}'"
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
    return f'"{escaped}"'


def nccl_value(value: str) -> str:
    """A value for /etc/nccl.conf, which has no quoting: only plain characters pass."""
    reject_control(value)
    if not _NCCL_SAFE.match(value):
        raise ValueError(f"nccl.conf has no quoting; value {value!r} must match {_NCCL_SAFE.pattern}")
    return value


# ---- reading ExecStart= back --------------------------------------------------------------------

class ExecStartError(ValueError):
    """A unit whose ExecStart= cannot be turned into one argv here (the reason says why)."""


# systemd's C escapes (src/basic/escape.c cunescape_one): the one-character ones.
_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\",
              '"': '"', "'": "'", "s": " "}
_WHITESPACE = " \t\n\r"
_PREFIX = re.compile(r"(?:!!|[@\-:+!])*")


def _unescape(text: str, i: int) -> tuple[str, int]:
    """The C escape at ``text[i]`` (just after a backslash): its character and the index after it."""
    if i >= len(text):
        raise ExecStartError("a backslash at the end of ExecStart=")
    c = text[i]
    if c in _C_ESCAPES:
        return _C_ESCAPES[c], i + 1
    for lead, digits in (("x", 2), ("u", 4), ("U", 8)):
        if c == lead:
            code = text[i + 1:i + 1 + digits]
            if len(code) != digits or not all(d in "0123456789abcdefABCDEF" for d in code):
                raise ExecStartError(f"bad \\{lead} escape in ExecStart=")
            value = int(code, 16)
            if value == 0 or value > 0x10FFFF:
                raise ExecStartError(f"\\{lead}{code} is not a character systemd accepts")
            return chr(value), i + 1 + digits
    if c in "01234567":
        code = text[i:i + 3]
        if len(code) != 3 or not all(d in "01234567" for d in code) or not 0 < int(code, 8) < 256:
            raise ExecStartError("bad octal escape in ExecStart=")
        return chr(int(code, 8)), i + 3
    raise ExecStartError(f"unknown escape \\{c} in ExecStart= (systemd refuses the line)")


def _exec_words(value: str) -> list[str]:
    """systemd's word splitting of a command line (extract_first_word with EXTRACT_UNQUOTE |
    EXTRACT_CUNESCAPE, as config_parse_exec calls it): whitespace separates words, a single or
    double quote anywhere in a word opens a quoted part up to the same quote, a backslash starts
    a C escape inside quotes and out; a lone ``;`` separates commands, ``\\;`` is a literal one."""
    words: list[str] = []
    i, n = 0, len(value)
    while True:
        while i < n and value[i] in _WHITESPACE:
            i += 1
        if i >= n:
            return words
        if value[i] == ";" and (i + 1 == n or value[i + 1] in _WHITESPACE):
            raise ExecStartError("ExecStart= holds more than one command (a lone ';')")
        if value.startswith("\\;", i) and (i + 2 == n or value[i + 2] in _WHITESPACE):
            words.append(";")
            i += 2
            continue
        word: list[str] = []
        quote = ""
        while i < n:
            c = value[i]
            if c == "\\":  # a C escape, inside quotes and out
                ch, i = _unescape(value, i + 1)
                word.append(ch)
            elif quote and c == quote:
                quote = ""
                i += 1
            elif not quote and c in _WHITESPACE:
                break
            elif not quote and c in "'\"":
                quote = c
                i += 1
            else:
                word.append(c)
                i += 1
        if quote:
            raise ExecStartError("an unterminated quote in ExecStart=")
        words.append("".join(word))


def _specifiers(word: str) -> str:
    """``%%`` is ``%``; any other specifier (``%n``, ``%i``, ...) depends on the unit and is not resolved here."""
    out, i = [], 0
    while i < len(word):
        if word[i] == "%":
            if word[i + 1:i + 2] != "%":
                raise ExecStartError(f"ExecStart= uses the specifier %{word[i + 1:i + 2]}, not resolved here")
            out.append("%")
            i += 2
        else:
            out.append(word[i])
            i += 1
    return "".join(out)


def _environment(word: str) -> str:
    """``$$`` is ``$``; a ``$NAME`` or ``${NAME}`` would be filled in from the service's environment
    when the process starts (systemd.service(5) "Command lines"), which is not known here."""
    out, i = [], 0
    while i < len(word):
        if word[i] == "$":
            nxt = word[i + 1:i + 2]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "{" or (nxt and (nxt.isalnum() or nxt == "_") and i == 0):
                raise ExecStartError("ExecStart= refers to an environment variable, known only when it starts")
        out.append(word[i])
        i += 1
    return "".join(out)


def unit_lines(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of every assignment of a unit file (systemd.syntax(7)): comments
    (``#``, ``;``) skipped, a line ending in a backslash continued on the next with the
    backslash read as a space, comment lines inside a continuation skipped."""
    out: list[tuple[str, str, str]] = []
    section, pending = "", ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(("#", ";")):
            continue
        if pending:
            line = pending + line
            pending = ""
        if (len(line) - len(line.rstrip("\\"))) % 2:  # an odd number of backslashes: continued
            pending = line[:-1] + " "
            continue
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        if sep:
            out.append((section, key.strip(), value.strip()))
    if pending:
        key, sep, value = pending.partition("=")
        if sep:
            out.append((section, key.strip(), value.strip()))
    return out


def parse_exec_start(unit_text: str) -> list[str]:
    """The argv a service's ``ExecStart=`` gives its process, read as systemd reads it
    (systemd.service(5) "Command lines", systemd.syntax(7)): the last command after any empty
    assignment, its prefixes (``@``: the second word is argv[0]; ``-``, ``:``, ``+``, ``!``,
    ``!!``) removed, words unquoted and unescaped, ``%%`` and ``$$`` resolved. Raises
    :class:`ExecStartError` for what only the host can resolve (other specifiers, environment
    variables) and for what systemd would refuse."""
    commands: list[str] = []
    for section, key, value in unit_lines(unit_text):
        if section == "Service" and key == "ExecStart":
            commands = [] if not value else [*commands, value]
    if not commands:
        raise ExecStartError("the unit has no ExecStart=")
    if len(commands) > 1:
        raise ExecStartError("the unit has more than one ExecStart=")
    value = commands[0]
    prefix = _PREFIX.match(value)
    flags = prefix.group(0) if prefix else ""
    words = _exec_words(value[len(flags):])
    if not words:
        raise ExecStartError("ExecStart= names no command")
    words = [_specifiers(w) for w in words]
    if ":" not in flags:
        words = [_environment(w) for w in words]
    if "@" in flags:
        if len(words) < 2:
            raise ExecStartError("ExecStart=@ needs the executable and argv[0]")
        words = words[1:]
    return words
