"""Fleet rollout order: waves, failure budget and the summary. Pure: no I/O.

Waves follow Ansible's ``serial``: a list of sizes, each a host count (``1``)
or a percentage of all hosts in the rollout (``25%``, rounded down, at least
one host); the last size repeats until every host has a wave. The default is a
canary of one, then a quarter at a time. A ``canary`` inventory group, when
present, is the first wave in place of the first size. Hosts keep inventory
order.

A multi-node tensor-parallel group (hosts sharing ``sglang_tp_group``) is one
unit: never split over waves. A group that does not fit in what is left of a
wave starts the next one; a group larger than a wave's size gets a wave of its
own (the only way a wave exceeds its size, and the plan says so).

Workers of a gateway (``sglang_gateways``) leave it while they restart, so a wave is split
further into sub-waves, one after another, holding at most ``max_unavailable`` workers of any
one gateway (a count, or a percentage of the gateway's workers, at least one); a TP group is one
worker and stays whole, and the workers of a gateway restart in inventory order.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from sglang_deploy.untrusted import shown

DEFAULT_WAVES = ("1", "25%")
CANARY_GROUP = "canary"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%?)\s*$", re.ASCII)
#: The largest host count a wave size or max_unavailable may name: far above any fleet, and
#: bounded so that a typo of hundreds of digits is refused by name, never turned into a float
#: that overflows (int(inf)) or a wave of 10^300 hosts.
MAX_COUNT = 1_000_000
#: The longest text of one size (a count, a percentage with decimals, white space around).
_MAX_SIZE_TEXT = 1000


class WaveError(ValueError):
    """Bad wave settings; the message names the setting."""


@dataclass(frozen=True)
class Size:
    value: float
    percent: bool

    def hosts(self, total: int) -> int:
        if self.percent:
            return max(1, int(total * self.value / 100))
        return int(self.value)

    def __str__(self) -> str:
        return f"{self.value:g}%" if self.percent else f"{int(self.value)}"


def parse_sizes(spec: str | int | Sequence[str | int], setting: str = "--waves") -> tuple[Size, ...]:
    """``"1,25%"``, ``[1, "25%"]`` or ``3`` -> sizes; counts >= 1, percentages in (0, 100]."""
    if isinstance(spec, bool):
        raise WaveError(f"{setting}: expected counts and percentages such as 1,25%, got {spec!r}")
    items: Iterable[Any]
    if isinstance(spec, (int, float)):
        items = [spec]
    elif isinstance(spec, str):
        items = spec.split(",")
    else:
        items = spec
    sizes = []
    for item in items:
        value, percent = _size(item, setting)
        if percent and not 0 < value <= 100:
            raise WaveError(f"{setting}: {value:g}% is not a percentage in (0, 100]")
        if not percent and (value < 1 or value != int(value)):
            raise WaveError(f"{setting}: {value:g} is not a whole number of hosts >= 1")
        sizes.append(Size(value, percent))
    if not sizes:
        raise WaveError(f"{setting}: no sizes given")
    return tuple(sizes)


def _size(item: Any, setting: str) -> tuple[float, bool]:
    """One size's number and whether it is a percentage, bounded before any arithmetic: a count
    above MAX_COUNT (whatever its length: a YAML integer of 400 digits, a flag of 10^300) is
    refused by name, never handed to float() or int() where it would overflow."""
    if isinstance(item, bool) or not isinstance(item, (str, int, float)):
        raise WaveError(f"{setting}: {shown(item)} is neither a host count (e.g. 2) nor a percentage (e.g. 25%)")
    if isinstance(item, int) and item > MAX_COUNT:  # bounded before repr(): no 10^5-digit text
        raise WaveError(f"{setting}: {shown(item)} is too large: at most {MAX_COUNT} hosts")
    text = item if isinstance(item, str) else repr(item)
    m = _SIZE.match(text) if len(text) <= _MAX_SIZE_TEXT else None
    if not m:
        raise WaveError(f"{setting}: {shown(text.strip())} is neither a host count (e.g. 2) nor a "
                        f"percentage (e.g. 25%)")
    number, percent = m.group(1), bool(m.group(2))
    if len(number.partition(".")[0].lstrip("0")) > len(str(MAX_COUNT)) or float(number) > MAX_COUNT:
        raise WaveError(f"{setting}: {shown(text.strip())} is too large: at most {MAX_COUNT} hosts, or "
                        f"a percentage up to 100%")
    return float(number), percent


@dataclass(frozen=True)
class Wave:
    number: int  # from 1
    hosts: tuple[str, ...]
    size: int  # what the wave's setting allows
    reason: str  # "canary group", "size 1", "25% of 8 = 2", ...

    @property
    def oversized(self) -> bool:
        return len(self.hosts) > self.size


def plan_waves(hosts: Sequence[str], sizes: Sequence[Size] = (), canary: Sequence[str] = (),
               units: Mapping[str, str] | None = None) -> list[Wave]:
    """Split ``hosts`` (inventory order) into waves. ``canary``: hosts of the canary
    group; ``units``: host -> TP group name for hosts that must stay together."""
    sizes = tuple(sizes) or parse_sizes(",".join(DEFAULT_WAVES))
    if len(set(hosts)) != len(hosts):
        raise WaveError("hosts: a host is listed twice")
    total = len(hosts)
    units = dict(units or {})
    # the units in order: a TP group where its first member stands, with all its members
    order = _worker_units(hosts, units)

    waves: list[Wave] = []
    remaining = list(order)
    size_iter = list(sizes)
    if canary:
        unknown = [h for h in canary if h not in hosts]
        if unknown:
            raise WaveError(f"canary group: {', '.join(unknown)} not among the hosts of this rollout")
        chosen = [u for u in remaining if any(h in canary for h in u)]
        first = tuple(h for u in chosen for h in u)
        remaining = [u for u in remaining if u not in chosen]
        pulled = [h for h in first if h not in canary]
        reason = "canary group" + (f" (with the rest of TP group(s) of {', '.join(pulled)})" if pulled else "")
        waves.append(Wave(1, first, len(canary), reason))
        size_iter = size_iter[1:] or size_iter[-1:]

    k = 0
    while remaining:
        size = size_iter[min(k, len(size_iter) - 1)]
        allowed = size.hosts(total)
        wave: list[str] = []
        while remaining:
            unit = remaining[0]
            if wave and len(wave) + len(unit) > allowed:
                break
            wave.extend(unit)
            remaining.pop(0)
            if len(wave) >= allowed:
                break
        reason = f"{size} of {total} = {allowed}" if size.percent else f"size {allowed}"
        if len(wave) > allowed:
            reason += f" (exceeded by TP group {units.get(wave[0])}, never split)"
        waves.append(Wave(len(waves) + 1, tuple(wave), allowed, reason))
        k += 1
    return waves


# ---------------------------------------------------------------------------
# Workers of a gateway: at most max_unavailable of them out at once

def parse_max_unavailable(spec: str | int, setting: str = "sglang_rollout.max_unavailable") -> Size:
    """``2`` or ``"25%"``: how many workers of one gateway may restart at once (a count >= 1, or a
    percentage in (0, 100] of the gateway's workers, rounded down, at least one)."""
    if isinstance(spec, (list, tuple)) or (isinstance(spec, str) and "," in spec):
        raise WaveError(f"{setting}: one count or percentage (e.g. 1 or 25%), got {spec!r}")
    (size,) = parse_sizes(spec, setting)
    return size


def agreed_setting(rollouts: Mapping[str, Any], key: str, known: Sequence[str]) -> Any:
    """One ``sglang_rollout`` setting of the fleet, from each host's ``sglang_rollout`` (host ->
    its value, None when unset; inventory order): every host that sets it must agree, since it is
    the fleet's, not a host's. None when no host sets it. WaveError names the host or the hosts."""
    values = {}
    for host, raw in rollouts.items():
        if raw is None:
            continue
        if not isinstance(raw, Mapping):
            raise WaveError(f"{host}: sglang_rollout: must be a mapping {{{', '.join(known)}}}")
        unknown = sorted(str(k) for k in set(raw) - set(known))
        if unknown:
            raise WaveError(f"{host}: sglang_rollout.{unknown[0]}: unknown setting; known: {', '.join(known)}")
        if key in raw:
            values[host] = raw[key]
    texts = set()
    for host, value in values.items():
        try:
            texts.add(json.dumps(value, sort_keys=True, default=repr))
        except ValueError:  # an integer past Python's limit on the digits it converts to text
            raise WaveError(f"{host}: sglang_rollout.{key}: holds a number of thousands of digits") from None
    if len(texts) > 1:
        listed = ", ".join(f"{k}={shown(v)}" for k, v in values.items())
        raise WaveError(f"sglang_rollout.{key}: hosts disagree ({listed}); set it once for the whole inventory")
    return next(iter(values.values())) if values else None


def gateway_allowance(size: Size, workers: int) -> int:
    """Workers of a gateway with ``workers`` workers that may be out at once (at least one)."""
    return max(1, size.hosts(workers))


def _worker_units(hosts: Sequence[str], units: Mapping[str, str]) -> list[list[str]]:
    """``hosts`` grouped into workers: a TP group's members together, where its first member stands."""
    order: list[list[str]] = []
    members: dict[str, list[str]] = {}
    for h in hosts:
        g = units.get(h)
        if g is None:
            order.append([h])
        elif g in members:
            members[g].append(h)
        else:
            members[g] = [h]
            order.append(members[g])
    return order


def gateway_worker_counts(memberships: Mapping[str, Sequence[str]], units: Mapping[str, str] | None = None
                          ) -> dict[str, int]:
    """Gateway -> its number of workers, over the whole fleet (``memberships``: host -> its
    gateways); a TP group is one worker, whichever of its members name the gateway."""
    units = units or {}
    workers: dict[str, set[str]] = {}
    for h, gateways in memberships.items():
        for g in gateways:
            workers.setdefault(g, set()).add(f"group {units[h]}" if units.get(h) is not None else f"host {h}")
    return {g: len(w) for g, w in workers.items()}


def split_for_gateways(hosts: Sequence[str], memberships: Mapping[str, Sequence[str]], max_unavailable: Size,
                       units: Mapping[str, str] | None = None,
                       worker_counts: Mapping[str, int] | None = None,
                       roles: Mapping[str, str] | None = None) -> list[tuple[str, ...]]:
    """Split one wave's ``hosts`` (inventory order) into sub-waves, run one after another, so that
    no gateway has more than its allowance of its workers in one sub-wave.

    ``memberships``: host -> the gateways it is a worker of (hosts absent or with none are not
    constrained and go to the first sub-wave); ``units``: host -> TP group name (a group stays in
    one sub-wave and counts as one worker, of every gateway any member names); ``worker_counts``:
    gateway -> its workers over the whole fleet, which a percentage is of (default: counted from
    ``memberships`` by :func:`gateway_worker_counts`, so pass the fleet's, not just the wave's).

    ``roles``: host -> ``prefill`` or ``decode`` (``sglang_role``, over the whole fleet): a gateway's
    servers of one role count as a gateway of their own whose allowance also leaves one of them
    serving (a gateway of prefill and decode servers answers a request only through one of each).

    Each worker goes to the earliest sub-wave that has room in all of its gateways and is not
    before the sub-wave of an earlier worker of one of them, so the workers of a gateway restart
    in inventory order. Hosts keep inventory order inside a sub-wave."""
    if len(set(hosts)) != len(hosts):
        raise WaveError("hosts: a host is listed twice")
    units = dict(units or {})
    counts = dict(worker_counts) if worker_counts is not None else gateway_worker_counts(memberships, units)
    allowance: dict[str, int] = {}
    if roles:  # each (gateway, role) as a gateway of its own, under a name no host has (a NUL in it)
        by_role = {h: [f"{g}\0{roles[h]}" for g in gs] for h, gs in memberships.items() if roles.get(h)}
        for key, n in gateway_worker_counts(by_role, units).items():
            allowance[key] = max(1, min(gateway_allowance(max_unavailable, n), n - 1))
        memberships = {h: (*gs, *by_role.get(h, ())) for h, gs in memberships.items()}
    subwaves: list[list[str]] = []
    used: list[dict[str, int]] = []  # per sub-wave: gateway -> workers in it
    last: dict[str, int] = {}  # gateway -> the latest sub-wave holding one of its workers
    for unit in _worker_units(hosts, units):
        gateways = sorted({g for h in unit for g in memberships.get(h, ())})
        for g in gateways:
            if g not in allowance:
                allowance[g] = gateway_allowance(max_unavailable, max(counts.get(g, 0), 1))
        k = max((last.get(g, 0) for g in gateways), default=0)
        while k < len(subwaves) and any(used[k].get(g, 0) >= allowance[g] for g in gateways):
            k += 1
        if k == len(subwaves):
            subwaves.append([])
            used.append({})
        subwaves[k].extend(unit)
        for g in gateways:
            used[k][g] = used[k].get(g, 0) + 1
            last[g] = k
    position = {h: i for i, h in enumerate(hosts)}
    return [tuple(sorted(w, key=position.__getitem__)) for w in subwaves if w]


# ---------------------------------------------------------------------------
# Failure budget and summary
# ---------------------------------------------------------------------------

GOOD_RESULTS = ("passed", "unchanged")
NOT_REACHED = "not reached"


def wave_failures(records: Mapping[str, Mapping[str, Any]], wave: Wave) -> list[str]:
    """Hosts of ``wave`` that did not end on a proven revision (no record counts as a failure)."""
    return [h for h in wave.hosts if (records.get(h) or {}).get("result") not in GOOD_RESULTS]


def over_budget(failures: Sequence[str], max_fail: int) -> bool:
    return len(failures) > max_fail


def budget_exceeded(wave: Wave, failures: Sequence[str], max_fail: int) -> str:
    """What a wave over its failure budget did, in words (the rollout's halt reason)."""
    return (f"wave {wave.number} had {len(failures)} failure(s), more than --max-fail {max_fail}: "
            f"{', '.join(failures)}")


@dataclass
class Summary:
    hosts: list[dict[str, Any]] = field(default_factory=list)
    waves: list[dict[str, Any]] = field(default_factory=list)
    completed: bool = False  # every wave ran
    halted: str | None = None  # why the rollout stopped before its last wave
    over_budget: str | None = None  # the wave that failed more hosts than the budget allows, in words

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for h in self.hosts:
            out[h["result"]] = out.get(h["result"], 0) + 1
        return dict(sorted(out.items()))

    def state(self) -> str:
        """How the rollout ended, in words."""
        if not self.completed:
            return f"HALTED: {self.halted}"
        if self.over_budget:
            return f"completed with failures beyond the budget in the last wave ({self.over_budget})"
        return "completed"

    def exit_code(self) -> int:
        """1 halted, interrupted or over the failure budget (even in the last wave, where
        nothing was left to halt); 3 completed with failures within the budget; 0 every
        host passed or was already deployed."""
        if not self.completed or self.over_budget:
            return 1
        return 3 if any(h["result"] not in GOOD_RESULTS for h in self.hosts) else 0

    def as_dict(self) -> dict[str, Any]:
        return {"completed": self.completed, "halted": self.halted, "over_budget": self.over_budget,
                "totals": self.totals(), "waves": self.waves, "hosts": self.hosts}


def host_row(wave: int | None, host: str, record: Mapping[str, Any] | None, why_missing: str | None = None
             ) -> dict[str, Any]:
    """One host's line of the summary: its deploy record, or why there is none."""
    if record is None:
        return {"host": host, "wave": wave, "result": NOT_REACHED if wave is None else "failed",
                "old_revision": None, "new_revision": None, "running_revision": None,
                "summary": why_missing or ("not reached: the rollout stopped before its wave" if wave is None
                                           else "no result from the deploy (see its output)"),
                "decode_tok_s": None, "target_tok_s": None, "baseline_best_tok_s": None, "serving_gap_s": None}
    row = {k: record.get(k) for k in ("host", "result", "old_revision", "new_revision", "running_revision",
                                        "summary", "decode_tok_s", "target_tok_s", "baseline_best_tok_s",
                                        "serving_gap_s")}
    row["wave"] = wave
    return row


def format_summary(summary: Summary) -> str:
    def f(x: Any) -> str:
        return "-" if x is None else (f"{x:.1f}" if isinstance(x, float) else str(x))

    rows = [("wave", "host", "result", "old rev", "new rev", "tok/s", "target", "baseline", "gap s")]
    for h in summary.hosts:
        gap = h.get("serving_gap_s")
        rows.append((f(h["wave"]), h["host"], h["result"], f(h["old_revision"]), f(h["new_revision"]),
                     f(h["decode_tok_s"]), f(h["target_tok_s"]), f(h["baseline_best_tok_s"]),
                     "-" if gap is None else f"{gap:.2f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for h in summary.hosts:
        if h["result"] not in GOOD_RESULTS:
            lines.append(f"  {h['host']}: {h['summary']}")
    totals = ", ".join(f"{n} {k}" for k, n in summary.totals().items())
    lines.append(f"rollout {summary.state()}; {len(summary.hosts)} host(s): {totals}")
    return "\n".join(lines) + "\n"
