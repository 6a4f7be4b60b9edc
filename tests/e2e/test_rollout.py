"""`sglang-deploy rollout` across five throwaway hosts (plus one that does not exist).

Every host stands in for 2x RTX A6000 (NVML stand-in) and runs the simulated
SGLang; a "slow" host is made by pointing its service at another behaviour file
through its own data (``sglang_env``), which also changes its revision. What
the hosts did is read from the hosts themselves: the journal's ``Started``
lines (microseconds), the deployed marker's mtime, the service's MainPID and
the live files; never from the rollout's own summary alone.
"""

from __future__ import annotations

import json
import os
import pprint
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.test_deploy import REFERENCE, boot_a6000_hosts, host_data
from sglang_deploy.simulator.testbed import Testbed, TestHost
from tests.e2e.conftest import NOT_ABOUT_SPEED

ROOT = Path(__file__).resolve().parents[2]
NAMES = [f"e2e-r{i}" for i in range(1, 6)]
PORTS = {name: 31820 + i for i, name in enumerate(NAMES, 1)}
STATE = "var/lib/sglang-deploy/sglang"
LIVE = ("etc/systemd/system/sglang.service", "etc/sglang/sglang.env", "etc/nccl.conf")
TARGET = 100.0
FAST_GATE = {"repeats": 2, "max_tokens": 64, "ready_timeout_s": 120, **NOT_ABOUT_SPEED}
SLOW = "/etc/sglang-sim-slow.json"
COLD = "/etc/sglang-sim-cold.json"  # a start that compiles for COLD_S when its caches are cold
COLD_S = 4.0
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def fleet(testbed: Testbed, tmp_path_factory) -> dict[str, TestHost]:
    def slow_config(name: str, root: Path) -> None:
        (root / SLOW.lstrip("/")).write_text(json.dumps({"startup_delay_s": 0.5, "decode_tok_s": 40}))
        (root / COLD.lstrip("/")).write_text(json.dumps({"startup_delay_s": 1.0, "decode_tok_s": 200,
                                                                  "cold_start_s": COLD_S}))

    return boot_a6000_hosts(testbed, tmp_path_factory, NAMES, extra=slow_config)


def data(name: str, mark: str, slow: bool = False, cold: bool = False) -> dict:
    d = host_data(REFERENCE)
    d["sglang_intents"] = {**d["sglang_intents"], "port": PORTS[name]}
    env = {"E2E_RELEASE": mark}
    if slow:
        env["SGLANG_SIM_CONFIG"] = SLOW
    elif cold:
        env["SGLANG_SIM_CONFIG"] = COLD
    # a cold fleet's gates wait their start budgets (plan/start_budget.py), not a ready timeout set here
    gate = {k: v for k, v in FAST_GATE.items() if k != "ready_timeout_s"} if cold else FAST_GATE
    return {**d, "sglang_target_tok_s": TARGET, "sglang_gate": gate, "sglang_env": env}


def write_inventory(path: Path, hosts: dict[str, TestHost], mark: str, slow: tuple[str, ...] = (),
                    canary: tuple[str, ...] = (), ghost: bool = False, cold: bool = False) -> Path:
    entries = []
    for name, host in hosts.items():
        _, conn = host.inventory_entry()
        entries.append((name, {**conn, **data(name, mark, slow=name in slow, cold=cold)}))
    if ghost:  # a host whose sshd does not exist: nothing listens on its port
        _, conn = next(iter(hosts.values())).inventory_entry()
        entries.insert(2, ("e2e-ghost", {**conn, "ssh_port": 9, "ssh_connect_retries": 0,
                                         **data(NAMES[0], mark)}))
    body = "fleet = " + pprint.pformat(entries, sort_dicts=False, width=110) + "\n"
    if canary:
        body += f"canary = {list(canary)!r}\n"
    path.write_text('"""Rollout test fleet (throwaway hosts)."""\n\n' + body)
    return path


def rollout(inventory: Path, *args: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess, dict]:
    summary = inventory.parent / "summary.json"
    argv = [sys.executable, "-m", "sglang_deploy.commands.cli", "rollout", str(inventory), "--json", str(summary),
            *args]
    env = {**os.environ, "E2E_HF_TOKEN": "hf_rollout_token"}
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    doc = json.loads(summary.read_text()) if summary.exists() else {}
    return proc, doc


