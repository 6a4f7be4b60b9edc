"""`sglang-deploy tune INVENTORY --host HOST`: the hand-tuning hunt, run on one canary.

Every trial is the ordinary deploy (`pyinfra -y INVENTORY deploy.py --limit HOST`), with
the run context (``sglang_deploy.runcontext``) naming the trial's file: its intents form the planner's "trial"
layer, and the gate measures at the requested concurrency levels, may stop early once the
trial cannot win, keeps the host's history out of it and leaves its whole report for this
runner (sglang_deploy/deploy/tuning.py). So every trial is staged, proven with the installed
parser, swapped, restarted and gated like any deploy, and a trial that fails its gate is
rolled back by the deploy itself. Nothing here touches the host directly.

Order of a run:
1. a precheck run (the run context's ``state_file``) reads what the host runs and what the
   inventory plans for it; tuning starts only from a host running, proven, the inventory's
   own revision, since that is where it returns;
2. trials, as the search (sglang_deploy/tuning/search.py) asks for them;
3. always, also after Ctrl-C or a failure: the inventory's revision deployed again and
   gated (the run context's ``regate`` when it is already running), then a second precheck
   proving the host runs that revision again, byte for byte (same content hash);
4. the tuning record written next to the inventory (sglang_deploy/plan/tuning_record.py);
5. with ``--apply``: an ordinary deploy, which now plans with the record's tuned layer.

Only the hosts named are touched: one host, or all members of a multi-node tp group
named by its group name. Ctrl-C never cuts a trial: the running one is finished (passed or
rolled back by its gate), then the host is returned.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import tempfile
import time
from dataclasses import dataclass, field, fields
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TextIO

from sglang_deploy.commands.rollout import Interrupt, PyinfraRun, RolloutError, check_output, run_pyinfra
from sglang_deploy.commands.tune_args import (MAX_BUDGET_S, MAX_BUDGET_TRIALS, TuneError, parse_budget,  # noqa: F401
                                              parse_levels)
from sglang_deploy.deploy.inventory import InventoryError, InventoryHost, load_inventory
from sglang_deploy.gate import load
from sglang_deploy.plan.tpgroups import group_name
from sglang_deploy.tuning import trials
from sglang_deploy.plan.tuning_record import DEFAULT_CONCURRENCY, HardwareClass, TuningRecord
from sglang_deploy.plan.tuning_record_file import records_path, save_record
from sglang_deploy.tuning.search import Search
from sglang_deploy.tuning.settle import describe as describe_decisions
from sglang_deploy.tuning.objective import OBJECTIVES
from sglang_deploy.tuning.space import (TUNABLE, Space, SpaceError, describe as describe_space, load_space,
                                        space_from_dict)
from sglang_deploy.runcontext import RunContext
from sglang_deploy.tuning.trials import STATE_DIR_PREFIX, TrialFile, TrialGate
from sglang_deploy.untrusted import UntrustedInput, load_json, printable, read_text_file


@dataclass
class TuneOptions:
    inventory: str
    host: str
    objective: str = "decode"
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    slo: dict[str, float] = field(default_factory=dict)
    budget_trials: int | None = None
    budget_s: float | None = None
    space_file: str | None = None
    apply: bool = False
    json_path: str | None = None
    seed: int = 0
    verbose: bool = False  # every pyinfra run's output; otherwise only a failing precheck's, return's or apply's tail
    extra_pyinfra_args: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)  # added to the pyinfra runs' environment


DEFAULT_BUDGET_TRIALS = 16
#: The state files the deploy writes for this runner in its state directory (the precheck's
#: state, a trial's gate dump) are read back bounded: a plan and a gate report are kilobytes.
MAX_STATE_BYTES = 16 * 2 ** 20
#: Lines of a failing pyinfra run shown without --verbose.
TAIL_LINES = 15

# ---------------------------------------------------------------------------
# which hosts
# ---------------------------------------------------------------------------


def select_hosts(hosts: Sequence[InventoryHost], name: str) -> list[str]:
    """The host named, or every member of the multi-node tp group named. A member of a group
    alone is refused: one member cannot restart without the others (and must not be tuned
    apart from them). A name matching nothing lists what there is."""
    groups: dict[str, list[str]] = {}
    for h in hosts:
        g = group_name(h.group_data, h.host_data)
        if g:
            groups.setdefault(g, []).append(h.name)
    by_name = {h.name: h for h in hosts}
    if name in by_name:
        h = by_name[name]
        g = group_name(h.group_data, h.host_data)
        if g:
            raise TuneError(f"--host {name}: a member of the multi-node tp group {g} "
                            f"({', '.join(groups[g])}): name the group (--host {g}) to tune it whole")
        return [name]
    if name in groups:
        return groups[name]
    canary = [h.name for h in hosts if name in h.groups]
    if name == "canary" and len(canary) == 1:
        return select_hosts(hosts, canary[0])
    raise TuneError(f"--host {name}: no such host or tp group in the inventory (hosts: "
                    f"{', '.join(sorted(by_name))}" + (f"; tp groups: {', '.join(sorted(groups))}" if groups else "")
                    + ")")


# ---------------------------------------------------------------------------
# the runs
# ---------------------------------------------------------------------------


@dataclass
class HostState:
    host: str
    current: str | None
    deployed: str | None
    planned: str
    sglang_version: str
    plan: dict[str, Any]
    hardware_class: dict[str, Any] = field(default_factory=dict)
    space: dict[str, Any] = field(default_factory=dict)


class Runner:
    """The pyinfra runs of one tune, each limited to the tuned hosts."""

    def __init__(self, opts: TuneOptions, hosts: list[str], out: TextIO, tmp: Path,
                 run: Callable[..., PyinfraRun] = run_pyinfra):
        self.opts, self.hosts, self.out, self.tmp, self._run = opts, hosts, out, tmp, run
        self.records = str(records_path(opts.inventory).resolve())
        self.timings: list[dict[str, Any]] = []  # every pyinfra run: what it was, seconds, exit code

    def pyinfra(self, prefix: str, context: RunContext, tail_on_failure: bool = True) -> PyinfraRun:
        sink = self.out if self.opts.verbose else io.StringIO()
        run = self._run(self.opts.inventory, self.hosts, sink, prefix, dict(self.opts.env),
                        self.opts.extra_pyinfra_args, context.merged(tuning_file=self.records))
        self.timings.append({"run": prefix.strip(" |"), "seconds": round(run.seconds, 2), "exit": run.returncode})
        if run.returncode != 0 and tail_on_failure and not self.opts.verbose:
            for line in run.lines[-TAIL_LINES:]:
                self.out.write(f"{prefix}{line}\n")
            self.out.flush()
        return run

    def states(self, prefix: str) -> dict[str, HostState]:
        """What every tuned host runs and what the inventory plans for it (nothing changes)."""
        path = self.tmp / f"state-{time.monotonic_ns()}.jsonl"
        space = str(Path(self.opts.space_file).resolve()) if self.opts.space_file else None
        run = self.pyinfra(prefix, RunContext(state_file=str(path), space_file=space))
        found: dict[str, HostState] = {}
        if path.exists():
            try:
                text = read_text_file(path, "the precheck's state file", MAX_STATE_BYTES)
            except UntrustedInput as exc:
                raise TuneError(str(exc)) from None
            for n, raw in enumerate(text.splitlines(), 1):
                if raw.strip():
                    state = _host_state(raw, f"the precheck's state file, line {n}")
                    found[state.host] = state
        missing = [h for h in self.hosts if h not in found]
        if missing:
            why = "; ".join(f"{h}: {_no_state_why(run, h)}" for h in missing)
            raise TuneError(f"cannot read the state of {', '.join(missing)}: {why}")
        return found

    def trial(self, number: int, intents: Mapping[str, Any], reason: str, gate: TrialGate
              ) -> tuple[PyinfraRun, dict[str, Any] | None]:
        dump = self.tmp / f"trial-{number}.report.json"
        tf = TrialFile(hosts=tuple(self.hosts), number=number, intents=dict(intents), reason=reason, gate=gate,
                       report_file=str(dump))
        path = self.tmp / f"trial-{number}.json"
        path.write_text(tf.dumps(), encoding="utf-8")
        # REGATE: a trial whose configuration already runs (a re-measure, or the start) is gated as it
        # runs, not skipped as "already deployed".
        run = self.pyinfra(f"trial {number} | ", RunContext(trial_file=str(path), regate=True), tail_on_failure=False)
        return run, read_dump(dump) if dump.exists() else None

    def deploy(self, prefix: str, regate: bool) -> PyinfraRun:
        return self.pyinfra(prefix, RunContext(regate=regate))


_STATE_TYPES = {"host": str, "planned": str, "sglang_version": str, "plan": dict}


def _host_state(raw: str, where: str) -> HostState:
    """One host's line of the precheck's state file (JSON, bounded); TuneError naming the field."""
    try:
        d = load_json(raw, where)
    except UntrustedInput as exc:
        raise TuneError(str(exc)) from None
    if not isinstance(d, dict):
        raise TuneError(f"{where}: not a JSON object")
    for key, kind in _STATE_TYPES.items():
        if not isinstance(d.get(key), kind):
            raise TuneError(f"{where}: {key}: missing or not a {kind.__name__}")
    for key in ("current", "deployed"):
        if d.get(key) is not None and not isinstance(d[key], str):
            raise TuneError(f"{where}: {key}: not a revision")
    if not isinstance(d["plan"].get("intents"), list) or not all(
            isinstance(i, dict) and isinstance(i.get("name"), str) for i in d["plan"]["intents"]):
        raise TuneError(f"{where}: plan.intents: not a list of {{name, value}}")
    hardware = d.get("hardware_class") or {}
    if not isinstance(hardware, dict) or (hardware and set(hardware) != {f.name for f in fields(HardwareClass)}):
        raise TuneError(f"{where}: hardware_class: not the fields of a hardware class")
    space = d.get("space") or {}
    if not isinstance(space, dict):
        raise TuneError(f"{where}: space: not an object")
    if space:
        try:  # the shape space_from_dict reads, dimensions of tunable intents ranked by whole numbers
            parsed = space_from_dict(space)
            ok = all(d.intent in TUNABLE and isinstance(d.values, tuple) and len(d.values) <= 1000
                     and all(isinstance(d.rank.get(o), int) for o in OBJECTIVES) for d in parsed.dimensions)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise TuneError(f"{where}: space: not a tuning space ({type(exc).__name__}: "
                            f"{printable(str(exc))[:200]})") from None
        if not ok:
            raise TuneError(f"{where}: space: a dimension that is not a tunable intent with whole-number ranks")
    return HostState(d["host"], d.get("current"), d.get("deployed"), d["planned"], d["sglang_version"], d["plan"],
                     hardware, space)


def read_dump(path: Path) -> dict[str, Any]:
    """The gate's dump of a trial (``{"outcome", "summary", "report"}``), read bounded. One that
    cannot be read or has the wrong shape makes the trial infeasible with that cause: a trial is
    never scored from figures the runner cannot trust."""
    try:
        doc = load_json(read_text_file(path, "the trial's gate report", MAX_STATE_BYTES), "the trial's gate report")
        if not isinstance(doc, dict):
            raise UntrustedInput("the trial's gate report: not a JSON object")
        shapes: tuple[tuple[str, tuple[type[Any], ...]], ...] = (
            ("outcome", (str, type(None))), ("summary", (str, type(None))), ("report", (dict, type(None))))
        for key, kinds in shapes:
            if not isinstance(doc.get(key), kinds):
                raise UntrustedInput(f"the trial's gate report: {key}: of the wrong type")
        report = doc.get("report") or {}
        report_shapes: tuple[tuple[str, tuple[type[Any], ...]], ...] = (
            ("load", (list, type(None))), ("abandoned", (dict, type(None))),
            ("service_failure", (dict, type(None))), ("error", (dict, type(None))))
        for key, kinds in report_shapes:
            if not isinstance(report.get(key), kinds):
                raise UntrustedInput(f"the trial's gate report: report.{key}: of the wrong type")
        return doc
    except UntrustedInput as exc:
        return {"outcome": "error", "summary": str(exc), "report": None}


def _no_state_why(run: PyinfraRun, host: str) -> str:
    """Why the precheck left no state for ``host``: its result's summary, what pyinfra said of it,
    its last error line."""
    return ((run.records.get(host) or {}).get("summary") or run.missing.get(host) or _last_error(run.lines, host)
            or "no answer")


def _last_error(lines: Sequence[str], host: str) -> str | None:
    for line in reversed(lines):
        if f"[{host}]" in line and ("rror" in line or "failed" in line.lower()):
            return re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
    return None


# ---------------------------------------------------------------------------
# the tune
# ---------------------------------------------------------------------------


@dataclass
class TuneSummary:
    hosts: list[str]
    objective: str
    original: dict[str, str | None] = field(default_factory=dict)  # host -> revision before tuning
    trials: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] | None = None
    restored: bool | None = None
    restore_note: str = ""
    applied: bool | None = None
    apply_note: str = ""
    record_file: str | None = None
    interrupted: str | None = None
    error: str | None = None
    seconds: float = 0.0
    overhead_s: float = 0.0  # the tuner's own time beyond the pyinfra runs
    runs: list[dict[str, Any]] = field(default_factory=list)  # every pyinfra run, timed

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def check_start(states: Mapping[str, HostState]) -> None:
    """Tuning starts only from the inventory's own revision, running and proven: that is what
    the host returns to, byte for byte, and what a restore can re-create from the inventory."""
    for h, s in states.items():
        if s.current != s.planned:
            raise TuneError(f"{h} runs revision {s.current or 'none'}, the inventory plans {s.planned}: deploy the "
                            f"inventory first (pyinfra INVENTORY deploy.py --limit {h}); tuning returns the host "
                            f"to the revision it runs, which must be the inventory's")
        if s.deployed != s.current:
            raise TuneError(f"{h} runs revision {s.current} but it never passed its gate (deployed: "
                            f"{s.deployed or 'none'}): deploy and gate it first")


def options_from_args(args: Any) -> TuneOptions:
    """The command line's options, checked before any host is contacted."""
    trials_budget, seconds_budget = parse_budget(args.budget) if args.budget else (DEFAULT_BUDGET_TRIALS, None)
    try:
        slo = load.parse_slo(args.slo) if args.slo else {}
    except ValueError as exc:
        raise TuneError(f"--slo: {exc}") from None
    if args.objective == "goodput" and not slo:
        raise TuneError("--objective goodput: needs --slo (goodput counts the requests meeting every SLO)")
    if args.space:  # read and checked here (a FIFO is refused, not read); the precheck applies it
        try:
            load_space(args.space, Space(()))
        except SpaceError as exc:
            raise TuneError(f"--space {exc}") from None
    return TuneOptions(inventory=args.inventory, host=args.host, objective=args.objective,
                       concurrency=(parse_levels(args.concurrency) if args.concurrency is not None
                                    else DEFAULT_CONCURRENCY),
                       slo=slo, budget_trials=trials_budget,
                       budget_s=seconds_budget, space_file=args.space, apply=args.apply, json_path=args.json,
                       seed=args.seed, verbose=args.verbose)


