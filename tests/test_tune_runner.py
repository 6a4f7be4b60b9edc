"""`sglang-deploy tune`: which hosts it may touch, its options, and where it may start
(sglang_deploy/commands/tune.py; the trials themselves run end to end in tests/e2e/test_tune_e2e.py)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from sglang_deploy.deploy.inventory import InventoryHost
from sglang_deploy.commands import cli
from sglang_deploy.commands.tune import HostState, TuneError, check_start, parse_budget, parse_levels, select_hosts


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


# --- the command line: every bad value is one line and exit 2, before any host is contacted ---

INVENTORY = "inventory/a6000.py"


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        code = cli.main(list(argv), out=out, err=err)
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("args, says", [
    (["--host", "a6000-1", "--slo", "ttft_p90=2"], "error: --slo: "),
    (["--host", "a6000-1", "--slo", "speed_p90=2s"], "error: --slo: "),
    (["--host", "a6000-1", "--objective", "goodput"], "error: --objective goodput: needs --slo"),
    (["--host", "a6000-1", "--space", "no-such-space.yaml"],
     "error: --space no-such-space.yaml: cannot read no-such-space.yaml: No such file"),
    (["--host", "a6000-1", "--budget", "soon"], "error: --budget 'soon'"),
    (["--host", "a6000-1", "--concurrency", "1,x"], "error: --concurrency '1,x'"),
    (["--host", "a6000-1", "--concurrency", "0"], "error: --concurrency 0: 0 is not a whole number from 1 to 1024"),
    (["--host", "a6000-9"], "error: --host a6000-9: no such host or tp group"),
    (["--host", "a6000-1", "--json", "inventory"], "error: --json inventory: is a directory"),
    (["--host", "a6000-1", "--json", INVENTORY], "is the inventory itself"),
])
def test_bad_tune_input_is_one_line_and_exit_2(args, says):
    code, out, err = run_cli("tune", INVENTORY, *args)
    assert code == 2 and says in err and err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in out + err
    assert not Path("inventory/a6000.tuning.yaml").exists()


def test_a_missing_inventory_is_refused_before_anything_runs(tmp_path):
    code, _, err = run_cli("tune", str(tmp_path / "nothing.py"), "--host", "a6000-1")
    assert code == 2 and err.startswith("error: inventory ") and "no such file" in err


def test_keep_record_needs_tune_and_abandon_below_is_checked():
    code, _, err = run_cli("demo", "--keep-record")
    assert code == 2 and err == "error: --keep-record: needs --tune\n"
    for bad, says in (("speed=3", "unknown objective 'speed'"), ("decode=fast", "expected OBJECTIVE=VALUE")):
        code, out, err = run_cli("check", "--url", "http://127.0.0.1:9", "--abandon-below", bad)
        assert code == 2 and f"--abandon-below: {says}" in out + err and "Traceback" not in out + err
