"""Checks of inventory values that would otherwise be silently wrong.

* the SGLang version, which names the virtualenv and the pip pin, so ``v0.5.19``
  or ``"0.5.23 "`` must not reach them raw;
* ``sglang_env`` entries that override what the plan or SGLang itself sets;
* ``sglang_extra_args`` that make SGLang print and exit instead of serving;
* the systemd unit name.

Each failure is a `PlanError` naming the host and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from sglang_deploy.errors import PlanError

if TYPE_CHECKING:
    from sglang_deploy.plan.catalog import Catalog

# A release as pip and a directory name both take it: 0.5.23, 0.5.3.post1, 0.6.0rc1, 0.5.9+cu128.
_VERSION = re.compile(r"^[0-9]+(?:\.[0-9]+)*(?:[.-]?(?:a|b|rc|post|dev)[0-9]*)*(?:\+[A-Za-z0-9]+(?:\.[A-Za-z0-9]+)*)?$")


def normalize_version(host: str, field: str, value: Any) -> str:
    """An SGLang version as pip pins it: surrounding spaces and a leading ``v`` dropped.

    A number (``0.5`` written unquoted in YAML) is taken as its text; anything that is
    not a release number (empty, ``latest``, a path) is refused."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise PlanError(host, field, f"must be a version string like '0.5.23', got {type(value).__name__}")
    text = str(value).strip()
    if text[:1] in ("v", "V"):
        text = text[1:]
    if not text:
        raise PlanError(host, field, "is empty: name the SGLang release, e.g. '0.5.23'")
    if not _VERSION.match(text):
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise PlanError(host, field, f"{shown!r} is not an SGLang release number (e.g. '0.5.23')")
    return text


# ---------------------------------------------------------------------------
# Environment variables the deploy or SGLang owns


@dataclass(frozen=True)
class OwnedVariable:
    """An environment variable whose value comes from somewhere other than ``sglang_env``."""

    owner: str  # who sets it, and from what
    instead: str  # the inventory setting to use instead ("" when there is none)


_SGLANG_SETS = "SGLang sets it itself at start-up (srt/entrypoints/engine.py _set_envs_and_config)"

