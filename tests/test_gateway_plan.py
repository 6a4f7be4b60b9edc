"""The SGLang Model Gateway's plan (sglang_deploy/plan/gateway.py): its settings and a worker's,
each wrong value named by host and field; the router's argv read back by sglang-router's own
parser; the unit through ``systemd-analyze verify``; the env file; and the launcher
(sglang_deploy/deploy/host/gateway_launch.py) run for real with the real router: the key is in
neither its command line nor its log, and the router's admin API refuses a request without it.

The real-router tests need sglang-router 0.3.2 importable by this Python, or a virtualenv with
it named by SGLANG_ROUTER_VENV; without either they are skipped.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from sglang_deploy.deploy.host import gateway_launch
from sglang_deploy.errors import PlanError
from sglang_deploy.plan import gateway
from sglang_deploy.plan.gateway import (API_KEY_ENV, ROUTER_FLAGS, ROUTER_POLICIES, DrainSettings, GatewaySettings,
                                        WorkerMembership, gateway_settings, gateway_workers, worker_membership)
from sglang_deploy.plan.pd_gateway import ROLE_POLICIES
from sglang_deploy.plan.gateway_render import render_gateway, render_gateway_env, render_gateway_unit, router_argv
from sglang_deploy.plan.settings import GATEWAY_DEFAULTS, GATEWAY_SETTINGS, markdown_table
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = ROOT / "sglang_deploy" / "deploy" / "host" / "gateway_launch.py"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
GATEWAYS = {"gw1": GatewaySettings(), "gw2": GatewaySettings()}


def gw(value: Any) -> GatewaySettings | None:
    return gateway_settings("gw1", {"sglang_gateway": value})


def member(data: dict[str, Any], host: str = "w1", port: int = 30000, address: str | None = None,
           gateways: dict[str, Any] | None = None) -> WorkerMembership | None:
    return worker_membership(host, data, port, address, GATEWAYS if gateways is None else gateways)


def router_python() -> str:
    """A Python that imports sglang-router 0.3.2, or skip."""
    if importlib.util.find_spec("sglang_router") is not None:
        python = sys.executable
    else:
        venv = os.environ.get("SGLANG_ROUTER_VENV")
        python = str(Path(venv) / "bin" / "python") if venv else ""
        if not python or not Path(python).is_file():
            pytest.skip("sglang-router not importable here and SGLANG_ROUTER_VENV names no virtualenv with it")
    version = subprocess.run([python, "-c", "from importlib.metadata import version; print(version('sglang-router'))"],
                             capture_output=True, text=True, timeout=60).stdout.strip()
    if version not in gateway.SUPPORTED_ROUTER_VERSIONS:
        pytest.skip(f"sglang-router {version or '?'} found; these tests read {gateway.SUPPORTED_ROUTER_VERSIONS}")
    return python


def in_router(python: str, code: str) -> Any:
    """Run ``code`` (which prints one JSON document) with the router's Python."""
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- sglang_gateway ------------------------------------------------------------------------------


def test_no_gateway_by_default_and_true_means_the_defaults():
    assert gw(None) is None and gw(False) is None and gateway_settings("gw1", {}) is None
    s = gw(True)
    assert s == GatewaySettings() and s.api_key is None
    assert [f.name for f in dataclasses.fields(GatewaySettings)] == [
        "version", "port", "metrics_port", "host", "policy", "request_timeout_s", "retries", "health_interval_s",
        "api_key", "service_name", "venvs_dir", "routers", "router_port", "balancer_check_interval_s", "prefill_policy",
        "decode_policy"]
    assert (s.version, s.port, s.metrics_port, s.host, s.policy, s.request_timeout_s, s.retries,
            s.health_interval_s) == ("0.3.2", 30000, 29000, "0.0.0.0", "cache_aware", 1800, 5, 60)
    assert (s.python, s.launcher_path, s.env_path, s.unit_path) == (
        "/opt/sglang-gateway/sglang-router-0.3.2/bin/python",
        "/opt/sglang-gateway/sglang-router-0.3.2/gateway_launch.py",
        "/etc/sglang-gateway/sglang-gateway.env", "/etc/systemd/system/sglang-gateway.service")


