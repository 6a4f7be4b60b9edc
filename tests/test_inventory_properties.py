"""Property: any host data either plans or fails with a PlanError naming the host and the field.

Host data is generated from the table of inventory keys (``settings.SETTINGS``):
a mostly plausible host, then a few keys replaced by values of the wrong type
or odd strings (``%``, ``@``, newlines, unicode, huge numbers, NaN, nested junk).
A plan must be one the version's catalog accepts and render to files; a sample of
the rendered units goes through ``systemd-analyze verify``.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_deploy.plan import catalog as catalogs
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.inventory_plan import plan_inventory
from sglang_deploy.plan.intents import DERIVED_INTENTS, INTENTS
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.profiles import load_knowledge
from sglang_deploy.plan.render import render
from sglang_deploy.plan.settings import GATE_SETTINGS, SETTINGS
from sglang_deploy.plan.spec_checks import OWNED_ENV

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
KNOWLEDGE = load_knowledge()
HOST = "gpu-1"

# Deterministic and bounded: the same examples on every run, well under a minute.
PROPERTY = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])

ODD_STRINGS = ("", " ", "%", "%n", "%h%%", "50%", "a@b", "sglang@", "@", "x\ny", "\r", "\t", "\x00", "\x7f",
               "\u2028", "\x85", "é", "模型", "🙂", "$HOME", "${X}", "\\", "'", '"', ";", "a b", "-h", "--help",
               "v0.5.19", " 0.5.23 ", "0.5.23\n", "nan", "inf", "1e309", "/", "/a/../b", "..", "x" * 300)
odd_text = st.one_of(st.sampled_from(ODD_STRINGS), st.text(max_size=12),
                     st.text(alphabet=st.sampled_from(list("%@\n$\\\"' ;:/.-_aZ09é模")), max_size=12))
numbers = st.one_of(st.integers(min_value=-3, max_value=100), st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([float("nan"), 1e308, -0.0, 10 ** 400, -(10 ** 30)]))
scalars = st.one_of(st.none(), st.booleans(), numbers, odd_text)
junk = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner),
    st.dictionaries(st.one_of(odd_text, st.integers()), inner, max_size=3)), max_leaves=6)

MODELS = ("Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3.6-27B", "/models/my model 50%", "org/odd@name",
          "/data/模型")
GPU_NAMES = ("RTX A6000", "H100 SXM", "H100 PCIe", "A100 SXM", "L4", "GeForce RTX 4090", "H200", "B200")
TOPOLOGIES = ("pcie", "nvlink-pairs", "nvlink-partial", "nvlink-all", "nvswitch")
VERSIONS = (*catalogs.SUPPORTED_VERSIONS, "v0.5.19", " 0.5.23 ", "V0.5.9", "0.5.15\t", 0.5, "0.4.0", "latest", "")
EXTRA_ARGS = (["--max-prefill-tokens", "16384"], ["--log-level", "info"], ["--enable-metrics"], ["-h"], ["--help"],
              ["--he"], ["--help=1"], ["--version"], ["--", "-h"], ["--served-model-name", "x%y"], ["--tp-size", "2"],
              ["--nnodes", "2"], ["--node-rank=1"], ["-1"], ["--chunked-prefill-size", "nan"])
ENV_NAMES = ("HF_HOME", "NCCL_IB_DISABLE", "SGLANG_LOG_LEVEL", *OWNED_ENV)
PATHS = ("/opt/sglang", "/srv/llm", "/", "/a%b", "/a b", "relative", "/x/", "/$HOME", "/模型")
NAMES = ("sglang", "qwen", "llm_1", "sglang@", "sglang@x", "a.service", "-x", "x.", "s%n", "x" * 300, "Sg.L-1")


def _intents() -> st.SearchStrategy[dict[str, Any]]:
    names = sorted(n for n in INTENTS if n not in DERIVED_INTENTS)

    def value(name: str) -> st.SearchStrategy[Any]:
        d = INTENTS[name]
        good: st.SearchStrategy[Any] = {
            "bool": st.booleans(), "int": st.integers(min_value=1, max_value=8), "tp": st.sampled_from([1, 2, "all"]),
            "float": st.floats(min_value=0.05, max_value=0.95), "str": odd_text,
            "choice": st.sampled_from(d.choices or (None,)),
        }[d.kind]
        return st.one_of(good, good, scalars)

    layer = st.dictionaries(st.sampled_from(names), st.none(), max_size=3).flatmap(
        lambda chosen: st.fixed_dictionaries({n: value(n) for n in chosen}))
    with_reason = layer.flatmap(lambda d: st.fixed_dictionaries(
        {k: st.one_of(st.just(v), st.fixed_dictionaries({"value": st.just(v), "reason": odd_text}))
         for k, v in d.items()}))
    return with_reason


def _env() -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.one_of(st.sampled_from(ENV_NAMES), st.sampled_from(ENV_NAMES), odd_text),
                           st.one_of(st.sampled_from(["1", "0", "/data/hf", "a b", "50%"]), numbers, odd_text),
                           max_size=3)


PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "sglang_model": st.sampled_from(MODELS),
    "sglang_version": st.sampled_from(VERSIONS),
    "sglang_model_profile": st.sampled_from(sorted(KNOWLEDGE.models)),
    "sglang_model_dir": st.sampled_from(["/models/qwen", "~/ckpt", "relative/dir", "/a b"]),
    # one key for the facts' revision and the weights' (merged): odd ones of both ("..", "", a space)
    "sglang_model_revision": st.sampled_from(["main", "v1.0", "0" * 40, "a b", "..", "refs/pr/1", ""]),
    "sglang_gpus": st.fixed_dictionaries(
        {"model": st.sampled_from(GPU_NAMES), "count": st.sampled_from([1, 1, 2, 4, 8])},
        optional={"topology": st.sampled_from(TOPOLOGIES), "memory_gib": st.sampled_from([24, 80, 0.5, 141])}),
    "sglang_gpu_indices": st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=3),
    "sglang_intents": _intents(),
    "sglang_extra_args": st.sampled_from(EXTRA_ARGS),
    "sglang_env": _env(),
    "sglang_env_overrides": st.lists(st.sampled_from(sorted(OWNED_ENV)), max_size=2, unique=True),
    "sglang_secrets": st.sampled_from([{}, {"hf_token": {"env": "HF_TOKEN"}}, {"api_key": {"file": "/k"}}]),
    "sglang_service_name": st.sampled_from(NAMES),
    "sglang_user": st.sampled_from(NAMES),
    "sglang_group": st.sampled_from(NAMES),
    "sglang_venvs_dir": st.sampled_from(PATHS),
    "sglang_pip_extras": st.sampled_from([[], ["all"], ["a b"]]),
    "sglang_pip_index_url": st.sampled_from(["https://pypi.example/simple", "x%y"]),
    "sglang_pip_extra_index_urls": st.lists(st.sampled_from(["https://a.example/simple", "%"]), max_size=2),
    "sglang_pip_find_links": st.sampled_from(["/wheels", "https://w.example/"]),
    "sglang_pip_no_index": st.booleans(),
    "sglang_transfer_engine_version": st.sampled_from(["0.3.13.post1", "0.3.10.post1", "1.0", "x y", "", 3, None]),
    "sglang_workdir": st.sampled_from(PATHS),
    "sglang_config_dir": st.sampled_from(PATHS),
    "sglang_timeout_start_s": st.one_of(st.integers(min_value=-1, max_value=10 ** 6), numbers),
    "sglang_timeout_stop_s": st.one_of(st.integers(min_value=-1, max_value=10 ** 6), numbers),
    "sglang_restart_sec": st.one_of(st.integers(min_value=-1, max_value=10 ** 6), numbers),
    "sglang_limit_nofile": st.one_of(st.integers(min_value=-1, max_value=2 ** 40), numbers),
    "sglang_target_tok_s": numbers,
    "sglang_tp_group": st.sampled_from(["g1", "g@1", "%"]),
    "sglang_nnodes": st.integers(min_value=0, max_value=4),
    "sglang_dist_init_port": st.integers(min_value=-1, max_value=70000),
    "sglang_node_address": st.sampled_from(["10.0.0.1", "::1", "[fe80::1]", "host-1", "a b", "%"]),
    "sglang_nccl_socket_ifname": st.sampled_from(["eth0", "ib0,ib1", "^docker", "e th0", "%"]),
    "sglang_gloo_socket_ifname": st.sampled_from(["eth0", "ib0,ib1", "e th0"]),
    "sglang_gate": st.dictionaries(st.sampled_from([s.name for s in GATE_SETTINGS] + ["nope"]), scalars, max_size=2),
    "sglang_rollout": st.sampled_from([{"waves": "1,25%"}, {"max_fail": 1}]),
    "sglang_model_source": st.sampled_from(["hub", "server", "host", "controller:/ckpt", "controller:x", "ftp"]),
    "sglang_model_store": st.sampled_from([*PATHS, "/"]),
    # a directory of its own: the system's, the state's, the store's, the venvs' are refused
    "sglang_cache_dir": st.sampled_from([*PATHS, "/var/lib/sglang/cache", "/var/lib/sglang-deploy", "/etc", 7]),
    "sglang_model_disk_margin_mib": st.integers(min_value=-1, max_value=10 ** 6),
    "sglang_model_keep": st.integers(min_value=0, max_value=5),
    "sglang_installer": st.sampled_from(["pip", "uv", "conda"]),
    # a boolean; "yes" and 1 must be refused naming the key, not read as true
    "sglang_weights_verify": st.sampled_from([True, False, "yes", 1]),
    # true, off, or a mapping of its keys with good, out-of-range and mistyped values
    "sglang_watch": st.one_of(st.sampled_from([True, False, None, "yes"]), st.fixed_dictionaries({}, optional={
        "interval": st.sampled_from(["15m", "1h 30m", "10s", "5s", "25h", "15", 60, True]),
        "max_tokens": st.sampled_from([2, 32, 256, 1, 257, "8"]),
        "timeout": st.sampled_from(["2m", "1h", "2h", 0]),
        "textfile_dir": st.sampled_from(["/var/lib/prometheus/node-exporter", "/srv/tf", "rel/dir", "/a b", "/a/../b"]),
        "verify_weights_bytes": st.sampled_from([0, 1 << 30, -1, 1 << 41]),
        "prefill_tokens": st.sampled_from([0, 2048, 32768, -1, 32769, "2048", True]),
        "nope": st.just(1)})),
    # consent to the model's own code: a boolean; "true" and 1 are refused naming the key
    "sglang_trust_remote_code": st.sampled_from([True, False, "true", 1]),
    # what the layout serves: one of two words, or a mapping of the workload and limits the layouts
    # are ranked for; anything else is refused naming the key
    "sglang_objective": st.one_of(st.sampled_from(["throughput", "latency", "Latency", "speed", 1]),
                                  st.fixed_dictionaries({}, optional={
                                      "serve": st.sampled_from(["throughput", "latency", "fast"]),
                                      "input_tokens": st.sampled_from([2000, 1, 0, 1.5, "2k", True]),
                                      "output_tokens": st.sampled_from([500, 1 << 25]),
                                      "tpot_ms": st.sampled_from([50, 20.5, 0, -1, float("nan"), "50"]),
                                      "ttft_ms": st.sampled_from([2000, 1e12]),
                                      "isl": st.just(1)})),
    # the gateway's and its workers' keys (parsed by sglang_deploy.plan.gateway; tests/test_gateway_plan.py)
    "sglang_gateway": st.sampled_from([None, True, False, {"port": 8000}, {"policy": "nope"}, "yes"]),
    "sglang_gateways": st.sampled_from([[], ["gw1"], "gw1", [1]]),
    "sglang_worker_url": st.sampled_from(["http://10.0.0.1:30000", "ftp://x", "http://u:p@h:1"]),
    "sglang_drain": st.sampled_from(["skip", {"timeout": "1m"}, "off", {"wait": 1}]),
    # a prefill or decode server behind its gateways (plan/pd.py); anything else is refused naming the key
    "sglang_role": st.sampled_from(["prefill", "decode", "both", "Prefill", 1, None]),
}


def test_every_setting_has_a_generator():
    assert set(PLAUSIBLE) == {s.name for s in SETTINGS}


@st.composite
def inventory_host(draw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(group data, host data): a plausible host with up to two keys made wrong or odd."""
    keys = sorted(PLAUSIBLE)
    data = draw(st.fixed_dictionaries(
        {"sglang_model": PLAUSIBLE["sglang_model"], "sglang_gpus": PLAUSIBLE["sglang_gpus"]},
        optional={k: PLAUSIBLE[k] for k in keys if k not in ("sglang_model", "sglang_gpus")}))
    for key in draw(st.lists(st.sampled_from(keys + ["sglang_typo"]), max_size=2, unique=True)):
        data[key] = draw(junk)
    if draw(st.integers(min_value=0, max_value=9)) == 9:  # 0 is what derandomized runs draw most
        del data["sglang_model"]
    in_group = draw(st.sets(st.sampled_from(sorted(data)), max_size=3))
    group = {k: v for k, v in data.items() if k in in_group}
    host = {k: v for k, v in data.items() if k not in in_group}
    return group, host


_VERIFIED = {"plain": 0, "odd": 0}
VERIFY_SAMPLE = 3  # of each kind, to bound the number of systemd-analyze calls


def _field_names_a_key(field: str, data: dict[str, Any]) -> bool:
    """The field of a PlanError names a key of the data (or a CLI-free derived field)."""
    head = re.split(r"[.\[ ]", field, maxsplit=1)[0]
    return head in data or head in ("sglang_model", "sglang_gpus", "sglang_node_address", "host") or \
        any(field.startswith(f"{i} (") for i in INTENTS)


def _check_plan(plan: Plan, data: dict[str, Any]) -> None:
    catalog = catalogs.load_catalog(plan.sglang_version)
    assert catalog.check(plan.argv) == [], plan.argv
    assert re.fullmatch(r"[0-9][A-Za-z0-9.+-]*", plan.sglang_version)
    assert "@" not in plan.service.name
    env = data.get("sglang_env") if isinstance(data.get("sglang_env"), dict) else {}
    for name in set(env) & set(OWNED_ENV):  # applied only when declared, with a warning
        assert name in data["sglang_env_overrides"] and any(f"sglang_env.{name}" in w for w in plan.warnings)
    files = render(plan)
    unit = files.unit
    settings_lines = [line for line in unit.splitlines() if line and not line.startswith("#")]
    for line in settings_lines:
        assert not re.search(r"(?<!%)%(?!%)", line.replace("%%", "")), line  # every % escaped
    kind = "odd" if "%%" in unit or not unit.isascii() else "plain"
    if SYSTEMD_ANALYZE and _VERIFIED[kind] < VERIFY_SAMPLE:
        _VERIFIED[kind] += 1
        _verify(plan)


def _verify(plan: Plan) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = Path(tmp) / "venvs" / f"sglang-{plan.sglang_version}" / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "python").symlink_to(sys.executable)
        local = dataclasses.replace(plan, service=dataclasses.replace(plan.service, venvs_dir=str(Path(tmp) / "venvs")))
        unit = Path(tmp) / "sglang-test.service"
        unit.write_text(render(local).unit, encoding="utf-8")
        result = subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", str(unit)],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == "", result.stderr


@PROPERTY
@given(inventory_host())
def test_any_host_data_plans_or_names_host_and_field(layers: tuple[dict[str, Any], dict[str, Any]]) -> None:
    group, host = layers
    data = {**group, **host}
    (result,) = plan_inventory([(HOST, group, host)], knowledge=KNOWLEDGE)
    if isinstance(result, PlanError):
        assert result.host == HOST
        assert not re.search(r"[\x00-\x1f\x7f]", str(result)), str(result)  # one line, no escape sequences
        assert result.field and _field_names_a_key(result.field, data), (result.field, str(result))
        return
    try:
        _check_plan(result, data)
    except PlanError as exc:  # rendering may still refuse a value, naming it
        assert exc.host == HOST and _field_names_a_key(exc.field, data), str(exc)


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze missing (Debian package systemd)")
def test_odd_values_in_every_unit_setting_pass_systemd_verify():
    """% in the model path (Description=), the command line and a path: verify reads them literally."""
    data = {"sglang_model": "/models/50%n q@1 模型", "sglang_gpus": {"model": "H100 SXM", "count": 1},
            "sglang_intents": {"served_model_name": "odd %h $x \\ \"y\" ;"}, "sglang_version": " v0.5.23 "}
    (plan,) = plan_inventory([(HOST, {}, data)], knowledge=KNOWLEDGE)
    assert isinstance(plan, Plan), plan
    assert "Description=SGLang server (/models/50%%n q@1 模型)" in render(plan).unit
    _verify(plan)


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze missing (Debian package systemd)")
def test_the_largest_accepted_numbers_pass_systemd_verify():
    from sglang_deploy.plan.spec import MAX_NOFILE, MAX_SECONDS

    data = {"sglang_model": "Qwen/Qwen3-32B", "sglang_gpus": {"model": "RTX A6000", "count": 2},
            "sglang_timeout_start_s": MAX_SECONDS, "sglang_timeout_stop_s": MAX_SECONDS,
            "sglang_restart_sec": MAX_SECONDS, "sglang_limit_nofile": MAX_NOFILE}
    (plan,) = plan_inventory([(HOST, {}, data)], knowledge=KNOWLEDGE)
    assert isinstance(plan, Plan), plan
    _verify(plan)
    (refused,) = plan_inventory([(HOST, {}, {**data, "sglang_limit_nofile": MAX_NOFILE + 1})], knowledge=KNOWLEDGE)
    assert isinstance(refused, PlanError) and refused.field == "sglang_limit_nofile"
