"""The package's own data files (``sglang_deploy/data``): YAML read through libyaml when PyYAML has it.

Every planner run (a `plan`, each pyinfra deploy, `status`, `check --expect`) reads the shipped
knowledge: about 110 KB of YAML, 0.105 s of CPU in PyYAML's pure-Python safe loader and 0.011 s
in its libyaml one (``yaml.CSafeLoader``, the same safe constructors over libyaml's scanner and
parser; the two agree on every shipped file: tests/test_shipped_yaml.py). These files are the
package's own, so the C loader's lack of the bounded loader's alias and depth caps
(sglang_deploy/untrusted.py, for what arrives from hosts, servers and users) does not matter here.
A PyYAML built without libyaml falls back to the pure-Python safe loader.
"""

from __future__ import annotations

from typing import IO, Any

import yaml

#: libyaml's safe loader where PyYAML was built with it (its wheels are), else the Python one.
LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_shipped_yaml(stream: str | IO[str]) -> Any:
    """One document of a shipped data file, by PyYAML's safe constructors."""
    return yaml.load(stream, Loader=LOADER)  # noqa: S506 -- a safe loader (CSafeLoader or SafeLoader)
