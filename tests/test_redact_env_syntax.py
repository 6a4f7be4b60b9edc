"""`status --diff` never shows a credential however an env file or unit spells its assignment, as
systemd reads it (src/basic/env-file.c parse_env_file_internal: blanks around '=' skipped, quoted
values, a backslash at a line's end continuing it), and costs linear time on a line of any length."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sglang_deploy.status.redact import redact, unified_diff

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
