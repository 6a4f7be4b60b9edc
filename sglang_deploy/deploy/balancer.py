"""HAProxy's runtime API on a gateway host (its admin socket, ``stats socket ... level admin``), from
the deploy: a router drained (no new request), put in maintenance, made ready again, and each
router's state and current sessions read (``show stat``). Commands and fields are HAProxy 2.6's
(doc/management.txt: "set server <backend>/<server> state [ ready | drain | maint ]", "show stat",
its CSV fields ``scur`` and ``status``).

The socket is root-readable on the host only: commands go through the host's connection, sent by
the router's virtualenv Python (isolated, standard library). What comes back is untrusted: at most
``MAX_REPLY_BYTES`` are read, and only the backend's own rows are parsed.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from typing import Callable

from sglang_deploy.plan.gateway import GatewaySettings
from sglang_deploy.plan.gateway_tier import BACKEND, admin_socket, router_name

MAX_REPLY_BYTES = 1 << 20
MAX_ROWS = 4096
_SEND = ("import socket,sys\n"
         "s=socket.socket(socket.AF_UNIX);s.settimeout(10);s.connect(sys.argv[1]);"
         "s.sendall(sys.argv[2].encode()+b'\\n');b=b''\n"
         f"while len(b)<{MAX_REPLY_BYTES}:\n"
         " c=s.recv(65536)\n"
         " if not c:break\n"
         " b+=c\n"
         "sys.stdout.write(b[:" + str(MAX_REPLY_BYTES) + "].decode('utf-8','replace'))\n")

Run = Callable[[str], "tuple[bool, str]"]


class BalancerError(Exception):
    """The balancer's admin socket could not be used, or said no."""


@dataclass(frozen=True)
class ServerState:
    """One router as HAProxy sees it: ``status`` (UP, DOWN, DRAIN, MAINT, "UP 1/2", ...) and its
    current sessions (``scur``)."""

    status: str
    sessions: int

    @property
    def up(self) -> bool:
        return self.status == "UP"


def parse_stat(text: str) -> dict[str, ServerState]:
    """``show stat``'s CSV: server name -> its state, for the routers' backend only."""
    lines = text.splitlines()[:MAX_ROWS]
    if not lines or not lines[0].startswith("# "):
        raise BalancerError(f"show stat: not HAProxy's CSV: {lines[0][:120]!r}" if lines else "show stat: no answer")
    header = lines[0][2:].split(",")
    try:
        px, sv, cur, st = (header.index(k) for k in ("pxname", "svname", "scur", "status"))
    except ValueError:
        raise BalancerError("show stat: the header lacks pxname, svname, scur or status") from None
    out: dict[str, ServerState] = {}
    for line in lines[1:]:
        fields = line.split(",")
        if len(fields) < len(header) or fields[px] != BACKEND or fields[sv] in ("BACKEND", "FRONTEND"):
            continue
        name = fields[sv][:64]
        sessions = int(fields[cur]) if fields[cur].isdigit() and len(fields[cur]) < 10 else 0
        out[name] = ServerState(status=fields[st][:32], sessions=sessions)
    return out


class Balancer:
    """The admin socket of one gateway host's HAProxy, through ``run`` (a shell command on the
    host: (succeeded, stdout))."""

    def __init__(self, run: Run, settings: GatewaySettings):
        self.run, self.settings = run, settings

    def command(self, text: str) -> str:
        ok, out = self.run(f"{shlex.quote(self.settings.python)} -I -c {shlex.quote(_SEND)} "
                           f"{shlex.quote(admin_socket(self.settings))} {shlex.quote(text)}")
        if not ok:
            raise BalancerError(f"{text}: the admin socket {admin_socket(self.settings)} cannot be reached")
        return out

    def servers(self) -> dict[str, ServerState]:
        return parse_stat(self.command("show stat"))

    def set_state(self, index: int, state: str) -> None:
        """``state``: ready, drain or maint."""
        reply = self.command(f"set server {BACKEND}/{router_name(index)} state {state}").strip()
        if reply:  # HAProxy answers an accepted command with nothing
            raise BalancerError(f"set server {router_name(index)} state {state}: {reply[:200]}")

    def wait_idle(self, index: int, timeout_s: float, poll_s: float = 0.25) -> tuple[bool, int]:
        """Until router ``index`` holds no session (twice in a row), or ``timeout_s``: (idle, the
        last count)."""
        deadline = time.monotonic() + timeout_s
        zeros, last = 0, -1
        while True:
            state = self.servers().get(router_name(index))
            last = state.sessions if state is not None else 0
            zeros = zeros + 1 if last == 0 else 0
            if zeros >= 2:
                return True, 0
            if time.monotonic() > deadline:
                return False, last
            time.sleep(poll_s)

    def wait_up(self, indexes: tuple[int, ...], timeout_s: float, poll_s: float = 0.25) -> dict[str, ServerState]:
        """Until HAProxy's checks count every router of ``indexes`` UP; BalancerError past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            servers = self.servers()
            waiting = [router_name(i) for i in indexes if not (servers.get(router_name(i)) or
                                                               ServerState("absent", 0)).up]
            if not waiting:
                return servers
            if time.monotonic() > deadline:
                seen = ", ".join(f"{n} {servers[n].status if n in servers else 'absent'}" for n in waiting)
                raise BalancerError(f"not UP in the balancer within {timeout_s:g} s: {seen}")
            time.sleep(poll_s)
