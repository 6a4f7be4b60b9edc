"""A stand-in for the NVIDIA driver's ``libcuda.so.1`` on a throwaway host: a driver with no device.

SIMULATOR ONLY (the tests). A real GPU host has the driver's library; a throwaway host has
none, and the released SGLang's compiled kernels (sgl_kernel's ``common_ops``, torch's CUDA
libraries) name ``libcuda.so.1`` as a needed library, so importing them, which SGLang's own
argument resolution does, fails without it. This library defines the driver functions those
libraries link against (``cuda_driver_symbols.txt``, read from the released package's install),
each returning ``CUDA_ERROR_NO_DEVICE`` (100, cuda.h): loading works, any call finds no GPU.
Built with the machine's C compiler when a host is staged.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SYMBOLS = Path(__file__).resolve().with_name("cuda_driver_symbols.txt")
#: Where Debian's NVIDIA driver package puts the library.
HOST_PATH = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
CUDA_ERROR_NO_DEVICE = 100


def symbols() -> list[str]:
    return [line.strip() for line in SYMBOLS.read_text().splitlines() if line.strip() and not line.startswith("#")]


def build(out_dir: Path) -> Path:
    """Compile the stand-in into ``out_dir``; return the library's path."""
    source = out_dir / "libcuda_standin.c"
    lines = ["/* Stand-in for libcuda.so.1: a driver with no device (sglang_deploy/simulator/testbed). */"]
    lines += [f"int {name}(void) {{ return {CUDA_ERROR_NO_DEVICE}; }}" for name in symbols()]
    source.write_text("\n".join(lines) + "\n")
    library = out_dir / "libcuda.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(library), str(source)],
                   check=True, capture_output=True, text=True)
    return library


def stage(root: Path, library: Path) -> None:
    """Before boot: the stand-in where the driver's library would be (run ``ldconfig`` on the
    booted host so the loader's cache lists it)."""
    dest = root / HOST_PATH.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(library, dest)
