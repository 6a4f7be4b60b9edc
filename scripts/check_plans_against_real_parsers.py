#!/usr/bin/env python3
"""Parse every argv the planner emits with SGLang's REAL parsers.

    python scripts/check_plans_against_real_parsers.py [--cache-dir DIR] [--wheel-dir DIR]

The argvs: the plan matrix (sglang_deploy/simulator/plan_matrix.py: every model
profile x hardware x variant, per supported version), the accepted plans of the
facts matrix (sglang_deploy/simulator/facts_matrix.py: every checkpoint x hardware
x version, planned from the checkpoint's own facts), prefill/decode pairs of every
model profile (plan_matrix.pd_inventories, each replica's server) and every host of the shipped
inventories (inventory/*.py) planned at every supported version. Distinct argvs are written
per version and handed to `scripts/build_catalogs.py --check-argv`, which
imports the released wheel's own `prepare_server_args` parser in its throwaway
venv. On the same unpacked wheel it also looks up every citation of
sglang_deploy/data/constraints.yaml (the file and function each row mirrors,
scripts/catalogs/citations.py) and compares the catalog's model_support with the
source. Prints a table and exits 1 if any argv is rejected, naming the version,
the argv and SGLang's complaint, or if a citation is missing, naming the row,
the version, the file and the function. Needs the package index for the first build of
each venv (then cached under --cache-dir); .ci/run runs it beside the tests,
every version at once (--jobs).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglang_deploy.deploy.inventory import load_inventory  # noqa: E402
from sglang_deploy.plan.catalog import SUPPORTED_VERSIONS  # noqa: E402
from sglang_deploy.errors import PlanError  # noqa: E402
from sglang_deploy.plan.inventory_plan import plan_inventory  # noqa: E402
from sglang_deploy.plan.planner import plan_host  # noqa: E402
from sglang_deploy.plan.spec import build_spec  # noqa: E402
from sglang_deploy.simulator.facts_matrix import plans as facts_plans  # noqa: E402
from sglang_deploy.simulator.plan_matrix import CASES, HARDWARE, MODELS, VARIANTS, pd_inventories  # noqa: E402


def _check_version(version: str, argvs: set[tuple[str, ...]], tmp: Path,
                   args: argparse.Namespace) -> tuple[list[dict], list[str]]:
    """The real parser's verdict on each argv of one version (build_catalogs.py --check-argv),
    and what else failed on that wheel (a missing citation, a stale model_support, a build that
    broke): the last lines of its stderr that are not progress lines."""
    corpus = tmp / f"argv-{version}.json"
    corpus.write_text(json.dumps([list(a) for a in sorted(argvs)]))
    cmd = [sys.executable, str(ROOT / "scripts/build_catalogs.py"), "--versions", version, "--check-argv", str(corpus)]
    for flag, value in (("--cache-dir", args.cache_dir), ("--wheel-dir", args.wheel_dir)):
        if value:
            cmd += [flag, value]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.strip().startswith("{")]
    if proc.returncode == 0:
        return results, []
    errors = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("[build_catalogs]")]
    return results, errors[-40:] or [f"build_catalogs.py exited {proc.returncode}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", help="passed to build_catalogs.py")
    parser.add_argument("--wheel-dir", help="passed to build_catalogs.py")
    parser.add_argument("--jobs", type=int, default=4, help="versions checked at once (default 4)")
    args = parser.parse_args()
    by_version: dict[str, set[tuple[str, ...]]] = {}
    for model, hardware, version, variant in CASES:
        data = {"sglang_model": MODELS[model], "sglang_gpus": HARDWARE[hardware],
                "sglang_intents": VARIANTS[variant], "sglang_secrets": {"api_key": {"env": "SGLANG_API_KEY"}}}
        try:
            plan = plan_host(build_spec("m", {}, data), sglang_version=version)
        except PlanError as exc:
            # The one refusal the matrix holds (tests/test_matrix.py): a variant's declared
            # attn_dp_size 2 on a host whose planned TP is 1; such an argv never reaches a host.
            if exc.field != "sglang_intents.attn_dp_size" or "does not divide TP 1" not in exc.message:
                raise
            continue
        by_version.setdefault(version, set()).add(tuple(plan.argv))
    for (_, _, version), plan in facts_plans():
        if not isinstance(plan, PlanError):  # a refused plan names its constraint and never reaches a host
            by_version.setdefault(version, set()).add(tuple(plan.argv))
    for inventory in sorted((ROOT / "inventory").glob("*.py")):
        hosts = [(h.name, h.group_data, h.host_data) for h in load_inventory(str(inventory))]
        for version in SUPPORTED_VERSIONS:
            for plan in plan_inventory(hosts, sglang_version=version):
                if not isinstance(plan, PlanError):  # a plan the version cannot make is refused offline
                    by_version.setdefault(version, set()).add(tuple(plan.argv))
    for version, hosts in pd_inventories():  # prefill and decode servers, each replica its own
        for plan in plan_inventory(hosts, sglang_version=version):
            if isinstance(plan, PlanError):
                raise plan
            for server in plan.replicas or (plan,):
                by_version.setdefault(version, set()).add(tuple(server.argv))
    failed = 0
    print(f"{'version':8} {'argvs':>6} {'accepted':>9} {'rejected':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        # One process per version, all at once: building a version's venv is mostly download
        # and unpacking, and each version's parse is independent of the others.
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            runs = {version: pool.submit(_check_version, version, argvs, Path(tmp), args)
                    for version, argvs in by_version.items()}
        for version, argvs in by_version.items():
            results, errors = runs[version].result()
            rejected = [r for r in results if not r["accepted"]]
            failed += len(rejected) + (len(argvs) - len(results)) + len(errors)
            print(f"{version:8} {len(argvs):>6} {len(results) - len(rejected):>9} {len(rejected):>9}")
            for r in rejected:
                print(f"  REJECTED: {' '.join(r['argv'])}\n    {r['error']}")
            for line in errors:
                print(f"  FAILED: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
