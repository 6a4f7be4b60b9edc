"""The gate's own entry point: ``python -m sglang_deploy.gate`` and the zipapp the deploy runs
on a GPU host (sglang_deploy/deploy/gatezip.py). It imports the gate and the core alone: no
planner, no templates, no pyinfra.

    check --options FILE [--json REPORT]
        one gate run, every option in FILE: the JSON the deploy writes (``options.to_file_dict``),
        read through the bounded readers and checked key by key (``files.read_options``); the
        API key comes from the file the options name, never from the options file or argv.
    sample-gpus --out FILE [--indices I,J] [--every S] [--until-file PATH] [--max-seconds S]
        NVML samples of this host's GPUs beside a gate run from the controller.

Exit codes as ``sglang-deploy check``'s: 0 pass, 1 fail, 2 could not measure or bad options;
``sample-gpus``: 3 when NVML could not be read. ``run_gate`` is the one tail of a gate run,
shared with ``sglang-deploy check`` (sglang_deploy/commands/cli_handlers.py).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TYPE_CHECKING, Callable, Iterable, TextIO, cast

from sglang_deploy.gate import nvml  # light: pynvml itself is imported when sampling

if TYPE_CHECKING:
    from sglang_deploy.gate.options import CheckOptions

# The gate's I/O (httpx, the files, the watch) is imported by the function that runs it, so
# that ``sglang-deploy``'s parser, which takes sample-gpus' arguments from here, loads none of it.


def run_gate(build: Callable[[], CheckOptions], json_path: str | None, out: TextIO, err: TextIO,
             secrets: Iterable[str | None] = ()) -> int:
    """One gate run: the options (``build``, GateError naming the one that is wrong), their
    checks, the files, then the measurement; the report's text to ``out``, its JSON to
    ``json_path``. ``secrets`` (and the API key and the URL's password, once known) are
    masked in every line written; a server's or a file's strings reach the terminal without
    its controls. Returns the exit code."""
    from sglang_deploy.gate.errors import GateError
    from sglang_deploy.gate.files import check_files, check_writable
    from sglang_deploy.gate.options import validate
    from sglang_deploy.gate.report import format_report
    from sglang_deploy.gate.run import run_check
    from sglang_deploy.untrusted import PrintableStream, Scrubber, url_secrets

    # PrintableStream filters write() and hands every other attribute to the stream it wraps: a TextIO
    # by duck typing, which the type checker cannot see
    out, err = cast(TextIO, PrintableStream(out)), cast(TextIO, PrintableStream(err))
    secrets = list(secrets)
    scrub = Scrubber(secrets)
    try:
        opts = build()
        scrub = Scrubber([*secrets, opts.api_key, *url_secrets(opts.url)])
        validate(opts)
        check_files(opts)
        if json_path:
            check_writable(json_path, "--json")
    except GateError as exc:
        err.write(scrub.text(f"error: {exc}") + "\n")
        return 2

    def progress(msg: str) -> None:  # run_check masks the secrets in these lines and in the report
        err.write(f"check: {msg}\n")
        err.flush()

    report = run_check(opts, progress)
    out.write(format_report(report))
    if json_path:
        try:
            with open(json_path, "w", encoding="utf-8") as fh:
                json.dump(report, fh, indent=2)
                fh.write("\n")
        except OSError as exc:
            err.write(f"error: --json: cannot write {json_path}: {exc.strerror or exc}\n")
            return 2
    if report["verdict"] == "error":
        err.write(f"error: {report['reasons'][0]}\n")
    return int(report["exit_code"])


def options_from_file(path: str) -> CheckOptions:
    """The run an options file describes, with what it names resolved on this host: the API
    key read from its file (``untrusted.check_token``'s rule) and the unit watched here."""
    from sglang_deploy.gate.files import read_key_file, read_options
    from sglang_deploy.gate.watch import local_watch

    opts, refs = read_options(path)
    if refs.api_key_file is not None:
        opts.api_key = read_key_file(refs.api_key_file, "api_key_file")
    opts.watch = local_watch(refs.watch_unit, refs.abort_file)
    return opts


def cmd_check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not args.options.strip():
        err.write("error: --options: is empty\n")
        return 2
    if args.json is not None and not args.json.strip():
        err.write("error: --json: is empty\n")
        return 2
    return run_gate(lambda: options_from_file(args.options), args.json, out, err)


def add_sample_gpus_arguments(parser: argparse.ArgumentParser) -> None:
    """``sample-gpus``' arguments (also ``sglang-deploy sample-gpus``)."""
    parser.add_argument("--out", required=True, metavar="FILE", help="where to write the samples (JSON)")
    parser.add_argument("--indices", metavar="I,J", help="GPU indices (default all)")
    parser.add_argument("--every", type=float, default=nvml.EVERY_S, metavar="S",
                        help=f"seconds between samples (default {nvml.EVERY_S:g})")
    parser.add_argument("--until-file", metavar="PATH", help="stop once this file exists")
    parser.add_argument("--max-seconds", type=float, default=nvml.MAX_SECONDS, metavar="S",
                        help=f"stop after this long (default {nvml.MAX_SECONDS:g})")


def cmd_sample_gpus(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``sample-gpus``: its arguments checked (exit 2 naming the one that is wrong), then sampled."""
    from sglang_deploy.gate.errors import GateError
    from sglang_deploy.gate.files import check_writable

    try:
        indices = [int(i) for i in args.indices.split(",")] if args.indices else None
    except ValueError:
        indices = [-1]
    if indices is not None and any(i < 0 for i in indices):
        err.write(f"error: --indices: expected GPU indices such as 0,1, got {args.indices!r}\n")
        return 2
    for name, value in (("--every", args.every), ("--max-seconds", args.max_seconds)):
        low = 0.0 if name == "--max-seconds" else 1e-3
        if not (math.isfinite(value) and value >= low):
            err.write(f"error: {name}: must be a finite number of seconds, at least {low:g}, got {value}\n")
            return 2
    for name, value in (("--out", args.out), ("--until-file", args.until_file)):
        if value is not None and not value.strip():
            err.write(f"error: {name}: is empty\n")
            return 2
    try:
        check_writable(args.out, "--out")
    except GateError as exc:
        err.write(f"error: {exc}\n")
        return 2
    return nvml.sample_gpus(args.out, indices, args.every, args.until_file, args.max_seconds)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gate", description="The post-deploy gate, as the deploy runs it on a "
                                                                "GPU host (sglang-deploy check is the same gate).")
    sub = parser.add_subparsers(metavar="COMMAND", dest="command", required=True)
    c = sub.add_parser("check", help="one gate run, its options in a file")
    c.add_argument("--options", required=True, metavar="FILE",
                   help="the options (JSON, format 'sglang-deploy gate options', written by the deploy)")
    c.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    c.set_defaults(func=cmd_check)
    g = sub.add_parser("sample-gpus", help="record GPU clocks, throttling and memory beside a gate")
    add_sample_gpus_arguments(g)
    g.set_defaults(func=cmd_sample_gpus)
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args, out or sys.stdout, err or sys.stderr)  # cmd_check or cmd_sample_gpus
    return code
