"""pyinfra operations of the deploy. Each only moves files and runs commands;
what to do was decided by the core (`sglang_deploy.lifecycle.revision.decide`).
"""

from __future__ import annotations

import json
import shlex
from io import BytesIO
from pathlib import Path
from typing import Sequence

from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, StringCommand, operation
from pyinfra.facts.files import FileContents
from pyinfra.operations.util.files import generate_color_diff

from sglang_deploy.deploy.hostscript import embedded
from sglang_deploy.plan.render import RenderedFiles
from sglang_deploy.plan.transfer import TransferEngine
from sglang_deploy.lifecycle.revision import FILE_NAMES, Layout
from sglang_deploy.secrecy import URL_CREDENTIALS

HERE = Path(__file__).resolve().parent
PROVE_SCRIPT = HERE / "host" / "prove_argv.py"
GPU_WAIT_SCRIPT = HERE / "host" / "wait_gpus_free.py"
FILE_MODES = {"unit": "0644", "env": "0600", "nccl_conf": "0644"}


@operation()
def install_sglang(
    venv: str,
    version: str,
    extras: Sequence[str] = (),
    index_url: str | None = None,
    extra_index_urls: Sequence[str] = (),
    find_links: str | None = None,
    no_index: bool = False,
    installed_version: str | None = None,
    installer: str = "pip",
):
    """
    Install SGLang, pinned exactly, into a virtualenv (created with the host's python3).

    + venv: virtualenv path
    + version: exact SGLang version
    + extras: package extras, kept (``sglang[all]==X``; pyinfra's pip.packages drops them)
    + index_url / extra_index_urls / find_links / no_index: the index options (air-gapped fleets)
    + installed_version: what the host has now (DeployState fact); equal means nothing to do
    + installer: ``pip`` (the venv's own) or ``uv`` (``uv pip install --python VENV/bin/python``;
      uv itself is pip-installed once into ``<venvs dir>/.uv`` with the same index options)
    """
    if installed_version == version:
        return
    q = shlex.quote
    index = (index_url, extra_index_urls, find_links, no_index)
    yield f"test -x {q(venv)}/bin/python || python3 -m venv {q(venv)}"
    requirement = "sglang" + (f"[{','.join(extras)}]" if extras else "") + f"=={version}"
    if installer == "uv":
        tools = f"{str(Path(venv).parent)}/.uv"
        yield f"test -x {q(tools)}/bin/python || python3 -m venv {q(tools)}"
        yield from _pip_install(f"{q(tools)}/bin/pip", index, "uv", guard=f"test -x {q(tools)}/bin/uv")
        yield from _uv_install(f"{q(tools)}/bin/uv", f"{venv}/bin/python", index, requirement)
    else:
        yield from _pip_install(f"{q(venv)}/bin/pip", index, requirement)
    yield (f"test \"$({q(venv)}/bin/python -c 'import importlib.metadata as m; print(m.version(\"sglang\"))')\""
           f" = {q(version)} || {{ echo 'installed SGLang is not {version}' >&2; exit 1; }}")


@operation()
def install_transfer_engine(venv: str, engine: TransferEngine, index: tuple, installer: str = "pip"):
    """
    A prefill or decode server's KV transfer engine into its SGLang venv (``plan.transfer``), pinned,
    then imported there as SGLang imports it at start: a package the host cannot load stops the
    host here, before anything stops.

    + venv: the SGLang virtualenv
    + engine: the package, its module and version
    + index: (index_url, extra_index_urls, find_links, no_index), as for SGLang
    + installer: ``pip`` or ``uv``, as for SGLang
    """
    q = shlex.quote
    python = f"{q(venv)}/bin/python"
    have = (f"test \"$({python} -c 'import importlib.metadata as m; print(m.version({engine.package!r}))' "
            f"2>/dev/null)\" = {q(engine.version)}")
    if installer == "uv":
        tools = f"{str(Path(venv).parent)}/.uv"
        yield from _uv_install(f"{q(tools)}/bin/uv", f"{venv}/bin/python", index, engine.requirement, guard=have)
    else:
        yield from _pip_install(f"{q(venv)}/bin/pip", index, engine.requirement, guard=have)
    why = f"{engine.requirement} is installed but {engine.module} does not import: SGLang would not start"
    yield f"{python} -c {q('import ' + engine.module)} || {{ echo {q(why)} >&2; exit 1; }}"


