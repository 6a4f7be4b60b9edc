"""A multi-node tensor-parallel group end to end: two throwaway hosts, one SGLang instance.

Both hosts stand in for 2x RTX A6000 and form the tp group ``e2e-tp`` (TP 4 =
2 GPUs x 2 nodes): ``e2e-tp0`` is rank 0 (first in the inventory), ``e2e-tp1``
rank 1. The simulated server plays multi-node SGLang (sglang_deploy/simulator/sglang_server,
"Several nodes"): rank 0 is not ready until rank 1 has joined its rendezvous,
and a lost peer fails the other side. The testbed's hosts share one network,
so both reach rank 0's rendezvous at 127.0.0.1 (their ``ssh_hostname``), and
each node binds its own loopback address (``host`` intent 127.0.0.1 / 127.0.0.2:
the one setting members may differ in). Rank 0 is gated from the controller,
so its gate can watch the other member's unit as it measures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.e2e.test_deploy import HF_TOKEN, REFERENCE, boot_a6000_hosts, deploy, host_data, main_pid, wait_healthy
from sglang_deploy.simulator.testbed import Testbed, TestHost
from tests.e2e.conftest import NOT_ABOUT_SPEED

LEADER, FOLLOWER = "e2e-tp0", "e2e-tp1"
PORT, RENDEZVOUS = 31851, 31852
GROUP = "e2e-tp"
STATE = "/var/lib/sglang-deploy/sglang"
LIVE = ("etc/systemd/system/sglang.service", "etc/sglang/sglang.env", "etc/nccl.conf")
FAST_GATE = {"repeats": 2, "max_tokens": 64, "ready_timeout_s": 120, "run_on": "controller", **NOT_ABOUT_SPEED}


@pytest.fixture(scope="module")
def tp_hosts(testbed: Testbed, tmp_path_factory) -> dict[str, TestHost]:
    return boot_a6000_hosts(testbed, tmp_path_factory, [LEADER, FOLLOWER])


def data(follower_env: dict | None = None, run_on: str = "controller", env: dict | None = None) -> dict[str, dict]:
    out = {}
    for rank, name in enumerate((LEADER, FOLLOWER)):
        d = host_data(REFERENCE)  # Qwen3.6-27B on 2x RTX A6000
        d["sglang_intents"] = {**d["sglang_intents"], "port": PORT, "host": f"127.0.0.{rank + 1}"}
        d.update(sglang_tp_group=GROUP, sglang_nnodes=2, sglang_dist_init_port=RENDEZVOUS,
                 sglang_nccl_socket_ifname="lo", sglang_gloo_socket_ifname="lo",
                 sglang_target_tok_s=100.0, sglang_gate={**FAST_GATE, "run_on": run_on})
        d["sglang_env"] = {**(env or {}), **(follower_env if name == FOLLOWER and follower_env else {})}
        out[name] = d
    return out


def marker(host: TestHost, name: str) -> str | None:
    path = host.root / STATE.lstrip("/") / name
    return path.read_text().strip() if path.exists() else None


def history(host: TestHost) -> list[dict]:
    path = host.root / STATE.lstrip("/") / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def cmdline(host: TestHost) -> list[str]:
    words = host.ssh(f"tr '\\0' '\\n' < /proc/{main_pid(host)}/cmdline").stdout.splitlines()
    return words[words.index("sglang.launch_server") + 1:]


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def without(argv: list[str], *names: str) -> list[str]:
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in names:
            skip = True
        else:
            out.append(word)
    return out


def good_deploy(testbed, hosts, tmp_path) -> dict[str, str]:
    result = deploy(testbed, hosts, tmp_path, data())
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-4000:]
    wait_healthy(PORT)
    revs = {name: marker(h, "current") for name, h in hosts.items()}
    assert all(revs.values()) and all(marker(h, "deployed") == revs[n] for n, h in hosts.items())
    return revs


def test_group_gets_consistent_ranks_and_address_and_is_gated_once(testbed, tp_hosts, tmp_path):
    t0 = time.monotonic()
    result = deploy(testbed, tp_hosts, tmp_path, data())
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    print(f"\ntwo-node group, first deploy (install, restart together, gate at rank 0): "
          f"{time.monotonic() - t0:.1f} s")
    leader, follower = tp_hosts[LEADER], tp_hosts[FOLLOWER]
    argv = {name: cmdline(h) for name, h in tp_hosts.items()}
    for rank, name in enumerate((LEADER, FOLLOWER)):
        assert option(argv[name], "--nnodes") == "2"
        assert option(argv[name], "--node-rank") == str(rank)
        assert option(argv[name], "--dist-init-addr") == f"127.0.0.1:{RENDEZVOUS}"
        assert option(argv[name], "--tp-size") == "4"  # 2 GPUs x 2 nodes
        assert option(argv[name], "--host") == f"127.0.0.{rank + 1}"
        # both members deployed, the interface settings where NCCL and Gloo read them
        assert marker(tp_hosts[name], "deployed") == marker(tp_hosts[name], "current")
        assert "NCCL_SOCKET_IFNAME=lo" in (tp_hosts[name].root / "etc/nccl.conf").read_text()
        assert "GLOO_SOCKET_IFNAME=lo" in (tp_hosts[name].root / "etc/sglang/sglang.env").read_text()
    assert without(argv[LEADER], "--node-rank", "--host") == without(argv[FOLLOWER], "--node-rank", "--host")
    # one instance: rank 0 serves it, rank 1 runs the schedulers of TP ranks 2 and 3
    wait_healthy(PORT)
    assert "node rank 1 joined" in leader.ssh("journalctl -u sglang.service -o cat --no-pager").stdout
    tp_children = follower.ssh("ps -eo args | grep -c '[s]glang::scheduler_TP3'").stdout.strip()
    assert tp_children == "1"
    # gated once, at rank 0: only rank 0's history has a measurement
    gates = [e for h in tp_hosts.values() for e in history(h) if e["kind"] == "gate"]
    assert len(gates) == 1 and gates[0]["verdict"] == "pass" and gates[0]["decode_tok_s"] > 100
    assert gates[0] in history(leader)
    # rank 0's restart is stamped and its start's phases are read from its own log lines (the
    # simulated server prints SGLang's), as a single server's are; a first deploy had no old server.
    # (No "Load weight end": the model is a Hub id the simulator does not download, so no load phase.)
    down = gates[0]["downtime"]
    assert down["old_server_answered"] is False and down["serving_gap_s"] is None
    assert down["start_s"] is not None and down["start_s"] > 0
    assert all(down["phases"][name] is not None for name in ("gpus_free", "start", "kv_cache", "warmup")), down
    assert down["phases"]["load"] is None
    [entry] = history(follower)
    assert entry["kind"] == "tp-group" and entry["verdict"] == "pass" and entry["decode_tok_s"] is None
    assert entry["gated_at"] == LEADER and entry["node_rank"] == 1
    assert f"tp group {GROUP} passed at rank 0 ({LEADER})" in entry["summary"]
    assert output.count("gate passed:") == 1 and f"[{LEADER}] gate passed:" in output.replace("\x1b[32m", "")

    # nothing changed: nothing restarts
    pids = {name: main_pid(h) for name, h in tp_hosts.items()}
    again = deploy(testbed, tp_hosts, tmp_path, data())
    assert again.returncode == 0, (again.stdout + again.stderr)[-6000:]
    assert {name: main_pid(h) for name, h in tp_hosts.items()} == pids
    assert len(history(follower)) == 1


@pytest.mark.parametrize("run_on", ["controller", "host"])
def test_bad_revision_on_one_member_rolls_the_group_back(testbed, tp_hosts, tmp_path, run_on):
    """Only rank 1's revision changes (its own simulator behaviour: it dies at start, before it
    joins rank 0, so rank 0 stays up, waiting). The group restarts together; rank 0's gate sees
    the member's unit fail, gated from the controller or on rank 0's host (there through the
    gate's abort file); both members go back and restart together."""
    good = good_deploy(testbed, tp_hosts, tmp_path)
    leader, follower = tp_hosts[LEADER], tp_hosts[FOLLOWER]
    pids = {name: main_pid(h) for name, h in tp_hosts.items()}
    live = {name: {p: (h.root / p).read_bytes() for p in LIVE} for name, h in tp_hosts.items()}
    follower.ssh("printf '%s' '{\"startup_delay_s\": 0.5, \"faults\": {\"crash_after_s\": 0}}' "
                 "> /etc/sglang-sim-crash.json")
    t0 = time.monotonic()
    result = deploy(testbed, tp_hosts, tmp_path, data({"SGLANG_SIM_CONFIG": "/etc/sglang-sim-crash.json"}, run_on))
    elapsed = time.monotonic() - t0
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-6000:]
    # the gate at rank 0 named the member that failed; both hosts fail, naming the group
    assert f"tp group {GROUP}: member {FOLLOWER} (node rank 1)" in output, output[-6000:]
    assert "If the tp group's gate fails: fail this member, saying what was done" in output
    assert f"rolled back to revision {good[FOLLOWER]}" in output and f"rolled back to revision {good[LEADER]}" in output
    assert "crash_after_s" in output  # rank 1's journal lines are in the reason
    assert elapsed < 150, elapsed  # seen at once, not after the ready timeout
    for name, host in tp_hosts.items():
        new_pid = main_pid(host)
        assert new_pid not in (0, pids[name]), name  # restarted together on the previous revision
        for path, content in live[name].items():
            assert (host.root / path).read_bytes() == content, (name, path)
        assert (marker(host, "current"), marker(host, "deployed")) == (good[name], good[name]), name
        assert history(host)[-1]["kind"] == "rollback" and history(host)[-1]["verdict"] == "ready", name
    assert "SGLANG_SIM_CONFIG" not in follower.ssh(f"tr '\\0' '\\n' < /proc/{main_pid(follower)}/environ").stdout
    wait_healthy(PORT)
    failed_gate = [e for e in history(leader) if e["kind"] == "gate"][-1]
    assert failed_gate["outcome"] == "crashed" and FOLLOWER in failed_gate["summary"]
    assert [e for e in history(follower) if e["kind"] == "tp-group"][-1]["verdict"] == "fail"
    assert failed_gate["gate_ran_on"] == run_on
    print(f"\nbad revision on rank 1 (gate on the {run_on}): group gate + group rollback in {elapsed:.1f} s")


