"""`sglang-deploy status`, its pure part (sglang_deploy/status/) on recorded-shape fact
output, and the status fact's shell command (sglang_deploy/deploy/status.py) run against a state
folder on this machine."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

from sglang_deploy.lifecycle import revision as revision_module
from sglang_deploy import status
from sglang_deploy.commands import status_table
from sglang_deploy.lifecycle.revision import Layout
from sglang_deploy.untrusted import Scrubber

REV, OLD, NEW = "0123456789abcdef", "fedcba9876543210", "aaaaaaaaaaaaaaaa"
UNIT = "[Service]\nExecStart=/opt/sglang/venvs/sglang-0.5.23/bin/python -m sglang.launch_server --port 30000\n"
SECRET = "hf_SECRET_token_value_123"
ENV = f"# env\nNCCL_DEBUG=WARN\nHF_TOKEN={SECRET}\n"
NCCL = "NCCL_IB_DISABLE=1\n"
PATHS = {"unit": "/etc/systemd/system/sglang.service", "env": "/etc/sglang/sglang.env", "nccl_conf": "/etc/nccl.conf"}
KEY = {"hardware": "2x RTX A6000 (sm86)", "model": "Qwen/Qwen3-8B", "sglang_version": "0.5.23"}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def gate_line(verdict: str = "pass", rate: object = 40.0, rev: str = REV, created: str = "2026-01-01T00:00:00+00:00",
              **extra: object) -> str:
    doc = {"kind": "gate", "verdict": verdict, "revision": rev, "created": created, "decode_tok_s": rate,
           "target_tok_s": 30, "summary": f"gate {verdict}", "key": KEY, **extra}
    return json.dumps(doc)


ARGV = ["/opt/sglang/venvs/sglang-0.5.23/bin/python", "-m", "sglang.launch_server", "--port", "30000"]


def healthy_gpu(index: int, **changes: object) -> dict:
    """One GPU as gpu_health.py reports a healthy RTX A6000 (ECC off)."""
    gpu = {"index": index, "uuid": f"GPU-{index}", "name": "NVIDIA RTX A6000",
           "bus_id": f"00000000:{index + 1:02X}:00.0", "ecc": None, "retired_pages": None,
           "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
           "clocks_event_reasons": ["gpu_idle"], "foreign_processes": [], "foreign_memory_bytes": 0,
           "xid": {"count": 0, "last": None}}
    gpu.update(changes)
    return gpu


def health_line(*gpus: dict, error: str | None = None) -> str:
    return json.dumps({"schema": 1, "error": error, "gpus": list(gpus) if gpus or error else
                       [healthy_gpu(0), healthy_gpu(1)]})


def fact_lines(live: dict[str, str] | None = None, history: list[str] | None = None, current: str = REV,
               deployed: str = REV, active: str = "active", diff: bool = False, argv: list[str] | None = ARGV,
               health: str | None = None, **extra: str) -> list[str]:
    """What the status fact prints for a host deployed at REV (files as staged unless ``live``)."""
    staged = {"unit": UNIT, "env": ENV, "nccl_conf": NCCL}
    live = {**staged, **(live or {})}
    lines = ["systemd=yes", "state_dir=yes", f"current={current}", f"deployed={deployed}", f"previous={OLD}",
             f"reference={deployed or current}", f"staged={REV}", f"staged={OLD}"]
    for key in status.FILE_KEYS:
        if live[key] is not None:
            lines.append(f"live_{key}={sha(live[key])}")
        lines.append(f"staged_{key}={sha(staged[key])}")
        if diff and live[key] != staged[key]:
            lines += [f"difflive_{key}={b64(live[key] or '')}", f"diffstaged_{key}={b64(staged[key])}"]
    lines += ["staged_version=0.5.23", "installed_version=0.5.23", "enabled=enabled",
              "unit_LoadState=loaded", f"unit_ActiveState={active}", "unit_SubState=running", "unit_MainPID=4242",
              "unit_NRestarts=0", "unit_ActiveEnterTimestampMonotonic=1000000000",
              "unit_ExecMainStartTimestampMonotonic=999000000", "now_us=4600000000"]
    text = "\n".join(history if history is not None else [gate_line()]) + "\n"
    lines += [f"history_bytes={len(text.encode())}", f"history={b64(text)}"]
    lines.append(f"unittext_staged={b64(staged['unit'])}")
    if live["unit"] is not None:
        lines.append(f"unittext_live={b64(live['unit'])}")
    if argv is not None:
        lines.append("cmdline=" + base64.b64encode(b"".join(w.encode() + b"\0" for w in argv)).decode())
    lines.append(f"gpu_health={b64(health or health_line())}")
    lines += [f"{k}={v}" for k, v in extra.items()]
    return lines


def columns(table: str, line: int = 1) -> list[str]:
    """One line of the table, cut into its cells (two spaces or more between cells)."""
    return re.split(r"\s{2,}", table.splitlines()[line].strip())


PLANNED = status.Planned(revision=REV, sglang_version="0.5.23", paths=PATHS)


def row_of(lines: list[str], planned: status.Planned = PLANNED, diff: bool = False,
           scrubber: Scrubber | None = None) -> status.Row:
    return status.build_row("gpu-1", status.parse_observed(lines), planned, scrubber, with_diff=diff)


def test_a_host_as_deployed_is_ok_and_exit_0():
    row = row_of(fact_lines())
    assert row.state == status.OK and row.problems == [] and status.exit_code([row]) == 0
    assert row.server == {"active_state": "active", "sub_state": "running", "main_pid": 4242, "uptime_s": 3600.0,
                          "restarts": 0, "enabled": "enabled"}
    assert row.drift == {"unit": "same", "env": "same", "nccl_conf": "same", "argv": "same"}
    assert row.revision == {"running": REV, "deployed": REV, "previous": OLD, "planned": REV, "pending": False}
    assert row.last_gate is not None and row.last_gate.verdict == "pass" and row.last_gate.decode_tok_s == 40.0
    table = status_table.render_table([row])
    assert table.splitlines()[1].split()[:3] == ["gpu-1", "ok", REV]
    assert "up 1h00m" in table and "pass 40.0 tok/s (target 30.0)" in table
    assert "\x1b" not in table and "\x1b[32mok\x1b[0m" in status_table.render_table([row], colour=True)


@pytest.mark.parametrize("key", status.FILE_KEYS)
def test_each_drifted_file_is_named_and_exits_1(key):
    changed = {"unit": UNIT + "# edited\n", "env": ENV + "EXTRA=1\n", "nccl_conf": "NCCL_IB_DISABLE=0\n"}[key]
    row = row_of(fact_lines(live={key: changed}))
    assert row.state == status.DRIFTED and status.exit_code([row]) == 1
    assert row.drift[key] == "differs" and all(v == "same" for k, v in row.drift.items() if k != key)
    assert row.problems == [f"{key} drifted: {PATHS[key]} differs from revision {REV}'s copy"]
    assert columns(status_table.render_table([row]))[5] == key


def test_a_missing_live_file_is_drift():
    row = row_of(fact_lines(live={"nccl_conf": None}))
    assert row.state == status.DRIFTED and row.drift["nccl_conf"] == "missing"
    assert "nccl_conf drifted: /etc/nccl.conf is missing" in row.problems


def test_a_changed_inventory_is_pending_exit_1():
    row = row_of(fact_lines(), status.Planned(revision=NEW, sglang_version="0.5.23", paths=PATHS))
    assert row.state == status.PENDING and row.revision["pending"] is True and status.exit_code([row]) == 1
    assert f"{REV} -> {NEW}" in status_table.render_table([row])


def test_a_planned_revision_that_cannot_be_known_is_not_pending_but_said():
    row = row_of(fact_lines(), status.Planned(sglang_version="0.5.23", paths=PATHS, unknown="$HF not set"))
    assert row.state == status.OK and row.revision["pending"] is None
    assert row.warnings == ["planned revision unknown: $HF not set"]


def test_unreachable_and_unplannable_hosts_exit_2_with_a_row_saying_so():
    down = status.unreachable_row("gpu-2", "Could not connect (timed out)\x1b[2J", PLANNED)
    bad = status.error_row("gpu-3", "gpu-3: sglang_model: required")
    rows = [row_of(fact_lines()), down, bad]
    assert status.exit_code(rows) == 2 and down.state == status.UNREACHABLE and bad.state == status.ERROR
    table = status_table.render_table(rows)
    assert columns(table, 2)[:3] == ["gpu-2", "unreachable", "-"]
    assert "gpu-2: unreachable: Could not connect (timed out)" in table
    assert "gpu-3: cannot plan: gpu-3: sglang_model: required" in table and "\x1b" not in table
    assert json.loads(status_table.rows_json([down]))[0]["reachable"] is False


def test_never_deployed_half_deployed_and_staging():
    never = row_of(["systemd=yes", "unit_LoadState=not-found", "unit_ActiveState=inactive"])
    assert never.state == status.NEVER and never.drift == {k: "unknown" for k in (*status.FILE_KEYS, "argv")}
    assert never.problems == ["never deployed: no revision was made live here"]  # not also "down"
    half = row_of(fact_lines(current=NEW, deployed=REV))
    assert half.state == status.HALF and "revision aaaaaaaaaaaaaaaa is live but" in half.problems[0]
    staging = row_of(fact_lines(staging=NEW))
    assert staging.state == status.HALF and "is being staged" in staging.problems[0]
    swap = row_of(fact_lines(tmp_unit="yes"))
    assert swap.state == status.HALF and "temporary file is left beside unit" in swap.problems[0]


def test_a_stopped_server_is_down():
    row = row_of(fact_lines(active="inactive"))
    assert row.state == status.DOWN and row.server["uptime_s"] is None
    assert row.problems == ["the service is not active: inactive (running)"]


def test_a_failed_last_gate_and_a_different_sglang():
    row = row_of(fact_lines(history=[gate_line("pass", 50.0, created="t1"), gate_line("fail", 20.0, created="t2")]))
    assert row.state == status.GATE_FAILED
    assert row.last_gate is not None and row.last_gate.baseline_tok_s == 50.0 and row.last_gate.time == "t2"
    assert "fail 20.0 tok/s (target 30.0) (baseline 50.0) t2" in status_table.render_table([row])
    other = row_of(fact_lines() + ["installed_version=0.5.19"])
    assert other.state == status.VERSION and other.sglang["installed"] == "0.5.19"


def test_the_baseline_is_the_best_earlier_pass_of_the_same_key():
    other_key = dict(KEY, sglang_version="0.5.19")
    history = [gate_line("pass", 90.0, key=other_key), gate_line("pass", 45.0), gate_line("fail", 10.0),
               json.dumps({"kind": "rollback", "verdict": "ready"}), gate_line("pass", 44.0)]
    gate, refused = status.last_gate(history)
    assert refused == 0 and gate is not None and gate.baseline_tok_s == 45.0 and gate.decode_tok_s == 44.0


HOSTILE = [
    "not json at all",
    "[1, 2, 3]",
    '{"kind": "gate", "verdict": {"x": 1}, "decode_tok_s": "fast", "created": 7, "revision": "../../etc"}',
    json.dumps({"kind": "gate", "verdict": "pass\x1b[31m", "decode_tok_s": 10 ** 400,
                "created": "\x1b]0;owned\x07 2026\u202e", "summary": "\x1b[2J\x1b[H cleared" * 50,
                "key": {"hardware": ["x"], "model": None}}),
    '{"kind": "gate", "decode_tok_s": NaN}',
    "[" * 5000 + "]" * 5000,
    '{"kind": "gate", "verdict": "pass", "decode_tok_s": true, "target_tok_s": -5, "key": "k"}',
    "x" * (status.HISTORY_LINE_BYTES + 10),
    "\x00\x01\xff binary",
]


def test_a_hostile_history_never_crashes_nor_reaches_the_terminal():
    row = row_of(fact_lines(history=HOSTILE))
    assert row.last_gate is not None
    gate = row.last_gate
    assert gate.verdict == "pass" and gate.decode_tok_s is None and gate.target_tok_s is None
    assert gate.baseline_tok_s is None
    assert row.state == status.OK
    for shown in (status_table.render_table([row], with_diff=True), status_table.rows_json([row], with_diff=True)):
        assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert any("line(s) are not JSON objects" in w for w in row.warnings)
    middle = status.gate_entries(HOSTILE[2:4])[0]
    assert [e["verdict"] for e in middle] == ["unknown", "unknown"] and middle[0]["revision"] is None
    assert middle[1]["time"] == "2026" and len(middle[1]["summary"]) <= 200


def test_garbage_from_the_host_is_refused_not_shown():
    lines = fact_lines() + ["current=\x1b[31mevil\x1b[0m", "history=!!!not base64", "unit_MainPID=-1; rm",
                            "installed_version=$(reboot)", "staged=../../etc", "unit_ActiveState=\x1b[2J"]
    row = row_of(lines)
    assert row.revision["running"] is None and row.server["main_pid"] is None and row.last_gate is None
    assert row.sglang["installed"] is None and row.server["active_state"] is None
    out = status_table.render_table([row]) + status_table.rows_json([row])
    assert "\x1b" not in out and "reboot" in out  # named in a warning, harmlessly
    assert any("the current marker holds" in w for w in row.warnings)


def test_a_truncated_history_drops_its_first_partial_line():
    text = gate_line("fail", 1.0)[5:] + "\n" + gate_line("pass", 2.0) + "\n"
    lines = [line for line in fact_lines() if not line.startswith("history")]
    row = row_of(lines + [f"history_bytes={10 ** 9}", f"history_selected={10 ** 6}", f"history={b64(text)}"])
    assert row.last_gate is not None and row.last_gate.decode_tok_s == 2.0
    assert any("only its last 16 MiB" in w for w in row.warnings)
    assert not any("not JSON" in w for w in row.warnings)  # the partial first line was dropped, not parsed


def test_a_whole_selection_keeps_its_first_line():
    # the host sent every selected line (history_selected == what arrived): the first is whole
    text = gate_line("pass", 1.0) + "\n"
    lines = [line for line in fact_lines() if not line.startswith("history")]
    row = row_of(lines + [f"history_bytes={10 ** 6}", f"history_selected={len(text)}", f"history={b64(text)}"])
    assert row.last_gate is not None and row.last_gate.decode_tok_s == 1.0
    assert not any("MiB read" in w for w in row.warnings)


def test_diff_shows_the_edit_and_never_a_secret():
    edited_unit = UNIT.replace("--port 30000", "--port 30001") + "Environment=SGLANG_API_KEY=sk-unit-secret\n"
    edited_env = ENV.replace(SECRET, "hf_NEW_secret_value_456") + "MY_PASSWORD='p a s s'\nPROXY=http://u:pw@proxy\n"
    row = row_of(fact_lines(live={"unit": edited_unit, "env": edited_env}, diff=True), diff=True,
                 scrubber=Scrubber([SECRET]))
    assert set(row.diff) == {"unit", "env"}
    assert "-ExecStart=" in row.diff["unit"] and "--port 30001" in row.diff["unit"]
    assert row.diff["unit"].startswith(f"--- {PATHS['unit']} (revision {REV})\n+++ {PATHS['unit']} (live)\n")
    assert "+HF_TOKEN=*** (changed)\n" in row.diff["env"] and "-HF_TOKEN=***\n" in row.diff["env"]
    assert "+MY_PASSWORD=***" in row.diff["env"] and "http://***@proxy" in row.diff["env"]
    outputs = [status_table.render_table([row], with_diff=True), status_table.rows_json([row], with_diff=True),
               status_table.rows_json([row])]
    for out in outputs:
        for secret in (SECRET, "hf_NEW_secret_value_456", "sk-unit-secret", "p a s s", "u:pw"):
            assert secret not in out
    assert "--port 30001" in outputs[0] and "diff" not in json.loads(outputs[2])[0]


def test_known_secrets_are_scrubbed_wherever_they_stand():
    text = f"ExecStart=/bin/x --hub-token {SECRET}\nPLAIN={SECRET}\n"
    assert SECRET not in status.redact(text, Scrubber([SECRET]))
    assert status.redact("A=1\nB_TOKEN=\"x y\"\n") == "A=1\nB_TOKEN=***\n"


def test_json_is_one_object_per_host_with_the_documented_keys():
    doc = json.loads(status_table.rows_json([row_of(fact_lines())]))
    assert isinstance(doc, list) and len(doc) == 1
    assert set(doc[0]) == {"schema", "host", "kind", "state", "problems", "reachable", "error", "revision",
                           "server", "sglang", "drift", "last_gate", "warnings", "gpus", "last_watch", "gateways",
                           "gateway", "service"}
    assert doc[0]["kind"] == "server" and doc[0]["gateways"] == {} and doc[0]["gateway"] is None
    assert doc[0]["service"] is None  # one server on the host (a replica's row names its unit)
    assert doc[0]["schema"] == status.SCHEMA == 1
    assert set(doc[0]["last_gate"]) == {"verdict", "time", "revision", "decode_tok_s", "target_tok_s",
                                        "baseline_tok_s", "baseline_version", "accepted_slower", "predicted_tok_s",
                                        "measured_over_predicted", "prefill_tok_s", "predicted_prefill_tok_s",
                                        "prefill_over_predicted", "aggregate_tok_s", "concurrency",
                                        "predicted_output_tok_s", "aggregate_over_predicted", "serving_gap_s",
                                        "start_s", "phases", "summary"}


# ---- the fact's command, run here against a state folder ----------------------------------------

def test_the_status_fact_reads_a_state_folder_and_changes_nothing(tmp_path, monkeypatch):
    from sglang_deploy.deploy.status import ServiceStatus

    monkeypatch.setattr(revision_module, "STATE_ROOT", str(tmp_path / "state"))
    live = tmp_path / "live"
    live.mkdir()
    layout = Layout(service="sgl-status-test", unit_path=str(live / "unit"), env_path=str(live / "env"),
                    nccl_conf_path=str(live / "nccl"))
    rdir = tmp_path / "state" / "sgl-status-test" / "revisions" / REV
    rdir.mkdir(parents=True)
    for name, text in (("sglang.service", UNIT), ("sglang.env", ENV), ("nccl.conf", NCCL)):
        (rdir / name).write_text(text)
    (rdir / "version").write_text("0.5.23\n")
    (rdir / "complete").touch()
    (rdir.parent / NEW).mkdir()  # staging, not complete
    (live / "unit").write_text(UNIT + "# by hand\n")
    (live / "env").write_text(ENV)
    state = rdir.parent.parent
    (state / "current").write_text(REV + "\n")
    (state / "deployed").write_text(REV + "\n")
    # the gate's line, then more of the continuous check's lines than the read keeps: the gate stays
    watch = [json.dumps({"kind": "watch", "verdict": "pass", "n": i}, separators=(",", ":")) for i in range(150)]
    (state / "history.jsonl").write_text("\n".join([gate_line("pass", 33.0), "\x1b[2J junk", *watch]) + "\n")
    venv = tmp_path / "venvs" / "sglang-0.5.23" / "lib" / "python3.11" / "site-packages" / "sglang-0.5.23.dist-info"
    venv.mkdir(parents=True)
    before = sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    command = ServiceStatus().command(layout, str(tmp_path / "venvs"), diff=True)
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before
    seen = ServiceStatus().process(result.stdout.splitlines())
    assert seen.current == seen.deployed == seen.reference == REV and seen.staging == (NEW,) and seen.staged == (REV,)
    assert seen.staged_version == seen.installed_version == "0.5.23"
    assert seen.live_sha256 == {"unit": sha(UNIT + "# by hand\n"), "env": sha(ENV), "nccl_conf": None}
    assert seen.staged_sha256 == {"unit": sha(UNIT), "env": sha(ENV), "nccl_conf": sha(NCCL)}
    assert seen.diffs["unit"] == (UNIT + "# by hand\n", UNIT) and "env" not in seen.diffs
    assert len(seen.history) == 2 + status.WATCH_LINES and seen.history[-1] == watch[-1]
    row = status.build_row("here", seen, PLANNED, with_diff=True)
    assert row.drift == {"unit": "differs", "env": "same", "nccl_conf": "missing", "argv": "unknown"}  # no server
    assert seen.staged_unit == UNIT and seen.live_unit == UNIT + "# by hand\n"
    assert seen.gpu_health is not None  # this machine: NVML absent or not (an error or GPUs), but a line
    assert "+# by hand" in row.diff["unit"] and row.last_gate is not None and row.last_gate.decode_tok_s == 33.0


def test_the_status_fact_reads_around_fifos_and_names_that_are_not_utf8(tmp_path, monkeypatch):
    """FIFOs where the revision's version, the deploy lock and a live file are expected are never
    opened (each would block the read until someone writes to it), and a folder name that is not
    UTF-8 (a dist-info's, a revision's) arrives as printable ASCII, not as bytes the SSH client
    cannot decode (paramiko's UnicodeDecodeError lost the whole answer)."""
    import os

    from sglang_deploy.deploy.status import ServiceStatus

    monkeypatch.setattr(revision_module, "STATE_ROOT", str(tmp_path / "state"))
    live = tmp_path / "live"
    live.mkdir()
    layout = Layout(service="sgl-fifo-test", unit_path=str(live / "unit"), env_path=str(live / "env"),
                    nccl_conf_path=str(live / "nccl"))
    rdir = tmp_path / "state" / "sgl-fifo-test" / "revisions" / REV
    rdir.mkdir(parents=True)
    for name, text in (("sglang.service", UNIT), ("sglang.env", ENV), ("nccl.conf", NCCL)):
        (rdir / name).write_text(text)
    (rdir / "complete").touch()
    (live / "unit").write_text(UNIT)
    (live / "env").write_text(ENV)
    state = rdir.parent.parent
    for marker in ("current", "deployed"):
        (state / marker).write_text(REV + "\n")
    os.mkfifo(rdir / "version")
    os.mkfifo(state / "deploy.lock")
    os.mkfifo(live / "nccl")
    os.mkdir(os.path.join(os.fsencode(rdir.parent), b"\xff\x1b[2J"))
    site = tmp_path / "venvs" / "sglang-0.5.23" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    os.mkdir(os.path.join(os.fsencode(site), b"sglang-0.5.23\xff.dist-info"))
    command = ServiceStatus().command(layout, str(tmp_path / "venvs"), diff=True)

    def read() -> bytes:
        proc = subprocess.Popen(["sh", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # its children too: one blocked on a FIFO keeps the pipe open
            proc.communicate()
            raise AssertionError("the read blocked") from None
        assert proc.returncode == 0, err
        return out

    text = read().decode("ascii")  # whatever the host holds: printable ASCII and line ends only
    seen = ServiceStatus().process(text.splitlines())
    assert seen.current == REV and seen.staged_version is None and seen.lock is False
    assert seen.live_sha256["nccl_conf"] is None and seen.diffs["nccl_conf"][0] == ""
    # the version file back: the odd dist-info name is a version nobody wrote, said and ignored
    os.unlink(rdir / "version")
    (rdir / "version").write_text("0.5.23\n")
    (state / "previous").write_bytes(b"\xff" * 16)
    seen = ServiceStatus().process(read().decode("ascii").splitlines())
    assert seen.staged_version == "0.5.23" and seen.previous is None


def test_the_gateway_hosts_state_read_reads_around_fifos_and_names_that_are_not_utf8(tmp_path):
    """The gateway host's read (deploy/gateway_host.py GatewayState, the deploy's and status's) as
    the serving hosts' read: a FIFO among the revision's files is never opened, and a revision
    folder or a marker that is not UTF-8 arrives as printable ASCII."""
    import os

    from sglang_deploy.deploy.gateway_host import GatewayState

    state = tmp_path / "gw-state"
    rev = state / "revisions" / REV
    rev.mkdir(parents=True)
    (rev / "complete").touch()
    (rev / "router.env").write_text("A=1\n")
    os.mkfifo(rev / "launcher.py")
    (state / "current").write_text(REV + "\n")
    (state / "previous").write_bytes(b"\xff\xfe" * 8)
    odd = os.path.join(os.fsencode(state / "revisions"), b"\xff\x1b[2J")
    os.mkdir(odd)
    open(os.path.join(odd, b"complete"), "wb").close()
    command = GatewayState().command(str(state), "/nonexistent/python", "sgl-gw-test.service")
    proc = subprocess.Popen(["sh", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        raise AssertionError("the read blocked") from None
    seen = GatewayState().process(out.decode("ascii").splitlines())
    assert seen["current"] == REV and set(seen["live_files"]) == {"router.env"}, seen
    assert sorted(seen["staged"]) == [REV, "??[2J"] and seen["previous"] == "?" * 16, seen


def test_a_held_lock_makes_a_served_host_half_deployed():
    lines = fact_lines() + ["lock=yes", "now_s=1000", "lock_started=900", "lock_expires=2000"]
    row = row_of(lines)
    assert row.state == status.HALF and any("holds the host's lock" in p for p in row.problems), row.problems
    assert row_of(fact_lines()).state == status.OK


@pytest.mark.parametrize("expires_in, said", [(3600, "a deploy holds the host's lock"),
                                               (-60, "past its deadline")])
def test_the_deploys_lock_is_read_and_named(tmp_path, monkeypatch, expires_in, said):
    """The lock a deploy takes (sglang_deploy/deploy/watching.py lock_command, run here as it runs on a
    host) shows as half-deployed: a deploy changing the host now, or one that died holding it."""
    import time

    from sglang_deploy.deploy import watching
    from sglang_deploy.deploy.status import ServiceStatus

    monkeypatch.setattr(revision_module, "STATE_ROOT", str(tmp_path / "state"))
    layout = Layout(service="sgl-lock-test", unit_path=str(tmp_path / "unit"), env_path=str(tmp_path / "env"),
                    nccl_conf_path=str(tmp_path / "nccl"))
    subprocess.run(["sh", "-c", watching.lock_command(layout, 3600)], check=True, timeout=60)
    lock = Path(layout.state_dir) / watching.LOCK_NAME
    started = int(time.time())
    text = lock.read_text()
    assert text.startswith("sglang-deploy deploy lock\n")
    assert abs(int(text.split("started=")[1].split()[0]) - started) < 5
    lock.write_text(f"sglang-deploy deploy lock\nstarted={started}\nexpires={started + expires_in}\n")
    command = ServiceStatus().command(layout, str(tmp_path / "venvs"), diff=False)
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, check=True).stdout
    seen = ServiceStatus().process(out.splitlines())
    assert seen.lock and seen.lock_started == started and seen.lock_expires == started + expires_in
    row = status.build_row("here", seen, PLANNED)
    # (this machine runs no systemd, so the row's state is that error; the lock is one more problem)
    assert any(said in p for p in row.problems), row.problems
    subprocess.run(["sh", "-c", watching.unlock_command(layout)], check=True, timeout=60)
    seen = ServiceStatus().process(subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60,
                                                  check=True).stdout.splitlines())
    assert not seen.lock and seen.lock_started is None


def test_bad_input_exits_2_before_any_host_is_read(tmp_path):
    from io import StringIO

    from sglang_deploy.commands.status import StatusOptions, run_status
    from tests.conftest import ROOT

    for opts, said in ((StatusOptions(str(tmp_path / "none.py")), "no such file"),
                       (StatusOptions(str(ROOT / "inventory" / "a6000.py"), limit=["nope"]),
                        "--limit nope: matches no host or group")):
        out, err = StringIO(), StringIO()
        assert run_status(opts, out, err) == 2
        assert said in err.getvalue() and out.getvalue() == ""
