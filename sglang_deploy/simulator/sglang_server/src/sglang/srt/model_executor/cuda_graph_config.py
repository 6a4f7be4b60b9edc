"""CUDA-graph argument types (``sglang.srt.model_executor.cuda_graph_config``,
0.5.15+), re-made from their documented behaviour.  What the config parser
allows (phases, keys per phase, whether the backend is checked) comes from
the version's catalog (``type_params``)."""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable, Mapping, Optional


def parse_cuda_graph_backend_arg(value: str) -> str:
    if value == "tc_piecewise":
        raise argparse.ArgumentTypeError(
            "tc_piecewise was removed; select breakable, full, or disabled"
        )
    return value


def make_cuda_graph_config_parser(params: Optional[Mapping[str, Any]]) -> Callable[[str], Any]:
    params = params or {}
    phases = tuple(params.get("phases") or ())
    allowed = params.get("allowed_keys") or {}
    backend_checked = bool(params.get("backend_checked"))

    def parse_cuda_graph_config_arg(value: str) -> Any:
        try:
            parsed = json.loads(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"--cuda-graph-config must be JSON: {e}") from None
        if not isinstance(parsed, dict):
            raise argparse.ArgumentTypeError(
                f"--cuda-graph-config must be a JSON object, got {type(parsed).__name__}"
            )
        if not params:
            return parsed
        for phase, settings in parsed.items():
            phase = str(phase)
            if phase not in phases:
                raise argparse.ArgumentTypeError(
                    f"--cuda-graph-config: unknown phase '{phase}', expected one of {phases}"
                )
            if not isinstance(settings, dict):
                raise argparse.ArgumentTypeError(
                    f"--cuda-graph-config['{phase}'] must be a JSON object, got "
                    f"{type(settings).__name__}"
                )
            if backend_checked and "backend" in settings:
                parse_cuda_graph_backend_arg(settings["backend"])
            keys = tuple(allowed.get(phase, ()))
            for key in settings:
                if key not in keys:
                    raise argparse.ArgumentTypeError(
                        f"--cuda-graph-config['{phase}']: unknown key '{key}', expected one of {keys}"
                    )
        return parsed

    return parse_cuda_graph_config_arg


#: Without catalog parameters: any JSON object.
parse_cuda_graph_config_arg = make_cuda_graph_config_parser(None)
