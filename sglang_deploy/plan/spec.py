"""Inventory data -> a validated `DeploySpec` for one host.

The glue hands over a host's data as two plain dicts, what its groups set
(``group_data``, pyinfra's all-data and group data merged in pyinfra's order)
and what the host itself sets (``host_data``). Every ``sglang_*`` key is
checked here, so a typo is an error naming the host and the key instead of a
silently ignored setting. Intents stay split by layer (group, host) so the
plan can say which one set a value.

The checks every value goes through are spec_values.py's; the settings that may carry a secret
(``sglang_secrets``, ``sglang_env``, ``sglang_extra_args``) are read in spec_secrets.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.caches import cache_root
from sglang_deploy.plan.intents import check_value
from sglang_deploy.gate.verdict import accept_slower_problem, parse_fail_on
from sglang_deploy.secrecy import PIP_URL_KEYS, check_url_credentials
from sglang_deploy.plan.settings import (DEFAULTS, GATE_CONCURRENCY_BY_OBJECTIVE, GATE_CONCURRENCY_MAX, GATE_DEFAULTS,
                                         GATE_PREFILL_TOKENS_MAX, GATE_SETTINGS, SETTINGS, WORKLOAD_DEFAULTS,
                                         WORKLOAD_KEYS)
from sglang_deploy.plan.spec_checks import check_unit_name, key_text, normalize_version, shown
from sglang_deploy.plan.spec_secrets import SECRET_ENV, SecretRef, extra_args_of, extra_env_of, secrets_of
from sglang_deploy.plan.spec_values import (MAX_NOFILE, MAX_SECONDS, abs_path, check_text, finite_number, pip_url,
                                            pos_int, text_value, value_of)
from sglang_deploy.plan.watch import WatchSettings, watch_settings
from sglang_deploy.plan.weights import WeightsSettings, revision_problem, weights_settings

DEFAULT_SGLANG_VERSION: str = DEFAULTS["sglang_version"]

_USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]*[$]?$")
_GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# A host name, an IPv4 address or an IPv6 address (without brackets).
_NODE_ADDRESS = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*)$")
# NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME: interface names or prefixes, comma-separated;
# NCCL also takes a leading ^ (exclude) or = (exact match).
_IFNAME = re.compile(r"^[\^=]?[A-Za-z0-9_.:@-]+(?:,[A-Za-z0-9_.:@-]+)*$")
DEFAULT_DIST_INIT_PORT: int = DEFAULTS["sglang_dist_init_port"]


@dataclass(frozen=True)
class ServiceSettings:
    """The systemd service; defaults from the table of inventory keys (``settings.SETTINGS``)."""

    name: str = DEFAULTS["sglang_service_name"]
    user: str = DEFAULTS["sglang_user"]
    group: str = DEFAULTS["sglang_user"]  # sglang_group defaults to the user
    venvs_dir: str = DEFAULTS["sglang_venvs_dir"]  # one virtualenv per SGLang version inside
    workdir: str = DEFAULTS["sglang_workdir"]
    config_dir: str = DEFAULTS["sglang_config_dir"]
    timeout_start_s: int | None = DEFAULTS["sglang_timeout_start_s"]  # None: from the model profile
    timeout_stop_s: int = DEFAULTS["sglang_timeout_stop_s"]
    restart_sec: int = DEFAULTS["sglang_restart_sec"]
    limit_nofile: int = DEFAULTS["sglang_limit_nofile"]

    @property
    def unit_path(self) -> str:
        return f"/etc/systemd/system/{self.name}.service"

    @property
    def env_path(self) -> str:
        return f"{self.config_dir}/{self.name}.env"


NCCL_CONF_PATH = "/etc/nccl.conf"


@dataclass(frozen=True)
class InstallSettings:
    """How the host's pip gets the pinned SGLang (see docs/settings.md)."""

    extras: tuple[str, ...] = DEFAULTS["sglang_pip_extras"]
    index_url: str | None = DEFAULTS["sglang_pip_index_url"]
    extra_index_urls: tuple[str, ...] = DEFAULTS["sglang_pip_extra_index_urls"]
    find_links: str | None = DEFAULTS["sglang_pip_find_links"]
    no_index: bool = DEFAULTS["sglang_pip_no_index"]
    installer: str = DEFAULTS["sglang_installer"]  # "pip" or "uv"
    transfer_engine_version: str | None = None  # a prefill or decode server's (None: plan/transfer.py's)


