"""Writes where they do not belong, as root: the continuous check's textfile directory
(``sglang_watch.textfile_dir``, docs/watch.md).

- the plan refuses a system directory, one above one and the deploy's own state as that directory;
- the deploy makes the directory without following a link and leaves the mode of one that is
  there alone (its command run with ``sh`` against folders under tmp_path);
- the check on the host writes its ``.prom`` file (and the temp file beside it) relative to a
  directory opened without following links: a linked directory or file is refused, and the run
  says it could not write its metrics instead of crashing.
"""

from __future__ import annotations

import json
import os
import stat
import time
import subprocess

import pytest

from sglang_deploy.deploy import watching
from sglang_deploy.deploy.host import watch as hostwatch
from sglang_deploy.deploy.host.watch_io import write_atomic
from sglang_deploy.errors import PlanError
from sglang_deploy.lifecycle.revision import Layout
from sglang_deploy.lifecycle.revision import STATE_ROOT
from sglang_deploy.plan import watch as plan_watch
from sglang_deploy.plan.settings import WATCH_DEFAULTS
from sglang_deploy.plan.spec import build_spec

BASE = {"sglang_model": "Qwen/Qwen3-32B", "sglang_gpus": {"model": "RTX A6000", "count": 2}}
KEY = "sglang_watch.textfile_dir"


def spec(textfile_dir):
    return build_spec("h1", {}, {**BASE, "sglang_watch": {"textfile_dir": textfile_dir}})


# -- the setting ---------------------------------------------------------------------------


REFUSED = ["/", "/tmp", "/var/tmp", "/etc", "/etc/prometheus", "/usr", "/usr/lib", "/usr/local/lib/tf", "/bin",
           "/sbin", "/lib", "/lib64", "/lib32/x", "/libx32", "/boot", "/dev", "/dev/shm", "/proc", "/sys/fs",
           "/run", "/run/tf", "/var/run", "/var/lock", "/root", "/root/tf", "/home", "/var", "/var/lib",
           "/var/log", "/opt", "/srv", STATE_ROOT, f"{STATE_ROOT}/sglang", f"{STATE_ROOT}/sglang/watch",
           "//etc", "/etc/", "/var//lib", "/usr//lib/", "//"]


@pytest.mark.parametrize("value", REFUSED)
def test_a_system_directory_or_the_state_is_refused_naming_the_host_and_the_key(value):
    with pytest.raises(PlanError) as err:
        spec(value)
    assert "h1" in str(err.value) and KEY in str(err.value)
    assert "must not be" in str(err.value)


@pytest.mark.parametrize("value", [WATCH_DEFAULTS["textfile_dir"], "/var/lib/prometheus/node-exporter",
                                   "/var/lib/node_exporter/textfile_collector", "/srv/prometheus/textfile",
                                   "/opt/node_exporter/textfile", "/home/prometheus/textfile",
                                   "/var/lib/sglang-deploy2", "/library/tf", "/tmp/textfile"])
def test_a_directory_of_its_own_is_kept(value):
    watch = spec(value).watch
    assert watch is not None and watch.textfile_dir == value


def test_the_default_is_debians_and_is_allowed():
    assert WATCH_DEFAULTS["textfile_dir"] == "/var/lib/prometheus/node-exporter"
    watch = build_spec("h1", {}, {**BASE, "sglang_watch": True}).watch
    assert watch is not None and watch.textfile_dir == "/var/lib/prometheus/node-exporter"


def test_repeated_slashes_are_folded():
    watch = spec("/srv//prometheus///textfile/").watch
    assert watch is not None and watch.textfile_dir == "/srv/prometheus/textfile"


def test_the_plans_state_root_is_the_deploys():
    assert plan_watch.STATE_ROOT == STATE_ROOT


# -- the deploy makes the directory ------------------------------------------------------------


LAYOUT = Layout(service="sglang-hostile", unit_path="/etc/systemd/system/sglang-hostile.service",
                env_path="/etc/sglang/sglang-hostile.env", nccl_conf_path="/etc/sglang/sglang-hostile-nccl.conf")


