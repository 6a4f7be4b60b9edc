"""The gate's deploy callbacks: run at execute time (python.call), on the controller, with
the host's connection for the host-side reads and writes. The gate itself is the core's
(sglang_deploy.gate); this module runs it from the controller, or on the host from its
zipapp in a private directory there (HostGateDir), and records what it found.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

import gevent
import httpx
from pyinfra import logger
from pyinfra.api import StringCommand
from pyinfra.api.host import Host

from sglang_deploy.deploy import calibration, gatezip, tpgroup, tuning
from sglang_deploy.deploy.context import HostDeploy, Prepared
from sglang_deploy.deploy.hostscript import embedded
from sglang_deploy.deploy.operations import clear_deployed_command, downtime_file, mark_deployed_command
from sglang_deploy.deploy.results import record_result
from sglang_deploy import downtime
from sglang_deploy.gate import outcomes
from sglang_deploy.lifecycle import rollback_policy
from sglang_deploy.gate.client import wait_ready
from sglang_deploy.gate.errors import GateError, ServiceDown
from sglang_deploy.gate.options import CheckOptions, HostRefs, to_file_dict
from sglang_deploy.gate.report import error_report, explain_slow
from sglang_deploy.gate.run import run_check
from sglang_deploy.gate.watch import SystemdWatch
from sglang_deploy.gate.verdict import parse_fail_on
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.render import watch_dir
from sglang_deploy.plan import pd
from sglang_deploy.plan.settings import GATE_ADDED_BUDGET_S, GATE_PREFILL_TOKENS
from sglang_deploy.lifecycle.revision import Layout

HEALTH_SCRIPT = Path(__file__).resolve().parent / "host" / "health.py"
NO_REPORT = "gate could not measure: the gate did not report"


def gate_url(host: Host, p: Prepared) -> str:
    """What the controller measures: ``sglang_gate.url``, else the host's address and the port."""
    if p.spec.gate.url:
        return p.spec.gate.url
    address = host.data.get("ssh_hostname") or host.name
    return _http_url(address, p.plan.intents["port"].value)


def on_host_url(plan: Plan) -> str:
    """What the gate measures on the host itself: the address the server binds (loopback for a wildcard)."""
    bind = str(plan.intents["host"].value or "").strip("[]")
    if bind in ("", "0.0.0.0"):
        bind = "127.0.0.1"
    elif bind == "::":
        bind = "::1"
    return _http_url(bind, plan.intents["port"].value)


def _http_url(address: str, port: Any) -> str:
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"
    return f"http://{address}:{port}"


def gate_where(host: Host, p: Prepared) -> str:
    if p.gate_on_host:
        return f"on the host, {on_host_url(p.plan)}"
    return gate_url(host, p)


def sh(host: Host, command: str) -> tuple[bool, str]:
    """Run ``command`` over the host's connection now: (succeeded, stdout)."""
    ok, output = host.run_shell_command(StringCommand(command), print_output=False, print_input=False)
    return ok, "\n".join(output.stdout_lines)


def unit_watch(host: Host, layout: Layout) -> SystemdWatch:
    """The service's unit, read over the host's SSH connection."""
    return SystemdWatch(lambda command: sh(host, command)[1], f"{layout.service}.service")


def _unit_watch(host: Host, ctx: HostDeploy, p: Prepared) -> SystemdWatch:
    """What the gate (and the rollback's confirmation) watches: the host's unit; at rank 0 of
    a multi-node tp group, every member's unit (tpgroup.GroupWatch)."""
    watch = unit_watch(host, p.layout)
    if ctx.tp is not None and ctx.tp.is_leader(ctx):
        return ctx.tp.watch(watch, lambda member: unit_watch(member.host, member.prepared.layout))
    return watch


def history_path(layout: Layout) -> str:
    return layout.marker("history.jsonl")


def _gate_lines_command(layout: Layout, lines: int = 500) -> str:
    """The newest ``lines`` gate lines of the host's history (the baseline): the continuous check's
    own lines (``"kind":"watch"``, one per interval) must not crowd them out of the tail."""
    return (f"grep -F '\"kind\":\"gate\"' {shlex.quote(history_path(layout))} 2>/dev/null | "
            f"tail -n {int(lines)}; true")


