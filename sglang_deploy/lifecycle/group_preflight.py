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
  of its comma-separated list as a device name);
- the interfaces those name are up and hold an address of the rendezvous address's family (an
  IPv6 ``--dist-init-addr`` needs an inet6 address on them, an IPv4 one inet);
- every member's clock agrees with rank 0's within ``CLOCK_BOUND_S``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

#: The glue's bounds: how long a member tries to connect, how long rank 0's own listener lives.
CONNECT_TIMEOUT_S = 5
LISTEN_S = 120
MAX_INTERFACES = 256
#: How far a member's clock may be from rank 0's. Neither SGLang's rendezvous nor NCCL needs the
#: clocks to agree; the people reading a failed group do: each member's journal and restart stamps
#: are in its own clock, and they are read side by side (rank 0's failure line carries the failed
#: member's journal). A member minutes off has lost its time service, which NTP otherwise keeps
#: within milliseconds; 10 s leaves room for the measurement's own error (half an SSH round trip).
CLOCK_BOUND_S = 10.0
_IFNAME = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")


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


@dataclass(frozen=True)
class Interface:
    """One of a member's network interfaces: its operstate (``/sys/class/net/<name>/operstate``) and
    the address families it holds (``ip -o addr``: inet, inet6); ``families`` None: not read."""

    name: str
    state: str
    families: frozenset[str] | None = None

    @property
    def up(self) -> bool:
        return self.state in ("up", "unknown")  # the loopback and some virtual links say unknown


def family_of(address: str) -> str | None:
    """inet or inet6 for an IP address literal; None for a host name (resolved by the members)."""
    try:
        return "inet6" if ipaddress.ip_address(address.strip("[]")).version == 6 else "inet"
    except ValueError:
        return None


def interface_problems(nccl: str | None, gloo: str | None, interfaces: Sequence[Interface],
                       family: str | None = None) -> list[str]:
    """What is wrong with the planned interface names on a member that has ``interfaces``: a name
    that matches none, or only interfaces that are down or hold no address of the rendezvous
    address's ``family``."""
    names = [i.name for i in interfaces]
    shown = ", ".join(sorted(names)[:12]) + (" ..." if len(names) > 12 else "")
    by_name = {i.name: i for i in interfaces}
    out = []

    def holds(i: Interface) -> bool:
        return family is None or i.families is None or family in i.families

    def described(i: Interface) -> str:
        fams = "" if i.families is None else f", {'/'.join(sorted(i.families)) or 'no address'}"
        return f"{i.name} ({i.state}{fams})"

    def unusable(matched: Sequence[str]) -> str | None:
        if any(by_name[n].up and holds(by_name[n]) for n in matched):
            return None
        said = ", ".join(described(by_name[n]) for n in matched)
        want = f"up with an {'IPv6' if family == 'inet6' else 'IPv4'} address" if family else "up"
        return f"matches {said}, none {want}"

    if nccl:
        matched = nccl_matches(nccl, names)
        why = f"matches none of its interfaces ({shown})" if not matched else unusable(matched)
        if why:
            out.append(f"NCCL_SOCKET_IFNAME={nccl} {why}")
    if gloo:
        missing = [n for n in gloo.split(",") if n and n not in by_name]
        if missing:
            out.append(f"GLOO_SOCKET_IFNAME={gloo}: no interface {', '.join(missing)} ({shown})")
        else:
            why = unusable([n for n in gloo.split(",") if n])
            if why:
                out.append(f"GLOO_SOCKET_IFNAME={gloo} {why}")
    return out


def parse_interfaces(lines: Sequence[str]) -> list[Interface]:
    """The glue's ``NAME STATE [FAMILY ...]`` lines (one per interface, at most MAX_INTERFACES), a
    name of what the kernel allows, a state and families of the words ``ip`` prints; others skipped.
    A line that ends in ``-`` read no addresses (``ip`` missing)."""
    out = []
    for line in lines[:MAX_INTERFACES]:
        words = line.split()
        if len(words) < 2 or not _IFNAME.fullmatch(words[0]) or not words[1].isalpha() or len(words[1]) > 16:
            continue
        fams = words[2:]
        families = None if fams == ["-"] else frozenset(f for f in fams if f in ("inet", "inet6"))
        out.append(Interface(words[0], words[1].lower(), families))
    return out


def clock_problems(offsets: Mapping[str, float], leader: str) -> dict[str, str]:
    """Members whose clock is more than CLOCK_BOUND_S off rank 0's (each offset measured from the
    controller over one SSH round trip, its half the error, within the bound)."""
    base = offsets.get(leader)
    if base is None:
        return {}
    return {m: f"its clock is {off - base:+.0f} s off rank 0's (at most {CLOCK_BOUND_S:g} s)"
            for m, off in offsets.items() if m != leader and abs(off - base) > CLOCK_BOUND_S}


def verdict(group: str, address: str, findings: Mapping[str, Sequence[str]]) -> str | None:
    """The one line that stops the group (None: it can meet), members in the order given."""
    bad = [(host, problems) for host, problems in findings.items() if problems]
    if not bad:
        return None
    said = "; ".join(f"{host}: {', '.join(problems)}" for host, problems in bad)
    return (f"tp group {group} cannot meet at {address}: {said}; nothing was stopped or changed on any member")
