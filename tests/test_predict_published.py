"""The speed model against every published measurement it can predict (benchmarks/predict_published.py
over tests/fixtures/perf/published.yaml): no row beyond 2x either way, the median within issue 30's
20%, and no published single stream below the deploy gate's floor (sglang_gate.prediction_floor of the
predicted band's low end): a real server at a published speed must pass the gate."""

from __future__ import annotations

import statistics

import yaml

from benchmarks.predict_published import PUBLISHED, row_prediction, within_2x
from sglang_deploy.gate.options import CheckOptions
from sglang_deploy.plan.profiles import load_knowledge


def predicted_rows() -> list[tuple[dict, float, tuple[float, float, float]]]:
    db = load_knowledge().gpus
    out = []
    for row in yaml.safe_load(PUBLISHED.read_text()):
        got = row_prediction(db, row)
        if isinstance(got, str):
            continue
        published = float(row["figure"])
        kind = (row.get("workload") or {}).get("kind")
        if kind == "single_stream_decode" and "ms" in str(row.get("unit") or "").lower():
            published = 1000.0 / published  # a time per output token
        out.append((row, published, got))
    return out


def test_every_predicted_row_is_within_2x_and_the_median_within_20_percent():
    rows = predicted_rows()
    assert len(rows) >= 20
    beyond = [(r["model"], r["gpu"], published, got[1]) for r, published, got in rows
              if not within_2x(published, got[1])]
    assert beyond == []
    assert statistics.median(abs(got[1] - published) / published for _, published, got in rows) <= 0.20


def test_no_published_single_stream_is_below_the_gates_floor():
    floor = CheckOptions.__dataclass_fields__["prediction_floor"].default
    single = [(published / got[0], r["model"], r["gpu"]) for r, published, got in predicted_rows()
              if (r.get("workload") or {}).get("kind") == "single_stream_decode"]
    assert len(single) >= 10
    assert min(single)[0] > floor, min(single)


def test_within_2x_is_both_ways():
    assert within_2x(100, 50) and within_2x(100, 200)
    assert not within_2x(100, 49) and not within_2x(100, 201)
