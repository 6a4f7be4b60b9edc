"""The deploy's post-restart gate end to end: pass is recorded and marked deployed,
a too-slow or crash-looping new revision is rolled back to the previous one.

Its own throwaway host (2x RTX A6000 stand-in, its own port), so the hosts of
test_deploy.py are not disturbed. A "bad" revision is made by pointing the
simulated server at another behaviour file through the service environment
(``SGLANG_SIM_CONFIG`` in ``sglang_env``): that changes the env file, hence the
revision, and leaves the previous revision's behaviour (``/etc/sglang-sim.json``)
as it was, so the rollback restores a healthy server.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from tests.e2e.conftest import NOT_ABOUT_SPEED
from tests.e2e.test_deploy import REFERENCE, boot_a6000_hosts, deploy, host_data, main_pid, wait_healthy
from sglang_deploy.simulator.testbed import Testbed, TestHost

NAME = "e2e-gate"
PORT = 31811
FRESH = "e2e-gate-fresh"  # a host that never had a revision
FRESH_PORT = 31812
API_KEY = "sk-e2e-gate-API-KEY-value"
STATE = "/var/lib/sglang-deploy/sglang"
LIVE = ("etc/systemd/system/sglang.service", "etc/sglang/sglang.env", "etc/nccl.conf")
TARGET = 100.0  # the simulated server decodes 200 tok/s by default
# The deploys here are judged by their target (TARGET) and by what they are about (the plan, a crash,
# the caches), not by their history: the hosts share this machine's cores (NOT_ABOUT_SPEED).
FAST_GATE = {"repeats": 2, "max_tokens": 64, "ready_timeout_s": 300, **NOT_ABOUT_SPEED}


@pytest.fixture(scope="module")
def gate_hosts(testbed: Testbed, tmp_path_factory) -> dict[str, TestHost]:
    return boot_a6000_hosts(testbed, tmp_path_factory, [NAME, FRESH])


def only(hosts: dict[str, TestHost], name: str) -> dict[str, TestHost]:
    return {name: hosts[name]}


def data(**extra) -> dict:
    base = host_data(REFERENCE)  # the A6000 host's data, on this host's own port
    # bound to all addresses: gated from the controller (SGLang's default, 127.0.0.1, is gated on the host)
    base["sglang_intents"] = {**base["sglang_intents"], "port": PORT, "host": "0.0.0.0"}
    return {NAME: {**base, "sglang_target_tok_s": TARGET, "sglang_gate": FAST_GATE, **extra}}


def marker(host: TestHost, name: str) -> str | None:
    path = host.root / STATE.lstrip("/") / name
    return path.read_text().strip() if path.exists() else None


def history(host: TestHost) -> list[dict]:
    path = host.root / STATE.lstrip("/") / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def sim_config(host: TestHost, path: str, config: dict) -> None:
    host.ssh(f"printf '%s' '{json.dumps(config)}' > {path}")


def environ(host: TestHost, pid: int) -> list[str]:
    return host.ssh(f"tr '\\0' '\\n' < /proc/{pid}/environ").stdout.splitlines()


def good_deploy(testbed, hosts, tmp_path) -> str:
    hosts = only(hosts, NAME)
    result = deploy(testbed, hosts, tmp_path, data())
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    host = hosts[NAME]
    rev = marker(host, "current")
    assert rev and marker(host, "deployed") == rev
    wait_healthy(PORT)
    # The NVML stand-in where the venv's Python finds it (a real SGLang venv has nvidia-ml-py), so
    # later gates sample the host's GPUs (board profile) for the likely causes.
    host.ssh("for d in /opt/sglang/sglang-*/lib/python3*/site-packages; do "
             "cp -r /usr/local/lib/python3.11/dist-packages/pynvml $d/; done")
    return rev


def test_passing_deploy_is_recorded_and_marked_deployed(testbed, gate_hosts, tmp_path):
    host = gate_hosts[NAME]
    t0 = time.monotonic()
    result = deploy(testbed, only(gate_hosts, NAME), tmp_path, data())
    elapsed = time.monotonic() - t0
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "gate passed" in result.stdout + result.stderr
    rev = marker(host, "current")
    assert marker(host, "deployed") == rev
    gates = [e for e in history(host) if e["kind"] == "gate" and e["revision"] == rev]
    assert gates and gates[-1]["verdict"] == "pass"
    last = gates[-1]
    assert last["decode_tok_s"] > TARGET and last["target_tok_s"] == TARGET
    assert last["key"]["hardware"] == "2x NVIDIA RTX A6000 (sm86)" and last["sglang_version"] == "0.5.23"
    assert last["plan"]["model"] == "Qwen/Qwen3.6-27B"
    print(f"\npassing deploy (first, with install and gate): {elapsed:.1f} s")


def test_too_slow_revision_is_rolled_back(testbed, gate_hosts, tmp_path):
    host = gate_hosts[NAME]
    good = good_deploy(testbed, gate_hosts, tmp_path)
    pid = main_pid(host)
    live = {p: (host.root / p).read_bytes() for p in LIVE}
    previous_marker = marker(host, "previous")
    sim_config(host, "/etc/sglang-sim-slow.json", {"startup_delay_s": 0.5, "decode_tok_s": 40})
    t0 = time.monotonic()
    result = deploy(testbed, only(gate_hosts, NAME), tmp_path,
                    data(sglang_env={"SGLANG_SIM_CONFIG": "/etc/sglang-sim-slow.json"}))
    elapsed = time.monotonic() - t0
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-6000:]
    assert f"rolled back to revision {good}" in output and "below target" in output, output[-4000:]
    assert "could not measure" not in output
    # the previous revision runs again: a new process, byte-identical files, markers as before
    new_pid = main_pid(host)
    assert new_pid not in (0, pid)
    assert not any(line.startswith("SGLANG_SIM_CONFIG=") for line in environ(host, new_pid))
    for path, content in live.items():
        assert (host.root / path).read_bytes() == content, path
    assert host.ssh("stat -c '%a' /etc/sglang/sglang.env").stdout.strip() == "600"
    assert (marker(host, "current"), marker(host, "deployed"), marker(host, "previous")) == (good, good,
                                                                                            previous_marker)
    wait_healthy(PORT)
    entries = history(host)
    bad = entries[-2]
    assert bad["kind"] == "gate" and bad["verdict"] == "fail" and bad["revision"] != good
    assert bad["decode_tok_s"] < TARGET
    # gated from the controller, the host's GPUs were sampled on the host meanwhile
    assert bad["gate_ran_on"] == "controller"
    assert [g["name"] for g in (bad["nvml"] or {}).get("gpus") or []] == ["NVIDIA RTX A6000"] * 2, bad["nvml"]
    assert entries[-1]["kind"] == "rollback" and entries[-1]["revision"] == good
    assert entries[-1]["verdict"] == "ready"
    print(f"\ntoo-slow revision, gate + rollback: {elapsed:.1f} s")
    print("\n".join(line for line in output.splitlines()
                    if ("revision" in line and "->" in line) or "gate failed" in line))


def test_crash_looping_revision_is_detected_fast_and_rolled_back(testbed, gate_hosts, tmp_path):
    host = gate_hosts[NAME]
    good = good_deploy(testbed, gate_hosts, tmp_path)
    pid = main_pid(host)
    live = {p: (host.root / p).read_bytes() for p in LIVE}
    sim_config(host, "/etc/sglang-sim-crash.json", {"startup_delay_s": 2, "decode_tok_s": 200,
                                                               "faults": {"crash_after_s": 1}})
    t0 = time.monotonic()
    result = deploy(testbed, only(gate_hosts, NAME), tmp_path,
                    data(sglang_env={"SGLANG_SIM_CONFIG": "/etc/sglang-sim-crash.json"}))
    elapsed = time.monotonic() - t0
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-6000:]
    assert "the server did not stay up" in output and f"rolled back to revision {good}" in output, output[-4000:]
    assert "crash_after_s" in output  # the journal tail is in the reason
    # far below the gate's ready timeout (300 s here): systemd said it crashed
    assert elapsed < 90, elapsed
    new_pid = main_pid(host)
    assert new_pid not in (0, pid)
    for path, content in live.items():
        assert (host.root / path).read_bytes() == content, path
    assert (marker(host, "current"), marker(host, "deployed")) == (good, good)
    wait_healthy(PORT)
    entries = history(host)
    assert entries[-2]["kind"] == "gate" and entries[-2]["outcome"] == "crashed"
    assert entries[-1]["kind"] == "rollback" and entries[-1]["verdict"] == "ready"
    print(f"\ncrash-looping revision, detection + rollback: {elapsed:.1f} s")
    print("\n".join(line for line in output.splitlines() if "->" in line or "did not stay up" in line))


def test_config_difference_is_reported_and_fails_the_gate(testbed, gate_hosts, tmp_path):
    """SGLang resolving the prefill graph differently from the plan (as it does for some models)."""
    host = gate_hosts[NAME]
    good = good_deploy(testbed, gate_hosts, tmp_path)
    sim_config(host, "/etc/sglang-sim-nograph.json", {
        "startup_delay_s": 0.5, "decode_tok_s": 200,
        "server_info_overrides": {"cuda_graph_config": {"prefill": {"backend": "disabled"}}}})
    result = deploy(testbed, only(gate_hosts, NAME), tmp_path,
                    data(sglang_env={"SGLANG_SIM_CONFIG": "/etc/sglang-sim-nograph.json"}))
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-6000:]
    assert "prefill" in output and "disabled" in output and f"rolled back to revision {good}" in output, output[-4000:]
    bad = [e for e in history(host) if e["kind"] == "gate"][-1]
    assert bad["verdict"] == "fail" and bad["decode_tok_s"] > TARGET  # fast enough, but not as planned
    diffs = [d for d in bad["server_config_diffs"] if d["fails"]]
    assert diffs and diffs[0]["group"] == "prefill_graph" and diffs[0]["resolved"] == "disabled", diffs
    assert marker(host, "deployed") == good


def test_server_without_usage_is_counted_from_the_text_with_a_warning(testbed, gate_hosts, tmp_path):
    host = gate_hosts[NAME]
    good_deploy(testbed, gate_hosts, tmp_path)
    sim_config(host, "/etc/sglang-sim-nousage.json", {"startup_delay_s": 0.5, "decode_tok_s": 200, "usage": False})
    # 256 tokens: a 1.3 s window, so that a stall of this machine's (a chunk stamped late by a client
    # that did not run) moves the rate by a few percent, not the 84% it once read on 64 tokens
    result = deploy(testbed, only(gate_hosts, NAME), tmp_path,
                    data(sglang_env={"SGLANG_SIM_CONFIG": "/etc/sglang-sim-nousage.json"},
                         sglang_gate={**FAST_GATE, "max_tokens": 256}))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    last = [e for e in history(host) if e["kind"] == "gate"][-1]
    assert last["verdict"] == "pass" and marker(host, "deployed") == last["revision"]
    assert any("usage" in w for w in last["warnings"]), last["warnings"]
    # MTP: several tokens per chunk; a chunk count would read about a third of the true rate (the room
    # is what a busy machine does to a timed stream, far from a third)
    assert abs(last["decode_tok_s"] - 200) / 200 < 0.25, last["decode_tok_s"]


def test_unreachable_from_the_controller_is_the_gates_failure_not_a_rollback(testbed, gate_hosts, tmp_path):
    host = gate_hosts[NAME]
    good = good_deploy(testbed, gate_hosts, tmp_path)
    result = deploy(testbed, only(gate_hosts, NAME), tmp_path,
                    data(sglang_env={"E2E_MARK": "unproven"},
                         sglang_gate={**FAST_GATE, "url": "http://127.0.0.1:9", "ready_timeout_s": 3}))
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-6000:]
    assert "gate could not measure" in output and "the server is unreachable" in output, output[-4000:]
    assert "not rolled back" in output and "rolled back to" not in output and "below target" not in output
    # the new revision keeps running, live but not marked deployed
    new = marker(host, "current")
    assert new != good and marker(host, "deployed") == good
    assert "E2E_MARK=unproven" in environ(host, main_pid(host))
    last = history(host)[-1]
    assert last["kind"] == "gate" and last["outcome"] == "unreachable" and last["verdict"] == "error"
    # the next deploy, with a gate that reaches it, restarts and proves the same revision
    result = deploy(testbed, only(gate_hosts, NAME), tmp_path, data(sglang_env={"E2E_MARK": "unproven"}))
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    assert marker(host, "deployed") == new


def test_loopback_server_is_gated_on_the_host_with_the_key_kept_out_of_argv(testbed, gate_hosts, tmp_path,
                                                                             monkeypatch):
    host = gate_hosts[NAME]
    monkeypatch.setenv("E2E_SGLANG_API_KEY", API_KEY)
    d = data()
    d[NAME]["sglang_intents"] = {**d[NAME]["sglang_intents"], "host": "127.0.0.1"}
    d[NAME]["sglang_secrets"] = {**d[NAME]["sglang_secrets"], "api_key": {"env": "E2E_SGLANG_API_KEY"}}
    good_deploy(testbed, gate_hosts, tmp_path)  # the venv exists, with the NVML stand-in
    # Every process's argv on the host while the deploy runs, and the gate's files: sampled on the host
    # itself every 50 ms by one loop started before the deploy (an SSH round trip per sample, from
    # here, missed the few seconds the gate runs on a loaded machine), read back afterwards.
    watch = "/var/tmp/e2e-gate-watch"
    loop = (f"rm -rf {watch}; mkdir -p {watch}; while [ ! -e {watch}/stop ]; do "
            f"for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done >> {watch}/argv 2>/dev/null; "
            f"stat -c '%a %n' /tmp/sglang-gate.*/* >> {watch}/files 2>/dev/null; "
            f"grep -l sk-e2e-gate /tmp/sglang-gate.*/options.json 2>/dev/null | sed 's/^/key-in /' >> {watch}/files; "
            "sleep 0.05; done")
    # from a file: the loop's own argv must not hold the key it greps for
    (host.root / watch.lstrip("/")).with_suffix(".sh").write_text(loop + "\n")
    host.ssh(f"nohup sh {watch}.sh > /dev/null 2>&1 &")
    try:
        result = deploy(testbed, only(gate_hosts, NAME), tmp_path, d)
    finally:
        host.ssh(f"touch {watch}/stop; sleep 0.5", check=False)
    seen = host.ssh(f"cat {watch}/argv", check=False).stdout.splitlines()
    files = host.ssh(f"cat {watch}/files", check=False).stdout.splitlines()
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "on the host, http://127.0.0.1:" in output
    last = [e for e in history(host) if e["kind"] == "gate"][-1]
    assert last["verdict"] == "pass" and last["gate_ran_on"] == "host" and last["decode_tok_s"] > TARGET
    assert marker(host, "deployed") == last["revision"]
    gpus = (last["nvml"] or {}).get("gpus") or []
    assert [g["name"] for g in gpus] == ["NVIDIA RTX A6000"] * 2, last["nvml"]  # sampled on the host
    gates = [s for s in seen if "gate.pyz check" in s]
    assert gates, "the gate was never seen running on the host"
    # its options are one file beside the zipapp (0600), not argv; the key is in its own file, not in it
    assert all(" check --options /tmp/sglang-gate." in s and "--url" not in s for s in gates), gates
    options = [f for f in files if f.endswith("/options.json")]
    assert options and all(f.startswith("600 ") for f in options), files
    assert all(f.startswith("600 ") for f in files if f.endswith("/key")), files
    assert not [f for f in files if f.startswith("key-in ")], files
    # the key reached the server (a measured pass needs it; without it the server refuses) but no
    # process's argv on the host: neither the gate's nor the server's (its launcher appends it inside)
    assert not any("sk-e2e-gate" in s for s in seen), [s for s in seen if "sk-e2e-gate" in s]
    assert any("sglang.launch_server" in s for s in seen)
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{PORT}/v1/models", timeout=5)
        raise AssertionError("the server answered without the API key")
    except urllib.error.HTTPError as exc:
        assert exc.code == 401
    assert API_KEY not in output
    assert host.ssh("ls -d /tmp/sglang-gate.* 2>/dev/null | wc -l").stdout.strip() == "0"


CACHE_ROOT = "/var/lib/sglang/cache-e2e"  # a root of its own: cold whatever ran on this host before
CACHE_DIR = f"{CACHE_ROOT}/sglang-0.5.23"
#: Every compile-cache variable 0.5.23 reads (sglang_deploy/plan/caches.py) and where the plan puts it.
CACHE_ENV = {"SGLANG_CACHE_DIR": CACHE_DIR, "SGLANG_DG_CACHE_DIR": f"{CACHE_DIR}/deep_gemm",
             "TRITON_CACHE_DIR": f"{CACHE_DIR}/triton", "TORCHINDUCTOR_CACHE_DIR": f"{CACHE_DIR}/inductor",
             "CUDA_CACHE_PATH": f"{CACHE_DIR}/nv", "FLASHINFER_WORKSPACE_BASE": CACHE_DIR,
             "TILELANG_CACHE_DIR": f"{CACHE_DIR}/tilelang"}
COLD_S = 6.0  # the simulated kernel compilation of a cold start (the gate's ready timeout: 300 s)


def last_gap(host: TestHost) -> float:
    gates = [e for e in history(host) if e["kind"] == "gate"]
    gap = (gates[-1].get("downtime") or {}).get("serving_gap_s")
    assert gap is not None, gates[-1].get("downtime")
    return float(gap)


def cache_markers(host: TestHost) -> list[str]:
    return host.ssh(f"ls {CACHE_DIR}/sglang-sim-start 2>/dev/null", check=False).stdout.split()


def test_compile_caches_are_cold_once_warm_after_and_kept_by_a_rollback(testbed, gate_hosts, tmp_path):
    """The first start of a version on a cache root is cold (the simulated server compiles for
    COLD_S before it is ready) and passes; a new revision of the same version starts warm; a
    failed gate's rollback keeps the caches. The server runs with every cache variable in the
    version's directory, which the service user owns; a directory of a version whose venv is gone
    is removed after a passing gate."""
    host = gate_hosts[NAME]
    t_start = time.monotonic()
    good_deploy(testbed, gate_hosts, tmp_path)  # an old server to measure the serving gap from
    sim_config(host, "/etc/sglang-sim-cold.json", {"startup_delay_s": 0.5, "decode_tok_s": 200,
                                                              "cold_start_s": COLD_S})
    # what a server of a version whose venv is gone left (no /opt/sglang/sglang-0.4.0): the service user's
    host.ssh(f"mkdir -p {CACHE_ROOT}/sglang-0.4.0/triton && chown -R sglang:sglang {CACHE_ROOT}/sglang-0.4.0")
    cold_env = {"SGLANG_SIM_CONFIG": "/etc/sglang-sim-cold.json"}
    result = deploy(testbed, only(gate_hosts, NAME), tmp_path, data(sglang_cache_dir=CACHE_ROOT,
                                                                     sglang_env=cold_env))
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "gate passed" in output, output[-6000:]
    cold = last_gap(host)
    assert cold >= COLD_S, cold
    # the server's own log splits the start: the cold compile sits in the CUDA graph phase
    cold_phases = history(host)[-1]["downtime"]["phases"]
    assert None not in (cold_phases["kv_cache"], cold_phases["warmup"]), cold_phases
    assert cold_phases["cuda_graphs"] >= COLD_S - 0.5, cold_phases  # journald stamps lines as it receives them
    first = cache_markers(host)
    assert len(first) == 1 and first[0].startswith("0.5.23-"), first
    assert host.ssh(f"stat -c '%U %G %a' {CACHE_DIR}").stdout.split() == ["sglang", "sglang", "750"]
    assert host.ssh(f"stat -c '%U' {CACHE_DIR}/sglang-sim-start/{first[0]}").stdout.strip() == "sglang"
    assert host.ssh(f"stat -c '%U' {CACHE_ROOT}").stdout.strip() == "sglang"
    assert host.ssh(f"test -e {CACHE_ROOT}/sglang-0.4.0", check=False).returncode != 0, "not pruned"
    env = dict(line.split("=", 1) for line in environ(host, main_pid(host)) if "=" in line)
    assert {k: env.get(k) for k in CACHE_ENV} == CACHE_ENV

    # a new revision of the same version: warm, the directory kept
    result = deploy(testbed, only(gate_hosts, NAME), tmp_path, data(sglang_cache_dir=CACHE_ROOT,
                                                                     sglang_env={**cold_env, "E2E_MARK": "warm"}))
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "gate passed" in output, output[-6000:]
    warm = last_gap(host)
    assert cold - warm > COLD_S / 2, (cold, warm)
    warm_phases = history(host)[-1]["downtime"]["phases"]
    assert cold_phases["cuda_graphs"] - warm_phases["cuda_graphs"] > COLD_S / 2, (cold_phases, warm_phases)
    assert "CUDA graphs" in output and "serving gap" in output
    assert cache_markers(host) == first
    good = marker(host, "deployed")

    # a failed gate (too slow): rolled back, the caches kept
    sim_config(host, "/etc/sglang-sim-cold-slow.json", {"startup_delay_s": 0.5, "decode_tok_s": 40,
                                                                   "cold_start_s": COLD_S})
    result = deploy(testbed, only(gate_hosts, NAME), tmp_path, data(
        sglang_cache_dir=CACHE_ROOT, sglang_env={"SGLANG_SIM_CONFIG": "/etc/sglang-sim-cold-slow.json"}))
    output = result.stdout + result.stderr
    assert result.returncode != 0 and f"rolled back to revision {good}" in output, output[-6000:]
    assert history(host)[-1]["kind"] == "rollback" and history(host)[-1]["verdict"] == "ready"
    assert cache_markers(host) == first
    assert host.ssh(f"stat -c '%U %a' {CACHE_DIR}").stdout.split() == ["sglang", "750"]
    env = dict(line.split("=", 1) for line in environ(host, main_pid(host)) if "=" in line)
    assert {k: env.get(k) for k in CACHE_ENV} == CACHE_ENV
    elapsed = time.monotonic() - t_start
    print(f"\ncompile caches: cold serving gap {cold:.2f} s, warm {warm:.2f} s; phases cold {cold_phases}, "
          f"warm {warm_phases}; whole test {elapsed:.1f} s")


def test_the_start_budget_comes_from_the_hosts_starts_and_a_stalled_start_names_its_phase(testbed, gate_hosts,
                                                                                            tmp_path):
    """After the test above (its starts in the history, its caches warm), a deploy that sets no
    ready timeout waits what the host's own starts say: three times the slowest, at least a
    minute. A start that stalls in its CUDA graph capture is rolled back when its budget runs
    out (here the inventory's 10 s, so the test does not wait the minute), and the failure names
    the phase and the log line that never came."""
    host = gate_hosts[NAME]
    gate = {k: v for k, v in FAST_GATE.items() if k != "ready_timeout_s"}
    starts = [e["downtime"]["start_s"] for e in history(host) if e["kind"] == "gate" and e.get("downtime")
              and e["downtime"].get("start_s")][-5:]
    assert starts, history(host)[-3:]
    expected = max(60, -(-int(round(3 * max(starts))) // 30) * 30)
    result = deploy(testbed, only(gate_hosts, NAME), tmp_path, data(
        sglang_cache_dir=CACHE_ROOT, sglang_gate=gate,
        sglang_env={"SGLANG_SIM_CONFIG": "/etc/sglang-sim-cold.json", "E2E_MARK": "budget"}))
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "gate passed" in output, output[-6000:]
    assert f"gate: start budget {expected} s (history: history " in output, output[-6000:]
    good = marker(host, "deployed")

    sim_config(host, "/etc/sglang-sim-stall.json", {"startup_delay_s": 0.5, "decode_tok_s": 200,
                                                    "stall_in": "cuda_graphs"})
    t0 = time.monotonic()
    result = deploy(testbed, only(gate_hosts, NAME), tmp_path, data(
        sglang_cache_dir=CACHE_ROOT, sglang_gate={**gate, "ready_timeout_s": 10},
        sglang_env={"SGLANG_SIM_CONFIG": "/etc/sglang-sim-stall.json"}))
    waited = time.monotonic() - t0
    output = result.stdout + result.stderr
    assert result.returncode != 0 and f"rolled back to revision {good}" in output, output[-6000:]
    assert "stalled in CUDA graphs" in output and "no 'Capture ... graph end' in its log" in output, output[-6000:]
    assert "KV cache done" in output and "start budget 10 s (inventory: inventory 10)" in output, output[-6000:]
    assert waited >= 10, waited  # it was given the whole budget
    last = history(host)[-2]
    assert last["kind"] == "gate" and last["outcome"] == "not-ready" and "stalled in CUDA graphs" in last["summary"]
    print(f"\nstart budget from history {expected} s (starts {starts}); the stalled deploy took {waited:.1f} s")


def test_first_revision_that_fails_is_stopped(testbed, gate_hosts, tmp_path):
    host = gate_hosts[FRESH]
    sim_config(host, "/etc/sglang-sim-slow.json", {"startup_delay_s": 0.5, "decode_tok_s": 40})
    d = data(sglang_env={"SGLANG_SIM_CONFIG": "/etc/sglang-sim-slow.json"})[NAME]
    d["sglang_intents"] = {**d["sglang_intents"], "port": FRESH_PORT}
    result = deploy(testbed, only(gate_hosts, FRESH), tmp_path, {FRESH: d})
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-6000:]
    assert "below target" in output and "no previous revision" in output.lower(), output[-4000:]
    state = host.ssh("systemctl show -p ActiveState --value sglang.service").stdout.strip()
    assert state in ("inactive", "failed"), state
    assert marker(host, "deployed") is None
    last = history(host)[-1]
    assert last["kind"] == "gate" and last["verdict"] == "fail"
