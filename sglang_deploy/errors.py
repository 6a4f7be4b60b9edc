"""Errors a user can cause, each naming the host and the field it is about."""

from __future__ import annotations


class PlanError(ValueError):
    """Bad input for one host: inventory data, probe data or a CLI choice.

    The message always reads ``host <name>: <field>: <what is wrong>`` so an
    operator of a fleet knows where to look without a traceback.
    """

    def __init__(self, host: str, field: str, message: str) -> None:
        self.host = host
        self.field = field
        self.message = message
        super().__init__(f"host {host}: {field}: {message}")