def test_a_member_left_out_stops_the_group_before_anything_changes(testbed, tp_hosts, tmp_path):
    good = good_deploy(testbed, tp_hosts, tmp_path)
    pids = {name: main_pid(h) for name, h in tp_hosts.items()}
    result = deploy(testbed, tp_hosts, tmp_path, data({"E2E_MARK": "changed"}), limit=FOLLOWER)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-6000:]
    assert f"member(s) {LEADER} not in this run" in output and "nothing was changed on any member" in output
    for name, host in tp_hosts.items():
        assert main_pid(host) == pids[name] and marker(host, "current") == good[name]


def test_a_group_that_cannot_meet_stops_before_any_member_stops(testbed, tp_hosts, tmp_path):
    """The preflight before the stop: an NCCL_SOCKET_IFNAME that names no interface of the members,
    then a rank 0 address the follower cannot reach (2001:db8::1, RFC 3849's documentation prefix,
    which no host holds: "No route to host"; an IPv4 one of the documentation ranges is answered by
    this machine's gateway, which accepts any TCP connection), each stop the group with one line;
    every member keeps its server and revision."""
    good = good_deploy(testbed, tp_hosts, tmp_path)
    pids = {name: main_pid(h) for name, h in tp_hosts.items()}
    wrong_ifname = data({"E2E_MARK": "ifname"})
    for d in wrong_ifname.values():
        d["sglang_nccl_socket_ifname"] = "eth9"
    unreachable = data({"E2E_MARK": "address"})
    unreachable[LEADER]["sglang_node_address"] = "2001:db8::1"
    for case, inventory, said in (
            ("interface", wrong_ifname, "NCCL_SOCKET_IFNAME=eth9 matches none of its interfaces"),
            ("address", unreachable, f"{FOLLOWER}: cannot reach rank 0's [2001:db8::1]:{RENDEZVOUS}")):
        t0 = time.monotonic()
        result = deploy(testbed, tp_hosts, tmp_path, inventory)
        output = result.stdout + result.stderr
        assert result.returncode != 0, output[-6000:]
        assert f"tp group {GROUP} cannot meet at" in output and said in output, output[-6000:]
        assert "nothing was stopped or changed on any member" in output
        for name, host in tp_hosts.items():
            assert main_pid(host) == pids[name] and marker(host, "current") == good[name], case
        # the check's own listener on rank 0 (if it opened one) is gone
        left = tp_hosts[LEADER].ssh("pgrep -af create_server", check=False)
        assert left.returncode == 1, left.stdout
        print(f"\npreflight ({case}): stopped the group in {time.monotonic() - t0:.1f} s")


def test_a_rollout_keeps_the_group_in_one_wave_and_records_both_members(testbed, tp_hosts, tmp_path):
    good = good_deploy(testbed, tp_hosts, tmp_path)
    inventory = testbed.write_inventory(tmp_path / "fleet.py", tp_hosts.values(), data(env={"E2E_MARK": "r2"}),
                                        group="gpu_fleet")
    summary = tmp_path / "summary.json"
    proc = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "rollout", str(inventory),
                           "--waves", "1", "--json", str(summary)],
                          cwd=ROOT, env={**os.environ, "E2E_HF_TOKEN": HF_TOKEN},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    doc = json.loads(summary.read_text())
    assert [w["hosts"] for w in doc["waves"]] == [[LEADER, FOLLOWER]]  # one wave, though its size is 1
    assert doc["totals"] == {"passed": 2}
    for name, host in tp_hosts.items():
        assert marker(host, "deployed") == marker(host, "current") != good[name]
        assert "E2E_MARK=r2" in host.ssh(f"tr '\\0' '\\n' < /proc/{main_pid(host)}/environ").stdout