#: What the plan writes (service_env.service_env, service_env.nccl_conf: NCCL reads its
#: environment before /etc/nccl.conf) and what SGLang writes into its own environment.
OWNED_ENV: Mapping[str, OwnedVariable] = {
    "CUDA_VISIBLE_DEVICES": OwnedVariable("the plan sets it to the GPUs the server uses", "sglang_gpu_indices"),
    "CUDA_DEVICE_ORDER": OwnedVariable("the plan sets PCI_BUS_ID so CUDA numbers GPUs as NVML does", ""),
    "NCCL_NVLS_ENABLE": OwnedVariable("the plan sets it from the nvls intent, and " + _SGLANG_SETS,
                                      "sglang_intents.nvls"),
    "PYTHONUNBUFFERED": OwnedVariable("the plan sets it so log lines reach the journal at once", ""),
    "GLOO_SOCKET_IFNAME": OwnedVariable("the plan sets it from sglang_gloo_socket_ifname",
                                        "sglang_gloo_socket_ifname"),
    "NCCL_SOCKET_IFNAME": OwnedVariable("the plan writes it to /etc/nccl.conf, which the environment overrides",
                                        "sglang_nccl_socket_ifname"),
    "NCCL_DEBUG": OwnedVariable("the plan writes it to /etc/nccl.conf, which the environment overrides",
                                "sglang_intents.nccl_debug"),
    "NCCL_P2P_DISABLE": OwnedVariable("the plan writes it to /etc/nccl.conf from what the GPUs can do, which "
                                      "the environment overrides", "sglang_intents.nccl_p2p_disable"),
    "NCCL_CUMEM_ENABLE": OwnedVariable(_SGLANG_SETS + " from --enable-symm-mem", ""),
    "NCCL_GRAPH_MIXING_SUPPORT": OwnedVariable(_SGLANG_SETS, ""),
    "CUDA_DEVICE_MAX_CONNECTIONS": OwnedVariable(_SGLANG_SETS + ", replacing any value given", ""),
    "CUDA_MODULE_LOADING": OwnedVariable(_SGLANG_SETS + ", replacing any value given", ""),
    "TF_CPP_MIN_LOG_LEVEL": OwnedVariable(_SGLANG_SETS + ", replacing any value given", ""),
    "SGLANG_RUN_ID": OwnedVariable(_SGLANG_SETS + ", replacing any value given", ""),
    # The compile caches (sglang_deploy.plan.caches.CACHE_VARIABLES, which imports this floor; tests
    # hold the two equal): one directory per SGLang version under sglang_cache_dir.
    **{name: OwnedVariable("the plan points it into the SGLang version's cache directory", "sglang_cache_dir")
       for name in ("SGLANG_CACHE_DIR", "SGLANG_DG_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                    "CUDA_CACHE_PATH", "FLASHINFER_WORKSPACE_BASE", "TILELANG_CACHE_DIR")},
}

ENV_OVERRIDES_KEY = "sglang_env_overrides"


def env_overrides(host: str, raw: Any, env: Mapping[str, str]) -> tuple[str, ...]:
    """The declared overrides (``sglang_env_overrides``), each one a variable ``env`` sets
    and one the deploy or SGLang owns; anything else is a mistake."""
    if raw is None:
        return ()
    if isinstance(raw, str) or not isinstance(raw, (list, tuple)):
        raise PlanError(host, ENV_OVERRIDES_KEY, "must be a list of environment variable names, e.g. "
                        "['NCCL_CUMEM_ENABLE']")
    for i, name in enumerate(raw):
        field = f"{ENV_OVERRIDES_KEY}[{i}]"
        if not isinstance(name, str):
            raise PlanError(host, field, f"must be a variable name, got {type(name).__name__}")
        if name not in OWNED_ENV:
            raise PlanError(host, field, f"{_short(name)} is not a variable the deploy or SGLang sets, so there is "
                            f"nothing to override; owned: {', '.join(sorted(OWNED_ENV))}")
        if name not in env:
            raise PlanError(host, field, f"declares an override of {name}, but sglang_env does not set it")
    return tuple(raw)


def check_owned_env(host: str, env: Mapping[str, str], overrides: Sequence[str]) -> list[str]:
    """Refuse ``sglang_env`` entries for owned variables unless declared; a warning for each declared one."""
    warnings = []
    for name in env:
        owned = OWNED_ENV.get(name)
        if owned is None:
            continue
        if name not in overrides:
            instead = f"set {owned.instead} instead, or " if owned.instead else ""
            raise PlanError(host, f"sglang_env.{name}", f"{owned.owner}; {instead}list {name} in "
                            f"{ENV_OVERRIDES_KEY} to override it deliberately")
        warnings.append(f"sglang_env.{name} is a deliberate override ({ENV_OVERRIDES_KEY}) and goes into the "
                        f"env file as given, though {owned.owner}")
    return warnings


def shown(value: Any) -> str:
    """A value as an error message shows it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,80}")


def key_text(key: Any) -> str:
    """A mapping key as a field name shows it: as written when plain, else quoted and cut
    short, so a newline or escape sequence in a key never reaches a message raw."""
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
        return key
    text = repr(key)
    return text if len(text) <= 60 else text[:60] + "..."


# ---------------------------------------------------------------------------
# Extra arguments and unit names

_EXITING_ACTIONS = ("help", "version")


def check_serving_args(host: str, extra: Sequence[str], catalog: "Catalog") -> None:
    """Refuse an extra argument the version's parser answers by printing and exiting
    (argparse's ``help`` and ``version`` actions): the service would exit 0 and never serve."""
    for i, arg in enumerate(extra):
        if arg == "--":
            return  # argparse reads everything after it as values
        if not arg.startswith("-"):
            continue
        option = catalog.resolve(arg)
        if option is not None and option.action in _EXITING_ACTIONS:
            raise PlanError(host, f"sglang_extra_args[{i}]",
                            f"{arg.split('=', 1)[0]} makes SGLang {catalog.version} print its {option.action} "
                            "and exit without serving")


# systemd's unit names (systemd.unit(5); unit_name_is_valid in src/basic/unit-name.c) take
# letters, digits and ":-_.\"; "@" makes a template (or an instance), which `<name>.service`
# must not be. ":" and "\" are left out too: the name is also a file name here.
_UNIT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_UNIT_NAME_MAX = 255  # UNIT_NAME_MAX, the suffix included
_UNIT_SUFFIXES = (".service", ".socket", ".target", ".timer", ".mount", ".path", ".slice", ".scope")


def check_unit_name(host: str, field: str, name: str) -> str:
    """A service name that makes a plain unit ``<name>.service`` and the env file ``<name>.env``."""
    if "@" in name:
        raise PlanError(host, field, f"{_short(name)}: systemd reads a name with '@' as a template or an "
                        "instance of one; choose a name without '@'")
    if not _UNIT_NAME.match(name) or name.endswith("."):
        raise PlanError(host, field, f"{_short(name)} is not a systemd unit name: use letters, digits and "
                        "'_', '.', '-', starting with a letter or digit")
    if name.endswith(_UNIT_SUFFIXES):
        raise PlanError(host, field, f"{_short(name)}: give the name without its unit suffix "
                        "(the deploy adds '.service')")
    if len(name) + len(".service") > _UNIT_NAME_MAX:
        raise PlanError(host, field, f"is {len(name)} characters; systemd unit names are at most "
                        f"{_UNIT_NAME_MAX} with '.service'")
    return name
