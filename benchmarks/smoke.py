#!/usr/bin/env python3
"""Every benchmark of benchmarks/ at a smoke size, so that none rots (.ci/run runs it).

    sudo .venv/bin/python benchmarks/smoke.py [--jobs 2] [--only NAME,...] [--logs DIR]

The benchmarks are found, not listed: every ``benchmarks/*.py`` but this file and the helpers
(a name that starts with ``_``). Each is run by RUNS, its arguments at the smallest size its
options allow (one host, one round, one run, a few cases), as a whole process with a timeout;
a benchmark found here without an entry in RUNS fails, so that a new one cannot be forgotten.
Its figures are those of a smoke size on whatever machine runs it: a smoke run shows that the
benchmark still runs end to end and judges what it judges, not the figures docs/benchmarks.md
gives (those are its full size).

Prints a table, one row per run: script and arguments, seconds, exit, and the output's last line
(for a skip: why); then the last lines of every failed run's output, and the total wall time.
Exit 1 when any run failed: a non-zero exit, a timeout, a benchmark without a run, or the ports
check below.

Some runs need what not every machine has; RUNS says what and the run is skipped with the reason
where it is missing, or, with ``CI`` set in the environment (to anything non-empty), fails (CI
must run them all, as the end-to-end tests do):
- ``testbed``: throwaway hosts (sglang_deploy/simulator/testbed): root, systemd-nspawn and sshd
  (packages systemd-container and openssh-server);
- ``parsers``: the released SGLang wheel's parser venv, cached under
  ~/.cache/sglang-deploy-catalogs ($XDG_CACHE_HOME) by scripts/check_plans_against_real_parsers.py
  (or scripts/build_catalogs.py); this never builds it (minutes of downloads).
weights_bench.py downloads huggingface_hub and uv wheels from the package index (pip's cache
keeps them).

Ports: the throwaway hosts share this machine's network, and the benchmarks that boot them serve
on fixed ports, named at their module level (a name with PORT in it: an int or a range). They
must lie in BENCH_PORTS, a band no end-to-end test uses (tests/test_e2e_ports.py keeps the e2e
files' fixed ports apart, and the testbed's sshd ports and the demo's below 30000); a port outside
it, one that an e2e file (tests/e2e/test_*.py) names, or one two benchmarks share fails the run
before anything starts. Still, run it when no end-to-end test runs: they share the two cores and
the inotify budget, and the timings mean more.

``--jobs N`` (default 3) runs N at a time, the longest first, at most two of them on throwaway
hosts (those mostly wait on boots, SSH and the simulated servers); ``--jobs 1`` runs one after
another. A run's timeout is 120 s plus ten times its usual seconds (``about_s``, measured on a
quiet 2-core machine). It ends a hung run and judges no speed: in CI the smoke run shares the two
cores with three e2e lanes and the released SGLang's install, and there a run took up to 3.1x its
usual seconds (weights_bench.py, 290 s) and proof_depth.py more than 5x (past the 153 s that 60 s
plus three times allowed, where it takes 30 s alone).
"""

from __future__ import annotations

import argparse
import ast
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
E2E = ROOT / "tests" / "e2e"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from catalogs.config import default_cache_dir  # noqa: E402  (scripts/catalogs: where the parser venvs are)

#: The band of the benchmarks' fixed ports: above every e2e file's (31801-32211 today), below the
#: kernel's ephemeral range (32768-60999).
BENCH_PORTS = range(32300, 32500)
#: The released SGLang version whose parser venv proof_depth.py's smoke run uses.
PARSER_VERSION = "0.5.23"
#: After a timeout: SIGINT first (the throwaway hosts are torn down as on Ctrl-C), SIGKILL after this.
GRACE_S = 60
#: How much of a failed run's output is shown.
TAIL_LINES = 40
#: The benchmark processes running now (each the leader of its own process group), and the stop
#: that Ctrl-C sets: no worker starts another run then.
LIVE: set[subprocess.Popen] = set()
STOP = threading.Event()


#: At most this many runs on throwaway hosts at once.
MAX_TESTBED_RUNS = 2


@dataclass(frozen=True)
class Run:
    """One run of a benchmark: its arguments, its usual seconds on a 2-core machine (its timeout
    follows, and the longest start first), and what it needs (see the docstring)."""

    args: tuple[str, ...] = ()
    about_s: int = 10
    needs: frozenset[str] = field(default_factory=frozenset)

    @property
    def timeout_s(self) -> int:
        return 120 + 10 * self.about_s