def _say(out: TextIO) -> Callable[[str], None]:
    def say(text: str) -> None:
        out.write(text + "\n")
        out.flush()
    return say


def tune(opts: TuneOptions, out: TextIO, err: TextIO) -> tuple[int, TuneSummary]:
    """The whole tune; (exit code, summary). See the module's docstring for the order."""
    t0 = time.monotonic()
    summary = TuneSummary(hosts=[], objective=opts.objective)
    say = _say(out)
    try:
        try:
            inventory_hosts = load_inventory(opts.inventory)
        except InventoryError as exc:
            raise TuneError(str(exc)) from None
        hosts = summary.hosts = select_hosts(inventory_hosts, opts.host)
        check_json_path(opts)
    except TuneError as exc:
        err.write(f"error: {exc}\n")
        return 2, summary
    # the tuner's state directory: trial files, gate dumps and precheck states; a trial file may
    # name a report file only inside it (trials.check_report_file)
    with tempfile.TemporaryDirectory(prefix=STATE_DIR_PREFIX) as tmp:
        if opts.json_path and _inside(opts.json_path, tmp):
            err.write(f"error: --json {opts.json_path}: inside the tuner's state directory; name another file\n")
            return 2, summary
        runner = Runner(opts, hosts, out, Path(tmp))
        try:
            code = _tune(opts, runner, summary, say, err)
        finally:
            summary.seconds = round(time.monotonic() - t0, 2)
            summary.runs = list(runner.timings)
    _write_json(opts.json_path, summary, err)
    return code, summary


