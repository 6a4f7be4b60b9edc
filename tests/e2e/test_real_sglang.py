"""The released SGLang, installed by the deploy itself, proves the reference plan on a throwaway host.

One host stands in for the reference 2x RTX A6000 (inventory/a6000.py's plan; only the port is
this file's own). The deploy's install step installs ``sglang==0.5.23`` from the package index
into the host's per-version venv, exactly as on a GPU host (same pip options and pin; the index
settings are this machine's pip configuration, passed as the inventory's pip keys), and the
proof runs the installed package: its parser, its own argument resolution and checks against
the checkpoint's config.json (staged in the service's Hugging Face cache, as a weights stage
leaves it). What is stood in for, at the real boundaries only:

- the GPUs: NVML (sglang_deploy/simulator/nvml) for the deploy's probe, and the driver's
  ``libcuda.so.1`` with no device (sglang_deploy/simulator/testbed/cuda_driver.py), which the
  released package's compiled kernels need to load;
- serving: no GPU here to serve on, so the service's ``PYTHONPATH`` (``sglang_env``) puts the
  simulated server package (sglang_deploy/simulator/sglang_server) ahead of the installed one
  for the service alone; the install and the proof use the real package.

Space: the installed package is ~11 GB and a host's upper layer is a tmpfs, so the host's
venvs directory and its /tmp (pip unpacks downloads there) are bind mounts of directories on
disk this file creates and removes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pytest

from sglang_deploy.deploy.inventory import load_inventory
from sglang_deploy.simulator.sglang_server.build import build_wheel
from sglang_deploy.simulator.testbed import Testbed, TestHost, cuda_driver
from sglang_deploy.simulator.testbed.gpu import stage_gpu_host
from tests.conftest import ROOT
from tests.e2e.conftest import in_ci

VERSION = "0.5.23"
NAME = "e2e-realsg"
PORT = 31871  # distinct from every other e2e file: the session's hosts share this machine's network
VENVS_DIR = "/opt/sglang"  # sglang_venvs_dir's default
VENV = f"{VENVS_DIR}/sglang-{VERSION}"
SERVING_STANDIN = "/opt/sglang-serving-test-standin"
HUB_CACHE = "/var/lib/sglang/.cache/huggingface/hub"  # the service user's (home: sglang_workdir)
# the published config.json, recorded
CHECKPOINT = ROOT / "sglang_deploy/simulator/hub/checkpoints/Qwen--Qwen3.6-27B/config.json"
STAGED_COMMIT = "0" * 40  # the snapshot's name in the stand-in cache (no real revision is involved)
REMOVED_FLAG = "--enable-piecewise-cuda-graph"
NEEDED_GB = 20


def _prerequisites() -> list[str]:
    missing = [] if shutil.which("gcc") else ["gcc (the driver stand-in is compiled on this machine)"]
    free = shutil.disk_usage(_disk_parent()).free / 2**30
    if free < NEEDED_GB:
        missing.append(f"{free:.0f} GB free under {_disk_parent()}, {NEEDED_GB} needed")
    return missing


def _disk_parent() -> str:
    # Disk-backed scratch (FHS: /var/tmp survives reboots, so it is not a tmpfs).
    return os.environ.get("SGLANG_E2E_DISK_DIR", "/var/tmp")


def pip_index_data() -> dict:
    """This machine's pip index settings (pip's own configuration and PIP_* variables), as the
    inventory's pip keys: how a GPU host is told where its packages come from."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                         check=True).stdout
    conf = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        conf[key.split(".", 1)[-1]] = value.strip().strip("'\"")
    index = os.environ.get("PIP_INDEX_URL") or conf.get("index-url")
    extra = (os.environ.get("PIP_EXTRA_INDEX_URL") or conf.get("extra-index-url") or "").split()
    links = os.environ.get("PIP_FIND_LINKS") or conf.get("find-links")
    data: dict = {"sglang_pip_extra_index_urls": extra}
    if index:
        data["sglang_pip_index_url"] = index
    if links:
        data["sglang_pip_find_links"] = links.split()[0]
    return data


