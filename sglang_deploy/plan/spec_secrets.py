"""The inventory settings that may carry a secret: ``sglang_secrets`` (where the controller reads
the token and the API key), ``sglang_env`` (the service's environment; a credential there is a
secret, kept out of plans) and ``sglang_extra_args`` (a flag that takes a secret is refused). No
error here echoes a value that may be one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.settings import DEFAULTS
from sglang_deploy.plan.spec_checks import ENV_OVERRIDES_KEY, check_owned_env, env_overrides, key_text
from sglang_deploy.plan.spec_values import check_text
from sglang_deploy.secrecy import CREDENTIAL_NAME, SECRET_FLAGS, URL_CREDENTIALS, secret_flag, type_name

# Secrets the server may need: data key -> environment variable in the env file.
SECRET_ENV = {
    "hf_token": "HF_TOKEN",
    "api_key": "SGLANG_API_KEY",
}

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class SecretRef:
    """Where the controller reads a secret; the value itself never lives in a plan."""

    name: str
    env_var: str
    kind: str  # "env" (controller environment), "file" (a file on the controller) or "inline" (sglang_env)
    ref: str
    # kind "inline" only: the value given in inventory data, which goes to the env file alone
    value: str | None = field(default=None, repr=False, compare=False)

    @property
    def inventory_field(self) -> str:
        """The inventory field that names this secret, for error messages."""
        return f"sglang_env.{self.env_var}" if self.kind == "inline" else f"sglang_secrets.{self.name}"

    def describe(self) -> str:
        where = {"env": f"controller environment ${self.ref}", "file": f"controller file {self.ref}",
                 "inline": "inventory data (sglang_env; a credential, so kept out of plans)"}[self.kind]
        return f"{self.env_var} from {where}"


def extra_args_of(host: str, data: Mapping[str, Any]) -> tuple[str, ...]:
    extra = data.get("sglang_extra_args") or DEFAULTS["sglang_extra_args"]
    if isinstance(extra, str) or not isinstance(extra, (list, tuple)):
        raise PlanError(host, "sglang_extra_args", "must be a list of strings, one argument each, "
                        "e.g. ['--max-prefill-tokens', '16384']")
    for i, arg in enumerate(extra):
        if not isinstance(arg, str):  # not echoed: it may be the value of a secret flag
            raise PlanError(host, f"sglang_extra_args[{i}]", f"must be a string, got {type_name(arg)}")
        check_text(host, f"sglang_extra_args[{i}]", arg)
        flag = secret_flag(arg)
        if flag is not None:
            spelled = "" if arg.split("=", 1)[0] == flag else f" ({arg.split('=', 1)[0]} abbreviates it)"
            raise PlanError(host, f"sglang_extra_args[{i}]",
                            f"{flag}{spelled} takes a secret, which would be in the unit, the plan and the "
                            f"server's argv; {SECRET_FLAGS[flag]}")
    return tuple(extra)


def _env_entries(host: str, data: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    """``sglang_env`` checked: (name, value, is a secret) each. A secret is an entry whose name
    looks like a credential or whose value holds a URL with credentials."""
    env = data.get("sglang_env") or DEFAULTS["sglang_env"]
    if not isinstance(env, Mapping):
        raise PlanError(host, "sglang_env", "must be a mapping of NAME -> value")
    entries = []
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise PlanError(host, f"sglang_env.{key_text(name)}", "not a valid environment variable name")
        if name in SECRET_ENV.values():
            raise PlanError(host, f"sglang_env.{name}", "is a secret: name its source in sglang_secrets instead, "
                            "so it stays out of inventory files and plan output")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):  # not echoed: it may be a secret
            raise PlanError(host, f"sglang_env.{name}", f"must be a string or number, got {type_name(value)}")
        text = check_text(host, f"sglang_env.{name}", str(value))
        entries.append((name, text, bool(CREDENTIAL_NAME.search(name) or URL_CREDENTIALS.search(text))))
    return entries


def extra_env_of(host: str, data: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The service environment from ``sglang_env``, less the secrets (``secrets_of`` takes those),
    and the warnings about the overrides it declares (``sglang_env_overrides``)."""
    entries = _env_entries(host, data)
    every = {name: value for name, value, _ in entries}
    overrides = env_overrides(host, data.get(ENV_OVERRIDES_KEY), every)
    warnings = check_owned_env(host, every, overrides)
    return {name: value for name, value, secret in entries if not secret}, warnings


def secrets_of(host: str, data: Mapping[str, Any]) -> tuple[SecretRef, ...]:
    """``sglang_secrets`` and the credentials in ``sglang_env``: the values reach the root-only
    env file only. No error here echoes what was given: it may be the secret itself."""
    secrets_raw = data.get("sglang_secrets") or DEFAULTS["sglang_secrets"]
    if not isinstance(secrets_raw, Mapping):
        raise PlanError(host, "sglang_secrets", "must be a mapping like {hf_token: {env: HF_TOKEN}}")
    secrets = []
    for name, src in secrets_raw.items():
        key = f"sglang_secrets.{name}"
        if name not in SECRET_ENV:
            raise PlanError(host, key, f"unknown secret; known: {', '.join(SECRET_ENV)}")
        if not isinstance(src, Mapping) or len(src) != 1 or next(iter(src)) not in ("env", "file"):
            raise PlanError(host, key, "must be {env: VARIABLE} or {file: /path/on/controller}: where the "
                            "controller reads the secret, not the secret itself")
        kind, ref = next(iter(src.items()))
        if not isinstance(ref, str) or not ref:
            raise PlanError(host, f"{key}.{kind}", f"must be a non-empty string, got {type_name(ref)}")
        check_text(host, f"{key}.{kind}", ref)
        if kind == "env" and not _ENV_NAME.match(ref):
            raise PlanError(host, f"{key}.env", "is not a valid environment variable name (name the variable "
                            "that holds the secret, not the secret itself)")
        secrets.append(SecretRef(name=name, env_var=SECRET_ENV[name], kind=kind, ref=ref))
    for env_name, value, secret in _env_entries(host, data):
        if secret:
            secrets.append(SecretRef(name=env_name, env_var=env_name, kind="inline", ref="sglang_env", value=value))
    return tuple(secrets)
