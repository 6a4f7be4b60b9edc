"""Read the secrets a plan references, on the controller, at deploy time.

The plan only knows where a secret comes from (`SecretRef`); the value is
read here, handed to `render()` for the root-only env file, and never logged.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.spec import SecretRef
from sglang_deploy.untrusted import MAX_SECRET_BYTES, UntrustedInput, check_token, read_text_file


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
            found = environ.get(ref.ref)
            if not found:
                raise PlanError(host, field, f"${ref.ref} is not set in the controller's environment")
            value = found
        else:
            # A regular file only (a FIFO or a device is refused, never read), of secret size.
            try:
                value = read_text_file(ref.ref, "secret", MAX_SECRET_BYTES).strip()
            except UntrustedInput as exc:
                raise PlanError(host, field, f"{str(exc).removeprefix('secret: ')} (on the controller)") from None
            if not value:
                raise PlanError(host, field, f"{ref.ref} is empty")
        if any(c in value for c in "\r\n"):
            raise PlanError(host, field, f"{ref.describe()} holds more than one line; a secret is one line")
        if ref.kind != "inline":
            # sglang_secrets travel in HTTP headers (the Hub token, the API key): visible ASCII
            # only; the message never quotes the value.
            try:
                check_token(value, ref.describe())
            except UntrustedInput as exc:
                raise PlanError(host, field, str(exc)) from None
        values[ref.env_var] = value
    return values