def _inside(path: str, folder: str) -> bool:
    target, root = Path(path).resolve(), Path(folder).resolve()
    return target == root or root in target.parents


def check_json_path(opts: TuneOptions) -> None:
    """``--json FILE`` must not be a file the tune reads (the inventory, its tuning record file,
    the --space file; paths compared resolved, so a symlink or ``..`` is seen through), and must
    be writable; checked before any host is contacted."""
    path = opts.json_path
    if path is None:
        return
    reads = [("the tuning record file", str(records_path(opts.inventory)))]  # the inventory: check_output
    if opts.space_file:
        reads.append(("the --space file", opts.space_file))
    target = Path(path).resolve() if path.strip() else None
    for what, other in reads:
        if target is not None and target == Path(other).resolve():
            raise TuneError(f"--json {path}: is {what} ({other}); name another file")
    try:
        check_output(path, inputs=[opts.inventory])
    except RolloutError as exc:  # the rollout's checks of an output file
        raise TuneError(str(exc)) from None


def _tune(opts: TuneOptions, runner: Runner, summary: TuneSummary, say: Callable[[str], None],
          err: TextIO) -> int:
    hosts = runner.hosts
    say(f"tune {', '.join(hosts)} from {opts.inventory}: objective {opts.objective} at concurrency "
        f"{trials.levels_text(opts.concurrency)}" + (f", SLO {opts.slo}" if opts.slo else ""))
    try:
        states = runner.states("precheck | ")
        check_start(states)
        leader = states[hosts[0]]
        space = space_from_dict(leader.space)
    except TuneError as exc:
        err.write(f"error: {exc}\n")
        summary.error = str(exc)
        return 2
    summary.original = {h: s.current for h, s in states.items()}
    for line in describe_space(space, opts.objective):
        say(f"  {line}")
    planned = {i["name"]: i["value"] for i in leader.plan["intents"]}
    start = {d: planned[d] for d in space.intents if d in planned}
    if not space.dimensions:
        err.write("error: nothing to tune: the space has no dimension for this host's plan\n")
        summary.error = "empty space"
        return 2
    search = Search(space, start, opts.objective, opts.budget_trials, opts.budget_s, opts.seed)
    say(f"starting from revision {leader.current}: {trials.describe(start)}")
    pyinfra_s = 0.0
    t_loop = time.monotonic()
    with Interrupt(lambda text: err.write(text + "\n"),
                   first="the tune stops after the running trial (its gate passes or rolls it back), then the host "
                         "returns to the revision it ran before",
                   again="still finishing the running trial; the host then returns to its revision") as interrupt:
        try:
            while not interrupt.requested:
                trial = search.ask()
                if trial is None:
                    break
                gate = TrialGate(opts.concurrency, dict(opts.slo),
                                 (opts.objective, trial.abandon_below) if trial.abandon_below else None)
                reason = (f"tune trial {trial.number} ({trial.purpose}): {trials.describe(trial.config, start)}")
                say(f"trial {trial.number:>2} {trial.purpose:<9} {trials.describe(trial.config, start)}: deploying")
                run, dump = runner.trial(trial.number, trial.config, reason, gate)
                pyinfra_s += run.seconds
                record = run.records.get(hosts[0])
                if record is None and run.missing.get(hosts[0]):
                    record = {"summary": run.missing[hosts[0]]}
                o = trials.outcome_of(record, dump, opts.objective)
                o.figures["trial_s"] = round(run.seconds, 2)
                search.tell(trial, o)
                row = {"trial": trial.number, "purpose": trial.purpose, "config": dict(trial.config),
                       "status": o.status, "objective": o.objective, "cause": o.cause, "seconds": round(run.seconds, 2),
                       "figures": o.figures}
                summary.trials.append(row)
                say(_trial_line(row, opts.objective, start))
            if interrupt.requested:
                summary.interrupted = interrupt.requested
        except Exception as exc:  # noqa: BLE001 -- whatever broke, the host goes back first
            summary.error = f"{type(exc).__name__}: {exc}"
            err.write(f"error: the tune stopped: {summary.error}; returning the host to its revision\n")
        finally:
            loop_s = time.monotonic() - t_loop
            summary.overhead_s = round(max(0.0, loop_s - pyinfra_s), 2)
            _restore(runner, summary, say)
    result = search.result()
    config, value, used = result.config, result.objective, result.trials
    if config is not None:
        summary.best = {"config": dict(config), "objective": value, "trials": used,
                        "proposed": dict(result.proposed or {}),
                        "decisions": {n: d.as_dict() for n, d in result.decisions.items()}}
        figure = f"{opts.objective} {value:.4g}" if value is not None else "not measured as a whole (budget spent)"
        say(f"best: {trials.describe(config)}: {figure} ({used} trial(s))")
        for line in describe_decisions(result.decisions):
            say(f"  {line}")
        if summary.interrupted is None and summary.error is None:
            summary.record_file = str(_write_record(opts, runner, states[hosts[0]], summary))
            say(f"tuning record written: {summary.record_file}")
    else:
        say("no trial was feasible: no record written")
    if not summary.restored:
        return 1
    if opts.apply and summary.record_file:
        _apply(runner, summary, say)
        if not summary.applied:
            return 1
    if summary.interrupted or summary.error or summary.best is None:
        return 3
    return 0


