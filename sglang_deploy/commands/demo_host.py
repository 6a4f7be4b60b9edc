"""`sglang-deploy demo` on a throwaway host (sglang_deploy/simulator/testbed): boot it, deploy the
reference plan with the real ``pyinfra INVENTORY deploy.py``, show the deploy's gate, run the
continuous check once, read the host back with ``sglang-deploy status``, with ``--tune`` tune it
against the planted performance model, and tear it down (sglang_deploy/commands/demo.py falls back
to the local simulated server when no host boots).

Top floor: it starts processes and imports the stand-ins (sglang_deploy/simulator).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from sglang_deploy.commands.demo_output import _last_gate, _section, _stream, format_gate_entry
from sglang_deploy.commands.demo_setup import (BOARD, GATE, HOST_NAME, PERF_MODEL, REFERENCE_INVENTORY, REPO,
                                               SIMULATED, TARGET_TOK_S, TUNE_BUDGET, TUNE_SPACE, TUNE_TIMEOUT_S,
                                               free_port, plan_for)
from sglang_deploy.lifecycle.revision import Layout
from sglang_deploy.plan.output import plan_json, print_plan

ON_HOST_NOTICE = (
    "SIMULATED: the GPUs (an NVML stand-in on the host, answering with the {board} board profile) and\n"
    "the server (sglang_deploy/simulator/sglang_server: SGLang {version}'s own flag parser and HTTP API, "
    "no model, filler\n"
    "text, decoding at a configured {rate:g} tok/s). Real: systemd, sshd, pyinfra, the deploy and the gate.\n"
    "The figures show the gate at work; they say nothing about SGLang's performance.\n"
)


def demo_host_data(reference: Mapping[str, Any], port: int, wheels_on_host: str) -> dict[str, Any]:
    """The reference host's data plus only what the throwaway host needs."""
    intents = dict(reference.get("sglang_intents") or {})
    intents["port"] = {"value": port, "reason": "demo: a free port; the throwaway host shares this machine's "
                                                "network"}
    return {
        **reference,
        "sglang_intents": intents,
        "sglang_pip_find_links": wheels_on_host,  # the simulated SGLang wheel, staged on the host
        "sglang_pip_no_index": True,
        "sglang_target_tok_s": TARGET_TOK_S,
        "sglang_gate": dict(GATE),
        # The demo reaches no Hub: the simulated server starts from the model id, as SGLang would
        # when it downloads at start.
        "sglang_model_source": "server",
        # The continuous check (docs/watch.md): its timer would first run in 15 minutes; the demo
        # starts one run itself before `status`.
        "sglang_watch": {"interval": "15m", "max_tokens": 16},
    }