GATE_KEYS = tuple(s.name for s in GATE_SETTINGS)  # the keys of sglang_gate, in the order errors list them
GATE_RUN_ON = ("auto", "controller", "host")
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class GateSettings:
    """How the deploy's post-restart gate runs (``sglang_gate``)."""

    ready_timeout_s: float | None = GATE_DEFAULTS["ready_timeout_s"]  # None: the unit's start timeout
    repeats: int = GATE_DEFAULTS["repeats"]
    max_tokens: int = GATE_DEFAULTS["max_tokens"]
    tolerance: float = GATE_DEFAULTS["tolerance"]
    fail_on: tuple[str, ...] | None = GATE_DEFAULTS["fail_on"]  # None: the gate's default groups
    url: str | None = GATE_DEFAULTS["url"]  # None: http://<ssh_hostname or host name>:<port intent>
    run_on: str = GATE_DEFAULTS["run_on"]
    accept_slower: str | None = GATE_DEFAULTS["accept_slower"]  # the operator's reason (verdict.decide)
    prediction_floor: float = GATE_DEFAULTS["prediction_floor"]  # of the predicted band's low end (gate.predicted)
    prefill_tokens: int = GATE_DEFAULTS["prefill_tokens"]  # the prefill measurement's prompt (0: off)
    concurrency: int | None = GATE_DEFAULTS["concurrency"]  # None: by the objective (level_for)

    def level_for(self, objective: str) -> int:
        """The concurrency level the gate measures besides the single stream (1: none)."""
        return self.concurrency if self.concurrency is not None else GATE_CONCURRENCY_BY_OBJECTIVE[objective]

    def on_host(self, bind: str | None) -> bool:
        """Whether the gate runs on the GPU host: asked for, or ``auto`` with a loopback-only server."""
        if self.run_on == "auto":
            return self.url is None and (bind or "").strip("[]") in LOOPBACK
        return self.run_on == "host"


@dataclass(frozen=True)
class IntentSetting:
    value: Any
    reason: str


@dataclass(frozen=True)
class TpGroupSettings:
    """This host's part in a multi-node tensor-parallel group (``sglang_tp_group``).

    Ranks and the rendezvous address depend on the other members, so they are
    assigned over all members together (``tpgroups.assign``)."""

    name: str
    nnodes: int | None  # declared member count (None: not declared)
    dist_init_port: int | None  # None: DEFAULT_DIST_INIT_PORT
    node_address: str  # where the other members reach this host


@dataclass(frozen=True)
class DeploySpec:
    host: str
    sglang_version: str
    model_path: str
    model_profile: str | None
    declared_gpus: Any | None
    gpu_indices: tuple[int, ...] | None
    group_intents: Mapping[str, IntentSetting]
    host_intents: Mapping[str, IntentSetting]
    extra_args: tuple[str, ...]
    extra_env: Mapping[str, str]
    secrets: tuple[SecretRef, ...]
    service: ServiceSettings = field(default_factory=ServiceSettings)
    install: InstallSettings = field(default_factory=InstallSettings)
    target_tok_s: float | None = None  # the gate's single-stream decode target after a restart
    gate: GateSettings = field(default_factory=GateSettings)
    tp_group: TpGroupSettings | None = None
    nccl_socket_ifname: str | None = None  # NCCL_SOCKET_IFNAME (nccl.conf)
    gloo_socket_ifname: str | None = None  # GLOO_SOCKET_IFNAME (service environment)
    warnings: tuple[str, ...] = ()  # about the inventory data itself (declared env overrides)
    model_dir: str | None = None  # sglang_model_dir: where the controller reads the checkpoint's metadata
    model_revision: str | None = None  # sglang_model_revision: Hub revision (None: main)
    weights: WeightsSettings | None = None  # None: a spec built by hand (tests): the server downloads, as before
    watch: WatchSettings | None = None  # sglang_watch: the continuous check on the host (None: off)
    trust_remote_code: bool = False  # sglang_trust_remote_code: the operator consents to the model's own code
    objective: str = "throughput"  # sglang_objective: what the parallel layout serves (throughput | latency)
    workload: Workload = field(default_factory=lambda: Workload())  # sglang_objective's requests and limits
    cache_dir: str = DEFAULTS["sglang_cache_dir"]  # sglang_cache_dir: one compile-cache directory per version
    role: str | None = None  # sglang_role: prefill or decode behind its gateways (None: both in one server)


