"""The simulated SGLang server logs the phases of its start as the real releases do (Load weight end,
Memory pool end, the version's CUDA graph capture line, fired up), the cold compile inside the CUDA
graph phase, and hangs in the phase ``stall_in`` names until it is stopped (sglang/_sim/startcache.py).

Timings here are lower bounds and order only: the machine may be loaded."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

import tests.test_simulated_sglang as simulated
from tests.test_simulated_sglang import (  # noqa: F401 (wheels, venv_python: fixtures)
    Server,
    _clean_env,
    free_port,
    health,
    venv_python,
    wait_for,
    wheels,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")

LOAD_END = "Load weight end. "
POOL_END = re.compile(r"Memory pool end\. avail mem=\d+\.\d\d GB")
#: The decode CUDA graph's capture line; its elapsed figure is group 1.
GRAPH_END = {
    "0.5.9": re.compile(r"Capture cuda graph end\. Time elapsed: (\d+\.\d\d) s\. mem usage=\d+\.\d\d GB\. "
                        r"avail mem=\d+\.\d\d GB\."),
    "0.5.23": re.compile(r"Capture target decode CUDA graph end\. elapsed=(\d+\.\d\d) s, mem usage=\d+\.\d\d GB, "
                         r"avail mem=\d+\.\d\d GB\."),
}
ANY_GRAPH_END = re.compile("|".join(p.pattern for p in GRAPH_END.values()))
READY = "The server is fired up and ready to roll!"
#: Generous: a start on a loaded 2-core machine; only a hang runs into these.
SLOW = 60.0


def snapshot(tmp: Path) -> Path:
    model = tmp / "snapshot"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * 1000)
    return model


def lines(srv: Server) -> List[str]:
    return srv.out.read_text().splitlines() if srv.out.exists() else []


def first(srv: Server, pattern) -> Optional[int]:
    """Index of the first log line matching ``pattern`` (a string: contained), or None."""
    for i, line in enumerate(lines(srv)):
        if (pattern in line) if isinstance(pattern, str) else pattern.search(line):
            return i
    return None


def wait_line(srv: Server, pattern, what: str) -> int:
    wait_for(lambda: first(srv, pattern) is not None or srv.proc.poll() is not None, SLOW, what)
    at = first(srv, pattern)
    assert at is not None, f"{what} never logged; exit {srv.proc.poll()}: {srv.err.read_text()[-2000:]}"
    return at


def graph_elapsed(srv: Server, version: str) -> float:
    match = next(m for m in map(GRAPH_END[version].search, lines(srv)) if m)
    return float(match.group(1))


def stop_cleanly(srv: Server) -> None:
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(30) == 0, srv.err.read_text()[-2000:]


@pytest.fixture
def start(venv_python, tmp_path, monkeypatch):  # noqa: F811
    """start(version, cfg, model="m", cache_dir=None): a simulated server, not yet listening."""
    servers: List[Server] = []

    def run(version: str, cfg: Dict, model: str = "m", cache_dir: Optional[Path] = None) -> Server:
        if cache_dir is not None:  # Server's environment drops SGLANG_*: add the cache directory back
            monkeypatch.setattr(simulated, "_clean_env",
                                lambda **extra: _clean_env(SGLANG_CACHE_DIR=str(cache_dir), **extra))
        srv = Server(venv_python(version), ["--model-path", model], cfg, tmp_path, name=f"{len(servers)}")
        monkeypatch.setattr(simulated, "_clean_env", _clean_env)
        servers.append(srv)
        return srv

    yield run
    for srv in servers:
        srv.stop()


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_the_phase_lines_come_in_order_in_the_versions_spelling(start, tmp_path, version):
    cfg = {"startup_delay_s": 1.0, "warmup_s": 0.4}
    srv = start(version, cfg, model=str(snapshot(tmp_path)))
    t0 = time.monotonic()
    order = [wait_line(srv, LOAD_END, "Load weight end"), wait_line(srv, POOL_END, "Memory pool end"),
             wait_line(srv, GRAPH_END[version], "the CUDA graph line"), wait_line(srv, READY, "fired up")]
    took = time.monotonic() - t0
    assert order == sorted(order) and len(set(order)) == 4, lines(srv)
    # the other version's spelling is not there, each line once, the simulated ones marked so
    assert sum(bool(ANY_GRAPH_END.search(line)) for line in lines(srv)) == 1
    assert lines(srv)[order[1]].endswith(" (simulated)") and lines(srv)[order[2]].endswith(" (simulated)")
    assert lines(srv)[order[3]].endswith("] " + READY)
    # the graph phase ends warmup_s before ready: startup_delay_s - warmup_s into the wait
    assert graph_elapsed(srv, version) >= cfg["startup_delay_s"] - cfg["warmup_s"] - 0.01
    assert health(srv) == 200
    stop_cleanly(srv)
    print(f"{version}: load, memory pool, CUDA graphs, ready in {took:.2f} s after the start")


def test_the_cold_compile_is_in_the_cuda_graph_phase_and_a_warm_start_skips_it(start, tmp_path):
    cache, cold_s = tmp_path / "cache", 2.0
    cache.mkdir()
    cfg = {"startup_delay_s": 0.5, "warmup_s": 0.2, "cold_start_s": cold_s}
    elapsed = []
    for n in range(2):
        srv = start("0.5.23", cfg, cache_dir=cache)
        pool = wait_line(srv, POOL_END, "Memory pool end")
        graph = wait_line(srv, GRAPH_END["0.5.23"], "the CUDA graph line")
        wait_line(srv, READY, "fired up")
        assert pool < graph
        elapsed.append(graph_elapsed(srv, "0.5.23"))
        assert ("compile caches cold" if n == 0 else "compile caches warm") in srv.out.read_text()
        stop_cleanly(srv)
    # cold: the compile, then startup_delay_s - warmup_s; warm: startup_delay_s - warmup_s only
    assert elapsed[0] >= cold_s + 0.3 - 0.01, elapsed
    assert elapsed[1] < elapsed[0] - cold_s / 2, elapsed  # not a speed bound: the compile is not there at all
    print(f"graph phase: cold {elapsed[0]:.2f} s, warm {elapsed[1]:.2f} s")


#: stall_in: (the last line logged, the first line never logged)
STALLS = {
    "load": ("Load weight begin: ", LOAD_END),
    "kv_cache": ("Uvicorn running on ", POOL_END),
    "cuda_graphs": (POOL_END, ANY_GRAPH_END),
    "warmup": (ANY_GRAPH_END, READY),
}


@pytest.mark.parametrize("phase", list(STALLS))
def test_a_start_stalled_in_a_phase_hangs_there_until_stopped(start, tmp_path, phase):
    delay = 0.5
    srv = start("0.5.23", {"startup_delay_s": delay, "warmup_s": 0.2, "stall_in": phase},
                model=str(snapshot(tmp_path)))
    last, never = STALLS[phase]
    wait_line(srv, last, f"the last line before the {phase} stall")
    shown = time.monotonic()
    if phase != "load":
        srv.wait_listening(SLOW)
    time.sleep(delay + 1.0)  # past when it would have been ready
    assert srv.proc.poll() is None
    # stuck: no end line of the phase nor any later one; /health 503 (the load is before the bind)
    assert health(srv) == (None if phase == "load" else 503)
    text = srv.out.read_text()
    assert first(srv, never) is None and READY not in text, text
    assert f"stall_in: {phase}" in lines(srv)[0]  # the banner says so
    stop_cleanly(srv)
    assert "Received a stop signal" in srv.out.read_text()
    print(f"stall_in={phase}: stuck {time.monotonic() - shown:.2f} s after its last line, stopped with exit 0")


_CHECK = r"""
import json, sys
from sglang._sim import config
out = []
for path in sys.argv[1:]:
    try:
        out.append(config.load(path)[0].get("stall_in"))
    except config.ConfigError as e:
        out.append("error: " + str(e))
