"""Prefill/decode disaggregation across the inventory: the servers a gateway pairs must meet.

A gateway in prefill/decode mode sends each request to one prefill and one decode server of its
workers (sglang-router 0.3.2, ``--pd-disaggregation``); the decode server then fetches the prompt's
KV cache from the prefill server. What SGLang checks only when the two first meet, after both
restarted, is checked here before anything stops:

- the same page size and KV cache dtype: the decode server refuses a prefill server whose
  differ (0.5.23 ``srt/disaggregation/common/conn.py``, ``CommonKVManager.try_ensure_parallel_info``:
  "Page size mismatch", "KV cache dtype mismatch"; 0.5.15 and 0.5.19 alike, 0.5.9 the page size).
  SGLang picks the page size from the attention backend, the GPU architecture and the model
  (0.5.23 ``srt/arg_groups/overrides.py`` and ``srt/arg_groups/model_overrides/``), so the
  servers must agree on those: the same model, GPU architecture, attention backend and KV cache
  dtype, with no ``--page-size`` of their own that differs;
- the same SGLang version: the decode server reads the prefill server's bootstrap answer into its
  own release's ``PrefillServerInfo(**data)`` (``common/conn.py``), whose fields change between
  releases (0.5.23 adds ``kv_layout``, ``dsv41_spec_layout``, ``decode_allocation_policy`` and
  ``enable_kv_cache_sharding`` to 0.5.19's);
- a transfer backend both have (the same one);
- a gateway of prefill servers has decode servers too, and no worker that is neither: a gateway
  runs in one mode.

TP, DP and everything else may differ between the roles. Pure: plans in, errors out.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from sglang_deploy.errors import PlanError
from sglang_deploy.plan import layers
from sglang_deploy.plan.hostplan import Plan

def _intent(name: str) -> Callable[[Plan], Any]:
    """A reader of one resolved intent's value."""
    return lambda plan: plan.intents[name].value


#: What two servers of one gateway must agree on, with how to read it from a plan and why.
_MUST_MATCH: tuple[tuple[str, Callable[[Plan], Any], str], ...] = (
    ("sglang_model", lambda p: p.model_path, "the decode server continues the prefill server's KV cache"),
    ("sglang_version", lambda p: p.sglang_version,
     "the decode server reads the prefill server's bootstrap answer into its own release's PrefillServerInfo "
     "(srt/disaggregation/common/conn.py), whose fields change between releases"),
    ("GPU architecture", lambda p: p.gpus.arch,
     "SGLang picks the page size per architecture, attention backend and model (srt/arg_groups/overrides.py), "
     "and the decode server refuses a prefill server of another page size"),
    ("attention_backend", _intent("attention_backend"),
     "SGLang picks the page size per attention backend, and the decode server refuses a prefill server of "
     "another page size"),
    ("kv_cache_dtype", _intent("kv_cache_dtype"),
     "the decode server refuses a prefill server of another KV cache dtype (common/conn.py)"),
    ("--page-size", lambda p: _option(p.argv, "--page-size"),
     "the decode server refuses a prefill server of another page size (common/conn.py)"),
    ("speculative_algorithm", _intent("speculative_algorithm"),
     "a decode server's draft model starts from the hidden states and top-k the prefill server sends with the KV "
     "cache (0.5.23 srt/disaggregation/decode.py, DecodeTransferQueue._commit_transfer_to_req)"),
    ("disaggregation_transfer_backend", _intent("disaggregation_transfer_backend"),
     "both ends of a KV transfer run the same transfer engine"),
)


def _gateways(data: Mapping[str, Any]) -> tuple[str, ...]:
    """The gateways a host's data names (``sglang_gateways``; what is not a name is the spec's to refuse)."""
    raw = data.get("sglang_gateways") or ()
    if isinstance(raw, str):
        return (raw,)
    return tuple(g for g in raw if isinstance(g, str)) if isinstance(raw, (list, tuple)) else ()


