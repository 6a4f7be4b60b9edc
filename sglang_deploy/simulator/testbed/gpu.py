"""Stage a throwaway host as a GPU server before it boots: stand-ins at the real boundaries.

SIMULATOR ONLY (the demo and the tests). Nothing here is used on a real GPU host.

- GPUs: the NVML stand-in (``sglang_deploy/simulator/nvml/pynvml/``) where the
  host's ``python3`` imports ``pynvml``, answering from a board profile of
  ``sglang_deploy/simulator/boards`` (copied to ``/etc/sglang-testbed/nvml.json``), so
  the deploy's GPU probe runs unchanged.
- SGLang: a directory of simulated SGLang wheels (``sglang_deploy/simulator/sglang_server``)
  at :data:`WHEELS_ON_HOST`, for the deploy's own install step
  (``sglang_pip_find_links`` + ``sglang_pip_no_index``), and the simulator's
  behaviour file ``/etc/sglang-sim.json``.

Use as ``Testbed.boot(names, setup=lambda name, root: stage_gpu_host(root, wheels, board))``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SIMULATOR = Path(__file__).resolve().parent.parent
NVML_STANDIN = SIMULATOR / "nvml" / "pynvml"
BOARDS = SIMULATOR / "boards"

#: Where the wheel directory lands on the host.
WHEELS_ON_HOST = "/opt/sglang-wheels"
#: The simulated server's behaviour unless told otherwise: quick to start, fast.
DEFAULT_SIM = {"startup_delay_s": 0.5, "decode_tok_s": 200}


def stage_gpu_host(root: Path, wheels: Path, board: str, sim: Mapping[str, Any] | None = None) -> None:
    """Before boot: the NVML stand-in with a board profile, the simulator's behaviour
    (``sim``, default :data:`DEFAULT_SIM`) and the wheels."""
    site = root / "usr/local/lib/python3.11/dist-packages"
    site.mkdir(parents=True, exist_ok=True)
    shutil.copytree(NVML_STANDIN, site / "pynvml", ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    (root / "etc/sglang-testbed").mkdir(parents=True, exist_ok=True)
    shutil.copy(BOARDS / f"{board}.json", root / "etc/sglang-testbed/nvml.json")
    (root / "etc/sglang-sim.json").write_text(json.dumps(dict(DEFAULT_SIM if sim is None else sim)))
    shutil.copytree(wheels, root / WHEELS_ON_HOST.lstrip("/"))
