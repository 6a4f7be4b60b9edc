"""The continuous check on the host (``sglang_watch``, docs/watch.md): its files and units put in
place, or taken away, and the host lock a deploy holds while it changes the live service.

The watch's files live in ``<state_dir>/watch/`` (root, 0700; files 0600): the host script
(sglang_deploy/deploy/host/watch.py and its modules), the gate's zipapp (gatezip.py), the weights stager (for its
slice re-hash) with its parts' zip (hostscript.parts_zip) and the GPU health reader when the
package has one, the watch's config
(``watch.json``: paths and bounds, no secret), the gate options per revision (``gate-<rev>.json``,
gating.watch_options: the deploy gate's options with the plan to compare; the API key is named
by file, never written there) and the API key's own file (``key``). One fact reads the sha256 of
all of them at prepare time; one operation uploads what differs, so an unchanged deploy changes
nothing. None of it is part of the revision: turning the watch on, off or changing it restarts
nothing.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from io import BytesIO
from pathlib import Path
from typing import Mapping

from pyinfra.api import FactBase, FileUploadCommand, operation

from sglang_deploy.deploy import gatezip, hostscript
from sglang_deploy.deploy.context import Prepared
from sglang_deploy.plan.render import WatchFiles, render_watch, watch_dir
from sglang_deploy.lifecycle.revision import Layout
from sglang_deploy.plan.watch import REPEATS, WatchSettings

HOST_DIR = Path(__file__).resolve().parent / "host"
#: deploy/host/watch.py's own modules, copied beside it: it imports them from there.
WATCH_MODULES = ("watch_io.py", "watch_drift.py")
#: Host scripts the watch runs, copied beside it (gpu_health.py only where the package has it),
#: each with its parts' zip where it has parts (stage_weights.py: stager.zip).
SCRIPTS = ("watch.py", *WATCH_MODULES, "stage_weights.py", "gpu_health.py")
RULES_ZIP = "hostrules.zip"  # deploy/host/watch.py puts it first on its sys.path
LOCK_NAME = "deploy.lock"  # deploy/host/watch.py reads it
#: Beyond the gate's and the rollback's own bounds, what a deploy's changing phase may take.
LOCK_SLACK_S = 900
UNIT_DIR = "/etc/systemd/system"


def unit_paths(service: str) -> tuple[str, str]:
    return f"{UNIT_DIR}/{service}-watch.service", f"{UNIT_DIR}/{service}-watch.timer"


class WatchState(FactBase):
    """sha256 of every file of the watch on the host (units and its folder), by path."""

    def command(self, service: str, state_dir: str) -> str:
        paths = " ".join(shlex.quote(p) for p in unit_paths(service))
        wdir = shlex.quote(watch_dir(state_dir))
        return (f"for f in {paths} {wdir}/*; do [ -f \"$f\" ] && [ ! -L \"$f\" ] && "
                "printf '%s %s\\n' \"$(sha256sum < \"$f\" | cut -c1-64)\" \"$f\"; done; true")

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def process(self, output: list[str]) -> dict[str, str]:
        out = {}
        for line in output:
            digest, _, path = line.partition(" ")
            if len(digest) == 64 and path:
                out[path] = digest
        return out


def watch_config(p: Prepared, watch: WatchSettings) -> dict:
    layout, plan = p.layout, p.plan
    return {"format": "sglang-deploy watch", "version": 1, "service": layout.service, "state_dir": layout.state_dir,
            "watch_dir": watch_dir(layout.state_dir), "interval_s": watch.interval_s, "timeout_s": watch.timeout_s,
            "max_tokens": watch.max_tokens, "repeats": REPEATS, "textfile_dir": watch.textfile_dir,
            "verify_weights_bytes": watch.verify_weights_bytes, "prefill_tokens": watch.prefill_tokens,
            "venvs_dir": plan.service.venvs_dir,
            "live": layout.live_paths(), "python3": "/usr/bin/python3"}


def wanted_files(p: Prepared, watch: WatchSettings, gate_options: bytes) -> dict[str, tuple[bytes, str]]:
    """Every file the watch needs on the host: path -> (content, mode)."""
    layout = p.layout
    wdir = watch_dir(layout.state_dir)
    units: WatchFiles = render_watch(p.plan, watch, layout.state_dir)
    service_unit, timer_unit = unit_paths(layout.service)
    files: dict[str, tuple[bytes, str]] = {
        service_unit: (units.service.encode(), "0644"), timer_unit: (units.timer.encode(), "0644"),
        f"{wdir}/gate.pyz": (gatezip.build(), "0600"),
        f"{wdir}/{RULES_ZIP}": (gatezip.rules_zip(), "0600"),
        f"{wdir}/watch.json": (json.dumps(watch_config(p, watch), indent=1, sort_keys=True).encode(), "0600"),
        f"{wdir}/gate-{p.revision}.json": (gate_options, "0600"),
    }
    for name in SCRIPTS:
        if (HOST_DIR / name).is_file():
            files[f"{wdir}/{name}"] = ((HOST_DIR / name).read_bytes(), "0600")
            parts = hostscript.parts_zip(HOST_DIR / name)  # beside it: the script puts it on its sys.path
            if parts is not None:
                files[f"{wdir}/{hostscript.PARTS[name]}.zip"] = (parts, "0600")
    if p.api_key:
        files[f"{wdir}/key"] = (p.api_key.encode(), "0600")
    return files


def textfile_dir_command(textfile_dir: str) -> str:
    """Make the textfile directory where it is missing, each missing part 0755, without following a
    link: a part that is a symbolic link, or not a directory, stops the deploy with the reason, and a
    directory already there keeps its owner and mode (``install -d -m`` would follow a link and
    chmod what it found, /tmp's sticky bit included)."""
    q = shlex.quote
    parts = [p for p in textfile_dir.split("/") if p]
    prefixes = " ".join(q("/" + "/".join(parts[: i + 1])) for i in range(len(parts)))
    say = (f"printf 'sglang_watch.textfile_dir %s: %s is %s; refusing to make or write the textfile directory "
           f"through it\\n' {q(textfile_dir)} \"$d\"")
    return (f"for d in {prefixes}; do "
            f"if [ -L \"$d\" ]; then {say} 'a symbolic link' >&2; exit 1; "
            "elif [ ! -e \"$d\" ]; then mkdir -m 0755 \"$d\" || exit 1; "
            f"elif [ ! -d \"$d\" ]; then {say} 'not a directory' >&2; exit 1; "
            "fi; done")


@operation()
def install_watch(layout: Layout, files: Mapping[str, tuple[bytes, str]], have: Mapping[str, str],
                  textfile_dir: str, start: bool = False):
    """
    Put the watch's files and units in place (only those that differ) and keep its timer enabled
    and running; remove a key file the plan no longer has.

    + files: path -> (content, mode), from ``wanted_files``
    + have: path -> sha256 on the host now (the ``WatchState`` fact)
    + textfile_dir: node_exporter's textfile directory (made when missing, never through a link:
      ``textfile_dir_command``)
    + start: run one check now (after a restart: the figures of the new revision)
    """
    q = shlex.quote
    wdir = watch_dir(layout.state_dir)
    service_unit, timer_unit = unit_paths(layout.service)
    timer = f"{layout.service}-watch.timer"
    changed = [path for path, (data, _) in files.items() if have.get(path) != hashlib.sha256(data).hexdigest()]
    stale_key = f"{wdir}/key" in have and f"{wdir}/key" not in files
    if not changed and not stale_key and not start and (service_unit in have and timer_unit in have):
        return
    yield f"install -d -m 0700 -o root -g root {q(layout.state_dir)} {q(wdir)}"
    yield textfile_dir_command(textfile_dir)
    for path in changed:
        data, mode = files[path]
        tmp = f"{path}.sglang-deploy-tmp"
        yield f"rm -f {q(tmp)} && (umask 077 && : > {q(tmp)})"
        yield FileUploadCommand(BytesIO(data), tmp)
        yield f"chmod {mode} {q(tmp)} && chown root:root {q(tmp)} && mv -f {q(tmp)} {q(path)}"
    if stale_key:
        yield f"rm -f {q(wdir)}/key"
    if service_unit in changed or timer_unit in changed:
        yield "systemctl daemon-reload"
        yield f"systemctl enable {q(timer)} && systemctl restart {q(timer)}"
    if start:
        yield f"systemctl start --no-block {q(layout.service + '-watch.service')}"


@operation()
def remove_watch(layout: Layout, have: Mapping[str, str]):
    """
    Take the watch away (``sglang_watch`` unset): stop and disable its timer, remove its units,
    its folder and its textfile (the one its config names, not through a link). Nothing when it is
    not there.

    + have: the ``WatchState`` fact
    """
    if not have:
        return
    q = shlex.quote
    wdir = watch_dir(layout.state_dir)
    name = layout.service
    yield (f"systemctl disable --now {q(name + '-watch.timer')} 2>/dev/null; "
           f"systemctl stop {q(name + '-watch.service')} 2>/dev/null; true")
    prom = f"sglang_deploy_{name}.prom"
    yield (f"d=$(sed -n 's/^ *\"textfile_dir\": \"\\(\\/[A-Za-z0-9_.\\/@+-]*\\)\",*$/\\1/p' {q(wdir)}/watch.json "
           f"2>/dev/null | head -n 1); [ -n \"$d\" ] && [ -d \"$d\" ] && [ \"$(readlink -f -- \"$d\")\" = \"$d\" ] && "
           f"rm -f \"$d\"/{q(prom)}; true")  # only where no part of the path is a link
    yield f"rm -f {' '.join(q(p) for p in unit_paths(name))} && rm -rf {q(wdir)}"
    yield "systemctl daemon-reload"


def lock_command(layout: Layout, bound_s: int) -> str:
    """Take the host's lock (written aside, renamed: whole or not at all) and stop a check that is
    running: the watch skips while the lock is younger than its ``expires``. Never waits on it."""
    q = shlex.quote
    lock = f"{layout.state_dir}/{LOCK_NAME}"
    return (f"mkdir -p {q(layout.state_dir)} && now=$(date +%s) && "
            f"printf 'sglang-deploy deploy lock\\nstarted=%s\\nexpires=%s\\n' \"$now\" \"$((now + {int(bound_s)}))\" "
            f"> {q(lock + '.tmp')} && mv -f {q(lock + '.tmp')} {q(lock)} && "
            f"{{ systemctl stop {q(layout.service + '-watch.service')} 2>/dev/null; true; }}")


def unlock_command(layout: Layout) -> str:
    return f"rm -f {shlex.quote(layout.state_dir + '/' + LOCK_NAME)}"


def lock_bound_s(p: Prepared) -> int:
    """How long the lock may be honoured: the restart (stop, GPUs free, start), the gate's wait and
    measurement, and a rollback's restart and wait, with slack."""
    return int(2 * (p.ready_timeout_s + p.plan.service.timeout_stop_s + 120) + LOCK_SLACK_S)
