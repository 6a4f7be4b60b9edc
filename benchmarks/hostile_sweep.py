#!/usr/bin/env python3
"""The fleet-in-service surfaces against hostile answers and values, by class: how many hold.

    .venv/bin/python benchmarks/hostile_sweep.py [--tree PATH] [--cases NAME,...] [--classes C,...]

Each case is one thing a broken or compromised gateway, server, Hub, host file or inventory could
hand the tool, run as a whole process (the CLI as a user types it, or one library call where no
command reaches it: the drain's in-flight wait, the gateway client, the `--diff` redaction) with
a wall-clock bound of the surface's own deadline plus slack. Peers are raw sockets on loopback
(sglang_deploy/simulator/raw_peer.py; nothing above TCP is simulated); no throwaway host is
needed (the hostile host files over real SSH are tests/e2e/test_hostile_host_e2e.py).

A case holds when the process ends within its bound, prints no traceback, no secret, no terminal
control character, stays under 512 MiB (peak resident: VmHWM read from /proc while it runs, since
the kernel's accounting of a finished child also counts the pages of the parent it was forked
from), and, where the case is a refusal, exits non-zero naming the field. A case that does not end
within its bound is killed 5 s after it.

``--tree PATH`` runs the same cases against another checkout of this project (its package first on
PYTHONPATH, this venv's interpreter and libraries): the figures before a change, e.g. from
``git worktree add /tmp/before <commit>``. The last line says whether every case held.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from sglang_deploy.simulator.raw_peer import Behave, RawServer  # noqa: E402
from status_hostile_gateway import (KEY, _answer, closed_port, echo_key, huge_json, inventory,  # noqa: E402
                                    measured, silent, trickle_body, trickle_headers)

MEMORY_GOAL_MB = 512
AS_LIMIT = 4 << 30  # each case's address space (the interpreter, its threads' stacks and arenas included)
TOKEN = "hf_SweepSecretToken0123456789abcdef"
CLI = "import sys; sys.argv[0] = 'sglang-deploy'; from sglang_deploy.commands.cli import main; sys.exit(main())"
BIG = "9" * 400


# ---- hostile peers beyond status_hostile_gateway's ---------------------------------------------

def _workers(*entries: dict) -> Behave:
    def behave(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(_answer(json.dumps({"workers": list(entries), "total": len(entries)}).encode()))
    return behave


SURROGATE = _workers({"id": "a", "url": "http://10.0.0.5:30000/\ud800", "is_healthy": True})
CONTROL = _workers({"id": "\x1b]0;owned\x07\x1b[2J", "url": "http://10.0.0.5:30000", "is_healthy": True})
KEY_IN_PATH = _workers({"id": "b", "url": f"http://10.0.0.5:30000/{KEY}", "is_healthy": True})


def key_in_error(conn: socket.socket, stop: threading.Event) -> None:
    body = json.dumps({"error": f"bad token {KEY}"}).encode()
    conn.sendall(f"HTTP/1.1 500 Internal Server Error\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)


@functools.cache
def bomb(wbits: int) -> bytes:
    """1 GiB of zeros compressed twice, the inner layer gzip, the outer one ``wbits``' kind (31:
    gzip, 15: zlib's deflate): about 12 KB on the wire (made in about 2 s, once)."""
    inner = zlib.compressobj(1, zlib.DEFLATED, 31)
    parts = [inner.compress(bytes(1 << 20)) for _ in range(1024)] + [inner.flush()]
    outer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return outer.compress(b"".join(parts)) + outer.flush()


