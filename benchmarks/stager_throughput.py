"""The host-side weight stager (sglang_deploy/deploy/host/stage_weights.py) on a well-behaved mirror, before and
after a change, and the hostile mirror's cases (sglang_deploy/simulator/hub/hostile_cases.py) counted
for both.

Throughput: the Hub stand-in unthrottled on loopback serves one repo (``--mb`` of LFS shards and
their index); each run stages it into a fresh store (download, verification, links,
marker); the median over ``--repeats`` runs of each script, runs interleaved, in MB/s of the
whole script run (process start included). The "before" script needs huggingface_hub (this
interpreter's); the "after" one only the standard library.

    python -m benchmarks.stager_throughput --before OLD_SCRIPT [--mb 300] [--repeats 5] [--hostile [--per-class N]]

``--hostile``: every case of sglang_deploy/simulator/hub/hostile_cases.py against both scripts, per class:
cases tried, handled before, handled after (what "handled" means: that module's docstring);
``--per-class N`` tries only the first N cases of each class (the smoke run, benchmarks/smoke.py:
1). Exit 1 when the "after" script leaves a case it tried unhandled.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AFTER = ROOT / "sglang_deploy" / "deploy" / "host" / "stage_weights.py"
REPO = "Qwen/Qwen3-0.6B"


def stage_once(script: Path, url: str, commit: str, scratch: Path) -> float:
    store = scratch / "store"
    env_file = scratch / "sglang.env"
    env_file.write_text(f"HF_ENDPOINT={url}\nHF_TOKEN=hf_bench_token\n")
    argv = [sys.executable, str(script), "--host", "bench", "--store", str(store), "--repo", REPO, "--commit",
            commit, "--revision", "main", "--env-file", str(env_file), "--owner", "root:root"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{script} failed: {proc.stderr.strip()[-500:]}")
    import shutil
    shutil.rmtree(store)
    return wall


def throughput(before: Path, mb: int, repeats: int) -> None:
    from sglang_deploy.simulator.hub.repos import HubRepo
    from sglang_deploy.simulator.hub.server import HubServer
    from sglang_deploy.simulator.hub.weights import weight_files

    repos = {REPO: HubRepo(REPO, weight_files(REPO, mb * 10 ** 6, shards=3))}
    total = sum(f.size for f in repos[REPO].files.values())
    for f in repos[REPO].files.values():
        f.etag()  # digests computed once, before any timing
    walls: dict[str, list[float]] = {"before": [], "after": []}
    with HubServer(repos) as server, tempfile.TemporaryDirectory(prefix="stager-bench-") as tmp:
        commit = server.repos[REPO].commit
        stage_once(AFTER, server.url, commit, Path(tmp))  # warm the page cache and the server
        for _ in range(repeats):
            for label, script in (("before", before), ("after", AFTER)):
                walls[label].append(stage_once(script, server.url, commit, Path(tmp)))
    rate = {k: total / 1e6 / statistics.median(v) for k, v in walls.items()}
    print(f"stager throughput, {total / 1e6:.0f} MB ({len(repos[REPO].files)} files), median of {repeats} runs")
    print(f"{'script':<8} {'median s':>9} {'MB/s':>8}")
    for label in ("before", "after"):
        print(f"{label:<8} {statistics.median(walls[label]):>9.2f} {rate[label]:>8.1f}")
    print(f"ratio after/before: {rate['after'] / rate['before']:.3f}")


def hostile(before: Path, per_class: int | None = None) -> bool:
    """The table; True when the "after" script handled every case tried."""
    from sglang_deploy.simulator.hub.hostile_cases import CASES, run_case

    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for case in CASES:
        row = counts[case["cls"]]
        if per_class is not None and row[0] >= per_class:
            continue
        row[0] += 1
        for i, script in ((1, before), (2, AFTER)):
            with tempfile.TemporaryDirectory(prefix="stager-hostile-") as tmp:
                result = run_case(script, case, Path(tmp))
            row[i] += result["handled"]
            if not result["handled"] and script == AFTER:
                print(f"NOT handled after: {case['cls']}: {case['name']}: {result['checks']}", file=sys.stderr)
    print(f"{'class':<26} {'tried':>5} {'before':>7} {'after':>6}")
    for cls, (tried, b, a) in counts.items():
        print(f"{cls:<26} {tried:>5} {b:>7} {a:>6}")
    tot = [sum(r[i] for r in counts.values()) for i in range(3)]
    print(f"{'total':<26} {tot[0]:>5} {tot[1]:>7} {tot[2]:>6}")
    return tot[2] == tot[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, type=Path, help="the stager before the change")
    parser.add_argument("--mb", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hostile", action="store_true", help="count the hostile cases instead")
    parser.add_argument("--per-class", type=int, default=None, help="with --hostile: the first N cases of each class")
    args = parser.parse_args()
    if args.hostile:
        return 0 if hostile(args.before, args.per_class) else 1
    throughput(args.before, args.mb, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
