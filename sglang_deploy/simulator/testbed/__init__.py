"""SIMULATOR ONLY: throwaway "GPU host" stand-ins for the demo and the end-to-end tests.

Nothing here is used on a real GPU host.

Each host is this machine's own OS, booted by ``systemd-nspawn`` from an
overlay mount (``lowerdir=/``) whose upper layer is a tmpfs, so every write
the host makes (deploys, logs, tmpfiles clean-up) lands in memory and
vanishes at teardown. The host runs real systemd as PID 1 and a real sshd on
``127.0.0.1:<its own port>``; tests reach it with ``ssh`` or pyinfra exactly
as they would reach a GPU server. The containers share this machine's
network namespace, hence one sshd port per host and masked services that
would bind fixed ports.

Never boot systemd on this machine's real root filesystem: its tmpfiles set
up wipes ``/tmp`` and it would start services against the real files. This
package only ever boots ``<scratch>/<host>/merged``, the overlay.

These hosts have no GPU, no NVIDIA driver and no SGLang: tests that need them
must place their own stand-ins (via ``Testbed.boot(..., setup=...)``);
:func:`sglang_deploy.simulator.testbed.gpu.stage_gpu_host` stages one as a GPU server (NVML
stand-in, simulated SGLang wheels and its behaviour file).

Typical use::

    with Testbed() as bed:
        gpu1, gpu2 = bed.boot(["gpu1", "gpu2"])
        gpu1.ssh("systemctl is-system-running")
        bed.write_inventory(tmp / "inventory.py", [gpu1, gpu2], {"gpu1": {"x": 1}})

Layout of one testbed (``tempfile.mkdtemp(prefix="testbed-")``)::

    testbed-XXXX/
        id_ed25519, id_ed25519.pub   key pair, root's authorized key on every host
        <host>/upper/                tmpfs: overlay upper (u/) and work (w/) dirs
        <host>/merged/               overlay of / : the host's root filesystem
        <host>/console.log           systemd-nspawn's console (boot log)

Each container also gets a cgroup of its own on this machine, named
``<scratch folder name>-<host>`` (see :func:`.processes.systemd_cgroup_dirs`), and a
private tmpfs on ``/tmp``: files a host writes to its ``/tmp`` are not visible
under ``host.root / "tmp"`` from outside; use ``host.ssh`` for those.

Teardown (:meth:`Testbed.close`, also run at interpreter exit) powers every
container off, unmounts, deletes the scratch folder and then *verifies* that
nothing of the testbed is still mounted or running, raising otherwise.

Modules, bottom up:

- ``errors``: the requirements check and the errors;
- ``mounts``: the tmpfs + overlay mounts and unmounting them;
- ``processes``: a container's PID namespace and cgroups, seen from this machine;
- ``host``: one host (:class:`TestHost`) and its sshd port;
- ``rootfs``: a host's root filesystem made ready to boot (mounts, then its own config);
- ``container``: systemd-nspawn started, waited for, stopped;
- ``testbed``: the :class:`Testbed` (boot several, inventory, teardown and leak check);
- ``gpu``: stages a host as a GPU server before it boots.
"""

from sglang_deploy.simulator.testbed.errors import (
    BootError,
    HostCommandError,
    TestbedError,
    TestbedLeakError,
    missing_requirements,
)
from sglang_deploy.simulator.testbed.host import TestHost
from sglang_deploy.simulator.testbed.testbed import Testbed

__all__ = [
    "BootError",
    "HostCommandError",
    "TestHost",
    "Testbed",
    "TestbedError",
    "TestbedLeakError",
    "missing_requirements",
]
