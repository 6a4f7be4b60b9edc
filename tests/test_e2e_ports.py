"""The end-to-end files' fixed server ports never collide: the session's throwaway hosts share
this machine's network and keep serving until the session ends, so two files on one port make
the second one's server fail to listen."""

from __future__ import annotations

import ast
from pathlib import Path

from sglang_deploy.simulator.testbed.host import PORT_RANGE
from tests.conftest import FREE_PORTS, free_port

E2E = Path(__file__).resolve().parent / "e2e"


#: A port computed as BASE + i (PORTS = {... 31820 + i}) counts as BASE .. BASE + this.
OFFSET_SPAN = 16


def _port(n: ast.AST) -> int | None:
    ok = isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool)
    return n.value if ok and 30000 <= n.value < 32768 else None


def module_ports(path: Path) -> set[int]:
    """Integer constants in 30000-32767 assigned at module level (PORT = 31811), and for a
    constant plus an offset (PORTS = {... 31820 + i}) the span above it."""
    ports = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            for n in ast.walk(node):
                if _port(n) is not None:
                    ports.add(_port(n))
                if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) and _port(n.left) is not None:
                    ports |= set(range(_port(n.left), _port(n.left) + OFFSET_SPAN + 1))
    return ports


def test_no_throwaway_hosts_sshd_can_take_a_fixed_port():
    """The testbed draws its hosts' sshd ports at random from PORT_RANGE while other files' hosts
    serve on their fixed ports: the two ranges must not meet (a drawn port free at boot would
    make the server that comes later fail to listen)."""
    low, high = PORT_RANGE
    for path in sorted(E2E.glob("test_*.py")):
        inside = sorted(p for p in module_ports(path) if low <= p < high)
        assert not inside, f"{path.name}: fixed port(s) {inside} inside the testbed's sshd range {PORT_RANGE}"


def test_no_two_e2e_files_share_a_port():
    seen: dict[int, str] = {}
    files = sorted(E2E.glob("test_*.py"))
    assert len(files) >= 5
    for path in files:
        for port in module_ports(path):
            assert port not in seen, f"port {port}: {seen[port]} and {path.name}"
            seen[port] = path.name
    assert len(seen) >= 4


def test_no_e2e_file_takes_a_port_of_the_benchmarks_band():
    """benchmarks/smoke.py keeps the benchmarks' fixed ports in BENCH_PORTS and refuses an e2e file's
    there: caught here too, before a CI run gets that far."""
    from benchmarks.smoke import BENCH_PORTS
    for path in sorted(E2E.glob("test_*.py")):
        inside = sorted(p for p in module_ports(path) if p in BENCH_PORTS)
        assert not inside, f"{path.name}: fixed port(s) {inside} inside the benchmarks' band {BENCH_PORTS}"


def test_a_tests_own_servers_listen_apart_from_every_other_port_drawn_here():
    """free_port draws below the kernel's ephemeral range (outgoing connections take their local
    ports there), below the testbed's sshd range and below every e2e file's fixed port."""
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low = int(ephemeral.read_text().split()[0]) if ephemeral.exists() else 32768
    assert FREE_PORTS.stop <= low and FREE_PORTS.stop <= PORT_RANGE[0]
    fixed = {p for path in E2E.glob("test_*.py") for p in module_ports(path)}
    assert fixed and min(fixed) >= FREE_PORTS.stop
    assert all(p in FREE_PORTS for p in (free_port() for _ in range(20)))
