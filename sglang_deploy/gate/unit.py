"""The server's systemd unit as the gate watches it: its state from ``systemctl show`` and whether
it is still the unit the deploy started (failed, stopped, restarted, another main process)."""

from __future__ import annotations

from dataclasses import dataclass

UNIT_PROPERTIES = ("ActiveState", "SubState", "Result", "NRestarts", "MainPID")
JOURNAL_LINES = 20


@dataclass(frozen=True)
class UnitStatus:
    active_state: str
    sub_state: str = ""
    result: str = ""
    n_restarts: int | None = None
    main_pid: int | None = None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None


def parse_unit_status(text: str) -> UnitStatus:
    """``systemctl show -p ActiveState -p SubState -p Result -p NRestarts -p MainPID`` output."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return UnitStatus(active_state=values.get("ActiveState", "unknown"), sub_state=values.get("SubState", ""),
                      result=values.get("Result", ""), n_restarts=_int(values.get("NRestarts")),
                      main_pid=_int(values.get("MainPID")) or None)


def unit_failure(first: UnitStatus, now: UnitStatus) -> str | None:
    """Why the unit is not the one that was started (None while it still is)."""
    result = f", result {now.result}" if now.result and now.result != "success" else ""
    if now.active_state == "failed":
        return f"the unit failed{result}"
    if now.sub_state == "auto-restart":
        return f"the server exited and systemd is about to restart it{result}"
    if now.active_state in ("inactive", "deactivating"):
        return f"the unit stopped ({now.active_state}{result})"
    if first.n_restarts is not None and now.n_restarts is not None and now.n_restarts > first.n_restarts:
        return f"systemd restarted it {now.n_restarts - first.n_restarts} time(s) since the deploy started it"
    if first.main_pid and now.main_pid and now.main_pid != first.main_pid:
        return f"its main process changed (PID {first.main_pid} -> {now.main_pid}): it restarted"
    return None
