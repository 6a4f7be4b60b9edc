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

import pytest

from sglang_deploy.errors import PlanError
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