def _restore(runner: Runner, summary: TuneSummary, say: Callable[[str], None]) -> None:
    """The inventory's revision again, gated (also when it is already running), then proven:
    every host's running revision is the one it ran before tuning."""
    say("\nreturning the host to the revision it ran before tuning (gated again)")
    try:
        failed = _not_passed(runner.deploy("restore | ", regate=True))
        states = runner.states("verify | ")
        wrong = [f"{h} runs {s.current or 'nothing'}, not {summary.original.get(h)}" for h, s in states.items()
                 if s.current != summary.original.get(h) or s.deployed != s.current]
    except Exception as exc:  # noqa: BLE001
        failed, wrong = [f"{type(exc).__name__}: {exc}"], []
    summary.restored = not failed and not wrong
    summary.restore_note = "; ".join(failed + wrong) or (
        "running " + ", ".join(f"{h} {r}" for h, r in summary.original.items()) + " again, gated")
    say(("returned: " if summary.restored else "NOT returned: ") + summary.restore_note)


def _apply(runner: Runner, summary: TuneSummary, say: Callable[[str], None]) -> None:
    """--apply: the ordinary deploy, which now plans with the record's tuned layer."""
    say("\n--apply: deploying the best configuration (the inventory's plan with the new tuned layer)")
    run = runner.deploy("apply | ", regate=False)
    bad = _not_passed(run)
    summary.applied = not bad
    summary.apply_note = "; ".join(bad) or ", ".join(
        f"{h} now runs {rec.get('running_revision')}" for h, rec in run.records.items())
    say(("applied: " if summary.applied else "apply FAILED: ") + summary.apply_note)


