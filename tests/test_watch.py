"""The continuous check (docs/watch.md): its setting, its units (systemd-analyze verify), the host
script's pieces (the metrics text parsed by prometheus_client's own parser, the ExecStart reader
against the deploy's own rendering, the lock, the history line) and one whole run against a
state folder on this machine, with a stand-in for the gate's zipapp and the GPU health reader."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
import subprocess
import sys
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sglang_deploy.deploy.host import watch as hostwatch
from sglang_deploy.deploy.host import watch_drift
from sglang_deploy.hostrules.metrics import metrics_text
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import exec_lines, render, render_watch
from sglang_deploy.lifecycle.revision import revision_id
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.plan.watch import parse_span

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
BASE = {"sglang_model": "Qwen/Qwen3-32B", "sglang_gpus": {"model": "RTX A6000", "count": 2}}
HEALTH = {"schema": 1, "error": None, "gpus": [
    {"index": 0, "uuid": "GPU-0a", "name": "NVIDIA RTX A6000", "bus_id": "00000000:18:00.0",
     "ecc": {"uncorrected": 2, "corrected": 7}, "retired_pages": None,
     "remapped_rows": {"correctable": 1, "uncorrectable": 0, "pending": True, "failure": False},
     "clocks_event_reasons": ["hw_slowdown"], "foreign_processes": [{"pid": 4242, "used_bytes": 1 << 30}],
     "foreign_memory_bytes": 1 << 30, "xid": {"count": 3, "last": 79}},
    {"index": 1, "uuid": "GPU-1b", "name": 'odd "name" \\ x', "bus_id": "00000000:19:00.0", "ecc": None,
     "retired_pages": {"single_bit": 1, "double_bit": 0, "pending": False}, "remapped_rows": None,
     "clocks_event_reasons": [], "foreign_processes": [], "foreign_memory_bytes": 0, "xid": None}]}


def spec(**watch):
    return build_spec("h1", {}, {**BASE, "sglang_watch": watch or True})


# -- the setting -------------------------------------------------------------------------


def test_watch_is_off_by_default_and_true_means_the_defaults():
    assert build_spec("h1", {}, BASE).watch is None
    assert build_spec("h1", {}, {**BASE, "sglang_watch": False}).watch is None
    on = build_spec("h1", {}, {**BASE, "sglang_watch": True}).watch
    assert on is not None and on.interval_s == 900 and on.textfile_dir == "/var/lib/prometheus/node-exporter"
    assert on.verify_weights_bytes == 0 and 2 <= on.max_tokens <= 256 and on.prefill_tokens == 0
    assert build_spec("h1", {}, {**BASE, "sglang_watch": {"prefill_tokens": 2048}}).watch.prefill_tokens == 2048


@pytest.mark.parametrize("value,field", [
    ({"interval": "5s"}, "sglang_watch.interval"), ({"interval": "25h"}, "sglang_watch.interval"),
    ({"interval": "15"}, "sglang_watch.interval"), ({"interval": True}, "sglang_watch.interval"),
    ({"max_tokens": 1}, "sglang_watch.max_tokens"), ({"max_tokens": 100000}, "sglang_watch.max_tokens"),
    ({"timeout": "2h"}, "sglang_watch.timeout"), ({"textfile_dir": "var/lib"}, "sglang_watch.textfile_dir"),
    ({"textfile_dir": "/a/../etc"}, "sglang_watch.textfile_dir"),
    ({"textfile_dir": "/a b"}, "sglang_watch.textfile_dir"),
    ({"verify_weights_bytes": -1}, "sglang_watch.verify_weights_bytes"), ({"every": "1m"}, "sglang_watch.every"),
    ({"prefill_tokens": -1}, "sglang_watch.prefill_tokens"), ({"prefill_tokens": 32769}, "sglang_watch.prefill_tokens"),
    ({"prefill_tokens": "2048"}, "sglang_watch.prefill_tokens"),
    ("yes", "sglang_watch"), (1, "sglang_watch")])
def test_bad_watch_values_name_the_host_and_the_key(value, field):
    with pytest.raises(PlanError) as err:
        build_spec("h1", {}, {**BASE, "sglang_watch": value})
    assert err.value.host == "h1" and err.value.field == field, str(err.value)


def test_time_spans_read_as_systemd_reads_them():
    assert parse_span("15m") == 900 and parse_span("1h 30m") == 5400 and parse_span("90s") == 90
    assert parse_span("2min") == 120 and parse_span("1d") == 86400
    assert parse_span("") is None and parse_span("15") is None and parse_span("1x") is None


def test_the_watch_is_not_part_of_the_revision():
    """Changing the watch changes no file of the revision: nothing restarts."""
    plans = [plan_host(build_spec("h1", {}, {**BASE, **extra}))
             for extra in ({}, {"sglang_watch": True}, {"sglang_watch": {"interval": "1h", "max_tokens": 8}})]
    revisions = {revision_id(render(p), p.sglang_version) for p in plans}
    assert len(revisions) == 1


def test_a_tp_group_member_is_refused():
    with pytest.raises(PlanError) as err:
        build_spec("h1", {}, {**BASE, "sglang_tp_group": "g1", "sglang_watch": True})
    assert err.value.field == "sglang_watch"


# -- the units ---------------------------------------------------------------------------


def test_units_bound_the_check_and_never_restart_anything():
    s = spec(interval="15s", timeout="1m")
    units = render_watch(plan_host(s), s.watch, "/var/lib/sglang-deploy/sglang")
    for line in ("Type=oneshot", "TimeoutStartSec=60", "Nice=19", "IOSchedulingClass=idle", "CPUQuota=50%",
                 "ProtectSystem=strict", "NoNewPrivileges=yes",
                 "ReadWritePaths=/var/lib/sglang-deploy/sglang /var/lib/prometheus/node-exporter"):
        assert line in units.service.splitlines(), line
    assert "Restart=" not in units.service and "ExecStop" not in units.service
    for line in ("OnBootSec=15", "OnUnitActiveSec=15", "Unit=sglang-watch.service"):
        assert line in units.timer.splitlines(), line


@pytest.mark.skipif(SYSTEMD_ANALYZE is None and not os.environ.get("CI"), reason="systemd-analyze missing")
def test_units_pass_systemd_analyze_verify(tmp_path):
    s = spec(interval="1h 30m", textfile_dir=str(tmp_path / "textfile"))
    bin_dir = tmp_path / "venvs" / "sglang-0.5.23" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    plan = plan_host(s)
    plan = dataclasses.replace(plan, service=dataclasses.replace(plan.service, venvs_dir=str(tmp_path / "venvs")))
    units = render_watch(plan, s.watch, "/var/lib/sglang-deploy/sglang")
    (tmp_path / "sglang-watch.service").write_text(units.service)
    (tmp_path / "sglang-watch.timer").write_text(units.timer)
    result = subprocess.run([SYSTEMD_ANALYZE or "systemd-analyze", "verify", "--man=no",
                             str(tmp_path / "sglang-watch.timer"), str(tmp_path / "sglang-watch.service")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == "", result.stderr
    broken = tmp_path / "broken" / "sglang-watch.service"
    broken.parent.mkdir()
    broken.write_text(units.service.replace("IOSchedulingClass=idle", "IOSchedulingClass=lazy"))
    bad = subprocess.run([SYSTEMD_ANALYZE or "systemd-analyze", "verify", "--man=no", str(broken)],
                         capture_output=True, text=True, timeout=60)
    assert "IO scheduling class" in bad.stderr  # the check can fail


# -- the ExecStart reader against the deploy's rendering ------------------------------------


@pytest.mark.parametrize("argv,refs", [
    (["--model-path", "Qwen/Qwen3-32B", "--tp-size", "2", "--port", "30000"], {}),
    (["--model-path", "/m/50% \"q\" $x \\ y", "--served-model-name", ";", "--x", "a b"], {}),
    (["--model-path", "m", "--api-key", "SECRET", "--port", "1"], {3: "SGLANG_API_KEY"}),
])
def test_exec_start_reads_back_the_argv_the_process_gets(argv, refs):
    python = "/opt/sglang/sglang-0.5.23/bin/python"
    unit = "[Service]\nExecStart=" + " \\\n    ".join(exec_lines(python, argv, refs)) + "\nRestart=no\n"
    words = watch_drift.exec_start_words(unit)
    kept = [w for i, w in enumerate(argv) if i not in refs and i + 1 not in refs]
    assert words[0] == python and words[-len(kept):] == kept
    assert "SECRET" not in words
    if not refs:
        assert words[1:3] == ["-m", "sglang.launch_server"]


@pytest.mark.parametrize("line", ["ExecStart=/bin/x $HOME", "ExecStart=/bin/x \"a%b\"", "ExecStart=-/bin/x",
                                  "ExecStart=/bin/x \"open", "ExecStart=/bin/x 'q'"])
def test_exec_start_in_another_quoting_is_refused(line):
    with pytest.raises(ValueError):
        watch_drift.exec_start_words(f"[Service]\n{line}\n")


# -- the lock ------------------------------------------------------------------------------


def test_lock_is_held_until_its_deadline_then_stale(tmp_path):
    lock = tmp_path / "deploy.lock"
    now = time.time()
    assert hostwatch.lock_state(str(lock), now) == (False, None)
    lock.write_text(f"sglang-deploy deploy lock\nstarted={int(now)}\nexpires={int(now) + 600}\n")
    held, note = hostwatch.lock_state(str(lock), now + 10)
    assert held and "holds the host's lock" in note
    held, note = hostwatch.lock_state(str(lock), now + 601)
    assert not held and "stale" in note
    lock.write_text("garbage")  # no deadline: honoured LOCK_FALLBACK_S after it was written
    assert hostwatch.lock_state(str(lock), time.time() + 60)[0]
    assert not hostwatch.lock_state(str(lock), time.time() + hostwatch.LOCK_FALLBACK_S + 60)[0]
    lock.write_text(f"started={int(now)}\nexpires={int(now) + 10 ** 9}\n")  # never more than a day
    assert not hostwatch.lock_state(str(lock), now + hostwatch.LOCK_MAX_S + 60)[0]


# -- the metrics text -------------------------------------------------------------------------


def _families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_metrics_parse_with_prometheus_clients_parser():
    state = {"service": "sglang", "interval_s": 900, "last_run": 1.8e9, "last_skip": 1.7e9, "duration_s": 2.5,
             "check_success": False, "service_up": True, "decode_tok_s": 41.5, "baseline_tok_s": 200.0,
             "target_tok_s": None, "tolerance": 0.1, "drift": ["unit", "argv"], "deployed": "0123456789abcdef",
             "running": "0123456789abcdef", "sglang_version": "0.5.23", "health": HEALTH}
    text = metrics_text(state)
    fams = _families(text)
    drift = {s.labels["what"]: s.value for s in fams["sglang_deploy_drift"]}
    assert drift == {"unit": 1, "env": 0, "nccl_conf": 0, "argv": 1, "sglang_version": 0, "weights": 0}
    assert fams["sglang_deploy_decode_tokens_per_second"][0].value == 41.5
    assert fams["sglang_deploy_baseline_decode_tokens_per_second"][0].value == 200.0
    assert "sglang_deploy_target_decode_tokens_per_second" not in fams  # absent when none
    assert fams["sglang_deploy_watch_check_success"][0].value == 0
    info = fams["sglang_deploy_revision_info"][0]
    assert info.labels == {"service": "sglang", "deployed": "0123456789abcdef", "running": "0123456789abcdef",
                           "sglang_version": "0.5.23"} and info.value == 1
    # counters: the parser names the family without _total, the sample with it
    ecc = fams["sglang_deploy_gpu_ecc_uncorrected_errors"]
    assert [(s.name, s.labels["gpu"], s.value) for s in ecc] == [("sglang_deploy_gpu_ecc_uncorrected_errors_total",
                                                                  "0", 2)]
    names = {s.labels["gpu"]: s.labels["name"] for s in fams["sglang_deploy_gpu_info"]}
    assert names == {"0": "NVIDIA RTX A6000", "1": 'odd "name" \\ x'}  # escaped and read back
    clocks = {(s.labels["gpu"], s.labels["reason"]): s.value for s in fams["sglang_deploy_gpu_clocks_event_active"]}
    assert clocks[("0", "hw_slowdown")] == 1 and clocks[("1", "hw_slowdown")] == 0
    assert {s.labels["kind"]: s.value for s in fams["sglang_deploy_gpu_remapped_rows"]} == {"correctable": 1,
                                                                                           "uncorrectable": 0}
    assert [s.labels["cause"] for s in fams["sglang_deploy_gpu_retired_pages"]] == ["single_bit", "double_bit"]
    assert fams["sglang_deploy_gpu_xid_errors"][0].value == 3
    assert all(s.labels["service"] == "sglang" for samples in fams.values() for s in samples)
    assert [f.key for f in hostwatch.health_problems(HEALTH)] == [
        "gpu0 ecc_uncorrected", "gpu0 reset_pending", "gpu0 hw_slowdown", "gpu0 xid", "gpu0 foreign_memory"]


@pytest.mark.parametrize("foreign_mib, xid_count", [(100, 0), (513, 0), (0, 1), (4096, 2)])
def test_the_check_judges_the_gpus_as_status_does(foreign_mib, xid_count):
    """One judge: the same health line gives the check and `status` the same problems, sentence for
    sentence (memory held by other processes up to 512 MiB is no problem for either; an XID since
    boot is one for both)."""
    from sglang_deploy.status import gpu_findings, parse_gpu_health

    doc = json.loads(json.dumps(HEALTH))
    doc["gpus"][0].update(foreign_memory_bytes=foreign_mib << 20, xid={"count": xid_count, "last": 79})
    watch = hostwatch.health_problems(doc)
    status = [f for f in gpu_findings(parse_gpu_health(json.dumps(doc))) if f.severity == "problem"]
    assert [f.text for f in watch] == [f.text for f in status] and [f.key for f in watch] == [f.key for f in status]
    assert any(f.kind == "foreign_memory" for f in watch) == (foreign_mib > 512)
    assert any(f.kind == "xid" for f in watch) == (xid_count > 0)


def test_nvml_that_cannot_be_read_is_no_gpu_problem():
    """A host whose NVML cannot be read (no driver library, no pynvml) is said in the line's why, not failed."""
    assert hostwatch.health_problems({"schema": 1, "error": "pynvml not installed", "gpus": []}) == []


