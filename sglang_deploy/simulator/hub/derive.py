"""Write each recorded checkpoint's ``model.safetensors.index.json`` from its ``config.json``.

``python -m sglang_deploy.simulator.hub.derive`` (re)writes the index of every checkpoint
under ``checkpoints/`` whose real index was not found: ``metadata.total_size`` is derived
exactly from the tensor shapes and dtypes (see tensors.py) and the weight_map is left
out (the planner reads only the total). ``--check`` exits 1 when a written index differs
from the derivation. A checkpoint that ships a single ``model.safetensors`` (no index on
the Hub) gets none; the stand-in serves a safetensors header for it instead (repos.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sglang_deploy.simulator.hub import tensors

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"

#: Per checkpoint: the dtype of block-FP8 ``weight_scale_inv`` (None where not FP8) and
#: whether the published repository has a single ``model.safetensors`` and no index.
#: Both come from the recorded tensor listings named in each provenance.json.
LAYOUT: dict[str, dict] = {
    "Qwen--Qwen3-0.6B": {"single_file": True},
    "Qwen--Qwen3-235B-A22B-Instruct-2507-FP8": {"scale_dtype": "BF16"},
    "deepseek-ai--DeepSeek-V3": {"scale_dtype": "F32"},
}


def checkpoint_tensors(name: str) -> list[tensors.Tensor]:
    config = json.loads((CHECKPOINTS / name / "config.json").read_text())
    return tensors.tensors_for(config, LAYOUT.get(name, {}).get("scale_dtype"))


def derived_index(name: str) -> dict | None:
    if LAYOUT.get(name, {}).get("single_file"):
        return None
    return {"metadata": {"total_size": tensors.total_size(checkpoint_tensors(name))}, "weight_map": {}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for directory in sorted(p for p in CHECKPOINTS.iterdir() if (p / "config.json").is_file()):
        index = derived_index(directory.name)
        if index is None:
            continue
        path = directory / "model.safetensors.index.json"
        text = json.dumps(index, indent=2) + "\n"
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(directory.name)
        else:
            path.write_text(text)
            print(f"{directory.name}: total_size {index['metadata']['total_size']}")
    for name in stale:
        print(f"{name}: model.safetensors.index.json differs from its derivation", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
