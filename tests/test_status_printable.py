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
