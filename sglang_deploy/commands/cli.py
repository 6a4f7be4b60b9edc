"""The ``sglang-deploy`` command: plan, rollout, check, demo, models and sample-gpus.

What a user reads is in the parser (``build_parser``); ``sglang-deploy --help`` and
``sglang-deploy COMMAND --help`` print it (the descriptions: sglang_deploy/commands/cli_help.py).
What each command then does is sglang_deploy/commands/cli_handlers.py.
"""

# Layering: this module and demo.py are the top floor. They tie the pure core
# (planning, rendering, the gate) to the pyinfra glue (deploy/) and, for the demo,
# to the stand-ins under sglang_deploy/simulator. The glue and the gate's I/O are
# imported inside the command that needs them (cli_handlers.py), so `plan` never loads
# the gate's I/O and `check` never loads pyinfra.

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from sglang_deploy.commands.cli_handlers import (cmd_check, cmd_demo, cmd_models_fetch, cmd_plan, cmd_rollout,
                                                 cmd_sample_gpus, cmd_status, cmd_tune)
from sglang_deploy.commands.cli_help import (CHECK_DESCRIPTION, COMMANDS, DEMO_DESCRIPTION, DESCRIPTION, EPILOG,
                                             MODELS_DESCRIPTION, PLAN_DESCRIPTION, ROLLOUT_DESCRIPTION,
                                             SAMPLE_GPUS_DESCRIPTION, STATUS_DESCRIPTION, TUNE_DESCRIPTION)
from sglang_deploy.status import READ_PARALLEL, READ_PARALLEL_MAX
from sglang_deploy.plan.tuning_record import DEFAULT_CONCURRENCY

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]

DEFAULT_INVENTORY = "inventory/a6000.py"


def _default_inventory() -> str:
    here = Path(__file__).resolve().parents[2] / DEFAULT_INVENTORY
    return str(here) if here.is_file() else DEFAULT_INVENTORY


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
    p.add_argument("--predict", choices=["aiconfigurator"],
                   help="also ask this predictor for each host's layout, shown beside the plan's own prediction "
                        "(needs pip install -e '.[predict]', x86-64 only)")
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
                        "recent passing one for the same hardware, model and SGLang version (a version without "
                        "one yet: the most recent other version's on the same hardware and model)")
    c.add_argument("--tolerance", type=float, metavar="FRACTION",
                   help=f"allowed drop below the baseline (default {default('tolerance'):g})")
    c.add_argument("--prediction-floor", type=float, metavar="FRACTION",
                   help="with --expect (a plan with its predicted speed) and neither --target nor a baseline result: "
                        "fail below this fraction of the predicted band's low end (default "
                        f"{default('prediction_floor'):g}; 0: off)")
    c.add_argument("--accept-slower", metavar="REASON",
                   help="let a result slower than the baseline pass, with REASON (one line, at most 500 printable "
                        "characters) in the rule's detail and the report; never a missed --target or a "
                        "configuration difference")
    c.add_argument("--record", action="store_true", help="append this run's report to the --baseline file")
    c.add_argument("--concurrency", metavar="N[,N...]",
                   help="also run N concurrent streams (or each level of a list such as 1,8,32, ascending; 1 is "
                        "the single-stream run) and report per level TTFT/ITL/TPOT/e2e p50/p90/p99 and aggregate "
                        f"output tok/s (default {levels})")
    c.add_argument("--prefill-tokens", type=int, metavar="N",
                   help="also measure prefill: after the decode run, a warm-up and 3 requests of distinct long prompts "
                        "of about N tokens, one output token each; report input tok/s (the server's prompt tokens / "
                        f"TTFT) (default {default('prefill_tokens')}: off; the deploy's gate measures 2048)")
    c.add_argument("--role", choices=("prefill", "decode"),
                   help="the server is a prefill or decode server of a disaggregated fleet: every request carries "
                        "SGLang's fake bootstrap host (no KV transfer); a prefill server is judged by its prefill "
                        "alone (needs --prefill-tokens)")
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