def _on_throwaway_host(reference: dict[str, Any], result: dict[str, Any], testbed: Any, gpu: Any,
                       build_wheel: Callable[..., Path], out: TextIO, err: TextIO, tune: bool = False,
                       keep_record: bool = False) -> int | None:
    """Boot, deploy, gate, tear down. None when no host could be booted (the caller falls back)."""
    port = free_port()
    data = demo_host_data(reference, port, gpu.WHEELS_ON_HOST)
    plan, files = plan_for(HOST_NAME, data)
    result.update(mode="testbed", plan=plan_json(plan, files))
    out.write(ON_HOST_NOTICE.format(board=BOARD, version=plan.sglang_version, rate=SIMULATED["decode_tok_s"]))
    _section(out, f"Plan (the reference host's data; for the demo: port {port}, the wheel directory, "
                  f"target {TARGET_TOK_S:g} tok/s, a short gate)")
    print_plan(plan, files, False, out)
    out.flush()

    tmp = Path(tempfile.mkdtemp(prefix="sglang-demo-"))
    bed = None
    try:
        wheels = tmp / "wheels"
        build_wheel(plan.sglang_version, wheels)
        _section(out, f"Throwaway host {HOST_NAME} (systemd-nspawn over a tmpfs overlay, real systemd and sshd; "
                      f"GPUs: NVML stand-in, {BOARD})")
        t = time.monotonic()
        try:
            bed = testbed.Testbed()
            result["testbed_dir"] = str(bed.dir)
            sim = _simulated(tune)
            (host,) = bed.boot([HOST_NAME], setup=lambda name, root: gpu.stage_gpu_host(root, wheels, BOARD, sim))
        except testbed.TestbedError as exc:
            result["boot_error"] = str(exc).splitlines()[0]
            err.write(f"demo: could not boot a throwaway host: {exc}\n")
            return None
        result["nspawn_pid"] = host.pid
        out.write(f"booted in {time.monotonic() - t:.1f} s: sshd on 127.0.0.1:{host.port}\n")

        inventory = bed.write_inventory(tmp / "inventory.py", [host], {HOST_NAME: data}, group="demo")
        _section(out, f"Deploy: python -m pyinfra -y {inventory.name} deploy.py (the real deploy, over SSH)")
        t = time.monotonic()
        deploy_rc = _stream([sys.executable, "-m", "pyinfra", "-y", str(inventory), "deploy.py"], out)
        result["deploy"] = {"exit_code": deploy_rc, "seconds": round(time.monotonic() - t, 1)}
        out.write(f"deploy {'succeeded' if deploy_rc == 0 else f'FAILED (exit {deploy_rc})'} "
                  f"in {result['deploy']['seconds']:.0f} s\n")

        layout = Layout.of(plan.service, plan.nccl_conf_path)
        history = layout.marker("history.jsonl")
        entry = _last_gate(Path(host.root) / history.lstrip("/"))
        result["gate"] = entry
        _section(out, f"Gate (run by the deploy after the restart; its line in the host's {history})")
        out.write(format_gate_entry(entry) if entry else "no gate result recorded (the deploy stopped before it)\n")
        passed = deploy_rc == 0 and entry is not None and entry.get("verdict") == "pass"
        if passed:
            passed = _watch_step(host, plan.service.name, result, out) and _status_step(inventory, result, out)
        if tune and passed:
            passed = _tune_step(inventory, tmp, result, keep_record, out)
    finally:
        if bed is not None:
            _section(out, "Tear down")
            try:
                bed.close()
            except testbed.TestbedError as exc:
                err.write(f"error: {exc}\n")
                result["teardown"] = str(exc)
                passed = False
            else:
                result["teardown"] = "clean"
                out.write("throwaway host powered off, overlays unmounted, scratch removed; "
                          "verified: nothing left mounted or running\n")
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if passed else 1


def _watch_step(host: Any, service: str, result: dict[str, Any], out: TextIO) -> bool:
    """One run of the continuous check the deploy installed, started now instead of by its timer;
    its journal line says what it found and what it cost."""
    unit = f"{service}-watch.service"
    _section(out, f"Continuous check: systemctl start {unit} (the timer's run, started now)")
    t = time.monotonic()
    run = host.ssh(f"systemctl start {unit}", check=False, timeout=180)
    said = host.ssh(f"journalctl -u {unit} -o cat --no-pager | grep '^watch: ' | tail -n 1", check=False).stdout
    out.write(said if said.strip() else f"(no line from {unit}: {run.stderr.strip()[-300:]})\n")
    result["watch"] = {"exit_code": run.returncode, "line": said.strip(), "seconds": round(time.monotonic() - t, 1)}
    return run.returncode == 0 and said.startswith("watch: pass")


def _status_step(inventory: Path, result: dict[str, Any], out: TextIO) -> bool:
    """`sglang-deploy status` on the inventory just deployed: every column green (exit 0) is part
    of the proof, since the deploy left the host serving exactly what it planned."""
    _section(out, f"Status: sglang-deploy status {inventory.name} (the day after: read back, nothing changed)")
    t = time.monotonic()
    rc = _stream([sys.executable, "-m", "sglang_deploy.commands.cli", "status", str(inventory)], out)
    result["status"] = {"exit_code": rc, "seconds": round(time.monotonic() - t, 1)}
    return rc == 0


def _simulated(tune: bool) -> dict[str, Any]:
    """The simulated server's behaviour; with --tune, following the reference performance model."""
    if not tune:
        return dict(SIMULATED)
    from sglang_deploy.simulator import perf_model

    return {**SIMULATED, **perf_model.behaviour(perf_model.read_yaml(PERF_MODEL))}


