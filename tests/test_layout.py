"""Imports run one way: CLI -> glue (roles/) -> core (sglang_deploy/), never back."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP_FLOOR = {"cli.py", "gatecheck.py", "demo.py"}  # ties core and glue together
FORBIDDEN_IN_CORE = {"pyinfra", "pyinfra_cli", "roles", "subprocess", "socket", "httpx", "pynvml"}


def imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
            elif node.level == 1 and node.module:
                names.add("." + node.module.split(".")[0])
    return names


def test_core_imports_no_glue_and_no_io_library():
    core = [p for p in (ROOT / "sglang_deploy").glob("*.py") if p.name not in TOP_FLOOR]
    assert len(core) >= 8
    for path in core:
        bad = imports(path) & (FORBIDDEN_IN_CORE | {".cli", ".demo"})
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_glue_never_imports_the_cli():
    for path in (ROOT / "roles").glob("*.py"):
        assert "sglang_deploy.cli" not in path.read_text(), path


def test_only_the_demo_imports_the_test_tree():
    """The stand-ins (simulated GPUs and server) never lie on the path a real host takes."""
    shipped = [*(ROOT / "sglang_deploy").glob("*.py"), *(ROOT / "roles").rglob("*.py"), ROOT / "deploy.py"]
    importers = sorted(p.name for p in shipped if "tests" in imports(p))
    assert importers == ["demo.py"]
