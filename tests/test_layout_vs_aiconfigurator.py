"""The planner's layout, ranked by predicted speed, against aiconfigurator 0.12.0's ranking of the
same model, GPUs, workload and limits (tests/fixtures/perf/aiconfigurator.yaml, printed by
benchmarks/layout_vs_aiconfigurator.py): aiconfigurator's own tok/s/GPU for the planned layout is
within 10% of its best, or the row's reason says why the planner does not plan the tool's best."""

from __future__ import annotations

from benchmarks.layout_vs_aiconfigurator import GOAL, compare

#: Rows whose planned layout is more than 10% below aiconfigurator's best, and why.
REASONS = {
    "06": "Llama-3.1-8B on 4x H100 under TPOT 20 ms: the roofline credits TP 4's larger batch within the "
          "limit (its all-reduces are latency, not bandwidth, at that size) where the tool ranks 2 x TP 2 "
          "first; a known error of the model, left visible",
    "11": "the tool's best runs attention data parallelism inside a non-MLA MoE worker (tp1 dp4 etp4); the "
          "planner plans DP attention only for MLA models, as SGLang's own pages do",
    "12": "the tool's best runs attention data parallelism with expert parallelism (dp4 etp2 ep2) for a non-MLA "
          "MoE; the planner plans neither for it",
    "13": "the tool's best is EP 8 (tp1 dp8 ep8), which needs SGLang's DeepEP all-to-all (--moe-a2a-backend "
          "deepep); the planner follows SGLang's DeepSeek page for one node, TP 8 with DP attention and no EP",
}


def test_the_planned_layout_is_within_ten_percent_of_aiconfigurators_best_or_says_why():
    rows = compare()
    compared = [r for r in rows if r.ratio is not None]
    assert len(compared) >= 8
    for r in rows:
        if r.id in REASONS:
            # a reason that no longer applies is stale: the row must really be short of the goal
            assert r.ratio is None or r.ratio < GOAL, (r.id, r.ratio, "drop its reason")
        else:
            assert r.ratio is not None and r.ratio >= GOAL, r
    issue_row = next(r for r in rows if r.id == "01")  # Qwen3-32B, 8x H200, ISL 2000 / OSL 500, TTFT 2 s, TPOT 50 ms
    assert issue_row.chosen == "TP 2 x DP 4" and issue_row.ratio == 1.0
