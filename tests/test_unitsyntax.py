"""Quoting for ExecStart=, EnvironmentFile= and nccl.conf.

The expected strings follow systemd.service(5) "Command lines" and
systemd.exec(5) "EnvironmentFile=". A reference unquoter written from those
rules checks the round trip; the real systemd parser checks the rendered unit
in test_render.py (systemd-analyze verify).
"""

from __future__ import annotations

import pytest

from sglang_deploy.unitsyntax import ControlCharacter, env_quote, exec_quote, nccl_value


def systemd_exec_unquote(word: str) -> str:
    """Undo exec_quote by systemd's documented rules (one word)."""
    out = []
    i = 0
    quote = None
    while i < len(word):
        c = word[i]
        if c == "%" and word[i + 1:i + 2] == "%":
            out.append("%")
            i += 2
            continue
        if c == "$" and word[i + 1:i + 2] == "$":
            out.append("$")
            i += 2
            continue
        if c in "%$":
            raise AssertionError(f"unescaped specifier/variable in {word!r}")
        if c == "\\":
            out.append(word[i + 1])
            i += 2
            continue
        if c == '"' and quote is None:
            quote = '"'
        elif c == '"' and quote == '"':
            quote = None
        elif c.isspace() and quote is None:
            raise AssertionError(f"unquoted whitespace in {word!r}")
        else:
            out.append(c)
        i += 1
    assert quote is None
    return "".join(out)


@pytest.mark.parametrize("raw,quoted", [
    ("--tp-size", "--tp-size"),
    ("Qwen/Qwen3.6-27B", "Qwen/Qwen3.6-27B"),
    ("0.88", "0.88"),
    ("a b", '"a b"'),
    ("50%", '"50%%"'),
    ("$HOME", '"$$HOME"'),
    ('{"language_model_only": true}', '"{\\"language_model_only\\": true}"'),
    ("back\\slash", '"back\\\\slash"'),
    ("it's", "\"it's\""),
    (";", "\\;"),
    ("", '""'),
])
def test_exec_quote(raw, quoted):
    assert exec_quote(raw) == quoted
    assert systemd_exec_unquote(quoted) == raw


@pytest.mark.parametrize("bad", ["a\nb", "tab\there", "bell\x07", "del\x7f", "cr\r"])
def test_control_characters_are_refused_everywhere(bad):
    for fn in (exec_quote, env_quote, nccl_value):
        with pytest.raises(ControlCharacter):
            fn(bad)


@pytest.mark.parametrize("raw,quoted", [
    ("PCI_BUS_ID", "PCI_BUS_ID"),
    ("0,1", "0,1"),
    ("hf_abc$def", "'hf_abc$def'"),
    ("with space", "'with space'"),
    ("it's $x", '"it\'s \\$x"'),
    ("", "''"),
])
def test_env_quote(raw, quoted):
    assert env_quote(raw) == quoted


def test_nccl_conf_has_no_quoting_so_odd_values_are_refused():
    assert nccl_value("WARN") == "WARN"
    assert nccl_value("^lo,docker0") == "^lo,docker0"
    with pytest.raises(ValueError, match="no quoting"):
        nccl_value("eth0 eth1")
