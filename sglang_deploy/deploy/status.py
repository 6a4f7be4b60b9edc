"""`sglang-deploy status` on the hosts: connect to every host in parallel, probe its GPUs, read its
state in one command (:class:`ServiceStatus`), change nothing.

The read is pyinfra's own machinery, as a deploy reads its facts (``pyinfra.api.State`` over the
inventory pyinfra's CLI loader makes, ``Host.connect`` and ``pyinfra.api.facts.get_fact``), but
no operation is ever added: one greenlet per host (gevent, which pyinfra's CLI package patches
in on import) connects, probes and reads, so a fleet costs about what its slowest host costs.
What the lines mean is decided in ``sglang_deploy/status/``.
"""

from __future__ import annotations

import base64
import logging
import resource
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import gevent
import gevent.pool
from pyinfra.api import Config, FactBase, State, StringCommand
from pyinfra.api.exceptions import ConnectError
from pyinfra.api.facts import get_fact
from pyinfra.api.host import Host
from pyinfra.context import ctx_host, ctx_state
from pyinfra_cli.inventory import make_inventory

from sglang_deploy.deploy.facts import GpuProbe
from sglang_deploy.deploy.gateway_host import GatewayState
from sglang_deploy.deploy.hostscript import ascii_answer, embedded
from sglang_deploy.deploy.watching import LOCK_NAME
from sglang_deploy.deploy.weights import STAGE_SCRIPT
from sglang_deploy.plan.gateway import GatewaySettings
from sglang_deploy.lifecycle.revision import FILE_NAMES, STATE_ROOT, Layout
from sglang_deploy.status import (CMDLINE_BYTES, DIFF_BYTES, GPU_HEALTH_BYTES, HISTORY_BYTES, HISTORY_LINES,
                                       HISTORY_SCAN_BYTES, WATCH_LINES, GatewayHostSeen, gateway_host_seen,
                                       READ_PARALLEL, STAGED_UNIT_BYTES, Observed, WeightsCheck, parse_observed,
                                       parse_weights_check)

# The unit's properties (org.freedesktop.systemd1(5): ActiveState, SubState, MainPID, NRestarts;
# the *TimestampMonotonic ones are CLOCK_MONOTONIC in microseconds).
#: The GPU health script (stdlib + pynvml), sent inside the state read and run with the MainPID.
HEALTH_SCRIPT = Path(__file__).resolve().parent / "host" / "gpu_health.py"
#: NVML answers in well under a second; the journal's XID lines are read within 20 s by the script.
HEALTH_TIMEOUT_S = 45

UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "MainPID", "NRestarts",
                   "ActiveEnterTimestampMonotonic", "ExecMainStartTimestampMonotonic")

