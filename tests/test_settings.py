"""The one table of inventory keys feeds the spec's defaults, the unknown-key check and docs/settings.md."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from sglang_deploy.plan import settings
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.settings import DEFAULTS, GATE_SETTINGS, SETTINGS, markdown_table, replace_table
from sglang_deploy.plan.spec import GateSettings, InstallSettings, ServiceSettings, build_spec

ROOT = Path(__file__).resolve().parent.parent
MINIMAL = {"sglang_model": "Qwen/Qwen3-32B"}


def test_the_docs_table_is_generated_from_the_table():
    docs = (ROOT / settings.DOCS_FILE).read_text()
    assert replace_table(docs) == docs, (
        f"{settings.DOCS_FILE}'s inventory settings tables are out of date: run "
        f"`python -m sglang_deploy.plan.settings --update-docs {settings.DOCS_FILE}`")


def test_the_table_sits_in_the_settings_doc_before_its_first_section():
    docs = (ROOT / settings.DOCS_FILE).read_text()
    top = docs.split("\n## ", 1)[0]
    assert top.startswith("# Inventory settings\n")
    assert markdown_table() in top
    for s in (*SETTINGS, *GATE_SETTINGS, *settings.ROLLOUT_SETTINGS):
        assert f"| `{s.name}` |" in top
    assert settings.DOCS_FILE in (ROOT / "README.md").read_text(), "README.md links the settings tables"


def test_names_are_unique_prefixed_and_documented_on_one_line():
    names = [s.name for s in SETTINGS]
    assert len(set(names)) == len(names)
    assert all(n.startswith("sglang_") for n in names)
    for s in (*SETTINGS, *GATE_SETTINGS, *settings.ROLLOUT_SETTINGS):
        assert s.doc and "\n" not in s.doc and s.type and "\n" not in s.default_text()


def test_every_key_the_spec_reads_is_in_the_table():
    source = (ROOT / "sglang_deploy" / "plan" / "spec.py").read_text()
    read = set(re.findall(r'"(sglang_[a-z_]+)"', source))
    assert read <= set(DEFAULTS), sorted(read - set(DEFAULTS))


def test_an_unset_key_takes_the_tables_default():
    spec = build_spec("h", {}, MINIMAL)
    assert spec.sglang_version == DEFAULTS["sglang_version"]
    assert spec.service == ServiceSettings() and spec.install == InstallSettings() and spec.gate == GateSettings()
    for field in dataclasses.fields(ServiceSettings):
        key = {"name": "sglang_service_name", "group": "sglang_user"}.get(field.name, f"sglang_{field.name}")
        assert getattr(spec.service, field.name) == DEFAULTS[key], field.name
    assert [f.name for f in dataclasses.fields(GateSettings)] == [s.name for s in GATE_SETTINGS]
    for s in GATE_SETTINGS:
        assert getattr(spec.gate, s.name) == s.default
    assert spec.extra_args == () and spec.extra_env == {} and spec.secrets == ()


def test_the_group_defaults_to_the_user():
    assert build_spec("h", {}, {**MINIMAL, "sglang_user": "llm"}).service.group == "llm"


@pytest.mark.parametrize("key, hint", [
    ("sglang_modle", None),
    ("sglang_pip_index", "sglang_pip_extras"),
    ("sglang_timeout_start", "sglang_timeout_start_s"),
    ("sglang_gpus_count", "sglang_gpus"),
])
def test_an_unknown_key_names_the_host_and_the_key(key, hint):
    for group_data, host_data in (({key: 1}, MINIMAL), ({}, {**MINIMAL, key: 1})):
        with pytest.raises(PlanError) as err:
            build_spec("gpu-7", group_data, host_data)
        message = str(err.value)
        assert message.startswith(f"host gpu-7: {key}: unknown setting")
        assert (f"(did you mean {hint}?)" in message) if hint else "did you mean" not in message
        assert message.endswith("known: " + ", ".join(sorted(s.name for s in SETTINGS)))


def test_keys_outside_the_prefix_pass():
    build_spec("h", {"ssh_user": "root"}, {**MINIMAL, "other_key": 1})


def test_markdown_states_each_default():
    table = markdown_table()
    assert "| `sglang_timeout_stop_s` | integer > 0 | `TimeoutStopSec` | `120` |" in table
    assert "| `sglang_group` | string | service group | the user |" in table
    assert ("| `sglang_timeout_start_s` | integer > 0 | `TimeoutStartSec`, and the gate's ready timeout unless "
            "`sglang_gate.ready_timeout_s` is set | from the model profile |") in table
    assert "\\|" in table  # a | inside a cell is escaped


@pytest.mark.parametrize("flag", ["--update-docs", "--update-readme"])
def test_the_command_prints_and_updates(tmp_path, capsys, flag):
    assert settings.main(["--markdown"]) == 0
    assert capsys.readouterr().out == markdown_table() + "\n"
    doc = tmp_path / "settings.md"
    doc.write_text("intro\n<!-- settings table: old -->\n| stale |\n<!-- end settings table -->\noutro\n")
    assert settings.main([flag, str(doc)]) == 0
    assert doc.read_text() == f"intro\n{markdown_table()}\noutro\n"
    doc.write_text("no markers\n")
    with pytest.raises(ValueError, match="no settings table markers"):
        settings.main([flag, str(doc)])