def host_data(**extra) -> dict:
    reference = next(h for h in load_inventory(str(ROOT / "inventory/a6000.py")))
    data = dict(reference.host_data)
    data["sglang_intents"] = {**data["sglang_intents"], "port": PORT}
    data["sglang_version"] = VERSION
    data["sglang_env"] = {"PYTHONPATH": SERVING_STANDIN}
    # No Hub here: the checkpoint's config.json is put in the service's Hugging Face cache by
    # _stage (what SGLang itself would have downloaded), and the proof reads it there.
    data["sglang_model_source"] = "server"
    return {**data, **pip_index_data(), **extra}


def _stage(name: str, root: Path, scratch: Path) -> None:
    wheels = scratch / "wheels"
    stage_gpu_host(root, wheels, "a6000x2-bridge")
    # The serving stand-in: the simulated package, unpacked where only the service's PYTHONPATH finds it.
    with zipfile.ZipFile(next(wheels.glob(f"sglang-{VERSION}-*.whl"))) as whl:
        whl.extractall(root / SERVING_STANDIN.lstrip("/"))
    cuda_driver.stage(root, scratch / "libcuda.so.1")
    snapshot = root / HUB_CACHE.lstrip("/") / "models--Qwen--Qwen3.6-27B"
    (snapshot / "snapshots" / STAGED_COMMIT).mkdir(parents=True)
    shutil.copy(CHECKPOINT, snapshot / "snapshots" / STAGED_COMMIT / "config.json")
    (snapshot / "refs").mkdir()
    (snapshot / "refs" / "main").write_text(STAGED_COMMIT)


@pytest.fixture(scope="module")
def real_host(tmp_path_factory):
    """(testbed, host, disk directory): a testbed of its own, so that its host is powered off
    before the disk directories bound into it are removed."""
    missing = _prerequisites()
    if missing:
        reason = "real-SGLang e2e needs " + "; ".join(missing)
        if in_ci():
            pytest.fail(reason + " (CI is set, so this fails instead of skipping)", pytrace=False)
        pytest.skip(reason)
    scratch = tmp_path_factory.mktemp("realsg")
    (scratch / "wheels").mkdir()
    build_wheel(VERSION, scratch / "wheels")
    cuda_driver.build(scratch)
    disk = Path(tempfile.mkdtemp(prefix="sglang-deploy-e2e-realsg-", dir=_disk_parent()))
    try:
        for sub in ("venvs", "tmp"):
            (disk / sub).mkdir()
        (disk / "tmp").chmod(0o1777)
        binds = {NAME: [(disk / "venvs", VENVS_DIR), (disk / "tmp", "/tmp")]}
        with Testbed() as bed:
            (host,) = bed.boot([NAME], setup=lambda name, root: _stage(name, root, scratch), binds=binds)
            host.ssh("ldconfig")  # the loader's cache lists the driver stand-in
            yield bed, host, disk
    finally:
        # rm, not shutil.rmtree: on this tree (the released package's venv and
        # pip's temporary files, written inside the host) Python 3.11's fd-based rmtree was seen
        # holding one descriptor per removed directory until the process ran out of them (CI: "Too
        # many open files" in pytest's own teardown after every test had passed)
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(disk)], check=False)


def deploy(testbed, host: TestHost, tmp: Path, data: dict, launcher: list[str] | None = None,
           timeout: float = 1500) -> tuple[subprocess.CompletedProcess, float]:
    inventory = testbed.write_inventory(tmp / "inventory.py", [host], {host.name: data}, group="gpu_fleet")
    # -vvv: pyinfra prints the commands it runs and their output (the proof's one line, pip's
    # command line if pip runs); this host has no secrets to hide.
    argv = [sys.executable, *(launcher or ["-m", "pyinfra"]), "-y", "-vvv", str(inventory), "deploy.py"]
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - started


def main_pid(host: TestHost) -> int:
    return int(host.ssh("systemctl show -p MainPID --value sglang.service").stdout.strip())


def live_files(host: TestHost) -> dict[str, bytes]:
    return {path: (host.root / path.lstrip("/")).read_bytes()
            for path in ("/etc/systemd/system/sglang.service", "/etc/sglang/sglang.env", "/etc/nccl.conf")}


def venv_stamp(host: TestHost) -> str:
    """Modification times of the venv and its site-packages: any pip install changes them."""
    return host.ssh(f"stat -c '%n %Y.%y' {VENV} {VENV}/lib/python3.11/site-packages "
                    f"{VENV}/lib/python3.11/site-packages/sglang").stdout


