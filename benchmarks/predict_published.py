#!/usr/bin/env python3
"""The speed model (sglang_deploy/plan/perf.py) against published SGLang measurements.

    .venv/bin/python benchmarks/predict_published.py [--rows N] [--json FILE]

Reads tests/fixtures/perf/published.yaml (each row a published figure with its source) and, for
every row whose model's config.json is among the checkpoint fixtures (tests/fixtures/checkpoints,
real configs of real repositories) and whose GPU has datasheet figures (data/gpus.yaml), predicts
the row's workload: single-stream decode tok/s, aggregate output tok/s at the row's concurrency,
or TTFT. Prints one line per row (published, predicted band, error of the expected figure), then
the median and worst absolute error over the rows predicted, and the rows it could not predict
with why. The issue's goal: median absolute error at most 20%, every row within 2x.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglang_deploy.plan.hardware import GpuDatabase  # noqa: E402
from sglang_deploy.plan.profiles import load_knowledge  # noqa: E402
from sglang_deploy.plan.modelfacts import CheckpointError, facts_from_metadata  # noqa: E402
from sglang_deploy.plan.perf import GpuPerf, Layout, model_cost, predict  # noqa: E402

PUBLISHED = ROOT / "tests" / "fixtures" / "perf" / "published.yaml"
#: Real checkpoints' metadata in this repository: the test fixtures and the Hub stand-in's.
CHECKPOINTS = (ROOT / "tests" / "fixtures" / "checkpoints",
               ROOT / "sglang_deploy" / "simulator" / "hub" / "checkpoints")
#: A published row's model -> the checkpoint here with the same architecture and shapes.
SAME_SHAPES = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Llama-3.1-8B",  # the instruct tune of the same weights' shapes
    "meta-llama/Llama-3.1-70B": "meta-llama/Llama-3.3-70B-Instruct",  # 3.3 70B kept 3.1 70B's architecture
    "deepseek-ai/DeepSeek-R1-0528": "deepseek-ai/DeepSeek-R1",  # an update of R1's weights, same config
    "Qwen/Qwen3-235B-A22B-Instruct-2507": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",  # bf16 weights: counted as bf16
    "Qwen/Qwen3-8B-FP8": "Qwen/Qwen3-8B",  # Qwen's FP8 release of the same model: counted at the row's fp8
    # NVIDIA's ModelOpt NVFP4 quantization of R1-0528 (same architecture and shapes): counted at the row's nvfp4
    "nvidia/DeepSeek-R1-0528-FP4-v2": "deepseek-ai/DeepSeek-R1",
}
FP8 = {"fp8", "w8a8_fp8", "modelopt_fp8", "compressed-tensors"}
#: A row's GPU as its source names it -> the data/gpus.yaml entry taken for it (the form factor a
#: source leaves out: the SXM board, the one of the 8-GPU servers these benchmarks run on).
GPU_NAMES = {"H100": "H100 80GB HBM3", "A100": "A100-SXM4-80GB", "H200-SXM-141GB": "H200"}


def checkpoint_for(model: str) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """(config.json, model.safetensors.index.json or None) of ``model`` (or a checkpoint of the same shapes)."""
    name = SAME_SHAPES.get(model, model).replace("/", "--")
    for base in CHECKPOINTS:
        path = base / name / "config.json"
        if path.is_file():
            index = path.with_name("model.safetensors.index.json")
            same = model not in SAME_SHAPES or not SAME_SHAPES[model].endswith("-FP8")
            return json.loads(path.read_text()), (json.loads(index.read_text()) if index.is_file() and same else None)
    return None


def gpu_for(db: GpuDatabase, name: str) -> GpuPerf | None:
    model = db.lookup(name)
    if model is None or not model.hbm_gbps or not model.bf16_tflops:
        return None
    return GpuPerf(model.name, model.hbm_gbps, model.bf16_tflops, model.fp8_tflops, model.fp4_tflops,
                   memory_gib=model.memory_gib)


def row_prediction(db: GpuDatabase, row: dict[str, Any]) -> tuple[float, float, float] | str:
    """(low, expected, high) of the row's figure, or why it cannot be predicted here."""
    found = checkpoint_for(str(row.get("model")))
    if found is None:
        return "no config.json of it (or of a checkpoint of its shapes) in this repository"
    config, index = found
    gpu = gpu_for(db, GPU_NAMES.get(str(row.get("gpu")), str(row.get("gpu"))))
    if gpu is None:
        return f"GPU {row.get('gpu')!r}: no datasheet figures"
    try:
        facts = facts_from_metadata(str(row["model"]), None, "fixture", config, index=index)
    except CheckpointError as exc:
        return f"config: {exc}"
    layout = row.get("layout") or {}
    spec = row.get("speculative") or {}
    steps = int(spec.get("num_steps") or 3) if isinstance(spec, dict) and spec.get("algorithm") else 0
    name = str(row.get("gpu")).upper()
    # the 8-GPU boards of H100, H200 and B200 (and SXM ones) have NVSwitch; the others PCIe peer to peer
    link = "nvswitch" if "SXM" in name or name.startswith(("H100", "H200", "B200")) else "pcie_p2p"
    dp = int(layout.get("dp") or 1)
    dp_attention = bool(layout.get("dp_attention"))  # one server: its attention in dp ranks, not dp replicas
    lay = Layout(tp=int(layout.get("tp") or row.get("gpu_count") or 1), dp=1 if dp_attention else dp,
                 ep=int(layout.get("ep") or 1), link=link, spec_steps=steps, attn_dp=dp if dp_attention else 1)
    quant = str(row.get("quantization") or row.get("dtype") or "").lower()
    if quant.startswith("bf16") and facts.quantization is not None:
        facts = dataclasses.replace(facts, quantization=None, total_weight_bytes=None)  # the row's bf16 weights
    fp8 = quant.startswith("fp8") or (facts.quantization is not None and facts.quantization.method in FP8)
    work = row.get("workload") or {}
    kind = work.get("kind")
    cost = model_cost(facts)
    if quant.startswith("fp8") and facts.quantization is None:
        cost = dataclasses.replace(cost, bytes_per_param=1.0)
    elif quant in ("fp4", "nvfp4", "mxfp4") or "int4" in quant:
        cost = dataclasses.replace(cost, bytes_per_param=0.56)
    unit = str(row.get("unit") or "").lower()
    if kind == "single_stream_decode":
        prompt, out = int(work.get("input_len") or 128), int(work.get("output_len") or 256)
        p = predict(cost, gpu, lay, prompt_tokens=prompt, output_tokens=out, fp8_weights=fp8)
        b = p.decode_tok_s
        if "includes ttft" in unit:  # bench_serving's output throughput at concurrency 1: TTFT and the decode
            t = p.ttft_ms
            return tuple(out / (ms / 1000 + out / rate)  # type: ignore[return-value]
                         for ms, rate in ((t.high, b.low), (t.expected, b.expected), (t.low, b.high)))
        return b.low, b.expected, b.high
    if kind == "throughput":
        c = int(work.get("concurrency") or 0)
        if c <= 0:
            return "throughput row without a concurrency"
        if not work.get("input_len") or not work.get("output_len"):
            return "throughput row without its input and output lengths"
        p = predict(cost, gpu, lay, prompt_tokens=int(work["input_len"]), output_tokens=int(work["output_len"]),
                    concurrency=(c,), fp8_weights=fp8)
        b = p.output_tok_s[c]
        per_gpu = "per gpu" in unit
        n = int(row.get("gpu_count") or 1) if per_gpu else 1
        return b.low / n, b.expected / n, b.high / n
    if kind == "ttft":
        p = predict(cost, gpu, lay, prompt_tokens=int(work.get("input_len") or 1024), fp8_weights=fp8)
        return p.ttft_ms.low, p.ttft_ms.expected, p.ttft_ms.high
    return f"workload {kind!r}: not predicted"


def within_2x(published: float, predicted: float) -> bool:
    """Within 2x either way: half the published figure up to twice it."""
    return published / 2 <= predicted <= published * 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=0, help="only the first N rows (0: all)")
    ap.add_argument("--json", type=Path, help="write the table as JSON here")
    args = ap.parse_args(argv)
    rows = yaml.safe_load(PUBLISHED.read_text()) if PUBLISHED.is_file() else []
    if args.rows:
        rows = rows[:args.rows]
    db = load_knowledge().gpus
    errors: list[float] = []
    table, skipped = [], []
    print(f"{'model':44} {'GPU':22} {'layout':10} {'workload':22} {'published':>10} {'predicted (low..high)':>26} "
          f"{'error':>7}")
    for row in rows:
        got = row_prediction(db, row)
        layout = row.get("layout") or {}
        lay = f"TP{layout.get('tp') or row.get('gpu_count') or 1}"
        lay += f" DP{layout['dp']}" if (layout.get("dp") or 1) > 1 else ""
        work = row.get("workload") or {}
        what = str(work.get("kind")) + (f" c{work['concurrency']}" if work.get("concurrency") else "")
        if isinstance(got, str):
            skipped.append((row.get("model"), row.get("gpu"), got))
            continue
        published = float(row["figure"])
        unit = str(row.get("unit") or "").lower()
        if work.get("kind") == "single_stream_decode" and "ms" in unit:  # a time per output token
            published = 1000.0 / published
        err = (got[1] - published) / published
        errors.append(abs(err))
        table.append({"model": row.get("model"), "gpu": row.get("gpu"), "layout": lay, "workload": what,
                      "published": published, "predicted": got, "error": err, "source": row.get("source")})
        print(f"{str(row.get('model'))[:44]:44} {str(row.get('gpu'))[:22]:22} {lay:10} {what[:22]:22} "
              f"{published:10.1f} {got[1]:10.1f} ({got[0]:.0f}..{got[2]:.0f}){'':>3} {err * 100:+6.0f}%")
    for model, gpu, why in skipped:
        print(f"  not predicted: {model} on {gpu}: {why}")
    if errors:
        within = sum(1 for r in table if within_2x(r["published"], r["predicted"][1]))
        print(f"{len(errors)} rows predicted, {len(skipped)} not: median absolute error "
              f"{statistics.median(errors) * 100:.0f}%, worst {max(errors) * 100:.0f}%, "
              f"{within} of {len(errors)} within 2x")
    else:
        print(f"0 rows predicted, {len(skipped)} not")
    single = [r["published"] / r["predicted"][0] for r in table if r["workload"].startswith("single_stream")]
    if single:  # what the gate's prediction floor (sglang_gate.prediction_floor) must stay below
        print(f"lowest published / predicted low end over the {len(single)} single-stream rows: {min(single):.2f}")
    if args.json:
        args.json.write_text(json.dumps({"rows": table, "skipped": skipped}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
