"""A deploy with a distinct canary in every secret-capable field, on a throwaway host: no
canary anywhere the deploy writes or shows but the root-only env file.

Scanned: pyinfra's output (``-vvv --diff``: every command it runs and its output), the
host's history.jsonl and the result records (the run context's results file), the argv of every
process on the host while the server runs, the unit, nccl.conf, every staged revision file
but the env file, and the whole journal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sglang_deploy.lifecycle.rollback_policy import PASSED
from sglang_deploy.runcontext import RunContext
from sglang_deploy.runcontext import write as write_run
from sglang_deploy.simulator.testbed.gpu import WHEELS_ON_HOST
from tests.conftest import ROOT
from tests.e2e.test_deploy import boot_a6000_hosts, wait_healthy

NAME = "e2e-secrets"
PORT = 31861  # distinct from every other e2e file: the session's hosts share this machine's network
CANARY = {name: f"CANARY{i}x{name.replace('_', '')}" for i, name in enumerate((
    "hf_env", "api_file", "hub_token", "openai_key", "db_password", "upstream_url",
    "index_url", "extra_index_url"))}
IN_ENV_FILE = {"hf_env", "api_file", "hub_token", "openai_key", "db_password", "upstream_url"}


def leaked(text: str) -> list[str]:
    return [name for name, value in CANARY.items() if value in text]


def test_no_secret_leaves_the_env_file(testbed, tmp_path_factory, tmp_path):
    host = boot_a6000_hosts(testbed, tmp_path_factory, [NAME])[NAME]
    key_file = tmp_path / "api-key"
    key_file.write_text(CANARY["api_file"] + "\n")
    data = {
        "sglang_model": "Qwen/Qwen3.6-27B",
        "sglang_model_source": "server",  # no Hub here
        "sglang_gpus": {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"},
        "sglang_intents": {"port": PORT, "mem_fraction_static": 0.88},
        "sglang_secrets": {"hf_token": {"env": "E2E_CANARY_HF"}, "api_key": {"file": str(key_file)}},
        "sglang_env": {
            "HUGGING_FACE_HUB_TOKEN": CANARY["hub_token"],
            "OPENAI_API_KEY": CANARY["openai_key"],
            "DB_PASSWORD": CANARY["db_password"],
            "UPSTREAM_URL": f"https://svc:{CANARY['upstream_url']}@upstream.example/v1",
        },
        # pip installs from the host's wheel directory; the index URLs still travel (unused).
        "sglang_pip_find_links": WHEELS_ON_HOST,
        "sglang_pip_no_index": True,
        "sglang_pip_index_url": f"https://__token__:{CANARY['index_url']}@pypi.example/simple",
        "sglang_pip_extra_index_urls": [f"https://{CANARY['extra_index_url']}@mirror.example/simple"],
    }
    inventory = testbed.write_inventory(tmp_path / "inventory.py", [host], {NAME: data}, group="gpu_fleet")
    results = tmp_path / "results.jsonl"
    env = {**os.environ, "E2E_CANARY_HF": CANARY["hf_env"],
           **write_run(RunContext(results_file=str(results)), str(tmp_path / "run.json"))}
    run = subprocess.run([sys.executable, "-m", "pyinfra", "-y", "-vvv", "--diff", str(inventory), "deploy.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "PIP_CONFIG_FILE=" in output, "the pip URLs with credentials went through the config file"
    assert leaked(output) == []
    wait_healthy(PORT)

    root = host.root
    env_file = (root / "etc/sglang/sglang.env").read_text()
    assert set(leaked(env_file)) == IN_ENV_FILE, "every secret reaches the server, through the env file"
    cmdlines = host.ssh("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done").stdout
    assert "launch_server" in cmdlines and leaked(cmdlines) == []
    state = root / "var/lib/sglang-deploy/sglang"
    scanned = {"unit": root / "etc/systemd/system/sglang.service", "nccl.conf": root / "etc/nccl.conf",
               "results": results, "history": state / "history.jsonl"}
    scanned.update({str(p.relative_to(state)): p for p in (state / "revisions").rglob("*")
                    if p.is_file() and p.name != "sglang.env"})
    assert results.is_file() and scanned["history"].is_file() and len(scanned) > 6
    for what, path in scanned.items():
        assert leaked(path.read_text(errors="replace")) == [], what
    assert [json.loads(line)["result"] for line in results.read_text().splitlines()] == [PASSED]
    journal = host.ssh("journalctl --no-pager -o cat").stdout
    assert "SIMULATED SGLang" in journal and leaked(journal) == []
    assert not (root / "run/sglang-deploy-pip").exists(), "the pip config with credentials is removed"