def _pip_install(pip: str, index: tuple, requirement: str, guard: str | None = None):
    """pip's install of ``requirement``; URLs with credentials go in a pip config file in a
    root-only directory, read through PIP_CONFIG_FILE: never in pip's argv, which every local
    user can read in /proc. ``guard``: a test that skips it when true."""
    index_url, extra_index_urls, find_links, no_index = index
    args = ["install", "--disable-pip-version-check", "-q"] + (["--no-index"] if no_index else [])
    options, config = pip_url_options(index_url, extra_index_urls, find_links)
    command = f"{pip} " + " ".join(shlex.quote(a) for a in [*args, *options, requirement])
    if config:
        conf_dir = shlex.quote(PIP_CONFIG_DIR)
        yield f"rm -rf {conf_dir} && mkdir -m 0700 {conf_dir}"
        yield FileUploadCommand(BytesIO(config.encode()), f"{PIP_CONFIG_DIR}/pip.conf")
        command = f"PIP_CONFIG_FILE={conf_dir}/pip.conf {command}; rc=$?; rm -rf {conf_dir}; exit $rc"
    yield f"{guard} || {{ {command}; }}" if guard else command


def _uv_install(uv: str, python: str, index: tuple, requirement: str, guard: str | None = None):
    """``uv pip install`` of ``requirement`` into the venv of ``python``; URLs with credentials go
    in a root-only uv.toml (its ``[pip]`` table: index-url, extra-index-url, find-links), read
    through UV_CONFIG_FILE, never in argv. ``guard``: a test that skips it when true."""
    index_url, extra_index_urls, find_links, no_index = index
    words, config = pip_url_options(index_url, extra_index_urls, find_links)
    args = ["pip", "install", "-q", "--python", python] + (["--no-index"] if no_index else []) + words
    command = f"{uv} " + " ".join(shlex.quote(a) for a in [*args, requirement])
    if config:
        toml = ["[pip]"]
        for line in config.splitlines()[1:]:
            key, _, value = line.partition(" = ")
            urls = value.split()
            toml.append(f"{key} = {json.dumps(urls[0])}" if key == "index-url" else f"{key} = {json.dumps(urls)}")
        conf_dir = shlex.quote(PIP_CONFIG_DIR)
        yield f"rm -rf {conf_dir} && mkdir -m 0700 {conf_dir}"
        yield FileUploadCommand(BytesIO(("\n".join(toml) + "\n").encode()), f"{PIP_CONFIG_DIR}/uv.toml")
        command = f"UV_CONFIG_FILE={conf_dir}/uv.toml {command}; rc=$?; rm -rf {conf_dir}; exit $rc"
    yield f"{guard} || {{ {command}; }}" if guard else command


# Root-only, on tmpfs where systemd hosts have one; removed after pip ran.
PIP_CONFIG_DIR = "/run/sglang-deploy-pip"


def pip_url_options(index_url: str | None, extra_index_urls: Sequence[str],
                    find_links: str | None) -> tuple[list[str], str]:
    """pip's URL options split two ways: ``--option URL`` words for URLs without credentials, and
    the text of a pip config file (pip's ``[global]`` section, option names without ``--``,
    several values separated by whitespace) for an option any of whose URLs has credentials."""
    words: list[str] = []
    config: list[str] = []
    for option, urls in (("index-url", [index_url] if index_url else []), ("extra-index-url", list(extra_index_urls)),
                         ("find-links", [find_links] if find_links else [])):
        if any(URL_CREDENTIALS.search(url) for url in urls):
            config.append(f"{option} = {' '.join(urls)}")
        else:
            for url in urls:
                words += [f"--{option}", url]
    return words, ("[global]\n" + "\n".join(config) + "\n") if config else ""


