"""SIMULATOR ONLY: the stand-in GPU servers the end-to-end tests and the deploy benchmarks deploy
to: the simulated SGLang wheels they install from, and each board's inventory data.

- :func:`build_wheels`: the simulated SGLang 0.5.23 and 0.5.9 as released, and a
  :data:`BROKEN_VERSION` build whose parser lacks one flag its release has (the installed package
  disagrees with the release the plan was checked against);
- :func:`host_data`: a host's inventory data for a board of :data:`MODELS`, installing from the
  wheel directory :func:`~sglang_deploy.simulator.testbed.gpu.stage_gpu_host` puts on the host.

Use as::

    build_wheels(wheels)
    hosts = bed.boot(names, setup=lambda name, root: stage_gpu_host(root, wheels, "a6000x2-bridge"))
    data = {h.name: host_data("a6000x2-bridge", port=31801 + i) for i, h in enumerate(hosts)}
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from sglang_deploy.plan.transfer import ENGINES
from sglang_deploy.simulator.sglang_server.build import CATALOGS, build_engine_wheel, build_wheel
from sglang_deploy.simulator.testbed.gpu import WHEELS_ON_HOST

#: The simulated SGLang versions built as released.
VERSIONS = ("0.5.23", "0.5.9")
#: A build whose parser lacks one flag its release has.
BROKEN_VERSION = "0.5.19"
#: The flag the broken build's parser lacks.
BROKEN_FLAG = "--mamba-radix-cache-strategy"
#: The environment variable the hosts' Hub token is read from on the controller.
TOKEN_ENV = "E2E_HF_TOKEN"

#: Per board (sglang_deploy/simulator/boards): the model it serves, its GPUs as the inventory
#: declares them, and the intents it sets beyond the port.
MODELS: dict[str, dict[str, Any]] = {
    "a6000x2-bridge": {"sglang_model": "Qwen/Qwen3.6-27B",
                       "sglang_gpus": {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"},
                       "intents": {"mem_fraction_static": 0.88}},
    "h100x8-nvswitch": {"sglang_model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
                        "sglang_gpus": {"model": "H100 SXM", "count": 8},
                        "intents": {}},
}


def build_wheels(out: Path) -> None:
    """The simulated SGLang wheels into ``out``: :data:`VERSIONS`, and :data:`BROKEN_VERSION`
    whose parser lacks :data:`BROKEN_FLAG`; and the simulated KV transfer engines a prefill or
    decode server's deploy installs (``plan.transfer``'s versions)."""
    for version in VERSIONS:
        build_wheel(version, out)
    build_engine_wheels(out)
    catalogs = out / "catalogs"
    catalogs.mkdir()
    data = json.loads((CATALOGS / f"sglang-{BROKEN_VERSION}.json").read_text())
    del data["options"][BROKEN_FLAG]
    (catalogs / f"sglang-{BROKEN_VERSION}.json").write_text(json.dumps(data))
    build_wheel(BROKEN_VERSION, out, catalogs_dir=catalogs)
    shutil.rmtree(catalogs)


def build_engine_wheels(out: Path) -> None:
    """The simulated KV transfer engines a prefill or decode server's deploy installs, at
    ``plan.transfer``'s versions, into ``out``."""
    for engine in {e.requirement: e for e in ENGINES.values()}.values():
        build_engine_wheel(engine.package, engine.version, out)


def host_data(board: str, port: int, **intents: Any) -> dict[str, Any]:
    """The inventory data of a host staged as ``board``, serving on ``port``; ``intents`` are set
    on top of the board's own."""
    ref = MODELS[board]
    return {
        "sglang_pip_find_links": WHEELS_ON_HOST,
        "sglang_pip_no_index": True,
        "sglang_secrets": {"hf_token": {"env": TOKEN_ENV}},
        # No Hub here: the simulated server starts from the model id (tests/e2e/test_weights_e2e.py
        # deploys weights from the Hub stand-in).
        "sglang_model_source": "server",
        "sglang_model": ref["sglang_model"],
        "sglang_gpus": dict(ref["sglang_gpus"]),
        "sglang_intents": {"port": port, **ref["intents"], **intents},
    }