def gzip_bomb(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(_answer(bomb(31), "Content-Type: application/json\r\nContent-Encoding: gzip, gzip\r\n"))


def deflate_bomb(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(_answer(bomb(15), "Content-Type: application/json\r\nContent-Encoding: gzip, deflate\r\n"))


# ---- cases -------------------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    cls: str
    what: str
    argv: Callable[["Env"], list[str]]     # the process's arguments after the interpreter
    bound_s: float
    peer: Behave | None = None
    refuse: str | None = None               # a refusal: exit != 0 and this text in the output
    secret: str = KEY
    extra_env: dict = field(default_factory=dict)


@dataclass
class Env:
    tmp: Path
    url: str = ""
    files: dict = field(default_factory=dict)


def cli(*args: str) -> Callable[[Env], list[str]]:
    return lambda e: ["-c", CLI, *[a.format(url=e.url, tmp=e.tmp, **e.files) for a in args]]


def snippet(code: str, *args: str) -> Callable[[Env], list[str]]:
    return lambda e: ["-c", code, *[a.format(url=e.url, tmp=e.tmp, **e.files) for a in args]]


GATEWAY = """
import sys
from sglang_deploy.deploy.gateway_client import Gateway, GatewayError
try:
    print("listed", len(Gateway(sys.argv[1], sys.argv[2] or None, timeout_s=3).workers()))
except GatewayError as exc:
    print("error:", exc)
"""
WAIT_IDLE = """
import sys
from sglang_deploy.deploy.gateway_client import GatewayError, wait_idle
try:
    print("idle", wait_idle(sys.argv[1], None, 2.0))
except GatewayError as exc:
    print("error:", exc)
"""
REDACT = """
import sys
try:
    from sglang_deploy.status.redact import redact
except ImportError:
    from sglang_deploy.plan.status import redact
sys.stdout.write(redact(open(sys.argv[1], encoding="utf-8").read()))
"""
OPTIONS = """
import json, sys
from sglang_deploy.gate.options import CheckOptions, to_file_dict
data = to_file_dict(CheckOptions(url="http://127.0.0.1:1"))
data[sys.argv[2]] = json.loads(sys.argv[3])
open(sys.argv[1], "w").write(json.dumps(data))
"""


def _status(name: str, cls: str, what: str, peer: Behave) -> Case:
    return Case(name, cls, what, cli("status", "{inventory}", "--json"), 30, peer)


def _inventory_with(tmp: Path, **worker: object) -> Path:
    data = {"ssh_hostname": "10.0.0.5", "sglang_model": "Qwen/Qwen3-32B", "sglang_model_source": "server",
            "sglang_gpus": {"model": "RTX A6000", "count": 2, "topology": "nvlink-pairs"},
            "sglang_gateways": ["gw"], **worker}
    path = tmp / f"inv-{abs(hash(repr(sorted(worker.items())))) % 10**8}.py"
    path.write_text("gateways = [('gw', {'ssh_hostname': '10.0.0.1', 'sglang_gateway': {'port': 30100}})]\n"
                    f"workers = [('w1', {data!r})]\n")
    return path


def _plan(name: str, what: str, refuse: str, **worker: object) -> Case:
    def argv(e: Env) -> list[str]:
        return ["-c", CLI, "plan", str(_inventory_with(e.tmp, **worker))]
    return Case(name, "writes" if "textfile" in refuse else "nonsense", what, argv, 20, refuse=refuse)


def _redact(name: str, what: str, text: str, cls: str = "secrets") -> Case:
    def argv(e: Env) -> list[str]:
        path = e.tmp / f"{name}.env"
        path.write_text(text)
        return ["-c", REDACT, str(path)]
    return Case(name, cls, what, argv, 10, secret=TOKEN)


def _option(key: str, value: object) -> Case:
    def argv(e: Env) -> list[str]:
        path = e.tmp / f"options-{key}.json"
        subprocess.run([sys.executable, "-c", OPTIONS, str(path), key, json.dumps(value)], check=True,
                       env=e.files["_env"], cwd=e.files["_cwd"], timeout=60)
        return ["-m", "sglang_deploy.gate", "check", "--options", str(path)]
    return Case(f"options-{key}", "values", f"gate options file: {key} of 400 digits", argv, 20, refuse=key)


FETCH = ("models", "fetch", "Qwen/Qwen3-32B")
CASES: list[Case] = [
    # deadlines that must cover connect, headers and body
    _status("status-trickle-headers", "deadlines", "status: gateway sends a header line every 0.5 s", trickle_headers),
    _status("status-trickle-body", "deadlines", "status: gateway sends its body a byte every 0.2 s", trickle_body),
    _status("status-silent", "deadlines", "status: gateway accepts and never answers", silent),
    Case("check-trickle-headers", "deadlines", "check --ready-timeout 3: server trickles headers",
         cli("check", "--url", "{url}", "--ready-timeout", "3"), 18, trickle_headers),
    Case("check-trickle-body", "deadlines", "check --ready-timeout 3: server trickles its body",
         cli("check", "--url", "{url}", "--ready-timeout", "3"), 18, trickle_body),
    Case("check-silent", "deadlines", "check --ready-timeout 3: server never answers",
         cli("check", "--url", "{url}", "--ready-timeout", "3"), 18, silent),
    Case("gateway-trickle-headers", "deadlines", "Gateway(timeout_s=3).workers(): headers trickled",
         snippet(GATEWAY, "{url}", ""), 13, trickle_headers),
    Case("gateway-trickle-body", "deadlines", "Gateway(timeout_s=3).workers(): body trickled",
         snippet(GATEWAY, "{url}", ""), 13, trickle_body),
    Case("drain-metrics-trickle-headers", "deadlines", "the drain's in-flight wait (2 s): /metrics headers trickled",
         snippet(WAIT_IDLE, "{url}"), 12, trickle_headers),
    Case("drain-metrics-trickle-body", "deadlines", "the drain's in-flight wait (2 s): /metrics body trickled",
         snippet(WAIT_IDLE, "{url}"), 12, trickle_body),
    Case("hub-trickle-headers", "deadlines", "models fetch: the Hub trickles its model info's headers",
         cli(*FETCH), 80, trickle_headers, extra_env={"HF_ENDPOINT": "{url}"}),
    Case("hub-invalid-endpoint", "deadlines", "models fetch: HF_ENDPOINT http://127.0.0.1:18x99",
         cli(*FETCH), 20, extra_env={"HF_ENDPOINT": "http://127.0.0.1:18x99"}),
    # decoding bounded
    _status("status-nested-gzip", "decoding", "status: 12 KB of gzip, gzip decoding to 1 GiB", gzip_bomb),
    _status("status-deflate-gzip", "decoding", "status: gzip inside deflate, 1 GiB decoded", deflate_bomb),
    _status("status-64mib-json", "decoding", "status: 64 MiB of well-formed JSON", huge_json),
    Case("gateway-nested-gzip", "decoding", "Gateway.workers(): gzip, gzip",
         snippet(GATEWAY, "{url}", ""), 13, gzip_bomb),
    Case("check-nested-gzip", "decoding", "check --ready-timeout 3: every answer gzip, gzip",
         cli("check", "--url", "{url}", "--ready-timeout", "3"), 18, gzip_bomb),
    Case("drain-metrics-nested-gzip", "decoding", "the drain's in-flight wait: /metrics gzip, gzip",
         snippet(WAIT_IDLE, "{url}"), 12, gzip_bomb),
    Case("hub-nested-gzip", "decoding", "models fetch: model info gzip, gzip",
         cli(*FETCH), 80, gzip_bomb, extra_env={"HF_ENDPOINT": "{url}"}),
    # secrets never printed
    _status("status-key-as-id", "secrets", "status: the API key echoed as a worker's id and URL password", echo_key),
    _status("status-key-in-path", "secrets", "status: the API key in a worker URL's path", KEY_IN_PATH),
    Case("gateway-key-in-error", "secrets", "Gateway.workers(): a 500 whose body quotes the key",
         snippet(GATEWAY, "{url}", KEY), 13, key_in_error),
    _redact("diff-blank-around-equals", "status --diff: HF_TOKEN = value", f"A=1\nHF_TOKEN = {TOKEN}\n"),
    _redact("diff-blank-after-equals", "status --diff: HF_TOKEN= value", f"HF_TOKEN= {TOKEN}\nB=2\n"),
    _redact("diff-continued-line", "status --diff: a value continued with a backslash",
            f"HF_TOKEN=hf_\\\n{TOKEN[3:]}\n"),
    _redact("diff-after-quote", "status --diff: more value after a closing quote", f'HF_TOKEN="x"{TOKEN}\n'),
    _redact("diff-quoted-continued", "status --diff: a quoted value over two lines",
            f'HF_TOKEN="hf_\\\n{TOKEN[3:]}"\n'),
    _redact("diff-crlf", "status --diff: CRLF line ends", f"A=1\r\nHF_TOKEN={TOKEN}\r\n"),
    # writes where they belong (plan refuses a textfile directory that is not one of its own)
    *[_plan(f"textfile-{n}", f"plan: sglang_watch.textfile_dir {d}", "sglang_watch.textfile_dir",
            sglang_watch={"textfile_dir": d})
      for n, d in (("tmp", "/tmp"), ("root", "/"), ("etc", "/etc"), ("usr-lib", "/usr/lib"),
                   ("state", "/var/lib/sglang-deploy"), ("under-state", "/var/lib/sglang-deploy/metrics"))],
    # values: tracebacks and hangs
    _status("status-surrogate-url", "values", "status: a lone surrogate in a worker URL", SURROGATE),
    _status("status-control-id", "values", "status: terminal controls in a worker id", CONTROL),
    _redact("diff-256kib-line", "status --diff: one 256 KiB line (backtracking)",
            "X=" + "a=" * (128 << 10) + "\n", cls="values"),
    *[_option(key, value) for key, value in (("target_tok_s", int(BIG)), ("tolerance", int(BIG)),
                                             ("ready_timeout", int(BIG)), ("stall_timeout", int(BIG)),
                                             ("slo", {"ttft_p90": int(BIG)}))],
    Case("rollout-max-unavailable", "values", "rollout --max-unavailable of 400 digits",
         cli("rollout", "{inventory}", "--max-unavailable", BIG), 20, refuse="--max-unavailable"),
    Case("rollout-max-unavailable-arabic", "values", "rollout --max-unavailable ٣ (an Arabic-Indic digit)",
         cli("rollout", "{inventory}", "--max-unavailable", "٣"), 20, refuse="--max-unavailable"),
    Case("rollout-setting", "values", "sglang_rollout.max_unavailable of 400 digits",
         lambda e: ["-c", CLI, "rollout", str(_inventory_with(e.tmp, sglang_rollout={"max_unavailable": int(BIG)}))],
         20, refuse="max_unavailable"),
    Case("tune-budget-superscript", "values", "tune --budget ²", cli("tune", "{inventory}", "--host", "w1",
                                                                     "--budget", "²"), 20, refuse="--budget"),
    Case("tune-budget-digits", "values", "tune --budget of 400 digits", cli("tune", "{inventory}", "--host", "w1",
                                                                           "--budget", BIG), 20, refuse="--budget"),
    # nonsense refused naming both hosts
    _plan("worker-at-gateway-url", "plan: a worker's URL is its gateway's own", "would route to itself",
          sglang_worker_url="http://10.0.0.1:30100"),
    _plan("worker-at-gateway-metrics", "plan: a worker at its gateway's metrics port", "would route to itself",
          sglang_worker_url="http://10.0.0.1:29000"),
]
CLASSES = ("deadlines", "decoding", "secrets", "writes", "values", "nonsense")


def _limit_memory() -> None:
    """In the child: an address-space limit, so that a client which decodes a bomb whole dies of
    MemoryError instead of taking this machine's memory."""
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run(case: Case, tree: Path, tmp: Path) -> dict:
    server = RawServer(case.peer) if case.peer else None
    env = {**os.environ, "PYTHONPATH": str(tree), "BENCH_GW_KEY": KEY, "HF_HUB_OFFLINE": "1",
           "XDG_CACHE_HOME": str(tmp / "cache"), "HF_TOKEN": TOKEN}
    e = Env(tmp, url=server.url if server else "")
    e.files = {"inventory": str(inventory(tmp / f"{case.name}-inv.py", server.port if server else closed_port())),
               "_env": env, "_cwd": str(tree)}
    env.update({k: v.format(url=e.url) for k, v in case.extra_env.items()})
    if "HF_ENDPOINT" in case.extra_env:
        env.pop("HF_HUB_OFFLINE")
    argv = case.argv(e)
    m = measured([sys.executable, *argv], cwd=tree, env=env, kill_after_s=case.bound_s + 5,
                 preexec_fn=_limit_memory, max_bytes=4 << 20)
    if server:
        server.close()
    killed, wall, peak_kb = m.killed, m.wall_s, m.peak_kb
    text = (m.out + m.err).decode("utf-8", "replace")
    problems = []
    if killed or wall > case.bound_s:
        problems.append(f"ran {wall:.0f} s (bound {case.bound_s:g})" + (", killed" if killed else ""))
    if "Traceback" in text:
        problems.append("traceback: " + next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")[:80])
    if case.secret in text or (case.secret == KEY and TOKEN in text):
        problems.append("secret printed")
    if any(ch in text for ch in ("\x1b", "\x07")):
        problems.append("terminal control printed")
    peak = peak_kb / 1024
    if peak >= MEMORY_GOAL_MB:
        problems.append(f"peak {peak:.0f} MiB")
    if case.refuse is not None and not killed and (m.returncode == 0 or case.refuse not in text):
        problems.append(f"not refused naming {case.refuse} (exit {m.returncode})")
    return {"case": case.name, "class": case.cls, "what": case.what, "wall_s": wall, "peak_mb": peak,
            "exit": m.returncode, "held": not problems, "problems": problems}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=ROOT, help="a checkout of this project to run (default: this one)")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--classes", default="", help="comma-separated: " + ", ".join(CLASSES))
    args = ap.parse_args()
    names = [n for n in args.cases.split(",") if n]
    classes = [c for c in args.classes.split(",") if c]
    unknown = [n for n in names if n not in {c.name for c in CASES}] + [c for c in classes if c not in CLASSES]
    if unknown:
        ap.error(f"unknown case(s) or class(es): {', '.join(unknown)}")
    if not (args.tree / "sglang_deploy" / "__init__.py").is_file() or not stat.S_ISDIR(args.tree.stat().st_mode):
        ap.error(f"--tree {args.tree}: not a checkout of this project")
    chosen = [c for c in CASES if (not names or c.name in names) and (not classes or c.cls in classes)]
    results = []
    with tempfile.TemporaryDirectory(prefix="hostile-sweep-") as tmp:
        for case in chosen:
            results.append(run(case, args.tree.resolve(), Path(tmp)))
            r = results[-1]
            print(f"{'held' if r['held'] else 'FAILS':<6} {r['case']:<32} {r['wall_s']:6.1f} s {r['peak_mb']:5.0f} MiB "
                  f"exit {r['exit']!s:>3}  {'; '.join(r['problems'])}", flush=True)
    print()
    print(f"{'class':<10} {'tried':>5} {'held':>5}")
    for cls in CLASSES:
        mine = [r for r in results if r["class"] == cls]
        if mine:
            print(f"{cls:<10} {len(mine):>5} {sum(r['held'] for r in mine):>5}")
    held = sum(r["held"] for r in results)
    worst = max((r["wall_s"] for r in results), default=0.0)
    peak = max((r["peak_mb"] for r in results), default=0.0)
    print(f"{held} of {len(results)} cases held (worst wall {worst:.1f} s, peak {peak:.0f} MiB): "
          f"{'every case held' if held == len(results) else 'NOT every case held'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