KNOWN_KEYS = tuple(s.name for s in SETTINGS)  # every other sglang_* key is an error


def _intents(host: str, key: str, raw: Any) -> dict[str, IntentSetting]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise PlanError(host, key, "must be a mapping of intent name -> value")
    out = {}
    for name, spec in raw.items():
        field_name = f"{key}.{key_text(name)}"
        reason = None
        if isinstance(spec, Mapping):
            if set(spec) - {"value", "reason"} or "value" not in spec:
                raise PlanError(host, field_name, "use a plain value or {value: ..., reason: ...}")
            reason = spec.get("reason")
            spec = spec["value"]
            if reason is not None:
                if not isinstance(reason, str):
                    raise PlanError(host, f"{field_name}.reason", "must be a string")
                check_text(host, f"{field_name}.reason", reason)
        value = check_value(host, field_name, str(name), spec)
        if isinstance(value, str):
            check_text(host, field_name, value)
        out[str(name)] = IntentSetting(value, reason or "")
    return out


def trial_intents(host: str, key: str, raw: Any, reason: str) -> dict[str, IntentSetting]:
    """A tuning trial's intents (``raw``: intent -> value, or {value, reason}), checked like
    inventory intents; ``reason`` is said where a value gives none. ``key`` names where they come from."""
    return {name: IntentSetting(s.value, s.reason or reason) for name, s in _intents(host, key, raw).items()}


def _install_settings(host: str, data: Mapping[str, Any]) -> InstallSettings:
    def strings(key: str) -> tuple[str, ...]:
        value = data.get(key) or DEFAULTS[key]
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise PlanError(host, key, "must be a list of strings")
        check = pip_url if key in PIP_URL_KEYS else text_value
        return tuple(check(host, f"{key}[{i}]", v) for i, v in enumerate(value))

    extras = strings("sglang_pip_extras")
    for i, extra in enumerate(extras):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", extra):
            raise PlanError(host, f"sglang_pip_extras[{i}]", f"{extra!r} is not a package extra name")
    optional = {k: (None if data.get(k) is None else pip_url(host, k, data[k]))
                for k in ("sglang_pip_index_url", "sglang_pip_find_links")}
    no_index = value_of(data, "sglang_pip_no_index")
    if not isinstance(no_index, bool):
        raise PlanError(host, "sglang_pip_no_index", f"must be true or false, got {no_index!r}")
    if no_index and not optional["sglang_pip_find_links"]:
        raise PlanError(host, "sglang_pip_no_index", "needs sglang_pip_find_links: where else would pip look?")
    installer = value_of(data, "sglang_installer")
    if installer not in ("pip", "uv"):
        raise PlanError(host, "sglang_installer", f"must be pip or uv, got {shown(installer)}")
    engine = data.get("sglang_transfer_engine_version")
    if engine is not None and (not isinstance(engine, str) or not re.fullmatch(r"[0-9][0-9A-Za-z.+!-]{0,63}", engine)):
        raise PlanError(host, "sglang_transfer_engine_version", f"must be a version such as 0.3.13.post1, got "
                                                                f"{shown(engine)}")
    return InstallSettings(extras=extras, index_url=optional["sglang_pip_index_url"],
                           extra_index_urls=strings("sglang_pip_extra_index_urls"),
                           find_links=optional["sglang_pip_find_links"], no_index=no_index, installer=installer,
                           transfer_engine_version=engine)