def test_settings_are_read_and_spans_converted():
    s = gw({"version": " v0.3.2 ", "port": 8000, "metrics_port": 9100, "host": "[::]", "policy": "round_robin",
            "request_timeout": "10m", "retries": 0, "health_interval": "15s", "api_key": {"file": "/k/gw"},
            "service_name": "llm-gateway", "venvs_dir": "/srv/gw/"})
    assert s is not None
    assert (s.version, s.port, s.metrics_port, s.host, s.policy, s.request_timeout_s, s.retries,
            s.health_interval_s, s.service_name, s.venvs_dir) == (
        "0.3.2", 8000, 9100, "::", "round_robin", 600, 0, 15, "llm-gateway", "/srv/gw")
    assert s.api_key is not None
    assert (s.api_key.kind, s.api_key.ref, s.api_key.env_var) == ("file", "/k/gw", API_KEY_ENV)
    assert s.api_key.inventory_field == "sglang_gateway.api_key"


@pytest.mark.parametrize("value,field,words", [
    ("yes", "sglang_gateway", "must be true or a mapping"),
    (1, "sglang_gateway", "must be true or a mapping"),
    ({"nope": 1}, "sglang_gateway.nope", "unknown setting; known: version, port"),
    ({"version": "0.2.1"}, "sglang_gateway.version", "sglang-router 0.2.1 is not supported; supported: 0.3.2"),
    ({"version": "latest"}, "sglang_gateway.version", "not an SGLang release number"),
    ({"port": 0}, "sglang_gateway.port", "1..65535"), ({"port": 70000}, "sglang_gateway.port", "1..65535"),
    ({"port": "80"}, "sglang_gateway.port", "1..65535"), ({"port": True}, "sglang_gateway.port", "1..65535"),
    ({"metrics_port": 30000}, "sglang_gateway.metrics_port", "the gateway's own port"),
    ({"host": "a b"}, "sglang_gateway.host", "not a host name or IP address"),
    ({"host": ""}, "sglang_gateway.host", "must be a host name"),
    ({"host": "fe80::1%eth0"}, "sglang_gateway.host", "IPv6 zone"),
    ({"policy": "least_load"}, "sglang_gateway.policy", "random, round_robin, cache_aware, power_of_two, manual"),
    ({"request_timeout": "0s"}, "sglang_gateway.request_timeout", "between 1 s and 86400 s"),
    ({"request_timeout": "2d"}, "sglang_gateway.request_timeout", "between 1 s and 86400 s"),
    ({"request_timeout": "30"}, "sglang_gateway.request_timeout", "time span"),
    ({"retries": -1}, "sglang_gateway.retries", "between 0 and 20"),
    ({"retries": 21}, "sglang_gateway.retries", "between 0 and 20"),
    ({"retries": True}, "sglang_gateway.retries", "whole number"),
    ({"health_interval": "2h"}, "sglang_gateway.health_interval", "between 1 s and 3600 s"),
    ({"service_name": "gw@1"}, "sglang_gateway.service_name", "template"),
    ({"service_name": "gw.service"}, "sglang_gateway.service_name", "without its unit suffix"),
    ({"venvs_dir": "opt/gw"}, "sglang_gateway.venvs_dir", "absolute path"),
    ({"venvs_dir": "/opt/../etc"}, "sglang_gateway.venvs_dir", "absolute path"),
])
def test_bad_gateway_values_name_the_host_and_the_field(value, field, words):
    with pytest.raises(PlanError) as err:
        gw(value)
    assert (err.value.host, err.value.field) == ("gw1", field), str(err.value)
    assert str(err.value).startswith(f"host gw1: {field}: ") and words in str(err.value), str(err.value)


