"""What counts as a secret in inventory data, and the checks that keep one out of plans.

A secret is a value of ``sglang_secrets``, an ``sglang_env`` entry whose name looks like a
credential, a launch_server option that takes a secret, or credentials in a URL. Secrets reach
the root-only env file (or, for pip, a root-only pip config file) and nothing else; every
error here names the field, never the value.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping

from sglang_deploy.errors import PlanError

# An environment variable whose name says it holds a credential: its value is a secret, kept in
# the root-only env file and redacted everywhere else (a false positive only costs visibility).
CREDENTIAL_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH|COOKIE", re.IGNORECASE)
# A URL with a userinfo part ("scheme://user:password@host", "https://TOKEN@host"): credentials.
URL_CREDENTIALS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s]*@")
# launch_server options whose value is a secret (SGLang python/sglang/srt/server_args.py,
# ServerArgs.add_cli_args: --api-key, --admin-api-key, --ssl-keyfile-password), with the way to
# pass each one instead.
SECRET_FLAGS = {
    "--api-key": "set sglang_secrets.api_key ({env: VARIABLE} or {file: PATH} on the controller): the key "
                 "then reaches the server from the root-only env file, and the deploy's gate uses it",
    "--admin-api-key": "sglang-deploy does not pass an admin API key: its value would be in the server's "
                       "argv, readable by every local user in /proc",
    "--ssl-keyfile-password": "use a key file without a passphrase, readable only by the service user: the "
                              "password would be in the server's argv, readable by every local user in /proc",
}
# Options that are complete option strings of their own though they begin like a secret flag.
NOT_SECRET_FLAGS = ("--ssl-keyfile",)
# pip options whose URLs may carry credentials; the install passes those in a root-only pip
# config file, never in its argv (sglang_deploy.deploy.operations.install_sglang).
PIP_URL_KEYS = ("sglang_pip_index_url", "sglang_pip_extra_index_urls", "sglang_pip_find_links")


def type_name(value: Any) -> str:
    """A value's type as a reader of the inventory says it, for errors that must not echo a value."""
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            tuple: "a list", dict: "a mapping"}.get(type(value), f"a {type(value).__name__}")


def secret_flag(word: str) -> str | None:
    """The secret-valued launch_server option ``word`` names (exactly, as ``--opt=value``, or as
    one of the abbreviations argparse accepts with allow_abbrev), else None."""
    name = word.split("=", 1)[0]
    if not name.startswith("--") or len(name) < 3 or name in NOT_SECRET_FLAGS:
        return None
    return next((flag for flag in SECRET_FLAGS if flag.startswith(name)), None)


def _walk_strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _walk_strings(v, f"{path}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _walk_strings(v, f"{path}[{i}]")


def check_url_credentials(host: str, data: Mapping[str, Any]) -> None:
    """Refuse credentials in a URL anywhere in ``sglang_*`` data but where they are kept secret
    (``sglang_env``: the env file; the pip index settings: a root-only pip config file). The
    error names the field, never the value."""
    for key, value in data.items():
        if not isinstance(key, str) or not key.startswith("sglang_") or key in ("sglang_env", *PIP_URL_KEYS):
            continue
        for path, text in _walk_strings(value, key):
            if URL_CREDENTIALS.search(text):
                how = ("the gate authenticates with sglang_secrets.api_key" if path == "sglang_gate.url" else
                       "pass credentials in sglang_env (a *_TOKEN variable, kept in the root-only env file) "
                       "or sglang_secrets")
                raise PlanError(host, path, f"holds credentials in a URL (user:password@ or token@), which "
                                f"would show in plans, reports and argv; {how}")
