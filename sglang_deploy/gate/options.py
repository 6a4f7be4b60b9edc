"""What one gate run is asked to do (``sglang-deploy check`` and the deploy's gate), and
the checks on those options that need no server."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence
from urllib.parse import urlsplit

from sglang_deploy.gate import load, verdict
from sglang_deploy.gate.errors import GateError
from sglang_deploy.gate.scrub import redact_url


class UnitWatch(Protocol):
    """The server's unit, read during the gate (``watch.SystemdWatch``): ``check`` raises
    ``ServiceDown`` once the unit failed or restarted."""

    every_s: float

    def check(self, force: bool = False) -> None: ...


@dataclass
class CheckOptions:
    url: str
    target_tok_s: float | None = None
    baseline: str | None = None
    tolerance: float = 0.10
    # one level, or several (``--concurrency 1,8,32``); level 1 is the single-stream run, and
    # the report's aggregate_tok_s / concurrency are the highest level's
    concurrency: int | tuple[int, ...] = 1
    model: str | None = None
    expect: str | None = None  # path of `sglang-deploy plan --json` output
    expect_host: str | None = None
    fail_on: frozenset[str] = verdict.DEFAULT_FAIL_ON
    ready_timeout: float = 600.0
    repeats: int = 5
    max_tokens: int = 256
    api_key: str | None = field(default=None, repr=False)
    hardware: str | None = None
    nvml: bool = False
    stall_timeout: float = 60.0
    record: bool = False
    prompts: Sequence[str] | None = None  # default: the shipped gate_prompts.yaml
    expect_plan: dict[str, Any] | None = field(default=None, repr=False)  # a plan object itself (wins over expect)
    # The server's systemd unit, watched on every readiness poll and, from a thread, about once
    # a second through the measurement: a failed or restarted unit ends the gate at once with
    # verdict "fail" and the journal tail (a crashed server is neither slow nor unmeasurable).
    watch: UnitWatch | None = field(default=None, repr=False)
    # service-level objectives, ``<metric>_p<q>`` (metric ttft|itl|tpot|e2e, q 50|90|99) -> seconds
    slo: dict[str, float] = field(default_factory=dict)
    # (objective decode|throughput|goodput, value): stop measuring once an optimistic bound of the
    # objective from the requests so far is below the value (a tuning trial that cannot win)
    abandon_below: tuple[str, float] | None = None

    @property
    def levels(self) -> tuple[int, ...]:
        """The concurrency levels measured, ascending, 1 always among them."""
        return load.levels(self.concurrency)


#: Upper bounds that catch a typo (an extra digit) before it turns into a gate that
#: runs for days; generous for any real measurement.
LIMITS = {"--repeats": 1000, "--max-tokens": 1 << 20, "--concurrency": 1024}
MAX_SECONDS = 7 * 24 * 3600.0


def validate(opts: CheckOptions) -> None:
    """Raise GateError naming the option when one is out of range, empty or, for the URL,
    not parsable. (The files it names: ``files.check_files``.)"""
    _validate_url(opts.url)
    _validate_numbers(opts)
    for name, value in (("--model", opts.model), ("--expect", opts.expect), ("--host", opts.expect_host),
                        ("--baseline", opts.baseline), ("--hardware", opts.hardware)):
        if value is not None and not str(value).strip():
            raise GateError(name, "is empty")


def _validate_url(url: str) -> None:
    shown = redact_url(url)
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        raise GateError("--url", f"{shown!r} holds white space or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number in range
    except ValueError as exc:
        raise GateError("--url", f"{shown!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise GateError("--url", f"{shown!r} is not an http(s) URL")
    if not parts.hostname:
        raise GateError("--url", f"{shown!r} names no host")


def _validate_numbers(opts: CheckOptions) -> None:
    conc = opts.concurrency if isinstance(opts.concurrency, (tuple, list)) else (opts.concurrency,)
    if not conc:
        raise GateError("--concurrency", "names no level")
    for name, value, low in (("--repeats", opts.repeats, 1), ("--max-tokens", opts.max_tokens, 2),
                             *(("--concurrency", c, 1) for c in conc)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise GateError(name, f"must be a whole number, got {value!r}")
        if value < low:
            raise GateError(name, f"must be at least {low}, got {value}")
        if value > LIMITS[name]:
            raise GateError(name, f"must be at most {LIMITS[name]}, got {value}")
    if not (math.isfinite(opts.tolerance) and 0 <= opts.tolerance < 1):
        raise GateError("--tolerance", f"must be between 0 and 1 (a fraction), got {opts.tolerance}")
    if opts.target_tok_s is not None and not (math.isfinite(opts.target_tok_s) and opts.target_tok_s > 0):
        raise GateError("--target", f"must be a finite number > 0, got {opts.target_tok_s}")
    if not (math.isfinite(opts.ready_timeout) and 0 <= opts.ready_timeout <= MAX_SECONDS):
        raise GateError("--ready-timeout", f"must be between 0 and {MAX_SECONDS:g} s, got {opts.ready_timeout}")
    try:
        load.check_slo(opts.slo)
    except (ValueError, AttributeError) as exc:
        raise GateError("--slo", str(exc)) from None
    _validate_abandon(opts)
    if not (math.isfinite(opts.stall_timeout) and 0 < opts.stall_timeout <= MAX_SECONDS):
        raise GateError("--stall-timeout", f"must be > 0 and at most {MAX_SECONDS:g} s, got {opts.stall_timeout}")


def _validate_abandon(opts: CheckOptions) -> None:
    if opts.abandon_below is None:
        return
    try:
        objective, value = opts.abandon_below
    except (TypeError, ValueError):
        raise GateError("abandon_below", f"must be (objective, value), got {opts.abandon_below!r}") from None
    if objective not in load.OBJECTIVES:
        raise GateError("abandon_below", f"unknown objective {objective!r}; known: {', '.join(load.OBJECTIVES)}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise GateError("abandon_below", f"the threshold must be a finite number, got {value!r}")
    if objective == "goodput" and not opts.slo:
        raise GateError("abandon_below", "the goodput objective needs SLOs (--slo)")
