"""What the catalog build makes, from which wheels, in which venv, and where it writes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

FORMAT_VERSION = 1
DEFAULT_VERSIONS = ("0.5.9", "0.5.15", "0.5.19", "0.5.23")
KNOWN_WHEELS = {
    "0.5.9": (
        "sglang-0.5.9-py3-none-any.whl",
        "8a936c4d25fea605f44254e533cff2144c73ceffbc1f8738aba393461bbb64d1",
    ),
    "0.5.15": (
        "sglang-0.5.15-cp311-cp311-manylinux_2_34_x86_64.whl",
        "21492759b4b99e117bd81610f633422f3fdae2896c2cde6931eab886deccc44f",
    ),
    "0.5.19": (
        "sglang-0.5.19-cp311-cp311-manylinux_2_34_x86_64.whl",
        "425e87377e725d03db8262382008f3fd9561a6cf5d82f485f8b9929f02ffe12b",
    ),
    "0.5.23": (
        "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
        "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937",
    ),
}
PY_VERSION = "3.11"
PLATFORM = "manylinux_2_34_x86_64"
TORCH_SPEC = "torch==2.13.0"  # CPU build; its version does not shape the parser.
# Distributions installed for the import (specifier taken from the wheel's
# Requires-Dist when it names them; unpinned otherwise).
IMPORT_DEPS = (
    "aiohttp",
    "dill",
    "einops",
    "fastapi",
    "ipython",
    "msgspec",
    "numpy",
    "openai",
    "orjson",
    "packaging",
    "partial-json-parser",
    "pillow",
    "psutil",
    "pybase64",
    "pydantic",
    "pyzmq",
    "regex",
    "requests",
    "setproctitle",
    "tokenizers",
    "tqdm",
    "transformers",
    "uvicorn",
    "uvloop",
    "xgrammar",
)
ENV_FORMAT = 1  # bump to force the cached venvs to be rebuilt

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_OUT = REPO_ROOT / "sglang_deploy" / "data" / "catalogs"


def log(msg: str) -> None:
    print(f"[build_catalogs] {msg}", file=sys.stderr, flush=True)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache"
    )
    return Path(base) / "sglang-deploy-catalogs"