def textfile_command(textfile_dir: str) -> str:
    """The deploy's command that makes ``textfile_dir`` (install_watch, as pyinfra would run it)."""
    commands = [c for c in watching.install_watch._inner(layout=LAYOUT, files={}, have={}, textfile_dir=textfile_dir)
                if isinstance(c, str)]
    mine = [c for c in commands if textfile_dir in c and LAYOUT.state_dir not in c]
    assert len(mine) == 1, commands
    return mine[0]


def sh(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)


def test_a_linked_textfile_directory_is_refused_and_its_target_keeps_its_mode(tmp_path):
    shared = tmp_path / "shared"  # like /tmp: world-writable and sticky
    shared.mkdir()
    shared.chmod(0o1777)
    (tmp_path / "tf").symlink_to(shared)
    result = sh(textfile_command(str(tmp_path / "tf")))
    assert result.returncode != 0
    assert "symbolic link" in result.stderr and str(tmp_path / "tf") in result.stderr
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777


def test_a_linked_part_of_the_path_is_refused_and_nothing_is_made_through_it(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "prom").symlink_to(elsewhere)
    result = sh(textfile_command(str(tmp_path / "prom" / "node-exporter")))
    assert result.returncode != 0 and "symbolic link" in result.stderr
    assert list(elsewhere.iterdir()) == []


def test_a_missing_directory_is_made_0755_with_its_parents(tmp_path):
    target = tmp_path / "prometheus" / "node-exporter"
    result = sh(textfile_command(str(target)))
    assert result.returncode == 0, result.stderr
    assert target.is_dir() and not target.is_symlink()
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o755


@pytest.mark.parametrize("mode", [0o1777, 0o750, 0o2775])
def test_a_directory_already_there_keeps_its_mode(tmp_path, mode):
    target = tmp_path / "tf"
    target.mkdir()
    target.chmod(mode)
    result = sh(textfile_command(str(target)))
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(target.stat().st_mode) == mode
    assert sh(textfile_command(str(target))).returncode == 0  # again: nothing to do


def test_a_file_in_its_place_is_refused(tmp_path):
    (tmp_path / "tf").write_text("not a directory")
    result = sh(textfile_command(str(tmp_path / "tf")))
    assert result.returncode != 0 and "not a directory" in result.stderr


def _remove_command(wdir) -> str:
    commands = [c for c in watching.remove_watch._inner(layout=LAYOUT, have={"x": "y"}) if isinstance(c, str)]
    mine = [c for c in commands if "watch.json" in c]
    assert len(mine) == 1, commands
    return mine[0].replace(f"{LAYOUT.state_dir}/watch", str(wdir))


@pytest.mark.parametrize("linked", [False, True])
def test_taking_the_watch_away_removes_the_textfile_only_where_no_part_is_a_link(tmp_path, linked):
    real = tmp_path / "real"
    real.mkdir()
    prom = real / f"sglang_deploy_{LAYOUT.service}.prom"
    prom.write_text("# metrics\n")
    textfile_dir = tmp_path / "tf"
    if linked:
        textfile_dir.symlink_to(real)
    wdir = tmp_path / "watch"
    wdir.mkdir()
    (wdir / "watch.json").write_text(json.dumps({"textfile_dir": str(textfile_dir if linked else real)}, indent=1))
    assert sh(_remove_command(wdir)).returncode == 0
    assert prom.exists() is linked


# -- the check on the host writes its metrics ---------------------------------------------------


def test_a_write_into_a_linked_directory_is_refused(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "tf").symlink_to(target)
    with pytest.raises(OSError, match="symbolic link"):
        write_atomic(str(tmp_path / "tf" / "x.prom"), b"x 1\n")
    assert list(target.iterdir()) == []


def test_a_write_through_a_linked_part_of_the_path_is_refused(tmp_path):
    target = tmp_path / "target"
    (target / "node-exporter").mkdir(parents=True)
    (tmp_path / "prom").symlink_to(target)
    with pytest.raises(OSError, match="symbolic link"):
        write_atomic(str(tmp_path / "prom" / "node-exporter" / "x.prom"), b"x 1\n", create_dir=True)
    assert list((target / "node-exporter").iterdir()) == []


