"""Every constraint row cites, for each SGLang version it claims, the file inside the wheel and the
dotted name it mirrors (or is a stated project policy), and the lookup that CI runs on each released
wheel (scripts/catalogs/citations.py) finds what is there and reports what is not.

No wheel is needed here: the lookup is exercised on small source trees written by the test, shaped
like the wheel's (a class method, a module function, a name assigned inside a platform branch).
The lookup on the released wheels runs in CI (scripts/check_plans_against_real_parsers.py) and by
hand: ``python scripts/build_catalogs.py --check-citations``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from scripts.catalogs import citations
from sglang_deploy.plan import constraints
from sglang_deploy.plan.catalog import SUPPORTED_VERSIONS
from sglang_deploy.plan.constraints import Citation, Constraint

ROWS = constraints.load_constraints()
DATA = Path(constraints.__file__).resolve().parent.parent / "data" / "constraints.yaml"


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_every_row_cites_each_version_it_claims_or_is_a_policy(row: Constraint):
    if row.kind == "policy":
        return  # a policy needs no citation; any it has is checked like the others below
    assert set(row.versions) == set(SUPPORTED_VERSIONS), f"{row.id} claims {row.versions}"
    for version in row.versions:
        assert [c for c in row.cites if version in c.versions], f"{row.id}: nothing cited for {version}"


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_each_citation_is_well_formed(row: Constraint):
    for c in row.cites:
        assert c.file.startswith("sglang/srt/") and c.file.endswith(".py"), (row.id, c.file)
        assert all(part.isidentifier() for part in c.name.split(".")), (row.id, c.name)
        assert c.versions and set(c.versions) <= set(row.versions), (row.id, c.name, c.versions)


def test_the_message_source_names_a_file_the_row_cites():
    """The words a refusal shows (``source``) and the structured citations agree on the file:
    the newest supported version's first cited file appears in the text."""
    newest = SUPPORTED_VERSIONS[-1]
    for row in ROWS:
        if row.kind == "policy":
            continue
        files = [c.file.removeprefix("sglang/") for c in row.cites if newest in c.versions]
        assert any(f in row.source for f in files), (row.id, files)


def _load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: dict) -> tuple[Constraint, ...]:
    """load_constraints on a data file of one row (the package's loader, pointed at tmp_path)."""
    pkg = tmp_path / "sglang_deploy" / "data"
    pkg.mkdir(parents=True)
    (pkg / "constraints.yaml").write_text(yaml.safe_dump({"constraints": [entry]}))
    monkeypatch.setattr(constraints.resources, "files", lambda _: tmp_path / "sglang_deploy")
    constraints.load_constraints.cache_clear()
    try:
        return constraints.load_constraints()
    finally:
        constraints.load_constraints.cache_clear()


BASE = {"id": "r", "field": "tp_size", "check": "attention_heads", "severity": "error", "source": "sglang srt/x.py f"}


@pytest.mark.parametrize("change,why", [
    ({}, "claims the versions"),                                                # a sglang row with no versions
    ({"versions": ["0.5.9", "0.5.23"], "cites": [{"file": "sglang/srt/x.py", "name": "f",
                                                  "versions": ["0.5.9"]}]}, "no citation for version"),
    ({"versions": ["0.5.9"], "cites": [{"file": "srt/x.py", "name": "f"}]}, "not a path inside the wheel"),
    ({"versions": ["0.5.9"], "cites": [{"file": "sglang/srt/x.py", "name": "A..f"}]}, "not a dotted Python name"),
    ({"versions": ["0.5.9"], "cites": [{"file": "sglang/srt/x.py", "name": "f", "versions": ["0.5.23"]}]},
     "must be some of the row's versions"),
    ({"versions": ["0.5.9"], "cites": [{"file": "sglang/srt/x.py", "name": "f", "line": 3}]}, "needs file and name"),
    ({"versions": ["0.5.9"], "cites": [{"file": "sglang/srt/x.py", "name": "f", "contains": 3}]}, "contains must"),
])
def test_the_loader_refuses_a_row_without_a_well_formed_citation(tmp_path, monkeypatch, change, why):
    with pytest.raises(ValueError, match=why):
        _load(tmp_path, monkeypatch, {**BASE, **change})


def test_the_loader_reads_citations_and_a_policy_without_any(tmp_path, monkeypatch):
    (row,) = _load(tmp_path, monkeypatch, {**BASE, "versions": ["0.5.9", "0.5.23"], "cites": [
        {"file": "sglang/srt/a.py", "name": "A.f", "versions": ["0.5.9"], "contains": "x % y"},
        {"file": "sglang/srt/b.py", "name": "g", "versions": "0.5.23"}]})
    assert row.cites == (Citation("sglang/srt/a.py", "A.f", ("0.5.9",), ("x % y",)),
                         Citation("sglang/srt/b.py", "g", ("0.5.23",), ()))
    assert "cites" not in row.params and "versions" not in row.params
    (policy,) = _load(tmp_path / "p", monkeypatch, {**BASE, "kind": "policy", "source": "this project's rule"})
    assert policy.cites == () and policy.versions == ()


# --- the lookup (scripts/catalogs/citations.py) on a source tree shaped like the wheel's ---------