TESTBED = frozenset({"testbed"})
PARSERS = frozenset({"parsers"})
#: Per benchmark (its file's stem): the runs at smoke size.
STAGER = "sglang_deploy/deploy/host/stage_weights.py"
RUNS: dict[str, tuple[Run, ...]] = {
    "plan_facts_table": (Run((), 2),),
    "start_budget_table": (Run((), 2),),
    "pd_split_table": (Run(("--hosts", "2"), 2),),
    "plan_time": (Run(("--runs", "1"), 2),),
    # every checkpoint of the Hub stand-in once, one run per case
    "plan_time_cli": (Run(("--hosts", "10", "--repeat", "1"), 11),),
    # 10 classes: every checkpoint of the Hub stand-in fetched
    "plan_scale": (Run(("--hosts", "20", "--classes", "10", "--repeat", "1"), 19),),
    # the reference plan (accepted) and a mistake only SGLang's own validation catches
    "proof_depth": (Run(("--versions", PARSER_VERSION, "--mistakes", "0,2"), 31, PARSERS),),
    "gate_accuracy": (Run(("--rates", "1000", "--chunks", "2", "--repeats", "1"), 8),),
    "gate_ceiling": (Run(("--smoke",), 11),),
    "gate_overhead": (Run(("--runs", "1"), 13),),
    # the gate through a prefill/decode pair behind the real router, and against each server alone
    "pd_pair": (Run(("--runs", "1"), 15),),
    # one gate with the deploy's defaults against the simulated reference deployment
    "gate_additions": (Run(("--runs", "1"), 55),),
    "tune_search": (Run(("--seeds", "2"), 2),),
    "predict_published": (Run(("--rows", "6"), 2),),
    # every recorded row: the planner's layout against aiconfigurator's ranking
    "layout_vs_aiconfigurator": (Run((), 3),),
    # where aiconfigurator (the extra predict) is not installed: says so and exits 0; else 3 rows
    "predict_aiconfigurator": (Run(("--rows", "3"), 3),),
    # the stager against itself: both paths of the script, not a change
    "stager_throughput": (Run(("--before", STAGER, "--mb", "1", "--repeats", "1"), 1),
                          Run(("--before", STAGER, "--hostile", "--per-class", "1"), 21)),
    "deploy_bench": (Run(("--hosts", "1", "--repeat", "1"), 24, TESTBED),),
    "rollout_bench": (Run(("--hosts", "1"), 22, TESTBED),),
    "status_scale": (Run(("--hosts", "1", "--repeat", "1"), 25, TESTBED),),
    # one case that ends at once, one that runs to the read's deadline, one that is refused
    "status_hostile_gateway": (Run(("--cases", "well-formed,trickle-headers,echo-key"), 16),),
    # one case of each class (a refusal, a deadline, a bounded decode, a linear redaction)
    "hostile_sweep": (Run(("--cases", "check-trickle-headers,status-nested-gzip,diff-256kib-line,options-tolerance,"
                                      "textfile-tmp,worker-at-gateway-url"), 12),),
    "tune_overhead": (Run(("--budget", "2"), 75, TESTBED),),
    "weights_bench": (Run(("--sizes-mb", "1", "--repeat", "1"), 94, TESTBED),),
}


@dataclass
class Result:
    script: str
    run: Run
    seconds: float = 0.0
    exit: str = ""
    last: str = ""
    failed: bool = False
    output: str = ""

    @property
    def label(self) -> str:
        return self.script if self.script.startswith("(") else " ".join([f"{self.script}.py", *self.run.args])


def in_ci() -> bool:
    return bool(os.environ.get("CI"))


def discover() -> list[str]:
    return sorted(p.stem for p in BENCH.glob("*.py") if not p.name.startswith("_") and p.name != "smoke.py")


# ---- what a run needs ----------------------------------------------------------------------------

def parser_cache_missing(version: str) -> list[str]:
    """Why the parser venv of ``version`` is not in the catalogs' cache (empty: it is)."""
    cache = default_cache_dir()
    parts = {"wheel": f"wheels/sglang-{version}-*.whl", "unpacked wheel": f"src-{version}-*/.complete",
             "venv": f"venv-{version}-*/.complete"}
    absent = [what for what, pattern in parts.items() if not any(cache.glob(pattern))]
    if not absent:
        return []
    return [f"no SGLang {version} parser {' / '.join(absent)} in the cache {cache} "
            "(.venv/bin/python scripts/check_plans_against_real_parsers.py builds it)"]


