"""Time `sglang-deploy plan` on a 20-host inventory of mixed models, its model facts from the Hub stand-in.

    python benchmarks/plan_time_cli.py [--hosts 20] [--repeat 3]

Starts the stand-in (python -m sglang_deploy.simulator.hub) in its own process on a free
port, writes an inventory whose hosts cycle through every recorded checkpoint (declared
8x H100, each with sglang_secrets.hf_token from a file and sglang_env.HF_ENDPOINT at the
stand-in: the token is sent only to the Hub the host downloads from, and two of the
checkpoints are gated), and runs the real command with HF_ENDPOINT at the stand-in and an
empty cache:

- cold: empty cache, every model's metadata fetched from the stand-in;
- warm: cache filled, the stand-in only asked which commit `main` names;
- offline: the stand-in stopped, every fact from the cache.

Prints one line per case: seconds (best of --repeat for warm and offline) and how many
hosts got facts. Exit 1 when a case gave no facts to a host.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglang_deploy.simulator.hub.repos import CHECKPOINTS  # noqa: E402

H100 = {"model": "H100 80GB HBM3", "count": 8, "topology": "nvswitch"}
TOKEN = "hf_bench_token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_hub(work: Path, port: int) -> subprocess.Popen:
    (work / "hub-token").write_text(TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "sglang_deploy.simulator.hub", "--port", str(port),
                             "--token-file", str(work / "hub-token")], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()   # the URL: listening
    return proc


def inventory(work: Path, hosts: int, endpoint: str) -> Path:
    models = sorted(p.name.replace("--", "/", 1) for p in CHECKPOINTS.iterdir() if (p / "config.json").is_file())
    (work / "hf_token").write_text(TOKEN)
    lines = ["hosts = ["]
    for i in range(hosts):
        data = {"sglang_model": models[i % len(models)], "sglang_gpus": H100,
                "sglang_secrets": {"hf_token": {"file": str(work / "hf_token")}},
                "sglang_env": {"HF_ENDPOINT": endpoint}}
        lines.append(f"    ({f'gpu{i:02d}'!r}, {data!r}),")
    lines.append("]")
    path = work / "inventory.py"
    path.write_text("\n".join(lines) + "\n")
    return path


def plan_once(inv: Path, env: dict) -> tuple[float, int, int]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "plan", str(inv), "--json"], cwd=ROOT,
                          env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    plans = json.loads(proc.stdout or "[]")
    return seconds, len(plans), proc.returncode


def facts_count(inv: Path, env: dict) -> int:
    code = ("import sys; from sglang_deploy.deploy.inventory import load_inventory; "
            "from sglang_deploy.deploy.model_metadata import facts_for_specs; "
            "from sglang_deploy.plan.spec import build_spec; from sglang_deploy.plan.modelfacts import ModelFacts; "
            "hs = load_inventory(sys.argv[1]); "
            "f = facts_for_specs([build_spec(h.name, h.group_data, h.host_data) for h in hs]); "
            "print(sum(isinstance(v, ModelFacts) for v in f.values()))")
    out = subprocess.run([sys.executable, "-c", code, str(inv)], cwd=ROOT, env=env, capture_output=True, text=True)
    return int(out.stdout.strip() or 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        port = free_port()
        hub = start_hub(work, port)
        inv = inventory(work, args.hosts, f"http://127.0.0.1:{port}")
        env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{port}", "XDG_CACHE_HOME": str(work / "cache")}
        env.pop("HF_HUB_OFFLINE", None)
        failed = False
        try:
            # The stand-in hashes its synthetic single-file checkpoint on first use (the real Hub
            # has that digest stored): warm that up outside the timing.
            subprocess.run([sys.executable, "-c", "import httpx,sys; httpx.head(sys.argv[1], timeout=60)",
                            f"http://127.0.0.1:{port}/Qwen/Qwen3-0.6B/resolve/main/model.safetensors"], check=True)
            cases = [("cold", 1), ("warm", args.repeat)]
            for name, repeat in cases:
                times = [plan_once(inv, env) for _ in range(repeat)]
                best = min(t[0] for t in times)
                got = facts_count(inv, env)
                failed |= got < args.hosts
                print(f"{name:8s} {best:6.2f} s  {times[0][1]} hosts planned (exit {times[0][2]}), "
                      f"{got}/{args.hosts} with model facts")
        finally:
            hub.terminate()
            hub.wait(timeout=10)
        times = [plan_once(inv, env) for _ in range(args.repeat)]
        got = facts_count(inv, env)
        failed |= got < args.hosts
        print(f"{'offline':8s} {min(t[0] for t in times):6.2f} s  {times[0][1]} hosts planned (exit {times[0][2]}), "
              f"{got}/{args.hosts} with model facts")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