def role(plan: Plan) -> str | None:
    """The plan's role: ``prefill``, ``decode`` or None (both in one server)."""
    value = plan.intents["disaggregation_mode"].value if "disaggregation_mode" in plan.intents else None
    return str(value) if value is not None else None


def _option(argv: Sequence[str], option: str) -> str | None:
    for i, word in enumerate(argv):
        if word == option and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(option + "="):
            return word.split("=", 1)[1]
    return None


def _field(plan: Plan, what: str) -> str:
    """How an error names ``what`` on ``plan``'s host: the inventory field or the layer that set it."""
    if what in plan.intents:
        return layers.field(plan.intents[what].layer, what)
    if what == "GPU architecture":
        return "sglang_gpus" if plan.gpus.source.startswith("declared") else "GPU probe"
    if what == "--page-size":
        return "sglang_extra_args"
    return what


def _workers(hosts: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]],
             plans: Mapping[str, Plan | PlanError]) -> dict[str, list[str]]:
    """Gateway -> its planned workers (a tp group by its rank 0, the one that serves), inventory order."""
    out: dict[str, list[str]] = {}
    for name, group_data, host_data in hosts:
        plan = plans.get(name)
        if isinstance(plan, Plan) and (plan.tp_node is None or plan.tp_node.is_leader):
            for gateway in _gateways({**group_data, **host_data}):
                out.setdefault(gateway, []).append(name)
    return out


def role_workers(hosts: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]],
                 plans: Mapping[str, Plan | PlanError]) -> dict[str, list[str]]:
    """Gateway -> its planned workers that have a role (a tp group by its rank 0), inventory order."""
    out = {g: [n for n in names for p in [plans[n]] if isinstance(p, Plan) and role(p)]
           for g, names in _workers(hosts, plans).items()}
    return {g: names for g, names in out.items() if names}


def check_roles(hosts: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]],
                plans: Mapping[str, Plan | PlanError]) -> dict[str, PlanError]:
    """Each gateway's workers against each other where some have a role: host -> the error that
    stops it (empty when they meet). ``hosts`` in inventory order, as ``plan_inventory`` takes them;
    ``plans`` the hosts' plans so far (a tp group by its rank 0, the gateway's worker)."""
    declared: dict[str, set[str]] = {}  # gateway -> the roles its hosts declare, planned or not
    for _, group_data, host_data in hosts:
        data = {**group_data, **host_data}
        said = data.get("sglang_role")  # anything but a word is the spec's to refuse, on that host
        for gateway in _gateways(data):
            declared.setdefault(gateway, set()).update([said] if isinstance(said, str) else [])
    errors: dict[str, PlanError] = {}
    for gateway, names in _workers(hosts, plans).items():
        workers = [(n, p) for n in names for p in [plans[n]] if isinstance(p, Plan)]
        roles = {n: role(p) for n, p in workers}
        if not any(roles.values()):
            continue
        for n, r in roles.items():
            if r is None:
                first = next(h for h, x in roles.items() if x)
                errors.setdefault(n, PlanError(n, "sglang_role", f"unset, but gateway {gateway} pairs prefill and "
                                                                 f"decode servers ({first} is {roles[first]}): a "
                                                                 "gateway runs in one mode; set sglang_role"))
        for wanted, other in (("prefill", "decode"), ("decode", "prefill")):
            mine = [n for n, r in roles.items() if r == wanted]
            if mine and other not in declared[gateway]:
                for n in mine:
                    errors.setdefault(n, PlanError(n, "sglang_role", f"{wanted}: gateway {gateway} has no {other} "
                                                                     f"server to pair it with"))
        paired = [(n, p) for n, p in workers if roles[n]]
        lead_name, lead = paired[0]
        for n, plan in paired[1:]:
            for what, read, why in _MUST_MATCH:
                here, there = read(plan), read(lead)
                if here != there:
                    errors.setdefault(n, PlanError(
                        n, _field(plan, what), f"{here!r} here ({roles[n]}) but {there!r} on {lead_name} "
                                               f"({roles[lead_name]}), both servers of gateway {gateway}: {why}"))
                    break
    return errors
