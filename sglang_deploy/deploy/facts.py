"""pyinfra facts: the GPU probe and the host's deploy state, one command each."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from pyinfra.api import FactBase

from sglang_deploy.deploy.hostscript import embedded
from sglang_deploy.lifecycle.retire import MAX_UNITS_READ
from sglang_deploy.lifecycle.revision import FILE_NAMES, HostState, Layout
from sglang_deploy.plan import pcie, rdma

PROBE_SCRIPT = Path(__file__).resolve().parent / "host" / "gpu_probe.py"
PCIE_SCRIPT = Path(__file__).resolve().parent / "host" / "pcie_paths.py"
_RC_MARK = "SGLANG_DEPLOY_RC="
_PCIE_MARK = "SGLANG_DEPLOY_PCIE"


class GpuProbe(FactBase):
    """The host's GPUs as probe JSON (schema 1), or ``{"error": ...}`` when it has none.

    The probe uses NVML through pynvml when importable, else nvidia-smi; the PCIe paths of its
    GPUs (bridges' ACS, IOMMU) come from sysfs in the same command (host/pcie_paths.py), and
    join the probe as its ``pcie`` (plan/pcie.py for_gpus).
    """

    def command(self, cache_root: str | None = None, home_cache: str | None = None) -> str:
        """``cache_root``: the plan's ``sglang_cache_dir``, where SGLang's own P2P test leaves its
        results (host/pcie_paths.py); ``home_cache``: the service user's ~/.cache/sglang, where 0.5.9
        leaves them; without them they are not read (`status`)."""
        more = (("--cache-root", cache_root) if cache_root else ()) + (
            ("--home-cache", home_cache) if home_cache else ())
        return (f"command -v python3 >/dev/null || "
                f"{{ echo 'python3 not found on the host'; echo {_RC_MARK}5; exit 0; }}; "
                f"{embedded(PROBE_SCRIPT)} 2>&1; echo {_RC_MARK}$?; "
                f"echo {_PCIE_MARK}; {embedded(PCIE_SCRIPT, args=more)} 2>/dev/null | head -c 1000000; true")

    def process(self, output: list[str]) -> dict[str, Any]:
        marks = [i for i, line in enumerate(output) if line == _PCIE_MARK]
        probe_lines = output[:marks[-1]] if marks else output
        pcie_text = "\n".join(output[marks[-1] + 1:]) if marks else ""
        rc_line = probe_lines[-1] if probe_lines else ""
        body = "\n".join(probe_lines[:-1])
        rc = int(rc_line[len(_RC_MARK):]) if rc_line.startswith(_RC_MARK) else -1
        if rc == 0:
            try:
                probe = json.loads(body)
            except json.JSONDecodeError:
                return {"error": f"GPU probe printed something that is not JSON: {body[:200]!r}"}
            if isinstance(probe, dict) and isinstance(probe.get("gpus"), list):
                read = pcie.read_answer(pcie_text)  # once, for the GPUs' paths and the RDMA devices
                paths = pcie.for_gpus(read, [g.get("pci_bus_id") if isinstance(g, dict) else None
                                             for g in probe["gpus"]])
                if paths is not None:
                    probe["pcie"] = paths
                devices = rdma.for_probe(read.get("rdma"))
                if devices:
                    probe["rdma"] = devices
            return probe
        return {"error": body.strip().splitlines()[-1] if body.strip() else f"GPU probe failed (exit {rc})"}


_STATE_SCRIPT = r"""
st={state_dir}
echo "systemd=$(command -v systemctl >/dev/null && [ -d /run/systemd/system ] && echo yes || echo no)"
if [ -x {python} ]; then
  echo "version=$({python} -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null)"
fi
for pair in {files}; do
  key=${{pair%%=*}}; path=${{pair#*=}}
  if [ -f "$path" ]; then echo "sha_$key=$(sha256sum "$path" | cut -d' ' -f1)"; fi
done
for m in current previous deployed; do [ -f $st/$m ] && echo "$m=$(cat $st/$m)"; done
if [ -d $st/revisions ]; then
  for d in $st/revisions/*/; do [ -f "$d/complete" ] && echo "staged=$(basename "$d")"; done
fi
echo "enabled=$(systemctl is-enabled {service}.service 2>/dev/null)"
echo "active=$(systemctl is-active {service}.service 2>/dev/null)"
echo "need_reload=$(systemctl show -p NeedDaemonReload --value {service}.service 2>/dev/null)"
id -u {user} >/dev/null 2>&1 && getent group {group} >/dev/null 2>&1 && echo "account=yes"
[ -d {workdir} ] && echo "workdir=yes"
true
"""


class DeployState(FactBase):
    """Everything a deploy decides on, read in one command (`HostState`)."""

    def command(self, layout: Layout, python: str, user: str, group: str, workdir: str) -> str:
        files = " ".join(shlex.quote(f"{k}={p}") for k, p in layout.live_paths().items())
        return _STATE_SCRIPT.format(state_dir=shlex.quote(layout.state_dir), python=shlex.quote(python),
                                    files=files, service=shlex.quote(layout.service), user=shlex.quote(user),
                                    group=shlex.quote(group), workdir=shlex.quote(workdir))

    def process(self, output: list[str]) -> HostState:
        values: dict[str, list[str]] = {}
        for line in output:
            key, _, value = line.partition("=")
            values.setdefault(key.strip(), []).append(value.strip())

        def one(key: str) -> str | None:
            got = values.get(key)
            return got[-1] if got and got[-1] else None

        return HostState(
            systemd=one("systemd") == "yes",
            installed_version=one("version"),
            live_sha256={k: one(f"sha_{k}") for k in FILE_NAMES},
            staged=frozenset(values.get("staged", [])),
            current=one("current"),
            previous=one("previous"),
            deployed=one("deployed"),
            enabled=one("enabled") == "enabled",
            active=one("active") == "active",
            unit_needs_reload=one("need_reload") == "yes",
            account=one("account") == "yes",
            workdir=one("workdir") == "yes",
        )


class ReplicaUnits(FactBase):
    """The host's units of data-parallel replicas past the first (``<service>-dp<i>.service`` in
    /etc/systemd/system, sglang_deploy.plan.replicas), each with the port its ExecStart gives and
    the GPUs its env file gives (``CUDA_VISIBLE_DEVICES``): [(unit file name, port or None, GPUs or
    None)], at most ``retire.MAX_UNITS_READ``; checked by the core (``lifecycle.retire.stale_units``)."""

    def command(self, service: str, config_dir: str) -> str:
        pattern = shlex.quote(f"/etc/systemd/system/{service}-dp") + "*.service"
        env = shlex.quote(config_dir) + '/"$n.env"'
        return (f"for f in {pattern}; do [ -f \"$f\" ] || continue; n=$(basename \"$f\" .service); "
                "printf '%s %s %s\\n' \"$n.service\" "
                "\"$(sed -n 's/.*--port \\([0-9]\\{1,5\\}\\).*/\\1/p' \"$f\" | head -n 1)\" "
                f"\"$(sed -n 's/^CUDA_VISIBLE_DEVICES=\\([0-9,]\\{{1,200\\}}\\)$/\\1/p' {env} 2>/dev/null "
                "| head -n 1)\"; "
                f"done | head -n {MAX_UNITS_READ}; true")

    @staticmethod
    def default() -> list:
        return []

    def process(self, output: list[str]) -> list[tuple[str, int | None, tuple[int, ...] | None]]:
        out: list[tuple[str, int | None, tuple[int, ...] | None]] = []
        for line in output:
            parts = line.split()
            name = parts[0] if parts else ""
            port = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() and len(parts[1]) <= 5 else None
            raw = parts[2] if len(parts) > 2 else ""
            gpus = tuple(int(g) for g in raw.split(",")) if raw and all(
                g.isdigit() and len(g) <= 4 for g in raw.split(",")) else None
            out.append((name, port, gpus))
        return out


class StartHistory(FactBase):
    """What the start budget (``sglang_deploy.plan.start_budget``) learns from the host, in one
    command: the newest gate lines of its history that recorded a start (at most ``LINES``, each cut
    at ``LINE_CHARS``: a longer one is not JSON and is skipped), whether the version's compile-cache
    directory holds anything, and the disk under the weights' directory for the read rate
    (``start_budget.disk_class``: ``findmnt -T`` on the nearest existing parent, the store may not
    exist before the first stage, and ``lsblk -s -P`` on its source, at most ``DEVICES`` devices,
    each value checked). ``{"entries": [...], "caches": "warm" | "cold" | "unknown", "disk":
    {"fstype": ..., "devices": [{NAME, TRAN, ROTA, TYPE}, ...]}}``; the history is the host's own
    file, so each line is data to validate (``start_budget.recorded_starts`` does)."""

    LINES = 50
    LINE_CHARS = 1 << 16
    DEVICES = 16
    _KEYS = ("NAME", "TRAN", "ROTA", "TYPE")

    def command(self, history: str, cache_dir: str | None, weights_dir: str | None) -> str:
        q = shlex.quote
        caches = ("echo caches=unknown" if not cache_dir else
                  f"if [ -d {q(cache_dir)} ] && [ -n \"$(find {q(cache_dir)} -mindepth 1 -maxdepth 2 -print -quit "
                  f"2>/dev/null)\" ]; then echo caches=warm; else echo caches=cold; fi")
        disk = ("" if not weights_dir else
                f"p={q(weights_dir)}; while [ ! -e \"$p\" ] && [ \"$p\" != / ]; do p=$(dirname \"$p\"); done; "
                "set -- $(findmnt -no FSTYPE,SOURCE -T \"$p\" 2>/dev/null | head -n 1); "
                "echo \"fstype=$1\"; case \"$2\" in /dev/*) lsblk -snPo NAME,TRAN,ROTA,TYPE \"$2\" 2>/dev/null "
                f"| head -n {self.DEVICES};; esac; ")
        return (f"{caches}; {disk}grep -F '\"kind\":\"gate\"' {q(history)} 2>/dev/null | grep -F '\"start_s\":' "
                f"| tail -n {self.LINES} | cut -c1-{self.LINE_CHARS}; true")

    @staticmethod
    def default() -> dict[str, Any]:
        return {"entries": [], "caches": "unknown", "disk": {"fstype": "", "devices": []}}

    def process(self, output: list[str]) -> dict[str, Any]:
        caches, fstype = "unknown", ""
        entries: list[dict[str, Any]] = []
        devices: list[dict[str, str]] = []
        for line in output:
            if line.startswith("caches="):
                caches = line.partition("=")[2].strip() if line.strip() in (
                    "caches=warm", "caches=cold", "caches=unknown") else "unknown"
            elif line.startswith("fstype="):
                value = line.partition("=")[2].strip()
                fstype = value if len(value) <= 64 and value.replace(".", "").replace("_", "").isalnum() else ""
            elif line.startswith("NAME="):
                fields = dict(part.partition("=")[::2] for part in line.split())
                device = {k: fields.get(k, "").strip('"') for k in self._KEYS}
                if len(devices) < self.DEVICES and all(
                        len(v) <= 64 and v.replace("-", "").replace("_", "").isalnum() or not v
                        for v in device.values()):
                    devices.append(device)
            else:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict):
                    entries.append(entry)
        return {"entries": entries, "caches": caches, "disk": {"fstype": fstype, "devices": devices}}
