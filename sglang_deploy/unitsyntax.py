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
