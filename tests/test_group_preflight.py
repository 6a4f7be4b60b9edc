"""Whether a multi-node tp group can meet (sglang_deploy/lifecycle/group_preflight.py): the interface
names by NCCL's and Gloo's rules, and the one line that stops the group."""

from __future__ import annotations

import pytest

from sglang_deploy.lifecycle import group_preflight as gp

# /sys/class/net of a two-port GPU node with a container bridge
NAMES = ["lo", "eno1", "ens1f0np0", "ens1f1np1", "docker0", "ib0"]


@pytest.mark.parametrize("spec, expected", [
    ("ens", ["ens1f0np0", "ens1f1np1"]),  # prefixes
    ("eno,ib", ["eno1", "ib0"]),
    ("=ens1f0np0", ["ens1f0np0"]),  # exact
    ("=ens1", []),  # exact: a prefix alone is no name
    ("^docker,lo", ["eno1", "ens1f0np0", "ens1f1np1", "ib0"]),  # excluded
    ("^=lo", ["eno1", "ens1f0np0", "ens1f1np1", "docker0", "ib0"]),
    ("ens1f0np0:5555", ["ens1f0np0"]),  # an entry's port is not part of its name
    ("eth", []),
])
def test_nccl_socket_ifname_as_nccl_matches_it(spec, expected):
    assert gp.nccl_matches(spec, NAMES) == expected


def test_problems_name_the_variable_the_value_and_what_the_member_has():
    assert gp.interface_problems("ens", "eno1", NAMES) == []
    assert gp.interface_problems(None, None, NAMES) == []
    got = gp.interface_problems("eth", "eno1,eth0", NAMES)
    assert got[0] == "NCCL_SOCKET_IFNAME=eth matches none of its interfaces (docker0, eno1, ens1f0np0, ens1f1np1, ib0, lo)"
    assert got[1].startswith("GLOO_SOCKET_IFNAME=eno1,eth0: no interface eth0 (")
    assert gp.gloo_matches("eno1,eth0", NAMES) == ["eno1"]


def test_the_verdict_is_one_line_naming_every_member_that_cannot_meet():
    assert gp.verdict("g", "10.0.0.1:29500", {"a": [], "b": []}) is None
    line = gp.verdict("g", "10.0.0.1:29500", {"a": [], "b": ["cannot reach rank 0's 10.0.0.1:29500 (timeout)"],
                                              "c": ["x", "y"]})
    assert line == ("tp group g cannot meet at 10.0.0.1:29500: b: cannot reach rank 0's 10.0.0.1:29500 (timeout); "
                    "c: x, y; nothing was stopped or changed on any member")
