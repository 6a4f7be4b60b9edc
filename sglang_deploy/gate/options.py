"""What one gate run is asked to do (``sglang-deploy check`` and the deploy's gate), and
the checks on those options that need no server."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence
from urllib.parse import urlsplit

from . import verdict
from .errors import GateError


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
    concurrency: int = 1
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


def validate(opts: CheckOptions) -> None:
    """Raise GateError naming the option when one is out of range."""
    try:
        parts = urlsplit(opts.url)
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise GateError("--url", f"{_shown_url(opts.url)!r} is not an http(s) URL with a host and a valid port")
    for name, value, low in (("--repeats", opts.repeats, 1), ("--max-tokens", opts.max_tokens, 2),
                             ("--concurrency", opts.concurrency, 1)):
        if value < low:
            raise GateError(name, f"must be at least {low}, got {value}")
    if not 0 <= opts.tolerance < 1:
        raise GateError("--tolerance", f"must be between 0 and 1 (a fraction), got {opts.tolerance}")
    if opts.target_tok_s is not None and not (math.isfinite(opts.target_tok_s) and opts.target_tok_s > 0):
        raise GateError("--target", f"must be a number > 0, got {opts.target_tok_s}")
    if not (math.isfinite(opts.ready_timeout) and opts.ready_timeout >= 0):
        raise GateError("--ready-timeout", f"must be a number >= 0, got {opts.ready_timeout}")
    if not (math.isfinite(opts.stall_timeout) and opts.stall_timeout > 0):
        raise GateError("--stall-timeout", f"must be a number > 0, got {opts.stall_timeout}")


def _shown_url(url: str) -> str:
    """``url`` without the password of its userinfo (an error names the URL)."""
    head, at, host = url.rpartition("@")
    if not at or ":" not in head.split("//", 1)[-1]:
        return url
    scheme, _, userinfo = head.rpartition("//")
    user = userinfo.split(":", 1)[0]
    return f"{scheme}//{user}:***@{host}" if scheme else f"{user}:***@{host}"