_SCRIPT = r"""
st={state_dir}
rev_ok() {{ case "$1" in ''|*[!0-9a-f]*) return 1;; esac; [ ${{#1}} -eq 16 ]; }}
# What the host holds is read from regular files only (a FIFO put there is never opened, it would block the
# read) and each read bounded in time (a link to a file that never ends, such as /proc/kmsg).
rd() {{ [ -f "$1" ] && timeout 10 head -c "$2" -- "$1"; }}
marker() {{ rd "$st/$1" 128 | tr -d '\r\n'; }}
echo "systemd=$(command -v systemctl >/dev/null && [ -d /run/systemd/system ] && echo yes || echo no)"
[ -d "$st" ] && echo "state_dir=yes"
cur=$(marker current); dep=$(marker deployed)
echo "current=$cur"; echo "deployed=$dep"; echo "previous=$(marker previous)"
ref=$dep; rev_ok "$ref" || ref=$cur; rev_ok "$ref" || ref=
echo "reference=$ref"
if [ -d "$st/revisions" ]; then
  for d in "$st"/revisions/*/; do
    [ -d "$d" ] || continue; n=$(basename "$d")
    if [ -f "$d/complete" ]; then echo "staged=$n"; else echo "staging=$n"; fi
  done
fi
{files}
if rev_ok "$cur"; then
  sv=$(rd "$st/revisions/$cur/version" 64 2>/dev/null | tr -d '\r\n'); echo "staged_version=$sv"
  case "$sv" in
    ''|*[!0-9A-Za-z.+!-]*) ;;
    *) for d in {venvs}/sglang-"$sv"/lib/python3*/site-packages/sglang-*.dist-info; do
         [ -d "$d" ] && {{ n=$(basename "$d" .dist-info); echo "installed_version=${{n#sglang-}}"; }}
       done;;
  esac
fi
echo "enabled=$(systemctl is-enabled {unit} 2>/dev/null)"
systemctl show {properties} {unit} 2>/dev/null | sed 's/^/unit_/'
mp=$(systemctl show -p MainPID --value {unit} 2>/dev/null)
case "$mp" in ''|0|*[!0-9]*) mp=;; esac
[ -n "$mp" ] && echo "cmdline=$(head -c {cmdline_bytes} /proc/$mp/cmdline 2>/dev/null | base64 -w0)"
[ -f {live_unit} ] && echo "unittext_live=$(rd {live_unit} {unit_bytes} | base64 -w0)"
if [ -n "$ref" ] && [ -f "$st/revisions/$ref/{unit_name}" ]; then
  echo "unittext_staged=$(rd "$st/revisions/$ref/{unit_name}" {unit_bytes} | base64 -w0)"
fi
if command -v python3 >/dev/null; then
  g=$(mktemp) && echo {health_script} | base64 -d > "$g" && \
    echo "gpu_health=$(timeout {health_timeout} python3 "$g" ${{mp:+--server-pid "$mp"}} --kernel-log auto 2>/dev/null \
      | tail -n 1 | head -c {health_bytes} | base64 -w0)"
  rm -f "$g"
fi
echo "now_us=$(python3 -c 'import time; print(time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000)' 2>/dev/null)"
if [ -f "$st/{lock}" ]; then
  echo "lock=yes"; echo "now_s=$(date +%s)"
  for k in started expires; do
    echo "lock_$k=$(rd "$st/{lock}" 256 | sed -n "s/^$k=\([0-9]\{{1,12\}}\)\$/\1/p" | head -n 1)"
  done
fi
h="$st/history.jsonl"
if [ -f "$h" ]; then
  echo "history_bytes=$(stat -c %s "$h")"
  sel() {{ timeout 10 tail -c {history_scan} "$h" | grep -a -v -E '"kind": ?"watch"' | tail -n {history_lines}
          timeout 10 tail -c {history_scan} "$h" | grep -a -E '"kind": ?"watch"' | tail -n {watch_lines}; }}
  echo "history_selected=$(sel | wc -c)"
  echo "history=$(sel | tail -c {history_bytes} | base64 -w0)"
fi
true
"""

_FILE = r"""
if [ -f {live} ]; then echo "live_{key}=$(timeout 10 sha256sum < {live} | cut -c1-64)"; fi
[ -e {tmp} ] && echo "tmp_{key}=yes"
if [ -n "$ref" ] && [ -f "$st/revisions/$ref/{name}" ]; then
  echo "staged_{key}=$(timeout 10 sha256sum < "$st/revisions/$ref/{name}" | cut -c1-64)"
  if [ {diff} = yes ] && ! {{ [ -f {live} ] && timeout 10 cmp -s {live} "$st/revisions/$ref/{name}"; }}; then
    echo "difflive_{key}=$(rd {live} {cap} 2>/dev/null | base64 -w0)"
    echo "diffstaged_{key}=$(rd "$st/revisions/$ref/{name}" {cap} | base64 -w0)"
  fi
fi
"""


