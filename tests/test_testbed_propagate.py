"""The testbed clears a systemd-nspawn propagate folder left by an earlier run, never one a
running container of that name uses (sglang_deploy/simulator/testbed/container.py)."""

import subprocess
import sys
import time

from sglang_deploy.simulator.testbed import container


def test_a_left_over_folder_is_removed_and_a_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(container, "PROPAGATE_DIR", str(tmp_path))
    (tmp_path / "e2e-left" / "incoming").mkdir(parents=True)
    assert container.clear_stale_propagate("e2e-left") and not (tmp_path / "e2e-left").exists()
    assert not container.clear_stale_propagate("e2e-none")  # nothing there
    (tmp_path / "e2e-live").mkdir()
    # a process that looks like systemd-nspawn for machine e2e-live (argv[0] and --machine)
    proc = subprocess.Popen(["systemd-nspawn", "-c", "import time; time.sleep(60)", "--machine=e2e-live"],
                            executable=sys.executable)
    try:
        deadline = time.monotonic() + 10
        while not container._nspawn_running("e2e-live") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert container._nspawn_running("e2e-live")
        assert not container.clear_stale_propagate("e2e-live") and (tmp_path / "e2e-live").exists()
    finally:
        proc.kill()
        proc.wait()
    assert not container._nspawn_running("e2e-live")
    assert container.clear_stale_propagate("e2e-live")
