"""The replica units a host runs now that must stop before its first replica goes live: those the
plan no longer runs, and those whose GPUs or port a replica restarted before them takes. The
planning of replicas (how many, their specs) is the planner's (``sglang_deploy.plan.replicas``);
this is the restart's: what the host lists (untrusted, checked here) against what is planned.

Pure: the host's listing and the planned (GPUs, port) in, the units to stop out.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

from sglang_deploy.plan.replicas import MAX_PORT

# A host's units of replicas past the first, as the host lists them ("<service>-dp<i>.service"):
# at most this many are read (a host runs at most one replica per GPU).
MAX_UNITS_READ = 256
_UNIT = re.compile(r"^(?P<base>[A-Za-z0-9@._-]+)-dp(?P<i>[1-9][0-9]{0,3})\.service$")


@dataclasses.dataclass(frozen=True)
class Retired:
    """A replica unit on the host that must stop before the first replica goes live."""

    unit: str  # its service name (no ".service")
    index: int
    port: int | None  # as its unit gives it (None: not read as a port)
    remove: bool  # True: the plan no longer runs it (unit, env file, state removed); False: stopped only,
    #               its own restart later in the step starts it on its new GPUs or port


def _port(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_PORT
    return value if ok else None


def _gpus(value: Any) -> frozenset[int] | None:
    if not isinstance(value, (list, tuple)) or not value or len(value) > MAX_UNITS_READ:
        return None
    if not all(isinstance(g, int) and not isinstance(g, bool) and 0 <= g < 1024 for g in value):
        return None
    return frozenset(value)


def stale_units(service: str, found: Sequence[tuple[Any, Any, Any]],
                planned: Sequence[tuple[Sequence[int], int]]) -> tuple[Retired, ...]:
    """The replica units on the host that must stop before the host's first replica goes live.

    ``found``: what the host lists (unit file name, the port its ExecStart gives, the GPUs its env
    file gives): untrusted, checked here. ``planned``: each planned replica's (GPUs, port), in
    order (one entry for a host of one server, which runs no ``-dp`` unit).

    - ``<service>-dp<i>`` with i past the planned replicas: the plan no longer runs it (removed).
    - a replica the plan still runs whose GPUs or port, as it runs now, are a replica's that goes
      live before it (the replicas restart in order, each on its own block): it would hold them when
      that one starts (a TP or replica count that changed), so it stops first (and restarts in its
      own turn). GPUs that do not read are checked by port alone.
    In replica order, at most ``MAX_UNITS_READ`` read."""
    count = len(planned)
    out = []
    for name, port, gpus in list(found)[:MAX_UNITS_READ]:
        m = _UNIT.match(name) if isinstance(name, str) else None
        if m is None or m.group("base") != service:
            continue
        index, old_port, old_gpus = int(m.group("i")), _port(port), _gpus(gpus)
        if index >= count:
            out.append(Retired(name[:-len(".service")], index, old_port, remove=True))
            continue
        before = planned[:index]
        if any(old_port == p or (old_gpus is not None and old_gpus & set(g)) for g, p in before):
            out.append(Retired(name[:-len(".service")], index, old_port, remove=False))
    return tuple(sorted(out, key=lambda r: r.index))
