#!/usr/bin/env python3
"""Serving gap with staged weights vs downloading at start; pip vs uv installs.

    sudo .venv/bin/python benchmarks/weights_bench.py [--sizes-mb 100,300] [--rate-mb-s 25] [--repeat 2]
    sudo .venv/bin/python benchmarks/weights_bench.py --installers-only

Boots a throwaway host (sglang_deploy/simulator/testbed; root, systemd-nspawn, sshd) standing in
for 2x RTX A6000, with the simulated SGLang (it reads its weights from --model-path at
``weights_read_mb_s``, and with ``download_at_start`` downloads a Hub id from $HF_ENDPOINT when it
starts, as SGLang does) and the Hub stand-in (sglang_deploy/simulator/hub: generated shards at a
throttled rate). Run it under the e2e lock: it uses fixed ports.

Serving gap: a first model is deployed and serving; then a new model of each size is deployed
(a) with ``sglang_model_source: hub``: downloaded and verified before the stop, and
(b) with ``sglang_model_source: server``: SGLang downloads it after the stop.
The gap is the deploy's own measurement (the history line's ``downtime``: the old server's last
answer to the new one's readiness); the goal is that (a) equals stop + load, whatever the download.

Installs: a fresh host per installer, the first deploy (venv + SGLang from a local wheel
directory: the simulated SGLang and huggingface_hub with its dependencies) and a no-change
re-deploy; wall time of each, and the install operation's own time from pyinfra's output.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sglang_deploy.simulator.hub.repos import recorded_repos  # noqa: E402
from sglang_deploy.simulator.hub.server import HubServer  # noqa: E402
from sglang_deploy.simulator.hub.weights import weight_files  # noqa: E402
from sglang_deploy.simulator.sglang_server.build import build_wheel  # noqa: E402
from sglang_deploy.simulator.testbed import Testbed  # noqa: E402
from sglang_deploy.simulator.testbed.gpu import WHEELS_ON_HOST, stage_gpu_host  # noqa: E402

#: The server's and the Hub stand-in's ports: the benchmarks' band (32300-32499, benchmarks/smoke.py
#: checks it), apart from the end-to-end tests' fixed ports (tests/test_e2e_ports.py).
PORT = 32340
HUB_PORT = 32341
MB = 1_000_000
FIRST = "Qwen/Qwen3.6-27B"
NEW = ("Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B")
SIM = {"startup_delay_s": 0.3, "decode_tok_s": 200, "weights_read_mb_s": 1000, "download_at_start": True}
STATE = "/var/lib/sglang-deploy/sglang"


def wheels(out: Path, with_uv: bool) -> None:
    build_wheel("0.5.23", out, requires=("huggingface_hub",))
    pkgs = [f"huggingface_hub=={version('huggingface_hub')}"] + (["uv"] if with_uv else [])
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary",
                    ":all:", "-d", str(out), *pkgs], check=True, timeout=600)


def data(name: str, model: str, **extra) -> dict:
    return {name: {"sglang_model": model, "sglang_gpus": {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"},
                   "sglang_intents": {"port": PORT, "mem_fraction_static": 0.88},
                   "sglang_pip_find_links": WHEELS_ON_HOST, "sglang_pip_no_index": True,
                   "sglang_env": {"HF_ENDPOINT": f"http://127.0.0.1:{HUB_PORT}"},
                   # about staging weights, not speed: the gate judges no speed (a busy machine's
                   # 8-stream figure 21% below the host's own history rolled a deploy back)
                   "sglang_gate": {"repeats": 1, "max_tokens": 16, "ready_timeout_s": 600, "tolerance": 0.9,
                                   "prediction_floor": 0.0}, **extra}}


def deploy(bed: Testbed, host, tmp: Path, inventory_data: dict) -> tuple[float, str]:
    inventory = bed.write_inventory(tmp / "inventory.py", [host], inventory_data, group="bench")
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{HUB_PORT}"}
    env.pop("HF_HUB_OFFLINE", None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(inventory), "deploy.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise SystemExit(f"deploy failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0, proc.stdout + proc.stderr


def last_downtime(host) -> dict:
    return json.loads(host.ssh(f"tail -n 1 {STATE}/history.jsonl").stdout)["downtime"]


def gap_bench(sizes: list[int], rate: float, repeat: int, tmp: Path) -> list[tuple]:
    wdir = tmp / "wheels"
    wdir.mkdir()
    wheels(wdir, with_uv=False)
    rows = []
    for size in sizes:
        repos = recorded_repos({FIRST: weight_files(FIRST, 10 * MB), **{m: weight_files(m, size * MB) for m in NEW}},
                               only=[FIRST, *NEW])
        for _ in range(repeat):
            hub = HubServer(repos, port=HUB_PORT)
            with hub, Testbed() as bed:
                host = bed.boot(["bench-weights"], setup=lambda n, r: stage_gpu_host(r, wdir, "a6000x2-bridge", SIM))[0]
                name = host.name
                deploy(bed, host, tmp, data(name, FIRST))
                hub.rate_bytes_s = rate * MB
                cases = (("staged (hub)", NEW[0], {}),
                         ("download at start (server)", NEW[1], {"sglang_model_source": "server"}))
                for k, (case, model, extra) in enumerate(cases):
                    if k:
                        deploy(bed, host, tmp, data(name, FIRST))  # back to the first model, serving
                    wall, _ = deploy(bed, host, tmp, data(name, model, **extra))
                    d = last_downtime(host)
                    rows.append((case, size, rate, d["serving_gap_s"], d["phases"], wall))
    return rows


def install_bench(repeat: int, tmp: Path) -> list[tuple]:
    wdir = tmp / "wheels-uv"
    wdir.mkdir()
    wheels(wdir, with_uv=True)
    repos = recorded_repos({FIRST: weight_files(FIRST, 10 * MB)}, only=[FIRST])
    rows = []
    for installer in ("pip", "uv"):
        for _ in range(repeat):
            with HubServer(repos, port=HUB_PORT), Testbed() as bed:
                host = bed.boot(["bench-install"], setup=lambda n, r: stage_gpu_host(r, wdir, "a6000x2-bridge", SIM))[0]
                d = data(host.name, FIRST, sglang_installer=installer)
                first, _ = deploy(bed, host, tmp, d)
                again, _ = deploy(bed, host, tmp, d)
                install = _time_install(host, installer)
                rows.append((installer, first, install, again))
    return rows


def _time_install(host, installer: str) -> float:
    """The install alone, the commands sglang_deploy/deploy/operations.install_sglang runs, into a fresh directory
    beside the service's (nothing cached by the installer but what the first deploy left)."""
    venv = "/opt/bench/sglang-0.5.23"
    opts = f"--no-index --find-links {WHEELS_ON_HOST}"
    if installer == "pip":
        cmd = f"python3 -m venv {venv} && {venv}/bin/pip install --disable-pip-version-check -q {opts} sglang==0.5.23"
    else:
        tools = "/opt/bench/.uv"
        cmd = (f"python3 -m venv {venv} && python3 -m venv {tools} && {tools}/bin/pip install -q {opts} uv && "
               f"{tools}/bin/uv pip install -q --python {venv}/bin/python {opts} sglang==0.5.23")
    host.ssh("rm -rf /opt/bench")
    t0 = time.perf_counter()
    host.ssh(cmd, timeout=600)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", default="100,300")
    parser.add_argument("--rate-mb-s", type=float, default=25.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--installers-only", action="store_true")
    parser.add_argument("--gap-only", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if not args.installers_only:
            rows = gap_bench([int(s) for s in args.sizes_mb.split(",")], args.rate_mb_s, args.repeat, tmp)
            print(f"\n{'case':28} {'MB':>5} {'MB/s':>5} {'gap s':>7}  {'stop':>5} {'gpus':>5} {'start':>5} "
                  f"{'load':>6} {'ready':>6}  {'deploy s':>8}")
            for case, size, rate, gap, ph, wall in rows:
                cell = ["-" if ph.get(k) is None else f"{ph[k]:.2f}" for k in ("stop", "gpus_free", "start", "load",
                                                                                 "ready")]
                print(f"{case:28} {size:>5} {rate:>5.0f} {gap:>7.2f}  {cell[0]:>5} {cell[1]:>5} {cell[2]:>5} "
                      f"{cell[3]:>6} {cell[4]:>6}  {wall:>8.1f}")
        if not args.gap_only:
            rows = install_bench(args.repeat, tmp)
            print(f"\n{'installer':9} {'first deploy s':>14} {'install alone s':>15} {'no-change re-deploy s':>21}")
            by = {}
            for installer, first, install, again in rows:
                by.setdefault(installer, []).append((first, install, again))
            for installer, samples in by.items():
                med = [statistics.median(x[i] for x in samples) for i in range(3)]
                print(f"{installer:9} {med[0]:>14.1f} {med[1]:>15.1f} {med[2]:>21.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