@pytest.mark.parametrize("value,field", [
    ("sk-LITERAL-KEY", "sglang_gateway.api_key"),
    ({"env": "sk-LITERAL-KEY"}, "sglang_gateway.api_key.env"),
    ({"value": "sk-LITERAL-KEY"}, "sglang_gateway.api_key"),
    ({"env": "A", "file": "/sk-LITERAL-KEY"}, "sglang_gateway.api_key"),
    ({"file": ""}, "sglang_gateway.api_key.file"),
    ({"file": "/k\nsk-LITERAL-KEY"}, "sglang_gateway.api_key.file"),
])
def test_a_bad_api_key_reference_is_named_but_never_echoed(value, field):
    with pytest.raises(PlanError) as err:
        gw({"api_key": value})
    assert (err.value.host, err.value.field) == ("gw1", field)
    assert "LITERAL" not in str(err.value)


def test_the_settings_table_feeds_the_defaults_and_the_docs():
    assert GatewaySettings().port == GATEWAY_DEFAULTS["port"] and GatewaySettings().policy == GATEWAY_DEFAULTS["policy"]
    table = markdown_table()
    assert "Keys of `sglang_gateway`" in table and "Keys of `sglang_drain`" in table
    for s in GATEWAY_SETTINGS:
        assert f"| `{s.name}` | {s.type} |" in table
    docs = (ROOT / "docs" / "settings.md").read_text()
    assert markdown_table() in docs


# -- a worker: sglang_gateways, sglang_worker_url, sglang_drain -----------------------------------


def test_a_host_without_gateways_is_no_worker():
    assert member({}) is None and member({"sglang_gateways": []}) is None


def test_the_worker_url_defaults_to_the_node_address_then_ssh_hostname_then_the_name():
    data = {"sglang_gateways": ["gw2", "gw1"]}
    m = member(data)
    assert m is not None and m.gateways == ("gw2", "gw1") and m.url == "http://w1:30000"
    assert m.drain == DrainSettings(timeout_s=300, admit_timeout_s=120, skip=False)
    assert member({**data, "ssh_hostname": "10.0.0.7"}, port=31000).url == "http://10.0.0.7:31000"
    assert member({**data, "ssh_hostname": "x", "sglang_node_address": "fd00::7"}).url == "http://[fd00::7]:30000"
    assert member(data, address="[fd00::9]").url == "http://[fd00::9]:30000"  # the caller's (a tp group's rank 0)
    assert member({**data, "sglang_worker_url": "https://w1.lan:8443/"}).url == "https://w1.lan:8443"


def test_drain_settings():
    data = {"sglang_gateways": ["gw1"]}
    assert member({**data, "sglang_drain": "skip"}).drain.skip
    d = member({**data, "sglang_drain": {"timeout": "0s", "admit_timeout": "30s"}}).drain
    assert (d.timeout_s, d.admit_timeout_s, d.skip) == (0, 30, False)