def _say(line: str) -> None:
    print(line, flush=True)  # the figures (.ci/run runs this file with -s)


def test_deploy_installs_the_released_package_and_proves_the_reference_plan(real_host, tmp_path):
    testbed, host, disk = real_host
    result, seconds = deploy(testbed, host, tmp_path, host_data())
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-4000:]
    _say(f"[realsg] first deploy (install of sglang=={VERSION} from the index, proof, start, gate): {seconds:.0f} s")
    versions = host.ssh(f"{VENV}/bin/python -c 'import importlib.metadata as m; "
                        "print(m.version(\"sglang\"), m.version(\"torch\"), m.version(\"sglang-kernel\"))'").stdout
    assert versions.split() == [VERSION, "2.14.1", "0.4.10"], versions  # the released pins, not the simulator
    used = int(subprocess.run(["du", "-s", "--block-size=1M", str(disk / "venvs")], capture_output=True, text=True,
                              check=True).stdout.split()[0])
    assert used > 5000, f"the venv is {used} MiB on disk: not the released package's tree"
    out = result.stdout + result.stderr
    accepts = f"SGLang {VERSION} accepts the planned launch flags"
    proof = next((line for line in out.splitlines() if accepts in line), "")
    assert ("prepare_server_args + resolve_once + check_server_args with" in proof
            and "Qwen3.6-27B" in proof), out[-6000:]
    _say(f"[realsg] proof on the host: {proof.strip()}")
    # The install's own span on the host: from the venv's creation to the revision staged next.
    span = host.ssh(f"echo $(( $(stat -c %Y /var/lib/sglang-deploy/sglang/revisions/*/complete) - "
                    f"$(stat -c %Y {VENV}/pyvenv.cfg) ))").stdout.strip()
    _say(f"[realsg] install of sglang=={VERSION} into the host's venv (venv created -> revision staged): {span} s")
    assert host.ssh("systemctl is-active sglang.service").stdout.strip() == "active"


def test_unchanged_redeploy_does_not_reinstall(real_host, tmp_path):
    testbed, host, _ = real_host
    before, pid = venv_stamp(host), main_pid(host)
    result, seconds = deploy(testbed, host, tmp_path, host_data())
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-4000:]
    _say(f"[realsg] unchanged redeploy: {seconds:.0f} s")
    assert venv_stamp(host) == before
    assert main_pid(host) == pid
    assert "bin/pip " not in out_of(result), "pip ran on an unchanged redeploy"


def out_of(result: subprocess.CompletedProcess) -> str:
    return result.stdout + result.stderr


# A controller whose catalog of 0.5.23 still lists the removed flag (as a catalog built from a
# wrong wheel would): the planner lets it through, and only the host's proof can stop it.
WRONG_CATALOG = """
import json, pathlib, runpy, sys
import sglang_deploy.plan.catalog as catalog
data = json.loads(catalog._FILES["0.5.23"].read_text())
data["options"][{flag!r}] = json.loads(catalog._FILES["0.5.9"].read_text())["options"][{flag!r}]
wrong = pathlib.Path(sys.argv.pop(1))
wrong.write_text(json.dumps(data))
catalog._FILES["0.5.23"] = wrong
catalog.load_catalog.cache_clear()
sys.argv[0] = "pyinfra"
runpy.run_module("pyinfra", run_name="__main__", alter_sys=True)
"""


def test_flag_the_released_package_removed_stops_the_host_before_restart(real_host, tmp_path):
    testbed, host, _ = real_host
    pid, files = main_pid(host), live_files(host)
    launcher = ["-c", WRONG_CATALOG.format(flag=REMOVED_FLAG), str(tmp_path / "sglang-0.5.23.json")]
    result, _ = deploy(testbed, host, tmp_path, host_data(sglang_extra_args=[REMOVED_FLAG]), launcher=launcher)
    out = out_of(result)
    assert result.returncode != 0, out[-6000:]
    assert (f"SGLang {VERSION} installed on this host refuses the planned launch flags: "
            f"unrecognized arguments: {REMOVED_FLAG}") in out, out[-6000:]
    assert "Restart the service" not in out.split("refuses the planned launch flags", 1)[1]
    assert main_pid(host) == pid
    assert live_files(host) == files
