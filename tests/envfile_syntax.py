"""Env files as systemd reads them from ``EnvironmentFile=``, for the tests of the `status --diff`
scrubber (sglang_deploy/status/redact.py): a Hypothesis strategy for files in every spelling the
parser takes, and a model of that parser to hold the scrubber to in the unit tier.

The model transliterates systemd's ``parse_env_file_internal`` (src/basic/env-file.c: the states
PRE_KEY .. COMMENT_ESCAPE, WHITESPACE " \\t\\n\\r", NEWLINE "\\n\\r", COMMENTS "#;",
SHELL_NEED_ESCAPE "\\"\\\\`$") and what the service manager keeps of its assignments (a name of
ASCII letters, digits and ``_`` not starting with a digit: src/basic/env-util.c
``env_name_is_valid``). systemd.exec(5), EnvironmentFile=, describes the same rules in prose.
tests/e2e/test_redact_systemd_e2e.py holds the model and the scrubber to a real systemd.

Every value's letters and digits are in tokens (``tok0001v``), one per piece of a value and unique
in a file, so a leak shows as a token: the scrubber's output may hold no token of a value that
systemd gave a secret-named variable.
"""

from __future__ import annotations

import re
from typing import Iterator

from hypothesis import strategies as st

from sglang_deploy.secrecy import CREDENTIAL_NAME

TOKEN = re.compile(r"tok\d{4}v")
VALID_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Names: the scrubber's rule marks a secret by CREDENTIAL_NAME anywhere in the name.
SECRET_NAMES = ["HF_TOKEN", "SGLANG_API_KEY", "my_password", "AWS_SECRET_ACCESS_KEY", "x_auth", "Cookie",
                "HUGGING_FACE_HUB_TOKEN", "_KEY", "DB_PASSPHRASE1"]
PLAIN_NAMES = ["MODEL", "PORT", "A_1", "NCCL_DEBUG", "_"]
ODD_NAMES = ["HF-TOKEN", "HF.TOKEN", "1_TOKEN", "export HF_TOKEN", "HF TOKEN", "TOKEN\u00e9", "\u00c4_KEY",
             "HF_TOKEN\\", "'HF_TOKEN'", '"HF_TOKEN"', "HF_TOKEN[0]", "$HF_TOKEN", "export  SGLANG_API_KEY"]
# What a value's pieces are made of besides their token: no letter or digit (those are the tokens').
FILLER = st.text(alphabet=" \t=#;:/.,@%+-_!?*()[]{}<>|&~^\u00e9\u4e2d\x1b\x07", max_size=4)
# What a backslash may escape in an unquoted value, and in a double-quoted one.
ESCAPABLE = list(" \t\"'\\#;=$`!*")
BLANKS = st.sampled_from(["", "", " ", "\t", "  ", " \t"])
NEWLINES = st.sampled_from(["\n"] * 6 + ["\r\n", "\r", "\n\n"])