class ServiceStatus(FactBase):
    """One service's state on its host, read in one command and changing nothing: markers, staged
    revisions, sha256 of the live files and of the reference revision's copies (with ``diff``,
    both texts of a file that differs), the SGLang installed in the running revision's venv,
    ``systemctl show`` of the unit, the host's monotonic clock, the tail of the gate's history
    (base64: whatever it holds arrives as one line), the running MainPID's argv
    (``/proc/PID/cmdline``), the live and the reference revision's unit text, and the GPU health
    line of ``host/gpu_health.py`` run with that MainPID (all base64, each bounded)."""

    def command(self, layout: Layout, venvs_dir: str, diff: bool = False) -> str:
        q = shlex.quote
        files = "".join(
            _FILE.format(key=key, live=q(path), tmp=q(f"{path}.sglang-deploy-tmp"), name=q(FILE_NAMES[key]),
                         diff="yes" if diff else "no", cap=DIFF_BYTES)
            for key, path in layout.live_paths().items())
        script = _SCRIPT.format(state_dir=q(layout.state_dir), files=files, venvs=q(venvs_dir),
                                unit=q(f"{layout.service}.service"),
                                properties=" ".join(f"-p {p}" for p in UNIT_PROPERTIES),
                                history_bytes=HISTORY_BYTES, history_lines=HISTORY_LINES,
                                history_scan=HISTORY_SCAN_BYTES, watch_lines=WATCH_LINES, lock=LOCK_NAME,
                                cmdline_bytes=CMDLINE_BYTES, unit_bytes=STAGED_UNIT_BYTES,
                                live_unit=q(layout.unit_path), unit_name=q(FILE_NAMES["unit"]),
                                health_script=base64.b64encode(HEALTH_SCRIPT.read_bytes()).decode(),
                                health_timeout=HEALTH_TIMEOUT_S, health_bytes=GPU_HEALTH_BYTES)
        return ascii_answer(script)  # a name that is not UTF-8 arrives as '?', the rest in base64

    def process(self, output: list[str]) -> Observed:
        return parse_observed(output)


@dataclass
class HostRead:
    """What one host gave: its probe and its state, or why not."""

    name: str
    probe: dict[str, Any] | None = None
    observed: Observed | None = None
    unreachable: str | None = None
    # service -> its state, for a host's data-parallel replicas past the first (plan.replicas)
    replicas: dict[str, Observed] = field(default_factory=dict)


