"""Tests of the committed SGLang option catalogs and of Catalog.check().

Every fact asserted here was checked against the released wheel's source
(see the comments: paths are inside the wheel).  No network is needed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import io
import json
import random
import re
import sys
from pathlib import Path

import pytest

from sglang_deploy.plan.catalog import (REJECTION_KINDS, SUPPORTED_VERSIONS, Catalog, OptionSpec, UnsupportedVersion,
                                        load_catalog)
from sglang_deploy.plan import catalog_parser

ROOT = Path(__file__).resolve().parent.parent
CATALOG_DIR = ROOT / "sglang_deploy" / "data" / "catalogs"
ALL = ("0.5.9", "0.5.15", "0.5.19", "0.5.23")
M = ["--model-path", "Qwen/Qwen3.6-27B"]


def kinds(version: str, *args: str) -> list[str]:
    return [r.kind for r in load_catalog(version).check([*M, *args])]


def accepted(version: str, *args: str) -> bool:
    return load_catalog(version).check([*M, *args]) == []


# --------------------------------------------------------------------------
# the package
# --------------------------------------------------------------------------


def test_supported_versions_sorted_numerically():
    assert SUPPORTED_VERSIONS == ALL


def test_unsupported_version_lists_supported():
    with pytest.raises(UnsupportedVersion) as ei:
        load_catalog("0.4.0")
    assert isinstance(ei.value, ValueError)
    for v in ALL:
        assert v in str(ei.value)


def test_leading_v_accepted():
    assert load_catalog("v0.5.23").version == "0.5.23"


@pytest.mark.parametrize("version", ALL)
def test_catalog_basics(version):
    cat = load_catalog(version)
    assert cat.version == version
    assert cat.allow_abbrev is True
    assert cat.prefix_chars == "-"
    assert "--help" in cat.options and "-h" in cat.options
    spec = cat.options["--model-path"]
    assert spec.required and spec.takes_value and spec.dest == "model_path"
    assert "--model" in spec.aliases
    for opt, spec in cat.options.items():
        assert spec.option == opt
        assert opt in spec.option_strings
        assert spec.takes_value == (spec.nargs != 0)
        assert spec.nargs in (None, "?", "*", "+", 0) or isinstance(spec.nargs, int)


# --------------------------------------------------------------------------
# reproducibility / canonical form
# --------------------------------------------------------------------------


def _load_build_script():
    spec = importlib.util.spec_from_file_location(
        "build_catalogs", ROOT / "scripts" / "build_catalogs.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("version", ALL)
def test_json_is_canonical_and_pinned(version):
    path = CATALOG_DIR / f"sglang-{version}.json"
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    build = _load_build_script()
    # byte-identical to what the build script writes for the same content
    assert build.dump_json(data) == text
    assert text == json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    assert data["sglang_version"] == version
    assert data["format"] == build.FORMAT_VERSION
    wheel = data["wheel"]
    assert re.fullmatch(r"[0-9a-f]{64}", wheel["sha256"])
    assert wheel["filename"].startswith(f"sglang-{version}-")
    assert (wheel["filename"], wheel["sha256"]) == build.KNOWN_WHEELS[version]
    # no machine paths, no timestamps
    for needle in ("/tmp/", "/home/", "/root/", "/work/", "/usr/", "site-packages"):
        assert needle not in text, needle
    assert not re.search(r"20\d\d-\d\d-\d\dT\d\d:", text)
    assert " at 0x" not in text


def test_build_script_versions_match_catalogs():
    build = _load_build_script()
    assert tuple(build.DEFAULT_VERSIONS) == ALL
    assert set(build.KNOWN_WHEELS) == set(ALL)


# --------------------------------------------------------------------------
# facts from the wheels
# --------------------------------------------------------------------------


@pytest.mark.parametrize("version,present", [("0.5.9", False), ("0.5.15", True), ("0.5.19", True), ("0.5.23", False)])
def test_enforce_piecewise_cuda_graph(version, present):
    cat = load_catalog(version)
    assert ("--enforce-piecewise-cuda-graph" in cat) is present
    if present:
        # deprecated alias for --cuda-graph-backend-prefill=tc_piecewise
        spec = cat.options["--enforce-piecewise-cuda-graph"]
        assert spec.deprecated and not spec.takes_value
        assert spec.replacement_options == ("--cuda-graph-backend-prefill",)
        assert accepted(version, "--enforce-piecewise-cuda-graph")
    else:
        assert kinds(version, "--enforce-piecewise-cuda-graph") == ["unknown"]


def test_cuda_graph_max_bs():
    # 0.5.9: a real int option (server_args.py parser.add_argument)
    spec = load_catalog("0.5.9").options["--cuda-graph-max-bs"]
    assert spec.value_type == "int" and spec.action == "store" and not spec.deprecated
    assert accepted("0.5.9", "--cuda-graph-max-bs", "16")
    assert "--cuda-graph-max-bs-decode" not in load_catalog("0.5.9")
    # 0.5.15 / 0.5.19: deprecated alias of --cuda-graph-max-bs-decode
    for v in ("0.5.15", "0.5.19"):
        spec = load_catalog(v).options["--cuda-graph-max-bs"]
        assert spec.deprecated and spec.replacement_options == ("--cuda-graph-max-bs-decode",)
        assert accepted(v, "--cuda-graph-max-bs", "16")
    # 0.5.23: gone; the string is a prefix of -decode and -prefill
    cat = load_catalog("0.5.23")
    assert "--cuda-graph-max-bs" not in cat
    rej = cat.check([*M, "--cuda-graph-max-bs", "16"])
    assert rej[0].kind == "ambiguous"
    assert "--cuda-graph-max-bs-decode" in rej[0].message
    assert "--cuda-graph-max-bs-prefill" in rej[0].message
    assert cat.resolve("--cuda-graph-max-bs") is None
    for v in ("0.5.15", "0.5.19", "0.5.23"):
        assert accepted(v, "--cuda-graph-max-bs-decode", "16")


def test_cuda_graph_backend_prefill():
    assert "--cuda-graph-backend-prefill" not in load_catalog("0.5.9")
    for v in ("0.5.15", "0.5.19", "0.5.23"):
        choices = load_catalog(v).options["--cuda-graph-backend-prefill"].choices
        assert {"breakable", "disabled", "full"} <= set(choices)
        assert accepted(v, "--cuda-graph-backend-prefill", "breakable")
        assert kinds(v, "--cuda-graph-backend-prefill", "Breakable") == ["bad-choice"]
    # tc_piecewise: a choice in 0.5.15 / 0.5.19, removed in 0.5.23 where the
    # type function parse_cuda_graph_backend_arg refuses it before choices.
    for v in ("0.5.15", "0.5.19"):
        assert accepted(v, "--cuda-graph-backend-prefill", "tc_piecewise")
    assert load_catalog("0.5.23").options["--cuda-graph-backend-prefill"].choices == (
        "full",
        "breakable",
        "disabled",
    )
    assert kinds("0.5.23", "--cuda-graph-backend-prefill", "tc_piecewise") == ["bad-type"]


def test_piecewise_cuda_graph_flags():
    assert load_catalog("0.5.9").options["--enable-piecewise-cuda-graph"].action == "store_true"
    for v in ("0.5.15", "0.5.19", "0.5.23"):
        assert "--enable-piecewise-cuda-graph" not in load_catalog(v)
    assert "--disable-piecewise-cuda-graph" not in load_catalog("0.5.9")
    for v in ("0.5.15", "0.5.19"):
        cat = load_catalog(v)
        assert cat.is_deprecated("--disable-piecewise-cuda-graph")
        assert cat.options["--disable-piecewise-cuda-graph"].replacement_options == (
            "--cuda-graph-backend-prefill",
        )
    assert "--disable-piecewise-cuda-graph" not in load_catalog("0.5.23")
    assert kinds("0.5.23", "--disable-piecewise-cuda-graph") == ["unknown"]
    # the non-deprecated spelling exists from 0.5.15 on
    assert "--disable-prefill-cuda-graph" not in load_catalog("0.5.9")
    for v in ("0.5.15", "0.5.19", "0.5.23"):
        assert not load_catalog(v).is_deprecated("--disable-prefill-cuda-graph")


def test_disable_cuda_graph():
    assert not load_catalog("0.5.9").is_deprecated("--disable-cuda-graph")
    for v in ("0.5.15", "0.5.19", "0.5.23"):
        assert load_catalog(v).is_deprecated("--disable-cuda-graph")
        assert accepted(v, "--disable-cuda-graph")  # still accepted
        assert set(load_catalog(v).options["--disable-cuda-graph"].replacement_options) == {
            "--cuda-graph-backend-decode",
            "--cuda-graph-backend-prefill",
        }


def test_speculative_algorithm():
    spec = load_catalog("0.5.9").options["--speculative-algorithm"]
    assert spec.choices == ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
    assert accepted("0.5.9", "--speculative-algorithm", "EAGLE")
    assert kinds("0.5.9", "--speculative-algorithm", "eagle") == ["bad-choice"]
    # 0.5.15+: a free string at parse time (upper-cased later, at resolution)
    for v in ("0.5.15", "0.5.19", "0.5.23"):
        spec = load_catalog(v).options["--speculative-algorithm"]
        assert spec.choices is None and spec.value_type == "str"
        assert accepted(v, "--speculative-algorithm", "eagle")
        assert accepted(v, "--speculative-algorithm", "EAGLE")
    for v in ALL:
        for opt in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"):
            assert load_catalog(v).options[opt].value_type == "int"
        assert accepted(
            v,
            "--speculative-algorithm", "EAGLE",
            "--speculative-num-steps", "3",
            "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4",
        )


def test_text_only_flags():
    for v in ("0.5.9", "0.5.15"):
        assert "--language-model-only" not in load_catalog(v)
        assert kinds(v, "--language-model-only") == ["unknown"]
    for v in ("0.5.19", "0.5.23"):
        spec = load_catalog(v).options["--language-model-only"]
        assert spec.action == "store_true" and not spec.deprecated
    for v in ALL:
        assert load_catalog(v).options["--language-only"].action == "store_true"


def test_dp_attention():
    for v in ("0.5.9", "0.5.15", "0.5.19"):
        assert not load_catalog(v).is_deprecated("--enable-dp-attention")
        assert "--attn-dp-size" not in load_catalog(v)
    cat = load_catalog("0.5.23")
    spec = cat.options["--enable-dp-attention"]
    assert spec.deprecated and spec.replacement_options == ("--attn-dp-size",)
    assert accepted("0.5.23", "--dp-size", "2", "--enable-dp-attention")
    assert cat.options["--attn-dp-size"].value_type == "int"


def test_stable_spellings_all_versions():
    for v in ALL:
        cat = load_catalog(v)
        # same argument; its dest is tensor_parallel_size in 0.5.9, tp_size later
        assert cat.options["--tp-size"].dest == cat.options["--tensor-parallel-size"].dest
        assert cat.options["--tp-size"].dest == ("tensor_parallel_size" if v == "0.5.9" else "tp_size")
        assert cat.options["--mem-fraction-static"].value_type == "float"
        for flag in (
            "--disable-custom-all-reduce",
            "--enable-p2p-check",
            "--enable-nccl-nvls",
            "--enable-single-batch-overlap",
        ):
            spec = cat.options[flag]
            assert spec.action == "store_true" and not spec.deprecated, (v, flag)
        assert accepted(v, "--tp-size", "2", "--mem-fraction-static", "0.85")


def test_choices_of_backends():
    a9 = load_catalog("0.5.9").options["--attention-backend"].choices
    a23 = load_catalog("0.5.23").options["--attention-backend"].choices
    assert {"flashinfer", "fa3", "triton", "trtllm_mha"} <= set(a9) & set(a23)
    assert "cutlass_mla" in a9 and "cutlass_mla" not in a23
    assert "fp4_e2m1" in load_catalog("0.5.19").options["--kv-cache-dtype"].choices
    assert "fp4_e2m1" not in load_catalog("0.5.23").options["--kv-cache-dtype"].choices
    assert "marlin" in load_catalog("0.5.19").options["--quantization"].choices
    assert "marlin" not in load_catalog("0.5.23").options["--quantization"].choices


def test_removed_flag_errors_at_parse_time():
    # 0.5.19 registers --enable-expert-distribution-metrics with a
    # DeprecatedAction(error_message=...): argparse accepts the string, then
    # the action calls parser.error().
    spec = load_catalog("0.5.19").options["--enable-expert-distribution-metrics"]
    assert spec.error and spec.deprecated
    assert kinds("0.5.19", "--enable-expert-distribution-metrics") == ["removed"]


# --------------------------------------------------------------------------
# validator semantics (argparse, Python 3.11)
# --------------------------------------------------------------------------


def test_unknown_option():
    rej = load_catalog("0.5.23").check([*M, "--no-such-flag"])
    assert [(r.arg, r.kind) for r in rej] == [("--no-such-flag", "unknown")]


def test_ambiguous_prefix():
    rej = load_catalog("0.5.23").check([*M, "--enable-p"])
    assert rej and rej[0].kind == "ambiguous"
    assert load_catalog("0.5.23").resolve("--enable-p") is None


def test_unique_prefix_accepted():
    cat = load_catalog("0.5.23")
    assert cat.check([*M, "--mem-fraction-st", "0.8"]) == []
    assert cat.resolve("--mem-fraction-st").option == "--mem-fraction-static"
    assert cat.check(["--model-p", "x"]) == []
    assert cat.check([*M, "--mem-fraction-st=0.8"]) == []


def test_exact_match_beats_prefix():
    # --model is both an exact alias and a prefix of --model-path, --model-impl ...
    cat = load_catalog("0.5.23")
    assert cat.check(["--model", "x"]) == []
    assert cat.resolve("--model").dest == "model_path"


def test_missing_value():
    assert kinds("0.5.23", "--tp-size") == ["missing-value"]
    assert kinds("0.5.23", "--tp-size", "--enable-p2p-check") == ["missing-value"]


def test_bad_choice_and_bad_int():
    assert kinds("0.5.23", "--attention-backend", "flashinfer2") == ["bad-choice"]
    assert kinds("0.5.23", "--tp-size", "two") == ["bad-type"]
    assert kinds("0.5.23", "--mem-fraction-static", "lots") == ["bad-type"]
    # int-typed choices compare after conversion
    assert accepted("0.5.23", "--log-requests-level", "2")
    assert kinds("0.5.23", "--log-requests-level", "7") == ["bad-choice"]


def test_equals_form():
    assert accepted("0.5.23", "--tp-size=2")
    assert kinds("0.5.23", "--tp-size=x") == ["bad-type"]
    assert accepted("0.5.23", "--cuda-graph-backend-prefill=disabled")


def test_store_true_with_value():
    rej = load_catalog("0.5.23").check([*M, "--enable-p2p-check=1"])
    assert [r.kind for r in rej] == ["unexpected-value"]
    assert kinds("0.5.23", "--enable-p2p-check=") == ["unexpected-value"]
    # a separate token after a flag is a stray positional
    assert kinds("0.5.23", "--enable-p2p-check", "true") == ["positional"]


def test_negative_numbers():
    # looks like a negative number and the parser has no such option: a value
    assert accepted("0.5.23", "--mem-fraction-static", "-0.5")
    assert accepted("0.5.23", "--mem-fraction-static", "-.5")
    assert accepted("0.5.23", "--tp-size", "-1")
    # -1e5 does not match argparse's negative-number pattern: an option
    assert kinds("0.5.23", "--mem-fraction-static", "-1e5") == ["missing-value", "unknown"]
    assert accepted("0.5.23", "--mem-fraction-static=-1e5")
    # an arg with a space is never an option
    assert accepted("0.5.23", "--served-model-name", "-a b")


def test_nargs_plus_and_star():
    cat = load_catalog("0.5.23")
    plus = next(s for s in cat.options.values() if s.nargs == "+" and s.value_type == "str" and not s.choices)
    assert cat.check([*M, plus.option, "a", "b", "--tp-size", "2"]) == []
    assert [r.kind for r in cat.check([*M, plus.option])] == ["missing-value"]
    assert [r.kind for r in cat.check([*M, plus.option, "--tp-size", "2"])] == ["missing-value"]


def test_double_dash_and_positionals():
    assert kinds("0.5.23", "--") == ["positional"]
    assert kinds("0.5.23", "stray") == ["positional"]
    assert kinds("0.5.23", "--tp-size", "--", "2") == ["missing-value", "positional", "positional"]


def test_required_and_help():
    cat = load_catalog("0.5.23")
    assert [r.kind for r in cat.check([])] == ["missing-required"]
    assert cat.check([], check_required=False) == []
    assert cat.check(["--help"]) == []  # argparse prints help and exits 0


def test_rejection_kinds_are_documented():
    cat = load_catalog("0.5.23")
    argvs = [["--x"], ["--enable-p"], ["--tp-size"], ["--tp-size", "x"], ["--enable-p2p-check=1"], ["y"]]
    for argv in argvs:
        for r in cat.check([*M, *argv]):
            assert r.kind in REJECTION_KINDS


def test_custom_types():
    assert accepted("0.5.23", "--cuda-graph-config", '{"prefill": {"backend": "breakable"}}')
    assert kinds("0.5.23", "--cuda-graph-config", '{"a": {}}') == ["bad-type"]
    assert kinds("0.5.23", "--cuda-graph-config", "[1]") == ["bad-type"]
    assert kinds("0.5.23", "--cuda-graph-config", '{"prefill": {"backend": "tc_piecewise"}}') == ["bad-type"]
    assert accepted("0.5.19", "--cuda-graph-config", '{"prefill": {"backend": "tc_piecewise"}}')
    hri = next(
        s for s in load_catalog("0.5.23").options.values() if s.value_type.endswith("human_readable_int")
    )
    assert accepted("0.5.23", hri.option, "4Ki")
    assert accepted("0.5.23", hri.option, "2.5k")
    assert kinds("0.5.23", hri.option, "2.5Ki") == ["bad-type"]


def _toy_catalog(**over) -> Catalog:
    def spec(option, **kw):
        d = dict(
            option=option, dest=option.lstrip("-").replace("-", "_"), takes_value=True,
            nargs=None, choices=None, value_type="str", action="store", deprecated=False,
            replacement=None, help="", default=None, option_strings=(option,),
        )
        d.update(kw)
        return OptionSpec(**d)

    opts = {
        "--algo": spec("--algo", value_type="upper", choices=("EAGLE", "NGRAM"), choice_values=("EAGLE", "NGRAM")),
        "--level": spec("--level", value_type="lower", choices=("low", "high"), choice_values=("low", "high")),
        "--pair": spec("--pair", nargs=2, value_type="int"),
        "--maybe": spec("--maybe", nargs="?", const="x", choices=("a", "x"), choice_values=("a", "x")),
        "--flag": spec("--flag", takes_value=False, nargs=0, action="store_true"),
    }
    opts.update(over)
    return Catalog(version="toy", options=opts)


def test_upper_lower_types_apply_before_choices():
    cat = _toy_catalog()
    assert cat.check(["--algo", "eagle"]) == []
    assert cat.check(["--level", "HIGH"]) == []
    assert [r.kind for r in cat.check(["--algo", "mtp"])] == ["bad-choice"]


def test_nargs_int_and_optional():
    cat = _toy_catalog()
    assert cat.check(["--pair", "1", "2"]) == []
    assert [r.kind for r in cat.check(["--pair", "1"])] == ["missing-value"]
    assert [r.kind for r in cat.check(["--pair=1"])] == ["missing-value"]
    assert cat.check(["--maybe"]) == []
    assert cat.check(["--maybe", "a"]) == []
    assert [r.kind for r in cat.check(["--maybe", "b"])] == ["bad-choice"]


def test_allow_abbrev_false():
    cat = _toy_catalog()
    assert cat.check(["--fla"]) == []
    strict = dataclasses.replace(cat, allow_abbrev=False)
    assert [r.kind for r in strict.check(["--fla"])] == ["unknown"]
    assert strict.resolve("--fla") is None and strict.resolve("--flag") is not None


# --------------------------------------------------------------------------
# differential test: Catalog.check() against real argparse rebuilt from the
# catalog (parsing machinery only; types/choices come from the catalog)
# --------------------------------------------------------------------------


class _Removed(argparse.Action):
    def __init__(self, option_strings, dest, error_message=None, **kw):
        self.error_message = error_message
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(self.error_message)


class _Reference(argparse.ArgumentParser):
    def print_help(self, file=None):
        """--help prints nothing: what is compared is its exit status (0), and formatting the help
        of 500 options is slow."""


def _rebuild_parser(cat: Catalog) -> argparse.ArgumentParser:
    # a fixed usage string: formatting 500 options' usage on every error is slow
    parser = _Reference(prog="x", usage="x", allow_abbrev=cat.allow_abbrev)
    done = set()
    for spec in cat.options.values():
        key = spec.option_strings
        if key in done or spec.action == "help":
            continue
        done.add(key)
        conv = catalog_parser.converter(spec.value_type, spec.type_params)

        def type_fn(s, conv=conv):
            if conv is None:
                return s
            try:
                return conv(s)
            except catalog_parser.TypeRefusal as e:
                raise argparse.ArgumentTypeError(str(e)) from None

        type_fn.__name__ = spec.value_type.rsplit(".", 1)[-1]
        kw = dict(dest=spec.dest, required=spec.required)
        if spec.error:
            parser.add_argument(*key, action=_Removed, nargs=0, error_message=spec.error, **kw)
        elif spec.nargs == 0:
            parser.add_argument(*key, action="store_const", const=True, **kw)
        else:
            parser.add_argument(
                *key, nargs=spec.nargs, const=spec.const, type=type_fn,
                choices=spec.choice_values, **kw,
            )
    return parser


def _real_accepts(parser: argparse.ArgumentParser, argv: list[str]) -> bool:
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            parser.parse_args(argv)
        except SystemExit as e:
            return e.code == 0
    return True


def _corpus(cat: Catalog, n: int, seed: int) -> list[list[str]]:
    rnd = random.Random(seed)
    opts = sorted(cat.options)
    tokens = ["1", "-1", "-0.5", "-1e5", "x", "", "-x", "a b", "--", "-", "-h", "true", "[1]"]
    out = []
    for _ in range(n):
        argv = [] if rnd.random() < 0.1 else list(M)
        for _ in range(rnd.randint(1, 4)):
            o = rnd.choice(opts)
            r = rnd.random()
            if r < 0.2:
                o = o[: rnd.randint(3, max(3, len(o)))]
            spec = cat.options.get(o)
            if r > 0.85:
                argv.append(o + "=" + rnd.choice(tokens + list((spec and spec.choices) or ())))
                continue
            argv.append(o)
            if rnd.random() < 0.8:
                pool = tokens + list((spec and spec.choices) or ()) * 3
                argv.extend(rnd.choice(pool) for _ in range(rnd.randint(1, 2)))
        out.append(argv)
    return out


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="replays Python 3.11 argparse")
@pytest.mark.parametrize("version", ALL)
def test_check_agrees_with_argparse(version, monkeypatch):
    # argparse looks each message up in the locale's catalogs (a file lookup per error); only
    # accepted or refused is compared here, and that does not depend on the messages' language
    monkeypatch.setenv("LANGUAGE", "C")
    cat = load_catalog(version)
    parser = _rebuild_parser(cat)
    mismatches = []
    for argv in _corpus(cat, 1500, seed=sum(map(ord, version))):
        ours = cat.check(argv) == []
        real = _real_accepts(parser, argv)
        if ours != real:
            mismatches.append((argv, ours, real))
    assert mismatches == []


# --------------------------------------------------------------------------
# the argparse parser rebuilt from the catalog
# --------------------------------------------------------------------------


def test_parser_built_once_per_catalog():
    cat = load_catalog("0.5.23")
    assert cat._parser is cat._parser
    assert load_catalog("0.5.23")._parser is cat._parser
    # a changed catalog gets its own parser
    strict = dataclasses.replace(_toy_catalog(), allow_abbrev=False)
    assert strict._parser is not _toy_catalog()._parser
    assert strict._parser.parser.allow_abbrev is False


def test_every_problem_in_argparse_order():
    rej = load_catalog("0.5.23").check(["x", "--tp-size", "two", "y", "--enable-p", "--no-such=1"])
    assert [(r.arg, r.kind) for r in rej] == [
        ("--enable-p", "ambiguous"),
        ("--tp-size", "bad-type"),
        ("", "missing-required"),
        ("x", "positional"),
        ("y", "positional"),
        ("--no-such=1", "unknown"),
    ]
    # argparse's own messages
    assert rej[1].message == "argument --tp-size/--tensor-parallel-size: invalid int value: 'two'"
    assert rej[2].message == "the following arguments are required: --model-path/--model"
    assert rej[5].message == "unrecognized arguments: --no-such=1"


def test_leftovers_after_a_refused_value():
    # the option took its one value; what follows is left over
    assert kinds("0.5.23", "--tp-size", "y", "2", "z") == ["bad-type", "positional", "positional"]
    assert kinds("0.5.19", "--enable-expert-distribution-metrics", "y") == ["removed", "positional"]
    assert kinds("0.5.23", "--enable-p2p-check=1", "y") == ["unexpected-value", "positional"]
    # without a value the next plain args were meant for it: not reported again
    assert kinds("0.5.23", "--tp-size", "--port", "1") == ["missing-value"]
    assert kinds("0.5.23", "--enable-p", "x") == ["ambiguous", "positional"]


def test_help_after_an_error_keeps_the_error():
    rej = load_catalog("0.5.23").check([*M, "--tp-size", "x", "--help", "--no-such"])
    assert [r.kind for r in rej] == ["bad-type"]
    assert load_catalog("0.5.23").check(["--help", "--tp-size", "x"]) == []


def test_removed_message_is_the_actions_own():
    rej = load_catalog("0.5.19").check([*M, "--enable-expert-distribution-metrics"])
    assert rej[0].message == load_catalog("0.5.19").options["--enable-expert-distribution-metrics"].error


def test_resolve_follows_the_parser():
    cat = load_catalog("0.5.23")
    assert cat.resolve("--tp-size=2").option == "--tp-size"
    assert cat.resolve("--tensor-parallel-size").option == "--tensor-parallel-size"
    assert cat.resolve("--no-such") is None
    assert cat.resolve("plain") is None
    assert cat.resolve("-h").action == "help"
