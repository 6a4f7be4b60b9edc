"""`status --diff` never shows a credential however an env file or unit spells its assignment, as
systemd reads it (src/basic/env-file.c parse_env_file_internal: blanks around '=' skipped, quoted
values, a backslash at a line's end continuing it), and costs linear time on a line of any length."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_deploy.status.redact import redact, unified_diff
from tests.envfile_syntax import env_files, leaks, secret_tokens, systemd_environment

SECRET = "hf_s3cr3tV4lue"


def test_the_spellings_systemd_accepts_are_masked():
    for text in (f"HF_TOKEN={SECRET}", f"HF_TOKEN = {SECRET}", f"HF_TOKEN= {SECRET}", f"HF_TOKEN =\t{SECRET}",
                 f'HF_TOKEN="{SECRET}"', f"HF_TOKEN='{SECRET}'", f'HF_TOKEN="a \\" {SECRET}"',
                 f"HF_TOKEN=abc\\\n{SECRET}", f"  export_HF_TOKEN={SECRET}", f"Environment=HF_TOKEN={SECRET}",
                 f"SGLANG_API_KEY={SECRET} OTHER=1"):
        assert SECRET not in redact(text), text


def test_other_assignments_and_prose_are_kept():
    assert redact("MODEL=Qwen/Qwen3-32B\nPORT = 30000") == "MODEL=Qwen/Qwen3-32B\nPORT = 30000"
    assert "HF_TOKEN=***" in redact(f"HF_TOKEN={SECRET}")


def test_a_diff_says_a_secret_changed_never_to_what():
    diff = unified_diff("env", "/etc/sglang/sglang.env", f"HF_TOKEN = {SECRET}\n", "HF_TOKEN = hf_old\n", "abc")
    assert SECRET not in diff and "hf_old" not in diff and "(changed)" in diff


def test_a_long_line_costs_linear_time():
    # quadratic backtracking took 5 s at 32 K characters and minutes at 256 K
    for text in ("A" * 262144 + "=x", "TOKEN" * 52000 + "=x", "x=" + "a" * 262144, "a" * 262144 + "://"):
        assert len(redact(text)) > 0


names = st.sampled_from(["HF_TOKEN", "SGLANG_API_KEY", "my_password", "AWS_SECRET_ACCESS_KEY", "GATEWAY_KEY"])
blanks = st.sampled_from(["", " ", "\t", "  "])
quotes = st.sampled_from(["", '"', "'"])
secret = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7e, blacklist_characters="\"'\\"),
                 min_size=8, max_size=40)


@given(name=names, before=blanks, after=blanks, quote=quotes, value=secret,
       prefix=st.sampled_from(["", "Environment=", "  ", "# x\n"]), suffix=st.sampled_from(["", "\n", "\nA=1"]))
def test_no_spelling_shows_the_value(name, before, after, quote, value, prefix, suffix):
    text = f"{prefix}{name}{before}={after}{quote}{value}{quote}{suffix}"
    assert value not in redact(text), text


# ---- systemd's own reading (tests/envfile_syntax.py models it; tests/e2e/test_redact_systemd_e2e.py
# holds the model and the scrubber to a real systemd) ----------------------------------------------

#: Files where a real systemd set a secret-named variable the scrubber showed part of (found by the
#: e2e property): the token that leaked, in the file as drawn.
SYSTEMD_FOUND = [
    # after a closing quote the value goes on (PRE_VALUE again): "a"b, 'a' 'b', "a"\<newline>b
    ('HF_TOKEN="tok0001v"tok0002v\n', "tok0002v"),
    ("HF_TOKEN='tok0001v' 'tok0002v'\n", "tok0002v"),
    ('HF_TOKEN="tok0001v"\\\ntok0002v\n', "tok0002v"),
    ('HF_TOKEN="tok0001v" tok0002v\nA=1\n', "tok0002v"),
    # a plain value continued over a line whose own '=' and quote are the value's: the scrubber's
    # scan for names found SGLANG_API_KEY there, masked its "quoted" value past the line end, and
    # lost my_password's start, which systemd finds on the line after
    ('A_1=  \\=tok0001v"tok0002v\\\nexport SGLANG_API_KEY = "],_/tok0003v\r\n"\\\n my_password\t= \t\'.|tok0004v\n'
     '\'tok0005v\\\n \ttok0006v\\\ttok0007v \r\n', "tok0005v"),
]


@pytest.mark.parametrize("text, token", SYSTEMD_FOUND)
def test_what_systemd_found_is_masked(text, token):
    env = systemd_environment(text)
    assert token in secret_tokens(env), "the model reads the token as systemd did"
    assert leaks(env, redact(text)) == [], redact(text)


def test_a_carriage_return_ends_a_value_and_a_continued_comment_may_hide_a_line():
    env = systemd_environment("HF_TOKEN=tok0001v\rMY_KEY=tok0002v\r# c \\\nOTHER_KEY=tok0003v\n")
    assert env == {"HF_TOKEN": "tok0001v", "MY_KEY": "tok0002v"}  # systemd 252, seen on a throwaway host
    assert systemd_environment("# c \\\nOTHER_KEY=tok0003v\n", comment_continues=False) == {"OTHER_KEY": "tok0003v"}
    assert "tok000" not in redact("HF_TOKEN=tok0001v\rMY_KEY=tok0002v\r# c \\\nOTHER_KEY=tok0003v\n")


def test_names_systemd_drops_are_masked_all_the_same():
    # export X, X-Y, X.Y, a name with a blank or not ASCII: systemd 252 sets none of them
    for text in ("export HF_TOKEN=tok0001v", "HF-TOKEN=tok0001v", "HF.TOKEN=tok0001v", "HF TOKEN=tok0001v",
                 "TOKEN\u00e9=tok0001v", "$HF_TOKEN=tok0001v"):
        assert systemd_environment(text) == {}
        assert "tok0001v" not in redact(text), text


@settings(max_examples=300)
@given(text=env_files())
def test_no_value_systemd_reads_for_a_secret_name_is_shown(text):
    shown = redact(text)
    for continues in (True, False):
        assert leaks(systemd_environment(text, continues), shown) == [], (text, shown)