def append_history(host: Host, layout: Layout, entry: dict[str, Any]) -> None:
    line = json.dumps(entry, separators=(",", ":"), sort_keys=True, default=str)
    ok, _ = sh(host, f"mkdir -p {shlex.quote(layout.state_dir)} && printf '%s\\n' {shlex.quote(line)} >> "
                     f"{shlex.quote(history_path(layout))}")
    if not ok:
        host.log(f"could not append to {history_path(layout)}", logger.warning)


def hardware(plan: Plan) -> str:
    g = plan.gpus
    return outcomes.hardware_key(g.count, g.model, g.compute_capability)


# -- the gate -------------------------------------------------------------------


def gate_callback(state, host: Host, ctx: HostDeploy, p: Prepared) -> bool:
    try:
        return _gate(host, ctx, p)
    except Exception as exc:  # noqa: BLE001 -- a bug here must read as the gate's failure, not a slow server
        ctx.gate.outcome = outcomes.Outcome(outcomes.ERROR, f"gate could not measure: {type(exc).__name__}: {exc}")
        ctx.gate.step = rollback_policy.next_step(ctx.gate.outcome, p.rollback is not None)
        host.log_styled(ctx.gate.outcome.summary, fg="red", log_func=logger.error)
        trial = tuning.current_trial(host.name)
        if trial is not None:
            tuning.write_dump(trial, ctx.gate.outcome, ctx.gate.report)
        return False


def _gate(host: Host, ctx: HostDeploy, p: Prepared) -> bool:
    if p.start_budget is not None:
        host.log(f"gate: start budget {p.start_budget.line()}")
    watch = _unit_watch(host, ctx, p)
    watch.failure()  # the unit as the restart left it
    on_host = p.gate_on_host
    report = (_gate_on_host if on_host else _gate_from_controller)(host, p, watch)
    down = report.get("service_failure")
    if down:
        failure, journal = down["reason"], down.get("journal") or ""
    else:
        # A crash right after the last request (or before the measurement began) fails it too.
        failure = watch.failure()
        journal = watch.journal() if failure or report.get("verdict") == "error" else ""
    report["gate_ran_on"] = "host" if on_host else "controller"
    ctx.gate.report = report
    outcome = outcomes.classify(report, failure, journal, on_host=on_host)
    # The restart's stamps and the server's log lines, read once: a tp group's at rank 0, whose
    # stop began the group's restart and whose server answers (its other members' are not read)
    stamped = ctx.tp is None or ctx.tp.is_leader(ctx)
    started = start_stamps(host, p) if stamped and p.actions.restart else None
    if outcome.kind == outcomes.NOT_READY and started is not None:  # where the start stalled
        head, sep, tail = outcome.summary.partition("; last journal lines:")
        outcome = outcomes.Outcome(outcome.kind, f"{head}; {stalled(p, started)}{sep}{tail}")
    ctx.gate.outcome = outcome
    ctx.gate.step = rollback_policy.next_step(outcome, p.rollback is not None)
    trial = tuning.current_trial(host.name)
    if trial is not None:
        tuning.write_dump(trial, outcome, report)
    summary = {"model": p.plan.model_path, "hardware": hardware(p.plan), "argv": list(p.plan.argv)}
    entry = outcomes.history_entry("gate", p.revision, outcome, report, summary, p.plan.sglang_version)
    if started is not None:
        ctx.gate.downtime = entry["downtime"] = serving_gap(started, report, on_host)
        host.log(downtime.summary(ctx.gate.downtime))
    if trial is None:  # a trial's figures are not this host's history (nor the next deploy's baseline)
        append_history(host, p.layout, entry)
    if outcome.passed:
        host.log_styled(f"gate passed: {outcome.summary}", fg="green", log_func=logger.info)
        if trial is None:  # the fleet's calibration of the speed model (plan/calibration.py), beside the inventory
            calibration.record(calibration.samples_file(host.groups), p.plan, report, host.name,
                               lambda text: host.log(text, logger.warning))
        return True
    host.log_styled(outcome.summary, fg="red", log_func=logger.error)
    return False


#: A command's line that says the host's clock (append it to any command): ``clock <seconds>``.
CLOCK_COMMAND = "echo clock $(date +%s.%N)"


