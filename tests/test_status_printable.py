"""What a host or a gateway says reaches the status table printable and encodable: a lone
surrogate (JSON's \\ud800 decodes to one) in a worker URL or a history line made the table's
UTF-8 output raise UnicodeEncodeError."""

from __future__ import annotations

import io
import json

from sglang_deploy.commands.status_table import render_table, rows_json
from sglang_deploy.status.row import unreachable_row
from sglang_deploy.untrusted import printable


def test_printable_drops_lone_surrogates_and_keeps_real_text():
    assert printable("http://h\ud800:1/\udfff") == "http://h:1/"
    assert printable("Qwen3 \u6a21\u578b \U0001F680") == "Qwen3 \u6a21\u578b \U0001F680"


def test_the_table_and_json_encode_whatever_a_host_said():
    row = unreachable_row("gpu-1", "worker http://10.0.0.5\ud800:30000 listed \x1b[2J")
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    out.write(render_table([row]))
    out.flush()
    doc = json.loads(rows_json([row]))
    assert "\ud800" not in doc[0]["error"] and "\x1b" not in doc[0]["error"]


class _HostSaysTheToken:
    """Stands in for status's SSH side (sglang_deploy/deploy/status.py StatusReader): one host,
    reachable, deployed and running, whose history's last check line and last gate line quote the
    Hub token the controller reads for it, split by a terminal control and whole."""

    def __init__(self, inventory: str, parallel: int = 1):
        pass

    def probe(self, names, cache_roots=None):
        from sglang_deploy.deploy.status import HostRead
        from tests.conftest import load_probe

        return {n: HostRead(n, probe=load_probe("a6000x2-bridge")) for n in names}

    def read(self, reads, layouts, diff, replicas=None):
        from sglang_deploy import status
        from tests.test_status import fact_lines, gate_line

        split = TOKEN[:6] + "\x1b[0m" + TOKEN[6:]
        watch = json.dumps({"kind": "watch", "verdict": "fail", "time": "2026-01-01T00:00:00+00:00",
                            "revision": "fedcba9876543210", "why": f"drift: env; HF_TOKEN={TOKEN} {split}",
                            "drift": ["env"], "gpu_problems": [f"gpu 0: {TOKEN}"]})
        gate = gate_line("fail", summary=f"refused: {TOKEN}")
        for n in layouts:
            reads[n].observed = status.parse_observed(fact_lines(history=[gate, watch]))

    def verify_weights(self, reads, layouts):
        return {}

    def read_gateway_hosts(self, gateways):
        return {}

    def close(self):
        pass


TOKEN = "hf_printable_TOKEN_value_77"


def test_a_secret_the_controller_read_is_masked_wherever_a_host_quotes_it(tmp_path, monkeypatch):
    """A host whose history quotes the Hub token (a check's why, its GPU problems, a gate's summary):
    status masks it in the table and in --json, also where a terminal control split it."""
    from sglang_deploy.commands import status as command
    from tests.conftest import ROOT

    monkeypatch.setattr(command, "StatusReader", _HostSaysTheToken)
    monkeypatch.setenv("PRINTABLE_TEST_HF_TOKEN", TOKEN)
    model = ROOT / "sglang_deploy" / "simulator" / "hub" / "checkpoints" / "Qwen--Qwen3-0.6B"
    host = {"sglang_model": str(model), "sglang_secrets": {"hf_token": {"env": "PRINTABLE_TEST_HF_TOKEN"}},
            "sglang_gpus": {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"}}
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = {[('gpu-1', host)]!r}\n")
    for as_json in (False, True):
        out = io.StringIO()
        command.run_status(command.StatusOptions(str(inventory), json=as_json), out, io.StringIO())
        text = out.getvalue()
        assert "gpu-1" in text and "***" in text, text
        assert TOKEN not in text and TOKEN[6:] not in text, text