json.dump(out, sys.stdout)
"""


def test_bad_stall_in_and_warmup_s_are_refused(venv_python, tmp_path):  # noqa: F811
    cases = [{"stall_in": "compile"}, {"stall_in": 3}, {"warmup_s": -1}, {"warmup_s": "0.5"},
             {"stall_in": "cuda_graphs", "warmup_s": 0}, {}]
    paths = []
    for i, case in enumerate(cases):
        paths.append(tmp_path / f"sim{i}.json")
        paths[-1].write_text(json.dumps(case))
    proc = subprocess.run([str(venv_python("0.5.23")), "-c", _CHECK, *map(str, paths)], capture_output=True,
                          text=True, timeout=60, env=_clean_env())
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert "stall_in must be null or one of load, kv_cache, cuda_graphs, warmup, got 'compile'" in got[0]
    assert "stall_in must be null or one of" in got[1] and "got 3" in got[1]
    assert "warmup_s must be a number >= 0" in got[2] and "warmup_s must be a number >= 0" in got[3]
    assert got[4:] == ["cuda_graphs", None]
    # and at start: exit 1 with the reason
    refused = subprocess.run([str(venv_python("0.5.23")), "-m", "sglang.launch_server", "--model-path", "m",
                              "--port", str(free_port())], capture_output=True, text=True, timeout=60,
                             env=_clean_env(SGLANG_SIM_CONFIG=str(paths[0])))
    assert refused.returncode == 1 and "stall_in must be null or one of" in refused.stderr, refused.stderr