def host_clock(lines: list[str]) -> float | None:
    """The host's clock from a command's ``clock <seconds>`` line (CLOCK_COMMAND), None without one;
    its offset from this machine's is that minus the middle of the SSH round trip that read it."""
    for line in lines:
        words = line.split()
        if len(words) == 2 and words[0] == "clock" and words[1].replace(".", "", 1).isdigit():
            return float(words[1])
    return None


def start_stamps(host: Host, p: Prepared) -> tuple[dict[str, float], float | None, float]:
    """The restart's stamps (written on the host by restart_service) and the new server's own log
    lines of its start (``downtime.LOG_MARKS``, from the journal since the process start, bounded
    in number and length), with the host's clock and the offset from this machine's: (stamps,
    the host's clock now, offset), the offset measured over one SSH round trip (its half is the error)."""
    q = shlex.quote
    stamps_file, unit = q(downtime_file(p.layout)), q(f"{p.layout.service}.service")
    t0 = time.time()
    _, text = sh(host, f"cat {stamps_file} 2>/dev/null; {CLOCK_COMMAND}; "
                       f"s=$(awk '$1==\"started\"{{print int($2)}}' {stamps_file} 2>/dev/null); "
                       f"[ -n \"$s\" ] && journalctl -u {unit} -o short-unix --since @$s --no-pager 2>/dev/null "
                       f"| grep -E {q(downtime.LOG_PATTERN)} | cut -c1-{downtime.LOG_LINE_CHARS} "
                       f"| tail -n {downtime.LOG_LINES_MAX} | sed 's/^/log /'; true")
    t1 = time.time()
    lines = text.splitlines()
    stamps = downtime.parse_stamps("\n".join(line for line in lines if not line.startswith("log ")))
    stamps.update(downtime.log_stamps((line[4:] for line in lines if line.startswith("log ")), stamps.get("started")))
    clock = host_clock(lines)
    return stamps, clock, 0.0 if clock is None else clock - (t0 + t1) / 2


def serving_gap(started: tuple[dict[str, float], float | None, float], report: dict[str, Any],
                on_host: bool) -> dict[str, Any]:
    """The restart's serving gap and the phases of the new server's start (``start_stamps``), up to
    the gate's readiness moment in the host's clock (a gate run here is moved by the clock offset)."""
    stamps, _, offset = started
    stamps = dict(stamps)
    ready_at = (report.get("ready") or {}).get("ready_at")
    if ready_at is not None:
        stamps["ready"] = float(ready_at) + (0.0 if on_host else offset)
    return downtime.measure(stamps)


def stalled(p: Prepared, started: tuple[dict[str, float], float | None, float]) -> str:
    """For a start that never became ready: the phase it stalled in and the budget it had."""
    stamps, clock, _ = started
    budget = p.start_budget.line() if p.start_budget is not None else f"{p.ready_timeout_s:g} s"
    return f"{downtime.stalled_in(stamps, clock if clock is not None else time.time())}; start budget {budget}"


class HostGateDir:
    """A private temporary directory on the host holding the gate's zipapp (sglang_deploy/deploy/gatezip.py);
    removed on exit. ``argv(args)`` is the zipapp's command line with the venv's Python in
    isolated mode (-I: no PYTHONPATH or user site; the zip is first on sys.path, so its
    libraries win over the venv's, while the venv's nvidia-ml-py stays reachable for NVML)."""

    def __init__(self, host: Host, python: str):
        self.host, self.python, self.path = host, python, ""

    def __enter__(self) -> HostGateDir:
        ok, out = sh(self.host, "mktemp -d /tmp/sglang-gate.XXXXXXXX")
        self.path = out.strip()
        if not ok or not self.path.startswith("/tmp/sglang-gate."):
            raise GateError("on-host gate", "cannot make a temporary directory on the host")
        self.put("gate.pyz", gatezip.build())
        return self

    def put(self, name: str, data: bytes) -> str:
        """A file in the directory (mode 0600: the directory is the controller's alone)."""
        remote = f"{self.path}/{name}"
        sh(self.host, f"umask 077 && : > {shlex.quote(remote)}")
        self.host.put_file(BytesIO(data), remote, print_output=False, print_input=False)
        return remote

    def argv(self, *args: str) -> list[str]:
        return [self.python, "-I", f"{self.path}/gate.pyz", *args]

    def __exit__(self, *exc: object) -> None:
        if self.path.startswith("/tmp/sglang-gate."):
            sh(self.host, f"rm -rf {shlex.quote(self.path)}")


