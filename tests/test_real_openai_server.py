"""`sglang-deploy check` against a real OpenAI-compatible server that is not SGLang and not
written here: Hugging Face's `transformers serve` (transformers 5.24.0), serving a tiny
randomly initialised model built locally by tests/real_server/make_tiny_model.py. Nothing is
downloaded; the server is bound to 127.0.0.1 on a free port and stopped by its process group.

The server runs from its own venv (torch and transformers are not the project's
dependencies): TFSERVE_VENV, else .venv-tfserve in the checkout (.ci/run builds it). Without
it the tests skip, except under CI (CI set), where a missing venv is a failure.

What the server does that SGLang does not (transformers 5.24.0, serving/): no /server_info,
`ignore_eos` refused with 422, usage inside the finish chunk, no `data: [DONE]`; and, unpinned
with a Hub cache it cannot read, /v1/models answers 500 and the server closes the kept-alive
connection afterwards (uvicorn closes the transport after an exception in the app).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent
MAKE_MODEL = ROOT / "tests" / "real_server" / "make_tiny_model.py"
MAX_TOKENS = 32
REPEATS = 3

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="starts local servers")


def _venv() -> Path:
    venv = Path(os.environ.get("TFSERVE_VENV") or ROOT / ".venv-tfserve")
    if not (venv / "bin" / "transformers").is_file():
        why = (f"no `transformers serve` venv at {venv} (TFSERVE_VENV; .ci/run builds it with "
               f"torch==2.13.0 and transformers[serving]==5.24.0)")
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return venv


def _offline_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HF_", "TRANSFORMERS_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", **extra)
    return env


@pytest.fixture(scope="module")
def venv() -> Path:
    return _venv()


@pytest.fixture(scope="module")
def tiny_model(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tfserve") / "tiny-llama"
    env = _offline_env(HF_HOME=str(out.parent / "hf-home"))
    subprocess.run([str(venv / "bin" / "python"), str(MAKE_MODEL), str(out)], check=True, env=env,
                   capture_output=True, timeout=600)
    return out


class Server:
    """`transformers serve` on 127.0.0.1, in its own process group."""

    def __init__(self, venv: Path, model: Path | None, tmp: Path, hub_cache: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / f"serve-{self.port}.log"
        argv = [str(venv / "bin" / "transformers"), "serve", *([str(model)] if model else []),
                "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu", "--log-level", "info"]
        env = _offline_env(HF_HOME=str(tmp / "hf-home"), HF_HUB_CACHE=str(hub_cache))
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env, cwd=str(tmp),
                                         start_new_session=True)
        self._wait_up(180.0)

    def _wait_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited {self.proc.returncode}:\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"transformers serve not up after {timeout:g} s:\n{self.tail()}")

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


@pytest.fixture
def pinned(venv: Path, tiny_model: Path, tmp_path: Path) -> Iterator[Server]:
    """Pinned to the tiny model (FORCE_MODEL): /v1/models lists it."""
    server = Server(venv, tiny_model, tmp_path, hub_cache=tmp_path / "hub-cache")
    yield server
    server.stop()


@pytest.fixture
def models_500(venv: Path, tmp_path: Path) -> Iterator[Server]:
    """Unpinned, with a Hub cache path that is a file: /v1/models scans the cache and answers
    500, then the server closes the connection. The model is loaded on the first request."""
    not_a_dir = tmp_path / "not-a-cache-dir"
    not_a_dir.write_text("a file where the Hub cache should be\n")
    server = Server(venv, None, tmp_path, hub_cache=not_a_dir)
    yield server
    server.stop()


def _check(url: str, model: Path, tmp: Path, name: str) -> tuple[int, dict, str]:
    report = tmp / f"{name}.json"
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_deploy.commands.cli", "check", "--url", url, "--model", str(model),
         "--repeats", str(REPEATS), "--max-tokens", str(MAX_TOKENS), "--ready-timeout", "120",
         "--stall-timeout", "60", "--json", str(report)],
        capture_output=True, text=True, timeout=600, cwd=str(ROOT))
    assert "Traceback" not in proc.stderr, proc.stderr
    data = json.loads(report.read_text()) if report.is_file() else {}
    return proc.returncode, data, proc.stdout + proc.stderr


def _assert_measured(code: int, report: dict, output: str) -> None:
    assert code == 0, output
    assert report["verdict"] == "pass"
    singles = [r for r in report["requests"] if r["phase"] == "single"]
    assert len(singles) == REPEATS
    for r in singles:
        # the tiny model never emits EOS: every answer runs to max_tokens, counted by the server
        assert (r["tokens_source"], r["completion_tokens"], r["finish_reason"]) == ("usage", MAX_TOKENS, "length")
        assert r["chunks"] >= MAX_TOKENS // 2
        assert 0 < r["decode_tok_s"] < 100_000
    assert 1 < report["decode_tok_s"] < 100_000
    assert report["settings"]["endpoint"] == "/v1/chat/completions"


def test_check_measures_transformers_serve(pinned: Server, tiny_model: Path, tmp_path: Path) -> None:
    code, report, output = _check(pinned.url, tiny_model, tmp_path, "pinned")
    _assert_measured(code, report, output)
    assert any("ignore_eos" in w for w in report["warnings"]), report["warnings"]


def test_check_measures_when_v1_models_answers_500(models_500: Server, tiny_model: Path, tmp_path: Path) -> None:
    """With --model the gate does not need /v1/models: a 500 there (and the connection the
    server closes after it) must not stop the measurement. The close races the next request,
    so the gate runs several times."""
    answer = httpx.get(f"{models_500.url}/v1/models", timeout=30)
    assert answer.status_code == 500, (answer.status_code, answer.text)
    for run in range(3):
        code, report, output = _check(models_500.url, tiny_model, tmp_path, f"models-500-{run}")
        _assert_measured(code, report, output)