def test_a_skip_before_any_run_writes_only_what_is_known():
    fams = _families(metrics_text({"service": "s", "interval_s": 60, "last_skip": 1.7e9}))
    assert set(fams) == {"sglang_deploy_watch_last_skip_timestamp_seconds", "sglang_deploy_watch_interval_seconds"}


# -- one whole run on this machine ------------------------------------------------------------


GATE_STAND_IN = """import json, sys
args = sys.argv[1:]
opts = json.load(open(args[args.index("--options") + 1]))
json.dump({"verdict": "pass", "decode_tok_s": 99.5, "target_tok_s": opts.get("target_tok_s"),
           "tolerance": opts["tolerance"], "baseline": {"best_tok_s": 100.0},
           "prefill_tok_s": 4096.5 if opts.get("prefill_tokens") else None,
           "requests": [{"completion_tokens": opts["max_tokens"]}] * opts["repeats"],
           "seen": {"max_tokens": opts["max_tokens"], "prefill_tokens": opts.get("prefill_tokens"),
                    "baseline": open(opts["baseline"]).read()}},
          open(args[args.index("--json") + 1], "w"))
"""


@pytest.fixture
def host_state(tmp_path):
    """A state folder as a deploy leaves it, a watch folder with a stand-in for gate.pyz (a
    script that answers like the gate) and the GPU health reader (the contract's JSON)."""
    st, live, text = tmp_path / "state", tmp_path / "live", tmp_path / "textfile"
    rev = "0123456789abcdef"
    rdir = st / "revisions" / rev
    rdir.mkdir(parents=True)
    live.mkdir()
    for key, name in hostwatch.FILE_NAMES.items():
        (rdir / name).write_text(f"[Service]\nExecStart=/bin/true {key}\n")
        (live / name).write_text(f"[Service]\nExecStart=/bin/true {key}\n")
    (rdir / "version").write_text("0.5.23")
    dist = tmp_path / "venvs" / "sglang-0.5.23" / "lib" / "python3.11" / "site-packages" / "sglang-0.5.23.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    (st / "deployed").write_text(rev + "\n")
    (st / "current").write_text(rev + "\n")
    (st / "history.jsonl").write_text(json.dumps({"kind": "gate", "verdict": "pass", "decode_tok_s": 100.0},
                                                 separators=(",", ":")) + "\n"
                                      + json.dumps({"kind": "watch", "verdict": "pass"}, separators=(",", ":"))
                                      + "\n")
    wdir = st / "watch"
    wdir.mkdir()
    (wdir / "gate.pyz").write_text(GATE_STAND_IN)
    (wdir / "gpu_health.py").write_text(f"print({json.dumps(json.dumps(HEALTH))})\n")
    (wdir / f"gate-{rev}.json").write_text(json.dumps({"format": "sglang-deploy gate options", "version": 1,
                                                       "url": "http://127.0.0.1:1", "tolerance": 0.1,
                                                       "target_tok_s": None, "max_tokens": 256}))
    cfg = {"format": "sglang-deploy watch", "version": 1, "service": "sglang-unit-test-none", "state_dir": str(st),
           "watch_dir": str(wdir), "interval_s": 60, "timeout_s": 60, "max_tokens": 8, "repeats": 3,
           "textfile_dir": str(text), "verify_weights_bytes": 0, "venvs_dir": str(tmp_path / "venvs"),
           "live": {k: str(live / n) for k, n in hostwatch.FILE_NAMES.items()}, "python3": sys.executable}
    (wdir / "watch.json").write_text(json.dumps(cfg))
    return {"cfg": str(wdir / "watch.json"), "state": st, "live": live, "text": text, "dist": dist}