@pytest.mark.parametrize("data,field,words", [
    ({"sglang_gateways": "gw1"}, "sglang_gateways", "a list: [gw1]"),
    ({"sglang_gateways": {"gw1": 1}}, "sglang_gateways", "must be a list"),
    ({"sglang_gateways": ["gwX"]}, "sglang_gateways[0]",
     "gwX is not a gateway host of this inventory (a host with sglang_gateway); gateway hosts: gw1, gw2"),
    ({"sglang_gateways": ["gw1", 3]}, "sglang_gateways[1]", "must be an inventory host name"),
    ({"sglang_gateways": ["gw1", "gw1"]}, "sglang_gateways[1]", "listed twice"),
    ({"sglang_gateways": ["w1"]}, "sglang_gateways[0]", "names this host itself"),
    ({"sglang_gateways": [f"g{i}" for i in range(65)]}, "sglang_gateways", "at most 64"),
    ({"sglang_worker_url": "http://w1:1"}, "sglang_worker_url", "set sglang_gateways"),
    ({"sglang_drain": "skip"}, "sglang_drain", "set sglang_gateways"),
    ({"sglang_gateways": ["gw1"], "sglang_worker_url": "w1:30000"}, "sglang_worker_url", "scheme://host[:port]"),
    ({"sglang_gateways": ["gw1"], "sglang_worker_url": "ftp://w1"}, "sglang_worker_url", "scheme://host[:port]"),
    ({"sglang_gateways": ["gw1"], "sglang_worker_url": "http://w1:1/v1"}, "sglang_worker_url", "no path"),
    ({"sglang_gateways": ["gw1"], "sglang_worker_url": "http://u:p@w1:1"}, "sglang_worker_url", "user info"),
    ({"sglang_gateways": ["gw1"], "sglang_worker_url": "http://w1:99999"}, "sglang_worker_url", "not 1..65535"),
    ({"sglang_gateways": ["gw1"], "sglang_worker_url": "http://[zz::1]:1"}, "sglang_worker_url", "IPv6"),
    ({"sglang_gateways": ["gw1"], "sglang_worker_url": 30000}, "sglang_worker_url", "http(s) URL"),
    ({"sglang_gateways": ["gw1"], "sglang_node_address": "a b"}, "sglang_node_address", "not a host name"),
    ({"sglang_gateways": ["gw1"], "sglang_drain": "off"}, "sglang_drain", "must be skip or a mapping"),
    ({"sglang_gateways": ["gw1"], "sglang_drain": {"timeout": "25h"}}, "sglang_drain.timeout", "86400 s"),
    ({"sglang_gateways": ["gw1"], "sglang_drain": {"admit_timeout": "0s"}}, "sglang_drain.admit_timeout", "1 s"),
    ({"sglang_gateways": ["gw1"], "sglang_drain": {"wait": "1m"}}, "sglang_drain.wait",
     "unknown setting; known: timeout, admit_timeout"),
])
def test_bad_worker_values_name_the_host_and_the_field(data, field, words):
    with pytest.raises(PlanError) as err:
        member(data)
    assert (err.value.host, err.value.field) == ("w1", field), str(err.value)
    assert words in str(err.value), str(err.value)


def test_a_host_name_that_is_no_address_asks_for_the_url():
    with pytest.raises(PlanError) as err:
        member({"sglang_gateways": ["gw1"]}, host="gpu_1")
    assert err.value.field == "sglang_worker_url" and "set sglang_worker_url or sglang_node_address" in str(err.value)
    assert member({"sglang_gateways": ["gw1"], "ssh_hostname": "gpu-1.lan"}, host="gpu_1").url == "http://gpu-1.lan:30000"


def test_an_inventory_without_gateway_hosts_says_so():
    with pytest.raises(PlanError, match=r"gateway hosts: none \(no host of this inventory sets sglang_gateway\)"):
        member({"sglang_gateways": ["gw1"]}, gateways={})


def test_a_gateway_host_is_not_a_worker():
    with pytest.raises(PlanError) as err:
        member({"sglang_gateways": ["gw2"]}, host="gw1")
    assert (err.value.host, err.value.field) == ("gw1", "sglang_gateways") and "runs a gateway itself" in str(err.value)


def test_gateway_workers_in_order_a_tp_group_once_and_no_shared_url():
    ms = [WorkerMembership("a", ("gw1",), "http://a:30000"),
          WorkerMembership("g0", ("gw1", "gw2"), "http://g0:30000"),
          WorkerMembership("g1", ("gw1", "gw2"), "http://g0:30000"),  # rank 1 of the same tp group: one worker
          WorkerMembership("b", ("gw2",), "http://b:30000")]
    assert gateway_workers(ms, units={"g0": "tp", "g1": "tp"}) == {
        "gw1": ("http://a:30000", "http://g0:30000"), "gw2": ("http://g0:30000", "http://b:30000")}
    with pytest.raises(PlanError) as err:
        gateway_workers([*ms[:2], WorkerMembership("c", ("gw1",), "http://a:30000")], units={})
    assert (err.value.host, err.value.field) == ("c", "sglang_worker_url") and "also a's worker URL" in str(err.value)