def starts(host: TestHost, since: float) -> list[float]:
    """Times (unix, µs precision) the host's journal says sglang.service was started since ``since``."""
    out = host.ssh(f"journalctl -u sglang.service -o short-unix --since @{int(since)} --no-pager").stdout
    return [float(line.split()[0]) for line in out.splitlines() if " Started " in line and line[:1].isdigit()]


def deployed_at(host: TestHost) -> float:
    return (host.root / STATE / "deployed").stat().st_mtime


def marker(host: TestHost, name: str) -> str | None:
    path = host.root / STATE / name
    return path.read_text().strip() if path.exists() else None


def main_pid(host: TestHost) -> int:
    return int(host.ssh("systemctl show -p MainPID --value sglang.service").stdout.strip())


def release(host: TestHost) -> str | None:
    env = host.ssh(f"tr '\\0' '\\n' < /proc/{main_pid(host)}/environ").stdout.splitlines()
    return next((line.split("=", 1)[1] for line in env if line.startswith("E2E_RELEASE=")), None)


def snapshot(hosts: dict[str, TestHost]) -> dict[str, tuple]:
    """Per host: the service's MainPID (0: not running) and the live files (None: absent)."""
    def read(path: Path) -> bytes | None:
        return path.read_bytes() if path.exists() else None

    return {n: (main_pid(h), {p: read(h.root / p) for p in LIVE}) for n, h in hosts.items()}


def gate_lines(host: TestHost) -> list[dict]:
    path = host.root / STATE / "history.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, filter(None, lines)) if e.get("kind") == "gate"]


def test_all_pass_in_waves_never_restarting_more_than_a_wave(fleet, tmp_path):
    """Also a fleet that compiles once per class: every host's first start of the version compiles
    for COLD_S (the simulated server, its caches empty); the canary's caches, once it passed, seed
    the four hosts after it, which start warm."""
    since = time.time() - 1
    inv = write_inventory(tmp_path / "inv.py", fleet, "r1", cold=True)
    proc, doc = rollout(inv, "--waves", "1,2")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    assert doc["completed"] and [w["hosts"] for w in doc["waves"]] == [NAMES[:1], NAMES[1:3], NAMES[3:]]
    assert doc["totals"] == {"passed": 5}
    for host in fleet.values():
        assert release(host) == "r1" and marker(host, "deployed") == marker(host, "current")
    # From the hosts' own records: every host started once, and no host of a later wave
    # started before every host of the earlier waves had passed its gate (deployed marker).
    started = {n: starts(h, since) for n, h in fleet.items()}
    assert all(len(s) == 1 for s in started.values()), started
    waves = [w["hosts"] for w in doc["waves"]]
    for i, earlier in enumerate(waves):
        done = max(deployed_at(fleet[n]) for n in earlier)
        for later in waves[i + 1:]:
            first = min(started[n][0] for n in later)
            assert done < first, f"wave {later} started at {first} before wave {earlier} was done at {done}"
    # and within a wave the restarts were together (one pyinfra run)
    spread = max(started[n][0] for n in waves[2]) - min(started[n][0] for n in waves[2])
    assert spread < 10, spread
    assert "rollout completed" in proc.stdout and "wave 2/3 |" in proc.stdout
    # the canary compiled, and its caches were kept (once); every later host was seeded from them
    assert output.count("compile caches kept for the other hosts of this class") == 1, output[-6000:]
    assert all(f"[{n}] compile caches seeded:" in _ANSI.sub("", output) for n in NAMES[1:]), output[-6000:]
    assert _ANSI.sub("", output).count(f"from {NAMES[0]} (sha256 ") == 4
    # and their gates waited what the canary's start (which compiled) says, not a derived budget
    assert all(re.search(rf"\[{n}\] gate: start budget \d+ s \(class: class's start", _ANSI.sub("", output))
               for n in NAMES[1:]), output[-6000:]
    graphs = {n: gate_lines(h)[-1]["downtime"]["phases"]["cuda_graphs"] for n, h in fleet.items()}
    assert graphs[NAMES[0]] >= COLD_S - 0.5, graphs
    assert all(graphs[n] < graphs[NAMES[0]] - COLD_S / 2 for n in NAMES[1:]), graphs
    said = [line.strip() for line in _ANSI.sub("", output).splitlines()
            if "compile caches seeded:" in line or "gate: start budget" in line]
    print(f"\nCUDA graph phase (s): canary cold {graphs[NAMES[0]]}, seeded {[graphs[n] for n in NAMES[1:]]}; "
          f"waves {[w['seconds'] for w in doc['waves']]} s;\n" + "\n".join(said[:3]))