def _run(host_state) -> tuple[dict, dict]:
    assert hostwatch.main(["--config", host_state["cfg"]]) == 0
    line = json.loads((host_state["state"] / "history.jsonl").read_text().splitlines()[-1])
    prom = (host_state["text"] / "sglang_deploy_sglang-unit-test-none.prom").read_text()
    return line, _families(prom)


def test_a_whole_run_writes_the_history_line_and_the_textfile(host_state):
    line, fams = _run(host_state)
    assert set(line) == {"kind", "time", "service", "revision", "verdict", "why", "decode_tok_s", "prefill_tok_s",
                         "baseline_tok_s", "target_tok_s", "drift", "gpu_problems", "gpu_keys", "measured",
                         "duration_s"}
    assert line["prefill_tok_s"] is None and "sglang_deploy_prefill_tokens_per_second" not in fams  # off by default
    assert line["kind"] == "watch" and line["revision"] == "0123456789abcdef" and line["measured"] == "pass"
    assert line["decode_tok_s"] == 99.5 and line["baseline_tok_s"] == 100.0 and line["drift"] == []
    assert line["verdict"] == "fail" and ("gpu 0: 2 uncorrected ECC error(s) since the driver loaded "
                                          "(nvmlDeviceGetTotalEccErrors, volatile)") in line["gpu_problems"]
    assert line["gpu_keys"][0] == "gpu0 ecc_uncorrected" and len(line["gpu_keys"]) == len(line["gpu_problems"])
    assert fams["sglang_deploy_watch_check_success"][0].value == 1
    assert fams["sglang_deploy_service_up"][0].value == 0  # no such unit here
    report = json.loads((host_state["state"] / "watch" / "report.json").read_text())
    assert report["seen"]["max_tokens"] == 8  # the watch's few tokens, not the deploy gate's
    assert '"kind":"watch"' not in report["seen"]["baseline"] and '"kind":"gate"' in report["seen"]["baseline"]