def _gate_settings(host: str, data: Mapping[str, Any]) -> tuple[float | None, GateSettings]:
    target = data.get("sglang_target_tok_s")
    if target is not None:
        target = finite_number(host, "sglang_target_tok_s", target)
        if target <= 0:
            raise PlanError(host, "sglang_target_tok_s", f"must be > 0 tok/s, got {target:g}")
    raw = data.get("sglang_gate")
    if raw is None:
        return target, GateSettings()
    if not isinstance(raw, Mapping):
        raise PlanError(host, "sglang_gate", f"must be a mapping with keys {', '.join(GATE_KEYS)}")
    for key in raw:
        if key not in GATE_KEYS:
            raise PlanError(host, f"sglang_gate.{key_text(key)}",
                            f"unknown gate setting; known: {', '.join(GATE_KEYS)}")
    out: dict[str, Any] = {}
    if "ready_timeout_s" in raw:
        out["ready_timeout_s"] = finite_number(host, "sglang_gate.ready_timeout_s", raw["ready_timeout_s"])
        if not 0 < out["ready_timeout_s"] <= MAX_SECONDS:
            raise PlanError(host, "sglang_gate.ready_timeout_s", f"must be > 0 and at most {MAX_SECONDS} seconds")
    if "repeats" in raw:
        out["repeats"] = pos_int(host, "sglang_gate.repeats", raw["repeats"])
    if "max_tokens" in raw:
        out["max_tokens"] = pos_int(host, "sglang_gate.max_tokens", raw["max_tokens"])
        if out["max_tokens"] < 2:
            raise PlanError(host, "sglang_gate.max_tokens", "must be at least 2 (a decode rate needs two tokens)")
    if "prediction_floor" in raw:
        out["prediction_floor"] = finite_number(host, "sglang_gate.prediction_floor", raw["prediction_floor"])
        if not 0 <= out["prediction_floor"] < 1:
            raise PlanError(host, "sglang_gate.prediction_floor",
                            f"must be a fraction in [0, 1) (0: off), got {out['prediction_floor']:g}")
    for key, low, high in (("prefill_tokens", 0, GATE_PREFILL_TOKENS_MAX), ("concurrency", 1, GATE_CONCURRENCY_MAX)):
        if key in raw:
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, int):
                raise PlanError(host, f"sglang_gate.{key}", f"must be a whole number, got {shown(value)}")
            if not low <= value <= high:
                raise PlanError(host, f"sglang_gate.{key}", f"must be between {low} and {high}, got {shown(value)}")
            out[key] = value
    if "tolerance" in raw:
        out["tolerance"] = finite_number(host, "sglang_gate.tolerance", raw["tolerance"])
        if not 0 <= out["tolerance"] < 1:
            raise PlanError(host, "sglang_gate.tolerance", f"must be a fraction in [0, 1), got {out['tolerance']:g}")
    if "fail_on" in raw:
        value = raw["fail_on"]
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) and v for v in items):
            raise PlanError(host, "sglang_gate.fail_on", "must be a list of group names, or 'all' / 'none'")
        try:
            parse_fail_on(",".join(items))
        except ValueError as exc:
            raise PlanError(host, "sglang_gate.fail_on", str(exc)) from None
        out["fail_on"] = tuple(items)
    if "url" in raw:
        url = text_value(host, "sglang_gate.url", raw["url"])
        if not re.match(r"^https?://[^/\s]+", url):
            raise PlanError(host, "sglang_gate.url", f"must be an http(s) URL, got {url!r}")
        out["url"] = url
    if "run_on" in raw:
        run_on = text_value(host, "sglang_gate.run_on", raw["run_on"])
        if run_on not in GATE_RUN_ON:
            raise PlanError(host, "sglang_gate.run_on", f"must be one of {', '.join(GATE_RUN_ON)}, got {run_on!r}")
        if run_on == "host" and "url" in out:
            raise PlanError(host, "sglang_gate.url", "is the URL the controller measures; with run_on: host the "
                                                     "gate measures the server's port on the host itself")
        out["run_on"] = run_on
    if "accept_slower" in raw:
        problem = accept_slower_problem(raw["accept_slower"])
        if problem:
            raise PlanError(host, "sglang_gate.accept_slower", problem)
        out["accept_slower"] = raw["accept_slower"]
    return target, GateSettings(**out)


