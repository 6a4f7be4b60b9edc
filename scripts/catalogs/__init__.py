"""The build of the per-version catalogs of SGLang's ``launch_server`` options
(``scripts/build_catalogs.py`` is its command line; its docstring gives the method).

- ``config``: what is built (versions, known wheels, the venv's pins) and where.
- ``wheels``: find or download a wheel, check its sha256, read its Requires-Dist.
- ``venvs``: unpack a wheel, create the throwaway CPU-only venv, run a file in it.
- ``introspect``: runs INSIDE that venv (standard library only): imports the
  version's ``sglang.srt.server_args``, captures its parser and dumps its actions.
- ``normalise``: the dumped actions -> the catalog's JSON text.
- ``sources``: what the version decides about models (quantization methods, native
  architectures, drafts from the target's own MTP/NextN layers), read from the wheel's source.
- ``citations``: every citation of ``sglang_deploy/data/constraints.yaml`` (file inside the wheel,
  dotted name, source fragments) looked up in a version's unpacked wheel with ``ast``.
- ``cli``: one version's build, and the command line.
"""