def gate_options(host: Host, p: Prepared, url: str, baseline: str | None) -> CheckOptions:
    """The one CheckOptions of a host's gate, wherever it runs: the inventory's gate settings
    (``sglang_gate``), the plan to expect, the hardware key and, for a tuning trial, how the
    trial is measured. Who runs it adds the rest: the API key and the watch (from the
    controller), or NVML and the host's references (on the host, through the options file)."""
    spec, plan, g = p.spec, p.plan, p.spec.gate
    # A prefill server is measured by its prefill alone: it needs one. A decode server asked with SGLang's
    # fake bootstrap host computes no prompt (its KV would come from a prefill server): nothing to measure.
    role = pd.role(plan)
    prefill = 0 if role == "decode" else g.prefill_tokens or (GATE_PREFILL_TOKENS if role == "prefill" else 0)
    opts = CheckOptions(url=url, target_tok_s=spec.target_tok_s, baseline=baseline, tolerance=g.tolerance,
                        expect_plan=plan.as_dict(), fail_on=parse_fail_on(",".join(g.fail_on) if g.fail_on else None),
                        ready_timeout=p.ready_timeout_s, repeats=g.repeats, max_tokens=g.max_tokens,
                        hardware=hardware(plan), accept_slower=g.accept_slower,
                        prediction_floor=g.prediction_floor, concurrency=g.level_for(spec.objective),
                        prefill_tokens=_prefill_tokens(plan, prefill), added_budget_s=GATE_ADDED_BUDGET_S, role=role)
    trial = tuning.current_trial(host.name)
    if trial is not None:  # a trial is measured as its search asks: its own levels, no prefill
        opts.concurrency = tuple(trial.gate.concurrency)
        opts.slo = dict(trial.gate.slo)
        opts.abandon_below = trial.gate.abandon_below
        opts.prefill_tokens, opts.added_budget_s = 0, None
    return opts


