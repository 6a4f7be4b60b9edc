"""Hostile values in what the user and the hosts hand over: numbers of hundreds of digits, digits
that are not ASCII, files that are not regular files, a gateway that names itself among its
workers. Each is refused with one line naming the field (exit 2 for a command), never a
traceback or a wait."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
from pathlib import Path
from typing import Any, Iterator

import pytest

from sglang_deploy import waves
from sglang_deploy.commands import cli
from sglang_deploy.commands.rollout import RolloutError, RolloutOptions, check_output, rollout
from sglang_deploy.commands.tune import TuneError, parse_budget
from sglang_deploy.gate.errors import GateError
from sglang_deploy.gate.files import append_baseline, check_files, check_writable, read_options
from sglang_deploy.gate.options import CheckOptions, from_file_dict, to_file_dict, validate
from sglang_deploy.gate.watch import local_watch
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.gateway_fleet import inventory_gateways

BIG = int("9" * 400)
HUGE = 10 ** 5000  # past Python's limit on the digits an int turns into text


def short(value: Any) -> str:
    """A test id for a value that may have no text at all (HUGE)."""
    return "huge" if value is HUGE else repr(value)[:20]

# ---------------------------------------------------------------------------
# 1. numbers: bounded before any arithmetic
# ---------------------------------------------------------------------------

NUMBER_KEYS: list[tuple[str, Any]] = [
    ("target_tok_s", BIG), ("tolerance", BIG), ("tolerance", -BIG), ("ready_timeout", BIG),
    ("stall_timeout", BIG), ("prediction_floor", BIG), ("slo", {"ttft_p90": BIG}),
    ("abandon_below", ["decode", BIG]), ("repeats", BIG), ("max_tokens", BIG), ("concurrency", BIG),
    ("concurrency", [1, BIG]), ("target_tok_s", HUGE), ("slo", {"itl_p99": -BIG}),
]


@pytest.mark.parametrize("key, value", NUMBER_KEYS, ids=short)
def test_a_huge_number_in_the_gate_options_file_names_its_key(key, value):
    data = {**to_file_dict(CheckOptions(url="http://gpu-1:30000")), key: value}
    with pytest.raises(GateError, match=rf"^--options: opts\.json: {key}: "):
        from_file_dict(data, "opts.json")


@pytest.mark.parametrize("key, value", [("tolerance", BIG), ("target_tok_s", BIG), ("ready_timeout", BIG),
                                        ("stall_timeout", -BIG), ("prediction_floor", BIG),
                                        ("slo", {"ttft_p90": BIG}), ("abandon_below", ("decode", BIG))], ids=short)
def test_validate_refuses_a_huge_integer_handed_to_it_directly(key, value):
    with pytest.raises(GateError) as info:
        validate(CheckOptions(url="http://gpu-1:30000", **{key: value}))
    assert len(str(info.value)) < 300  # the number is shortened, not spelled out


def test_a_huge_number_in_an_options_file_on_disk_is_one_error(tmp_path):
    path = tmp_path / "opts.json"
    text = json.dumps(to_file_dict(CheckOptions(url="http://gpu-1:30000")))
    path.write_text(text.replace('"ready_timeout": 600.0', '"ready_timeout": ' + "9" * 400))
    with pytest.raises(GateError, match="ready_timeout: .* is too large"):
        read_options(str(path))


def test_numbers_in_range_still_travel():
    opts = CheckOptions(url="http://gpu-1:30000", target_tok_s=10 ** 15, slo={"ttft_p90": 2},
                        abandon_below=("decode", 5))
    back, _ = from_file_dict(to_file_dict(opts), "opts.json")
    assert back.target_tok_s == 1e15 and back.slo == {"ttft_p90": 2.0} and back.abandon_below == ("decode", 5)


@pytest.mark.parametrize("spec", ["9" * 400, "9" * 400 + "%", "9" * 309, BIG, HUGE, "1000001", 10 ** 7, "²", "٣",
                                  "1e400", float("inf")], ids=short)
def test_max_unavailable_and_waves_are_bounded(spec):
    with pytest.raises(waves.WaveError, match="^sglang_rollout.max_unavailable: "):
        waves.parse_max_unavailable(spec)
    with pytest.raises(waves.WaveError, match="^--waves: "):
        waves.parse_sizes([1, spec] if not isinstance(spec, str) else f"1,{spec}")


def test_max_unavailable_in_range_is_kept():
    assert waves.parse_max_unavailable("1000000") == waves.Size(1e6, False)
    assert waves.parse_max_unavailable(" 007 ") == waves.Size(7.0, False)
    assert waves.parse_max_unavailable("12.5%") == waves.Size(12.5, True)


def test_an_inventory_setting_of_thousands_of_digits_names_the_host():
    with pytest.raises(waves.WaveError, match="^a: sglang_rollout.max_unavailable: "):
        waves.agreed_setting({"a": {"max_unavailable": HUGE}}, "max_unavailable", ["max_unavailable"])


BASE = '{"sglang_model": "Qwen/Qwen3.6-27B", "sglang_gpus": {"model": "RTX A6000", "count": 2}}'
GATEWAY_FLEET = ("sglang_gateways = [('gw', {{'sglang_gateway': {{'port': 30000}}}})]\n"
                 "fleet = ([(f'h{{i}}', {{**{base}, 'sglang_gateways': ['gw']}}) for i in range(1, 4)], "
                 "{{'sglang_rollout': {rollout}}})\n")


@pytest.mark.parametrize("flag, setting, named", [
    ("9" * 400, None, "--max-unavailable"),
    (None, "9" * 400, "sglang_rollout.max_unavailable"),
    (None, "'" + "9" * 400 + "%'", "sglang_rollout.max_unavailable"),
    (None, "10 ** 5000", "sglang_rollout.max_unavailable"),
])
def test_rollout_refuses_a_huge_max_unavailable_with_exit_2(tmp_path, flag, setting, named):
    rollout_data = "{}" if setting is None else f"{{'max_unavailable': {setting}}}"
    inv = tmp_path / "inv.py"
    inv.write_text(GATEWAY_FLEET.format(base=BASE, rollout=rollout_data))
    err = io.StringIO()
    code, _ = rollout(RolloutOptions(str(inv), max_unavailable=flag), io.StringIO(), err)
    assert code == 2 and named in err.getvalue() and "Traceback" not in err.getvalue(), err.getvalue()
    assert len(err.getvalue()) < 400


@pytest.mark.parametrize("text", ["²", "٣", "²s", "9" * 400, "9" * 400 + "s", "9" * 400 + ".5h", "10001", "31d",
                                  "745h"])
def test_tune_budget_is_ascii_and_bounded(text):
    with pytest.raises(TuneError, match="^--budget "):
        parse_budget(text)


def test_tune_budget_in_range():
    assert parse_budget("10000") == (10000, None) and parse_budget("720h") == (None, 720 * 3600.0)


@pytest.mark.parametrize("budget", ["²", "9" * 400, "9" * 400 + "m"])
def test_tune_with_a_hostile_budget_is_exit_2_in_one_line(budget):
    inventory = str(Path(__file__).resolve().parent.parent / "inventory")
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["tune", inventory, "--host", "a6000-1", "--budget", budget], out=out, err=err)
    assert code == 2 and err.getvalue().startswith("error: --budget ") and err.getvalue().count("\n") == 1
    assert "Traceback" not in out.getvalue() + err.getvalue()


# ---------------------------------------------------------------------------
# 2. files named by the user or the host: regular files, checked without blocking
# ---------------------------------------------------------------------------

def fifo(tmp_path: Path, name: str = "fifo") -> str:
    path = tmp_path / name
    os.mkfifo(path)
    return str(path)


@contextlib.contextmanager
def no_wait(seconds: int = 10) -> Iterator[None]:
    """Fails the test (instead of hanging it) when the code inside blocks on a FIFO."""
    def blocked(signum: int, frame: Any) -> None:
        raise AssertionError(f"blocked for {seconds} s: the FIFO was opened")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def with_reader(path: str) -> int:
    """A reader held open on a FIFO: a blocking open for writing then returns at once, so code that
    opens the FIFO without checking it goes on (and the test sees it accepted) instead of hanging."""
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK)


def options_file(tmp_path: Path, **refs: Any) -> str:
    path = tmp_path / "opts.json"
    path.write_text(json.dumps({**to_file_dict(CheckOptions(url="http://gpu-1:30000")),
                                "watch_unit": "sglang.service", **refs}))
    return str(path)


@pytest.mark.parametrize("make", ["fifo", "folder", "device"])
def test_an_abort_file_that_is_not_a_regular_file_is_refused_before_the_gate_runs(tmp_path, make):
    target = {"fifo": lambda: fifo(tmp_path), "folder": lambda: str(tmp_path), "device": lambda: "/dev/null"}[make]()
    with pytest.raises(GateError, match=r"^--options: .*opts.json: abort_file: .* not a regular file"):
        read_options(options_file(tmp_path, abort_file=target))
    with pytest.raises(GateError, match="^--abort-file: .* not a regular file"):
        check_files(CheckOptions(url="http://gpu-1:30000", watch=local_watch("sglang.service", target)))


def test_an_abort_file_that_does_not_exist_yet_or_is_a_regular_file_passes(tmp_path):
    read_options(options_file(tmp_path, abort_file=str(tmp_path / "abort")))
    (tmp_path / "abort").write_text("member failed\n")
    _, refs = read_options(options_file(tmp_path, abort_file=str(tmp_path / "abort")))
    check_files(CheckOptions(url="http://gpu-1:30000", watch=local_watch("sglang.service", refs.abort_file)))


def test_an_output_that_is_a_fifo_is_refused_without_opening_it(tmp_path):
    path = fifo(tmp_path)
    with no_wait(), pytest.raises(GateError, match="^--json: .* is a FIFO, not a regular file"):
        check_writable(path, "--json")  # no reader: an open for writing would wait for one
    reader = with_reader(path)
    try:
        with pytest.raises(GateError, match="^--json: .* is a FIFO"):
            check_writable(path, "--json")
        with pytest.raises(RolloutError, match="--json: .* is a FIFO"):
            check_output(path, "--json")
        with pytest.raises(OSError, match="not a regular file"):
            append_baseline(path, {"verdict": "pass"})
        try:  # nothing was written into it: an empty FIFO reads as EOF, or EAGAIN (non-blocking)
            written = os.read(reader, 100)
        except BlockingIOError:
            written = b""
        assert written == b""
    finally:
        os.close(reader)


def test_a_baseline_with_record_that_is_a_fifo_is_refused(tmp_path):
    path = fifo(tmp_path)
    with no_wait(), pytest.raises(GateError, match="^--baseline: .* FIFO"):
        check_files(CheckOptions(url="http://gpu-1:30000", baseline=path, record=True))


def test_regular_outputs_still_work(tmp_path):
    path = tmp_path / "base.jsonl"
    check_writable(str(path), "--baseline")
    append_baseline(str(path), {"verdict": "pass"})
    check_writable(str(path), "--baseline")
    append_baseline(str(path), {"verdict": "fail"})
    assert [json.loads(line)["verdict"] for line in path.read_text().splitlines()] == ["pass", "fail"]


# ---------------------------------------------------------------------------
# 3. a gateway and one of its workers at one address and port
# ---------------------------------------------------------------------------

def fleet(gateway: dict[str, Any], worker: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [("gw", {"ssh_hostname": "10.0.0.1", "sglang_gateway": gateway}),
            ("w1", {"ssh_hostname": "10.0.0.2", "sglang_gateways": ["gw"]}),
            ("w2", {"sglang_gateways": ["gw"], **worker})]


@pytest.mark.parametrize("gateway, worker, what", [
    ({"port": 30000}, {"sglang_worker_url": "http://10.0.0.1:30000"}, "its own URL"),
    ({"port": 30000}, {"sglang_worker_url": "https://10.0.0.1:30000/"}, "its own URL"),  # another scheme, one socket
    ({"port": 80}, {"sglang_worker_url": "http://10.0.0.1"}, "its own URL"),  # the scheme's default port
    ({"port": 30000}, {"ssh_hostname": "10.0.0.1"}, "its own URL"),  # the default URL: the same address and port
    ({"port": 30000}, {"sglang_node_address": "10.0.0.1", "sglang_intents": {"port": 29000}}, "its metrics port"),
    ({"port": 30000, "routers": 2, "router_port": 31000}, {"sglang_worker_url": "http://10.0.0.1:31001"},
     "its router 1's port"),
])
def test_a_worker_at_its_gateways_own_address_is_refused_naming_both(gateway, worker, what):
    with pytest.raises(PlanError) as info:
        inventory_gateways(fleet(gateway, worker))
    assert (info.value.host, info.value.field) == ("w2", "sglang_worker_url")
    assert f"gateway host gw's own address ({what}" in str(info.value), str(info.value)


def test_ipv6_spellings_of_one_address_are_one_address():
    hosts = [("gw", {"sglang_node_address": "fd00::1", "sglang_gateway": {"port": 30000}}),
             ("w", {"sglang_gateways": ["gw"], "sglang_worker_url": "http://[FD00:0:0::1]:30000"})]
    with pytest.raises(PlanError, match="gateway host gw's own address"):
        inventory_gateways(hosts)


def test_a_worker_beside_its_gateway_on_another_port_is_kept():
    found = inventory_gateways(fleet({"port": 30000, "routers": 2, "router_port": 31000},
                                     {"sglang_worker_url": "http://10.0.0.1:31002"}))
    assert found.workers["gw"] == ("http://10.0.0.2:30000", "http://10.0.0.1:31002")
    found = inventory_gateways(fleet({"port": 30000}, {"ssh_hostname": "10.0.0.1", "sglang_intents": {"port": 30001}}))
    assert found.workers["gw"] == ("http://10.0.0.2:30000", "http://10.0.0.1:30001")


def test_plan_refuses_a_gateway_listing_itself_with_exit_2(tmp_path):
    inv = tmp_path / "inv.py"
    inv.write_text("sglang_gateways = [('gw', {'ssh_hostname': '10.0.0.1', 'sglang_gateway': {'port': 30000}})]\n"
                   f"fleet = [('w1', {{**{BASE}, 'sglang_gateways': ['gw'], "
                   "'sglang_worker_url': 'http://10.0.0.1:30000'})]\n")
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["plan", str(inv)], out=out, err=err)
    assert code == 2 and "w1" in err.getvalue() and "gateway host gw's own address" in err.getvalue(), err.getvalue()
    assert "Traceback" not in out.getvalue() + err.getvalue()


def test_a_balanced_gateways_own_urls_are_every_router_admin_url():
    from sglang_deploy.plan.gateway import gateway_own_urls, gateway_settings
    from sglang_deploy.plan.gateway_tier import admin_urls

    data = {"ssh_hostname": "10.0.0.1", "sglang_gateway": {"port": 30000, "routers": 3, "router_port": 31000}}
    settings = gateway_settings("gw", data)
    assert settings is not None and set(admin_urls("gw", data, settings)) <= set(gateway_own_urls("gw", data, settings))


def test_an_abort_file_that_appears_as_a_fifo_fails_the_gate_without_blocking(tmp_path):
    """The abort file is looked at through the whole measurement: one that appears as a FIFO is
    read without blocking (untrusted.read_text_file) and fails the gate, saying what it is."""
    import os

    from sglang_deploy.gate.watch import AbortFileWatch
    path = tmp_path / "abort"
    watch = AbortFileWatch(lambda command: "ActiveState=active\nSubState=running\nNRestarts=0\nMainPID=1\n",
                           "sglang.service", str(path))
    assert watch.failure() is None
    os.mkfifo(path)
    why = watch.failure()
    assert why is not None and "FIFO" in why
    path.unlink()
    path.write_text("rolled back by the operator\nlast lines\n")
    assert watch.failure() == "rolled back by the operator"
