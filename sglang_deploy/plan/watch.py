"""The continuous check's settings (``sglang_watch``), pure: parsed and bounded here, rendered
into its own systemd service and timer by ``render.render_watch``, run on the host by
``sglang_deploy/deploy/host/watch.py``.

The watch is not part of the revision: the revision is what defines the running server (its
unit, env file, nccl.conf and SGLang version), and the watch's units are other units, so
turning it on, off or changing its interval restarts nothing (``revision.decide`` never sees it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.settings import GATE_PREFILL_TOKENS_MAX, WATCH_DEFAULTS, WATCH_SETTINGS
from sglang_deploy.plan.spec_checks import key_text, shown

WATCH_KEYS = tuple(s.name for s in WATCH_SETTINGS)

#: Bounds (seconds): under 10 s the check's own load is most of what it would see; a check
#: less often than daily is not continuous. The timeout bounds one run (TimeoutStartSec).
MIN_INTERVAL_S, MAX_INTERVAL_S = 10, 24 * 3600
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 10, 3600
#: Few tokens: the check measures the decode rate, it does not load the server.
MIN_MAX_TOKENS, MAX_MAX_TOKENS = 2, 256
#: Re-hashing more than 1 TiB per run is a full scan every run, which a deploy does already.
MAX_VERIFY_BYTES = 1 << 40
#: Requests measured per run (besides the gate's warm-up): the median of three short streams.
REPEATS = 3
#: The deploy's own state directory (sglang_deploy.lifecycle.revision.STATE_ROOT, above this floor;
#: tests/test_hostile_writes.py holds the two equal).
STATE_ROOT = "/var/lib/sglang-deploy"

# Where the textfile directory may not be: the root check writes there, its unit opens it for
# writing (ReadWritePaths=) and the deploy makes it. A system tree, or anything under it, is refused,
# and so is the deploy's own state; the directories above these and the shared temp directories
# are refused themselves, their other subdirectories are not: /var/lib/prometheus/node-exporter
# (Debian's default) is allowed. (Under /tmp the unit's PrivateTmp= would hide the file from
# node_exporter anyway; only /tmp itself is refused, since tests render units with one there.)
_TEXTFILE_REFUSED_TREES = ("/etc", "/usr", "/bin", "/sbin", "/boot", "/dev", "/proc", "/sys", "/run", "/var/run",
                           "/var/lock", "/root", STATE_ROOT)
_TEXTFILE_REFUSED_DIRS = ("/", "/tmp", "/var/tmp", "/var", "/var/lib", "/var/log", "/var/cache", "/var/spool",
                          "/var/mail", "/var/opt", "/var/local", "/var/backups", "/home", "/opt", "/srv", "/mnt",
                          "/media", "/snap")
_LIB_TREE = re.compile(r"/lib(?:32|64|x32|o32|n32|exec)?(?=/|$)")  # /lib, /lib64, ... (merged /usr: links)

# A systemd time span as the deploy writes it (systemd.time(7), "Parsing Time Spans"): numbers
# with a unit, optionally several ("1h 30m"); only the units below (no bare number: systemd
# reads one as seconds, which reads wrong next to "15m").
_UNITS = {"s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "minute": 60, "minutes": 60,
          "h": 3600, "hr": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400}
_SPAN = re.compile(r"\s*(\d{1,6})\s*([a-z]+)\s*")


@dataclass(frozen=True)
class WatchSettings:
    """``sglang_watch`` of one host (see docs/watch.md)."""

    interval_s: int = WATCH_DEFAULTS["interval"]
    max_tokens: int = WATCH_DEFAULTS["max_tokens"]
    timeout_s: int = WATCH_DEFAULTS["timeout"]
    textfile_dir: str = WATCH_DEFAULTS["textfile_dir"]
    verify_weights_bytes: int = WATCH_DEFAULTS["verify_weights_bytes"]
    prefill_tokens: int = WATCH_DEFAULTS["prefill_tokens"]  # 0: the check measures no prefill

    def as_dict(self) -> dict[str, Any]:
        return {"interval_s": self.interval_s, "max_tokens": self.max_tokens, "timeout_s": self.timeout_s,
                "textfile_dir": self.textfile_dir, "verify_weights_bytes": self.verify_weights_bytes,
                "prefill_tokens": self.prefill_tokens}


def parse_span(text: str) -> int | None:
    """Seconds of a systemd time span such as ``15m`` or ``1h 30m``; None when it is not one."""
    pos, total = 0, 0
    text = text.strip()
    if not text:
        return None
    while pos < len(text):
        m = _SPAN.match(text, pos)
        if not m or m.group(2) not in _UNITS:
            return None
        total += int(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return total


def span_seconds(host: str, key: str, value: Any, low: int, high: int) -> int:
    """A systemd-style time span (``15m``, ``90s``, ``1h 30m``) or whole seconds, bounded; PlanError
    names the host and ``key``."""
    if isinstance(value, bool):
        value = None
    seconds = value if isinstance(value, int) else parse_span(value) if isinstance(value, str) else None
    if seconds is None:
        raise PlanError(host, key, f"must be a time span such as 15m, 90s or 1h (or whole seconds), got {shown(value)}")
    if not low <= seconds <= high:
        raise PlanError(host, key, f"must be between {low} s and {high} s, got {shown(value)} ({seconds} s)")
    return seconds


def whole_number(host: str, key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(host, key, f"must be a whole number, got {shown(value)}")
    if not low <= value <= high:
        raise PlanError(host, key, f"must be between {low} and {high}, got {value}")
    return value


def absolute_dir(host: str, key: str, value: Any) -> str:
    """An absolute directory of plain characters, without ``..`` or ``.`` parts."""
    if (not isinstance(value, str) or not re.fullmatch(r"/[A-Za-z0-9_./@+-]*", value) or "/../" in f"{value}/"
            or "/./" in f"{value}/"):
        raise PlanError(host, key, "must be an absolute path of letters, digits and _ . / @ + - (no '..'), "
                                   f"got {shown(value)}")
    return value.rstrip("/") or "/"


def textfile_directory(host: str, key: str, value: Any) -> str:
    """The textfile directory: an absolute directory (``absolute_dir``, repeated slashes folded) that
    is no system directory, none above one, not a shared temp directory itself and neither the
    deploy's state directory, under it nor above it; PlanError names the host and ``key``."""
    path = re.sub("/+", "/", absolute_dir(host, key, value))
    refused = next((tree for tree in _TEXTFILE_REFUSED_TREES if path == tree or path.startswith(tree + "/")), None)
    if refused is None and (lib := _LIB_TREE.match(path)):
        refused = lib.group(0)
    if refused is not None:
        raise PlanError(host, key, f"must not be {refused} or under it (a system directory, or the deploy's "
                                   "state: the root check would write into it and its unit open it for writing), "
                                   f"got {shown(value)}")
    if path in _TEXTFILE_REFUSED_DIRS or STATE_ROOT.startswith(path + "/"):
        raise PlanError(host, key, f"must not be {path} itself (a system or shared temp directory, or one "
                                   f"above the deploy's state {STATE_ROOT}); name a directory of its own such as "
                                   f"{WATCH_DEFAULTS['textfile_dir']}, got {shown(value)}")
    return path


