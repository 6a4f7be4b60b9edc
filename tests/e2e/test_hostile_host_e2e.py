"""Hostile host answers over real SSH: a throwaway host deployed as usual (the simulated server, the
continuous check on) whose own files are then made hostile, as a compromised or broken host would
hand them over: history lines with lone surrogates, bytes that are not UTF-8, 400-digit numbers and
a 256 KiB line; the check's state files likewise; FIFOs where the revision's version file, the
deploy lock and nccl.conf are expected; a dist-info folder in the venv and a revision folder whose
names are not UTF-8; the env file with a secret in systemd syntax the old scrubber missed and a
line of 256 KiB; the textfile directory replaced by a link to another directory.

Each of these once hung `status`, printed the Hub token or lost the host's whole answer in a
traceback (the FIFOs, a history line quoting the token, the names), or stopped the check from
writing its metrics and history (the dist-info name, the state files).

``sglang-deploy status`` (the table, ``--json``, ``--diff``) ends within a bound, with no traceback,
no secret and no terminal control in what it prints; the check (its own systemd service, started as
the timer starts it) ends within a bound, writes its history line, and writes nothing through the
link.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sglang_deploy.simulator.testbed import Testbed, TestHost, fleet
from tests.conftest import ROOT
from tests.e2e.conftest import NOT_ABOUT_SPEED
from tests.e2e.test_deploy import HF_TOKEN, boot_a6000_hosts, wait_healthy

NAME = "e2e-hostile-host"
PORT = 31981  # the server's; distinct from every other e2e file
WATCH = {"interval": "1h", "timeout": "2m", "max_tokens": 8}  # the timer is stopped; runs are started here
STATE = "/var/lib/sglang-deploy/sglang"
SITE = "/opt/sglang/sglang-0.5.23/lib/python3.11/site-packages"
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
VICTIM = "/etc/sglang-victim"  # where the textfile directory's link points
ENV_FILE = "/etc/sglang/sglang.env"
SECRET = "zzHostileSecret3141"
#: A status read or a check run past this is a hang (a host read takes seconds, a run under a minute).
BOUND_S = 150
ENV = {**os.environ, fleet.TOKEN_ENV: HF_TOKEN}
BIG = b"9" * 400


@pytest.fixture(scope="module")
def deployed(testbed: Testbed, tmp_path_factory) -> tuple[TestHost, Path]:
    host = boot_a6000_hosts(testbed, tmp_path_factory, [NAME])[NAME]
    data = {**fleet.host_data("a6000x2-bridge", PORT), "sglang_gate": dict(NOT_ABOUT_SPEED)}
    data["sglang_watch"] = WATCH
    inventory = testbed.write_inventory(tmp_path_factory.mktemp("hostile-host") / "inventory.py", [host],
                                        {NAME: data}, group="gpu_fleet")
    result = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(inventory), "deploy.py"], cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    wait_healthy(PORT)
    host.ssh("systemctl stop sglang-watch.timer")
    deadline = time.monotonic() + BOUND_S  # a run the timer began before it stopped ends first
    while host.ssh("systemctl is-active sglang-watch.service", check=False).stdout.strip() in ("activating",
                                                                                               "active"):
        assert time.monotonic() < deadline, "a run of the check did not end"
        time.sleep(0.5)
    return host, inventory


def hostile_history() -> bytes:
    lines = [
        b'{"kind":"gate","verdict":"pass","decode_tok_s":' + BIG + b',"revision":"\\ud800","time":"\\ud800"}',
        b'{"kind":"gate","verdict":"\xed\xa0\x80\xff","decode_tok_s":1e400,"time":"2026-01-01T00:00:00+00:00"}',
        b'{"kind":"watch","verdict":"fail","why":"\\ud800\\u001b[2J ' + HF_TOKEN.encode() + b'","drift":["unit",'
        + BIG + b'],"gpu_problems":["\\udc80"],"gpu_keys":[' + BIG + b'],"time":"' + BIG + b'","duration_s":'
        + BIG + b',"revision":{"a":[1]},"measured":"\\ud800"}',
        b'{"kind":"gate","pad":"' + b"x" * (256 << 10) + b'"}',
        b"\xff" * 1000,
    ]
    return b"".join(line + b"\n" for line in lines)


HOSTILE_LAST = (b'{"service":"sglang","last_run":' + BIG + b',"last_skip":"\\ud800","duration_s":-' + BIG
                + b',"drift":7,"deployed":"\\ud800","running":{"a":[1]},"sglang_version":"0.5\\udc80\\u001b[2J",'
                b'"health":{"gpus":[{"index":' + BIG + b'},{"index":0,"uuid":"GPU-\\ud800\\n","name":"\\u0000",'
                b'"clocks_event_reasons":5,"ecc":{"uncorrected":' + BIG + b'}}]}}')


def make_hostile(host: TestHost) -> dict[str, str]:
    """The host's files made hostile; what the directory the textfile link points to holds."""
    root = host.root
    st = root / STATE.lstrip("/")
    ref = (st / "deployed").read_text().strip()
    with open(st / "history.jsonl", "ab") as fh:
        fh.write(hostile_history())
    (st / "watch" / "last.json").write_bytes(HOSTILE_LAST)
    (st / "watch" / "weights-cursor.json").write_bytes(b'{"next":"\\ud800","bad":{"\\ud800":' + BIG + b'}}')
    env = (root / ENV_FILE.lstrip("/")).read_bytes()
    (root / ENV_FILE.lstrip("/")).write_bytes(env + b'OTHER_TOKEN = "x"' + SECRET.encode() + b"\n"
                                              + b"PAD=" + b"a" * (256 << 10) + b"\xff\xed\xa0\x80\n")
    site = os.fsencode(root / SITE.lstrip("/"))
    os.mkdir(os.path.join(site, b"sglang-0.5.23\xff\x1b[2J.dist-info"))
    os.mkdir(os.path.join(os.fsencode(st / "revisions"), b"\xff\xfe\x1b[2J"))
    host.ssh(f"set -e; cd {STATE}; rm -f revisions/{ref}/version deploy.lock /etc/nccl.conf; "
             f"mkfifo revisions/{ref}/version deploy.lock /etc/nccl.conf; "
             f"mkdir -p {VICTIM}; echo kept > {VICTIM}/file; chmod 0700 {VICTIM}; "
             f"rm -rf {TEXTFILE_DIR}; ln -s {VICTIM} {TEXTFILE_DIR}")
    return victim(host)


