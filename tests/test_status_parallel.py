"""`status --parallel N`: at most N hosts are worked on at once, the option is bounded, and the
open-files limit is raised for a fleet's sockets."""

import subprocess
import sys
import textwrap

import gevent
import pytest

from sglang_deploy.commands.cli import build_parser
from sglang_deploy.deploy.status import StatusReader
from sglang_deploy.status import READ_PARALLEL, READ_PARALLEL_MAX


@pytest.mark.parametrize("value", ["0", "-1", "x", "1.5", str(READ_PARALLEL_MAX + 1)])
def test_parallel_out_of_range_is_refused(value, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["status", "inv.py", "--parallel", value])
    assert exc.value.code == 2
    assert "--parallel" in capsys.readouterr().err


def test_parallel_default_and_value():
    assert build_parser().parse_args(["status", "inv.py"]).parallel == READ_PARALLEL
    assert build_parser().parse_args(["status", "inv.py", "--parallel", "7"]).parallel == 7


@pytest.mark.parametrize("parallel", [1, 3])
def test_no_more_hosts_than_parallel_at_once(tmp_path, parallel):
    inventory = tmp_path / "inv.py"
    inventory.write_text(f"hosts = {[f'h{i}' for i in range(9)]!r}\n")
    reader = StatusReader(str(inventory), parallel=parallel)
    busy, peak = [0], [0]

    def work(host):
        busy[0] += 1
        peak[0] = max(peak[0], busy[0])
        gevent.sleep(0.01)
        busy[0] -= 1
        return host.name

    names = sorted(reader.hosts)
    assert reader._each(names, work) == {n: n for n in names}
    assert peak[0] == parallel


def test_open_files_limit_is_raised_not_lowered():
    code = textwrap.dedent("""
        import resource
        from sglang_deploy.deploy.status import raise_open_files
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        top = hard if hard != resource.RLIM_INFINITY else 1 << 20
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, top), hard))
        print(raise_open_files(min(1000, top)), min(1000, top))
        print(raise_open_files(10), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == out[1]  # raised to what was asked (within the hard limit)
    assert out[2] == out[3] == out[1]  # a smaller request never lowers it