def test_prefill_tokens_measure_prefill_each_run_and_a_prefill_servers_length_stands(host_state):
    cfg_path = Path(host_state["cfg"])
    cfg = json.loads(cfg_path.read_text())
    cfg_path.write_text(json.dumps({**cfg, "prefill_tokens": 2048}))
    line, fams = _run(host_state)
    report = json.loads((host_state["state"] / "watch" / "report.json").read_text())
    assert report["seen"]["prefill_tokens"] == 2048
    assert line["prefill_tok_s"] == 4096.5 and fams["sglang_deploy_prefill_tokens_per_second"][0].value == 4096.5
    # a prefill server's gate options carry its own length (gating.watch_options): it stands
    wdir = host_state["state"] / "watch"
    options = next(wdir.glob("gate-*.json"))
    options.write_text(json.dumps({**json.loads(options.read_text()), "role": "prefill", "prefill_tokens": 512}))
    _run(host_state)
    assert json.loads((wdir / "report.json").read_text())["seen"]["prefill_tokens"] == 512
    for bad in (-1, 32769, True, "2048"):
        cfg_path.write_text(json.dumps({**cfg, "prefill_tokens": bad}))
        assert hostwatch.main(["--config", str(cfg_path)]) == 2, bad


def test_the_hosts_prefill_bound_is_the_deploy_gates():
    from sglang_deploy.plan.settings import GATE_PREFILL_TOKENS_MAX

    assert hostwatch.MAX_PREFILL_TOKENS == GATE_PREFILL_TOKENS_MAX