def victim(host: TestHost) -> dict[str, str]:
    out = host.ssh(f"stat -c '%n %a %s' {VICTIM} {VICTIM}/*; cat {VICTIM}/*").stdout
    return {"listing": out}


def status(inventory: Path, *args: str) -> subprocess.CompletedProcess:
    t0 = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "sglang_deploy.commands.cli", "status", str(inventory), *args],
                            cwd=ROOT, env=ENV, capture_output=True, text=True, errors="surrogateescape",
                            timeout=BOUND_S)
    seconds = time.monotonic() - t0
    output = result.stdout + result.stderr
    print(f"\nstatus {' '.join(args)}: {seconds:.1f} s, exit {result.returncode}")
    assert result.returncode in (0, 1), output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    assert HF_TOKEN not in output and SECRET not in output, "a secret was printed"
    assert "\x1b" not in output, "a terminal control was printed"
    assert not any("\udc80" <= c <= "\udcff" for c in output), "a byte that is not UTF-8 was printed"
    return result


def check_run(host: TestHost) -> dict:
    """One run of the check as its timer starts it; its history line."""
    run = host.ssh("systemctl start sglang-watch.service", check=False, timeout=BOUND_S)
    assert run.returncode == 0, run.stderr + host.ssh("journalctl -u sglang-watch.service -n 30 --no-pager").stdout
    line = host.ssh(f"tail -n 1 {STATE}/history.jsonl").stdout
    return json.loads(line)


def test_hostile_host_files_leave_status_and_the_check_bounded_and_quiet(deployed):
    host, inventory = deployed
    before = make_hostile(host)
    ref = (host.root / STATE.lstrip("/") / "deployed").read_text().strip()
    # FIFOs where the revision's version, the lock and nccl.conf are expected: read around, never opened
    status(inventory)
    rows = json.loads(status(inventory, "--json").stdout)
    assert [row["host"] for row in rows] == [NAME] and rows[0]["drift"]["nccl_conf"] == "missing"
    shown = status(inventory, "--diff")
    assert "+OTHER_TOKEN = ***" in shown.stdout and "+PAD=aaaa" in shown.stdout, shown.stdout[-3000:]
    doc = json.loads(status(inventory, "--json", "--diff").stdout)[0]
    assert "+OTHER_TOKEN = ***" in doc["diff"]["env"]

    # the check: a FIFO where the lock is expected is judged without blocking (held: the run skips) ...
    t0 = time.monotonic()
    skipped = check_run(host)
    assert skipped["kind"] == "watch" and skipped["verdict"] == "skipped", skipped
    # ... and without it, the version file back, the whole run: the odd dist-info, the hostile state
    # files, the FIFO nccl.conf, the linked textfile directory
    host.ssh(f"rm -f {STATE}/deploy.lock {STATE}/revisions/{ref}/version && "
             f"printf 0.5.23 > {STATE}/revisions/{ref}/version")
    last = check_run(host)
    print(f"\nthe check's two runs: {time.monotonic() - t0:.1f} s")
    assert last["kind"] == "watch" and last["verdict"] in ("fail", "error"), last
    assert {"nccl_conf", "sglang_version"} <= set(last["drift"]), last
    assert "metrics not written" in last["why"] and "symbolic link" in last["why"], last["why"]
    assert victim(host) == before, "the check wrote through the linked textfile directory"
    journal = host.ssh("journalctl -u sglang-watch.service --no-pager -o cat").stdout
    assert "Traceback" not in journal, journal[-3000:]
    # status reads the run's line back, and the odd dist-info name, printable
    row = json.loads(status(inventory, "--json").stdout)[0]
    assert row["last_watch"]["verdict"] == last["verdict"], row
    assert row["server"]["active_state"] == "active" and row["gpus"]["count"] == 2, row  # the whole answer read
    print(f"\ninstalled {row['sglang']['installed']!r}; warnings {row['warnings']}")
    status(inventory)