def _tp_group(host: str, data: Mapping[str, Any]) -> TpGroupSettings | None:
    name = data.get("sglang_tp_group")
    if name is None:
        for key in ("sglang_nnodes", "sglang_dist_init_port"):
            if data.get(key) is not None:
                raise PlanError(host, key, "only means something for a member of a tp group: set sglang_tp_group")
        return None
    name = text_value(host, "sglang_tp_group", name, _GROUP_NAME)
    nnodes = data.get("sglang_nnodes")
    if nnodes is not None:
        nnodes = pos_int(host, "sglang_nnodes", nnodes)
        if nnodes < 2:
            raise PlanError(host, "sglang_nnodes", f"a tp group spans at least 2 hosts, got {nnodes}")
    port = data.get("sglang_dist_init_port")
    if port is not None:
        port = pos_int(host, "sglang_dist_init_port", port)
        if port > 65535:
            raise PlanError(host, "sglang_dist_init_port", f"must be at most 65535, got {port}")
    address = data.get("sglang_node_address")
    key = "sglang_node_address"
    if address is None:
        address, key = data.get("ssh_hostname") or host, "sglang_node_address (default: ssh_hostname or host name)"
    address = text_value(host, key, address)
    if address.startswith("[") and address.endswith("]"):
        address = address[1:-1]
    if not _NODE_ADDRESS.match(address):
        raise PlanError(host, key, f"{address!r} is not a host name or IP address")
    return TpGroupSettings(name=name, nnodes=nnodes, dist_init_port=port, node_address=address)


ROLES = ("prefill", "decode")


def _role(host: str, data: Mapping[str, Any]) -> str | None:
    """``sglang_role``: a prefill or decode server meets its counterpart only through a gateway in
    prefill/decode mode, which sends each request to both (sglang-router 0.3.2 PD mode)."""
    role = data.get("sglang_role")
    if role is None:
        if data.get("sglang_transfer_engine_version") is not None:
            raise PlanError(host, "sglang_transfer_engine_version", "only means something for a prefill or decode "
                                                                    "server: set sglang_role")
        return None
    if role not in ROLES:
        raise PlanError(host, "sglang_role", f"must be prefill or decode, got {shown(role)}")
    if not data.get("sglang_gateways"):
        raise PlanError(host, "sglang_role", f"a {role} server serves only behind a gateway that pairs it with "
                                             f"{'decode' if role == 'prefill' else 'prefill'} servers: name it in "
                                             "sglang_gateways")
    return str(role)


