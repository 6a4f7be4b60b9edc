"""The package's data files are read through libyaml (sglang_deploy/shipped.py), and libyaml's safe
loader reads each of them exactly as PyYAML's pure-Python safe loader does."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sglang_deploy.shipped import LOADER, load_shipped_yaml

DATA = Path(__file__).resolve().parent.parent / "sglang_deploy" / "data"
FILES = sorted(DATA.rglob("*.yaml"))


def test_the_data_files_are_found_and_the_c_loader_is_the_one_in_use():
    # this venv's PyYAML is a wheel built with libyaml: the fast path is the one taken here
    assert yaml.__with_libyaml__ and LOADER is yaml.CSafeLoader
    assert {"gpus.yaml", "constraints.yaml", "model_rules.yaml", "cuda_needs.yaml"} <= {p.name for p in FILES}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(DATA).as_posix())
def test_libyaml_reads_the_shipped_file_as_the_python_loader_does(path):
    text = path.read_text(encoding="utf-8")
    expected = yaml.load(text, Loader=yaml.SafeLoader)  # noqa: S506 -- the pure-Python safe loader
    assert expected is not None
    assert load_shipped_yaml(text) == expected
    with path.open(encoding="utf-8") as fh:  # the callers pass an open file
        assert load_shipped_yaml(fh) == expected


def test_the_c_loader_keeps_the_safe_constructors():
    with pytest.raises(yaml.constructor.ConstructorError):
        load_shipped_yaml("!!python/object/apply:os.system ['true']")