# -- the router's argv ---------------------------------------------------------------------------


def test_router_argv_has_no_key_and_its_worker_urls_come_last():
    s = gw({"api_key": {"env": "GW_KEY"}, "host": "10.1.2.3", "health_interval": "30s"})
    argv = router_argv(s, ["http://a:30000", "http://[fd00::1]:30000"])
    assert argv == ["--host", "10.1.2.3", "--port", "30000", "--policy", "cache_aware", "--prometheus-port", "29000",
                    "--prometheus-host", "10.1.2.3", "--request-timeout-secs", "1800", "--retry-max-retries", "5",
                    "--health-check-interval-secs", "30", "--worker-urls", "http://a:30000", "http://[fd00::1]:30000"]
    assert not any("api" in w for w in argv)
    assert router_argv(s, [])[-1] == "--worker-urls"
    with pytest.raises(ValueError, match="not a worker URL"):
        router_argv(s, ["http://a b"])


def test_router_argv_reads_back_through_the_routers_own_parser():
    python = router_python()
    s = gw({"host": "127.0.0.1", "port": 8001, "metrics_port": 9001, "policy": "power_of_two",
            "request_timeout": "5m", "retries": 2, "health_interval": "10s"})
    urls = ["http://10.0.0.1:30000", "http://[fd00::2]:30001"]
    code = ("import json, sys; from sglang_router.launch_router import parse_router_args; "
            f"a = parse_router_args({router_argv(s, urls)!r}); "
            "print(json.dumps({k: getattr(a, k) for k in ('host', 'port', 'policy', 'prometheus_port', "
            "'prometheus_host', 'request_timeout_secs', 'retry_max_retries', 'health_check_interval_secs', "
            "'worker_urls', 'api_key')}))")
    assert in_router(python, code) == {
        "host": "127.0.0.1", "port": 8001, "policy": "power_of_two", "prometheus_port": 9001,
        "prometheus_host": "127.0.0.1", "request_timeout_secs": 300, "retry_max_retries": 2,
        "health_check_interval_secs": 10, "worker_urls": urls, "api_key": None}


def test_the_defaults_policies_and_flags_are_the_routers():
    """The settings table's defaults are sglang-router 0.3.2's own, the policies its --policy
    choices, and every flag router_argv writes is an option of its parser."""
    python = router_python()
    code = ("import argparse, json; from sglang_router.router_args import RouterArgs; "
            "from sglang_router.launch_router import parse_router_args; "
            "p = argparse.ArgumentParser(); RouterArgs.add_cli_args(p, use_router_prefix=False); "
            "a = parse_router_args([]); "
            "print(json.dumps({'options': sorted(o for act in p._actions for o in act.option_strings), "
            "'policies': next(act.choices for act in p._actions if '--policy' in act.option_strings), "
            "'roles': {r: next(act.choices for act in p._actions if f'--{r}-policy' in act.option_strings) "
            "for r in ('prefill', 'decode')}, "
            "'defaults': [a.host, a.port, a.prometheus_port, a.policy, a.request_timeout_secs, a.retry_max_retries, "
            "a.health_check_interval_secs]}))")
    seen = in_router(python, code)
    assert set(ROUTER_FLAGS["0.3.2"]) <= set(seen["options"])
    assert "--api-key" in seen["options"]  # the flag the launcher fills in-process
    assert tuple(seen["policies"]) == ROUTER_POLICIES
    assert {r: tuple(c) for r, c in seen["roles"].items()} == dict(ROLE_POLICIES)
    s = GatewaySettings()
    assert seen["defaults"] == [s.host, s.port, s.metrics_port, s.policy, s.request_timeout_s, s.retries,
                                s.health_interval_s]


