""".ci/run runs the end-to-end files in lanes of their own (LANE_A to LANE_D, each one pytest
process beside the others), test_demo.py after the README's demo and test_real_sglang.py on its
own: every e2e file runs in exactly one of them, so a new file cannot be left out of CI, and files
that boot a throwaway host of the same name (one systemd-nspawn machine name, one propagate folder
under /run: sglang_deploy/simulator/testbed/container.py) are in one lane, never at once."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CI = (ROOT / ".ci" / "run").read_text()
E2E = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests" / "e2e").glob("test_*.py"))
#: The e2e files .ci/run runs by name outside the lanes.
ALONE = ("tests/e2e/test_demo.py", "tests/e2e/test_real_sglang.py")
#: A throwaway host's name as the e2e files write it.
HOST_NAME = re.compile(r"""["'](?:e2e|demo|tb)-[a-z0-9-]+["']""")


def lanes() -> dict[str, list[str]]:
    out = {}
    for m in re.finditer(r'^(LANE_[A-Z])="([^"]*)"', CI, re.M):
        out[m.group(1)] = shlex.split(m.group(2))
    return out


def test_every_e2e_file_runs_in_exactly_one_lane_or_by_name():
    found = lanes()
    assert sorted(found) == ["LANE_A", "LANE_B", "LANE_C", "LANE_D"]
    placed = [f for files in found.values() for f in files]
    assert len(placed) == len(set(placed)), "a file in two lanes"
    for f in ALONE:
        assert f"pytest -p no:cacheprovider {f}" in CI or f"pytest -s -p no:cacheprovider {f}" in CI, f
    assert sorted(placed + list(ALONE)) == E2E
    for lane in found:
        assert f"${lane} " in CI, f"{lane} is never run"


def test_files_whose_hosts_share_a_name_run_in_one_lane():
    lane_of = {f: lane for lane, files in lanes().items() for f in files}
    names: dict[str, set[str]] = {}
    for f in lane_of:
        for name in HOST_NAME.findall((ROOT / f).read_text()):
            names.setdefault(name.strip("'\""), set()).add(f)
    shared = {name: files for name, files in names.items() if len(files) > 1}
    # the check sees what it is for: the names the files boot (the reference host's data is planned
    # from by name REFERENCE, not booted, by the files of other lanes)
    assert {"e2e-a6000", "e2e-tune", "e2e-gate"} <= set(names)
    for name, files in shared.items():
        assert len({lane_of[f] for f in files}) == 1, f"host {name} is booted in two lanes at once: {sorted(files)}"


def test_the_integration_tiers_second_process_runs_integration_modules_only():
    # .ci/run runs the integration modules of SECOND_HALF in a process of their own and leaves them
    # out of the first (every other module, a new one included, runs there with the unit tier)
    from tests.conftest import INTEGRATION_MODULES

    m = re.search(r'^SECOND_HALF="([^"]*)"', CI, re.M)
    assert m is not None
    second = shlex.split(m.group(1))
    assert second and len(second) == len(set(second))
    for f in second:
        assert (ROOT / f).is_file() and f.removeprefix("tests/") in INTEGRATION_MODULES, f
    assert "-m integration --durations=8 $SECOND_HALF" in CI
    assert "$(printf -- '--ignore=%s ' $SECOND_HALF)" in CI
