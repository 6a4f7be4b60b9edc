"""Start the SGLang Model Gateway (sglang-router) with its API key from the environment.

Run by the gateway's unit as ``<venv>/bin/python -I gateway_launch.py <router arguments>``;
standard library plus the router package of the venv it runs in.

sglang-router 0.3.2 takes its API key only as ``--api-key`` (sglang_router/router_args.py,
RouterArgs.add_cli_args; no environment variable), and a command line is readable by every
local user in /proc/<pid>/cmdline. So the key stays out of it: this script takes it from
``SGLANG_GATEWAY_API_KEY`` (the unit's root-only EnvironmentFile=), removes it from the
environment the router and its children see, parses the other arguments with the router's own
parser (sglang_router/launch_router.py, parse_router_args) and starts the router in this
process with the key set on its RouterArgs (launch_router.py, launch_router).

Exit status 2 when the command line carries the key itself or the variable is set but empty.
"""

from __future__ import annotations

import os
import sys
from typing import MutableMapping

API_KEY_ENV = "SGLANG_GATEWAY_API_KEY"
API_KEY_FLAG = "--api-key"


def key_flag_in(args: list[str]) -> str | None:
    """The word of ``args`` that passes the key itself: ``--api-key``, ``--api-key=...`` or an
    abbreviation argparse would take for it (``--api``)."""
    for word in args:
        if word == "--":
            return None
        name = word.split("=", 1)[0]
        if len(name) >= 5 and API_KEY_FLAG.startswith(name):
            return name
    return None


def take_key(environ: MutableMapping[str, str]) -> str | None:
    """The key, removed from ``environ`` (the router's children never inherit it); None when unset."""
    key = environ.pop(API_KEY_ENV, None)
    if key is not None and not key.strip():
        raise ValueError(f"{API_KEY_ENV} is set but empty")
    return key


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    flag = key_flag_in(args)
    if flag is not None:
        print(f"gateway_launch: {flag} on the command line would put the key in /proc/<pid>/cmdline; "
              f"set {API_KEY_ENV} in the environment instead", file=sys.stderr)
        return 2
    try:
        key = take_key(os.environ)
    except ValueError as exc:
        print(f"gateway_launch: {exc}", file=sys.stderr)
        return 2
    from sglang_router.launch_router import launch_router, parse_router_args  # type: ignore[import-untyped,import-not-found,unused-ignore]

    router_args = parse_router_args(args)
    if key is not None:
        router_args.api_key = key
    launch_router(router_args)  # blocks until the router shuts down
    return 0


if __name__ == "__main__":
    sys.exit(main())
