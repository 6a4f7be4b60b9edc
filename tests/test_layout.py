"""Imports run one way: CLI -> glue (roles/) -> core (sglang_deploy/), never back, and no circles.

The pure core (planning, rendering, the gate's arithmetic and judgements) does no I/O of its
own; the gate's I/O modules talk HTTP, systemd and NVML but never pyinfra; the stand-ins
(sglang_deploy/simulator) are imported by the demo alone, never on the path a real host takes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "sglang_deploy"
TOP_FLOOR = {"cli.py", "demo.py"}  # tie the core to the glue (and, for the demo, to the simulator)
GLUE_AND_IO = {"pyinfra", "pyinfra_cli", "roles", "subprocess", "socket", "httpx", "pynvml", "gevent"}
#: The gate's pure modules: arithmetic, judgements, what follows a verdict, formatting.
GATE_PURE = {"measure.py", "verdict.py", "causes.py", "outcomes.py", "errors.py", "options.py", "report.py",
             "scrub.py", "load.py", "prom.py"}


def _module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, root: Path = ROOT) -> set[str]:
    """Absolute names of everything ``path`` imports (relative imports resolved)."""
    own = _module_name(path, root).split(".")
    package = own if path.name == "__init__.py" else own[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.add(prefix)
            names.update(f"{prefix}.{a.name}" for a in node.names)
    return names


def _tops(names: set[str]) -> set[str]:
    return {n.split(".")[0] for n in names}


def _project_files() -> list[Path]:
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "roles").rglob("*.py"), ROOT / "deploy.py"]
    return [p for p in files if "simulator" not in p.relative_to(ROOT).parts]


def test_core_imports_no_glue_and_no_io_library():
    core = [p for p in PACKAGE.glob("*.py") if p.name not in TOP_FLOOR]
    core += [PACKAGE / "gate" / name for name in GATE_PURE]
    core += list((PACKAGE / "tuning").glob("*.py"))  # the tuner's space, search, records, trials: pure
    assert len(core) >= 17
    for path in core:
        names = imports(path)
        bad = (_tops(names) & GLUE_AND_IO) | {n for n in names if n in ("sglang_deploy.cli", "sglang_deploy.demo")
                                            or n.startswith("sglang_deploy.simulator")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_pure_core_never_imports_the_gates_io():
    pure = [p for p in PACKAGE.glob("*.py") if p.name not in TOP_FLOOR]
    pure += [PACKAGE / "gate" / name for name in GATE_PURE]
    pure += list((PACKAGE / "tuning").glob("*.py"))
    io_modules = {f"sglang_deploy.gate.{p.stem}" for p in (PACKAGE / "gate").glob("*.py")
                  if p.name not in GATE_PURE and p.name != "__init__.py"}
    assert io_modules, "the gate has I/O modules"
    for path in pure:
        bad = {n for n in imports(path) if any(n == m or n.startswith(m + ".") for m in io_modules)}
        assert not bad, f"{path.relative_to(ROOT)} imports the gate's I/O {sorted(bad)}"


def test_the_gates_io_never_imports_pyinfra_or_the_glue():
    for path in (PACKAGE / "gate").glob("*.py"):
        bad = _tops(imports(path)) & {"pyinfra", "pyinfra_cli", "roles", "gevent"}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_glue_never_imports_the_cli():
    for path in (ROOT / "roles").rglob("*.py"):
        bad = {n for n in imports(path) if n.startswith(("sglang_deploy.cli", "sglang_deploy.demo"))}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_only_the_demo_imports_the_simulator_and_nothing_shipped_imports_the_tests():
    """The stand-ins (simulated GPUs, server, hosts) never lie on the path a real host takes."""
    importers = sorted(str(p.relative_to(ROOT)) for p in _project_files()
                       if any(n.startswith("sglang_deploy.simulator") for n in imports(p)))
    assert importers == ["sglang_deploy/demo.py"]
    assert not [p for p in [*_project_files(), *(PACKAGE / "simulator").rglob("*.py")]
                if "tests" in _tops(imports(p))]


def _graph(files: dict[str, Path], root: Path = ROOT) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets = set()
        for imported in imports(path, root):
            # `from pkg import module` names the module; `from module import name` the module.
            while imported and imported not in files:
                imported = imported.rpartition(".")[0]
            if imported and imported != name and not name.startswith(imported + "."):
                targets.add(imported)
        graph[name] = targets - {n for n in targets if files[n].name == "__init__.py"}
    return graph


SIMULATED_SGLANG = PACKAGE / "simulator" / "sglang_server" / "src"


@pytest.mark.parametrize("tree", ["project", "simulated sglang"])
def test_no_import_circles(tree):
    """Type-only imports (under TYPE_CHECKING) count too: a circle is a circle."""
    if tree == "project":
        graph = _graph({_module_name(p): p for p in _project_files()})
    else:
        graph = _graph({_module_name(p, SIMULATED_SGLANG): p for p in SIMULATED_SGLANG.rglob("*.py")},
                       SIMULATED_SGLANG)
        assert len(graph) > 10
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import circle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