def missing(needs: frozenset[str]) -> list[str]:
    out = []
    if "testbed" in needs:
        from sglang_deploy.simulator.testbed import missing_requirements
        out += [f"throwaway hosts: {m}" for m in missing_requirements()]
    if "parsers" in needs:
        out += parser_cache_missing(PARSER_VERSION)
    return out


# ---- ports ---------------------------------------------------------------------------------------

def _int(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def benchmark_ports(path: Path) -> set[int]:
    """The fixed ports a benchmark names at module level: NAME = 32340, or NAME = range(a, b)
    (A, B = 32340, 32341 too), where NAME has PORT in it."""
    ports: set[int] = set()
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        pairs: list[tuple[ast.AST, ast.AST]] = []
        for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
            if (isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                    and len(target.elts) == len(node.value.elts)):
                pairs += zip(target.elts, node.value.elts)
            else:
                pairs.append((target, node.value))
        for name, v in pairs:
            if not (isinstance(name, ast.Name) and "PORT" in name.id):
                continue
            if (value := _int(v)) is not None:
                ports.add(value)
            elif isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "range":
                bounds = [_int(a) for a in v.args]
                if bounds and all(b is not None for b in bounds):
                    ports |= set(range(*(b for b in bounds if b is not None)))
    return ports


def e2e_ports(path: Path, span: int = 16) -> set[int]:
    """An e2e file's fixed ports as tests/test_e2e_ports.py reads them: integer constants in
    30000-32767 assigned at module level, and for BASE + i the ``span`` above BASE."""
    def port(n: ast.AST) -> int | None:
        v = _int(n)
        return v if v is not None and 30000 <= v < 32768 else None

    ports: set[int] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            for n in ast.walk(node):
                if (p := port(n)) is not None:
                    ports.add(p)
                if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) and (base := port(n.left)) is not None:
                    ports |= set(range(base, base + span + 1))
    return ports


def port_problems(scripts: list[str]) -> list[str]:
    problems = []
    e2e = {p: path.name for path in sorted(E2E.glob("test_*.py")) for p in e2e_ports(path)}
    seen: dict[int, str] = {}
    for script in scripts:
        ports = benchmark_ports(BENCH / f"{script}.py")
        outside = sorted(p for p in ports if p not in BENCH_PORTS)
        if outside:
            problems.append(f"{script}.py: port(s) {outside[:5]} outside the benchmarks' band "
                            f"{BENCH_PORTS.start}-{BENCH_PORTS.stop - 1}")
        taken = sorted(p for p in ports if p in e2e)
        if taken:
            problems.append(f"{script}.py: port(s) {taken[:5]} of {e2e[taken[0]]}")
        shared = sorted(p for p in ports if p in seen)
        if shared:
            problems.append(f"{script}.py: port(s) {shared[:5]} of {seen[shared[0]]}.py too")
        seen.update({p: script for p in ports})
    inside = sorted(p for p in e2e if p in BENCH_PORTS)
    if inside:
        problems.append(f"{e2e[inside[0]]}: port(s) {inside[:5]} inside the benchmarks' band")
    return problems


# ---- running -------------------------------------------------------------------------------------

