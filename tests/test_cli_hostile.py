"""The CLI's own input, tried as a hostile user would: every bad argument gives one line
naming the argument and the documented exit code (2 for `check`: could not measure or bad
argument, never 1), before any work; no traceback; no secret in any output. No server is
needed: `check` talks to an httpx.MockTransport or to a port nothing listens on."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_deploy.commands import cli
from sglang_deploy.gate import run as gate_run

ROOT = Path(__file__).resolve().parent.parent
DEAD = "http://127.0.0.1:9"  # discard port: nothing listens
CANARY = "canary-Zq8xP3"
FAST = ["--ready-timeout", "0"]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        code = cli.main(list(argv), out=out, err=err)
    except SystemExit as exc:  # argparse's own refusal (a value that is not a number): exit 2
        code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


# ---------------------------------------------------------------------------
# a server at the HTTP boundary: just enough of OpenAI's API to be measured
# ---------------------------------------------------------------------------


def _stream(n: int, echo: str) -> Iterator[bytes]:
    def chunk(obj: dict[str, Any]) -> bytes:
        return f"data: {json.dumps(obj)}\n\n".encode()

    yield chunk({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    for i in range(n):
        time.sleep(0.002)
        yield chunk({"choices": [{"index": 0, "delta": {"content": f" w{i}"}}]})
    yield chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                 "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": n + 5}, "echo": echo})
    yield b"data: [DONE]\n\n"


def fake_server(requests: list[httpx.Request]) -> httpx.MockTransport:
    """Answers like a small OpenAI-compatible server; echoes the Authorization header back in
    every answer (a hostile server must not make the CLI print the key)."""

    def handle(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        echo = request.headers.get("authorization", "")
        path = request.url.path
        if path in ("/health_generate", "/health"):
            return httpx.Response(200, json={"status": "ok", "echo": echo})
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}], "echo": echo})
        if path == "/v1/chat/completions":
            body = json.loads(request.content)
            n = max(1, min(int(body.get("max_tokens") or 8), 8))
            return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  content=_stream(n, echo))
        return httpx.Response(404, json={"detail": f"Not Found {echo}"})

    return httpx.MockTransport(handle)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> list[httpx.Request]:
    """`check` runs against fake_server; the list collects the requests it made."""
    requests: list[httpx.Request] = []
    real = gate_run.run_check
    monkeypatch.setattr(gate_run, "run_check",
                        lambda opts, progress=lambda m: None: real(opts, progress, transport=fake_server(requests)))
    return requests


def test_fake_server_measures(server: list[httpx.Request], tmp_path: Path) -> None:
    code, out, err = run("check", "--url", "http://127.0.0.1:30000", "--repeats", "2", "--max-tokens", "8",
                         "--json", str(tmp_path / "r.json"))
    assert code in (0, 1, 2) and "Traceback" not in err
    assert server, "the fake server was asked nothing"


# ---------------------------------------------------------------------------
# check: each class, several cases; one line naming the argument, exit 2
# ---------------------------------------------------------------------------


def _files(tmp: Path) -> dict[str, Path]:
    f = {
        "utf8": tmp / "bad-utf8.txt", "multi": tmp / "multi.key", "empty": tmp / "empty.key",
        "blank": tmp / "blank.key", "ctrl": tmp / "ctrl.key", "nonascii": tmp / "nonascii.key",
        "notjson": tmp / "notjson.json", "list2": tmp / "two.json", "dict": tmp / "dict.json",
        "number": tmp / "number.json", "wrongtypes": tmp / "wrongtypes.json",
    }
    f["utf8"].write_bytes(b"sk-\xff\xfe\n")
    f["multi"].write_text("line-one\nline-two\n")
    f["empty"].write_text("")
    f["blank"].write_text("  \n\n")
    f["ctrl"].write_bytes(b"sk-ab\x07cd\n")
    f["nonascii"].write_text("sk-caf\u00e9\n", encoding="utf-8")
    f["notjson"].write_text("{not json")
    plan = {"host": "a", "sglang_version": "0.5.23", "intents": []}
    f["list2"].write_text(json.dumps([plan, dict(plan, host="b")]))
    f["dict"].write_text(json.dumps({"foo": 1}))
    f["number"].write_text("5")
    f["wrongtypes"].write_text(json.dumps({"host": 1, "sglang_version": None, "intents": "x"}))
    return f


BAD_CHECK: list[tuple[str, list[str], str]] = [
    # unparsable or wrong URLs
    ("port-not-a-number", ["--url", "http://127.0.0.1:abc"], "--url"),
    ("port-out-of-range", ["--url", "http://127.0.0.1:99999"], "--url"),
    ("ipv6-unclosed", ["--url", "http://[::1"], "--url"),
    ("no-scheme", ["--url", "127.0.0.1:30000"], "--url"),
    ("ftp", ["--url", "ftp://127.0.0.1/"], "--url"),
    ("space", ["--url", "http://a b:1"], "--url"),
    ("newline", ["--url", "http://127.0.0.1:1\n"], "--url"),
    ("no-host", ["--url", "http://:30000"], "--url"),
    ("empty", ["--url", ""], "--url"),
    # numbers: NaN, infinite, negative, zero, absurd
    ("ready-nan", ["--ready-timeout", "nan"], "--ready-timeout"),
    ("ready-inf", ["--ready-timeout", "inf"], "--ready-timeout"),
    ("ready-neg", ["--ready-timeout", "-1"], "--ready-timeout"),
    ("stall-nan", ["--stall-timeout", "nan"], "--stall-timeout"),
    ("stall-zero", ["--stall-timeout", "0"], "--stall-timeout"),
    ("stall-neg-inf", ["--stall-timeout=-inf"], "--stall-timeout"),
    ("repeats-zero", ["--repeats", "0"], "--repeats"),
    ("repeats-neg", ["--repeats", "-3"], "--repeats"),
    ("repeats-huge", ["--repeats", "100000000000"], "--repeats"),
    ("max-tokens-one", ["--max-tokens", "1"], "--max-tokens"),
    ("max-tokens-huge", ["--max-tokens", "99999999999999"], "--max-tokens"),
    ("concurrency-zero", ["--concurrency", "0"], "--concurrency"),
    ("concurrency-huge", ["--concurrency", "1000000"], "--concurrency"),
    ("tolerance-nan", ["--tolerance", "nan"], "--tolerance"),
    ("tolerance-inf", ["--tolerance", "inf"], "--tolerance"),
    ("tolerance-one", ["--tolerance", "1"], "--tolerance"),
    ("target-nan", ["--target", "nan"], "--target"),
    ("target-inf", ["--target", "inf"], "--target"),
    ("target-zero", ["--target", "0"], "--target"),
    ("target-neg", ["--target", "-5"], "--target"),
    # --fail-on that names nothing, or nonsense
    ("fail-on-empty", ["--fail-on", ""], "--fail-on"),
    ("fail-on-commas", ["--fail-on", " , ,"], "--fail-on"),
    ("fail-on-unknown", ["--fail-on", "tp,bogus"], "--fail-on"),
    # empty values that would silently mean "not given"
    ("model-empty", ["--model", ""], "--model"),
    ("json-empty", ["--json", ""], "--json"),
    ("expect-empty", ["--expect", " "], "--expect"),
    ("hardware-empty", ["--hardware", ""], "--hardware"),
    ("api-key-env-empty-name", ["--api-key-env", ""], "--api-key-env"),
    ("api-key-file-empty-name", ["--api-key-file", ""], "--api-key-file"),
    # combinations
    ("record-without-baseline", ["--record"], "--record"),
    ("abort-without-watch", ["--abort-file", "x"], "--abort-file"),
]


@pytest.mark.parametrize("name,args,option", BAD_CHECK, ids=[c[0] for c in BAD_CHECK])
def test_check_refuses_bad_argument(server: list[httpx.Request], name: str, args: list[str], option: str) -> None:
    argv = ["check", *(["--url", DEAD] if "--url" not in args else []), *args]
    code, out, err = run(*argv)
    assert code == 2, (code, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines and option in lines[-1], err
    assert not server, "a bad argument must be refused before any request"


def _key_cases(f: dict[str, Path]) -> list[tuple[list[str], dict[str, str], str]]:
    return [
        (["--api-key-file", str(f["utf8"])], {}, "not UTF-8"),
        (["--api-key-file", str(f["multi"])], {}, "several lines"),
        (["--api-key-file", str(f["empty"])], {}, "empty"),
        (["--api-key-file", str(f["blank"])], {}, "empty"),
        (["--api-key-file", str(f["ctrl"])], {}, "visible ASCII"),
        (["--api-key-file", str(f["nonascii"])], {}, "visible ASCII"),
        (["--api-key-file", str(f["utf8"].parent)], {}, "is a folder, not a regular file; not read"),
        (["--api-key-file", str(f["utf8"].parent / "missing.key")], {}, "cannot read"),
        (["--api-key-env", "HOSTILE_KEY_UNSET"], {}, "not set"),
        (["--api-key-env", "HOSTILE_KEY"], {"HOSTILE_KEY": ""}, "empty"),
        (["--api-key-env", "HOSTILE_KEY"], {"HOSTILE_KEY": f"{CANARY}\n{CANARY}"}, "several lines"),
        (["--api-key-env", "HOSTILE_KEY"], {"HOSTILE_KEY": f"{CANARY} x"}, "visible ASCII"),
        (["--api-key-env", "HOSTILE_KEY", "--api-key-file", str(f["multi"])], {"HOSTILE_KEY": "k"}, "one of"),
    ]


def test_check_refuses_bad_keys(server: list[httpx.Request], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOSTILE_KEY_UNSET", raising=False)
    for args, env, words in _key_cases(_files(tmp_path)):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        code, out, err = run("check", "--url", DEAD, *args)
        assert code == 2 and words in err, (args, code, err)
        assert err.count("\n") == 1 and err.startswith("error: --api-key-"), err
        assert CANARY not in out + err and "line-one" not in err
    assert not server


def test_check_refuses_expect_of_the_wrong_shape(server: list[httpx.Request], tmp_path: Path) -> None:
    f = _files(tmp_path)
    plan = tmp_path / "real-plan.json"
    code, out, _ = run("plan", str(ROOT / "inventory/a6000.py"), "--json")
    assert code == 0
    plan.write_text(out)
    cases = [
        ([str(f["notjson"])], "not JSON"),
        ([str(f["utf8"])], "not UTF-8"),
        ([str(f["number"])], "expected the JSON"),
        ([str(f["list2"])], "pick one with --host"),
        ([str(f["list2"]), "--host", "zz"], "'zz' is not in the plan"),
        ([str(plan), "--host", "not-there"], "is not in the plan"),
        ([str(f["dict"])], "missing or wrong host"),
        ([str(f["wrongtypes"])], "missing or wrong host"),
        ([str(tmp_path)], "is a folder, not a regular file; not read"),
        ([str(tmp_path / "missing.json")], "cannot read"),
    ]
    for args, words in cases:
        code, out, err = run("check", "--url", DEAD, *FAST, "--expect", *args)
        assert code == 2 and "--expect" in err and words in err, (args, err)
    assert not server


def test_output_paths_are_checked_before_any_work(server: list[httpx.Request], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("x")
    bad = [str(tmp_path), str(tmp_path / "no" / "dir" / "r.json"), str(tmp_path / "file" / "r.json"), "/proc/r.json"]
    for path in bad:
        code, _, err = run("check", "--url", "http://127.0.0.1:30000", "--json", path)
        assert code == 2 and err.startswith("error: --json: cannot write"), err
        if "/no/dir/" in path:  # --record makes the baseline's missing folders
            continue
        code, _, err = run("check", "--url", "http://127.0.0.1:30000", "--baseline", path, "--record")
        assert code == 2 and "--baseline" in err, err
    assert not server, "an unwritable output path must be refused before the measurement"
    from sglang_deploy.gate import nvml
    monkeypatch.setattr(nvml, "sample_gpus", lambda *a, **k: pytest.fail("sampled before checking --out"))
    for path in bad:
        code, _, err = run("sample-gpus", "--out", path, "--max-seconds", "0")
        assert code == 2 and err.startswith("error: --out: cannot write"), err
    for args, option in ((["--every", "nan"], "--every"), (["--every", "0"], "--every"),
                         (["--max-seconds", "-1"], "--max-seconds"), (["--max-seconds", "inf"], "--max-seconds"),
                         (["--indices=-1"], "--indices"), (["--indices", "0,x"], "--indices"),
                         (["--until-file", ""], "--until-file")):
        code, _, err = run("sample-gpus", "--out", str(tmp_path / "s.json"), *args)
        assert code == 2 and err.startswith(f"error: {option}"), (args, err)


def test_unreadable_baseline_is_refused_before_measuring(server: list[httpx.Request], tmp_path: Path) -> None:
    f = _files(tmp_path)
    for path, words in ((f["utf8"], "not UTF-8"), (tmp_path, "is a folder, not a regular file")):
        code, _, err = run("check", "--url", "http://127.0.0.1:30000", "--baseline", str(path))
        assert code == 2 and err.startswith("error: --baseline:") and words in err, err
    assert not server


# ---------------------------------------------------------------------------
# secrets: credentials in --url and the API key never printed or written
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("url", [
    f"http://user:{CANARY}@127.0.0.1:30000",
    f"http://{CANARY}@127.0.0.1:30000",
    f"http://user:{CANARY}@127.0.0.1:abc",
    f"http://user:{CANARY}@[::1",
    f"http://user:{CANARY}@127.0.0.1:9",
])
def test_url_credentials_never_appear(server: list[httpx.Request], tmp_path: Path, url: str) -> None:
    report, baseline = tmp_path / "r.json", tmp_path / "b.jsonl"
    code, out, err = run("check", "--url", url, *FAST, "--repeats", "1", "--max-tokens", "4",
                         "--json", str(report), "--baseline", str(baseline), "--record")
    assert code in (0, 1, 2) and "Traceback" not in err
    written = "".join(p.read_text() for p in (report, baseline) if p.exists())
    assert CANARY not in out + err + written


def test_api_key_never_appears_even_when_the_server_echoes_it(server: list[httpx.Request], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOSTILE_KEY", CANARY)
    report, baseline = tmp_path / "r.json", tmp_path / "b.jsonl"
    code, out, err = run("check", "--url", "http://127.0.0.1:30000", "--api-key-env", "HOSTILE_KEY",
                         "--repeats", "1", "--max-tokens", "4", "--json", str(report),
                         "--baseline", str(baseline), "--record")
    assert code in (0, 1, 2) and "Traceback" not in err
    assert server and all(r.headers["authorization"] == f"Bearer {CANARY}" for r in server)
    written = "".join(p.read_text() for p in (report, baseline) if p.exists())
    assert CANARY not in out + err + written


# ---------------------------------------------------------------------------
# plan: an inventory that cannot be loaded, a wrong --sglang-version: exit 2, one line
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("source,words", [
    ("import no_such_module_for_this_test\n", "line 1: ModuleNotFoundError: No module named"),
    ("x = 1\nraise RuntimeError('boom')\n", "line 2: RuntimeError: boom"),
    ("from os import no_such_name\n", "ImportError"),
    ("hosts = [\n", "SyntaxError"),
    ("class E(Exception):\n    def __str__(self):\n        raise ValueError\nraise E()\n", "line 4: E"),
    ("hosts = 5\n", "inventory"),
])
def test_plan_unloadable_inventory(tmp_path: Path, source: str, words: str) -> None:
    inv = tmp_path / "inv.py"
    inv.write_text(source)
    code, out, err = run("plan", str(inv))
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: inventory {inv}"), err
    assert words in err, err


def test_plan_inventory_not_utf8(tmp_path: Path) -> None:
    inv = tmp_path / "inv.py"
    inv.write_bytes(b"hosts = ['\xff']\n")
    code, _, err = run("plan", str(inv))
    assert code == 2 and "cannot load" in err


@pytest.mark.parametrize("version,words", [("", "empty"), ("  ", "empty"), ("v", "empty"),
                                           ("9.9.9", "no option catalog"), ("0.5.x", "no option catalog")])
def test_plan_bad_sglang_version_is_a_usage_error(version: str, words: str) -> None:
    code, out, err = run("plan", str(ROOT / "inventory/a6000.py"), "--sglang-version", version)
    assert code == 2 and out == "" and err.startswith("error: --sglang-version:") and words in err, err


@pytest.mark.parametrize("version", ["v0.5.23", " 0.5.23 ", "V0.5.23"])
def test_plan_sglang_version_is_normalised(version: str) -> None:
    code, out, err = run("plan", str(ROOT / "inventory/a6000.py"), "--json", "--sglang-version", version)
    assert code == 0, err
    (host,) = json.loads(out)
    assert host["sglang_version"] == "0.5.23"
    assert "sglang-0.5.23" in json.dumps(host) and "v0.5.23" not in json.dumps(host)


# ---------------------------------------------------------------------------
# property: any argument values -> exit 0, 1 or 2, never an exception, never a secret
# ---------------------------------------------------------------------------

NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-3, 6).map(str),
    st.sampled_from(["nan", "-inf", "1e309", "0", "-0", "1e-300", "10**3", "", " ", "0x10", "1_0"]),
)
URLS = st.one_of(
    st.sampled_from(["http://127.0.0.1:30000", "http://127.0.0.1:abc", "http://[::1", "https://localhost:1/v1",
                     f"http://u:{CANARY}@127.0.0.1:1", "http://127.0.0.1:65536", "http://:1", "", "file:///x"]),
    st.text(max_size=12).map(lambda s: "http://127.0.0.1:" + s),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=20),
)
OPTIONS = {
    "--target": NUMBERS, "--tolerance": NUMBERS, "--ready-timeout": NUMBERS, "--stall-timeout": NUMBERS,
    "--repeats": NUMBERS, "--max-tokens": NUMBERS, "--concurrency": NUMBERS,
    "--fail-on": st.one_of(st.text(max_size=15), st.sampled_from(["", ",", "all", "none", "tp,speculative"])),
    "--model": st.text(max_size=10),
}


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(url=URLS, chosen=st.dictionaries(st.sampled_from(sorted(OPTIONS)), st.just(None), max_size=5),
       data=st.data())
def test_check_any_arguments_exit_0_1_2(server: list[httpx.Request], url: str, chosen: dict[str, None],
                                        data: st.DataObject) -> None:
    argv = ["check", f"--url={url}", "--ready-timeout=0.5"]
    for option in chosen:
        argv.append(f"{option}={data.draw(OPTIONS[option], label=option)}")
    if "--repeats" not in chosen:
        argv.append("--repeats=1")
    if "\x00" in "".join(argv):  # argv of a real process cannot hold NUL
        return
    code, out, err = run(*argv)
    assert code in (0, 1, 2), (argv, code, err)
    assert "Traceback" not in err
    assert CANARY not in out + err
    if code == 2 and err.startswith("error: --"):
        assert err.count("\n") == 1, err


def test_plan_into_a_closed_pipe_prints_no_traceback():
    """`sglang-deploy plan --explain | head -1`: the reader leaves early; the CLI goes quietly."""
    import subprocess
    import sys

    proc = subprocess.run(f"{sys.executable} -m sglang_deploy.commands.cli plan --explain | head -1", shell=True,
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.startswith("== a6000-1 ")
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
