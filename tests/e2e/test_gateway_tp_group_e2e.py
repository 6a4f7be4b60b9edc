"""A multi-node tp group behind the REAL SGLang Model Gateway (sglang-router 0.3.2), everything
deployed by this project over real SSH to real systemd: the group (two throwaway hosts, one
simulated SGLang instance, TP over both) is ONE worker of the gateway, at rank 0's server, next
to a single-host worker, with a client load through the gateway the whole time.

- The whole inventory deployed with `pyinfra -y INVENTORY deploy.py`: the gateway lists two
  workers, the group once (rank 0's URL).
- A new revision for both workers in one pyinfra run (max_unavailable 1, two restart steps): the
  group leaves the gateway (rank 0 drains it) before any member's files change, both members
  restart together and are gated once, the group joins again (a new worker id), then the single
  worker's turn; the gateway never lists fewer than one worker and no client request fails.
- `sglang-deploy status` reads the gateway host (its unit, router, revision) and lists the group once.
- `sglang-deploy tune` on the single worker, then on the group, keeps it out of the gateway
  through every trial and registers it again after the tuner's return; no client request fails.

Stand-ins at the real boundaries only: the GPUs (NVML stand-in of 2x RTX A6000) and SGLang (the
simulated server, which plays multi-node SGLang's rendezvous: sglang_deploy/simulator/sglang_server).
"""

from __future__ import annotations

import json
import pprint
import sys
import time
from pathlib import Path

import pytest
import yaml

from sglang_deploy.simulator.testbed import Testbed, TestHost, fleet
from tests.conftest import ROOT
from tests.e2e.gateway_fleet import (ROUTER_WHEELS_ON_HOST, GatewayView, ListPoller, boot_gateway_fleet,
                                     deploy_inventory, run_polling, status_rows)
from tests.e2e.test_gateway_e2e import _ANSI, BOARD, ENV, KEY, KEY_ENV, SIM, drained
from tests.e2e.test_rollout import main_pid, release
from tests.e2e.test_tune_e2e import SPACE as TUNE_SPACE_KEYS
from tests.gateway_load import ClientLoad
from tests.e2e.conftest import NOT_ABOUT_SPEED

GW, LEADER, FOLLOWER, SINGLE = "e2e-gwtp-router", "e2e-gwtp-n0", "e2e-gwtp-n1", "e2e-gwtp-w"
# Fixed ports distinct from every other e2e file (the hosts share this machine's network).
GROUP_PORT, RENDEZVOUS, SINGLE_PORT = 32101, 32102, 32103
GW_PORT, GW_METRICS_PORT = 32110, 32111
GW_URL = f"http://127.0.0.1:{GW_PORT}"
VIEW = GatewayView(GW_URL, KEY)
GROUP_URL, SINGLE_URL = f"http://127.0.0.1:{GROUP_PORT}", f"http://127.0.0.1:{SINGLE_PORT}"
GROUP = "e2e-gwtp"
FAST_GATE = {"repeats": 2, "max_tokens": 48, "ready_timeout_s": 120, "run_on": "controller", **NOT_ABOUT_SPEED}
T0 = time.monotonic()


def say(text: str) -> None:
    print(f"[gateway tp e2e +{time.monotonic() - T0:5.0f} s] {text}", flush=True)


@pytest.fixture(scope="module")
def hosts(testbed: Testbed, tmp_path_factory) -> dict[str, TestHost]:
    return boot_gateway_fleet(testbed, tmp_path_factory, GW, (LEADER, FOLLOWER, SINGLE), BOARD, SIM)


def serving_data(port: int, mark: str) -> dict:
    d = fleet.host_data(BOARD, port)
    return {**d, "sglang_secrets": {**d["sglang_secrets"], "api_key": {"env": KEY_ENV}},
            "sglang_gateways": [GW], "sglang_target_tok_s": 50.0, "sglang_gate": FAST_GATE,
            "sglang_env": {"E2E_RELEASE": mark}}