SOURCE = {
    "sglang/srt/models/llama.py": '''
        class LlamaAttention(nn.Module):
            def __init__(self, tp_size):
                assert (
                    self.total_num_heads % tp_size
                    == 0
                ), "heads"
    ''',
    "sglang/srt/layers/quantization/__init__.py": '''
        BASE_QUANTIZATION_METHODS = {"fp8": Fp8Config}
        if is_cuda():
            QUANTIZATION_METHODS: dict = {**BASE_QUANTIZATION_METHODS}
        try:
            from x import y
        except ImportError:
            def fallback():
                pass
    ''',
    "sglang/srt/arg_groups/speculative_hook.py": '''
        def _handle_eagle_family(server_args):
            def inner():
                return "EAGLE"
    ''',
}


def _tree(tmp_path: Path) -> Path:
    for rel, text in SOURCE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    return tmp_path


def _row(*cites: tuple[str, str, tuple[str, ...]], version: str = "0.5.23") -> Constraint:
    return Constraint("r", "tp_size", "attention_heads", "error", "s", {}, "sglang", (version,),
                      tuple(Citation(f, n, (version,), c) for f, n, c in cites))


def test_the_lookup_finds_methods_functions_and_names_in_branches(tmp_path):
    src = _tree(tmp_path)
    heads = ("assert self.total_num_heads % tp_size == 0",)
    row = _row(("sglang/srt/models/llama.py", "LlamaAttention.__init__", heads),
               ("sglang/srt/layers/quantization/__init__.py", "QUANTIZATION_METHODS", ()),
               ("sglang/srt/layers/quantization/__init__.py", "BASE_QUANTIZATION_METHODS", ('"fp8": Fp8Config',)),
               ("sglang/srt/layers/quantization/__init__.py", "fallback", ()),
               ("sglang/srt/arg_groups/speculative_hook.py", "_handle_eagle_family.inner", ('return "EAGLE"',)))
    assert citations.missing(src, "0.5.23", [row]) == []


def test_the_lookup_names_row_version_file_and_function_of_what_is_missing(tmp_path):
    src = _tree(tmp_path)
    row = _row(("sglang/srt/server_args.py", "ServerArgs._handle_speculative_decoding", ()),
               ("sglang/srt/models/llama.py", "LlamaAttention.forward", ()),
               ("sglang/srt/models/llama.py", "LlamaMLP.__init__", ()),
               ("sglang/srt/models/llama.py", "LlamaAttention.__init__",
                ("assert self.total_num_kv_heads % tp_size == 0",)))
    assert citations.missing(src, "0.5.23", [row]) == [
        "constraint r: SGLang 0.5.23 sglang/srt/server_args.py ServerArgs._handle_speculative_decoding: "
        "the file is not in the wheel",
        "constraint r: SGLang 0.5.23 sglang/srt/models/llama.py LlamaAttention.forward: no such definition in the file",
        "constraint r: SGLang 0.5.23 sglang/srt/models/llama.py LlamaMLP.__init__: no such definition in the file",
        "constraint r: SGLang 0.5.23 sglang/srt/models/llama.py LlamaAttention.__init__: the definition no longer "
        "holds 'assert self.total_num_kv_heads % tp_size == 0'",
    ]


def test_the_lookup_checks_only_the_version_a_citation_claims(tmp_path):
    src = _tree(tmp_path)
    row = _row(("sglang/srt/server_args.py", "ServerArgs._handle_speculative_decoding", ()), version="0.5.9")
    assert citations.missing(src, "0.5.23", [row]) == []
    assert len(citations.missing(src, "0.5.9", [row])) == 1


def test_a_fragment_must_be_inside_the_cited_definition(tmp_path):
    """A fragment elsewhere in the file does not count: the citation names where SGLang does it."""
    src = _tree(tmp_path)
    row = _row(("sglang/srt/layers/quantization/__init__.py", "fallback", ('"fp8": Fp8Config',)))
    assert citations.missing(src, "0.5.23", [row])


def test_the_ci_check_looks_up_every_shipped_citation_of_the_version(tmp_path):
    """cli.check_citations (what --check-argv and --check-citations run per wheel) reads the
    package's own rows: on a tree that lacks them, each citation claiming the version is reported
    by row, version, file and name, and none claiming another version."""
    from scripts.catalogs import cli

    llama = tmp_path / "sglang/srt/models/llama.py"
    llama.parent.mkdir(parents=True)
    llama.write_text(textwrap.dedent(SOURCE["sglang/srt/models/llama.py"]))
    for version in SUPPORTED_VERSIONS:
        problems = cli.check_citations(version, tmp_path)
        expected = [(r.id, c) for r in ROWS for c in r.cites if version in c.versions]
        # llama.py's LlamaAttention.__init__ with the heads assertion is in the tree: found
        found = [(rid, c) for rid, c in expected
                 if c.file == "sglang/srt/models/llama.py" and c.name == "LlamaAttention.__init__"
                 and c.contains == ("assert self.total_num_heads % tp_size == 0",)]
        assert found and len(problems) == len(expected) - len(found)
        for rid, c in expected:
            if (rid, c) not in found:
                assert any(p.startswith(f"constraint {rid}: SGLang {version} {c.file} {c.name}: ") for p in problems)
