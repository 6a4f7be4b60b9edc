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

Here: the command and its local fallback. What it runs (the reference deployment, the stand-ins'
settings, the gate): sglang_deploy/commands/demo_setup.py; on a throwaway host: demo_host.py; what
it prints and writes: demo_output.py.

Top floor (like ``cli.py``): it starts processes and imports the stand-ins (sglang_deploy/simulator).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from sglang_deploy.commands.demo_host import _on_throwaway_host
from sglang_deploy.commands.demo_output import _section, _write_json
from sglang_deploy.commands.demo_setup import (BOARD, GATE, LOCAL_READY_TIMEOUT_S, PORT_RANGE, REFERENCE_INVENTORY,
                                               REPO, SERVER_STOP_TIMEOUT_S, SIMULATED, TARGET_TOK_S, DemoError,
                                               free_port, plan_for, reference_data)
from sglang_deploy.plan.output import plan_json, print_plan

__all__ = ["GATE", "PORT_RANGE", "REPO", "TARGET_TOK_S", "DemoError", "free_port", "run_demo", "simulated_server",
           "with_address"]

LOCAL_NOTICE = (
    "SIMULATED: the server (sglang_deploy/simulator/sglang_server: SGLang {version}'s own flag parser and "
    "HTTP API, no\n"
    "model, filler text, decoding at a configured {rate:g} tok/s); no GPU is involved (the plan uses the\n"
    "hardware the inventory declares). The figures show the gate at work; they say nothing about SGLang's\n"
    "performance.\n"
)


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
