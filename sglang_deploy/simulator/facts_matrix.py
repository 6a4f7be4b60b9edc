"""SIMULATOR ONLY: the facts matrix: every recorded checkpoint (``hub/checkpoints``) x the 13
hardware layouts of ``plan_matrix.HARDWARE`` x every supported SGLang version, planned with the
checkpoint's facts. Shared by the matrix tests (tests/test_facts_matrix.py,
tests/recorded_facts.py), scripts/check_plans_against_real_parsers.py and
benchmarks/plan_facts_table.py and plan_time.py. ``python -m sglang_deploy.simulator.facts_matrix [VERSION]``
prints the checkpoint x layout table: TP x DP, GPUs serving / present, context."""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path
from typing import Iterator

from sglang_deploy.plan.catalog import SUPPORTED_VERSIONS
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.modelfacts import ModelFacts, facts_from_metadata
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.simulator.hub import derive, tensors
from sglang_deploy.simulator.plan_matrix import HARDWARE


CHECKPOINTS = Path(__file__).resolve().parent / "hub" / "checkpoints"


@functools.lru_cache(maxsize=1)
def _recorded() -> dict[str, ModelFacts]:
    out = {}
    for d in sorted(p for p in CHECKPOINTS.iterdir() if (p / "config.json").is_file()):
        model = d.name.replace("--", "/", 1)
        config = json.loads((d / "config.json").read_text())
        index_file = d / "model.safetensors.index.json"
        index = json.loads(index_file.read_text()) if index_file.is_file() else None
        # A single-file checkpoint (no index on the Hub): the size its safetensors header gives.
        headers = None if index else [tensors.total_size(derive.checkpoint_tensors(d.name))]
        out[model] = facts_from_metadata(model, None, f"recorded checkpoint {d.name}", config, index,
                                         safetensors_header_sizes=headers)
    return out


def checkpoints() -> dict[str, ModelFacts]:
    """Facts per recorded checkpoint (sglang_deploy/simulator/hub/checkpoints/, read by the
    real parser), keyed by the id the server loads."""
    return dict(_recorded())


def cases() -> list[tuple[str, str, str]]:
    return list(itertools.product(sorted(checkpoints()), sorted(HARDWARE), SUPPORTED_VERSIONS))


def plan_case(model: str, hardware: str, version: str, facts: ModelFacts | None = None) -> Plan | PlanError:
    facts = facts or checkpoints()[model]
    data = {"sglang_model": model, "sglang_gpus": HARDWARE[hardware],
            "sglang_secrets": {"api_key": {"env": "SGLANG_API_KEY"}}}
    try:
        return plan_host(build_spec("m", {}, data), sglang_version=version, facts=facts)
    except PlanError as exc:
        return exc


def plans(version: str | None = None) -> Iterator[tuple[tuple[str, str, str], Plan | PlanError]]:
    facts = checkpoints()
    for case in cases():
        if version is None or case[2] == version:
            yield case, plan_case(*case, facts=facts[case[0]])


def layout_table(version: str = "0.5.23") -> tuple[list[list[str]], int, int]:
    """Checkpoint x layout: TP x DP (+ DP attention), GPUs serving / present, context, or the
    refusal; and the GPUs serving and present over the plans that were not refused."""
    rows, serving, present = [], 0, 0
    for (model, hardware, _), result in plans(version):
        count = HARDWARE[hardware]["count"]
        if isinstance(result, PlanError):
            why = result.message.split(":", 1)[0] if result.message.startswith("constraint ") else "no TP fits"
            rows.append([model, hardware, "-", f"-/{count}", "-", f"refused: {why}"])
            continue
        i = {k: r.value for k, r in result.intents.items()}
        used = i["tp_size"] * i["dp_size"]
        serving, present = serving + used, present + count
        shape = f"TP {i['tp_size']} x DP {i['dp_size']}" + (f" (DP attention {i['attn_dp_size']})"
                                                             if i["attn_dp_size"] > 1 else "")
        rows.append([model, hardware, shape, f"{used}/{count}", str(i["context_length"]), "ok"])
    return rows, serving, present


def main() -> int:
    import sys

    version = sys.argv[1] if len(sys.argv) > 1 else "0.5.23"
    rows, serving, present = layout_table(version)
    head = ["checkpoint", "hardware", "layout", "GPUs serving", "context", "plan"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    print(f"\nSGLang {version}: {serving} of {present} GPUs serve ({serving / max(present, 1):.0%}) over the "
          f"{sum(r[-1] == 'ok' for r in rows)} plans not refused; {sum(r[-1] != 'ok' for r in rows)} refused")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