def write_inventory(path: Path, hosts: dict[str, TestHost], mark: str) -> Path:
    """The gateway; the group's members (rank 0 first) with no sglang_worker_url: the group's URL is
    rank 0's address (its ssh_hostname, 127.0.0.1 here) and port; the single worker."""
    entries = []
    for name in (GW, LEADER, FOLLOWER, SINGLE):
        _, conn = hosts[name].inventory_entry()
        if name == GW:
            data = {"sglang_gateway": {"port": GW_PORT, "metrics_port": GW_METRICS_PORT, "host": "127.0.0.1",
                                       "policy": "round_robin", "health_interval": "1s",
                                       "api_key": {"env": KEY_ENV}},
                    "sglang_pip_find_links": ROUTER_WHEELS_ON_HOST, "sglang_pip_no_index": True}
        elif name == SINGLE:
            data = serving_data(SINGLE_PORT, mark)
        else:
            rank = (LEADER, FOLLOWER).index(name)
            data = serving_data(GROUP_PORT, mark)
            data["sglang_intents"] = {**data["sglang_intents"], "host": f"127.0.0.{rank + 1}"}
            data.update(sglang_tp_group=GROUP, sglang_nnodes=2, sglang_dist_init_port=RENDEZVOUS,
                        sglang_nccl_socket_ifname="lo", sglang_gloo_socket_ifname="lo")
        entries.append((name, {**conn, **data}))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('"""Gateway + tp group e2e fleet (throwaway hosts)."""\n\n'
                    f"fleet = {pprint.pformat(entries, sort_dicts=False, width=110)}\n")
    return path


def wait_both_healthy(timeout: float = 90) -> dict[str, dict]:
    return VIEW.wait_healthy((GROUP_URL, SINGLE_URL), timeout)


class Healthy(ListPoller):
    """How many workers the gateway listed healthy, and whether the single worker was listed, read by read."""

    def __init__(self) -> None:
        super().__init__(VIEW)
        self.healthy: list[int] = []
        self.single: list[bool] = []
        self.group: list[bool] = []

    def observe(self, listed: dict[str, dict], now: float) -> None:
        self.healthy.append(sum(1 for w in listed.values() if w.get("is_healthy") is True))
        self.single.append(SINGLE_URL in listed)
        self.group.append(GROUP_URL in listed)


@pytest.fixture(scope="module")
def deployed(hosts, tmp_path_factory) -> dict[str, TestHost]:
    deploy_inventory(write_inventory(tmp_path_factory.mktemp("initial") / "inventory.py", hosts, "t0"), ENV, say,
                     "a gateway, a 2-node tp group and a single worker")
    return hosts


def test_the_group_is_one_worker_at_rank_0s_server(deployed):
    workers = wait_both_healthy()
    assert sorted(workers) == sorted([GROUP_URL, SINGLE_URL]), workers


