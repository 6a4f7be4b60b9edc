"""Revisions and what a deploy must do on a host: pure decisions from a state snapshot.

A revision is the content hash of everything that defines a running server:
unit, env file, nccl.conf and the SGLang version. The host keeps the files of
the current and the previous revision under its state directory, and a
"deployed" marker written only after the new revision has been restarted (and,
with the gate, proven). The glue reads the host's state in one fact, asks
`decide()` what to do, and turns the answer into operations.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from sglang_deploy.plan.render import RenderedFiles

if TYPE_CHECKING:
    from sglang_deploy.plan.spec import ServiceSettings

STATE_ROOT = "/var/lib/sglang-deploy"
FILE_NAMES = {"unit": "sglang.service", "env": "sglang.env", "nccl_conf": "nccl.conf"}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def revision_id(files: RenderedFiles, sglang_version: str) -> str:
    """Content hash of a configuration: 16 hex digits of sha256 over the files and version."""
    h = hashlib.sha256()
    for key in ("unit", "env", "nccl_conf"):
        h.update(key.encode() + b"\0" + sha256(getattr(files, key)).encode() + b"\0")
    h.update(b"sglang\0" + sglang_version.encode())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Layout:
    """Where a service's files live on the host."""

    service: str
    unit_path: str
    env_path: str
    nccl_conf_path: str

    @classmethod
    def of(cls, service: ServiceSettings, nccl_conf_path: str) -> Layout:
        """The layout of a service, from its settings (its name, unit and env file paths)."""
        return cls(service=service.name, unit_path=service.unit_path, env_path=service.env_path,
                   nccl_conf_path=nccl_conf_path)

    @property
    def state_dir(self) -> str:
        return f"{STATE_ROOT}/{self.service}"

    def revision_dir(self, rev: str) -> str:
        return f"{self.state_dir}/revisions/{rev}"

    def marker(self, name: str) -> str:
        return f"{self.state_dir}/{name}"

    def live_paths(self) -> dict[str, str]:
        return {"unit": self.unit_path, "env": self.env_path, "nccl_conf": self.nccl_conf_path}


@dataclass(frozen=True)
class HostState:
    """What the host reported before the deploy (one fact)."""

    systemd: bool
    installed_version: str | None
    live_sha256: Mapping[str, str | None]  # unit/env/nccl_conf -> sha256 of the live file, None if absent
    staged: frozenset[str]  # revisions whose files are complete on the host
    current: str | None
    previous: str | None
    deployed: str | None
    enabled: bool
    active: bool
    unit_needs_reload: bool = False  # the unit file on disk is not what systemd has loaded
    account: bool = True  # the service user and group exist
    workdir: bool = True  # the working directory exists


@dataclass(frozen=True)
class Actions:
    install: bool
    stage: bool
    swap: tuple[str, ...]  # which live files change: unit, env, nccl_conf
    daemon_reload: bool
    enable: bool
    restart: bool
    new_current: str
    new_previous: str | None
    prune: tuple[str, ...] = field(default=())
    account: bool = False  # create the service user/group and working directory

    @property
    def changes(self) -> bool:
        return (self.install or self.stage or bool(self.swap) or self.daemon_reload or self.enable or self.restart
                or self.account)


def decide(state: HostState, files: RenderedFiles, rev: str, sglang_version: str) -> Actions:
    """What to do so the host runs revision ``rev``; nothing when it already does."""
    want = {key: sha256(getattr(files, key)) for key in FILE_NAMES}
    swap = tuple(key for key in FILE_NAMES if state.live_sha256.get(key) != want[key])
    if state.current == rev:
        new_current, new_previous = rev, state.previous
    else:
        new_current, new_previous = rev, state.current
    keep = {r for r in (new_current, new_previous) if r}
    return Actions(
        install=state.installed_version != sglang_version,
        stage=rev not in state.staged,
        swap=swap,
        # Also when the file is already right but systemd never loaded it (a deploy
        # died between writing the unit and reloading).
        daemon_reload="unit" in swap or state.unit_needs_reload,
        enable=not state.enabled,
        # Restart whenever the deployed marker is not this revision, so a restart lost to
        # an interrupted or failed deploy is not lost; also when the service is down.
        restart=state.deployed != rev or not state.active,
        new_current=new_current,
        new_previous=new_previous,
        prune=tuple(sorted(state.staged - keep)),
        account=not (state.account and state.workdir),
    )
