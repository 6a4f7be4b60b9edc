"""The README is a front door and docs/ holds the reference: every repository path they name in
backticks exists, every relative link resolves, the README stays short, and every page of docs/
is reachable from the README or the docs index."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sglang_deploy.plan import layers

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_LINES = 260
PAGES = sorted([README, *DOCS.glob("*.md")])
#: Where a repository path starts; ``data/...`` is short for ``sglang_deploy/data/...``.
PREFIXES = ("sglang_deploy/", "tests/", "benchmarks/", "templates/", "inventory/", "scripts/", "docs/", "data/")
#: Files the tool writes into a checkout, named in the docs but never committed.
WRITTEN_BY_THE_TOOL = {"inventory/a6000.tuning.yaml"}


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks (a command line or a tree there is not a path claim)."""
    return re.sub(r"^[ \t]*```.*?^[ \t]*```", "", text, flags=re.M | re.S)  # indented too (inside a list item)


def repository_paths(text: str) -> set[str]:
    """Every word of an inline code span that names a file or folder of the repository."""
    found = set()
    for span in re.findall(r"`([^`]+)`", _prose(text)):
        for word in span.split():
            word = word.strip(".,;:()[]'\"").split("::")[0]
            if word == "deploy.py" or word.startswith(PREFIXES):
                found.add(word)
    return found


def _exists(path: str) -> bool:
    if path in WRITTEN_BY_THE_TOOL:
        return True
    if path.startswith("data/"):
        path = "sglang_deploy/" + path
    # a placeholder (<version>, <org>--<name>) or a glob (sm*.yaml) must match something
    pattern = re.sub(r"<[^>]*>", "*", path.rstrip("/"))
    if "*" in pattern:
        return any(ROOT.glob(pattern))
    return (ROOT / pattern).exists()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_page_names_exists(page):
    missing = sorted(p for p in repository_paths(page.read_text()) if not _exists(p))
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    links = re.findall(r"\]\(([^)\s]+)\)", _prose(page.read_text()))
    broken = [link for link in links
              if not re.match(r"[a-z]+:", link) and not link.startswith("#")
              and not (page.parent / link.split("#")[0]).exists()]
    assert not broken, f"{page.relative_to(ROOT)}: links to nothing: {broken}"


def test_the_readme_is_a_front_door():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the reference belongs in docs/"


def test_every_docs_page_is_linked_from_the_readme_or_the_index():
    linked = set()
    for page in (README, DOCS / "README.md"):
        for link in re.findall(r"\]\(([^)\s#]+)", page.read_text()):
            linked.add((page.parent / link).resolve())
    orphans = sorted(p.name for p in DOCS.glob("*.md") if p.name != "README.md" and p.resolve() not in linked)
    assert not orphans, f"docs pages linked from neither README.md nor docs/README.md: {orphans}"


def test_the_checker_sees_paths():
    text = "see `sglang_deploy/plan/settings.py` and `pyinfra inventory/a6000.py deploy.py`,\n```\nnot/me.py\n```\n"
    assert repository_paths(text) == {"sglang_deploy/plan/settings.py", "inventory/a6000.py", "deploy.py"}
    assert _exists("data/arch/sm*.yaml") and _exists("sglang_deploy/data/catalogs/sglang-<version>.json")
    assert not _exists("sglang_deploy/cli.py") and not _exists("roles/")


@pytest.mark.parametrize("name", layers.DOCS_FILES)
def test_the_layer_stack_in_the_docs_is_generated_from_the_planners_own_value(name):
    """README.md and docs/planning.md show the layers as the planner applies them
    (sglang_deploy/plan/layers.py); `python -m sglang_deploy.plan.layers --update-docs` rewrites them."""
    text = (ROOT / name).read_text()
    assert "<!-- layer chain: generated" in text or "<!-- layer stack: generated" in text, name
    assert layers.regenerate(text) == text, (
        f"{name}: the layer stack is out of date: run `python -m sglang_deploy.plan.layers --update-docs`")
    assert layers.chain() in text or all(f"`{n}`" in text for n in layers.NAMES)


def test_regenerating_rewrites_a_stale_stack_and_refuses_a_marker_without_its_end():
    start, end = layers._markers("layer chain")
    stale = f"order: {start}`arch` < `host`{end}.\n"
    assert layers.regenerate(stale) == f"order: {start}{layers.chain()}{end}.\n"
    with pytest.raises(ValueError, match="end layer chain"):
        layers.regenerate(f"order: {start}`arch`\n")
