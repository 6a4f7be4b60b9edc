"""Every citation of ``sglang_deploy/data/constraints.yaml`` found in an unpacked wheel's source.

A constraint row mirrors SGLang code; its ``cites`` name, per version the row claims, the file
inside the wheel (``sglang/srt/...py``) and the dotted name there (``ModelConfig._verify_quantization``,
``LlamaAttention.__init__``, a module-level function or assignment), and optionally source
fragments (``contains``) that the cited definition must still hold (whitespace ignored), so a
citation that survives a refactor but no longer does what the row says fails too.

Standard library only (``ast``; the wheel is parsed, never imported). ``missing`` lists what is
not there; ``scripts/catalogs/cli.py`` runs it on every version's wheel (``--check-citations``, and
with every ``--check-argv``, which CI runs per version in scripts/check_plans_against_real_parsers.py).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Iterable, Iterator, Protocol, Sequence


class CitationLike(Protocol):
    file: str
    name: str
    versions: tuple[str, ...]
    contains: tuple[str, ...]


class RowLike(Protocol):
    id: str
    cites: Sequence[CitationLike]


def _definitions(body: Iterable[ast.stmt]) -> Iterator[tuple[str, ast.stmt]]:
    """(name, node) of the definitions in a body: classes, functions, assigned names; looking into
    ``if``/``try``/``with`` blocks at the same level (module code often defines in them)."""
    for stmt in body:
        if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield stmt.name, stmt
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    yield target.id, stmt
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            yield stmt.target.id, stmt
        elif isinstance(stmt, ast.If):
            yield from _definitions(stmt.body)
            yield from _definitions(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody, *(h.body for h in stmt.handlers)):
                yield from _definitions(block)
        elif isinstance(stmt, ast.With):
            yield from _definitions(stmt.body)


def resolve(tree: ast.Module, dotted: str) -> list[ast.stmt]:
    """Every definition ``dotted`` names in ``tree`` (several where a name is defined per platform
    branch): each part is a class, function or assigned name in the body of the one before."""
    scopes: list[ast.Module | ast.stmt] = [tree]
    for part in dotted.split("."):
        found: list[ast.stmt] = []
        for scope in scopes:
            body = getattr(scope, "body", None)
            if not isinstance(body, list):
                continue
            found += [node for name, node in _definitions(body) if name == part]
        if not found:
            return []
        scopes = list(found)
    return [s for s in scopes if isinstance(s, ast.stmt)]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _holds(text: str, node: ast.stmt, fragment: str) -> bool:
    segment = ast.get_source_segment(text, node) or ""
    # black wraps long conditions in parentheses: compare without whitespace, and with the
    # wrapping parentheses dropped when the fragment has none
    have, want = _squash(segment), _squash(fragment)
    return want in have or ("(" not in want and want in have.replace("(", "").replace(")", ""))


def missing(src: Path, version: str, rows: Iterable[RowLike]) -> list[str]:
    """One line per citation of ``rows`` for ``version`` that the unpacked wheel at ``src`` lacks:
    row, version, file and name (and the fragments the definition no longer holds)."""
    problems: list[str] = []
    parsed: dict[str, tuple[str, ast.Module] | None] = {}
    for row in rows:
        for cite in row.cites:
            if version not in cite.versions:
                continue
            where = f"constraint {row.id}: SGLang {version} {cite.file} {cite.name}"
            if cite.file not in parsed:
                path = src / cite.file
                parsed[cite.file] = None
                if path.is_file():
                    text = path.read_text(encoding="utf-8-sig")
                    parsed[cite.file] = (text, ast.parse(text, filename=cite.file))
            entry = parsed[cite.file]
            if entry is None:
                problems.append(f"{where}: the file is not in the wheel")
                continue
            text, tree = entry
            nodes = resolve(tree, cite.name)
            if not nodes:
                problems.append(f"{where}: no such definition in the file")
                continue
            lost = [f for f in cite.contains if not any(_holds(text, node, f) for node in nodes)]
            if lost:
                problems.append(f"{where}: the definition no longer holds {', '.join(map(repr, lost))}")
    return problems
