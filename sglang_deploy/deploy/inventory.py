"""Load a pyinfra inventory file exactly as `pyinfra INVENTORY ...` would.

pyinfra's own loader is used so groups, group_data/ folders and data
precedence match a real run. Each host's data is handed to the core split in
two layers: what its groups set (pyinfra's global data, then its groups in
pyinfra's order) and what the host itself sets.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from pyinfra.api import State
from pyinfra.api.host import Host
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory


@dataclass(frozen=True)
class InventoryHost:
    name: str
    groups: tuple[str, ...]
    group_data: dict[str, Any]
    host_data: dict[str, Any]


class InventoryError(Exception):
    pass


def data_layers(host: Host) -> tuple[dict[str, Any], dict[str, Any]]:
    """A host's data as (what its groups set, what the host sets), in pyinfra's
    HostData waterfall: global data, then its groups in order; the host's own on top."""
    inventory = host.inventory
    group_data = dict(inventory.get_data())
    group_data.update(inventory.get_groups_data(host.groups))
    return group_data, dict(inventory.get_host_data(host.name))


def _describe(exc: BaseException, file: Path) -> str:
    """One line for an exception out of pyinfra's loader. pyinfra wraps an exception raised
    by the file's own code in ``UnexpectedExternalError`` (pyinfra_cli/util.py
    ``exec_file``), whose ``str()`` itself raises: name the inner exception and the line of
    the inventory file it came from instead."""
    inner = getattr(exc, "exception", None)
    if isinstance(inner, BaseException):
        where = ""
        tb = getattr(inner, "_traceback", None) or inner.__traceback__
        while tb is not None:
            if Path(tb.tb_frame.f_code.co_filename).name == file.name:
                where = f"line {tb.tb_lineno}: "
            tb = tb.tb_next
        exc = inner
    else:
        where = ""
    try:
        text = str(exc)
    except Exception:  # an exception whose str() fails
        text = ""
    return f"{where}{type(exc).__name__}: {text}" if text else f"{where}{type(exc).__name__}"


def load_inventory(path: str) -> list[InventoryHost]:
    file = Path(path)
    if not file.is_file():
        raise InventoryError(f"inventory {path}: no such file")
    try:
        # pyinfra executes inventory files inside a State context, as its CLI does.
        with ctx_state.use(State(check_for_changes=False)):
            inventory = make_inventory(str(file), cwd=str(Path.cwd()))
    except Exception as exc:  # the inventory file is user Python: report, don't trace
        raise InventoryError(f"inventory {path}: cannot load: {_describe(exc, file)}") from exc
    hosts = []
    for host in inventory:
        group_data, host_data = data_layers(host)
        hosts.append(InventoryHost(name=host.name, groups=tuple(host.groups), group_data=group_data,
                                   host_data=host_data))
    if not hosts:
        raise InventoryError(f"inventory {path}: no hosts")
    return hosts


def inventory_file(groups: Iterable[str], argv: Sequence[str] | None = None) -> Path | None:
    """The inventory file a host came from, on pyinfra's command line (``argv``, default
    ``sys.argv``): pyinfra puts every host of an inventory file into a group named after the
    file's stem (pyinfra_cli/inventory.py ``make_inventory_from_files``), so it is the existing
    ``*.py`` argument whose stem is one of the host's groups. None: no such argument (an
    inventory given inline, or a run not started by pyinfra's CLI)."""
    names = set(groups)
    for arg in sys.argv[1:] if argv is None else argv:
        path = Path(arg)
        if path.suffix == ".py" and path.stem in names and path.is_file():
            return path
    return None
