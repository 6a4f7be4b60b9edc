"""The ``sglang-deploy`` command: plan, rollout, check, demo, models and sample-gpus.

What a user reads is in the parser (``build_parser``); ``sglang-deploy --help`` and
``sglang-deploy COMMAND --help`` print it.
"""

# Layering: this module and demo.py are the top floor. They tie the pure core
# (planning, rendering, the gate) to the pyinfra glue (deploy/) and, for the demo,
# to the stand-ins under sglang_deploy/simulator. The glue and the gate's I/O are
# imported inside the command that needs them, so `plan` never loads the gate's I/O
# and `check` never loads pyinfra.

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, TextIO, cast

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.gateway import inventory_gateways
from sglang_deploy.plan.gateway_render import describe_gateway
from sglang_deploy.plan.inventory_plan import plan_inventory
from sglang_deploy.plan.spec import DeploySpec
from sglang_deploy.plan.tpgroups import build_specs
from sglang_deploy.plan.output import ClassFiles, print_plans, render_plans, write_plans_json
from sglang_deploy.status import READ_PARALLEL, READ_PARALLEL_MAX
from sglang_deploy.plan.tuning_record import DEFAULT_CONCURRENCY

if TYPE_CHECKING:
    from sglang_deploy.gate.options import CheckOptions

    Commands = argparse._SubParsersAction[argparse.ArgumentParser]

DEFAULT_INVENTORY = "inventory/a6000.py"


def _default_inventory() -> str:
    here = Path(__file__).resolve().parents[2] / DEFAULT_INVENTORY
    return str(here) if here.is_file() else DEFAULT_INVENTORY