def planted_best() -> tuple[dict[str, Any], float]:
    """The best single-stream configuration of TUNE_SPACE under the performance model, by brute
    force over every consistent combination (what the tuner must find without trying them all)."""
    from sglang_deploy.simulator import perf_model
    from sglang_deploy.tuning.space import max_draft_tokens

    model = perf_model.load_yaml(PERF_MODEL)
    best: tuple[dict[str, Any], float] | None = None
    for steps in TUNE_SPACE["speculative_num_steps"]:
        for topk in TUNE_SPACE["speculative_eagle_topk"]:
            drafts = [steps + 1] if topk == 1 else [d for d in TUNE_SPACE["speculative_num_draft_tokens"]
                                                     if steps + 1 <= d <= max_draft_tokens(steps, topk)]
            for draft in drafts:
                args = {"tp_size": 2, "speculative_algorithm": "EAGLE", "speculative_num_steps": steps,
                        "speculative_eagle_topk": topk, "speculative_num_draft_tokens": draft,
                        "mem_fraction_static": 0.88}
                if model.startup_failure(args) or model.crash_after_s(args) is not None:
                    continue
                rate = model.expected(args, 1, 64, GATE["max_tokens"])["decode_tok_s"]
                config = {"speculative_num_steps": steps, "speculative_eagle_topk": topk,
                          "speculative_num_draft_tokens": draft}
                if best is None or rate > best[1]:
                    best = (config, rate)
    assert best is not None
    return best


def _tune_step(inventory: Path, tmp: Path, result: dict[str, Any], keep_record: bool, out: TextIO) -> bool:
    """`sglang-deploy tune` on the throwaway host, then the reference inventory's plan with the
    record it wrote (what `plan inventory/a6000.py --explain` shows once the record is beside it)."""
    import yaml

    from sglang_deploy.plan.tuning_record_file import records_path

    space = tmp / "space.yaml"
    space.write_text(yaml.safe_dump(TUNE_SPACE, sort_keys=False), encoding="utf-8")
    summary_file = tmp / "tune.json"
    planted, planted_rate = planted_best()
    _section(out, f"Tune: sglang-deploy tune {inventory.name} --host {HOST_NAME} --space space.yaml --budget "
                  f"{TUNE_BUDGET} (every trial the real deploy; the speculative settings only)")
    out.write(f"planted by the performance model ({PERF_MODEL.name}): "
              + ", ".join(f"{k}={v}" for k, v in planted.items()) + f" at {planted_rate:.1f} tok/s\n")
    t = time.monotonic()
    rc = _stream([sys.executable, "-m", "sglang_deploy.commands.cli", "tune", str(inventory), "--host", HOST_NAME,
                  "--space", str(space), "--budget", str(TUNE_BUDGET), "--json", str(summary_file)], out,
                 timeout=TUNE_TIMEOUT_S)
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    best = (summary.get("best") or {}).get("config") or {}
    found = all(best.get(k) == v for k, v in planted.items())
    result["tune"] = {"exit_code": rc, "seconds": round(time.monotonic() - t, 1), "best": best,
                      "planted": planted, "found_planted": found, "trials": len(summary.get("trials") or []),
                      "restored": summary.get("restored"), "summary": summary}
    out.write(f"tune {'succeeded' if rc == 0 else f'FAILED (exit {rc})'}; best found "
              f"{'IS' if found else 'is NOT'} the planted one\n")
    record = records_path(inventory)
    if rc != 0 or not record.exists():
        return False
    # The reference inventory planned offline with this record beside it (a copy in the scratch directory).
    ref = tmp / "reference"
    ref.mkdir()
    shutil.copy(REPO / REFERENCE_INVENTORY, ref / Path(REFERENCE_INVENTORY).name)
    shutil.copy(record, records_path(ref / Path(REFERENCE_INVENTORY).name))
    _section(out, f"Plan of {REFERENCE_INVENTORY} with this record beside it: sglang-deploy plan --explain")
    plan_rc = _stream([sys.executable, "-m", "sglang_deploy.commands.cli", "plan",
                       str(ref / Path(REFERENCE_INVENTORY).name), "--explain"], out)
    if keep_record:
        kept = records_path(REPO / REFERENCE_INVENTORY)
        shutil.copy(record, kept)
        out.write(f"--keep-record: written to {kept.relative_to(REPO)} (measured on SIMULATED GPUs and server: "
                  "remove it before planning real hosts)\n")
    return found and plan_rc == 0
