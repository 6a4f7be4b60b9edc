"""Whether a multi-node tp group can meet, checked before any member stops. Pure: the rules and the
one line that stops the group; the glue (``sglang_deploy/deploy/group_deploy.preflight_callback``)
reads each member's interfaces and opens and reaches rank 0's rendezvous port.

A group that cannot meet hangs at its rendezvous for the timeout after every member has stopped
(SGLang's ranks wait in torch.distributed's TCP store at ``--dist-init-addr``, NCCL's bootstrap then
binds to the interfaces ``NCCL_SOCKET_IFNAME`` names). So before the stop:

- every member reaches rank 0's rendezvous address and port over TCP (a port that a member cannot
  reach, a firewall, an IPv6 address from an IPv4-only member), with the old server listening
  there or, when none is, a listener the glue opens on rank 0 for the check;
- ``NCCL_SOCKET_IFNAME`` matches an interface on every member by NCCL's own rules (src/misc/utils.cc,
  ``parseStringList`` and ``matchIfList``: a comma-separated list of name prefixes, each maybe
  ``:port``; a leading ``^`` excludes them instead, a leading ``=`` asks for exact names);
- ``GLOO_SOCKET_IFNAME`` names interfaces that exist on every member (torch's Gloo takes each name
  of its comma-separated list as a device name).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

#: The glue's bounds: how long a member tries to connect, how long rank 0's own listener lives.
CONNECT_TIMEOUT_S = 5
LISTEN_S = 120
MAX_INTERFACES = 256


def _entries(spec: str) -> list[str]:
    return [e.split(":", 1)[0] for e in spec.split(",") if e.split(":", 1)[0]]


def nccl_matches(spec: str, names: Iterable[str]) -> list[str]:
    """The interfaces NCCL would consider for ``NCCL_SOCKET_IFNAME=spec`` among ``names``."""
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    body = body[1:] if exact else body
    wanted = _entries(body)

    def hit(name: str) -> bool:
        return any(name == w if exact else name.startswith(w) for w in wanted)

    return [n for n in names if hit(n) != exclude]


def gloo_matches(spec: str, names: Iterable[str]) -> list[str]:
    present = set(names)
    return [n for n in spec.split(",") if n in present]


def interface_problems(nccl: str | None, gloo: str | None, names: Sequence[str]) -> list[str]:
    """What is wrong with the planned interface names on a member that has ``names``."""
    shown = ", ".join(sorted(names)[:12]) + (" ..." if len(names) > 12 else "")
    out = []
    if nccl and not nccl_matches(nccl, names):
        out.append(f"NCCL_SOCKET_IFNAME={nccl} matches none of its interfaces ({shown})")
    if gloo:
        missing = [n for n in gloo.split(",") if n and n not in set(names)]
        if missing:
            out.append(f"GLOO_SOCKET_IFNAME={gloo}: no interface {', '.join(missing)} ({shown})")
    return out


def verdict(group: str, address: str, findings: Mapping[str, Sequence[str]]) -> str | None:
    """The one line that stops the group (None: it can meet), members in the order given."""
    bad = [(host, problems) for host, problems in findings.items() if problems]
    if not bad:
        return None
    said = "; ".join(f"{host}: {', '.join(problems)}" for host, problems in bad)
    return (f"tp group {group} cannot meet at {address}: {said}; nothing was stopped or changed on any member")
