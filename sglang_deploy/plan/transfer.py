"""The KV transfer engine of a prefill or decode server: a package of its SGLang venv, pure.

A server started with ``--disaggregation-mode prefill|decode`` imports its transfer backend's engine
while it starts, and does not start without it; no SGLang release depends on the package (0.5.23's
METADATA names neither), so the deploy installs it into the venv beside SGLang, before anything
stops, and imports it there to prove it loads (a wheel whose native libraries the host lacks fails
here, not after the stop):

- ``mooncake`` and ``mooncake_tcp`` (TCP forced through ``MC_FORCE_TCP``: 0.5.23
  ``srt/arg_groups/pd_disaggregation_hook.py``): ``from mooncake.engine import TransferEngine`` in
  ``srt/distributed/device_communicators/mooncake_transfer_engine.py``, ``MooncakeTransferEngine``;
  PyPI ``mooncake-transfer-engine``;
- ``nixl``: ``from nixl._api import nixl_agent`` in ``srt/disaggregation/nixl/conn.py``; PyPI ``nixl``.

No release pins a version: 0.5.23 asks only that Mooncake's engine has ``batch_register_memory``
("requires a newer version of mooncake-transfer-engine", ``MooncakeTransferEngine.batch_register``).
The versions below are the newest each package had on PyPI on 2026-12-07, after 0.5.23's release;
``sglang_transfer_engine_version`` pins another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class TransferEngine:
    """A transfer backend's package, the module SGLang imports, and the version installed."""

    package: str
    module: str
    version: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


_MOONCAKE = TransferEngine("mooncake-transfer-engine", "mooncake.engine", "0.3.13.post1")
ENGINES: Mapping[str, TransferEngine] = {
    "mooncake": _MOONCAKE,
    "mooncake_tcp": _MOONCAKE,
    "nixl": TransferEngine("nixl", "nixl._api", "1.5.2"),
}


def engine_for(backend: str | None, version: str | None = None) -> TransferEngine | None:
    """The engine ``backend`` (``disaggregation_transfer_backend``) imports, at ``version`` (None: the
    table's); None for a backend without one (SGLang's ``fake``, or a server of no role)."""
    engine = ENGINES.get(str(backend)) if backend is not None else None
    if engine is None or version is None:
        return engine
    return TransferEngine(engine.package, engine.module, version)
