"""Read the secrets a plan references, on the controller, at deploy time.

The plan only knows where a secret comes from (`SecretRef`); the value is
read here, handed to `render()` for the root-only env file, and never logged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping

from sglang_deploy.errors import PlanError
from sglang_deploy.spec import SecretRef


def read_secrets(host: str, refs: Iterable[SecretRef], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Map each secret's env-file variable to its value; a missing one stops the host.
    No error echoes a value."""
    environ = os.environ if environ is None else environ
    values = {}
    for ref in refs:
        field = ref.inventory_field
        if ref.kind == "inline":
            value = ref.value or ""
        elif ref.kind == "env":
            value = environ.get(ref.ref)
            if not value:
                raise PlanError(host, field, f"${ref.ref} is not set in the controller's environment")
        else:
            try:
                value = Path(ref.ref).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise PlanError(host, field, f"cannot read {ref.ref} on the controller: {exc.strerror}") from None
            except UnicodeDecodeError:
                raise PlanError(host, field, f"{ref.ref} is not UTF-8 text") from None
            if not value:
                raise PlanError(host, field, f"{ref.ref} is empty")
        if any(c in value for c in "\r\n"):
            raise PlanError(host, field, f"{ref.describe()} holds more than one line; a secret is one line")
        values[ref.env_var] = value
    return values