@pytest.mark.parametrize("kind", ["link", "dangling link", "directory"])
def test_a_linked_or_odd_file_in_its_place_is_refused_not_replaced(tmp_path, kind):
    outside = tmp_path / "outside"
    outside.write_text("root's file\n")
    directory = tmp_path / "tf"
    directory.mkdir()
    place = directory / "x.prom"
    if kind == "link":
        place.symlink_to(outside)
    elif kind == "dangling link":
        place.symlink_to(tmp_path / "nowhere")
    else:
        place.mkdir()
    with pytest.raises(OSError, match="not replaced"):
        write_atomic(str(place), b"x 1\n")
    assert outside.read_text() == "root's file\n" and not (tmp_path / "nowhere").exists()
    assert sorted(p.name for p in directory.iterdir()) == ["x.prom"]  # no temp file left behind
    assert place.is_symlink() is (kind != "directory")


def test_a_plain_write_replaces_the_file_whole_with_its_mode(tmp_path):
    directory = tmp_path / "a" / "b"
    write_atomic(str(directory / "x.prom"), b"x 1\n", 0o644, create_dir=True)
    write_atomic(str(directory / "x.prom"), b"x 2\n", 0o644)
    assert (directory / "x.prom").read_bytes() == b"x 2\n"
    assert stat.S_IMODE((directory / "x.prom").stat().st_mode) == 0o644
    assert stat.S_IMODE(directory.stat().st_mode) == 0o755 and stat.S_IMODE(directory.parent.stat().st_mode) == 0o755
    assert os.listdir(directory) == ["x.prom"]


def _cfg(tmp_path, textfile_dir) -> dict:
    state = tmp_path / "state"
    (state / "watch").mkdir(parents=True, exist_ok=True)
    return {"service": "sglang-hostile", "state_dir": str(state), "watch_dir": str(state / "watch"),
            "textfile_dir": str(textfile_dir), "interval_s": 900, "timeout_s": 120}


def test_publishing_into_a_linked_textfile_directory_says_so_and_writes_nothing_there(tmp_path, capsys):
    target = tmp_path / "etc"
    target.mkdir()
    (tmp_path / "tf").symlink_to(target)
    cfg = _cfg(tmp_path, tmp_path / "tf")
    unwritten = hostwatch.publish(cfg, {"service": "sglang-hostile", "interval_s": 900, "last_run": 1.7e9})
    assert unwritten is not None and "metrics not written" in unwritten and "symbolic link" in unwritten
    assert list(target.iterdir()) == []
    assert (tmp_path / "state" / "watch" / "last.json").is_file()  # its own state is still kept
    assert "metrics not written" in capsys.readouterr().err


def test_publishing_makes_a_missing_textfile_directory_readable(tmp_path):
    cfg = _cfg(tmp_path, tmp_path / "prometheus" / "node-exporter")
    assert hostwatch.publish(cfg, {"service": "sglang-hostile", "interval_s": 900}) is None
    prom = tmp_path / "prometheus" / "node-exporter" / "sglang_deploy_sglang-hostile.prom"
    assert stat.S_IMODE(prom.stat().st_mode) == 0o644
    assert stat.S_IMODE(prom.parent.stat().st_mode) == 0o755


def test_a_run_that_cannot_write_its_metrics_records_it_and_does_not_crash(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "tf").symlink_to(target)
    cfg = _cfg(tmp_path, tmp_path / "tf")
    now = int(time.time())
    (tmp_path / "state" / "deploy.lock").write_text(f"started={now}\nexpires={now + 600}\n")  # a skipped run
    line, _ = hostwatch.check(cfg)
    entry = json.loads(line)
    assert entry["verdict"] == "skipped"
    assert "a deploy holds the host's lock" in entry["why"] and "metrics not written" in entry["why"]
    assert list(target.iterdir()) == []