def cmd_plan(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from sglang_deploy.deploy.inventory import InventoryError, load_inventory

    from sglang_deploy.plan.tuning_record import TuningError

    from sglang_deploy.plan.tuning_record_file import load_records, records_path

    version = args.sglang_version
    if version is not None:
        version = _plan_version(version, err)
        if version is None:
            return 2
    try:
        hosts = everyone = load_inventory(args.inventory)
    except InventoryError as exc:
        err.write(f"error: {exc}\n")
        return 2
    if args.host:
        hosts = [h for h in hosts if h.name in args.host]
        missing = set(args.host) - {h.name for h in hosts}
        if missing:
            err.write(f"error: --host: {', '.join(sorted(missing))} not in {args.inventory}\n")
            return 2
    try:
        tuning = load_records(records_path(args.inventory))
    except TuningError as exc:
        err.write(f"error: {exc}\n")
        return 2
    selected = {h.name for h in hosts}
    results = []
    failures = []
    # Gateway hosts (sglang_gateway) run the SGLang Model Gateway, not SGLang: described, not planned.
    try:
        fronts = inventory_gateways([(h.name, {**h.group_data, **h.host_data}) for h in everyone])
    except PlanError as exc:
        err.write(f"error: {exc}\n")
        return 2
    everyone = [h for h in everyone if h.name not in fronts.gateways]
    for name, settings in fronts.gateways.items():
        if name in selected:
            (err if args.json else out).write(describe_gateway(name, settings, fronts.workers[name]) + "\n")
    # Every host is planned (a tp group's ranks depend on all its members); --host filters the output.
    triples = [(h.name, h.group_data, h.host_data) for h in everyone]
    specs = build_specs(triples)  # once, for the facts and the plans
    plans = plan_inventory(triples, sglang_version=version, facts=_model_facts(everyone, specs), tuning=tuning,
                           specs=specs)
    chosen = [(h, plan) for h, plan in zip(everyone, plans) if h.name in selected]
    class_files: ClassFiles = {}  # hosts of one class (Plan.shared) are rendered and printed once
    rendered = iter(render_plans([p for _, p in chosen if not isinstance(p, PlanError)], class_files))
    for _, plan in chosen:
        files = plan if isinstance(plan, PlanError) else next(rendered)
        if isinstance(files, PlanError):
            failures.append(str(files))
        elif not isinstance(plan, PlanError):
            results.append((plan, files))
    if args.json:
        write_plans_json(results, out, class_files)
        out.write("\n")
    else:
        print_plans(results, args.explain, out, class_files)
    for failure in failures:
        err.write(f"error: {failure}\n")
    return 2 if failures else 0  # bad input, like every other refusal of plan's


def _model_facts(hosts: list, specs: Mapping[str, DeploySpec | PlanError] | None = None) -> dict:
    """Each host's model facts, resolved on this controller (imported here: ``check`` never loads httpx)."""
    from sglang_deploy.deploy.model_metadata import facts_for_hosts

    return facts_for_hosts(hosts, specs)


def _check_options(args: argparse.Namespace) -> CheckOptions:
    """``check``'s arguments as CheckOptions, or GateError naming the argument that is
    wrong; nothing is contacted and nothing is written. An option not given keeps
    CheckOptions' default (sglang_deploy/gate/options.py, the one place defaults are written)."""
    from sglang_deploy.gate import load, verdict
    from sglang_deploy.gate.errors import GateError
    from sglang_deploy.gate.options import CheckOptions
    from sglang_deploy.gate.watch import local_watch

    if args.fail_on is not None and not any(t.strip() for t in args.fail_on.split(",")):
        raise GateError("--fail-on", "names no group; give groups, all or none")
    for name in ("api_key_env", "api_key_file", "json", "abort_file", "watch_unit"):
        value = getattr(args, name)
        if value is not None and not value.strip():
            raise GateError("--" + name.replace("_", "-"), "is empty")
    given = {name: getattr(args, flag) for name, flag in _CHECK_VALUES.items() if getattr(args, flag) is not None}
    if args.fail_on is not None:
        try:
            given["fail_on"] = verdict.parse_fail_on(args.fail_on)
        except ValueError as exc:
            raise GateError("--fail-on", str(exc)) from None
    if args.api_key_env is not None and args.api_key_file is not None:
        raise GateError("--api-key-env and --api-key-file", "give one of them")
    if args.record and not args.baseline:
        raise GateError("--record", "needs --baseline FILE")
    if args.abort_file and not args.watch_unit:
        raise GateError("--abort-file", "needs --watch-unit UNIT")
    if args.concurrency is not None:
        try:
            given["concurrency"] = load.parse_levels(args.concurrency)
        except ValueError as exc:
            raise GateError("--concurrency", str(exc)) from None
    if args.slo is not None:
        try:
            given["slo"] = load.parse_slo(args.slo)
        except ValueError as exc:
            raise GateError("--slo", str(exc)) from None
    if args.abandon_below is not None:  # the tuner's trials, gated on the host (sglang_deploy/deploy/gating.py)
        name, _, value = args.abandon_below.partition("=")
        try:
            given["abandon_below"] = (name, float(value))
        except ValueError:
            raise GateError("--abandon-below", f"expected OBJECTIVE=VALUE, got {args.abandon_below!r}") from None
        if name not in load.OBJECTIVES:
            raise GateError("--abandon-below", f"unknown objective {name!r}; known: {', '.join(load.OBJECTIVES)}")
    return CheckOptions(url=args.url, **given, api_key=_api_key(args), nvml=args.nvml, record=args.record,
                        watch=local_watch(args.watch_unit, args.abort_file))


#: CheckOptions' fields that ``check`` takes as given (argparse converts them): field -> argument.
_CHECK_VALUES = {"target_tok_s": "target", "baseline": "baseline", "tolerance": "tolerance", "model": "model",
                 "expect": "expect", "expect_host": "host", "ready_timeout": "ready_timeout", "repeats": "repeats",
                 "max_tokens": "max_tokens", "hardware": "hardware", "stall_timeout": "stall_timeout"}


def _api_key(args: argparse.Namespace) -> str | None:
    import os

    from sglang_deploy.gate.errors import GateError
    from sglang_deploy.gate.files import read_key, read_key_file

    if args.api_key_env is not None:
        value = os.environ.get(args.api_key_env)
        if value is None:
            raise GateError("--api-key-env", f"environment variable {args.api_key_env} is not set")
        return read_key(value, "--api-key-env")
    if args.api_key_file is not None:  # a regular file of at most 64 KiB (a FIFO is refused, not read)
        return read_key_file(args.api_key_file, "--api-key-file")
    return None


def _plan_version(text: str, err: TextIO) -> str | None:
    """``--sglang-version`` normalised as the catalogs name versions (``v0.5.23 `` is
    ``0.5.23``), or None after an error line: an empty or unknown version is a wrong
    command (exit 2), not a wrong host."""
    from sglang_deploy.plan.catalog import SUPPORTED_VERSIONS, UnsupportedVersion, load_catalog

    version = text.strip()
    if version[:1] in ("v", "V"):
        version = version[1:]
    if not version:
        err.write(f"error: --sglang-version: empty; supported versions: {', '.join(SUPPORTED_VERSIONS)}\n")
        return None
    try:
        load_catalog(version)
    except UnsupportedVersion as exc:
        err.write(f"error: --sglang-version: {exc}\n")
        return None
    return version


def cmd_check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The gate's own run (sglang_deploy/gate/main.py), its options from the command line."""
    from sglang_deploy.gate.main import run_gate
    from sglang_deploy.untrusted import url_secrets

    return run_gate(lambda: _check_options(args), args.json, out, err, url_secrets(args.url))


def cmd_demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from sglang_deploy.commands.demo import run_demo

    if args.keep_record and not args.tune:
        err.write("error: --keep-record: needs --tune\n")
        return 2
    return run_demo(offline=args.offline, json_path=args.json, out=out, err=err, tune=args.tune,
                    keep_record=args.keep_record)


def cmd_sample_gpus(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from sglang_deploy.gate.main import cmd_sample_gpus as sample

    return sample(args, out, err)


def cmd_rollout(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from sglang_deploy.commands.rollout import RolloutOptions, rollout

    opts = RolloutOptions(inventory=args.inventory, waves=args.waves, max_fail=args.max_fail,
                          max_unavailable=args.max_unavailable, limit=args.limit or (), json_path=args.json)
    code, _ = rollout(opts, out, err)
    return code


def cmd_status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from sglang_deploy.commands.status import StatusOptions, run_status

    return run_status(StatusOptions(inventory=args.inventory, limit=args.limit or (), json=args.json,
                                    diff=args.diff, verify_weights=args.verify_weights,
                                    parallel=args.parallel), out, err)


def cmd_tune(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from sglang_deploy.commands.tune import TuneError, options_from_args, tune

    from sglang_deploy.untrusted import PrintableStream

    # what hosts, their journals and the tuner's state files said, without terminal controls (once, here)
    # (PrintableStream filters write() and hands every other attribute to the stream it wraps: a TextIO
    # by duck typing, which the type checker cannot see)
    out, err = cast(TextIO, PrintableStream(out)), cast(TextIO, PrintableStream(err))
    try:
        opts = options_from_args(args)
    except TuneError as exc:
        err.write(f"error: {exc}\n")
        return 2
    code, _ = tune(opts, out, err)
    return code


DESCRIPTION = """\
Deploy the SGLang LLM server to the GPU hosts of a pyinfra inventory. Each
host's launch settings are planned from its GPUs and model; every restarted
server must pass the gate (ready, configured as planned, fast enough) before
its host counts as deployed, and a failed one is rolled back."""

EPILOG = """\
Start with `sglang-deploy plan --explain` (the shipped reference deployment)
or `sglang-deploy demo`. `sglang-deploy COMMAND --help` shows a command's
options and exit codes. The deploy itself is `pyinfra INVENTORY deploy.py`."""

PLAN_DESCRIPTION = """\
Plan every host of a pyinfra inventory offline, from the hardware its data
declares and the model's own checkpoint metadata: each launch setting with the
layer that set it (and, with --explain, why), the server's command line,
warnings, and the files the deploy writes (secrets redacted). No host is
contacted. The model's facts come from a local directory (sglang_model as a
path, or sglang_model_dir), else the Hugging Face Hub (HF_ENDPOINT, metadata
only), else the cache that every Hub fetch fills (see `models fetch`). The
tuning records beside the inventory (INVENTORY's name with .tuning.yaml) give
each host the record of its hardware class as the 'tuned' layer; --explain
says which record applied, or why one did not.

exit codes: 0 every host planned; 2 bad input: a host's data is wrong (the
message names the host and the field; the other hosts are still printed), or
the command is (usage, an inventory or a tuning record file that cannot be
loaded, an unknown --host or --sglang-version)."""

ROLLOUT_DESCRIPTION = """\
Deploy an inventory wave by wave: the ordinary deploy, limited to each
wave's hosts, every restarted server gated. A 'canary' group is the first
wave; the rollout halts when a wave fails more hosts than --max-fail allows.

exit codes: 0 every host passed; 1 a wave failed more hosts than --max-fail
allows (the last one too), or interrupted; 2 bad input (nothing ran);
3 completed, with failures within --max-fail."""

STATUS_DESCRIPTION = """\
Read every host of an inventory over SSH, in parallel, changing nothing, and
print one row per host: the revision running, deployed and planned now; the
server (unit state, main PID, uptime, restarts, SGLang installed vs planned);
drift of the unit, env file and nccl.conf from the deployed revision's copies;
the last gate (verdict, decode tok/s against its target and baseline).
Secrets are never printed, not in --diff and not in --json (docs/status.md).

exit codes: 0 every host ok; 1 a host drifted, down, half-deployed, never
deployed, its last gate failed, its SGLang differs or a new revision is pending;
2 bad input (inventory, flags), a host that cannot be planned, or a host unreachable."""

TUNE_DESCRIPTION = """\
Search for the best launch settings of one host (a canary) by deploying trial
configurations to it, each through the ordinary deploy (stage, prove, swap,
restart, gate) and measured by the gate at every --concurrency level. The
result is a tuning record next to the inventory (<inventory>.tuning.yaml),
keyed by hardware class, which the planner applies as the "tuned" layer to
every host of that class. At the end, and on Ctrl-C or any failure, the host
returns to the revision it ran before and is gated again, unless --apply
deploys the best configuration found.

exit codes: 0 tuned, host returned (or the winner applied) and gated; 1 the
host could not be returned or the apply failed (the output says what runs);
2 bad input or a host that cannot be tuned (nothing changed); 3 interrupted,
or no trial was feasible (host returned, no record written)."""

CHECK_DESCRIPTION = """\
Gate a running SGLang (or OpenAI-compatible) server, as the deploy does after
every restart: it is ready, configured as planned (--expect), and fast enough
(--target, --baseline).

exit codes: 0 pass; 1 fail (the reason is printed); 2 could not measure, or a
bad argument (checked before the server is contacted)."""

DEMO_DESCRIPTION = """\
Run the reference deployment (inventory/a6000.py) end to end on a throwaway
local host with simulated GPUs and a simulated server: boot the host, deploy
with pyinfra, gate the server, tear the host down. It needs root,
systemd-nspawn and sshd; without them (or with --offline) it prints the
offline plan and gates a simulated server started locally. Its figures show
the gate at work, not SGLang's performance.

exit codes: 0 deploy and gate passed; 1 something failed; 2 the demo cannot
run here."""

MODELS_DESCRIPTION = """\
Manage the controller's cache of model metadata (config.json, the safetensors
index or headers, generation_config.json; never weights), under
$XDG_CACHE_HOME/sglang-deploy/models (else ~/.cache). `models fetch MODEL`
resolves the revision on the Hub (HF_ENDPOINT honoured; a gated model's token
from $HF_TOKEN or --token-file) and stores its metadata, so that a later plan
works with no network.

exit codes: 0 stored; 2 bad arguments, or the Hub did not give the metadata
(the message says why)."""

SAMPLE_GPUS_DESCRIPTION = """\
Record NVML samples of this host's GPUs (clocks, throttling, memory,
processes) until a file appears or time runs out. The deploy runs it on each
GPU host beside the gate; you rarely need it by hand.

exit codes: 0 sampled; 2 bad arguments; 3 NVML could not be read (the output
file says why)."""

#: The commands in the order `--help` lists them, each with its one-line summary.
COMMANDS = (
    ("plan", "plan every host of an inventory offline, from declared hardware"),
    ("rollout", "deploy an inventory in waves, canary first, every server gated"),
    ("status", "every host's revision, server, drift and last gate, read without changing anything"),
    ("tune", "search one canary host for the best settings, remembered per hardware class"),
    ("check", "gate a running server: ready, configured as planned, fast enough"),
    ("demo", "the reference deployment end to end on a throwaway local host"),
    ("models", "fetch a model's checkpoint metadata into the controller's cache"),
    ("sample-gpus", "record GPU clocks, throttling and memory beside a gate"),
)

def _command(sub: Commands, name: str, description: str) -> argparse.ArgumentParser:
    # No help= here: argparse would list the commands under a bare COMMAND heading;
    # the top-level description lists them instead (COMMANDS).
    return sub.add_parser(name, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)


def _add_plan(sub: Commands) -> None:
    p = _command(sub, "plan", PLAN_DESCRIPTION)
    p.add_argument("inventory", nargs="?", default=None,
                   metavar="INVENTORY",
                   help=f"pyinfra inventory file (default: the shipped {DEFAULT_INVENTORY})")
    p.add_argument("--host", action="append", help="plan only this host (repeatable)")
    p.add_argument("--sglang-version", metavar="VERSION",
                   help="plan for this SGLang version instead of the inventory's")
    p.add_argument("--explain", action="store_true", help="every intent with its layer and reason")
    p.add_argument("--json", action="store_true", help="a JSON array, one object per host")
    p.set_defaults(func=cmd_plan)


def _add_rollout(sub: Commands) -> None:
    r = _command(sub, "rollout", ROLLOUT_DESCRIPTION)
    r.add_argument("inventory", metavar="INVENTORY", help="pyinfra inventory file")
    r.add_argument("--waves", metavar="SIZES",
                   help="wave sizes, Ansible serial style: counts and percentages, the last repeated "
                        "(default: sglang_rollout.waves from the inventory, else 1,25%%); a 'canary' group is "
                        "the first wave")
    r.add_argument("--max-fail", type=int, metavar="N",
                   help="failed hosts a wave may have before the rollout halts (default: sglang_rollout.max_fail, "
                        "else 0)")
    r.add_argument("--max-unavailable", metavar="N|P%",
                   help="at most this many of one gateway's workers out at once, a count or a percentage of its "
                        "workers (default: sglang_rollout.max_unavailable, else 1); a wave that would take more "
                        "runs in steps")
    r.add_argument("--limit", action="append", metavar="HOSTS",
                   help="only these hosts or groups (names or globs, comma-separated; repeatable)")
    r.add_argument("--json", metavar="FILE", help="write the summary as JSON")
    r.set_defaults(func=cmd_rollout)


def _add_status(sub: Commands) -> None:
    s = _command(sub, "status", STATUS_DESCRIPTION)
    s.add_argument("inventory", metavar="INVENTORY", help="pyinfra inventory file")
    s.add_argument("--limit", action="append", metavar="HOSTS",
                   help="only these hosts or groups (names or globs, comma-separated; repeatable)")
    s.add_argument("--json", action="store_true", help="a JSON array, one object per host (docs/status.md)")
    s.add_argument("--diff", action="store_true",
                   help="show each drifted file against the deployed revision's copy (secrets masked)")
    s.add_argument("--verify-weights", action="store_true",
                   help="re-hash every file of the snapshot the running revision serves against the hashes "
                        "recorded when it was staged; a mismatch or missing file is drift (reads the whole "
                        "snapshot: docs/status.md)")
    s.add_argument("--parallel", type=_parallel, default=READ_PARALLEL, metavar="N",
                   help=f"hosts read at once (default {READ_PARALLEL}; each holds one SSH connection)")
    s.set_defaults(func=cmd_status)


def _parallel(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= READ_PARALLEL_MAX:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {READ_PARALLEL_MAX}, got {text!r}")
    return n


def _add_tune(sub: Commands) -> None:
    t = _command(sub, "tune", TUNE_DESCRIPTION)
    t.add_argument("inventory", metavar="INVENTORY", help="pyinfra inventory file")
    t.add_argument("--host", required=True, metavar="HOST",
                   help="the one host to tune (or a multi-node tp group's name, to tune all its members)")
    t.add_argument("--objective", choices=("decode", "throughput", "goodput"), default="decode",
                   help="decode: single-stream decode tok/s; throughput: output tok/s at the highest level; "
                        "goodput: requests/s meeting every --slo at the highest level (default: decode)")
    t.add_argument("--concurrency", metavar="LEVELS",
                   help="concurrency levels the gate measures each trial at, e.g. 1,8,32 "
                        f"(default: the gate's, {','.join(map(str, DEFAULT_CONCURRENCY))})")
    t.add_argument("--slo", metavar="LIMITS", help="e.g. ttft_p90=2s,itl_p90=60ms (needed by --objective goodput)")
    t.add_argument("--budget", metavar="TRIALS|DURATION",
                   help="at most this many trials (12) or this long (30m, 2h) (default: 16 trials)")
    t.add_argument("--space", metavar="FILE", help="YAML: the search space, replacing or narrowing the default")
    t.add_argument("--apply", action="store_true", help="deploy the best configuration found at the end")
    t.add_argument("--verbose", action="store_true", help="show every pyinfra run's output (default: the tuner's "
                                                           "lines, and the tail of a run that fails)")
    t.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    t.add_argument("--json", metavar="FILE", help="write every trial and the result as JSON")
    t.set_defaults(func=cmd_tune)


def _add_check(sub: Commands) -> None:
    # Every default is CheckOptions' (sglang_deploy/gate/options.py): an option left out is
    # None here and keeps it; the help text says what it is.
    from sglang_deploy.gate.options import default
    from sglang_deploy.gate.verdict import DIFF_GROUPS

    levels = default("concurrency")
    levels = ",".join(map(str, levels)) if isinstance(levels, tuple) else str(levels)
    fail_on = ",".join(g for g in DIFF_GROUPS if g in default("fail_on"))
    others = ", ".join(g for g in DIFF_GROUPS if g not in default("fail_on"))
    c = _command(sub, "check", CHECK_DESCRIPTION)
    c.add_argument("--url", required=True, help="base URL of the server, e.g. http://127.0.0.1:30000")
    c.add_argument("--target", type=float, metavar="TOK_S", help="minimum median single-stream decode tok/s")
    c.add_argument("--baseline", metavar="FILE",
                   help="JSON lines of earlier gate reports; fail when more than --tolerance below the best "
                        "recent passing one for the same hardware, model and SGLang version")
    c.add_argument("--tolerance", type=float, metavar="FRACTION",
                   help=f"allowed drop below the baseline (default {default('tolerance'):g})")
    c.add_argument("--record", action="store_true", help="append this run's report to the --baseline file")
    c.add_argument("--concurrency", metavar="N[,N...]",
                   help="also run N concurrent streams (or each level of a list such as 1,8,32, ascending; 1 is "
                        "the single-stream run) and report per level TTFT/ITL/TPOT/e2e p50/p90/p99 and aggregate "
                        f"output tok/s (default {levels})")
    c.add_argument("--slo", metavar="LIMITS",
                   help="service-level objectives, e.g. ttft_p90=2s,itl_p90=60ms (ttft, itl, tpot, e2e at p50, p90 "
                        "or p99; unit s or ms): report goodput (requests/s meeting every one) per level")
    c.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    # The tuner's trials gated on the host: stop measuring once the objective cannot reach VALUE.
    c.add_argument("--abandon-below", metavar="OBJECTIVE=VALUE", help=argparse.SUPPRESS)
    c.add_argument("--model", help="model to ask for (default: the one /v1/models lists)")
    c.add_argument("--expect", metavar="PLAN.json",
                   help="output of 'sglang-deploy plan --json' (an object, or an array plus --host): "
                        "compare with what the server resolved")
    c.add_argument("--host", help="the host's plan to use when --expect holds several")
    c.add_argument("--fail-on", metavar="GROUPS",
                   help=f"configuration differences that fail the gate, comma-separated (default {fail_on}; "
                        f"also {others}; or all / none)")
    c.add_argument("--ready-timeout", type=float, metavar="S",
                   help=f"how long to wait for the server to become ready (default {default('ready_timeout'):g})")
    c.add_argument("--repeats", type=int, metavar="N", help=f"single-stream requests (default {default('repeats')})")
    c.add_argument("--max-tokens", type=int, metavar="N",
                   help=f"output tokens per request (default {default('max_tokens')})")
    c.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the server's API key")
    c.add_argument("--api-key-file", metavar="FILE", help="file holding the server's API key (keeps it out of argv "
                                                          "and the environment)")
    c.add_argument("--abort-file", metavar="FILE",
                   help="with --watch-unit: also fail the gate at once when FILE appears (its first line is the "
                        "reason); the deploy writes it on rank 0 of a multi-node group when another member fails")
    c.add_argument("--watch-unit", metavar="UNIT",
                   help="on the server's host: watch this systemd unit while waiting and measuring; a failed "
                        "or restarted unit fails the gate at once, with the journal's last lines")
    c.add_argument("--hardware", metavar="NAME",
                   help="hardware part of the baseline key (default: from --expect or NVML)")
    c.add_argument("--stall-timeout", type=float, metavar="S",
                   help=f"a stream with no data for this long is an error (default {default('stall_timeout'):g})")
    c.add_argument("--nvml", action="store_true",
                   help="on the GPU host: sample clocks, throttling, memory and processes during the measurement")
    c.set_defaults(func=cmd_check)


def _add_demo(sub: Commands) -> None:
    d = _command(sub, "demo", DEMO_DESCRIPTION)
    d.add_argument("--offline", action="store_true",
                   help="do not boot a host: the offline plan and the gate against a local simulated server")
    d.add_argument("--json", metavar="FILE", help="write the plan, the deploy's outcome and the gate report as JSON")
    d.add_argument("--tune", action="store_true",
                   help="after the deploy, tune the throwaway host's speculative settings (sglang-deploy tune) "
                        "against a planted performance model, and plan the reference inventory with the record")
    d.add_argument("--keep-record", action="store_true",
                   help="with --tune: copy the record beside the reference inventory (inventory/a6000.tuning.yaml)")
    d.set_defaults(func=cmd_demo)


def _add_models(sub: Commands) -> None:
    m = _command(sub, "models", MODELS_DESCRIPTION)
    actions = m.add_subparsers(metavar="ACTION", dest="action", required=True)
    f = actions.add_parser("fetch", description=MODELS_DESCRIPTION,
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           help="store a model's metadata in the cache")
    f.add_argument("model", metavar="MODEL", help="Hugging Face id, org/name")
    f.add_argument("--revision", help="commit, tag or branch (default main)")
    f.add_argument("--token-file", metavar="FILE", help="file holding the Hub token (default: $HF_TOKEN)")
    f.set_defaults(func=cmd_models_fetch)


def cmd_models_fetch(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from sglang_deploy.deploy.model_metadata import HubSettings, MetadataError, fetch_model

    from sglang_deploy.untrusted import (MAX_SECRET_BYTES, Scrubber, UntrustedInput, check_token, printable,
                                         read_text_file, url_secrets)

    # The token: one line of visible ASCII from a regular file (a FIFO or a device is refused, not
    # read) or $HF_TOKEN; never quoted back, nor are the credentials in HF_ENDPOINT.
    token: str | None
    try:
        if args.token_file:
            token = check_token(read_text_file(args.token_file, "--token-file", MAX_SECRET_BYTES), "--token-file")
        else:
            token = check_token(os.environ["HF_TOKEN"], "$HF_TOKEN") if os.environ.get("HF_TOKEN") else None
    except UntrustedInput as exc:
        err.write(f"error: {exc}\n")
        return 2
    hub = HubSettings.from_environ(token=token)
    scrub = Scrubber([token, *url_secrets(hub.endpoint)])
    try:
        facts, path = fetch_model(args.model, args.revision, hub)
    except MetadataError as exc:
        err.write(scrub.text(f"error: {args.model!r}: hub {hub.shown}: {exc}") + "\n")
        return 2
    files = ", ".join(sorted(p.name for p in path.iterdir()))
    size = f"{facts.total_weight_bytes / 1e9:.1f} GB of weights" if facts.total_weight_bytes else "weight size unknown"
    out.write(scrub.text(f"{args.model} {args.revision or 'main'} -> commit {facts.revision} (from {hub.shown})\n"
                         f"stored in {path}: {files}\n"
                         f"{printable(facts.model_type)[:80]}, {facts.num_hidden_layers} layers, "
                         f"{facts.num_attention_heads} attention heads ({facts.num_key_value_heads} KV), {size}\n"))
    return 0


def _add_sample_gpus(sub: Commands) -> None:
    from sglang_deploy.gate.main import add_sample_gpus_arguments

    g = _command(sub, "sample-gpus", SAMPLE_GPUS_DESCRIPTION)
    add_sample_gpus_arguments(g)
    g.set_defaults(func=cmd_sample_gpus)


def build_parser() -> argparse.ArgumentParser:
    width = max(len(name) for name, _ in COMMANDS)
    listing = "\n".join(f"  {name.ljust(width)}  {summary}" for name, summary in COMMANDS)
    parser = argparse.ArgumentParser(prog="sglang-deploy", usage="%(prog)s [-h] COMMAND ...",
                                     description=f"{DESCRIPTION}\n\ncommands:\n{listing}",
                                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(prog="sglang-deploy", metavar="COMMAND", dest="command", required=True,
                                help=argparse.SUPPRESS)
    for add in (_add_plan, _add_rollout, _add_status, _add_tune, _add_check, _add_demo, _add_models, _add_sample_gpus):
        add(sub)
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "inventory", "x") is None:
        args.inventory = _default_inventory()
    try:
        return args.func(args, out or sys.stdout, err or sys.stderr)
    except BrokenPipeError:
        # `sglang-deploy plan ... | head`: the reader left. Quietly, as other Unix tools do; point
        # stdout at /dev/null so the interpreter's own flush at exit raises nothing either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
