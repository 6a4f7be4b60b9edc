"""The planner's chosen layout against aiconfigurator's ranking of the same rows.

For each row of tests/fixtures/perf/aiconfigurator.yaml (a model, a single-node GPU system, a
workload and its TTFT/TPOT limits, and the configurations aiconfigurator 0.12.0 ranked for
aggregated SGLang serving), the planner plans the model on those GPUs with the row's workload as
``sglang_objective`` (plan/layout_rank.py ranks the layouts) and the table prints: the layout it
chose, aiconfigurator's best layout and its tok/s/GPU, aiconfigurator's own figure for the
chosen layout's attention TP, and their ratio (1.00: the planner chose the tool's best).

    .venv/bin/python benchmarks/layout_vs_aiconfigurator.py [--json FILE]

Goal (issue 30): the chosen layout within 10% of aiconfigurator's best tok/s/GPU, or a reason
(tests/test_layout_vs_aiconfigurator.py holds the reasons).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglang_deploy.errors import PlanError  # noqa: E402
from sglang_deploy.plan.planner import plan_host  # noqa: E402
from sglang_deploy.plan.spec import build_spec  # noqa: E402
from sglang_deploy.simulator.facts_matrix import checkpoints  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "perf" / "aiconfigurator.yaml"
#: aiconfigurator's system names -> this project's GPU names (sglang_deploy/data/gpus.yaml).
SYSTEMS = {"h200_sxm": "H200", "h100_sxm": "H100 SXM", "b200_sxm": "B200", "a100_sxm": "A100-SXM4-80GB"}
GOAL = 0.90


@dataclass(frozen=True)
class Row:
    id: str
    model: str
    gpus: str
    workload: str
    chosen: str  # the planner's layout, or why there is none
    chosen_tp: int | None  # its attention TP (aiconfigurator's tp)
    best: str  # aiconfigurator's best layout
    best_tok_s: float
    chosen_tok_s: float | None  # aiconfigurator's figure for the chosen attention TP (None: not ranked)

    @property
    def ratio(self) -> float | None:
        return None if self.chosen_tok_s is None else self.chosen_tok_s / self.best_tok_s


def _matching(configs: list[dict[str, Any]], tp: int, attn_dp: int, ep: int) -> dict[str, Any] | None:
    """The tool's best configuration that is the planned layout: attention TP tp / attn_dp, attention
    DP attn_dp, MoE TP tp / ep and EP ep (a dense model's lines give tp alone), one worker per replica."""
    want = {"tp": tp // attn_dp, "dp": attn_dp, "etp": tp // ep, "ep": ep}
    for c in configs:  # ranked best first
        if c.get("gpus_per_replica") != c.get("gpus_per_worker") or c.get("pp", 1) != 1:
            continue
        if all(c[k] == v for k, v in want.items() if k in c):
            return c
    return None


def compare(fixture: Path = FIXTURE) -> list[Row]:
    doc = yaml.safe_load(fixture.read_text())
    facts_of = checkpoints()  # the recorded checkpoints' facts (published config.json and index)
    rows = []
    for r in doc["rows"]:
        configs = r["configurations"]
        best = configs[0]
        gpus = f"{r['gpus']}x {SYSTEMS.get(r['system'], r['system'])}"
        work = f"{r['isl']}/{r['osl']} TTFT {r['ttft_ms']} TPOT {r['tpot_ms']}"
        base = dict(id=str(r["id"]), model=r["model"], gpus=gpus, workload=work, best=str(best["parallel"])
                    + f" x{best.get('replicas', 1)}", best_tok_s=float(best["tok_s_per_gpu"]))
        facts = facts_of.get(r["model"])
        if facts is None or r["system"] not in SYSTEMS:
            rows.append(Row(**base, chosen="no recorded facts" if facts is None else "GPU not known",
                            chosen_tp=None, chosen_tok_s=None))
            continue
        data = {"sglang_model": r["model"], "sglang_gpus": {"model": SYSTEMS[r["system"]], "count": r["gpus"]},
                "sglang_objective": {"serve": "throughput", "input_tokens": r["isl"], "output_tokens": r["osl"],
                                     "tpot_ms": r["tpot_ms"], "ttft_ms": r["ttft_ms"]}}
        try:
            p = plan_host(build_spec("aic-" + str(r["id"]), {}, data), sglang_version="0.5.23", facts=facts)
        except PlanError as exc:
            rows.append(Row(**base, chosen=f"refused: {exc}", chosen_tp=None, chosen_tok_s=None))
            continue
        tp, dp = p.intents["tp_size"].value, p.intents["dp_size"].value
        attn = (p.intents["attn_dp_size"].value if "attn_dp_size" in p.intents else None) or 1
        ep = (p.intents["ep_size"].value if "ep_size" in p.intents else None) or 1
        chosen = (f"TP {tp} x DP {dp}" + (f", DP attention {attn}" if attn > 1 else "")
                  + (f", EP {ep}" if ep > 1 else ""))
        hit = _matching(configs, tp, attn, ep)
        rows.append(Row(**base, chosen=chosen, chosen_tp=tp // attn,
                        chosen_tok_s=float(hit["tok_s_per_gpu"]) if hit else None))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    rows = compare()
    print(f"{'row':4} {'model':36} {'GPUs':16} {'workload':28} {'planned':44} {'aiconfigurator best':22} "
          f"{'best':>8} {'planned':>8} {'ratio':>6}")
    for r in rows:
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        planned = f"{r.chosen_tok_s:.0f}" if r.chosen_tok_s is not None else "-"
        print(f"{r.id:4} {r.model[:36]:36} {r.gpus:16} {r.workload:28} {r.chosen[:44]:44} {r.best:22} "
              f"{r.best_tok_s:8.0f} {planned:>8} {ratio:>6}")
    ratios = [r.ratio for r in rows if r.ratio is not None]
    if ratios:
        met = sum(1 for x in ratios if x >= GOAL)
        print(f"\n{len(ratios)} rows compared: median ratio {statistics.median(ratios):.2f}, worst {min(ratios):.2f}; "
              f"{met} within {1 - GOAL:.0%} of aiconfigurator's best")
    if args.json:
        args.json.write_text(json.dumps([{**asdict(r), "ratio": r.ratio} for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