def watch_settings(host: str, data: Mapping[str, Any]) -> WatchSettings | None:
    """``sglang_watch`` from a host's merged data: None when off (unset, null or false), the
    defaults for ``true``, else the mapping's keys checked and bounded; PlanError names the host
    and ``sglang_watch.<key>``."""
    raw = data.get("sglang_watch")
    if raw is None or raw is False:
        return None
    if raw is True:
        settings = WatchSettings()
    elif not isinstance(raw, Mapping):
        raise PlanError(host, "sglang_watch", f"must be true, false or a mapping with keys {', '.join(WATCH_KEYS)}, "
                                              f"got {shown(raw)}")
    else:
        for key in raw:
            if key not in WATCH_KEYS:
                raise PlanError(host, f"sglang_watch.{key_text(key)}",
                                f"unknown watch setting; known: {', '.join(WATCH_KEYS)}")
        get = {**WATCH_DEFAULTS, **raw}.get
        settings = WatchSettings(
            interval_s=span_seconds(host, "sglang_watch.interval", get("interval"), MIN_INTERVAL_S, MAX_INTERVAL_S),
            max_tokens=whole_number(host, "sglang_watch.max_tokens", get("max_tokens"), MIN_MAX_TOKENS, MAX_MAX_TOKENS),
            timeout_s=span_seconds(host, "sglang_watch.timeout", get("timeout"), MIN_TIMEOUT_S, MAX_TIMEOUT_S),
            textfile_dir=textfile_directory(host, "sglang_watch.textfile_dir", get("textfile_dir")),
            verify_weights_bytes=whole_number(host, "sglang_watch.verify_weights_bytes", get("verify_weights_bytes"), 0,
                                        MAX_VERIFY_BYTES),
            prefill_tokens=whole_number(host, "sglang_watch.prefill_tokens", get("prefill_tokens"), 0,
                                        GATE_PREFILL_TOKENS_MAX),
        )
    if data.get("sglang_tp_group") is not None:
        raise PlanError(host, "sglang_watch", "is not supported on a member of a multi-node tp group yet (its "
                                              "ranks other than 0 serve no API to measure)")
    return settings
