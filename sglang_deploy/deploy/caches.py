"""The compile caches' glue (what and where: ``sglang_deploy/plan/caches.py``): the version's cache
directory made before the restart, and after a passing gate the directories of versions whose venv
is gone removed.

The cache root belongs to the service user (the server writes its caches there), so what happens
below it runs as that user (``setpriv``): a link it put there cannot turn root's mkdir or rm into a
write elsewhere. Root only makes the root when it is missing and hands it over with ``chown -h``
(never through a link).
"""

from __future__ import annotations

import shlex

from sglang_deploy.plan.caches import Caches
from sglang_deploy.plan.spec import ServiceSettings


def as_user(service: ServiceSettings, argv: list[str]) -> str:
    q = shlex.quote
    return (f"setpriv --reuid={q(service.user)} --regid={q(service.group)} --init-groups "
            + " ".join(q(a) for a in argv))


#: SGLang's P2P test results (custom_all_reduce_utils.py gpu_p2p_access_check writes one per
#: CUDA_VISIBLE_DEVICES under SGLANG_CACHE_DIR and, while it exists, never tests again).
P2P_RESULTS = "gpu_p2p_access_cache_for_*.json"
_STALE_P2P = ('b=$(awk \'$1 == "btime" {print $2}\' /proc/stat) && [ -n "$b" ] && '
              'find "$1" -maxdepth 1 -type f -name "$2" ! -newermt "@$b" -delete; true')


def ensure_command(caches: Caches, service: ServiceSettings) -> str:
    """The version's directory (0750, the service user's), its root made first when missing; an
    existing root that is a real directory is handed to the service user (``chown -h``). SGLang's
    P2P test results there from before the last boot are removed: the hardware or its settings
    (ACS, the IOMMU) may have changed since, and SGLang tests again only where none is left
    (plan/pcie.py reads only newer ones)."""
    q = shlex.quote
    root, owner = q(caches.root), f"{q(service.user)}:{q(service.group)}"
    return (f"if [ ! -e {root} ]; then mkdir -p -m 0755 {root}; fi && "
            f"if [ -d {root} ] && [ ! -L {root} ]; then chown -h {owner} {root}; fi && "
            + as_user(service, ["mkdir", "-p", "-m", "0750", caches.dir]) + " && "
            + as_user(service, ["sh", "-c", _STALE_P2P, "stale-p2p", caches.dir, P2P_RESULTS]))


def prune_command(caches: Caches, service: ServiceSettings) -> str:
    """Each ``sglang-<version>`` directory of the root whose venv (``<venvs_dir>/sglang-<version>``)
    is gone, never this version's; venvs themselves are never removed by the deploy, so this removes
    only what an operator's removal of a venv left behind."""
    keep = f"sglang-{caches.version}"
    script = ('for d in "$1"/sglang-*; do v=${d##*/}; [ -d "$d" ] && [ ! -L "$d" ] && [ "$v" != "$3" ] '
              '&& [ ! -e "$2/$v" ] && { rm -rf -- "$d" && echo "removed the compile caches of $v (its venv is '
              'gone)"; }; done; true')
    return (f"[ ! -d {shlex.quote(caches.root)} ] || "
            + as_user(service, ["sh", "-c", script, "prune-caches", caches.root, service.venvs_dir, keep]))