def test_drift_of_each_file_and_of_the_version_is_flagged_and_clears(host_state):
    unit = host_state["live"] / "sglang.service"
    original = unit.read_text()
    unit.write_text(original + "# edited by hand\n")
    meta = host_state["dist"] / "METADATA"
    meta.write_text(meta.read_text().replace("0.5.23", "0.5.24"))
    line, fams = _run(host_state)
    assert line["drift"] == ["unit", "sglang_version"] and line["verdict"] == "fail"
    drift = {s.labels["what"]: s.value for s in fams["sglang_deploy_drift"]}
    assert drift["unit"] == 1 and drift["sglang_version"] == 1 and drift["env"] == 0
    assert fams["sglang_deploy_revision_info"][0].labels["sglang_version"] == "0.5.23,0.5.24"
    unit.write_text(original)
    meta.write_text(meta.read_text().replace("0.5.24", "0.5.23"))
    line, fams = _run(host_state)
    assert line["drift"] == [] and all(s.value == 0 for s in fams["sglang_deploy_drift"])


def test_a_held_lock_skips_and_keeps_the_last_figures(host_state):
    _run(host_state)
    (host_state["state"] / "deploy.lock").write_text(f"started={int(time.time())}\nexpires={int(time.time()) + 60}\n")
    line, fams = _run(host_state)
    assert line["verdict"] == "skipped" and line["decode_tok_s"] is None and "holds the host's lock" in line["why"]
    assert fams["sglang_deploy_watch_last_skip_timestamp_seconds"][0].value > 0
    assert fams["sglang_deploy_decode_tokens_per_second"][0].value == 99.5  # the last run's, kept
    (host_state["state"] / "deploy.lock").write_text(f"started={int(time.time()) - 100}\n"
                                                     f"expires={int(time.time()) - 50}\n")
    line, _ = _run(host_state)
    assert line["verdict"] != "skipped" and "stale deploy lock" in line["why"]


