"""The fleet rollout's wave runner: `sglang-deploy rollout INVENTORY`.

Each wave is one ordinary `pyinfra -y INVENTORY deploy.py` run limited to the
wave's hosts (pyinfra runs every operation on all its hosts before the next,
so a run is exactly one wave restarting together, and hosts outside the limit
are not touched). The rollout adds order, the failure budget and the summary;
the deploy, the gate and the rollback are the deploy's own. Each run reports
its hosts' outcomes through the result file the roles write when the run's
context names it (sglang_deploy/runcontext.py, sglang_deploy/deploy/results.py).

Interrupting (Ctrl-C, SIGTERM) never cuts a wave: the running wave's hosts are
left to pass or be rolled back by their gate, then the rollout stops. The
pyinfra run is in its own session, so the terminal's Ctrl-C reaches only this
runner.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

from sglang_deploy.deploy.inventory import InventoryError, InventoryHost, load_inventory
from sglang_deploy import waves
from sglang_deploy.plan.settings import ROLLOUT_DEFAULTS, ROLLOUT_KEYS
from sglang_deploy.gate.errors import GateError
from sglang_deploy.gate.files import check_writable
from sglang_deploy.lifecycle.rollback_policy import host_records
from sglang_deploy.plan.tpgroups import group_name
from sglang_deploy.plan.gateway_fleet import fleet_memberships, fleet_roles
from sglang_deploy.errors import PlanError
from sglang_deploy.runcontext import RunContext
from sglang_deploy.runcontext import write as write_run
from sglang_deploy.waves import Summary, Wave, WaveError

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy.py"


class RolloutError(Exception):
    """Bad rollout input (inventory, limit, wave settings): exit 2, nothing touched."""




@dataclass
class RolloutOptions:
    inventory: str
    waves: str | None = None  # flag; else inventory data; else the default
    max_fail: int | None = None
    max_unavailable: str | None = None  # flag; else inventory data; else the default (1 per gateway)
    limit: Sequence[str] = ()
    json_path: str | None = None
    extra_pyinfra_args: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)  # added to the pyinfra runs' environment
    # the rollout's compile-cache seeds (lifecycle/cache_seed.py): a directory of its own, made by
    # rollout() for its waves and removed after them
    cache_seed_dir: str | None = None


@dataclass
class WaveRun:
    wave: Wave
    records: dict[str, dict[str, Any]]
    returncode: int
    seconds: float
    missing: dict[str, str]  # host -> why there is no record


def _matches(host: InventoryHost, pattern: str) -> bool:
    return fnmatch.fnmatchcase(host.name, pattern) or any(fnmatch.fnmatchcase(g, pattern) for g in host.groups)


def select(hosts: list[InventoryHost], limit: Sequence[str]) -> list[InventoryHost]:
    """``--limit``: host names, group names or globs of either (pyinfra's own meaning).
    Every name or glob must match a host or group of the inventory: a misspelt one would
    otherwise shrink the rollout without a word."""
    if not limit:
        return hosts
    patterns = [p.strip() for item in limit for p in item.split(",") if p.strip()]
    if not patterns:
        raise RolloutError(f"--limit {','.join(limit)!r}: names no host or group")
    unknown = [p for p in patterns if not any(_matches(h, p) for h in hosts)]
    if unknown:
        raise RolloutError(f"--limit {', '.join(unknown)}: matches no host or group of the inventory")
    return [h for h in hosts if any(_matches(h, p) for p in patterns)]


def check_output(path: str | None, flag: str = "--json", inputs: Sequence[str] = ()) -> None:
    """An output file must be writable before any wave runs, not found unwritable after the
    whole rollout, and must not be one of the ``inputs`` (the inventory). The probe is the
    gate's (``gate.files.check_writable``): nothing is created or changed."""
    if path is None:
        return
    if not path.strip():
        raise RolloutError(f"{flag}: empty file name")
    target = Path(path)
    if target.is_dir():
        raise RolloutError(f"{flag} {path}: is a directory")
    if any(target.resolve() == Path(i).resolve() for i in inputs):
        raise RolloutError(f"{flag} {path}: is the inventory itself; name another file")
    try:
        check_writable(path, flag)
    except GateError as exc:
        raise RolloutError(str(exc)) from None


def _setting(hosts: list[InventoryHost], key: str) -> Any:
    """One ``sglang_rollout`` setting; every host must agree (it is the fleet's, not a host's)."""
    try:
        return waves.agreed_setting({h.name: {**h.group_data, **h.host_data}.get("sglang_rollout") for h in hosts},
                                    key, ROLLOUT_KEYS)
    except WaveError as exc:
        raise RolloutError(str(exc)) from None


@dataclass(frozen=True)
class GatewayLimits:
    """What keeps a wave within each gateway's allowance: ``max_unavailable``, every host's gateways
    (``sglang_gateways``) and each gateway's workers over the whole inventory."""

    max_unavailable: waves.Size
    spec: str
    memberships: dict[str, tuple[str, ...]]
    worker_counts: dict[str, int]
    roles: dict[str, str] = field(default_factory=dict)  # prefill or decode servers (plan.gateway_fleet)

    def steps(self, wave: Wave, units: dict[str, str]) -> list[tuple[str, ...]]:
        """The wave's hosts as sub-waves run one after another (one, when no gateway is involved)."""
        return waves.split_for_gateways(wave.hosts, self.memberships, self.max_unavailable, units=units,
                                        worker_counts=self.worker_counts, roles=self.roles)


def gateway_limits(opts: RolloutOptions, all_hosts: list[InventoryHost], hosts: list[InventoryHost],
                   units: dict[str, str]) -> GatewayLimits:
    raw = opts.max_unavailable if opts.max_unavailable is not None else _setting(hosts, "max_unavailable")
    flag = "--max-unavailable" if opts.max_unavailable is not None else "sglang_rollout.max_unavailable"
    try:  # the value as given (never str() first: a YAML integer of thousands of digits has no text)
        size = waves.parse_max_unavailable(raw if raw is not None else ROLLOUT_DEFAULTS["max_unavailable"], flag)
    except WaveError as exc:
        raise RolloutError(str(exc)) from None
    spec = str(size)
    try:
        memberships, all_units = fleet_memberships(((h.name, h.group_data, h.host_data) for h in all_hosts),
                                                   strict=True)
    except PlanError as exc:
        raise RolloutError(str(exc)) from None
    counts = waves.gateway_worker_counts(memberships, all_units)
    roles = fleet_roles((h.name, h.group_data, h.host_data) for h in all_hosts)
    return GatewayLimits(size, spec, memberships, counts, roles)


def plan_rollout(opts: RolloutOptions) -> tuple[list[InventoryHost], list[Wave], int]:
    """The hosts, their waves and the failure budget; raises RolloutError before anything runs."""
    try:
        all_hosts = load_inventory(opts.inventory)
    except InventoryError as exc:
        raise RolloutError(str(exc)) from None
    hosts = select(all_hosts, opts.limit)
    check_output(opts.json_path, inputs=[opts.inventory])
    try:
        spec = opts.waves if opts.waves is not None else _setting(hosts, "waves")
        sizes = waves.parse_sizes(spec if spec is not None else ROLLOUT_DEFAULTS["waves"],
                                  "--waves" if opts.waves is not None else "sglang_rollout.waves")
    except WaveError as exc:
        raise RolloutError(str(exc)) from None
    max_fail = opts.max_fail if opts.max_fail is not None else _setting(hosts, "max_fail")
    max_fail = ROLLOUT_DEFAULTS["max_fail"] if max_fail is None else max_fail
    if isinstance(max_fail, bool) or not isinstance(max_fail, int) or max_fail < 0:
        raise RolloutError(f"max_fail: must be a whole number >= 0, got {max_fail!r}")
    canary = [h.name for h in hosts if waves.CANARY_GROUP in h.groups]
    units = {h.name: g for h in hosts if (g := group_name(h.group_data, h.host_data))}
    # A TP group is one instance: --limit takes all its members or none (a partial group
    # would fail in the deploy anyway, after connecting; say it before anything runs).
    selected = set(units)
    for h in all_hosts:
        g = group_name(h.group_data, h.host_data)
        if g and g in units.values() and h.name not in selected:
            chosen = sorted(n for n, grp in units.items() if grp == g)
            raise RolloutError(f"--limit: TP group {g} is one instance over several hosts; {h.name} is a member "
                               f"too (selected: {', '.join(chosen)}): select all of them or none")
    # Gateway hosts (sglang_gateway) first, one host a wave: their workers' drains and re-admissions
    # need them up, and the hosts behind one VIP or DNS name change one at a time (docs/gateway.md).
    fronts = [h for h in hosts if {**h.group_data, **h.host_data}.get("sglang_gateway") not in (None, False)]
    workers = [h for h in hosts if h not in fronts]
    try:
        plan = waves.plan_waves([h.name for h in workers], sizes, canary=canary, units=units) if workers else []
    except WaveError as exc:
        raise RolloutError(str(exc)) from None
    if fronts:
        first = [Wave(k, (h.name,), 1, "a gateway host, before the workers; one gateway host at a time")
                 for k, h in enumerate(fronts, 1)]
        plan = [*first, *(dataclasses.replace(w, number=w.number + len(fronts)) for w in plan)]
    return fronts + workers, plan, max_fail


def plan_gateway_limits(opts: RolloutOptions) -> tuple[GatewayLimits, dict[str, str]]:
    """The rollout's gateway limits and its hosts' tp groups (after plan_rollout accepted ``opts``)."""
    try:
        all_hosts = load_inventory(opts.inventory)
    except InventoryError as exc:
        raise RolloutError(str(exc)) from None
    hosts = select(all_hosts, opts.limit)
    units = {h.name: g for h in hosts if (g := group_name(h.group_data, h.host_data))}
    return gateway_limits(opts, all_hosts, hosts, units), units


_HOST_LINE = re.compile(r"^\s*\[(?P<host>[^\]]+)\]\s*(?P<text>.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _why_missing(output: list[str], hosts: Sequence[str]) -> dict[str, str]:
    """For hosts without a record: the last error-looking line pyinfra printed for them."""
    why: dict[str, str] = {}
    for line in output:
        m = _HOST_LINE.match(_ANSI.sub("", line))
        if not m or m.group("host") not in hosts:
            continue
        text = m.group("text").strip()
        low = text.lower()
        if "could not connect" in low or "connect" in low and "error" in low:
            why[m.group("host")] = f"unreachable: {text}"
        elif ("error" in low or "failed" in low) and m.group("host") not in why:
            why[m.group("host")] = text
    return why


class Interrupt:
    """SIGINT/SIGTERM: finish the running pyinfra run (a wave, a trial), then stop."""

    FIRST = ("the rollout stops after the running wave: its hosts are still being gated "
             "(passed, or rolled back); no later wave starts")
    AGAIN = "still finishing the running wave; no host is left between revisions"

    def __init__(self, say: Callable[[str], object], first: str | None = None, again: str | None = None):
        self.say = say
        self.first, self.again = first or self.FIRST, again or self.AGAIN
        self.requested: str | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> Interrupt:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.requested is None:
            self.say(f"\n{name}: {self.first}")
        else:
            self.say(f"\n{name} again: {self.again}")
        self.requested = name

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


@dataclass
class PyinfraRun:
    records: dict[str, dict[str, Any]]
    returncode: int
    seconds: float
    missing: dict[str, str]  # host -> why there is no record
    lines: list[str]


def run_pyinfra(inventory: str, hosts: Sequence[str], out: TextIO, prefix: str, env: dict[str, str] | None = None,
                extra_args: Sequence[str] = (), context: RunContext | None = None) -> PyinfraRun:
    """One `pyinfra -y INVENTORY deploy.py --limit ...` run for ``hosts``, its output echoed to
    ``out`` line by line behind ``prefix``, and the result record of every host (sglang_deploy/deploy/results.py).
    ``context``: what the run must know beyond the inventory (``sglang_deploy.runcontext``), handed to it
    as one file; ``env``: added to its environment."""
    with tempfile.TemporaryDirectory(prefix="sglang-run-") as tmp:
        results = Path(tmp) / "results.jsonl"
        argv = [sys.executable, "-m", "pyinfra", "-y", *extra_args]
        for h in hosts:
            argv += ["--limit", h]
        argv += [str(Path(inventory).resolve()), str(DEPLOY)]
        run = (context or RunContext()).merged(results_file=str(results))
        env = {**os.environ, **(env or {}), **write_run(run, str(Path(tmp) / "run.json")), "PYTHONUNBUFFERED": "1"}
        t0 = time.monotonic()
        lines: list[str] = []
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            out.write(prefix + line)
            out.flush()
        rc = proc.wait()
        seconds = time.monotonic() - t0
        lines_read = results.read_text(encoding="utf-8").splitlines() if results.exists() else []
        records = host_records(json.loads(raw) for raw in lines_read if raw.strip())
    missing = [h for h in hosts if h not in records]
    return PyinfraRun(records, rc, seconds, _why_missing(lines, missing) if missing else {}, lines)


def run_wave(opts: RolloutOptions, wave: Wave, out: TextIO, total_waves: int) -> WaveRun:
    """One `pyinfra -y INVENTORY deploy.py --limit ...` run for the wave's hosts (or one step of
    them); the deploy is told the rollout's max_unavailable, which it checks again."""
    run = run_pyinfra(opts.inventory, wave.hosts, out, f"wave {wave.number}/{total_waves} | ", opts.env,
                      opts.extra_pyinfra_args,
                      RunContext(max_unavailable=opts.max_unavailable, cache_seed_dir=opts.cache_seed_dir))
    return WaveRun(wave, run.records, run.returncode, run.seconds, run.missing)


def rollout(opts: RolloutOptions, out: TextIO, err: TextIO) -> tuple[int, Summary]:
    """Run the waves; the exit code: 0 every host passed (or was already deployed),
    1 a wave over its failure budget (halted, or the last wave) or interrupted,
    3 completed with failures within the budget, 2 bad input (nothing ran)."""
    summary = Summary()
    try:
        hosts, plan, max_fail = plan_rollout(opts)
        limits, units = plan_gateway_limits(opts)
        steps = {w.number: limits.steps(w, units) for w in plan}
    except (RolloutError, WaveError) as exc:
        err.write(f"error: {exc}\n")
        return 2, summary

    def say(text: str) -> None:
        out.write(text + "\n")
        out.flush()

    say(f"rollout of {len(hosts)} host(s) from {opts.inventory} in {len(plan)} wave(s), "
        f"at most {max_fail} failure(s) per wave:")
    for w in plan:
        say(f"  wave {w.number}: {', '.join(w.hosts)}  ({w.reason})")
        if len(steps[w.number]) > 1:
            say(f"    in {len(steps[w.number])} steps, at most {limits.spec} of a gateway's workers out at once: "
                + " then ".join(", ".join(step) for step in steps[w.number]))
    wave_of = {h: w.number for w in plan for h in w.hosts}
    done: dict[str, dict[str, Any]] = {}
    t_start = time.monotonic()
    # The first host of a hardware class to pass leaves its compile caches here for the later ones.
    seeds = tempfile.TemporaryDirectory(prefix="sglang-cache-seeds-")
    opts = dataclasses.replace(opts, cache_seed_dir=seeds.name)
    with seeds, Interrupt(lambda text: err.write(text + "\n")) as interrupt:
        for w in plan:
            if interrupt.requested:
                summary.halted = f"interrupted ({interrupt.requested}) before wave {w.number}"
                break
            say(f"\n=== wave {w.number}/{len(plan)}: {', '.join(w.hosts)}")
            run = WaveRun(w, {}, 0, 0.0, {})
            reached: list[str] = []
            for step in steps[w.number]:
                so_far = waves.wave_failures(run.records, dataclasses.replace(w, hosts=tuple(reached)))
                if reached and (waves.over_budget(so_far, max_fail) or interrupt.requested):
                    break  # the wave's later steps are not reached
                reached += step
                part = run_wave(opts, dataclasses.replace(w, hosts=step), out, len(plan))
                run.records.update(part.records)
                run.missing.update(part.missing)
                run.returncode = run.returncode or part.returncode
                run.seconds += part.seconds
            for h in reached:  # a step after a failed one is not reached, like a later wave
                done[h] = waves.host_row(w.number, h, run.records.get(h), run.missing.get(h))
            failures = waves.wave_failures(run.records, dataclasses.replace(w, hosts=tuple(reached)))
            summary.waves.append({"wave": w.number, "hosts": list(w.hosts), "size": w.size, "reason": w.reason,
                                  "failures": failures, "seconds": round(run.seconds, 2),
                                  "pyinfra_exit": run.returncode})
            say(f"=== wave {w.number}: {len(reached) - len(failures)} of {len(w.hosts)} passed"
                + (f"; failed: {', '.join(failures)}" if failures else "")
                + (f"; not reached: {', '.join(h for h in w.hosts if h not in reached)}"
                   if len(reached) < len(w.hosts) else "") + f" ({run.seconds:.1f} s)")
            if waves.over_budget(failures, max_fail):
                summary.over_budget = waves.budget_exceeded(w, failures, max_fail)
                if w is not plan[-1]:
                    summary.halted = f"{summary.over_budget}; later waves not started"
                break
            if interrupt.requested and w is not plan[-1]:
                summary.halted = f"interrupted ({interrupt.requested}) after wave {w.number}"
                break
    summary.completed = summary.halted is None
    for host in hosts:
        summary.hosts.append(done.get(host.name) or waves.host_row(None, host.name, None))
    elapsed = time.monotonic() - t_start
    say("\n" + waves.format_summary(summary).rstrip() + f" ({elapsed:.1f} s)")
    if opts.json_path:
        doc = {**summary.as_dict(), "inventory": opts.inventory, "max_fail": max_fail, "seconds": round(elapsed, 2),
               "wave_of": wave_of}
        try:
            Path(opts.json_path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:  # writable when the rollout started; the summary above still stands
            err.write(f"error: --json {opts.json_path}: cannot write: {exc.strerror or exc}\n")
    return summary.exit_code(), summary