# -- the unit and the env file ---------------------------------------------------------------------


def test_the_unit_restarts_always_hides_the_key_and_drops_privileges():
    s = gw({"api_key": {"env": "GW_KEY"}})
    files = render_gateway("gw1", s, ["http://a:30000"], {API_KEY_ENV: "sk-UNIT-TEST"})
    lines = files.unit.splitlines()
    for line in ("Restart=always", "After=network-online.target", "Wants=network-online.target",
                 "EnvironmentFile=/etc/sglang-gateway/sglang-gateway.env", "DynamicUser=yes", "NoNewPrivileges=yes",
                 "ProtectSystem=strict", "CapabilityBoundingSet=", "UMask=0077", "TimeoutStopSec=210",
                 "WantedBy=multi-user.target"):
        assert line in lines, line
    assert ("ExecStart=/opt/sglang-gateway/sglang-router-0.3.2/bin/python -I "
            "/opt/sglang-gateway/sglang-router-0.3.2/gateway_launch.py \\") in lines
    assert "sk-UNIT-TEST" not in files.unit and "--api-key" not in files.unit
    assert "SGLANG_GATEWAY_API_KEY=sk-UNIT-TEST" in files.env.splitlines()
    # a low port gets the one capability that binds it
    low = render_gateway_unit("gw1", gw({"port": 80}), [])
    assert "AmbientCapabilities=CAP_NET_BIND_SERVICE" in low.splitlines()


def test_the_env_file_redacts_without_values_and_refuses_a_broken_key():
    s = gw({"api_key": {"env": "GW_KEY"}})
    assert "SGLANG_GATEWAY_API_KEY='<redacted>'" in render_gateway_env("gw1", s).splitlines()
    assert "SGLANG_GATEWAY_API_KEY" not in render_gateway_env("gw1", gw(True)).replace(
        "hands SGLANG_GATEWAY_API_KEY", "")  # no key: comments only
    for bad, words in (({}, "no value read"), ({API_KEY_ENV: ""}, "is empty"),
                       ({API_KEY_ENV: "sk-a\nsk-b"}, "newline")):
        with pytest.raises(PlanError) as err:
            render_gateway_env("gw1", s, bad)
        assert err.value.field == "sglang_gateway.api_key" and words in str(err.value)
        assert "sk-a" not in str(err.value)


