"""Sub-waves for the workers of gateways (sglang_deploy/waves.py): max_unavailable, parsed, and
the split of a wave that keeps every gateway's workers out at most that many at once."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_deploy.waves import (WaveError, gateway_allowance, gateway_worker_counts, parse_max_unavailable,
                                 split_for_gateways)


def test_max_unavailable_is_a_count_or_a_percentage_of_a_gateways_workers():
    assert gateway_allowance(parse_max_unavailable(1), 10) == 1
    assert gateway_allowance(parse_max_unavailable("3"), 10) == 3
    assert gateway_allowance(parse_max_unavailable("25%"), 10) == 2  # rounded down
    assert gateway_allowance(parse_max_unavailable("25%"), 3) == 1  # at least one
    assert gateway_allowance(parse_max_unavailable("100%"), 7) == 7


@pytest.mark.parametrize("bad", ["0", "-1", "1.5", "0%", "150%", "x", "", "1,2", [1, 2], True])
def test_bad_max_unavailable_names_the_setting(bad: Any):
    with pytest.raises(WaveError, match="^sglang_rollout.max_unavailable: "):
        parse_max_unavailable(bad)


def test_one_worker_of_a_gateway_at_a_time_by_default():
    hosts = ["a1", "a2", "b1", "free", "a3"]
    member = {"a1": ["gwA"], "a2": ["gwA"], "a3": ["gwA"], "b1": ["gwB"]}
    assert split_for_gateways(hosts, member, parse_max_unavailable(1)) == [
        ("a1", "b1", "free"), ("a2",), ("a3",)]
    assert split_for_gateways(hosts, member, parse_max_unavailable(2)) == [("a1", "a2", "b1", "free"), ("a3",)]


def test_a_percentage_is_of_the_gateways_workers_in_the_whole_fleet():
    fleet = {f"w{i}": ["gw"] for i in range(8)}
    wave = ["w0", "w1", "w2", "w3"]
    # 25% of the gateway's 8 workers = 2, though the wave holds only 4 of them
    assert split_for_gateways(wave, fleet, parse_max_unavailable("25%")) == [("w0", "w1"), ("w2", "w3")]
    # counted from the wave alone it would be 1 at a time
    assert split_for_gateways(wave, {h: fleet[h] for h in wave}, parse_max_unavailable("25%")) == [
        ("w0",), ("w1",), ("w2",), ("w3",)]


def test_a_worker_of_two_gateways_waits_for_room_in_both():
    member = {"x": ["g1"], "y": ["g2"], "both": ["g1", "g2"], "z": ["g2"]}
    assert split_for_gateways(["x", "y", "both", "z"], member, parse_max_unavailable(1)) == [
        ("x", "y"), ("both",), ("z",)]


def test_a_tp_group_stays_whole_and_counts_as_one_worker():
    hosts = ["g-r0", "solo", "g-r1", "other"]
    member = {"g-r0": ["gw"], "g-r1": ["gw"], "solo": ["gw"], "other": ["gw"]}
    units = {"g-r0": "tp", "g-r1": "tp"}
    assert gateway_worker_counts(member, units) == {"gw": 3}
    # 67% of 3 workers = 2: the group (one worker, two hosts) and solo together
    assert split_for_gateways(hosts, member, parse_max_unavailable("67%"), units=units) == [
        ("g-r0", "solo", "g-r1"), ("other",)]
    assert split_for_gateways(hosts, member, parse_max_unavailable(1), units=units) == [
        ("g-r0", "g-r1"), ("solo",), ("other",)]


def test_duplicate_hosts_are_refused():
    with pytest.raises(WaveError, match="listed twice"):
        split_for_gateways(["a", "a"], {}, parse_max_unavailable(1))


# -- properties ---------------------------------------------------------------------------------

GATEWAYS = ["g1", "g2", "g3"]


@st.composite
def fleets(draw: Any) -> tuple[list[str], dict[str, list[str]], dict[str, str], list[str]]:
    """(fleet hosts, memberships, tp units, a wave: some of the hosts in inventory order)."""
    n = draw(st.integers(min_value=0, max_value=14))
    hosts = [f"h{i}" for i in range(n)]
    member = {h: draw(st.lists(st.sampled_from(GATEWAYS), max_size=3, unique=True)) for h in hosts}
    units: dict[str, str] = {}
    for h in hosts:
        group = draw(st.sampled_from([None, None, None, "t1", "t2"]))
        if group is not None:
            units[h] = group
    chosen = draw(st.sets(st.sampled_from(hosts), max_size=n)) if hosts else set()
    # a TP group is in a wave whole or not at all
    chosen |= {h for h in hosts if units.get(h) in {units.get(c) for c in chosen} - {None}}
    return hosts, member, units, [h for h in hosts if h in chosen]


@settings(max_examples=300, deadline=None)
@given(fleets(), st.sampled_from(["1", "2", "3", "10%", "34%", "50%", "100%"]))
def test_every_host_once_order_kept_and_no_gateway_over_its_allowance(fleet: Any, spec: str) -> None:
    hosts, member, units, wave = fleet
    size = parse_max_unavailable(spec)
    counts = gateway_worker_counts(member, units)
    subwaves = split_for_gateways(wave, member, size, units=units, worker_counts=counts)
    flat = [h for w in subwaves for h in w]
    assert sorted(flat) == sorted(wave) and len(flat) == len(wave)  # every host exactly once
    assert all(subwaves)
    index = {h: i for i, w in enumerate(subwaves) for h in w}
    for w in subwaves:
        assert list(w) == [h for h in wave if h in w]  # inventory order inside a sub-wave
        for g in GATEWAYS:
            workers = {units.get(h) or h for h in w if g in _gateways(h, member, units)}
            assert len(workers) <= gateway_allowance(size, counts.get(g, 1)), (g, w)
    for g in GATEWAYS:  # a gateway's workers restart in inventory order (a TP group where its first member stands)
        firsts = [h for i, h in enumerate(wave) if units.get(h) is None or
                  units.get(h) not in {units.get(p) for p in wave[:i]}]
        of_g = [h for h in firsts if g in _gateways(h, member, units)]
        assert [index[h] for h in of_g] == sorted(index[h] for h in of_g)
    for group in set(units.values()):  # a TP group stays in one sub-wave
        assert len({index[h] for h in wave if units.get(h) == group}) <= 1


def _gateways(host: str, member: dict[str, list[str]], units: dict[str, str]) -> set[str]:
    """The gateways of the worker ``host`` belongs to (a TP group's: any member's)."""
    group = units.get(host)
    peers = [h for h in member if group is not None and units.get(h) == group] or [host]
    return {g for h in peers for g in member.get(h, ())}


def test_a_gateways_prefill_and_decode_servers_each_keep_one_serving():
    hosts = ["p1", "p2", "d1", "d2", "d3"]
    member = {h: ["gw"] for h in hosts}
    roles = {"p1": "prefill", "p2": "prefill", "d1": "decode", "d2": "decode", "d3": "decode"}
    # without roles, 2 out at once takes both prefill servers out: no request could be answered
    assert split_for_gateways(hosts, member, parse_max_unavailable(2)) == [("p1", "p2"), ("d1", "d2"), ("d3",)]
    # with them, every step leaves a prefill and a decode server serving
    steps = split_for_gateways(hosts, member, parse_max_unavailable(2), roles=roles)
    assert steps == [("p1",), ("p2", "d1"), ("d2", "d3")]
    for step in steps:
        for role, n in (("prefill", 2), ("decode", 3)):
            assert sum(roles[h] == role for h in step) < n
    # a role of one server has to go out when it restarts (nothing to keep)
    assert split_for_gateways(["p1", "d1"], {"p1": ["gw"], "d1": ["gw"]}, parse_max_unavailable(2),
                              roles={"p1": "prefill", "d1": "decode"}) == [("p1", "d1")]