class _Tokens:
    """Unique tokens within one drawn file."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"tok{self.n:04d}v"


@st.composite
def _piece(draw: st.DrawFn, tokens: _Tokens) -> str:
    """One piece of a value as it is spelled in the file."""
    kind = draw(st.sampled_from(["plain", "plain", "double", "single", "escaped", "continued", "double_esc",
                                 "quote_inside", "blank_then"]))
    token = tokens()
    filler = draw(FILLER)
    if kind == "plain":
        return filler.replace("\\", "") + token
    if kind == "double":
        return '"' + filler + token + draw(st.sampled_from(["", "\n", "\r\n"])) + draw(FILLER) + '"'
    if kind == "single":
        return "'" + filler + token + draw(st.sampled_from(["", "\n", "\\"])) + "'"
    if kind == "escaped":
        return "\\" + draw(st.sampled_from(ESCAPABLE)) + token
    if kind == "continued":
        return token + "\\" + draw(st.sampled_from(["\n", "\r", "\r\n"])) + draw(BLANKS)
    if kind == "double_esc":
        return '"' + token + "\\" + draw(st.sampled_from(list('"\\`$\n') + ESCAPABLE)) + '"'
    if kind == "quote_inside":
        return token + draw(st.sampled_from(["'", '"', "\"'"])) + tokens()
    return draw(BLANKS) + token


@st.composite
def _line(draw: st.DrawFn, tokens: _Tokens) -> str:
    kind = draw(st.sampled_from(["secret"] * 5 + ["plain", "odd", "comment", "blank", "no_equals"]))
    if kind == "comment":
        return (draw(BLANKS) + draw(st.sampled_from(["#", ";"])) + draw(FILLER)
                + draw(st.sampled_from(["", "", "\\", " HF_TOKEN=x"])))
    if kind == "blank":
        return draw(BLANKS)
    if kind == "no_equals":
        return draw(st.sampled_from(SECRET_NAMES + PLAIN_NAMES)) + draw(BLANKS)
    names = {"secret": SECRET_NAMES, "plain": PLAIN_NAMES, "odd": ODD_NAMES}[kind]
    name = draw(st.sampled_from(names))
    prefix = draw(st.sampled_from(["", "", "", "export ", " ", "\t"]))
    pieces = draw(st.lists(_piece(tokens), min_size=1, max_size=4))
    tail = draw(st.sampled_from(["", "", "", " ", "\t", "\\", " # not a comment"]))
    return prefix + name + draw(BLANKS) + "=" + draw(BLANKS) + "".join(pieces) + tail


@st.composite
def env_files(draw: st.DrawFn) -> str:
    """One env file's text: lines of assignments (secret-named, plain, odd names, every spelling of
    a value), comments (one continued by a backslash), blank lines and lines without ``=``, ended by
    ``\\n``, ``\\r\\n`` or ``\\r``, with or without a final newline."""
    tokens = _Tokens()
    lines = draw(st.lists(_line(tokens), min_size=1, max_size=8))
    text = ""
    for line in lines:
        text += line + draw(NEWLINES)
    return text if draw(st.booleans()) else text.rstrip("\n")


# ---- systemd's parser, modelled --------------------------------------------------------------

_WS, _NL, _COMMENTS, _NEED_ESCAPE = " \t\n\r", "\n\r", "#;", '"\\`$'


def _pairs(text: str, comment_continues: bool) -> Iterator[tuple[str, str]]:
    """(key, value) as parse_env_file_internal pushes them. ``comment_continues``: a comment line
    ending in a backslash swallows the next line (systemd before v254; v254 and later end the
    comment there, src/basic/env-file.c COMMENT_ESCAPE)."""
    state = "PRE_KEY"
    key: list[str] = []
    value: list[str] | None = None
    last_key_ws: int | None = None
    last_value_ws: int | None = None

    def pushed(chomp_value: bool) -> tuple[str, str]:
        k = "".join(key[:last_key_ws] if last_key_ws is not None else key)
        v = value or []
        if chomp_value and last_value_ws is not None:
            v = v[:last_value_ws]
        return k, "".join(v)

    for c in text.split("\0", 1)[0]:  # the file is read as a C string
        if state == "PRE_KEY":
            if c in _COMMENTS:
                state = "COMMENT"
            elif c not in _WS:
                state, last_key_ws, key = "KEY", None, [c]
        elif state == "KEY":
            if c in _NL:
                state, key = "PRE_KEY", []
            elif c == "=":
                state, last_value_ws = "PRE_VALUE", None
            else:
                if c not in _WS:
                    last_key_ws = None
                elif last_key_ws is None:
                    last_key_ws = len(key)
                key.append(c)
        elif state in ("PRE_VALUE", "VALUE") and c in _NL:
            yield pushed(state == "VALUE")
            state, key, value = "PRE_KEY", [], None
        elif state == "PRE_VALUE":
            if c == "'":
                state = "SINGLE"
            elif c == '"':
                state = "DOUBLE"
            elif c == "\\":
                state = "VALUE_ESCAPE"
            elif c not in _WS:
                state = "VALUE"
                value = (value or []) + [c]
        elif state == "VALUE":
            if c == "\\":
                state, last_value_ws = "VALUE_ESCAPE", None
            else:
                value = value or []
                if c not in _WS:
                    last_value_ws = None
                elif last_value_ws is None:
                    last_value_ws = len(value)
                value.append(c)
        elif state == "VALUE_ESCAPE":
            state = "VALUE"
            if c not in _NL:
                value = (value or []) + [c]
        elif state == "SINGLE":
            if c == "'":
                state = "PRE_VALUE"
            else:
                value = (value or []) + [c]
        elif state == "DOUBLE":
            if c == '"':
                state = "PRE_VALUE"
            elif c == "\\":
                state = "DOUBLE_ESCAPE"
            else:
                value = (value or []) + [c]
        elif state == "DOUBLE_ESCAPE":
            state = "DOUBLE"
            if c in _NEED_ESCAPE:
                value = (value or []) + [c]
            elif c != "\n":
                value = (value or []) + ["\\", c]
        elif state == "COMMENT":
            if c == "\\":
                state = "COMMENT_ESCAPE"
            elif c in _NL:
                state = "PRE_KEY"
        elif state == "COMMENT_ESCAPE":
            state = "COMMENT" if comment_continues or c not in _NL else "PRE_KEY"
    if state not in ("PRE_KEY", "KEY", "COMMENT", "COMMENT_ESCAPE"):
        yield pushed(state == "VALUE")


def systemd_environment(text: str, comment_continues: bool = True) -> dict[str, str]:
    """The variables a service gets from ``EnvironmentFile=`` holding ``text`` (the last assignment
    of a name wins; names that are not valid are dropped)."""
    env: dict[str, str] = {}
    for key, value in _pairs(text, comment_continues):
        if VALID_NAME.match(key):
            env[key] = value
    return env


def secret_tokens(env: dict[str, str]) -> set[str]:
    """The tokens in the values of the secret-named variables of ``env``."""
    return {t for name, value in env.items() if CREDENTIAL_NAME.search(name) for t in TOKEN.findall(value)}


def leaks(env: dict[str, str], shown: str) -> list[str]:
    """The tokens of ``env``'s secret-named values that ``shown`` (the scrubber's output for the
    file) still holds. A value's letters and digits are all in its tokens."""
    return sorted(t for t in secret_tokens(env) if t in shown)
