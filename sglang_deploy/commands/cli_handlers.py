"""What each ``sglang-deploy`` command does once its arguments are parsed (the parser, ``--help``
and ``main`` are sglang_deploy/commands/cli.py): ``cmd_plan``, ``cmd_check`` (its options checked
by ``_check_options`` before the server is contacted), ``cmd_rollout``, ``cmd_status``,
``cmd_tune``, ``cmd_demo``, ``cmd_models_fetch``, ``cmd_sample_gpus``.
"""

# The glue and the gate's I/O are imported inside the command that needs them, so `plan`
# never loads the gate's I/O and `check` never loads pyinfra (cli.py, "Layering").

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Mapping, TextIO, cast

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.gateway_fleet import inventory_gateways
from sglang_deploy.plan.gateway_render import describe_gateway
from sglang_deploy.plan.inventory_plan import plan_inventory
from sglang_deploy.plan.spec import DeploySpec
from sglang_deploy.plan.tpgroups import build_specs
from sglang_deploy.plan.output import ClassFiles, print_plans, render_plans, write_plans_json

if TYPE_CHECKING:
    from sglang_deploy.gate.options import CheckOptions


def cmd_plan(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from sglang_deploy.deploy.inventory import InventoryError, load_inventory

    from sglang_deploy.plan.tuning_record import TuningError

    from sglang_deploy.plan.tuning_record_file import load_records, records_path

    from sglang_deploy.deploy import calibration as samples_io
    from sglang_deploy.plan.calibration import calibrate_plan, samples_path

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
    pairs = [(h.name, {**h.group_data, **h.host_data}) for h in everyone]
    try:
        fronts = inventory_gateways(pairs)
    except PlanError as exc:
        err.write(f"error: {exc}\n")
        return 2
    everyone = [h for h in everyone if h.name not in fronts.gateways]
    for name, settings in fronts.gateways.items():
        if name in selected:
            try:
                text = describe_gateway(name, settings, fronts.workers[name], fronts.roles.get(name))
            except ValueError as exc:  # a gateway whose workers are not one mode (plan.pd_gateway)
                failures.append(str(PlanError(name, "sglang_gateway", str(exc))))
                continue
            (err if args.json else out).write(text + "\n")
    # Every host is planned (a tp group's ranks depend on all its members); --host filters the output.
    triples = [(h.name, h.group_data, h.host_data) for h in everyone]
    specs = build_specs(triples)  # once, for the facts and the plans
    plans = plan_inventory(triples, sglang_version=version, facts=_model_facts(everyone, specs), tuning=tuning,
                           specs=specs)
    # each prediction calibrated by the fleet's passing gates recorded beside the inventory
    samples = samples_io.load(samples_path(args.inventory))
    plans = [p if isinstance(p, PlanError) else calibrate_plan(p, samples) for p in plans]
    chosen = [(h, plan) for h, plan in zip(everyone, plans) if h.name in selected]
    class_files: ClassFiles = {}  # hosts of one class (Plan.shared) are rendered and printed once
    rendered = iter(render_plans([p for _, p in chosen if not isinstance(p, PlanError)], class_files))
    for _, plan in chosen:
        files = plan if isinstance(plan, PlanError) else next(rendered)
        if isinstance(files, PlanError):
            failures.append(str(files))
        elif not isinstance(plan, PlanError):
            results.append((plan, files))
    if getattr(args, "predict", None) == "aiconfigurator":
        from sglang_deploy.commands.predict_aic import AicMissing, write_side_by_side

        try:
            write_side_by_side(results, args.json, args.explain, out, class_files)
        except AicMissing as exc:
            err.write(f"error: {exc}\n")
            return 2
    elif args.json:
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
                 "max_tokens": "max_tokens", "hardware": "hardware", "stall_timeout": "stall_timeout",
                 "accept_slower": "accept_slower", "prediction_floor": "prediction_floor",
                 "prefill_tokens": "prefill_tokens", "role": "role"}


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
