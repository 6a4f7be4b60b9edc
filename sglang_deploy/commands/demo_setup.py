"""What `sglang-deploy demo` runs (sglang_deploy/commands/demo.py): the reference deployment (the
checkout, its inventory, the board the throwaway host is staged as), the stand-ins' settings (the
simulated server's behaviour, the performance model and the space `demo --tune` searches), the
demo's gate and timeouts; the reference host's data and its offline plan; a free port.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sglang_deploy.plan.inventory_plan import offline_weights
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import RenderedFiles, render
from sglang_deploy.plan.spec import build_spec

REPO = Path(__file__).resolve().parents[2]
REFERENCE_INVENTORY = "inventory/a6000.py"
#: The NVML board profile the throwaway host answers the GPU probe with (sglang_deploy/simulator/boards).
BOARD = "a6000x2-bridge"
HOST_NAME = "demo-a6000"
#: The simulated server's behaviour (sglang_deploy/simulator/sglang_server/README.md, "Behaviour file"):
#: single-stream decode in the range the model profile records for MTP on 2x A6000
#: (50-57 tok/s), tokens arriving ~3 per step as with speculative decoding, the
#: model's own architecture, and a start-up short enough for a demo.
SIMULATED = {
    "startup_delay_s": 1.0,
    "ttft_s": 0.08,
    "decode_tok_s": 55.0,
    "spec_accept_length": 3.0,
    "architectures": ["Qwen3_5ForConditionalGeneration"],
}
#: `demo --tune`: the server also follows the reference deployment's performance model
#: (sglang_deploy/simulator/perf/a6000_qwen36.yaml: the operator's 35 tok/s at 1 MTP step and 50-57 at
#: 3, and a planted best elsewhere), and the tuner searches the speculative settings on the host.
PERF_MODEL = Path(__file__).resolve().parents[1] / "simulator" / "perf" / "a6000_qwen36.yaml"
TUNE_SPACE = {"speculative_num_steps": [2, 3, 4, 5], "speculative_eagle_topk": [1, 2],
              "speculative_num_draft_tokens": [3, 4, 5, 6, 8, 10],
              # the demo tunes the speculative settings only: the rest stays as planned, the layout too
              # (the tuning space has had tp_size and attn_dp_size since it tunes layouts: left in, the
              # demo's tune spent its trials on other layouts and missed the planted best)
              "mem_fraction_static": [], "max_running_requests": [], "cuda_graph_max_bs_decode": [],
              "chunked_prefill_size": [], "prefill_cuda_graph": [], "custom_all_reduce": [],
              "tp_size": [], "attn_dp_size": []}
TUNE_BUDGET = 24
TUNE_TIMEOUT_S = 1800
#: The demo's gate: a target clearly below the simulated rate, and a short measurement.
TARGET_TOK_S = 45.0
GATE = {"repeats": 3, "max_tokens": 128, "ready_timeout_s": 120}
DEPLOY_TIMEOUT_S = 600
#: The local simulated server is up within seconds; a shorter wait than the deploy's gate means
#: a server that died at start (its log is shown) costs little.
LOCAL_READY_TIMEOUT_S = 30
#: The server's port is drawn from here (the testbed's sshd ports are 20000-29999).
PORT_RANGE = (10000, 20000)
SERVER_STOP_TIMEOUT_S = 15


class DemoError(Exception):
    """The demo cannot run here (exit 2)."""


def reference_data() -> dict[str, Any]:
    """The reference host's deploy data (its groups' layer, then its own; ``sglang_*`` keys only,
    so no connection setting of the reference host travels with it)."""
    from sglang_deploy.deploy.inventory import load_inventory

    ref = load_inventory(str(REPO / REFERENCE_INVENTORY))[0]
    data: dict[str, Any] = {}
    for layer in (ref.group_data, ref.host_data):
        for key, value in layer.items():
            if not key.startswith("sglang_"):
                continue
            if key == "sglang_intents" and isinstance(value, dict):
                value = {**data.get(key, {}), **value}  # intents merge per name, the host's win
            data[key] = value
    return data


def free_port() -> int:
    """A port nobody listens on, below the kernel's default ephemeral range (32768-60999), so
    that no outgoing connection takes it before the server binds it."""
    for _ in range(200):
        port = random.randrange(*PORT_RANGE)
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        return port
    raise DemoError(f"no free port in {PORT_RANGE}")


def plan_for(name: str, data: Mapping[str, Any]) -> tuple[Plan, RenderedFiles]:
    spec = build_spec(name, {}, dict(data))
    plan = plan_host(spec, weights=offline_weights(spec))
    return plan, render(plan)
