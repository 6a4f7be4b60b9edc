"""tests/fixtures/perf/aiconfigurator.yaml, aiconfigurator 0.12's ranked layouts, is well-formed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

PATH = Path(__file__).parent / "fixtures" / "perf" / "aiconfigurator.yaml"
DOC: dict[str, Any] = yaml.safe_load(PATH.read_text(encoding="utf-8"))
ROWS: list[dict[str, Any]] = DOC["rows"]

ROW_FIELDS = ("id", "model", "aiconfigurator_model", "system", "gpus", "backend", "backend_version",
              "isl", "osl", "ttft_ms", "tpot_ms", "command", "best", "configurations", "raw")
CONFIG_FIELDS = ("rank", "tp", "pp", "parallel", "replicas", "gpus_per_replica", "gpus_per_worker",
                 "total_gpus_used", "tok_s_per_gpu", "tok_s_per_user", "req_s", "ttft_ms",
                 "request_latency_ms", "concurrency", "batch_size")
POSITIVE = ("tp", "pp", "replicas", "gpus_per_replica", "gpus_per_worker", "total_gpus_used", "tok_s_per_gpu",
            "tok_s_per_user", "req_s", "ttft_ms", "request_latency_ms", "concurrency", "batch_size")


def test_header_fields():
    assert str(DOC["aiconfigurator_version"]).startswith("0.12.")
    assert DOC["date"]
    assert len(ROWS) >= 10
    assert len({r["id"] for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_row_is_well_formed(row):
    assert not [f for f in ROW_FIELDS if f not in row]
    assert row["backend"] == "sglang"
    for f in ("gpus", "isl", "osl", "ttft_ms", "tpot_ms"):
        assert row[f] > 0, f
    cmd = row["command"]
    assert cmd.startswith("aiconfigurator cli default ")
    for flag, value in (("--model", row["aiconfigurator_model"]), ("--system", row["system"]),
                        ("--total-gpus", row["gpus"]), ("--isl", row["isl"]), ("--osl", row["osl"]),
                        ("--ttft", row["ttft_ms"]), ("--tpot", row["tpot_ms"])):
        assert f" {flag} {value} " in f"{cmd} ", flag
    assert all(v > 0 for v in row["best"].values())
    configs = row["configurations"]
    assert configs
    assert [c["rank"] for c in configs] == list(range(1, len(configs) + 1))
    for c in configs:
        assert not [f for f in CONFIG_FIELDS if f not in c], c["rank"]
        assert all(c[f] > 0 for f in POSITIVE), c["rank"]
        assert c["total_gpus_used"] <= row["gpus"]
        assert c["parallel"] in row["raw"]
    assert row["best"]["tpot_ms"] <= row["tpot_ms"]
    speeds = [c["tok_s_per_gpu"] for c in configs]
    assert speeds == sorted(speeds, reverse=True)
    assert configs[0]["tok_s_per_gpu"] == row["best"]["tok_s_per_gpu"]
    assert configs[0]["ttft_ms"] == row["best"]["ttft_ms"]
    assert all(c["ttft_ms"] <= row["ttft_ms"] for c in configs)


def best_per_tp(row: dict[str, Any]) -> dict[int, dict[str, Any]]:
    best: dict[int, dict[str, Any]] = {}
    for c in row["configurations"]:
        best.setdefault(c["tp"], c)
    return best


def test_issue_row_qwen3_32b_on_8x_h200():
    rows = [r for r in ROWS if r["model"] == "Qwen/Qwen3-32B" and r["system"] == "h200_sxm" and r["gpus"] == 8
            and (r["isl"], r["osl"], r["ttft_ms"], r["tpot_ms"]) == (2000, 500, 2000, 50)]
    assert len(rows) == 1
    assert rows[0] is ROWS[0]
    per_tp = best_per_tp(rows[0])
    best = rows[0]["configurations"][0]
    assert (best["tp"], best["pp"], best["replicas"], best["tok_s_per_gpu"]) == (2, 1, 4, 1357.89)
    assert (per_tp[1]["replicas"], per_tp[1]["tok_s_per_gpu"]) == (8, 1198.12)
