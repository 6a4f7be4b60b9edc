"""The simulated server's model loading: it reads the weights under --model-path at the configured
rate before it binds, and refuses to start without them when HF_HUB_OFFLINE=1, as SGLang would."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

from tests.test_simulated_sglang import _clean_env, free_port, venv_python, wheels  # noqa: F401 (fixtures)


def _start(python: Path, tmp: Path, model: str, cfg: dict, **env: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    cfg_path = tmp / "sim.json"
    cfg_path.write_text(json.dumps(cfg))
    environ = _clean_env(SGLANG_SIM_CONFIG=str(cfg_path), **env)
    if "HF_HUB_OFFLINE" not in env:  # online unless the test says otherwise (tests/conftest.py sets it)
        environ.pop("HF_HUB_OFFLINE", None)
    proc = subprocess.Popen([str(python), "-m", "sglang.launch_server", "--model-path", model, "--port", str(port)],
                            stdout=open(tmp / "out", "wb"), stderr=open(tmp / "err", "wb"), cwd=str(tmp), env=environ)
    return proc, port


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def test_reads_a_local_snapshot_at_the_configured_rate_before_binding(venv_python, tmp_path):  # noqa: F811
    model = tmp_path / "snapshot"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(os.urandom(3_000_000))
    proc, port = _start(venv_python("0.5.23"), tmp_path, str(model), {"weights_read_mb_s": 2.0},
                        HF_HUB_OFFLINE="1")
    t0 = time.monotonic()
    try:
        while not _listening(port):
            assert proc.poll() is None, (tmp_path / "err").read_text()
            assert time.monotonic() - t0 < 20
            time.sleep(0.05)
        took = time.monotonic() - t0
        # 3 MB at 2 MB/s: 1.5 s of reading before the port is bound (plus interpreter start-up).
        assert 1.4 < took < 6, took
        out = (tmp_path / "out").read_text()
        assert f"Load weight begin: {model} at 2 MB/s" in out
        assert "Load weight end. 3000002 bytes" in out
    finally:
        proc.kill()
        proc.wait(5)


def test_refuses_a_hub_id_offline_and_a_directory_without_config(venv_python, tmp_path):  # noqa: F811
    proc, _ = _start(venv_python("0.5.23"), tmp_path, "Qwen/Qwen3-32B", {}, HF_HUB_OFFLINE="1")
    assert proc.wait(30) == 1
    assert "couldn't find them in the cached files" in (tmp_path / "err").read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    proc, _ = _start(venv_python("0.5.23"), tmp_path, str(empty), {}, HF_HUB_OFFLINE="1")
    assert proc.wait(30) == 1
    assert "does not appear to have a file named config.json" in (tmp_path / "err").read_text()


def test_a_hub_id_online_is_accepted_as_before(venv_python, tmp_path):  # noqa: F811
    proc, port = _start(venv_python("0.5.23"), tmp_path, "Qwen/Qwen3-32B", {})
    try:
        deadline = time.monotonic() + 20
        while not _listening(port):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert "SGLang would download it now" in (tmp_path / "out").read_text()
    finally:
        proc.kill()
        proc.wait(5)
