"""Reading ExecStart= back into an argv (sglang_deploy/unitsyntax.py parse_exec_start), by the rules
of systemd.service(5) "Command lines" and systemd.syntax(7); the e2e status test checks it against
the argv real systemd gives a process (tests/e2e/test_status_e2e.py)."""

from __future__ import annotations

import pytest

from sglang_deploy.plan.render import exec_lines
from sglang_deploy.unitsyntax import ExecStartError, exec_quote, parse_exec_start


def unit(exec_start: str, before: str = "") -> str:
    return f"[Unit]\nDescription=x\n\n[Service]\nType=simple\n{before}ExecStart={exec_start}\nRestart=on-failure\n"


@pytest.mark.parametrize("line, argv", [
    ("/bin/sh -c 'dmesg | tac'", ["/bin/sh", "-c", "dmesg | tac"]),  # systemd.service(5)'s own example
    ('/bin/echo "one" "two two"', ["/bin/echo", "one", "two two"]),
    ("/bin/echo a\"b c\"d 'e''f'", ["/bin/echo", "ab cd", "ef"]),  # quotes inside a word
    (r"/bin/echo \x41 \101 \u00e9 \s \t", ["/bin/echo", "A", "A", "\u00e9", " ", "\t"]),  # C escapes
    (r'/bin/echo "a\"b" ' + r"'c\'d'", ["/bin/echo", 'a"b', "c'd"]),  # escapes inside either quote
    (r"/bin/echo \; ;x %% 50%%", ["/bin/echo", ";", ";x", "%", "50%"]),
    ("/bin/echo $$HOME a$$b", ["/bin/echo", "$HOME", "a$b"]),
    ("-/bin/true x", ["/bin/true", "x"]),
    ("@/usr/bin/python3 sglang-server -m x", ["sglang-server", "-m", "x"]),  # @: the 2nd word is argv[0]
    (":/bin/echo ${NOT_EXPANDED}", ["/bin/echo", "${NOT_EXPANDED}"]),  # ':' turns expansion off
    ("+!!/bin/echo x", ["/bin/echo", "x"]),
])
def test_documented_rules(line, argv):
    assert parse_exec_start(unit(line)) == argv


def test_continuation_lines_comments_and_the_last_assignment():
    text = unit("/usr/bin/python3 -m sglang.launch_server \\\n    --port 30000 \\\n# a comment inside\n    --tp 2")
    assert parse_exec_start(text) == ["/usr/bin/python3", "-m", "sglang.launch_server", "--port", "30000", "--tp", "2"]
    reset = unit("/bin/new", before="ExecStart=/bin/old\nExecStart=\n")
    assert parse_exec_start(reset) == ["/bin/new"]
    assert parse_exec_start(unit("/bin/x \\\\")) == ["/bin/x", "\\"]  # an escaped backslash ends the line


@pytest.mark.parametrize("line, why", [
    ("/bin/echo one ; /bin/echo two", "more than one command"),
    ("/bin/echo ${SGLANG_API_KEY}", "environment variable"),
    ("/bin/echo $TWO", "environment variable"),
    ("/bin/echo %n", "specifier %n"),
    ("/bin/echo 'open", "unterminated quote"),
    (r"/bin/echo \q", "unknown escape"),
    (r"/bin/echo \x4", "bad \\x escape"),
])
def test_what_only_the_host_knows_or_systemd_refuses_is_an_error(line, why):
    with pytest.raises(ExecStartError, match=why.replace("\\", "\\\\")):
        parse_exec_start(unit(line))
    with pytest.raises(ExecStartError, match="no ExecStart"):
        parse_exec_start("[Service]\nType=simple\n")
    with pytest.raises(ExecStartError, match="more than one ExecStart"):
        parse_exec_start(unit("/bin/b", before="ExecStart=/bin/a\n"))


WORDS = ["plain", "two words", 'quote"d', "it's", "back\\slash", "50%", "$HOME", "${X}", ";", "", "a;b",
         "tab\there".replace("\t", " "), "é ü", "--flag=value with space", "(x)[y]{z}", "#not-a-comment"]


@pytest.mark.parametrize("word", WORDS)
def test_what_exec_quote_writes_reads_back_unchanged(word):
    argv = ["/opt/venv/bin/python", "-m", "sglang.launch_server", "--x", word]
    assert parse_exec_start(unit(" ".join(exec_quote(w) for w in argv))) == argv


def test_the_deploys_own_rendered_lines_read_back_as_the_argv():
    """render.exec_lines as the unit template joins them (one option per line, continued), with the
    API key's launcher (python -c code holding quotes, parentheses and a comprehension)."""
    argv = ["--model-path", "/var/lib/sglang/models/x y", "--tp", "2", "--api-key", "SECRET", "--mem-fraction-static",
            "0.85", "--json-model-override-args", '{"a": "b c"}']
    lines = exec_lines("/opt/sglang/venvs/sglang-0.5.23/bin/python", argv, {5: "SGLANG_API_KEY"})
    got = parse_exec_start(unit(" \\\n    ".join(lines)))
    assert got[:2] == ["/opt/sglang/venvs/sglang-0.5.23/bin/python", "-c"]
    assert "os.environ.pop(var)" in got[2] and "SECRET" not in " ".join(got)
    assert got[3:] == [w for i, w in enumerate(argv) if i not in (4, 5)]
