"""scripts/catalogs reads a catalog from a parser: its introspection, run in a
throwaway venv exactly as the build runs it, against the SIMULATED SGLang
(whose ``ServerArgs.add_cli_args`` adds the 0.5.23 catalog's options) gives
that catalog back, and ``--_check`` judges argvs as the catalog does.

The released wheels are 4 GB with their dependencies; the stand-in parser
stands in for them at the same boundary (``prepare_server_args``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_deploy.plan.catalog import load_catalog
from tests.test_simulated_sglang import _clean_env, build, corpus

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from catalogs import cli, normalise, venvs  # noqa: E402

VERSION = "0.5.23"
CATALOG = ROOT / "sglang_deploy" / "data" / "catalogs" / f"sglang-{VERSION}.json"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="venv layout")


def _add_real_module_facts(src: Path, catalog: dict) -> None:
    """What the stand-in lacks and the real wheel has: the module attributes
    ``_type_params`` reads (sglang.srt.model_executor.cuda_graph_config's
    ``Phase.ALL`` and ``ALLOWED_KEYS_PER_PHASE``) and imports of GPU-only
    packages that must be stubbed (the catalog's ``import_stubs``)."""
    params = catalog["options"]["--cuda-graph-config"]["type_params"]
    cg = src / "sglang" / "srt" / "model_executor" / "cuda_graph_config.py"
    cg.write_text(cg.read_text() + f"\n\nclass Phase:\n    ALL = {tuple(params['phases'])!r}\n\n"
                  f"ALLOWED_KEYS_PER_PHASE = {params['allowed_keys']!r}\n")
    launch = src / "sglang" / "launch_server.py"
    launch.write_text("".join(f"import {m}\n" for m in catalog["import_stubs"]) + launch.read_text())


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """(python of a bare venv, the unpacked stand-in wheel, cache dir, wheel)."""
    tmp = tmp_path_factory.mktemp("build_catalogs")
    wheel = build.build_wheels([VERSION], tmp / "wheels")[0]
    cache = tmp / "cache"
    src = venvs.unpack_wheel(cache, VERSION, wheel)
    _add_real_module_facts(src, json.loads(CATALOG.read_text()))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")],
                   check=True, env=_clean_env())
    return tmp / "venv" / "bin" / "python", src, cache, wheel


def _closure_named(value_type: str) -> str:
    # the stand-in makes parse_cuda_graph_config_arg in a factory (its
    # parameters come from the catalog); the real one is a module function
    return re.sub(r"\.\w+\.<locals>\.", ".", value_type)


def test_introspection_gives_the_catalog_back(env):
    py, src, cache, wheel = env
    built = cli.read_catalog(py, src, cache, wheel, VERSION)
    text = normalise.dump_json(built)
    assert str(cache) not in text and str(src) not in text
    want = json.loads(CATALOG.read_text())
    assert built["wheel"] == {"filename": wheel.name, "sha256": venvs.sha256_of(wheel)}
    # model_support is read from the real wheel's source by build() (tests/test_model_support.py)
    for key in want.keys() - {"wheel", "options", "model_support"}:
        assert built[key] == want[key], key
    assert built["options"].keys() == want["options"].keys()  # their order: "order"
    for option, spec in built["options"].items():
        spec = dict(spec, value_type=_closure_named(spec["value_type"]))
        assert spec == want["options"][option], option


def test_check_mode_judges_argvs_as_the_catalog_does(env, tmp_path, capfd):
    py, src, cache, _ = env
    cat = load_catalog(VERSION)
    argvs = corpus(cat)[::40]
    path = tmp_path / "argvs.json"
    path.write_text(json.dumps(argvs))
    capfd.readouterr()
    venvs.run_in_env(py, src, cache, ["--_check", str(path), "--_version", VERSION])
    lines = [json.loads(line) for line in capfd.readouterr().out.splitlines()]
    assert [r["argv"] for r in lines] == argvs
    assert {r["version"] for r in lines} == {VERSION}
    judged = [(r["argv"], r["accepted"]) for r in lines]
    assert judged == [(argv, not cat.check(argv)) for argv in argvs]
    assert any(ok for _, ok in judged) and not all(ok for _, ok in judged)


def test_a_wheel_other_than_the_known_one_is_refused(env, tmp_path, capsys):
    _, _, _, wheel = env
    with pytest.raises(SystemExit, match="differs from the known wheel"):
        cli.main(["--versions", VERSION, "--wheel-dir", str(wheel.parent),
                  "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
