"""The house's floors, as path rules: commands -> deploy -> status / lifecycle -> plan / gate / tuning -> core ->
hostrules.

- hostrules (``sglang_deploy/hostrules/``): the rules a GPU host is judged by, standard library
  alone: `status` imports them on the controller, the continuous check on the host (shipped there
  as a zip; ``deploy/host/watch.py`` and its modules may import this package and one another, nothing
  else of the project);

- core: the modules at the top of ``sglang_deploy/`` (errors, untrusted input, unit syntax,
  secrets, waves, downtime): the standard library and PyYAML, nothing of the floors above;
- gate (``sglang_deploy/gate/``): the post-deploy check, a leaf: it imports the core alone, so
  the zipapp that runs it on a GPU host carries neither the planner nor Jinja2; its pure modules
  (arithmetic, judgements, formatting) do no I/O;
- plan (``sglang_deploy/plan/``): the planner, pure: core and the gate's pure modules;
- tuning (``sglang_deploy/tuning/``): the search, pure: core, plan and the gate's pure modules;
- lifecycle (``sglang_deploy/lifecycle/``): a unit's life on its host, pure: revisions, what follows
  the gate, the drain's state machine, the replica units that stop first; core, gate, plan;
- status (``sglang_deploy/status/``): `status`'s judgement of a host, pure: what it sent, checked,
  against today's plan; core, gate, plan, hostrules (its table is the command's);
- deploy (``sglang_deploy/deploy/``): the pyinfra glue; ``deploy/host/`` holds files run on the
  GPU host itself, standard library only;
- commands (``sglang_deploy/commands/``): the top floor (CLI, demo, rollout, tune runners).

No arrow points up, there is no circle between files, and the stand-ins
(``sglang_deploy/simulator``) are imported by the demo alone.
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import pytest

from sglang_deploy.deploy.hostscript import PARTS as HOST_PARTS

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "sglang_deploy"
FLOORS = ("hostrules", "core", "gate", "plan", "tuning", "lifecycle", "status", "deploy", "commands")  # bottom to top
#: The floors each floor may import (besides its own).
ALLOWED = {
    "hostrules": set(),
    "core": {"hostrules"},
    "gate": {"core", "hostrules"},
    "plan": {"core", "gate", "hostrules"},
    "tuning": {"core", "gate", "plan", "hostrules"},
    "lifecycle": {"core", "gate", "plan", "hostrules"},
    "status": {"core", "gate", "plan", "hostrules"},
    "deploy": {"core", "gate", "plan", "tuning", "lifecycle", "status", "hostrules"},
    "commands": {"core", "gate", "plan", "tuning", "lifecycle", "status", "deploy", "simulator", "hostrules"},
}
IO_LIBRARIES = {"pyinfra", "pyinfra_cli", "subprocess", "socket", "httpx", "pynvml", "gevent", "jinja2"}
#: The gate's pure modules: arithmetic, judgements, what a verdict means, formatting.
GATE_PURE = {"measure.py", "verdict.py", "causes.py", "outcomes.py", "errors.py", "options.py", "report.py",
             "scrub.py", "load.py", "prom.py", "unit.py", "predicted.py", "figures.py"}
#: The planner's only module that does I/O of its own: rendering through Jinja2 templates.
PLAN_IO = {"render.py": {"jinja2"}}


def _module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, root: Path = ROOT) -> frozenset[str]:
    """Absolute names of everything ``path`` imports (relative imports resolved)."""
    return _imports(path, root)


@functools.cache  # each file is parsed once per run, not once per rule that reads it
def _imports(path: Path, root: Path) -> frozenset[str]:
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
    return frozenset(names)


def _tops(names: set[str]) -> set[str]:
    return {n.split(".")[0] for n in names}


def floor_of(path: Path) -> str:
    """The floor a file of the package lives on, from its path alone."""
    parts = path.relative_to(PACKAGE).parts
    return "core" if len(parts) == 1 else parts[0]


def _floor_of_module(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "sglang_deploy" or len(parts) == 1:
        return None
    if parts[1] in FLOORS or parts[1] == "simulator":
        return parts[1]
    return "core"


def _project_files() -> list[Path]:
    files = [*PACKAGE.rglob("*.py"), ROOT / "deploy.py"]
    return [p for p in files if "simulator" not in p.relative_to(ROOT).parts]


def _package_files() -> list[Path]:
    return [p for p in _project_files() if p.is_relative_to(PACKAGE)]


def test_every_file_of_the_package_stands_on_a_floor():
    floors = {floor_of(p) for p in _package_files()}
    assert floors == set(FLOORS), floors
    assert not (ROOT / "roles").exists(), "one package: no top-level roles/"


@pytest.mark.parametrize("floor", FLOORS)
def test_no_arrow_points_up(floor):
    files = [p for p in _package_files() if floor_of(p) == floor]
    assert files
    for path in files:
        for name in imports(path):
            target = _floor_of_module(name)
            if target is None or target == floor:
                continue
            assert target in ALLOWED[floor], f"{path.relative_to(ROOT)} ({floor}) imports {name} ({target})"


def test_deploy_py_is_one_import_of_the_deploy_package():
    names = imports(ROOT / "deploy.py")
    assert names and all(n.startswith("sglang_deploy.deploy") for n in names), names


def test_the_pure_floors_do_no_io():
    """Core, plan (but rendering's templates), tuning and the gate's pure modules never import
    pyinfra, an I/O library or the gate's I/O modules."""
    gate_io = {f"sglang_deploy.gate.{p.stem}" for p in (PACKAGE / "gate").glob("*.py")
               if p.name not in GATE_PURE and p.name != "__init__.py"}
    assert gate_io, "the gate has I/O modules"
    pure = [p for p in _package_files()
            if floor_of(p) in ("hostrules", "core", "plan", "tuning", "lifecycle", "status")]
    pure += [PACKAGE / "gate" / name for name in GATE_PURE]
    assert len(pure) >= 40
    for path in pure:
        names = imports(path)
        allowed_io = PLAN_IO.get(path.name, set()) if floor_of(path) == "plan" else set()
        bad = (_tops(names) & (IO_LIBRARIES - allowed_io))
        bad |= {n for n in names if any(n == m or n.startswith(m + ".") for m in gate_io)}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_gates_io_never_imports_pyinfra():
    for path in (PACKAGE / "gate").glob("*.py"):
        bad = _tops(imports(path)) & {"pyinfra", "pyinfra_cli", "gevent", "jinja2"}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_files_run_on_the_host_need_the_standard_library_alone():
    """deploy/host/ files are shipped to the GPU host as scripts: nothing of the package or a
    third-party library is importable there."""
    files = sorted((PACKAGE / "deploy" / "host").glob("*.py"))
    assert len(files) >= 5
    # What the host's own environment may have: NVIDIA's bindings (tried first, where present);
    # the argv proof runs with the SGLang venv's Python, inside SGLang; the gateway's launcher with
    # the sglang-router venv's, inside the router.
    stdlib = set(sys.stdlib_module_names) | {"__future__", "pynvml"}
    host_side = {"prove_argv.py": {"sglang", "torch"}, "gateway_launch.py": {"sglang_router"}}
    from sglang_deploy.deploy.watching import WATCH_MODULES
    own = {Path(name).stem for name in WATCH_MODULES}
    assert own and not own & set(sys.stdlib_module_names), own  # their folder comes first on sys.path
    for path in files:
        if path.name == "__init__.py":
            continue
        outside = {n for n in _tops(imports(path)) if n not in stdlib | host_side.get(path.name, set())}
        if path.name in ("watch.py", *WATCH_MODULES):
            # the rules, shipped beside watch.py as a zip (deploy/watching.py RULES_ZIP), and its own
            # modules, copied beside it (WATCH_MODULES): imported by name there, from this package here
            project = {n for n in imports(path) if n.split(".")[0] == "sglang_deploy"}
            allowed = ("sglang_deploy.hostrules", *(f"sglang_deploy.deploy.host.{m}" for m in own))
            assert all(n.startswith(allowed) for n in project), project
            assert path.name != "watch.py" or any(n.startswith("sglang_deploy.hostrules") for n in project)
            outside -= {"sglang_deploy", *own}
        if path.name in HOST_PARTS:  # its parts, shipped with it as a zip (deploy/hostscript.py PARTS)
            parts = f"sglang_deploy.deploy.host.{HOST_PARTS[path.name]}"
            project = {n for n in imports(path) if n.split(".")[0] == "sglang_deploy"}
            assert project and all(n.startswith(parts + ".") for n in project), project
            outside -= {"sglang_deploy"}
        assert not outside, f"{path.relative_to(ROOT)} imports {sorted(outside)}"


def test_the_parts_of_host_scripts_need_the_standard_library_alone():
    """A host script's parts (a package of deploy/host/) travel with it as a zip and nothing else of
    the package does: they import the standard library and one another alone, and deploy/host/
    holds no package that is not some script's parts."""
    host = PACKAGE / "deploy" / "host"
    packages = {p.name for p in host.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert packages == set(HOST_PARTS.values()), packages
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for package in packages:
        files = sorted((host / package).glob("*.py"))
        assert len(files) >= 2
        for path in files:
            outside = {n for n in imports(path) if n.split(".")[0] not in stdlib
                       and not n.startswith(f"sglang_deploy.deploy.host.{package}")}
            assert not outside, f"{path.relative_to(ROOT)} imports {sorted(outside)}"


def test_the_host_rules_need_the_standard_library_alone():
    """sglang_deploy/hostrules travels to the host as a zip on its own: nothing else of the package."""
    files = sorted((PACKAGE / "hostrules").glob("*.py"))
    assert len(files) >= 2
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for path in files:
        outside = {n for n in imports(path) if n.split(".")[0] not in stdlib
                   and not n.startswith("sglang_deploy.hostrules")}
        assert not outside, f"{path.relative_to(ROOT)} imports {sorted(outside)}"


def test_only_the_demo_imports_the_simulator_and_nothing_shipped_imports_the_tests():
    """The stand-ins (simulated GPUs, server, hosts) never lie on the path a real host takes;
    scripts and benchmarks import the package, never the tests."""
    importers = sorted(str(p.relative_to(ROOT)) for p in _project_files()
                       if any(n.startswith("sglang_deploy.simulator") for n in imports(p)))
    # the demo alone: the command (its local fallback) and its throwaway host
    assert importers == ["sglang_deploy/commands/demo.py", "sglang_deploy/commands/demo_host.py"]
    tools = [*(ROOT / "scripts").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
    assert not [p for p in [*_project_files(), *(PACKAGE / "simulator").rglob("*.py"), *tools]
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


def test_no_product_file_over_600_lines():
    """A file of the package over 600 lines holds more than one job: split it by what each part does."""
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert not long, long