@operation()
def stage_revision(layout: Layout, rev: str, files: RenderedFiles, argv: Sequence[str], sglang_version: str):
    """
    Write a revision's files aside, root-only, before anything live changes.

    + layout: the service's paths
    + rev: revision id (content hash)
    + files: rendered unit, env file (with secrets) and nccl.conf
    + argv: the planned launch_server argv, kept for the proof against the installed parser
    """
    rdir = layout.revision_dir(rev)
    yield (f"rm -rf {shlex.quote(rdir)} && mkdir -p {shlex.quote(rdir)} && "
           f"chmod 0700 {shlex.quote(layout.state_dir)} {shlex.quote(rdir)}")
    for key, name in FILE_NAMES.items():
        yield FileUploadCommand(BytesIO(getattr(files, key).encode()), f"{rdir}/{name}")
        yield f"chmod {FILE_MODES[key]} {shlex.quote(rdir)}/{name}"
    yield FileUploadCommand(BytesIO(json.dumps(list(argv)).encode()), f"{rdir}/argv.json")
    yield FileUploadCommand(BytesIO(sglang_version.encode()), f"{rdir}/version")
    yield f"touch {shlex.quote(rdir)}/complete"


@operation(is_idempotent=False)
def prove_argv(layout: Layout, rev: str, python: str, options: Sequence[str] = ()):
    """
    Prove the revision's argv with the installed SGLang: its own parser, then (where the
    checkpoint's config.json is on the host) its own validation; a rejection stops here.

    + layout / rev: where the staged argv is
    + python: the venv's python
    + options: prove_argv.py's options (sglang_deploy/deploy/proof.py: the probed GPUs, the hub cache)
    """
    yield embedded(PROVE_SCRIPT, python, [f"{layout.revision_dir(rev)}/argv.json", *options])


@operation()
def swap_in(layout: Layout, rev: str, keys: Sequence[str], previous: str | None, unit_text: str | None = None,
            clear_previous: bool = False):
    """
    Make a staged revision live: copy its files over the live ones (atomic rename each),
    and record it as current (the one it replaces becomes previous).

    + unit_text: the new unit, shown as a diff against the live one under ``--diff``
      (the env file, which holds secrets, is never shown)
    + clear_previous: with no ``previous``, remove the previous marker (a rollback to a
      revision that had none)
    """
    if state.config.DIFF and unit_text is not None and "unit" in keys:
        current = host.get_fact(FileContents, path=layout.unit_path) or []
        host.log(f"Will change {layout.unit_path}", logger.info)
        for line in generate_color_diff([f"{line}\n" for line in current], unit_text.splitlines(keepends=True)):
            logger.info("  %s", line)
    rdir = layout.revision_dir(rev)
    live = layout.live_paths()
    for key in keys:
        dest = live[key]
        tmp = f"{dest}.sglang-deploy-tmp"
        yield (f"mkdir -p {shlex.quote(str(Path(dest).parent))} && "
               f"install -m {FILE_MODES[key]} -o root -g root "
               f"{shlex.quote(rdir)}/{FILE_NAMES[key]} {shlex.quote(tmp)} && "
               f"mv -f {shlex.quote(tmp)} {shlex.quote(dest)}")
    st = layout.state_dir
    if previous:
        yield f"echo {shlex.quote(previous)} > {shlex.quote(st)}/previous"
    elif clear_previous:
        yield f"rm -f {shlex.quote(st)}/previous"
    yield f"echo {shlex.quote(rev)} > {shlex.quote(st)}/current"


def _stop_command(layout: Layout) -> str:
    """Record the service's processes (cgroup v2, or v1's systemd/unified hierarchies), then stop it."""
    unit = shlex.quote(f"{layout.service}.service")
    cg_file = shlex.quote(f"{layout.state_dir}/old-pids")
    return (f"cg=$(systemctl show -p ControlGroup --value {unit}); : > {cg_file}; "
            f"if [ -n \"$cg\" ]; then for d in /sys/fs/cgroup /sys/fs/cgroup/unified /sys/fs/cgroup/systemd; do "
            f"if [ -f \"$d$cg/cgroup.procs\" ]; then cat \"$d$cg/cgroup.procs\" > {cg_file}; break; fi; done; fi; "
            f"systemctl stop {unit}")