def test_slow_canary_halts_the_rollout_and_nothing_else_is_touched(fleet, tmp_path):
    write_inventory(tmp_path / "base.py", fleet, "r1")
    before = snapshot(fleet)
    inv = write_inventory(tmp_path / "inv.py", fleet, "r2", slow=(NAMES[3],), canary=(NAMES[3],))
    proc, doc = rollout(inv)  # default waves: the canary group, then 25%
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-6000:]
    assert not doc["completed"] and "wave 1" in doc["halted"] and len(doc["waves"]) == 1
    rows = {h["host"]: h for h in doc["hosts"]}
    assert rows[NAMES[3]]["result"] == "rolled back" and rows[NAMES[3]]["wave"] == 1
    assert "below target" in rows[NAMES[3]]["summary"]
    assert all(rows[n]["result"] == "not reached" for n in NAMES if n != NAMES[3])
    after = snapshot(fleet)
    canary = fleet[NAMES[3]]
    assert after[NAMES[3]][0] != before[NAMES[3]][0] and after[NAMES[3]][1] == before[NAMES[3]][1]
    assert release(canary) == "r1"
    for n in NAMES:
        if n != NAMES[3]:
            assert after[n] == before[n], f"{n} was touched"


@pytest.mark.parametrize("max_fail", [1, 0])
def test_a_failure_in_a_later_wave_against_the_budget(fleet, tmp_path, max_fail):
    mark = f"r3-{max_fail}"
    before = snapshot(fleet)
    inv = write_inventory(tmp_path / "inv.py", fleet, mark, slow=(NAMES[2],))
    proc, doc = rollout(inv, "--waves", "1,2", "--max-fail", str(max_fail))
    output = proc.stdout + proc.stderr
    rows = {h["host"]: h for h in doc["hosts"]}
    assert rows[NAMES[2]]["result"] == "rolled back" and rows[NAMES[2]]["wave"] == 2, output[-6000:]
    assert rows[NAMES[0]]["result"] == rows[NAMES[1]]["result"] == "passed"
    assert release(fleet[NAMES[2]]) != mark
    for n in NAMES[:2]:
        assert release(fleet[n]) == mark
    after = snapshot(fleet)
    if max_fail == 1:  # within budget: the last wave runs, the exit code says some failed
        assert proc.returncode == 3 and doc["completed"], output[-6000:]
        for n in NAMES[3:]:
            assert rows[n]["result"] == "passed" and release(fleet[n]) == mark
    else:  # over budget: halt; the last wave keeps its old processes and files
        assert proc.returncode == 1 and not doc["completed"] and "wave 2" in doc["halted"], output[-6000:]
        for n in NAMES[3:]:
            assert rows[n]["result"] == "not reached" and after[n] == before[n]


def test_an_unreachable_host_fails_its_wave_and_is_named(fleet, tmp_path):
    inv = write_inventory(tmp_path / "inv.py", fleet, "r4", ghost=True)
    proc, doc = rollout(inv, "--waves", "1,3")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-6000:]
    waves = [w["hosts"] for w in doc["waves"]]
    assert waves[1] == [NAMES[1], "e2e-ghost", NAMES[2]] and len(waves) == 2
    rows = {h["host"]: h for h in doc["hosts"]}
    assert rows["e2e-ghost"]["result"] == "failed" and "unreachable" in rows["e2e-ghost"]["summary"].lower()
    assert rows[NAMES[1]]["result"] == rows[NAMES[2]]["result"] == "passed"
    assert "e2e-ghost" in doc["halted"] and "e2e-ghost: unreachable" in proc.stdout


def test_sigterm_mid_wave_finishes_that_wave_and_starts_no_other(fleet, tmp_path):
    before = snapshot(fleet)
    inv = write_inventory(tmp_path / "inv.py", fleet, "r5")
    summary = tmp_path / "summary.json"
    argv = [sys.executable, "-m", "sglang_deploy.commands.cli", "rollout", str(inv), "--waves", "2",
            "--json", str(summary)]
    proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "E2E_HF_TOKEN": "hf_rollout_token"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:  # signal once the first wave's restart is under way
        lines.append(line)
        if "wave 1/3 |" in line and "Restart the service" in line:
            proc.send_signal(signal.SIGTERM)
            break
    lines.extend(proc.stdout)
    rc = proc.wait(timeout=300)
    output = "".join(lines)
    doc = json.loads(summary.read_text())
    assert rc == 1 and "interrupted (SIGTERM) after wave 1" in doc["halted"], output[-6000:]
    rows = {h["host"]: h for h in doc["hosts"]}
    for n in NAMES[:2]:  # the running wave was not cut: gated, passed, deployed
        assert rows[n]["result"] == "passed" and release(fleet[n]) == "r5"
        assert marker(fleet[n], "deployed") == marker(fleet[n], "current")
    after = snapshot(fleet)
    for n in NAMES[2:]:
        assert rows[n]["result"] == "not reached" and after[n] == before[n]