def _prefill_tokens(plan: Plan, tokens: int) -> int:
    """The prefill prompt's length, within half the plan's context length when the plan sets one
    (SGLang refuses a request longer than its context: the prompt and its one output token)."""
    context = plan.intents["context_length"].value if "context_length" in plan.intents else None
    if isinstance(context, int) and not isinstance(context, bool) and context > 0:
        return min(tokens, context // 2)
    return tokens


def watch_options(host: Host, p: Prepared) -> bytes:
    """The gate options the continuous check (sglang_deploy/deploy/host/watch.py) measures the
    revision with: the deploy gate's own (the plan to compare, target, tolerance, hardware key)
    against the server's port on the host, the unit watched, the API key named by its file in the
    watch's folder (never the key itself). The watch sets its own bounds (tokens, repeats, waits)
    and the baseline at each run. An operator's ``accept_slower`` is the deploy's alone: it lets
    the restarted revision's slower result pass once, and the continuous check compares with that
    result from then on (a later drop below it still fails the check)."""
    opts = gate_options(host, p, on_host_url(p.plan), None)
    opts.accept_slower = None
    # a light check: the single stream alone (a prefill server's: its prefill, which is all it does)
    opts.concurrency, opts.prefill_tokens = 1, (opts.prefill_tokens if opts.role == "prefill" else 0)
    # The watch sets its own wait for readiness; the file holds one that does not move with the
    # host's recorded starts (the start budget), so an unchanged deploy leaves the file as it is.
    given = p.spec.gate.ready_timeout_s
    opts.ready_timeout = float(given) if given is not None else float(p.plan.timeout_start_s)
    refs = HostRefs(api_key_file=f"{watch_dir(p.layout.state_dir)}/key" if p.api_key else None,
                    watch_unit=f"{p.layout.service}.service")
    return json.dumps(to_file_dict(opts, refs), sort_keys=True).encode()


def _gate_from_controller(host: Host, p: Prepared, watch: SystemdWatch) -> dict[str, Any]:
    """The gate in this process against the host's port; the unit watched over SSH, and
    the service's GPUs sampled on the host meanwhile (`sample-gpus` from the zipapp) for
    the likely causes of a slow result."""
    plan = p.plan
    trial = tuning.current_trial(host.name)
    with tempfile.TemporaryDirectory(prefix="sglang-gate-") as tmp:
        baseline = None  # a trial is measured, not compared with the host's best of another configuration
        if trial is None:
            baseline = Path(tmp) / "history.jsonl"
            _, history = sh(host, _gate_lines_command(p.layout))
            baseline.write_text(history + "\n" if history else "", encoding="utf-8")
        opts = gate_options(host, p, gate_url(host, p), str(baseline) if baseline else None)
        opts.api_key, opts.watch = p.api_key, watch
        with contextlib.ExitStack() as stack:
            try:
                remote: HostGateDir | None = stack.enter_context(HostGateDir(host, plan.python))
            except GateError as exc:  # no GPU samples then; the gate itself does not need the host
                remote, samples = None, json.dumps({"samples": None, "error": exc.message})
            if remote is not None:
                sampler = remote.argv("sample-gpus", "--out", f"{remote.path}/nvml.json", "--until-file",
                                      f"{remote.path}/stop", "--max-seconds", str(p.ready_timeout_s + 1800),
                                      "--indices", ",".join(str(i) for i in plan.gpus.indices))
                sh(host, f"nohup {shlex.join(sampler)} >/dev/null 2>&1 </dev/null &")
            try:
                report = run_check(opts, progress=lambda msg: host.log(f"gate: {msg}"))
            finally:
                if remote is not None:
                    q = shlex.quote
                    _, samples = sh(host, f"touch {q(remote.path)}/stop; for i in $(seq 50); do "
                                          f"test -e {q(remote.path)}/nvml.json && break; sleep 0.1; done; "
                                          f"cat {q(remote.path)}/nvml.json 2>/dev/null")
    try:
        recorded = json.loads(samples)
    except ValueError:
        recorded = {"samples": None, "error": "the sampler left no samples"}
    if recorded.get("error"):
        report.setdefault("warnings", []).append(f"no GPU samples from the host: {recorded['error']}")
    elif recorded.get("samples") is not None and report.get("verdict") in ("pass", "fail"):
        explain_slow(report, recorded["samples"], plan.as_dict())
    return report


def _gate_on_host(host: Host, p: Prepared, watch: SystemdWatch) -> dict[str, Any]:
    """The same gate, run on the GPU host from the zipapp: for a server bound to loopback.
    It watches the unit there itself and samples NVML (clocks, throttling, memory, other
    processes) for the likely causes. Its options travel as one file (``options.json``,
    gate/options.py's format) beside the zipapp, and the API key as another (``key``): both
    0600 in a private temporary directory that is removed afterwards, neither in argv."""
    plan = p.plan
    trial = tuning.current_trial(host.name)
    opts = gate_options(host, p, on_host_url(plan), None)
    opts.nvml = True
    with HostGateDir(host, plan.python) as remote:
        if trial is None:  # the history's gate lines, copied beside the zipapp (see _gate_lines_command)
            opts.baseline = f"{remote.path}/baseline.jsonl"
            sh(host, f"{{ {_gate_lines_command(p.layout)}; }} > {shlex.quote(opts.baseline)}")
        # The gate there watches rank 0's unit; with a group, the other members' units are read
        # from here, and a failure among them ends that gate through the abort file.
        abort = f"{remote.path}/abort"
        refs = HostRefs(api_key_file=remote.put("key", p.api_key.encode()) if p.api_key else None,
                        watch_unit=watch.unit, abort_file=abort if isinstance(watch, tpgroup.GroupWatch) else None)
        options = remote.put("options.json", json.dumps(to_file_dict(opts, refs), sort_keys=True).encode())
        argv = remote.argv("check", "--options", options, "--json", f"{remote.path}/report.json")
        members = None
        if isinstance(watch, tpgroup.GroupWatch):
            def write_abort(text: str) -> None:  # whole, or not at all: written aside, then renamed
                sh(host, f"mv {shlex.quote(remote.put('abort.new', text.encode()))} {shlex.quote(abort)}")

            members = gevent.spawn(watch.abort_when_a_member_fails, write_abort)
        host.log(f"gate: on the host, {on_host_url(plan)} (up to {p.ready_timeout_s:g} s for readiness)")
        try:
            _, output = sh(host, shlex.join(argv) + " >/dev/null 2>&1; echo \"exit=$?\"; "
                                 f"cat {shlex.quote(remote.path)}/report.json 2>/dev/null")
        finally:
            if members is not None:
                members.kill()
    head, _, body = output.partition("\n")
    try:
        return json.loads(body)
    except ValueError:
        return error_report(opts, GateError(
            "on-host gate", f"the gate on the host left no report ({head.strip() or 'no exit status'}); "
                            f"run {plan.python} -I gate.pyz check --options options.json there by hand to see why"))


# -- the rollback's confirmation and the failure line -------------------------------


def confirm_callback(state, host: Host, ctx: HostDeploy, p: Prepared, target: str) -> bool:
    """Readiness of the restored revision ``target`` (no measurement); marks it deployed when ready."""
    watch = _unit_watch(host, ctx, p)
    try:
        watch.failure()
        if p.gate_on_host:
            ready = _ready_on_host(host, p, watch)
        else:
            headers = {"Authorization": f"Bearer {p.api_key}"} if p.api_key else {}
            with httpx.Client(base_url=gate_url(host, p), headers=headers, trust_env=False) as client:
                ready = wait_ready(client, p.ready_timeout_s, lambda msg: host.log(f"rollback: {msg}"),
                                   watch=watch.check)["ready_s"]
        outcome = outcomes.Outcome(outcomes.PASS, f"ready again after {ready:g} s")
    except ServiceDown as exc:
        outcome = outcomes.classify(None, exc.reason, exc.journal)
    except GateError as exc:
        outcome = outcomes.Outcome(outcomes.NOT_READY, f"not ready: {exc.message}")
    except Exception as exc:  # noqa: BLE001
        outcome = outcomes.Outcome(outcomes.ERROR, f"readiness check failed: {type(exc).__name__}: {exc}")
    finish_rollback(host, ctx, p, target, outcome.passed, outcome,
                    outcome.summary + ", marked deployed" if outcome.passed
                    else f"the restored revision is not healthy either: {outcome.summary}")
    return outcome.passed


def finish_rollback(host: Host, ctx: HostDeploy, p: Prepared, target: str, ready: bool,
                    history: outcomes.Outcome, result: str, extra: dict[str, Any] | None = None) -> None:
    """After the restored revision ``target`` was found ``ready`` (or not): mark it deployed (or
    clear the marker), record ``result`` and append the rollback's history line (``history``, ``extra``)."""
    ctx.gate.rollback_ok, ctx.gate.rollback_result = ready, result
    sh(host, mark_deployed_command(p.layout, target) if ready else clear_deployed_command(p.layout))
    _, version = sh(host, f"cat {shlex.quote(p.layout.revision_dir(target))}/version 2>/dev/null; true")
    append_history(host, p.layout, outcomes.history_entry(
        "rollback", target, history, None, {"rolled_back_from": p.revision, **(extra or {})},
        version or p.plan.sglang_version))


def _ready_on_host(host: Host, p: Prepared, watch: SystemdWatch) -> float:
    """Seconds until the server answers on the host (scripts/health.py there), watching the
    unit; raises GateError after the ready timeout, ServiceDown when the unit goes down."""
    url, timeout = on_host_url(p.plan), p.ready_timeout_s
    command = embedded(HEALTH_SCRIPT, p.plan.python, [url], options=["-I", "-S"])
    t0 = time.monotonic()
    while True:
        ok, _ = sh(host, command)
        if ok:
            return round(time.monotonic() - t0, 3)
        watch.check(force=True)
        if time.monotonic() - t0 > timeout:
            raise GateError("ready", f"the server never became ready within {timeout:g} s ({url} on the host)")
        time.sleep(1.0)


def fail_callback(state, host: Host, ctx: HostDeploy, p: Prepared) -> bool:
    """The host's failure line: what the gate found and what was done about it."""
    g = ctx.gate
    outcome = g.outcome or outcomes.Outcome(outcomes.ERROR, NO_REPORT)
    message = rollback_policy.failure_message(p.layout.service, p.revision, outcome, g.step or "",
                                      p.rollback.target if p.rollback else None, g.rollback_result)
    fail_host(host, ctx, message)
    return False


def fail_host(host: Host, ctx: HostDeploy, message: str) -> None:
    """Log ``message`` (red, line by line) and record the host's result."""
    for line in message.splitlines():
        host.log_styled(line, fg="red", log_func=logger.error)
    record_result(ctx)
