"""`status` shows the last gate's prefill and concurrency level beside its decode, each against the
plan's prediction, read from the history line the deploy's gate wrote (sglang_deploy/gate/outcomes.py
history_entry) as it reads every history value: bounded, or not shown."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sglang_deploy import status
from sglang_deploy.commands import status_table
from sglang_deploy.gate import outcomes

KEY = {"hardware": "2x RTX A6000", "model": "Qwen/Qwen3.6-27B", "sglang_version": "0.5.23"}
REPORT = {"verdict": "pass", "decode_tok_s": 52.0, "key": KEY, "predicted_decode_tok_s": {"expected": 55.0},
          "prefill_tok_s": 2400.0, "prefill_prompt_tokens": 2048, "predicted_prefill_tok_s": {"expected": 3000.0},
          "aggregate_tok_s": 310.0, "concurrency": 8, "predicted_output_tok_s": {"expected": 400.0}}


def gate_line(report: dict) -> str:
    entry = outcomes.history_entry("gate", "a" * 16, outcomes.Outcome(outcomes.PASS, "passed"), report,
                                   {"model": KEY["model"], "hardware": KEY["hardware"]}, "0.5.23")
    return json.dumps(entry)


def test_the_last_gate_carries_prefill_and_the_level_each_against_its_prediction():
    gate, refused = status.last_gate([gate_line(REPORT)])
    assert refused == 0 and gate is not None
    assert (gate.prefill_tok_s, gate.aggregate_tok_s, gate.concurrency) == (2400.0, 310.0, 8)
    assert gate.prefill_over_predicted == 0.8 and gate.aggregate_over_predicted == 0.775
    doc = gate.as_dict()
    assert doc["prefill_over_predicted"] == 0.8 and doc["predicted_output_tok_s"] == 400.0
    row = dataclasses.replace(status.unreachable_row("gpu-1", "x"), reachable=True, state=status.OK, problems=[],
                              error=None, last_gate=gate)
    first = status_table.render_table([row]).splitlines()[1]
    assert ("pass 52.0 tok/s (94% of predicted 55.0), prefill 2400.0 (80% of predicted), "
            "8 streams 310.0 (78% of predicted)") in first
    assert json.loads(status_table.rows_json([row]))[0]["last_gate"]["aggregate_over_predicted"] == 0.775


def test_a_gate_line_without_them_reads_as_before():
    old = {k: v for k, v in REPORT.items() if not k.startswith(("prefill", "aggregate", "concurrency",
                                                                "predicted_prefill", "predicted_output"))}
    gate, _ = status.last_gate([gate_line(old)])
    assert gate is not None and gate.prefill_tok_s is None and gate.aggregate_tok_s is None
    assert gate.prefill_over_predicted is None and gate.aggregate_over_predicted is None
    row = dataclasses.replace(status.unreachable_row("gpu-1", "x"), reachable=True, state=status.OK, problems=[],
                              error=None, last_gate=gate)
    assert "prefill" not in status_table.render_table([row]) and "streams" not in status_table.render_table([row])


@pytest.mark.parametrize("value", [True, -1.0, "310", 10 ** 400, float("nan"), [1]])
def test_a_hostile_figure_is_not_shown(value):
    doc = json.loads(gate_line(REPORT))
    doc.update(prefill_tok_s=value, aggregate_tok_s=value, concurrency=value, predicted_prefill_tok_s=value)
    line = json.dumps(doc) if value == value else json.dumps(doc).replace("NaN", "1e999")
    gate, refused = status.last_gate([line])
    if gate is None:  # a line JSON refuses (1e999) is counted, not shown
        assert refused == 1
        return
    assert gate.prefill_tok_s is None and gate.aggregate_tok_s is None and gate.concurrency is None
    assert gate.predicted_prefill_tok_s is None and gate.prefill_over_predicted is None


def test_the_last_gate_shows_the_start_before_it_and_its_slowest_phase():
    from sglang_deploy import downtime

    doc = json.loads(gate_line(REPORT))
    doc["downtime"] = downtime.measure({"last_answer": 100.0, "stopping": 100.1, "stopped": 100.6, "gpus_free": 100.8,
                                        "started": 101.0, "loaded": 140.0, "kv_ready": 142.0,
                                        "graphs_captured": 400.0, "fired_up": 405.0, "ready": 406.0})
    gate, _ = status.last_gate([json.dumps(doc)])
    assert gate is not None and (gate.start_s, gate.serving_gap_s) == (305.0, 306.0)
    assert gate.slowest_phase == ("cuda_graphs", 258.0)
    row = dataclasses.replace(status.unreachable_row("gpu-1", "x"), reachable=True, state=status.OK, problems=[],
                              error=None, last_gate=gate)
    assert ", start 305 s (CUDA graphs 258 s)" in status_table.render_table([row])
    assert json.loads(status_table.rows_json([row]))[0]["last_gate"]["phases"]["cuda_graphs"] == 258.0
    # what a host wrote is data: unknown phases, negative, boolean or text values are left out
    doc["downtime"] = {"start_s": "305", "serving_gap_s": -1, "phases": {"load": True, "x\x1b[2J": 1.0,
                                                                        "warmup": 5.0, "ready": None}}
    gate, _ = status.last_gate([json.dumps(doc)])
    assert gate is not None and gate.start_s is None and gate.serving_gap_s is None
    assert dict(gate.phases) == {"warmup": 5.0}