def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def interrupt(proc: subprocess.Popen) -> None:
    """SIGINT to the benchmark's process group, as Ctrl-C would (its throwaway hosts are torn down
    on the way out), SIGKILL after GRACE_S."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    except ProcessLookupError:
        pass


def execute(result: Result, logs: Path) -> None:
    """Run one benchmark process to its end or its timeout; fill ``result``."""
    run = result.run
    log = logs / (result.label.replace("/", "_").replace(" ", "_")[:150] + ".log")
    # A controller cache of its own (XDG_CACHE_HOME): the benchmarks that deploy from a Hub stand-in
    # fill the model-facts cache with the stand-in's small checkpoints under real model ids, which
    # would change the plans of everything else that reads the user's cache (tests running beside,
    # a later deploy); the released parsers' venvs are reached through a link to their real cache.
    xdg = logs / (result.label.replace("/", "_").replace(" ", "_")[:150] + ".cache")
    xdg.mkdir(parents=True, exist_ok=True)
    link = xdg / default_cache_dir().name
    if not link.exists():
        link.symlink_to(default_cache_dir().resolve(), target_is_directory=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_CACHE_HOME": str(xdg)}
    if STOP.is_set():
        result.exit, result.last = "skip", "interrupted"
        return
    start = time.monotonic()
    with open(log, "w+") as out:
        proc = subprocess.Popen([sys.executable, str(BENCH / f"{result.script}.py"), *run.args], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # a group of its own: the timeout ends all of it
        LIVE.add(proc)
        try:
            code = proc.wait(run.timeout_s)
            result.exit = str(code)
            result.failed = code != 0
        except subprocess.TimeoutExpired:
            interrupt(proc)
            result.exit = f"timeout {run.timeout_s} s"
            result.failed = True
        finally:
            LIVE.discard(proc)
        result.seconds = time.monotonic() - start
        out.seek(0)
        result.output = out.read()
    result.last = last_line(result.output)


def run_all(todo: list[Result], jobs: int, logs: Path) -> None:
    """``jobs`` workers, each taking the longest run left that it may start (at most
    MAX_TESTBED_RUNS on throwaway hosts at once)."""
    queue = sorted(todo, key=lambda r: -r.run.about_s)
    cond = threading.Condition()
    hosts_running = 0

    def take() -> Result | None:
        nonlocal hosts_running
        with cond:
            while queue and not STOP.is_set():
                for i, r in enumerate(queue):
                    if "testbed" not in r.run.needs or hosts_running < MAX_TESTBED_RUNS:
                        hosts_running += "testbed" in r.run.needs
                        return queue.pop(i)
                cond.wait()
            return None

    def worker() -> None:
        nonlocal hosts_running
        while (r := take()) is not None:
            try:
                execute(r, logs)
            finally:
                with cond:
                    hosts_running -= "testbed" in r.run.needs
                    cond.notify_all()
            mark = "FAILED" if r.failed else "ok"
            print(f"  {mark:6} {r.seconds:6.1f} s  {r.label}", file=sys.stderr, flush=True)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)  # a timed join: Ctrl-C reaches the main thread


def table(results: list[Result]) -> str:
    rows = [("script", "seconds", "exit", "last line")]
    for r in results:
        seconds = f"{r.seconds:.1f}" if r.exit not in ("skip", "fail") else "-"
        rows.append((r.label, seconds, r.exit, r.last if r.exit in ("skip", "fail") else r.last[:110]))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:<{widths[2]}}  {d}".rstrip() for a, b, c, d in rows]
    lines.insert(1, "-" * max(len(line) for line in lines))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3, help="runs at a time (default 3; 1: one after another)")
    parser.add_argument("--only", help="these benchmarks only (file stems, comma-separated)")
    parser.add_argument("--logs", type=Path, help="keep every run's output in this folder")
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error("--jobs: at least 1")
    found = discover()
    scripts = found
    if args.only:
        scripts = [s.strip().removesuffix(".py") for s in args.only.split(",")]
        unknown = [s for s in scripts if s not in found]
        if unknown:
            parser.error(f"--only: no benchmark {', '.join(unknown)} in benchmarks/ ({', '.join(found)})")
    t0 = time.monotonic()
    results: list[Result] = []
    for problem in port_problems(found):
        results.append(Result("(ports)", Run(), exit="fail", last=problem, failed=True))
    for stale in sorted(set(RUNS) - set(found)):
        results.append(Result(stale, Run(), exit="fail", failed=True,
                              last="listed in smoke.py RUNS but not in benchmarks/: drop its entry"))
    todo = []
    for script in scripts:
        if script not in RUNS:
            results.append(Result(script, Run(), exit="fail", failed=True,
                                  last="no smoke run: add one to RUNS in benchmarks/smoke.py"))
            continue
        for run in RUNS[script]:
            r = Result(script, run)
            results.append(r)
            why = missing(run.needs)
            if why:
                r.exit, r.failed = ("fail", True) if in_ci() else ("skip", False)
                r.last = "; ".join(why) + (" (CI is set: a run that cannot run fails)" if in_ci() else "")
                continue
            todo.append(r)
    with tempfile.TemporaryDirectory(prefix="bench-smoke-") as tmp:
        logs = args.logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        try:
            run_all(todo, args.jobs, logs)
        except KeyboardInterrupt:
            STOP.set()
            print("interrupted: stopping the running benchmarks", file=sys.stderr)
            for proc in list(LIVE):
                interrupt(proc)
            return 130
    total = time.monotonic() - t0
    print(table(results))
    failed = [r for r in results if r.failed]
    for r in failed:
        if r.output:
            tail = "\n".join(r.output.rstrip().splitlines()[-TAIL_LINES:])
            print(f"\n=== {r.label}: exit {r.exit}, the last {TAIL_LINES} lines of its output\n{tail}")
    skipped = sum(r.exit == "skip" for r in results)
    print(f"\n{len(results)} runs in {total:.1f} s (--jobs {args.jobs}): {len(failed)} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
