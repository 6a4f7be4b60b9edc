"""What the end-to-end tests that stage weights from the Hub stand-in share: one throwaway GPU
host (2x RTX A6000, simulated) whose deploys fetch the model from the stand-in on the
controller, the fast gate they use, and the host's inventory data. Each test file keeps its
own host name and ports (tests/test_e2e_ports.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable

import pytest

from sglang_deploy.simulator.sglang_server.build import build_wheel
from sglang_deploy.simulator.testbed import Testbed, TestHost
from sglang_deploy.simulator.testbed.gpu import WHEELS_ON_HOST, stage_gpu_host
from tests.e2e.conftest import in_ci
from tests.e2e.conftest import NOT_ABOUT_SPEED

STORE = "/var/lib/sglang/models"
STATE = "/var/lib/sglang-deploy/sglang"
FAST_GATE = {"repeats": 1, "max_tokens": 32, "ready_timeout_s": 120, **NOT_ABOUT_SPEED}
SIM = {"startup_delay_s": 0.3, "decode_tok_s": 200, "weights_read_mb_s": 400}


def wheels_with_hub(out: Path) -> None:
    """The simulated SGLang declaring huggingface_hub as real SGLang does, and that package's
    wheels (with its dependencies) beside it: the host installs offline from this directory."""
    build_wheel("0.5.23", out, requires=("huggingface_hub",))
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                           "--only-binary", ":all:", "-d", str(out), f"huggingface_hub=={version('huggingface_hub')}"],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        why = f"cannot fetch huggingface_hub's wheels for the host: {proc.stderr.strip()[-300:]}"
        pytest.fail(why) if in_ci() else pytest.skip(why)


def boot_hub_host(testbed: Testbed, wheels: Path, name: str, make_wheels: Callable[[Path], None]) -> TestHost:
    """One throwaway GPU host named ``name``, its SGLang wheels made into ``wheels`` first."""
    make_wheels(wheels)
    return testbed.boot([name], setup=lambda _, root: stage_gpu_host(root, wheels, "a6000x2-bridge", SIM))[0]


def hub_host_data(name: str, model: str, port: int, hub_port: int, **extra: Any) -> dict[str, Any]:
    """The inventory data of that host: ``model`` served on ``port``, the Hub stand-in on
    ``hub_port`` as its HF_ENDPOINT, the token from E2E_HF_TOKEN, the fast gate."""
    return {name: {
        "sglang_model": model,
        "sglang_gpus": {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"},
        "sglang_intents": {"port": port, "mem_fraction_static": 0.88},
        "sglang_pip_find_links": WHEELS_ON_HOST, "sglang_pip_no_index": True,
        "sglang_env": {"HF_ENDPOINT": f"http://127.0.0.1:{hub_port}"},
        "sglang_secrets": {"hf_token": {"env": "E2E_HF_TOKEN"}},
        "sglang_gate": FAST_GATE, **extra}}


def served_model_on(port: int) -> str | None:
    """The model id the server on this machine's ``port`` serves (its /v1/models), None while
    nothing answers there."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as resp:
            return json.loads(resp.read())["data"][0]["id"]
    except OSError:
        return None