def test_a_config_the_deploy_did_not_write_is_refused(tmp_path, capsys):
    (tmp_path / "w.json").write_text(json.dumps({"format": "other"}))
    assert hostwatch.main(["--config", str(tmp_path / "w.json")]) == 2
    assert "not a watch config" in capsys.readouterr().err


# -- the weights slice (stage_weights.py --verify-budget-bytes) -------------------------------


def test_the_weights_slice_covers_a_snapshot_over_runs_and_names_a_bad_file(tmp_path):
    """Slices of a budget cover every file once, in name order, then start over; a flipped byte
    is named by the slice that reads it (against the Hub stand-in's snapshot)."""
    from sglang_deploy.simulator.hub.repos import recorded_repos
    from sglang_deploy.simulator.hub.server import HubServer
    from sglang_deploy.simulator.hub.weights import weight_files
    from tests.test_stage_weights import REPO, SIZE, run, snapshot
    from tests.test_stage_weights_verify import NAME, flip, serve, verify_served

    server = HubServer(recorded_repos({REPO: weight_files(REPO, SIZE, shards=2)}, only=[REPO]))
    with server:
        assert run(server, tmp_path).returncode == 0
        files = server.repos[REPO].files
    snap = snapshot(server, tmp_path)
    state = serve(tmp_path, snap)
    flip((snap / NAME).resolve())
    seen, bad, start, slices = [], [], "", 0
    while True:
        got = verify_served(state, "--verify-from", start, "--verify-budget-bytes", str(SIZE // 4))
        slices += 1
        assert got["checked"] and got["files"] == len(got["checked"])
        seen += got["checked"]
        bad += [path for path, _ in got["bad"]]
        start = got["next"]
        if not start:
            break
        assert slices < 50
    assert sorted(seen) == seen == sorted(files) and bad == [NAME]
    again = verify_served(state, "--verify-from", "", "--verify-budget-bytes", str(SIZE // 4))
    assert again["checked"][0] == seen[0]  # started over

    # the watch's own use: the cursor file carries the position and the bad file from run to run
    wdir = tmp_path / "watch"
    wdir.mkdir()
    shutil.copy(Path(hostwatch.__file__).parent / "stage_weights.py", wdir / "stage_weights.py")
    cfg = {"verify_weights_bytes": SIZE // 2, "watch_dir": str(wdir), "state_dir": str(state)}

    def cycle() -> list[bool]:
        """One pass over the snapshot, slice by slice: the drift flag after each."""
        flags = []
        while True:
            notes: list[str] = []
            flags.append(hostwatch.weights_check(cfg, time.monotonic() + 60, notes))
            if not json.loads((wdir / "weights-cursor.json").read_text())["next"]:
                return flags
            assert len(flags) < 50

    flags = cycle()
    assert flags[-1] is True and flags.count(True) >= 1  # found, and still drift at the end of the pass
    assert cycle()[0] is True  # a slice that does not read the bad file keeps it as drift
    flip((snap / NAME).resolve())  # flipped back: the file is good again
    assert cycle()[-1] is False


def test_the_history_is_trimmed_of_old_watch_lines_only(tmp_path, monkeypatch):
    monkeypatch.setattr(hostwatch, "HISTORY_TRIM_BYTES", 4096)
    monkeypatch.setattr(hostwatch, "WATCH_KEEP", 5)
    cfg = {"state_dir": str(tmp_path)}
    lock = str(tmp_path / "deploy.lock")
    gate = [json.dumps({"kind": "gate", "verdict": "pass", "n": i}, separators=(",", ":")) for i in range(3)]
    watch = [json.dumps({"kind": "watch", "verdict": "pass", "n": i, "pad": "x" * 200}, separators=(",", ":"))
             for i in range(40)]
    lines = [gate[0], *watch[:20], gate[1], *watch[20:], gate[2]]
    history = tmp_path / "history.jsonl"
    history.write_text("\n".join(lines) + "\n")
    # a deploy holding the lock: nothing is rewritten (its gate appends to the same file)
    now = int(time.time())
    (tmp_path / "deploy.lock").write_text(f"sglang-deploy deploy lock\nstarted={now}\nexpires={now + 600}\n")
    assert hostwatch.trim_history(cfg, lock) == 0 and history.read_text().splitlines() == lines
    os.unlink(lock)
    assert hostwatch.trim_history(cfg, lock) == 35
    kept = history.read_text().splitlines()
    assert kept == [gate[0], gate[1], *watch[35:], gate[2]]  # every gate, the last 5 watch lines, in order
    assert oct(history.stat().st_mode & 0o777) == "0o600"
    assert hostwatch.trim_history(cfg, lock) == 0  # small now: untouched


def test_the_check_runs_on_a_host_with_its_rules_zip_and_no_package(tmp_path):
    """On the GPU host the check has the standard library and, beside it, its own modules and
    hostrules.zip (what the deploy ships: deploy/watching.py wanted_files); without site-packages
    (``-S``) the package is not importable otherwise, so its run proves it imports its modules from
    its folder and judges by the zip. A config it did not write: exit 2."""
    import shutil
    import subprocess
    import sys

    from sglang_deploy.deploy import gatezip, watching

    for name in watching.SCRIPTS:
        if (watching.HOST_DIR / name).is_file():
            shutil.copy(watching.HOST_DIR / name, tmp_path / name)
    bad = tmp_path / "watch.json"
    bad.write_text("{}")
    alone = subprocess.run([sys.executable, "-I", "-S", str(tmp_path / "watch.py"), "--config", str(bad)],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert "No module named 'sglang_deploy'" in alone.stderr  # the zip is what it needs
    (tmp_path / watching.RULES_ZIP).write_bytes(gatezip.rules_zip())
    run = subprocess.run([sys.executable, "-I", "-S", str(tmp_path / "watch.py"), "--config", str(bad)],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    probe = subprocess.run([sys.executable, "-I", "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                            "from sglang_deploy.hostrules import gpu; print(gpu.FOREIGN_MEMORY_BYTES, gpu.__file__)",
                            str(tmp_path / watching.RULES_ZIP)], capture_output=True, text=True, timeout=60)
    assert probe.stdout.split()[0] == str(536870912) and "hostrules.zip" in probe.stdout, probe.stderr


@pytest.mark.parametrize("odd", [b"0.5.23\xff", b"0.5.23\xed\xa0\x80", "0.5.23\x1b[31m\u2028".encode()],
                         ids=["not-utf8", "surrogate-bytes", "control-chars"])
def test_a_dist_info_name_that_is_not_printable_utf8_reads_as_a_mismatch(host_state, odd):
    """A ``sglang-*.dist-info`` folder whose name is not UTF-8 (or not printable) beside the real one:
    the run still writes its history line and its metrics, the version reads as a mismatch, and
    what it names is printable ASCII."""
    site = os.fsencode(host_state["dist"].parent)
    os.mkdir(os.path.join(site, b"sglang-" + odd + b".dist-info"))
    line, fams = _run(host_state)
    assert "sglang_version" in line["drift"] and line["verdict"] == "fail"
    label = fams["sglang_deploy_revision_info"][0].labels["sglang_version"]
    assert label.isascii() and label.isprintable() and "0.5.23" in label.split(",") and len(label.split(",")) == 2
    state = json.loads((host_state["state"] / "watch" / "last.json").read_text())
    assert state["sglang_version"] == label


HOSTILE_STATE = ('{"service":"sglang-unit-test-none","last_run":' + "9" * 400 + ',"last_skip":"\\ud800",'
                 '"duration_s":-' + "1" * 400 + ',"drift":7,"deployed":"\\ud800' + "x" * 300 + '",'
                 '"running":{"a":[1]},"sglang_version":"0.5\\udc80\\u001b[2J","decode_tok_s":1e999,'
                 '"health":{"gpus":[{"index":' + "9" * 400 + '},{"index":0,"uuid":"GPU-\\ud800\\n",'
                 '"name":"\\u0000","clocks_event_reasons":5,"ecc":{"uncorrected":' + "9" * 400 + '}}]}}')


@pytest.mark.parametrize("held", [True, False], ids=["skipped", "run"])
def test_hostile_state_files_never_stop_the_metrics_or_the_history(host_state, held):
    """The check's own state (``last.json``, which a skip republishes as it is) holding lone
    surrogates, 400-digit numbers, wrong types and control characters: the run writes its history
    line and a textfile Prometheus' parser reads, printable throughout."""
    wdir = host_state["state"] / "watch"
    (wdir / "last.json").write_text(HOSTILE_STATE)
    (wdir / "weights-cursor.json").write_text('{"next":"\\ud800","bad":{"\\ud800":' + "9" * 400 + '}}')
    if held:
        (host_state["state"] / "deploy.lock").write_text(f"started={int(time.time())}\n"
                                                         f"expires={int(time.time()) + 60}\n")
    line, fams = _run(host_state)
    assert line["verdict"] == ("skipped" if held else "fail")
    assert line["revision"] == (None if held else "0123456789abcdef")
    prom = (host_state["text"] / "sglang_deploy_sglang-unit-test-none.prom").read_text()
    assert prom.isascii() and all(c.isprintable() for c in prom.replace("\n", ""))
    assert "sglang_deploy_watch_interval_seconds" in fams


def test_a_fifo_for_the_history_never_blocks_the_run(host_state, capsys):
    """A FIFO where the history is expected (nobody writes to it): the run reads no baseline from it,
    writes its metrics and says in the journal that the history was not written, instead of
    blocking on the FIFO's open until the unit's timeout."""
    import threading

    history = host_state["state"] / "history.jsonl"
    history.unlink()
    os.mkfifo(history)
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(hostwatch.main(["--config", host_state["cfg"]])),
                              daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive() and codes == [0], "the run blocked on the FIFO"
    assert "history not written" in capsys.readouterr().err
    assert (host_state["text"] / "sglang_deploy_sglang-unit-test-none.prom").is_file()
