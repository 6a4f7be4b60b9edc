#!/usr/bin/env python3
"""aiconfigurator against the roofline (sglang_deploy/plan/perf.py), both against published SGLang
measurements (issue 30 item 2: does the optional predictor predict them better?).

    PYTHON benchmarks/predict_aiconfigurator.py [--rows N] [--timeout S] [--json FILE]

PYTHON: one where aiconfigurator 0.12 is importable (`pip install -e '.[predict]'`, x86-64 only);
where it is not, the script says so and exits 0. For every row of tests/fixtures/perf/published.yaml
that both can be asked about, prints published / roofline (benchmarks/predict_published.py's
prediction of the row) / aiconfigurator (sglang_deploy/commands/predict_aic.py for the row's
layout, GPU, SGLang version and workload), then each one's median and worst absolute error over the
rows both predicted, and why the other rows were not. aiconfigurator is asked without speculative
decoding (it needs the accepted tokens per step as input), so rows that ran speculative decoding are
left out of its column; it knows the models whose config it bundles (AIC_MODELS maps a row's model
to the bundled one of the same architecture and shapes) and the GPU systems it has data for.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from predict_published import GPU_NAMES, PUBLISHED, checkpoint_for, row_prediction  # noqa: E402

from sglang_deploy.commands import predict_aic  # noqa: E402
from sglang_deploy.plan.modelfacts import CheckpointError, facts_from_metadata  # noqa: E402
from sglang_deploy.plan.profiles import load_knowledge  # noqa: E402

#: A row's model -> the config aiconfigurator 0.12.0 bundles for the same weights' shapes
#: (aiconfigurator_core/model_configs); a model missing here is asked for by its own name.
AIC_MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",  # the instruct tune of the same shapes
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "deepseek-ai/DeepSeek-R1-0528": "deepseek-ai/DeepSeek-R1",  # an update of R1's weights, same config
    "Qwen/Qwen3-235B-A22B-Instruct-2507": "Qwen/Qwen3-235B-A22B",  # the 2507 update, same shapes
}


def aic_request(db: Any, row: dict[str, Any]) -> tuple[predict_aic.AicRequest, str] | str:
    """(the request for the row, which figure of the answer is the row's), or why it cannot be asked."""
    spec = row.get("speculative") or {}
    if isinstance(spec, dict) and spec.get("algorithm"):
        return "speculative decoding: aiconfigurator needs its accepted tokens per step, not given by the row"
    gpu = db.lookup(GPU_NAMES.get(str(row.get("gpu")), str(row.get("gpu"))))
    if gpu is None or gpu.name not in predict_aic.SYSTEMS:
        return f"GPU {row.get('gpu')!r}: no aiconfigurator system for it"
    found = checkpoint_for(str(row.get("model")))
    if found is None:
        return "no config.json of it here to tell dense from MoE"
    try:
        facts = facts_from_metadata(str(row["model"]), None, "fixture", found[0], index=found[1])
    except CheckpointError as exc:
        return f"config: {exc}"
    layout = row.get("layout") or {}
    count = int(row.get("gpu_count") or 1)
    tp = int(layout.get("tp") or count)
    dp = int(layout.get("dp") or 1)
    attn_dp = dp if layout.get("dp_attention") else 1
    replicas = 1 if layout.get("dp_attention") else dp
    if tp * replicas > 8:
        return f"{tp * replicas} GPUs: more than one node"
    work = row.get("workload") or {}
    kind = work.get("kind")
    base = dict(model=AIC_MODELS.get(str(row["model"]), str(row["model"])), gpu_model=gpu.name,
                gpu_count=tp * replicas, tp=tp, dp=replicas, attn_dp=attn_dp, ep=int(layout.get("ep") or 1),
                moe=facts.moe is not None, sglang_version=str(row.get("sglang_version") or ""))
    if kind == "single_stream_decode":
        isl, osl = int(work.get("input_len") or 128), int(work.get("output_len") or 256)
        return predict_aic.AicRequest(**base, isl=isl, osl=osl, levels=(1,)), "decode"
    if kind == "throughput":
        c = int(work.get("concurrency") or 0)
        if c <= 0 or not work.get("input_len") or not work.get("output_len"):
            return "throughput row without its concurrency, input and output lengths"
        return predict_aic.AicRequest(**base, isl=int(work["input_len"]), osl=int(work["output_len"]),
                                      levels=(c,)), "output"
    if kind == "ttft":
        return predict_aic.AicRequest(**base, isl=int(work.get("input_len") or 1024), osl=2, levels=(1,)), "ttft"
    return f"workload {kind!r}: not predicted"


def figure(row: dict[str, Any], got: predict_aic.AicPrediction, what: str) -> float:
    """The row's figure from aiconfigurator's answer, as predict_published.py computes the roofline's."""
    lv = got.levels[0]
    unit = str(row.get("unit") or "").lower()
    if what == "decode":
        if "includes ttft" in unit:  # bench_serving's output throughput at concurrency 1
            out = int((row.get("workload") or {}).get("output_len") or 256)
            return out / (lv.ttft_ms / 1000 + out / lv.tok_s_per_user)
        return lv.tok_s_per_user
    if what == "output":
        return lv.output_tok_s / (int(row.get("gpu_count") or 1) if "per gpu" in unit else 1)
    return lv.ttft_ms


def _summary(name: str, errors: list[float]) -> str:
    if not errors:
        return f"{name}: no rows"
    return (f"{name}: median absolute error {statistics.median(errors) * 100:.0f}%, worst {max(errors) * 100:.0f}%, "
            f"{sum(1 for e in errors if e <= 1.0)} of {len(errors)} within 2x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=0, help="only the first N rows (0: all)")
    ap.add_argument("--timeout", type=float, default=predict_aic.TIMEOUT_S, help="seconds per row for aiconfigurator")
    ap.add_argument("--json", type=Path, help="write the table as JSON here")
    args = ap.parse_args(argv)
    try:
        api = predict_aic.load_api()
    except predict_aic.AicMissing as exc:
        print(f"not measured: {exc}")
        return 0
    rows = yaml.safe_load(PUBLISHED.read_text()) if PUBLISHED.is_file() else []
    if args.rows:
        rows = rows[:args.rows]
    db = load_knowledge().gpus
    print(f"aiconfigurator {api.version}")
    print(f"{'model':40} {'GPUs':20} {'workload':22} {'SGLang data':12} {'published':>10} {'roofline':>10} "
          f"{'aiconfig.':>10} {'err roof':>8} {'err aic':>8}")
    table, skipped = [], []
    roof_all: list[float] = []
    for row in rows:
        published = float(row["figure"])
        work = row.get("workload") or {}
        if work.get("kind") == "single_stream_decode" and "ms" in str(row.get("unit") or "").lower():
            published = 1000.0 / published  # a time per output token
        roof = row_prediction(db, row)
        if not isinstance(roof, str):
            roof_all.append(abs(roof[1] - published) / published)
        asked = aic_request(db, row)
        got: predict_aic.AicPrediction | str
        if isinstance(asked, str):
            got = asked
        else:
            try:
                got = predict_aic.predict(asked[0], api=api, timeout_s=args.timeout)
            except predict_aic.AicError as exc:
                got = str(exc)
        where = f"{row.get('gpu_count')}x {row.get('gpu')}"
        if isinstance(roof, str) or isinstance(got, str):
            skipped.append((row.get("model"), where, "roofline: " + roof if isinstance(roof, str) else
                            "aiconfigurator: " + str(got)))
            continue
        assert not isinstance(asked, str)
        aic = figure(row, got, asked[1])
        what = str(work.get("kind")) + (f" c{work['concurrency']}" if work.get("concurrency") else "")
        e_roof, e_aic = (roof[1] - published) / published, (aic - published) / published
        table.append({"model": row.get("model"), "gpus": where, "workload": what, "published": published,
                      "roofline": roof[1], "aiconfigurator": aic, "sglang_data_version": got.sglang_data_version,
                      "version_reason": got.version_reason, "error_roofline": e_roof, "error_aiconfigurator": e_aic})
        print(f"{str(row.get('model'))[:40]:40} {where[:20]:20} {what[:22]:22} {got.sglang_data_version:12} "
              f"{published:10.1f} {roof[1]:10.1f} {aic:10.1f} {e_roof * 100:+7.0f}% {e_aic * 100:+7.0f}%")
    for model, where, why in skipped:
        print(f"  not compared: {model} on {where}: {why}")
    print(f"\n{len(table)} rows both predicted, {len(skipped)} not:")
    print("  " + _summary("roofline      ", [abs(r["error_roofline"]) for r in table]))
    print("  " + _summary("aiconfigurator", [abs(r["error_aiconfigurator"]) for r in table]))
    print("  " + _summary(f"roofline over all {len(roof_all)} rows it predicts", roof_all))
    if args.json:
        args.json.write_text(json.dumps({"rows": table, "skipped": skipped}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
