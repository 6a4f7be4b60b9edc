"""Knowledge as data: the shipped files load, and malformed data is refused."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from sglang_deploy.commands.cli import main

from sglang_deploy.plan.profiles import DataError, load_arch, load_knowledge, load_model


def test_shipped_data_covers_every_architecture():
    k = load_knowledge()
    assert sorted(k.archs) == ["sm100", "sm120", "sm80", "sm86", "sm89", "sm90"]
    assert k.arch_of_capability["8.6"] == "sm86" and k.arch_of_capability["12.0"] == "sm120"
    for arch in k.archs.values():
        assert all(s.reason for s in arch.settings)
    ids = [r.id for a in k.archs.values() for r in a.rules] + [r.id for r in k.topology_rules + k.model_rules]
    assert len(ids) == len(set(ids))
    assert k.model_for("Qwen/Qwen3.6-27B").key == "qwen3.6-27b"
    assert k.model_for("qwen/qwen3.6-27b/").key == "qwen3.6-27b"


def test_every_gpu_model_maps_to_an_architecture():
    k = load_knowledge()
    for model in k.gpus.models:
        assert model.compute_capability in k.arch_of_capability, model.name


def test_malformed_profiles_are_refused():
    with pytest.raises(DataError, match="missing capabilities"):
        load_arch({"arch": "sm75", "name": "Turing", "compute_capabilities": ["7.5"]}, "data/arch/sm75.yaml")
    with pytest.raises(DataError, match="needs a value and a reason"):
        load_model({"key": "m", "models": ["x"], "architecture": "X", "facts": {},
                    "intents": {"tp_size": {"value": 2}}}, "data/models/m.yaml")
    with pytest.raises(DataError, match="unknown intent 'tp'"):
        load_model({"key": "m", "models": ["x"], "architecture": "X", "facts": {},
                    "intents": {"tp": {"value": 2, "reason": "r"}}}, "data/models/m.yaml")


def test_a_rule_on_an_unknown_fact_is_a_data_error():
    arch = load_arch({"arch": "sm75", "name": "Turing", "compute_capabilities": ["7.5"], "capabilities": {},
                      "rules": [{"id": "x", "when": {"gpu_colour": "green"}, "set": {"nvls": False},
                                 "reason": "r"}]}, "data/arch/sm75.yaml")
    with pytest.raises(DataError, match="unknown fact 'gpu_colour'"):
        arch.rules[0].applies({"arch": "sm75"})


# -- every cited source is something a reader can open ---------------------------

SHIPPED_DIRS = ("sglang_deploy", "scripts", "inventory", "templates", "benchmarks")
REPO_PATH_PREFIXES = tuple(d + "/" for d in SHIPPED_DIRS) + ("tests/",)
_MD_CITATION = re.compile(r"[\w./-]+\.md\b")
_REPO_PATH = re.compile(r"(?<![\w/.-])(?:" + "|".join(map(re.escape, REPO_PATH_PREFIXES)) + r")[\w./-]*\w")


def _shipped_text_files(root: Path):
    for top in SHIPPED_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and not path.name.endswith((".pyc", ".so")):
                try:
                    yield path, path.read_text(encoding="utf-8")
                except UnicodeDecodeError:
                    continue
    for path in sorted(root.glob("*.py")):
        yield path, path.read_text(encoding="utf-8")


def _in_repo(cited: str, root: Path) -> bool:
    """A bare file name may live anywhere in the shipped tree; a path is taken from the repository root."""
    if "/" in cited:
        return (root / cited).exists()
    return (root / cited).exists() or any(any((root / top).rglob(cited)) for top in SHIPPED_DIRS)


def _unopenable_citations(text: str, root: Path) -> list[str]:
    """Citations in `text` of a document outside this repository (or of a repo path that does not exist)."""
    bad = [m for m in ("DOMAIN", "../shared") if m in text]
    bad += [c for c in _MD_CITATION.findall(text) if not _in_repo(c, root)]
    bad += [p for p in _REPO_PATH.findall(text) if not (root / p.rstrip(".")).exists()]
    return bad


def test_no_shipped_file_cites_a_document_outside_the_repository(repo_root):
    offenders = [str(path.relative_to(repo_root)) for path, text in _shipped_text_files(repo_root) if "DOMAIN" in text]
    assert offenders == []
    data = repo_root / "sglang_deploy" / "data"
    for path in sorted(data.rglob("*.yaml")):
        assert _unopenable_citations(path.read_text(encoding="utf-8"), repo_root) == [], path


@pytest.mark.parametrize("inventory", ["a6000.py", "h100.py", "fleet.py"])
@pytest.mark.parametrize("version", ["0.5.9", "0.5.15", "0.5.19", "0.5.23"])
def test_plan_explain_cites_only_openable_sources(repo_root, inventory, version):
    out, err = io.StringIO(), io.StringIO()
    code = main(["plan", str(repo_root / "inventory" / inventory), "--explain", "--sglang-version", version],
                out=out, err=err)
    assert code == 0, err.getvalue()
    text = out.getvalue()
    assert "Intents" in text
    assert _unopenable_citations(text, repo_root) == []
