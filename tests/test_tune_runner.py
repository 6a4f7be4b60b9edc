"""`sglang-deploy tune`: which hosts it may touch, its options, and where it may start
(roles/tuning_run.py; the trials themselves run end to end in tests/e2e/test_tune_e2e.py)."""

from __future__ import annotations

import pytest

from roles.inventory import InventoryHost
from roles.tuning_run import HostState, TuneError, check_start, parse_budget, parse_levels, select_hosts


def _host(name, groups=(), tp=None):
    data = {"sglang_tp_group": tp} if tp else {}
    return InventoryHost(name=name, groups=tuple(groups), group_data={}, host_data=data)


HOSTS = [_host("a6000-1", ["canary"]), _host("a6000-2"), _host("h100-a", tp="big"), _host("h100-b", tp="big")]


def test_one_host_is_tuned_alone():
    assert select_hosts(HOSTS, "a6000-2") == ["a6000-2"]


def test_the_canary_group_names_its_only_member():
    assert select_hosts(HOSTS, "canary") == ["a6000-1"]


def test_a_tp_group_member_alone_is_refused_and_the_group_is_named():
    with pytest.raises(TuneError, match=r"--host h100-b: a member of the multi-node tp group big \(h100-a, h100-b\)"):
        select_hosts(HOSTS, "h100-b")
    assert select_hosts(HOSTS, "big") == ["h100-a", "h100-b"]  # rank order


def test_an_unknown_host_lists_what_there_is():
    with pytest.raises(TuneError, match=r"no such host or tp group.*a6000-1, a6000-2, h100-a, h100-b; tp groups: big"):
        select_hosts(HOSTS, "a6000-9")


@pytest.mark.parametrize("text, want", [("12", (12, None)), ("90s", (None, 90.0)), ("30m", (None, 1800.0)),
                                        ("1.5h", (None, 5400.0))])
def test_budget(text, want):
    assert parse_budget(text) == want


@pytest.mark.parametrize("text", ["0", "ten", "5d", "-3", "m"])
def test_bad_budget(text):
    with pytest.raises(TuneError, match="--budget"):
        parse_budget(text)


def test_levels():
    assert parse_levels("32,1,8,8") == (1, 8, 32)
    for bad in ("", "0", "1,x", "2000"):
        with pytest.raises(TuneError, match="--concurrency"):
            parse_levels(bad)


def _state(current, deployed, planned="r-inv"):
    return HostState("a6000-1", current, deployed, planned, "0.5.23", {})


def test_tuning_starts_only_from_the_inventorys_proven_revision():
    check_start({"a6000-1": _state("r-inv", "r-inv")})
    with pytest.raises(TuneError, match="a6000-1 runs revision r-old, the inventory plans r-inv: deploy the inventory"):
        check_start({"a6000-1": _state("r-old", "r-old")})
    with pytest.raises(TuneError, match="never passed its gate"):
        check_start({"a6000-1": _state("r-inv", None)})
    with pytest.raises(TuneError, match="runs revision none"):
        check_start({"a6000-1": _state(None, None)})
