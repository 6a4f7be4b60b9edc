"""How a gate ends before the verdict of its figures: it could not measure (exit 2), or the
server's unit went down while it measured (verdict ``fail``, exit 1)."""

from __future__ import annotations


class GateError(Exception):
    """The gate could not measure (exit 2): unreachable, never ready, bad
    arguments, an HTTP error or a broken stream mid-measurement."""

    def __init__(self, step: str, message: str):
        super().__init__(message)
        self.step = step
        self.message = message

    def __str__(self) -> str:
        return f"{self.step}: {self.message}"


class ServiceDown(Exception):
    """The server's unit failed or restarted while the gate watched it."""

    def __init__(self, unit: str, reason: str, journal: str = ""):
        super().__init__(f"{unit}: {reason}")
        self.unit, self.reason, self.journal = unit, reason, journal
