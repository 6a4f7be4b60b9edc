"""`sglang-deploy demo`: the reference deployment end to end, on this machine, with stand-ins.

    sglang-deploy demo [--offline] [--json FILE]

With root, ``systemd-nspawn`` and ``sshd`` (sglang_deploy/simulator/testbed): boots one
throwaway host (real systemd, real sshd, every write in a tmpfs) staged as
2x RTX A6000, deploys the reference plan of ``inventory/a6000.py`` to it with
the real ``pyinfra INVENTORY deploy.py`` (probe, install, stage, prove, swap,
restart, gate), prints the plan, the deploy and the deploy's gate result, runs the
continuous check the deploy installed once, reads the host back with ``sglang-deploy
status`` (every column green, or the demo fails), and
tears the host down, verifying that nothing is left mounted or running.

Without them (or with ``--offline``): says why, prints the offline plan,
starts the simulated server locally with the plan's argv on a free loopback
port, runs the gate (``sglang-deploy check`` with the plan as expected
configuration) against it and stops it.

SIMULATED: the server in both (sglang_deploy/simulator/sglang_server: SGLang's parser and
HTTP API, no model, filler text, a configured decode rate) and, on the
throwaway host, the GPUs (the NVML stand-in answering from a board profile).
Its figures say nothing about SGLang's performance. The demo runs from a checkout of the
repository: it deploys with its deploy.py and reference inventory.

Exit codes: 0 deploy, gate and status passed; 1 something failed (the output says
what); 2 the demo cannot run here (not a checkout, bad arguments).

Top floor (like ``cli.py``): it starts processes and imports the stand-ins (sglang_deploy/simulator).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from sglang_deploy.plan.output import plan_json, print_plan
from sglang_deploy.plan.inventory_plan import offline_weights
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import RenderedFiles, render
from sglang_deploy.lifecycle.revision import Layout
from sglang_deploy.plan.spec import build_spec

REPO = Path(__file__).resolve().parents[2]
REFERENCE_INVENTORY = "inventory/a6000.py"
#: The NVML board profile the throwaway host answers the GPU probe with (sglang_deploy/simulator/boards).
BOARD = "a6000x2-bridge"
HOST_NAME = "demo-a6000"
#: The simulated server's behaviour (sglang_deploy/simulator/sglang_server/README.md, "Behaviour file"):
#: single-stream decode in the range the model profile records for MTP on 2x A6000
#: (50-57 tok/s), tokens arriving ~3 per step as with speculative decoding, the
#: model's own architecture, and a start-up short enough for a demo.
SIMULATED = {
    "startup_delay_s": 1.0,
    "ttft_s": 0.08,
    "decode_tok_s": 55.0,
    "spec_accept_length": 3.0,
    "architectures": ["Qwen3_5ForConditionalGeneration"],
}
#: `demo --tune`: the server also follows the reference deployment's performance model
#: (sglang_deploy/simulator/perf/a6000_qwen36.yaml: the operator's 35 tok/s at 1 MTP step and 50-57 at
#: 3, and a planted best elsewhere), and the tuner searches the speculative settings on the host.
PERF_MODEL = Path(__file__).resolve().parents[1] / "simulator" / "perf" / "a6000_qwen36.yaml"
TUNE_SPACE = {"speculative_num_steps": [2, 3, 4, 5], "speculative_eagle_topk": [1, 2],
              "speculative_num_draft_tokens": [3, 4, 5, 6, 8, 10],
              # the demo tunes the speculative settings only: the rest stays as planned, the layout too
              # (the tuning space has had tp_size and attn_dp_size since it tunes layouts: left in, the
              # demo's tune spent its trials on other layouts and missed the planted best)
              "mem_fraction_static": [], "max_running_requests": [], "cuda_graph_max_bs_decode": [],
              "chunked_prefill_size": [], "prefill_cuda_graph": [], "custom_all_reduce": [],
              "tp_size": [], "attn_dp_size": []}
TUNE_BUDGET = 24
TUNE_TIMEOUT_S = 1800
#: The demo's gate: a target clearly below the simulated rate, and a short measurement.
TARGET_TOK_S = 45.0
GATE = {"repeats": 3, "max_tokens": 128, "ready_timeout_s": 120}
DEPLOY_TIMEOUT_S = 600
#: The local simulated server is up within seconds; a shorter wait than the deploy's gate means
#: a server that died at start (its log is shown) costs little.
LOCAL_READY_TIMEOUT_S = 30
#: The server's port is drawn from here (the testbed's sshd ports are 20000-29999).
PORT_RANGE = (10000, 20000)
SERVER_STOP_TIMEOUT_S = 15

ON_HOST_NOTICE = (
    "SIMULATED: the GPUs (an NVML stand-in on the host, answering with the {board} board profile) and\n"
    "the server (sglang_deploy/simulator/sglang_server: SGLang {version}'s own flag parser and HTTP API, "
    "no model, filler\n"
    "text, decoding at a configured {rate:g} tok/s). Real: systemd, sshd, pyinfra, the deploy and the gate.\n"
    "The figures show the gate at work; they say nothing about SGLang's performance.\n"
)
LOCAL_NOTICE = (
    "SIMULATED: the server (sglang_deploy/simulator/sglang_server: SGLang {version}'s own flag parser and "
    "HTTP API, no\n"
    "model, filler text, decoding at a configured {rate:g} tok/s); no GPU is involved (the plan uses the\n"
    "hardware the inventory declares). The figures show the gate at work; they say nothing about SGLang's\n"
    "performance.\n"
)


class DemoError(Exception):
    """The demo cannot run here (exit 2)."""


# ---------------------------------------------------------------------------
# shared pieces
# ---------------------------------------------------------------------------


def _stand_ins() -> tuple[Any, Any, Any]:
    """The simulator's stand-ins: (testbed, testbed.gpu, build_wheel). Raises DemoError when the
    checkout (deploy.py, the reference inventory) is not next to the package."""
    if not (REPO / "deploy.py").is_file() or not (REPO / REFERENCE_INVENTORY).is_file():
        raise DemoError(f"the demo runs from a checkout of sglang-deploy: it needs deploy.py and "
                        f"{REFERENCE_INVENTORY} next to the package, and {REPO} has none (clone the repository "
                        f"and `pip install -e .` from it)")
    from sglang_deploy.simulator import testbed
    from sglang_deploy.simulator.sglang_server.build import build_wheel
    from sglang_deploy.simulator.testbed import gpu
    return testbed, gpu, build_wheel


def reference_data() -> dict[str, Any]:
    """The reference host's deploy data (its groups' layer, then its own; ``sglang_*`` keys only,
    so no connection setting of the reference host travels with it)."""
    from sglang_deploy.deploy.inventory import load_inventory

    ref = load_inventory(str(REPO / REFERENCE_INVENTORY))[0]
    data: dict[str, Any] = {}
    for layer in (ref.group_data, ref.host_data):
        for key, value in layer.items():
            if not key.startswith("sglang_"):
                continue
            if key == "sglang_intents" and isinstance(value, dict):
                value = {**data.get(key, {}), **value}  # intents merge per name, the host's win
            data[key] = value
    return data


def free_port() -> int:
    """A port nobody listens on, below the kernel's default ephemeral range (32768-60999), so
    that no outgoing connection takes it before the server binds it."""
    for _ in range(200):
        port = random.randrange(*PORT_RANGE)
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        return port
    raise DemoError(f"no free port in {PORT_RANGE}")


def plan_for(name: str, data: Mapping[str, Any]) -> tuple[Plan, RenderedFiles]:
    spec = build_spec(name, {}, dict(data))
    plan = plan_host(spec, weights=offline_weights(spec))
    return plan, render(plan)


def _section(out: TextIO, title: str) -> None:
    out.write(f"\n## {title}\n\n")
    out.flush()


def _write_json(path: str | None, result: dict[str, Any], err: TextIO) -> bool:
    if not path:
        return True
    try:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2, default=str)
            fh.write("\n")
    except OSError as exc:
        err.write(f"error: --json: cannot write {path}: {exc.strerror or exc}\n")
        return False
    return True


# ---------------------------------------------------------------------------
# the demo
# ---------------------------------------------------------------------------


def run_demo(offline: bool = False, json_path: str | None = None, out: TextIO = sys.stdout,
             err: TextIO = sys.stderr, tune: bool = False, keep_record: bool = False) -> int:
    t0 = time.monotonic()
    try:
        testbed, gpu, build_wheel = _stand_ins()
    except DemoError as exc:
        err.write(f"error: {exc}\n")
        return 2
    from sglang_deploy.deploy.inventory import InventoryError

    try:
        data = reference_data()
    except InventoryError as exc:
        err.write(f"error: {exc}\n")
        return 2
    out.write(f"sglang-deploy demo: the reference deployment ({REFERENCE_INVENTORY}) on this machine\n")
    result: dict[str, Any] = {"simulated": {"board": BOARD, "server": dict(SIMULATED)}}
    missing = ["--offline given"] if offline else testbed.missing_requirements()
    code = None
    if not missing:
        code = _on_throwaway_host(data, result, testbed, gpu, build_wheel, out, err, tune, keep_record)
    if code is None:  # no host could be booted
        why = "; ".join(missing or [result.get("boot_error", "the throwaway host did not boot")])
        out.write(f"\nCannot boot a throwaway host here ({why}).\n"
                  "Falling back: the offline plan, then the gate against the simulated server started locally.\n")
        out.flush()
        result["fallback_reason"] = why
        code = _local(data, result, build_wheel, out, err)
        if tune:
            out.write("\n--tune: not run: tuning deploys every trial to a host, and no throwaway host could boot\n")
            code = 2
    result["exit_code"] = code
    result["seconds"] = round(time.monotonic() - t0, 1)
    out.write(f"\ndemo {'passed' if code == 0 else 'FAILED'} in {result['seconds']:.0f} s "
              f"({'throwaway host' if result['mode'] == 'testbed' else 'local fallback'})\n")
    if not _write_json(json_path, result, err):
        return 2
    return code


# --- on a throwaway host -----------------------------------------------------


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


def _stream(argv: list[str], out: TextIO, timeout: float = DEPLOY_TIMEOUT_S) -> int:
    """Run ``argv`` in the checkout, its output (stdout and stderr) indented into ``out``;
    stopped after ``timeout`` seconds, or when the demo is interrupted."""
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace", bufsize=1)
    timer = threading.Timer(timeout, proc.terminate)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write("  | " + line)
            out.flush()
        rc = proc.wait()
        if not timer.is_alive():
            out.write(f"  (stopped: it did not finish within {timeout:g} s)\n")
        return rc
    finally:
        timer.cancel()
        if proc.poll() is None:  # interrupted: stop it
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _last_gate(history: Path) -> dict[str, Any] | None:
    try:
        lines = history.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("kind") == "gate":
            return entry
    return None


def format_gate_entry(entry: Mapping[str, Any]) -> str:
    """One history.jsonl gate line as a short table."""
    lines = [f"revision {entry.get('revision')}  SGLang {entry.get('sglang_version')}  "
             f"{(entry.get('key') or {}).get('hardware') or ''}".rstrip()]
    decode, target, ttft = entry.get("decode_tok_s"), entry.get("target_tok_s"), entry.get("ttft_s")
    lines.append(f"  decode tok/s (median, 1 stream)  {decode:.1f}" if decode is not None else
                 "  decode tok/s  -")
    if target is not None:
        lines[-1] += f"   target {target:g}"
    if ttft is not None:
        lines.append(f"  TTFT ms (median)                 {ttft * 1000:.1f}")
    diffs = entry.get("server_config_diffs") or []
    if diffs:
        for d in diffs:
            lines.append(f"  config: {d.get('message')}{'  [fails the gate]' if d.get('fails') else ''}")
    else:
        lines.append("  configuration: the server resolved what the plan asked for (no differences)")
    lines.append(str(entry.get("verdict") or "?").upper() + (f": {entry['summary']}" if entry.get("summary") else ""))
    lines.extend(f"  - {r}" for r in entry.get("reasons") or [])
    return "\n".join(lines) + "\n"


# --- fallback: the simulated server on this machine ---------------------------


def _local(reference: dict[str, Any], result: dict[str, Any], build_wheel: Callable[..., Path], out: TextIO,
           err: TextIO) -> int:
    from sglang_deploy.gate.options import CheckOptions
    from sglang_deploy.gate.report import format_report
    from sglang_deploy.gate.run import run_check

    name = "a6000-1"
    plan, files = plan_for(name, reference)
    result.update(mode="local", plan=plan_json(plan, files))
    out.write(LOCAL_NOTICE.format(version=plan.sglang_version, rate=SIMULATED["decode_tok_s"]))
    _section(out, f"Plan (offline, from the declared hardware of {REFERENCE_INVENTORY})")
    print_plan(plan, files, False, out)

    port = free_port()
    argv = with_address(plan.argv, "127.0.0.1", port)
    tmp = Path(tempfile.mkdtemp(prefix="sglang-demo-"))
    try:
        site = tmp / "site"
        with zipfile.ZipFile(build_wheel(plan.sglang_version, tmp / "wheels")) as whl:
            whl.extractall(site)
        config = tmp / "sglang-sim.json"
        config.write_text(json.dumps(SIMULATED))
        _section(out, f"Simulated server on this machine: python -m sglang.launch_server with the plan's argv, "
                      f"--host 127.0.0.1 --port {port}")
        with simulated_server(argv, site, config, tmp / "server.log") as proc:
            result["server_pid"] = proc.pid
            out.write(f"pid {proc.pid}, log {tmp / 'server.log'} (removed afterwards)\n")
            _section(out, "Gate: sglang-deploy check, expected configuration = the plan")
            out.flush()
            opts = CheckOptions(url=f"http://127.0.0.1:{port}", target_tok_s=TARGET_TOK_S,
                                expect_plan=plan.as_dict(), ready_timeout=LOCAL_READY_TIMEOUT_S,
                                repeats=GATE["repeats"], max_tokens=GATE["max_tokens"])
            def progress(msg: str) -> None:
                err.write(f"check: {msg}\n")
                err.flush()

            report = run_check(opts, progress=progress)
            exited = proc.poll()
        result["gate"] = report
        out.write(format_report(report))
        if exited is not None:
            log = (tmp / "server.log").read_text(errors="replace").splitlines()[-20:]
            out.write(f"the simulated server had exited (status {exited}); its last log lines:\n"
                      + "".join(f"  | {line}\n" for line in log))
        left = _group_pids(proc.pid)
        result["server_left_running"] = left
        if left:
            err.write(f"error: processes of the simulated server still running: {left}\n")
            return 1
        out.write(f"simulated server stopped: pid {proc.pid} and its TP worker(s) gone (verified)\n")
        return 0 if report["verdict"] == "pass" else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def with_address(argv: list[str], host: str, port: int) -> list[str]:
    """``argv`` with ``--host`` and ``--port`` set to these (replaced, or added)."""
    out = list(argv)
    for flag, value in (("--host", host), ("--port", str(port))):
        if flag in out:
            out[out.index(flag) + 1] = value
        else:
            out += [flag, value]
    return out


def _sim_env(site: Path, config: Path) -> dict[str, str]:
    # HF_*: the service's Hugging Face settings come from its env file (the plan), never from
    # the environment of whoever runs the demo.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SGLANG_", "PIP_", "HF_"))}
    env.update(PYTHONPATH=str(site), SGLANG_SIM_CONFIG=str(config), PYTHONUNBUFFERED="1")
    return env


def _group_pids(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (the server and the TP workers it started)."""
    from sglang_deploy.simulator.testbed.processes import proc_stats

    return [pid for pid, (state, _ppid, pgrp, *_) in proc_stats() if int(pgrp) == pgid and state != "Z"]


@contextmanager
def simulated_server(argv: list[str], site: Path, config: Path, log: Path) -> Iterator[subprocess.Popen]:
    """``python -m sglang.launch_server ARGV`` from the unpacked simulated wheel, in a process
    group of its own; stopped afterwards: SIGTERM to the server (it stops its TP workers), then
    SIGKILL, by PID, to whatever of the group is still alive after a grace period."""
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", *argv], cwd=str(site.parent),
                                env=_sim_env(site, config), stdin=subprocess.DEVNULL, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(SERVER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for pid in _group_alive_after(proc.pid, 5.0):  # a TP worker that outlived its server
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _group_alive_after(proc.pid, 5.0)


def _group_alive_after(pgid: int, seconds: float) -> list[int]:
    """Wait up to ``seconds`` for process group ``pgid`` to be gone; what is still alive."""
    deadline = time.monotonic() + seconds
    while (alive := _group_pids(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive
