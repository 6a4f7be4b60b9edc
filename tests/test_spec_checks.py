"""Inventory values that would be silently wrong are normalised or refused, naming host and field."""

from __future__ import annotations

import pytest

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.plan.spec_checks import OWNED_ENV, key_text, normalize_version
from sglang_deploy.unitsyntax import unit_value

BASE = {"sglang_model": "Qwen/Qwen3-32B", "sglang_gpus": {"model": "RTX A6000", "count": 2}}


def plan(data, version=None):
    return plan_host(build_spec("h1", {}, {**BASE, **data}), sglang_version=version)


def refused(data, version=None) -> PlanError:
    with pytest.raises(PlanError) as exc:
        plan(data, version)
    assert exc.value.host == "h1"
    return exc.value


# --- versions ----------------------------------------------------------------------------------

@pytest.mark.parametrize("raw,clean", [
    ("v0.5.19", "0.5.19"), ("0.5.23 ", "0.5.23"), (" V0.5.9\t", "0.5.9"), ("0.5.3.post1", "0.5.3.post1"),
    ("0.6.0rc1", "0.6.0rc1"), ("0.5.9+cu128", "0.5.9+cu128"), (0.5, "0.5"), ("0.5.23\n", "0.5.23"),
])
def test_versions_are_normalised(raw, clean):
    assert normalize_version("h1", "sglang_version", raw) == clean


def test_a_v_prefixed_version_reaches_neither_the_venv_nor_the_pin_raw():
    p = plan({"sglang_version": "v0.5.19 "})
    assert p.sglang_version == "0.5.19" and p.venv.endswith("/sglang-0.5.19")
    assert plan({}, version=" v0.5.19").venv.endswith("/sglang-0.5.19")


@pytest.mark.parametrize("raw", ["", "   ", "v", "latest", "0.5.23/../x", "0.5 .23", "0.5.23\nx", True, None, [], {}])
def test_versions_that_are_no_release_are_refused(raw):
    exc = refused({"sglang_version": raw})
    assert exc.field == "sglang_version"


def test_an_empty_cli_version_is_refused_not_ignored():
    assert refused({}, version="").field == "--sglang-version"


# --- environment entries the deploy or SGLang owns ------------------------------------------

@pytest.mark.parametrize("name", sorted(OWNED_ENV))
def test_owned_variables_in_sglang_env_are_refused(name):
    exc = refused({"sglang_env": {name: "1"}})
    assert exc.field == f"sglang_env.{name}" and "sglang_env_overrides" in exc.message


def test_the_refusal_says_which_setting_to_use_instead():
    exc = refused({"sglang_env": {"CUDA_VISIBLE_DEVICES": "1"}})
    assert "sglang_gpu_indices" in exc.message
    assert "sglang_intents.nvls" in refused({"sglang_env": {"NCCL_NVLS_ENABLE": "1"}}).message


def test_a_declared_override_is_applied_with_a_warning():
    p = plan({"sglang_env": {"NCCL_CUMEM_ENABLE": "1", "CUDA_VISIBLE_DEVICES": "1"},
              "sglang_env_overrides": ["NCCL_CUMEM_ENABLE", "CUDA_VISIBLE_DEVICES"]})
    assert p.env["NCCL_CUMEM_ENABLE"] == "1" and p.env["CUDA_VISIBLE_DEVICES"] == "1"
    assert sum("sglang_env_overrides" in w for w in p.warnings) == 2
    assert "NCCL_CUMEM_ENABLE=1" in render(p).env


def test_other_variables_need_no_declaration():
    p = plan({"sglang_env": {"HF_HOME": "/data/hf"}})
    assert p.env["HF_HOME"] == "/data/hf" and not any("override" in w for w in p.warnings)


@pytest.mark.parametrize("overrides,field", [
    ("NCCL_CUMEM_ENABLE", "sglang_env_overrides"),  # a string, not a list
    (["HF_HOME"], "sglang_env_overrides[0]"),  # nothing to override
    (["NCCL_DEBUG"], "sglang_env_overrides[0]"),  # declared but not set
    ([5], "sglang_env_overrides[0]"),
])
def test_wrong_override_declarations_are_refused(overrides, field):
    exc = refused({"sglang_env": {"HF_HOME": "/x"}, "sglang_env_overrides": overrides})
    assert exc.field == field


def test_an_env_name_with_a_trailing_newline_is_refused():
    """``$`` in a regex matches before a final newline: the name would have split the env file."""
    exc = refused({"sglang_env": {"FOO\n": "x"}})
    assert exc.field == "sglang_env.'FOO\\n'" and "\n" not in str(exc)


# --- extra arguments that make SGLang exit without serving ----------------------------------

@pytest.mark.parametrize("args", [["-h"], ["--help"], ["--he"], ["--help=x"], ["--log-level", "info", "-h"]])
@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_help_in_extra_args_is_refused(args, version):
    exc = refused({"sglang_extra_args": args}, version)
    assert exc.field.startswith("sglang_extra_args[") and "without serving" in exc.message


def test_ordinary_extra_args_still_plan():
    assert plan({"sglang_extra_args": ["--max-prefill-tokens", "16384"]}).argv[-2:] == ["--max-prefill-tokens", "16384"]


# --- unit names and % in unit settings --------------------------------------------------------

@pytest.mark.parametrize("name", ["sglang@", "sglang@1", "@", "sglang.service", "x.", "-x", "a b", "a:b", "x" * 250])
def test_unit_names_systemd_would_misread_are_refused(name):
    assert refused({"sglang_service_name": name}).field == "sglang_service_name"


def test_percent_in_the_model_path_is_escaped_in_the_unit():
    unit = render(plan({"sglang_model": "/models/q %n 50%"})).unit
    assert "Description=SGLang server (/models/q %%n 50%%)" in unit
    assert "# Host h1:" in unit and "model /models/q %n 50%." in unit  # comments are not expanded
    assert unit_value("a%b") == "a%%b"


# --- defaults that fit the host ---------------------------------------------------------------

@pytest.mark.parametrize("model", ["H100 SXM", "A100 SXM", "H200", "B200"])
def test_one_sxm_gpu_without_a_topology_plans(model):
    p = plan({"sglang_gpus": {"model": model, "count": 1}})
    assert p.gpus.topology == "pcie" and p.gpus.count == 1


def test_a_declared_multi_gpu_topology_for_one_gpu_is_refused_with_the_way_out():
    exc = refused({"sglang_gpus": {"model": "H100 SXM", "count": 1, "topology": "nvswitch"}})
    assert exc.field == "sglang_gpus.topology" and "leave topology out" in exc.message


@pytest.mark.parametrize("gpus,field", [
    ({"model": "H100 SXM", "count": 10 ** 9}, "sglang_gpus.count"),
    ({"model": "H100 SXM", "count": 1, "memory_gib": float("nan")}, "sglang_gpus.memory_gib"),
    ({"model": "H100 SXM", "count": 1, "memory_gib": float("inf")}, "sglang_gpus.memory_gib"),
    ({"model": "H100 SXM", "count": 1, 5: 1, "x": 2}, "sglang_gpus.5"),
])
def test_declared_hardware_out_of_range_is_refused(gpus, field):
    assert refused({"sglang_gpus": gpus}).field == field


@pytest.mark.parametrize("key,value", [
    ("sglang_target_tok_s", float("inf")), ("sglang_target_tok_s", 10 ** 400),
    ("sglang_timeout_stop_s", 10 ** 30), ("sglang_limit_nofile", 2 ** 40),
])
def test_numbers_systemd_or_the_gate_cannot_use_are_refused(key, value):
    assert refused({key: value}).field == key


def test_key_text_quotes_what_is_not_plain():
    assert key_text("HF_HOME") == "HF_HOME" and key_text("a\nb") == "'a\\nb'" and key_text(5) == "5"