@pytest.mark.skipif(SYSTEMD_ANALYZE is None and not os.environ.get("CI"), reason="systemd-analyze missing")
@pytest.mark.parametrize("port", [30000, 443])
def test_the_unit_passes_systemd_analyze_verify(tmp_path, port):
    s = gw({"venvs_dir": str(tmp_path / "venvs"), "port": port, "api_key": {"env": "K"}})
    bin_dir = Path(s.python).parent
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    unit = tmp_path / "sglang-gateway.service"
    unit.write_text(render_gateway_unit("gw1", s, ["http://10.0.0.1:30000", "http://[fd00::1]:30000"]))
    verify = [SYSTEMD_ANALYZE or "systemd-analyze", "verify", "--man=no"]
    result = subprocess.run([*verify, str(unit)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == "", result.stderr
    broken = tmp_path / "broken" / "sglang-gateway.service"
    broken.parent.mkdir()
    broken.write_text(unit.read_text().replace("Restart=always", "Restart=sometimes"))
    bad = subprocess.run([*verify, str(broken)], capture_output=True, text=True, timeout=60)
    assert "restart specifier" in bad.stderr  # the check can fail


# -- the launcher --------------------------------------------------------------------------------


def test_the_launcher_reads_the_variable_the_plan_writes():
    assert gateway_launch.API_KEY_ENV == API_KEY_ENV
    assert gateway.LAUNCHER_NAME == LAUNCHER.name


@pytest.mark.parametrize("argv", [["--api-key", "x"], ["--port", "1", "--api-key=x"], ["--api", "x"]])
def test_the_launcher_refuses_a_key_on_its_command_line(argv, capsys):
    assert gateway_launch.main(argv) == 2
    assert "would put the key in /proc/<pid>/cmdline" in capsys.readouterr().err


def test_the_launcher_refuses_an_empty_key(monkeypatch, capsys):
    monkeypatch.setenv(API_KEY_ENV, " ")
    assert gateway_launch.main(["--port", "1"]) == 2
    assert "set but empty" in capsys.readouterr().err
    assert gateway_launch.key_flag_in(["--", "--api-key"]) is None  # after "--" a word is no option


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_launcher_starts_the_real_router_with_the_key_out_of_its_argv(tmp_path):
    python = router_python()
    port, metrics = free_port(), free_port()
    s = dataclasses.replace(GatewaySettings(), host="127.0.0.1", port=port, metrics_port=metrics)
    key = "sk-gw-" + secrets.token_hex(12)
    env = {"PATH": os.environ.get("PATH", ""), API_KEY_ENV: key}
    log = tmp_path / "router.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([python, "-I", str(LAUNCHER), *router_argv(s, [])], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()[-2000:]
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the router did not answer /health within 60 s"
            time.sleep(0.2)
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert key.encode() not in cmdline and b"--api-key" not in cmdline
        assert str(port).encode() in cmdline or b"sglang::router" in cmdline  # it is the router's process
        # the admin API (GET /workers) refuses a request without the key, or with another, and takes it with it
        assert httpx.get(f"{base}/workers", timeout=5).status_code == 401
        assert httpx.get(f"{base}/workers", headers={"Authorization": "Bearer sk-wrong"}, timeout=5).status_code == 401
        ok = httpx.get(f"{base}/workers", headers={"Authorization": f"Bearer {key}"}, timeout=5)
        assert ok.status_code == 200, ok.text
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    assert key not in log.read_text(errors="replace")


def test_plan_describes_the_shipped_fleets_gateway_and_plans_its_workers():
    import io
    from pathlib import Path

    from sglang_deploy.commands.cli import main

    fleet = Path(__file__).resolve().parent.parent / "inventory" / "fleet.py"
    out, err = io.StringIO(), io.StringIO()
    assert main(["plan", str(fleet), "--host", "gw-01", "--host", "a6000-01"], out=out, err=err) == 0, err.getvalue()
    text = out.getvalue()
    assert "gw-01: SGLang Model Gateway (sglang-router 0.3.2)" in text
    workers = [line.split()[-1] for line in text.splitlines() if line.startswith("  worker ")]
    assert workers == ["http://10.0.0.11:30000", "http://10.0.0.12:30000", "http://10.0.0.13:30000"]
    argv = next(line for line in text.splitlines() if line.startswith("  argv: "))
    assert "--worker-urls http://10.0.0.11:30000" in argv and "--api-key" not in argv  # the key: launcher, env
    # its workers are planned as SGLang hosts, with /metrics for the drain
    assert "== a6000-01 " in text and "--enable-metrics" in text


def test_plan_refuses_a_worker_naming_no_gateway_host(tmp_path):
    import io

    from sglang_deploy.commands.cli import main

    inv = tmp_path / "inv.py"
    inv.write_text("gw = [('gw1', {'sglang_gateway': True})]\n"
                   "fleet = [('w1', {'sglang_model': 'Qwen/Qwen3.6-27B', "
                   "'sglang_gpus': {'model': 'RTX A6000', 'count': 2}, 'sglang_gateways': ['gw2']})]\n")
    err = io.StringIO()
    assert main(["plan", str(inv)], out=io.StringIO(), err=err) == 2
    assert "w1" in err.getvalue() and "sglang_gateways[0]" in err.getvalue() and "gw1" in err.getvalue(), err.getvalue()
