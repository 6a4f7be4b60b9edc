"""The end-to-end files' fixed server ports never collide: the session's throwaway hosts share
this machine's network and keep serving until the session ends, so two files on one port make
the second one's server fail to listen."""

from __future__ import annotations

import ast
from pathlib import Path

E2E = Path(__file__).resolve().parent / "e2e"


def module_ports(path: Path) -> set[int]:
    """Integer constants in 30000-32767 assigned at module level (PORT = 31811, PORTS = {... 31820 + i})."""
    ports = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            ports |= {n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
                      and isinstance(n.value, int) and not isinstance(n.value, bool) and 30000 <= n.value < 32768}
    return ports


def test_no_two_e2e_files_share_a_port():
    seen: dict[int, str] = {}
    files = sorted(E2E.glob("test_*.py"))
    assert len(files) >= 5
    for path in files:
        for port in module_ports(path):
            assert port not in seen, f"port {port}: {seen[port]} and {path.name}"
            seen[port] = path.name
    assert len(seen) >= 4