def raise_open_files(wanted: int) -> int:
    """Raise this process's soft limit of open files towards ``wanted`` (never above the hard
    limit, never lowered): every host read holds one SSH socket until the end, and the common soft
    default of 1,024 would fail a fleet of that size with "Too many open files". The soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft


class StatusReader:
    """The inventory's hosts over SSH, for reading only; at most ``parallel`` hosts at work at once."""

    def __init__(self, inventory: str, parallel: int = READ_PARALLEL):
        self.inventory_path = inventory
        self.pool = gevent.pool.Pool(parallel)
        self.state = State(check_for_changes=False)
        with ctx_state.use(self.state):
            inventory_obj = make_inventory(str(Path(inventory)), cwd=str(Path.cwd()))
        self.state.init(inventory_obj, Config())
        self.hosts = {h.name: h for h in inventory_obj}

    def _each(self, names: Sequence[str], work: Callable[[Host], Any]) -> dict[str, Any]:
        """``work(host)`` for every named host at once, one greenlet each; an exception is the result."""

        def run(host: Host) -> Any:
            with ctx_state.use(self.state), ctx_host.use(host):
                try:
                    return work(host)
                except Exception as exc:  # noqa: BLE001 -- one host's failure is its row, not a traceback
                    return exc

        greenlets = {name: self.pool.spawn(run, self.hosts[name]) for name in names}
        gevent.joinall(list(greenlets.values()))
        return {name: g.value for name, g in greenlets.items()}

    def probe(self, names: Sequence[str], cache_roots: Mapping[str, str] | None = None) -> dict[str, HostRead]:
        """Connect and probe the GPUs of every named host in parallel (``cache_roots``: each host's
        ``sglang_cache_dir``, where the probe reads SGLang's P2P test results, as the deploy's does)."""
        roots = cache_roots or {}

        def work(host: Host) -> HostRead:
            try:
                host.connect(show_errors=False, raise_exceptions=True)
            except ConnectError as exc:
                return HostRead(host.name, unreachable=str(exc.args[0] if exc.args else exc))
            self.state.activate_host(host)
            probe = get_fact(self.state, host, GpuProbe, kwargs={"cache_root": roots.get(host.name)},
                             apply_failed_hosts=False)
            return HostRead(host.name, probe=probe if isinstance(probe, dict) else None)

        return {n: r if isinstance(r, HostRead) else HostRead(n, unreachable=_why(r))
                for n, r in self._each(names, work).items()}

    def read(self, reads: Mapping[str, HostRead], layouts: Mapping[str, tuple[Layout, str]],
             diff: bool, replicas: Mapping[str, Sequence[tuple[Layout, str]]] | None = None) -> None:
        """The :class:`ServiceStatus` of every reachable host with a layout, in parallel, into ``reads``;
        on a host with ``replicas`` (host -> the layouts of its replicas past the first), theirs too."""
        names = [n for n in layouts if reads[n].unreachable is None]
        more = replicas or {}

        def one(host: Host, layout: Layout, venvs_dir: str) -> Observed | None:
            observed = get_fact(self.state, host, ServiceStatus, kwargs={"layout": layout, "venvs_dir": venvs_dir,
                                                                          "diff": diff}, apply_failed_hosts=False)
            return observed if isinstance(observed, Observed) and observed.systemd is not None else None

        def work(host: Host) -> tuple[Observed | None, dict[str, Observed]]:
            observed = one(host, *layouts[host.name])
            found = {layout.service: one(host, layout, venvs) for layout, venvs in more.get(host.name, ())}
            return observed, {k: v for k, v in found.items() if v is not None}

        for name, result in self._each(names, work).items():
            if isinstance(result, tuple) and isinstance(result[0], Observed):
                reads[name].observed, reads[name].replicas = result
            else:
                reads[name].unreachable = _why(result) if isinstance(result, BaseException) else \
                    "the state read printed nothing (the connection dropped?)"

    def verify_weights(self, reads: Mapping[str, HostRead],
                       layouts: Mapping[str, tuple[Layout, str]]) -> dict[str, WeightsCheck]:
        """Every read host's re-hash of the snapshot its running revision serves, in parallel: the
        stager's ``--verify-served`` (the marker's manifest against the blobs, read once, streamed,
        within its deadline: 60 s plus the snapshot's size at 32 MiB/s), which changes nothing."""
        names = [n for n in layouts if reads[n].unreachable is None and reads[n].observed is not None]

        def work(host: Host) -> WeightsCheck:
            layout, _ = layouts[host.name]
            command = embedded(STAGE_SCRIPT, "python3", ["--host", host.name, "--verify-served",
                                                         "--state-dir", layout.state_dir])
            ok, output = host.run_shell_command(StringCommand(command), print_output=False, print_input=False)
            if not ok:
                why = " ".join(output.stderr_lines)[-200:] or "the re-hash failed"
                return WeightsCheck(served="?", error=why)
            return parse_weights_check("\n".join(output.stdout_lines))

        return {n: r if isinstance(r, WeightsCheck) else WeightsCheck(served="?", error=_why(r))
                for n, r in self._each(names, work).items()}

    def read_gateway_hosts(self, gateways: Mapping[str, GatewaySettings]) -> dict[str, GatewayHostSeen]:
        """Every named gateway host's own state over SSH, in parallel (``deploy.gateway_host.GatewayState``:
        its router release, its revisions, its unit); what it prints is checked, the rest is None."""

        def work(host: Host) -> GatewayHostSeen:
            try:
                host.connect(show_errors=False, raise_exceptions=True)
            except ConnectError as exc:
                return GatewayHostSeen(error=str(exc.args[0] if exc.args else exc))
            self.state.activate_host(host)
            settings = gateways[host.name]
            return gateway_host_seen(get_fact(self.state, host, GatewayState, kwargs={
                "state_dir": f"{STATE_ROOT}/{settings.service_name}", "python": settings.python,
                "unit": f"{settings.service_name}.service"}, apply_failed_hosts=False))

        return {n: r if isinstance(r, GatewayHostSeen) else GatewayHostSeen(error=_why(r))
                for n, r in self._each(list(gateways), work).items()}

    def close(self) -> None:
        def work(host: Host) -> None:
            if host.connected:
                host.disconnect()

        self._each([n for n, h in self.hosts.items() if h.connected], work)


def _why(exc: Any) -> str:
    if isinstance(exc, BaseException):
        text = str(exc.args[0]) if exc.args else ""
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return "no answer"


def quiet_pyinfra() -> Callable[[], None]:
    """Silence pyinfra's own log lines (connect errors, fact errors: the rows say them); returns the undo."""
    logger = logging.getLogger("pyinfra")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    return lambda: logger.setLevel(old)
