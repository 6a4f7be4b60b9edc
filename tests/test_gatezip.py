"""The gate's zipapp (sglang_deploy/deploy/gatezip.py), as the deploy runs it on a host: with a Python
that has none of the controller's packages (isolated, no site-packages)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

from sglang_deploy.deploy import gatezip
from tests.test_check_cli import plain, sim_python  # noqa: F401 (fixtures: the simulated server)


def test_zipapp_is_self_contained_and_reproducible():
    data = gatezip.build()
    assert data.startswith(b"#!")
    assert gatezip.build.__wrapped__() == data  # same sources, same bytes
    with zipfile.ZipFile(__import__("io").BytesIO(data)) as zf:
        names = zf.namelist()
    assert "__main__.py" in names and "sglang_deploy/data/gate_prompts.yaml" in names
    for package in ("httpx", "httpcore", "h11", "anyio", "idna", "yaml", "jinja2", "markupsafe"):
        assert any(n.startswith(package + "/") for n in names), package
    assert not any(n.endswith((".so", ".pyc")) or "__pycache__" in n for n in names)


def test_zipapp_gates_a_server_with_an_isolated_python(plain, tmp_path):  # noqa: F811
    pyz = tmp_path / "gate.pyz"
    pyz.write_bytes(gatezip.build())
    key = tmp_path / "key"
    key.write_text("sekrit")
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-I", "-S", str(pyz), "check", "--url", plain.url, "--target", "150",
                           "--repeats", "2", "--max-tokens", "41", "--api-key-file", str(key), "--json", str(report)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(report.read_text())
    assert result["verdict"] == "pass" and abs(result["decode_tok_s"] - 200) / 200 < 0.02
    # nothing came from the controller's site-packages
    probe = subprocess.run([sys.executable, "-I", "-S", "-c", "import httpx"], capture_output=True)
    assert probe.returncode != 0
