#!/usr/bin/env python3
"""Build the per-version catalogs of SGLang's ``launch_server`` command-line options.

Usage::

    python scripts/build_catalogs.py [--versions 0.5.9,0.5.15,...]
        [--wheel-dir DIR] [--out sglang_deploy/data/catalogs] [--cache-dir DIR]
    python scripts/build_catalogs.py --versions 0.5.23 --check-argv ARGVS.json
    python scripts/build_catalogs.py [--versions ...] --check-citations

Method (the "import" way: the catalog is read from the real parser)
--------------------------------------------------------------------
For each version:

1. Take ``sglang-<version>-*.whl`` from ``--wheel-dir``; if absent, download
   it with ``pip download --no-deps --only-binary=:all: --python-version 3.11
   --implementation cp --abi cp311 --platform manylinux_2_34_x86_64``, so the
   same file comes every time.  Its sha256 is compared with ``KNOWN_WHEELS``
   (a mismatch stops the build) and recorded in the catalog.
2. Unpack the wheel into a cache directory (never installed, only put on
   ``PYTHONPATH``).
3. Create a throwaway venv in the cache directory (default
   ``$XDG_CACHE_HOME/sglang-deploy-catalogs``, else ``~/.cache/...``; override
   with ``--cache-dir``) with the CPU build of torch (``TORCH_SPEC``) and the
   pure-Python dependencies the import of ``sglang.srt.server_args`` needs
   (``IMPORT_DEPS``), each at the version specifier the wheel's own
   ``Requires-Dist`` gives (e.g. ``transformers==4.57.1`` for 0.5.9).
4. In that venv, run ``scripts/catalogs/introspect.py --_dump`` (standard
   library only): it installs an import hook that replaces, only for imports
   made by ``sglang.*`` modules, every top-level module that is not installed
   (GPU-only packages: sgl_kernel, flashinfer, flash_attn, torchvision,
   torchcodec, ...) by an empty stand-in module whose attributes are
   ``MagicMock`` objects.  It then calls the version's own
   ``prepare_server_args([])`` with ``ArgumentParser.parse_args`` patched to
   capture the parser and stop, so the parser is built exactly as
   ``python -m sglang.launch_server`` builds it (same constructor arguments,
   same ``ServerArgs.add_cli_args``), and walks ``parser._actions``.  Any value
   derived from a stand-in (a ``MagicMock`` in choices, defaults, types...)
   aborts the build, so stand-ins cannot leak into a catalog.  The environment
   is reduced to a fixed minimal one (no ``SGLANG_*`` variables: some choices
   depend on them).
5. Normalise (sorted keys, sets sorted, function types described by name,
   addresses stripped) and write ``sglang-<version>.json``.  Nothing in the
   file depends on the machine or the time, so the same wheel gives a
   byte-identical file.

The steps live in ``scripts/catalogs/``: ``config`` (the versions, known
wheels and pins named here), ``wheels`` (1), ``venvs`` (2, 3 and running
step 4), ``introspect`` (4, inside the venv), ``normalise`` (5), ``sources``
(``model_support``), ``citations`` (the constraints' citations) and ``cli``.

``--check-argv FILE.json`` (FILE: a JSON list of argv lists) runs each argv
through the version's REAL parser (``prepare_server_args`` with
``parse_args`` stopped right after argparse returns) and prints one JSON line
per argv: ``{"argv": [...], "accepted": bool, "error": str|null}``.  Use it to
cross-check ``sglang_deploy.plan.catalog.Catalog.check``.  On the same unpacked
wheel it first looks up every citation of ``sglang_deploy/data/constraints.yaml``
that claims the version and compares the catalog's ``model_support`` with the
source; the argvs are judged either way, then a failure exits non-zero naming the
row, version, file and function.

``--check-citations`` does only the citation lookup (the wheel unpacked, no venv):
one line per missing citation, exit 1 if any (``scripts/catalogs/citations.py``).

Adding a version
----------------
Run ``python scripts/build_catalogs.py --versions X.Y.Z``.  The first run
downloads the wheel and prints its sha256; add it to ``KNOWN_WHEELS`` and to
``DEFAULT_VERSIONS`` (in ``scripts/catalogs/config.py``), rerun, and commit
the JSON.  If the import fails because a new pure-Python dependency is needed
at import time, add its distribution name to ``IMPORT_DEPS`` (GPU-only
packages are stubbed automatically).  The venvs are cached per version and
dependency set; delete the cache directory to rebuild them.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from catalogs.config import DEFAULT_VERSIONS, FORMAT_VERSION, KNOWN_WHEELS  # noqa: E402
from catalogs.normalise import dump_json  # noqa: E402
from catalogs.cli import build  # noqa: E402
from catalogs import cli  # noqa: E402

__all__ = ["DEFAULT_VERSIONS", "FORMAT_VERSION", "KNOWN_WHEELS", "build", "dump_json", "main"]


def main(argv: list[str] | None = None) -> int:
    return cli.main(argv, description=__doc__.split("\n\n")[0])


if __name__ == "__main__":
    sys.exit(main())