def _ifname(host: str, data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    value = text_value(host, key, value)
    if not _IFNAME.match(value):
        raise PlanError(host, key, f"{value!r} is not a list of interface names (e.g. 'eth0', 'ib0,ib1', '^docker')")
    return value


def _check_known_keys(host: str, source: Mapping[str, Any]) -> None:
    for key in source:
        if isinstance(key, str) and key.startswith("sglang_") and key not in KNOWN_KEYS:
            close = [k for k in KNOWN_KEYS if k.split("_", 1)[1][:4] == key.split("_", 1)[1][:4]]
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise PlanError(host, key_text(key), f"unknown setting{hint}; known: {', '.join(sorted(KNOWN_KEYS))}")


def _service_settings(host: str, data: Mapping[str, Any]) -> ServiceSettings:
    name = check_unit_name(host, "sglang_service_name", text_value(host, "sglang_service_name",
                                                                   value_of(data, "sglang_service_name")))
    user = text_value(host, "sglang_user", value_of(data, "sglang_user"), _USER_NAME)
    timeout_start = data.get("sglang_timeout_start_s")  # None: from the model profile (planner)
    return ServiceSettings(
        name=name,
        user=user,
        group=text_value(host, "sglang_group", data.get("sglang_group", user), _USER_NAME),  # default: the user
        venvs_dir=abs_path(host, "sglang_venvs_dir", value_of(data, "sglang_venvs_dir")),
        workdir=abs_path(host, "sglang_workdir", value_of(data, "sglang_workdir")),
        config_dir=abs_path(host, "sglang_config_dir", value_of(data, "sglang_config_dir")),
        timeout_start_s=None if timeout_start is None else pos_int(host, "sglang_timeout_start_s", timeout_start,
                                                                  MAX_SECONDS),
        timeout_stop_s=pos_int(host, "sglang_timeout_stop_s", value_of(data, "sglang_timeout_stop_s"), MAX_SECONDS),
        restart_sec=pos_int(host, "sglang_restart_sec", value_of(data, "sglang_restart_sec"), MAX_SECONDS),
        limit_nofile=pos_int(host, "sglang_limit_nofile", value_of(data, "sglang_limit_nofile"), MAX_NOFILE),
    )


def build_spec(host: str, group_data: Mapping[str, Any], host_data: Mapping[str, Any]) -> DeploySpec:
    check_text(host, "host name", host)
    _check_known_keys(host, group_data)
    _check_known_keys(host, host_data)
    data = {**group_data, **host_data}
    check_url_credentials(host, data)

    version = normalize_version(host, "sglang_version", value_of(data, "sglang_version"))
    if "sglang_model" not in data:
        raise PlanError(host, "sglang_model", "missing: which model to serve (path or Hugging Face id)")
    model_path = text_value(host, "sglang_model", data["sglang_model"])
    profile = data.get("sglang_model_profile")
    if profile is not None:
        profile = text_value(host, "sglang_model_profile", profile)
    model_dir = data.get("sglang_model_dir")
    if model_dir is not None:
        model_dir = text_value(host, "sglang_model_dir", model_dir)
        if not model_dir.startswith(("/", "~/")):
            raise PlanError(host, "sglang_model_dir", f"must be an absolute path (or start with ~/), got {model_dir!r}")
    revision = data.get("sglang_model_revision")
    if revision is not None:
        revision = text_value(host, "sglang_model_revision", revision)
        problem = revision_problem(revision)
        if problem:
            raise PlanError(host, "sglang_model_revision", f"{shown(revision)}: {problem}")

    indices = data.get("sglang_gpu_indices")
    if indices is not None:
        if not isinstance(indices, (list, tuple)):
            raise PlanError(host, "sglang_gpu_indices", "must be a list of GPU indices")
        indices = tuple(indices)

    extra_args = extra_args_of(host, data)
    extra_env, env_warnings = extra_env_of(host, data)
    secrets = secrets_of(host, data)
    service = _service_settings(host, data)
    install = _install_settings(host, data)
    target_tok_s, gate = _gate_settings(host, data)
    return DeploySpec(
        target_tok_s=target_tok_s,
        gate=gate,
        host=host,
        install=install,
        sglang_version=version,
        model_path=model_path,
        model_profile=profile,
        declared_gpus=data.get("sglang_gpus"),
        gpu_indices=indices,
        group_intents=(group_intents := _intents(host, "sglang_intents", group_data.get("sglang_intents"))),
        host_intents=_gateway_worker_intents(data, group_intents,
                                             _intents(host, "sglang_intents", host_data.get("sglang_intents"))),
        extra_args=extra_args,
        extra_env=extra_env,
        secrets=secrets,
        service=service,
        tp_group=_tp_group(host, data),
        role=_role(host, data),
        nccl_socket_ifname=_ifname(host, data, "sglang_nccl_socket_ifname"),
        gloo_socket_ifname=_ifname(host, data, "sglang_gloo_socket_ifname"),
        warnings=tuple(env_warnings),
        model_dir=model_dir,
        model_revision=revision,
        weights=(weights := weights_settings(host, data, model_path)),
        watch=watch_settings(host, data),
        cache_dir=cache_root(host, data, {"the model store (sglang_model_store)": weights.store,
                                          "the venvs (sglang_venvs_dir)": service.venvs_dir,
                                          "the env file's directory (sglang_config_dir)": service.config_dir}),
        trust_remote_code=_trust_remote_code(host, data),
        objective=_objective(host, data),
        workload=_workload(host, data),
    )


def _gateway_worker_intents(data: Mapping[str, Any], group: Mapping[str, IntentSetting],
                            own: dict[str, IntentSetting]) -> dict[str, IntentSetting]:
    """A gateway's worker (``sglang_gateways``) serves ``/metrics`` unless its inventory sets
    ``enable_metrics``: its drain waits on the server's own count of running and queued requests
    there, which SGLang serves only with --enable-metrics (0.5.23: the Prometheus middleware is added
    in python/sglang/srt/entrypoints/http_server.py, lifespan, when enable_metrics is set)."""
    if not data.get("sglang_gateways") or "enable_metrics" in group or "enable_metrics" in own:
        return own
    why = "a gateway's worker: its drain reads the server's running and queued requests from /metrics"
    return {**own, "enable_metrics": IntentSetting(True, why)}


OBJECTIVES = ("throughput", "latency")


@dataclass(frozen=True)
class Workload:
    """The requests a throughput layout is ranked for, and the limits a layout must meet
    (``sglang_objective``'s mapping form): prompt and output tokens per request, time per
    output token and time to first token of one stream, in milliseconds (None: no limit)."""

    input_tokens: int = WORKLOAD_DEFAULTS["input_tokens"]
    output_tokens: int = WORKLOAD_DEFAULTS["output_tokens"]
    tpot_ms: float | None = WORKLOAD_DEFAULTS["tpot_ms"]
    ttft_ms: float | None = WORKLOAD_DEFAULTS["ttft_ms"]

    def text(self) -> str:
        limits = [f"{name} {value:g} ms" for name, value in (("TPOT", self.tpot_ms), ("TTFT", self.ttft_ms))
                  if value is not None]
        return (f"{self.input_tokens:,} prompt / {self.output_tokens:,} output tokens"
                + (f" within {' and '.join(limits)}" if limits else ", no latency limit"))


def _objective_value(host: str, data: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
    """(what the layout serves, the mapping form's other keys)."""
    value = data.get("sglang_objective", DEFAULTS["sglang_objective"])
    if isinstance(value, Mapping):
        unknown = sorted(map(str, set(value) - {"serve", *WORKLOAD_KEYS}))
        if unknown:
            raise PlanError(host, f"sglang_objective.{key_text(unknown[0])}",
                            f"unknown key; known: serve, {', '.join(WORKLOAD_KEYS)}")
        return value.get("serve", DEFAULTS["sglang_objective"]), value
    return value, {}


def _objective(host: str, data: Mapping[str, Any]) -> str:
    value, extra = _objective_value(host, data)
    if value not in OBJECTIVES:
        where = "sglang_objective.serve" if extra else "sglang_objective"
        raise PlanError(host, where, f"must be one of {', '.join(OBJECTIVES)}, got {shown(value)}")
    return str(value)


def _workload(host: str, data: Mapping[str, Any]) -> Workload:
    serve, given = _objective_value(host, data)
    values: dict[str, Any] = {}
    for key, (low, high) in WORKLOAD_KEYS.items():
        if key not in given:
            continue
        value = given[key]
        whole = key.endswith("_tokens")
        if value is None and not whole:  # no such limit
            values[key] = None
            continue
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and not isinstance(value, int))
                or not low <= value <= high):
            raise PlanError(host, f"sglang_objective.{key}",
                            f"must be {'a whole number' if whole else 'a number'} from {low:g} to {high:g}, "
                            f"got {shown(value)}")
        values[key] = value if whole else float(value)
    if serve == "latency" and any(values.get(k) is not None for k in ("tpot_ms", "ttft_ms")):
        raise PlanError(host, "sglang_objective", "latency limits rank throughput layouts; serve: latency takes "
                                                  "the largest TP whatever the limits (drop tpot_ms/ttft_ms)")
    return Workload(**values)


def _trust_remote_code(host: str, data: Mapping[str, Any]) -> bool:
    value = data.get("sglang_trust_remote_code", DEFAULTS["sglang_trust_remote_code"])
    if not isinstance(value, bool):
        raise PlanError(host, "sglang_trust_remote_code", f"must be true or false, got {shown(value)}")
    return value


__all__ = ["DEFAULT_DIST_INIT_PORT", "DEFAULT_SGLANG_VERSION", "GATE_KEYS", "GATE_RUN_ON", "KNOWN_KEYS", "LOOPBACK",
           "MAX_NOFILE", "MAX_SECONDS", "NCCL_CONF_PATH", "OBJECTIVES", "SECRET_ENV", "DeploySpec", "GateSettings",
           "InstallSettings", "IntentSetting", "SecretRef", "ServiceSettings", "TpGroupSettings", "Workload",
           "build_spec", "check_text", "trial_intents"]