def host_state(host: TestHost) -> dict:
    """What the host says about itself: its markers and the service's MainPID."""
    return {"current": marker(host, "current"), "deployed": marker(host, "deployed"),
            "previous": marker(host, "previous"), "pid": main_pid(host)}


REV = re.compile(r"\b[0-9a-f]{16}\b")


def test_records_agree_with_the_hosts_after_a_last_wave_over_the_budget(fleet, tmp_path):
    """Hosts already on the new revision (with an older one staged behind it), hosts that
    pass, and two that fail their gate in the last wave, with --max-fail 1: every host's
    record is checked against the host's own markers and MainPID before and after."""
    proc, _ = rollout(write_inventory(tmp_path / "a.py", fleet, "r6a"), "--waves", "5")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    # the first two hosts move on to r6b ahead of the others: r6a stays staged behind it
    proc, _ = rollout(write_inventory(tmp_path / "b.py", fleet, "r6b"), "--limit", f"{NAMES[0]},{NAMES[1]}")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    before = {n: host_state(h) for n, h in fleet.items()}
    since = time.time() - 1
    slow = (NAMES[3], NAMES[4])
    (tmp_path / "c").mkdir()
    proc, doc = rollout(write_inventory(tmp_path / "c" / "inv.py", fleet, "r6b", slow=slow),
                        "--waves", "2,3", "--max-fail", "1")
    output = proc.stdout + proc.stderr
    (tmp_path / "output.txt").write_text(output)
    after = {n: host_state(h) for n, h in fleet.items()}
    rows = {h["host"]: h for h in doc["hosts"]}
    expected = {NAMES[0]: "unchanged", NAMES[1]: "unchanged", NAMES[2]: "passed", NAMES[3]: "rolled back",
                NAMES[4]: "rolled back"}
    assert {n: rows[n]["result"] for n in NAMES} == expected, output[-6000:]
    # the last wave failed two hosts, one more than the budget: nothing was left to halt
    assert proc.returncode == 1, output[-6000:]
    assert doc["completed"] and doc["halted"] is None and "wave 2 had 2 failure(s)" in doc["over_budget"]
    assert "rollout completed with failures beyond the budget in the last wave" in proc.stdout
    assert "HALTED" not in proc.stdout and "not started" not in output
    for n, host in fleet.items():
        row, b, a = rows[n], before[n], after[n]
        started = starts(host, since)
        # old: what the host ran before; running: what it runs now (its current, deployed marker)
        assert row["old_revision"] == b["current"], (n, row, b)
        assert row["running_revision"] == a["current"] == a["deployed"], (n, row, a)
        if row["result"] == "unchanged":
            assert row["old_revision"] == row["new_revision"] == row["running_revision"], (n, row)
            assert b["previous"] and b["previous"] != row["old_revision"]  # the rollback target, not reported
            assert a == b and started == [], (n, a, b, started)
        else:
            assert a["pid"] != b["pid"] and started, (n, a, b)
        if row["result"] == "passed":
            assert row["new_revision"] == a["current"] and a["previous"] == b["current"], (n, row, a, b)
        if row["result"] == "rolled back":
            assert row["new_revision"] != a["current"] == b["current"] and release(host) == "r6a", (n, row, a)
    # pyinfra's results table merges operations across hosts by name: the names carry no
    # host's name or revision (those are in the hosts' own "[host]" lines)
    revisions = {r for row in doc["hosts"] for r in (row["old_revision"], row["new_revision"]) if r}
    pyinfra_lines = [m.group(1) for line in output.splitlines()
                     if (m := re.match(r"^wave \d+/\d+ \| (.*)$", _ANSI.sub("", line)))]
    assert any("Operation" in t or "Success" in t for t in pyinfra_lines), "no results table in the output"
    for text in pyinfra_lines:
        if text.lstrip().startswith("[") or not REV.search(text):
            continue
        assert not (set(REV.findall(text)) & revisions), f"a revision outside a host's own line: {text!r}"
    for text in pyinfra_lines:
        if not text.lstrip().startswith("["):
            assert not any(n in text for n in NAMES), f"a host's name outside its own line: {text!r}"
