"""Shared test helpers. Stand-ins live under tests/fixtures and are named as such."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sglang_deploy.commands.demo import PORT_RANGE as DEMO_PORTS
from sglang_deploy.commands.demo import free_port as free_port  # the tests' own servers use it too

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


#: Where the servers a test starts listen: the demo's band (sglang_deploy/commands/demo.py, its
#: free_port), below the kernel's ephemeral range, from which every outgoing connection takes its
#: local port, so that one made meanwhile (an e2e file's SSH, say) cannot take a port picked and
#: released here before the server binds it (CI saw sglang-router fail with "Address already in
#: use" so); and below the testbed's sshd ports and the e2e files' fixed ones
#: (tests/test_e2e_ports.py keeps them apart).
FREE_PORTS = range(*DEMO_PORTS)


def load_probe(name: str) -> dict[str, Any]:
    """A GPU probe stand-in (tests/fixtures/probes), see its README."""
    return json.loads((FIXTURES / "probes" / f"{name}.json").read_text())


@pytest.fixture
def repo_root() -> Path:
    return ROOT


def clean_env(**extra: str) -> dict[str, str]:
    """This environment for a simulated server or the router a test starts, without pip's, Python's,
    SGLang's and the Hub's variables: HF_HUB_OFFLINE=1 (below) makes the simulated server refuse a
    Hub id, and the router, which looks for a tokenizer on the Hub, then fails at once."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "SGLANG_", "HF_"))}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def sim_python(tmp_path_factory) -> Path:
    """python of a throwaway venv with the simulated sglang 0.5.23 installed."""
    from sglang_deploy.simulator.sglang_server import build
    tmp = tmp_path_factory.mktemp("sim")
    build.build_wheels(["0.5.23"], tmp / "wheels")
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True, env=clean_env())
    py = tmp / "venv" / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                    "--find-links", str(tmp / "wheels"), "sglang==0.5.23"], check=True, env=clean_env(), timeout=180)
    return py


def _isolate_from_the_hub(mp: pytest.MonkeyPatch, cache: Path) -> None:
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    mp.setenv("XDG_CACHE_HOME", str(cache))
    mp.delenv("HF_TOKEN", raising=False)


@pytest.fixture(scope="session", autouse=True)
def _no_real_hub_for_shared_fixtures(tmp_path_factory):
    """The same for module- and session-scoped fixtures, which pytest sets up before any
    function-scoped autouse fixture (a plan made there must not read the user's cache either)."""
    with pytest.MonkeyPatch.context() as mp:
        _isolate_from_the_hub(mp, tmp_path_factory.mktemp("xdg-cache-session"))
        yield


@pytest.fixture(autouse=True)
def _no_real_hub_and_no_real_cache(monkeypatch, tmp_path_factory):
    """Plans resolve model facts (sglang_deploy/deploy/model_metadata.py): in tests the Hub is never the real
    one and the cache never the user's. A test that wants the Hub stand-in sets HF_ENDPOINT
    and unsets HF_HUB_OFFLINE."""
    _isolate_from_the_hub(monkeypatch, tmp_path_factory.mktemp("xdg-cache"))