def test_status_reads_the_gateway_host_and_every_members_membership(deployed, tmp_path):
    """`sglang-deploy status`: the gateway host's own row (its unit, router release and revision, read
    over SSH; its worker list over HTTP) and the group's members in the gateway at rank 0's URL."""
    inv = write_inventory(tmp_path / "inventory.py", deployed, "t0")
    proc, rows = status_rows(inv, ENV)
    gw = rows[GW]["gateway"]
    assert rows[GW]["state"] == "ok", (rows[GW]["problems"], rows[GW]["warnings"])
    assert gw["router"] == {"planned": "0.3.2", "installed": "0.3.2"}
    assert gw["unit"]["active"] == "active" and gw["unit"]["current"] == gw["unit"]["deployed"] is not None
    assert (gw["expected"], gw["healthy"]) == (2, 2), gw
    assert {w["url"] for w in gw["workers"]} == {GROUP_URL, SINGLE_URL}
    for name in (LEADER, FOLLOWER, SINGLE):
        assert rows[name]["gateways"] == {GW: "listed"}, (name, rows[name]["gateways"])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_a_new_revision_restarts_the_group_out_of_the_gateway_then_the_single_worker(deployed, tmp_path):
    before_pids = {n: main_pid(deployed[n]) for n in (LEADER, FOLLOWER, SINGLE)}
    before_ids = {u: w["id"] for u, w in wait_both_healthy().items()}
    inv = write_inventory(tmp_path / "inventory.py", deployed, "t1")
    client = ClientLoad(GW_URL, api_key=KEY, streams=4, max_tokens=96).start()
    t = time.monotonic()
    try:
        rc, output = run_polling([sys.executable, "-m", "pyinfra", "-y", str(inv), "deploy.py"], ROOT, ENV,
                                 polled := Healthy())
    finally:
        result = client.stop()
    fewest = polled.healthy
    output = _ANSI.sub("", output)
    (tmp_path / "output.txt").write_text(output)
    took = drained(output)
    say(f"new revision, group + single worker in one run: {time.monotonic() - t:.1f} s; {result.requests} client "
        f"requests through the gateway, {result.failed} failed, p99 {result.p99_s or 0:.3f} s; fewest healthy "
        f"listed {min(fewest) if fewest else '-'}; drains {took}")
    assert rc == 0, output[-8000:]
    for name in (LEADER, FOLLOWER, SINGLE):
        assert release(deployed[name]) == "t1" and main_pid(deployed[name]) != before_pids[name], name
    # rank 0 drained the group (once: the followers only wait), and the single worker drained itself
    assert set(took) == {LEADER, SINGLE}, took
    lines = output.splitlines()

    def first(text: str, host: str) -> int:
        return next(i for i, line in enumerate(lines) if f"[{host}]" in line and text in line)

    # the group was out of the gateway before its members' files went live (its step comes first:
    # the first swap of the run is the group's), and the two workers took turns: the single
    # worker's drain began after the group had joined again
    swap = lines.index(next(line for line in lines if "Live change | Make the new revision live" in line))
    assert first("drained in", LEADER) < swap
    assert first("registered again in", LEADER) < first("drained in", SINGLE)
    assert fewest and min(fewest) >= 1, fewest
    after = wait_both_healthy()
    assert after[GROUP_URL]["id"] != before_ids[GROUP_URL]  # it left and joined again
    assert result.failed == 0, [f.error for f in result.failures[:5]]


@pytest.mark.parametrize("tuned", ["single worker", "tp group"])
def test_a_worker_being_tuned_stays_out_of_the_gateway_until_the_tuners_return(deployed, tmp_path, tuned):
    """`sglang-deploy tune` on the single worker, then on the tp group (`--host GROUP`, one worker at
    rank 0): it leaves the gateway at its first trial, is never listed while a trial's server runs
    (a trial's passing gate does not register it), and joins again only after the tuner's return to
    its own revision (a group: rank 0 registers it); the other worker serves the clients meanwhile."""
    name, url, members = (SINGLE, SINGLE_URL, (SINGLE,)) if tuned == "single worker" else \
        (GROUP, GROUP_URL, (LEADER, FOLLOWER))
    inv = write_inventory(tmp_path / "inventory.py", deployed, "t1")
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({**{k: [] for k in TUNE_SPACE_KEYS}, "mem_fraction_static": [0.85, 0.88]}))
    before = wait_both_healthy()[url]["id"]
    client = ClientLoad(GW_URL, api_key=KEY, streams=4, max_tokens=96).start()
    t = time.monotonic()
    try:
        rc, output = run_polling([sys.executable, "-m", "sglang_deploy.commands.cli", "tune", str(inv), "--host",
                                  name, "--space", str(space), "--budget", "3", "--json",
                                  str(tmp_path / "tune.json")], ROOT, ENV, polled := Healthy())
    finally:
        result = client.stop()
    seen = polled.single if tuned == "single worker" else polled.group  # listed, read by read
    (tmp_path / "tune-output.txt").write_text(output)
    summary = json.loads((tmp_path / "tune.json").read_text())
    changes = sum(1 for a, b in zip(seen, seen[1:]) if a != b)
    say(f"tune of the {tuned} behind the gateway: {time.monotonic() - t:.1f} s, {len(summary['trials'])} "
        f"trial(s); {result.requests} client requests through the gateway, {result.failed} failed; it left and "
        f"joined {changes} time(s) in all")
    assert rc == 0, output[-6000:]
    assert summary["restored"] is True and summary["trials"], summary
    # out once (at the first trial), back once (after the return's gate): never listed in between
    assert seen and not all(seen) and changes <= 2, seen
    after = wait_both_healthy()
    assert after[url]["id"] != before  # registered again by the tuner's return
    for member in members:
        assert release(deployed[member]) == "t1", member
    assert result.failed == 0, [f.error for f in result.failures[:5]]
