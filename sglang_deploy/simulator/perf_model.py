"""The simulated server's performance model, on the controller.

The model itself is ``sglang_server/src/sglang/_sim/perf.py`` (stdlib only, run
inside the simulated server); this wrapper loads that very file by path, so
tests and benchmarks compute the same figures the server serves, and adds
what the server does not need:

    load_model(mapping) -> PerfModel         # ValueError naming the key on bad data
    read_yaml(path) -> dict                  # the YAML form tests write (PyYAML)
    load_yaml(path) -> PerfModel
    behaviour(mapping) -> dict               # {"performance": {...}}: the behaviour-file fragment
    server_args(argv, version, behaviour=None) -> dict
        # the argv parsed by the simulated package's parser for that version and
        # resolved as the server resolves it (what PerfModel's methods take)

It is a model with planted numbers, not SGLang's performance.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Mapping, Optional

import yaml

HERE = Path(__file__).resolve().parent
PERF_PY = HERE / "sglang_server" / "src" / "sglang" / "_sim" / "perf.py"


def _load_perf() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sglang_deploy_sim_perf", PERF_PY)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {PERF_PY}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


perf = _load_perf()
PerfModel = perf.PerfModel
KEYS = perf.KEYS


def load_model(mapping: Optional[Mapping[str, Any]]) -> Any:
    return perf.load_model(mapping)


def read_yaml(path: os.PathLike) -> Dict[str, Any]:
    """The model mapping of a YAML file (an empty file is the neutral model)."""
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a performance model must be a YAML mapping")
    return data


def load_yaml(path: os.PathLike) -> Any:
    try:
        return perf.load_model(read_yaml(path))
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def behaviour(mapping: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The behaviour-file fragment for this model, after validation: merge it into the
    simulated server's JSON behaviour file."""
    perf.load_model(mapping)  # raises on bad data
    return {"performance": json.loads(json.dumps(dict(mapping or {})))}


# -- parsing an argv the way the simulated server of that version does ---------------

_WHEELS: Dict[str, Path] = {}
_LOCK = threading.Lock()

_RESOLVE = r"""
import json, sys
import sglang
from sglang._sim import config, resolve
from sglang.srt.server_args import prepare_server_args
argv, extra = json.load(sys.stdin)
cfg = dict(config.defaults(), **extra)
info = resolve.server_info(prepare_server_args(argv), sglang.__version__, cfg, argv, [])
json.dump(info, sys.stdout)
"""


def _wheel(version: str) -> Path:
    with _LOCK:
        wheel = _WHEELS.get(version)
        if wheel is None or not wheel.is_file():
            from sglang_deploy.simulator.sglang_server import build

            out = Path(tempfile.mkdtemp(prefix="sglang-sim-wheel-"))
            wheel = build.build_wheel(version, out)
            _WHEELS[version] = wheel
        return wheel


def server_args(argv: List[str], version: str, behaviour: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Parse ``argv`` (the arguments after ``python -m sglang.launch_server``) with the
    simulated SGLang ``version``'s parser and resolve it as its server does (speculative
    defaults, the prefill CUDA-graph backend, mem_fraction_static from the behaviour
    file's default, ...).  ValueError with argparse's message when the parser refuses it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SGLANG_"))}
    env["PYTHONPATH"] = str(_wheel(version))
    proc = subprocess.run([sys.executable, "-c", _RESOLVE], input=json.dumps([list(argv), dict(behaviour or {})]),
                          capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise ValueError(f"SGLang {version} refuses the argv: {lines[-1] if lines else proc.returncode}")
    return json.loads(proc.stdout)
