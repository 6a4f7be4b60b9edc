"""A gateway of prefill and decode servers, pure: the router's prefill/decode mode and what each
worker tells the gateway about its role.

sglang-router 0.3.2 pairs a prefill and a decode server for each request only in its prefill/decode
mode (``--pd-disaggregation``; sglang_router/router_args.py, ``RouterArgs.add_cli_args``): its
workers are then given as ``--prefill URL [BOOTSTRAP_PORT]`` and ``--decode URL`` (``--worker-urls``
is not read in that mode: sglang_router/router.py, ``Router.from_args``), each role balanced by
``--prefill-policy`` and ``--decode-policy`` (``--policy`` for a role without one). The router adds
``bootstrap_host`` (the prefill URL's host), ``bootstrap_port`` and a random ``bootstrap_room`` to
the request and sends it to both; the decode server fetches the prompt's KV cache from the prefill
server's bootstrap server on that port (SGLang 0.5.23 ``srt/disaggregation/common/conn.py``,
``CommonKVBootstrapServer``). A worker registered at run time (``POST /workers``) says its role in
``worker_type`` and a prefill server its ``bootstrap_port``; one registered without them is listed
as ``regular`` and never paired (observed with the real 0.3.2 wheel: tests/test_pd_gateway_real.py).

This module knows the gateway's side only; what the two roles' servers must agree on is
``sglang_deploy.plan.pd``'s.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

ROLES = ("prefill", "decode")

#: ``--prefill-policy`` and ``--decode-policy`` choices of sglang-router 0.3.2
#: (sglang_router/router_args.py, RouterArgs.add_cli_args): prefill also has ``bucket``.
ROLE_POLICIES: Mapping[str, tuple[str, ...]] = {
    "prefill": ("random", "round_robin", "cache_aware", "power_of_two", "manual", "bucket"),
    "decode": ("random", "round_robin", "cache_aware", "power_of_two", "manual"),
}

#: The flags :func:`router_role_args` writes (sglang-router 0.3.2's parser has each).
PD_FLAGS = ("--pd-disaggregation", "--prefill", "--decode", "--prefill-policy", "--decode-policy")


class RoleOf(NamedTuple):
    """A worker's role behind its gateway, and a prefill server's bootstrap port (None for decode)."""

    role: str
    bootstrap_port: int | None


def gateway_roles(memberships: Sequence[Any]) -> dict[str, dict[str, RoleOf]]:
    """Gateway -> worker URL -> its role, for the workers that declare one (``WorkerMembership``'s
    ``role`` and ``bootstrap_port``; the first membership of a URL speaks for it, as a tp group is
    one worker at rank 0's URL)."""
    out: dict[str, dict[str, RoleOf]] = {}
    for m in memberships:
        if m.role is None:
            continue
        for g in m.gateways:
            out.setdefault(g, {}).setdefault(m.url, RoleOf(m.role, m.bootstrap_port))
    return out


def router_role_args(worker_urls: Sequence[str], roles: Mapping[str, RoleOf],
                     policies: Mapping[str, str | None]) -> list[str]:
    """The router's prefill/decode-mode arguments for ``worker_urls`` (every one must have a role
    in ``roles``); ``policies``: role -> its policy, None for the router's ``--policy``. ValueError
    names a worker without a role, and a gateway that would pair nothing."""
    missing = [u for u in worker_urls if u not in roles]
    if missing:
        raise ValueError(f"worker {missing[0]} has no sglang_role, but the gateway pairs prefill and decode servers "
                         f"({next(iter(roles))} is {roles[next(iter(roles))].role}): a gateway runs in one mode")
    for role in ROLES:
        if not any(roles[u].role == role for u in worker_urls):
            raise ValueError(f"no {role} server among its workers: a gateway of prefill and decode servers needs both")
    argv = ["--pd-disaggregation"]
    for role in ROLES:
        if policies.get(role) is not None:
            argv += [f"--{role}-policy", str(policies[role])]
    for u in worker_urls:
        if roles[u].role == "prefill":
            port = roles[u].bootstrap_port
            argv += ["--prefill", u] + ([str(port)] if port is not None else [])
    for u in worker_urls:
        if roles[u].role == "decode":
            argv += ["--decode", u]
    return argv


def registration(role: RoleOf | None) -> dict[str, Any]:
    """What ``POST /workers`` carries besides the URL and key for a worker of ``role``: its
    ``worker_type`` and a prefill server's ``bootstrap_port`` (sglang-router 0.3.2's
    ``WorkerConfigRequest``); nothing for a worker without a role."""
    if role is None:
        return {}
    return {"worker_type": role.role, **({"bootstrap_port": role.bootstrap_port}
                                         if role.role == "prefill" and role.bootstrap_port is not None else {})}