def _not_passed(run: PyinfraRun) -> list[str]:
    """Each host of a return or apply run that neither passed its gate nor was already deployed, and why."""
    bad = [f"{h}: {rec.get('result')}: {rec.get('summary')}" for h, rec in run.records.items()
           if rec.get("result") not in ("passed", "unchanged")]
    return bad + [f"{h}: {why}" for h, why in run.missing.items()]


def _trial_line(row: Mapping[str, Any], objective: str, start: Mapping[str, Any]) -> str:
    value = row["objective"]
    figure = f"{objective} {value:.4g}" if isinstance(value, (int, float)) else "-"
    what = row["status"] + (f" ({row['cause']})" if row.get("cause") else "")
    return (f"trial {row['trial']:>2} {row['purpose']:<9} {trials.describe(row['config'], start)}: {figure}; "
            f"{what} [{row['seconds']:.1f} s]")


def _write_json(path: str | None, summary: TuneSummary, err: TextIO) -> None:
    if not path:
        return
    try:
        Path(path).write_text(json.dumps(summary.as_dict(), indent=2, default=str) + "\n", encoding="utf-8")
    except OSError as exc:
        err.write(f"error: --json {path}: cannot write: {exc.strerror or exc}\n")


def _write_record(opts: TuneOptions, runner: Runner, leader: HostState, summary: TuneSummary) -> Path:
    """The tuning record of the host's hardware class, beside the inventory (others kept)."""
    best = summary.best or {}
    try:
        version = metadata.version("sglang-deploy")
    except metadata.PackageNotFoundError:
        version = ""
    record = TuningRecord(
        hardware=HardwareClass(**leader.hardware_class), objective=opts.objective,
        intents=dict(best.get("config") or {}), measured_on=runner.hosts[0],
        measured_at=dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        trial_count=len(summary.trials), concurrency=tuple(opts.concurrency), slo=dict(opts.slo),
        evidence=trials.evidence(summary.trials, best.get("config") or {}),
        decisions=dict(best.get("decisions") or {}),
        trials=[{"number": r["trial"], "config": r["config"], "status": r["status"], "objective": r["objective"],
                 "cause": r["cause"], "figures": r["figures"]} for r in summary.trials],
        tool_version=version)
    path = records_path(opts.inventory)
    save_record(path, record)
    return path