@operation(is_idempotent=False)
def stop_service(layout: Layout, health_url: str | None = None):
    """
    Stop the service, recording its processes for ``restart_service(stop=False)`` to wait on.
    A multi-node group stops rank 0 first: SGLang's other ranks wait for its shutdown broadcast.

    + health_url: the server's URL on the host; given, the old server's last answer and the stop
      begin the restart's stamps (``restart_service(stamped=True)`` adds the rest)
    """
    if health_url is not None:
        yield _last_answer_command(layout, health_url)
        yield _stamp(layout, "stopping")
    yield _stop_command(layout)
    if health_url is not None:
        yield _stamp(layout, "stopped")


def downtime_file(layout: Layout) -> str:
    return layout.marker("restart-stamps")


def _stamp(layout: Layout, name: str) -> str:
    return f"echo {name} $(date +%s.%N) >> {shlex.quote(downtime_file(layout))}"


def _last_answer_command(layout: Layout, health_url: str) -> str:
    """Probe the old server's /health just before the stop: its answer is the last one the deploy saw."""
    probe = (f"import urllib.request; urllib.request.urlopen({health_url + '/health'!r}, timeout=2)")
    return (f"mkdir -p {shlex.quote(layout.state_dir)} && : > {shlex.quote(downtime_file(layout))} && "
            f"if python3 -c {shlex.quote(probe)} 2>/dev/null; then {_stamp(layout, 'last_answer')}; fi")


@operation(is_idempotent=False)
def restart_service(layout: Layout, gpu_indices: Sequence[int], gpu_wait_s: int = 120, stop: bool = True,
                    health_url: str | None = None, stamped: bool = False):
    """
    Stop the service, wait until none of its old processes is alive or holds a GPU
    (NVML on the host, bounded), and start it. The revision is marked deployed only
    after the gate passes (``mark_deployed``).

    + stop: False when ``stop_service`` already stopped it (and recorded its processes)
    + health_url: the server's URL on the host; given, the moments of the restart (the old
      server's last answer, stopped, GPUs free, started) are written to ``restart-stamps`` in
      the state directory for the serving gap (sglang_deploy.downtime)
    + stamped: add the moments after the stop to the stamps ``stop_service(health_url=...)`` began
      (rank 0 of a tp group, stopped before the others)
    """
    unit = shlex.quote(f"{layout.service}.service")
    cg_file = shlex.quote(f"{layout.state_dir}/old-pids")
    timed = health_url is not None or stamped
    if health_url is not None:
        yield _last_answer_command(layout, health_url)
    if stop:
        if timed:
            yield _stamp(layout, "stopping")
        yield _stop_command(layout)
        if timed:
            yield _stamp(layout, "stopped")
    indices = ",".join(str(i) for i in gpu_indices)
    yield embedded(GPU_WAIT_SCRIPT, "python3", ["--pids-file", cg_file, "--gpus", indices,
                                                   "--timeout", str(gpu_wait_s)])
    if timed:
        yield _stamp(layout, "gpus_free")
    # A deploy's restart is deliberate: systemd's start rate limit (StartLimitBurst, meant for a
    # crash loop) must not refuse it after earlier deploys and rollbacks; reset-failed clears it.
    yield f"systemctl reset-failed {unit} 2>/dev/null || true"
    yield f"systemctl start {unit}"
    if timed:
        yield _stamp(layout, "started")


def mark_deployed_command(layout: Layout, rev: str) -> str:
    """The shell command that records ``rev`` as deployed."""
    return f"echo {shlex.quote(rev)} > {shlex.quote(layout.marker('deployed'))}"


def clear_deployed_command(layout: Layout) -> str:
    """The shell command that records no revision as deployed (the next deploy restarts and gates)."""
    return f"rm -f {shlex.quote(layout.marker('deployed'))}"


@operation(is_idempotent=False)
def mark_deployed(layout: Layout, rev: str):
    """Record ``rev`` as deployed (proven by the gate): the next deploy of it restarts nothing."""
    yield StringCommand(mark_deployed_command(layout, rev))


@operation()
def prune_revisions(layout: Layout, revisions: Sequence[str]):
    """Remove staged revisions other than the current and the previous one."""
    for rev in revisions:
        yield f"rm -rf {shlex.quote(layout.revision_dir(rev))}"
