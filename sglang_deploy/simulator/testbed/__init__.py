"""SIMULATOR: throwaway "GPU host" stand-ins for end-to-end tests.

Each host is a ``systemd-nspawn`` container booted from an overlay of this
machine's own ``/`` whose writes land in a tmpfs, running real systemd and a
real sshd on its own loopback port. See :mod:`sglang_deploy.simulator.testbed.hosts`.

These hosts have no GPU, no NVIDIA driver and no SGLang: tests that need them
must place their own stand-ins (via ``Testbed.boot(..., setup=...)``);
:func:`sglang_deploy.simulator.testbed.gpu.stage_gpu_host` stages one as a GPU server (NVML
stand-in, simulated SGLang wheels and its behaviour file).
"""

from sglang_deploy.simulator.testbed.hosts import (
    BootError,
    HostCommandError,
    Testbed,
    TestbedError,
    TestbedLeakError,
    TestHost,
    missing_requirements,
)

__all__ = [
    "BootError",
    "HostCommandError",
    "TestHost",
    "Testbed",
    "TestbedError",
    "TestbedLeakError",
    "missing_requirements",
]
