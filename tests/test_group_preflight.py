"""Whether a multi-node tp group can meet (sglang_deploy/lifecycle/group_preflight.py): the interface
names by NCCL's and Gloo's rules, their state and address family, the members' clocks, and the one
line that stops the group."""

from __future__ import annotations

import pytest

from sglang_deploy.lifecycle import group_preflight as gp

# what the glue's command prints on a GPU node: /sys/class/net/*/operstate and `ip -o addr` families
LINES = ["docker0 down inet", "eno1 up inet inet6", "ens1f0np0 up inet inet6", "ens1f1np1 down",
         "ib0 up inet6", "lo unknown inet inet6"]
IFACES = gp.parse_interfaces(LINES)
NAMES = [i.name for i in IFACES]


@pytest.mark.parametrize("spec, expected", [
    ("ens", ["ens1f0np0", "ens1f1np1"]),  # prefixes
    ("eno,ib", ["eno1", "ib0"]),
    ("=ens1f0np0", ["ens1f0np0"]),  # exact
    ("=ens1", []),  # exact: a prefix alone is no name
    ("^docker,lo", ["eno1", "ens1f0np0", "ens1f1np1", "ib0"]),  # excluded
    ("^=lo", ["docker0", "eno1", "ens1f0np0", "ens1f1np1", "ib0"]),
    ("ens1f0np0:5555", ["ens1f0np0"]),  # an entry's port is not part of its name
    ("eth", []),
])
def test_nccl_socket_ifname_as_nccl_matches_it(spec, expected):
    assert gp.nccl_matches(spec, NAMES) == expected


def test_problems_name_the_variable_the_value_and_what_the_member_has():
    assert gp.interface_problems("ens", "eno1", IFACES, "inet") == []
    assert gp.interface_problems(None, None, IFACES, "inet") == []
    got = gp.interface_problems("eth", "eno1,eth0", IFACES)
    assert got[0] == ("NCCL_SOCKET_IFNAME=eth matches none of its interfaces "
                      "(docker0, eno1, ens1f0np0, ens1f1np1, ib0, lo)")
    assert got[1].startswith("GLOO_SOCKET_IFNAME=eno1,eth0: no interface eth0 (")
    assert gp.gloo_matches("eno1,eth0", NAMES) == ["eno1"]


def test_an_interface_that_is_down_or_holds_no_address_of_the_family_is_not_enough():
    assert gp.interface_problems("=ens1f1np1", None, IFACES, "inet") == [
        "NCCL_SOCKET_IFNAME==ens1f1np1 matches ens1f1np1 (down, no address), none up with an IPv4 address"]
    assert gp.interface_problems("ib", "ib0", IFACES, "inet") == [
        "NCCL_SOCKET_IFNAME=ib matches ib0 (up, inet6), none up with an IPv4 address",
        "GLOO_SOCKET_IFNAME=ib0 matches ib0 (up, inet6), none up with an IPv4 address"]
    assert gp.interface_problems("ib", None, IFACES, "inet6") == []
    assert gp.interface_problems("ib", None, IFACES, None) == []  # a host name: resolved by the members
    unread = gp.parse_interfaces(["ib0 up -"])  # no `ip` on the host: the family is not judged
    assert unread[0].families is None and gp.interface_problems("ib", None, unread, "inet") == []


def test_the_hosts_lines_are_data():
    got = gp.parse_interfaces(["$(reboot) up inet", "eth0 up inet bogus", "x", "lo UNKNOWN inet", "a" * 16 + " up",
                               "eth1 up\x1b[2J inet"])
    assert [(i.name, i.state, i.families) for i in got] == [("eth0", "up", frozenset({"inet"})),
                                                            ("lo", "unknown", frozenset({"inet"}))]
    assert len(gp.parse_interfaces(["eth0 up"] * 1000)) == gp.MAX_INTERFACES


def test_address_families_and_clocks():
    assert (gp.family_of("10.0.0.1"), gp.family_of("[fd00::1]"), gp.family_of("node-a")) == ("inet", "inet6", None)
    assert gp.clock_problems({"a": 100.0, "b": 104.0, "c": 85.0}, "a") == {
        "c": "its clock is -15 s off rank 0's (at most 10 s)"}
    assert gp.clock_problems({"b": 1.0}, "a") == {}


def test_the_verdict_is_one_line_naming_every_member_that_cannot_meet():
    assert gp.verdict("g", "10.0.0.1:29500", {"a": [], "b": []}) is None
    line = gp.verdict("g", "10.0.0.1:29500", {"a": [], "b": ["cannot reach rank 0's 10.0.0.1:29500 (timeout)"],
                                              "c": ["x", "y"]})
    assert line == ("tp group g cannot meet at 10.0.0.1:29500: b: cannot reach rank 0's 10.0.0.1:29500 (timeout); "
                    "c: x, y; nothing was stopped or changed on any member")
