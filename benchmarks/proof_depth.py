#!/usr/bin/env python3
"""Which planted mistakes the parse alone misses and SGLang's own validation catches.

    python benchmarks/proof_depth.py [--versions 0.5.9,0.5.23] [--mistakes 0,2] [--cache-dir DIR]

Each planted mistake is the reference plan's argv (inventory/a6000.py, planned for the
version) with one change, proven by sglang_deploy/deploy/host/prove_argv.py, the script the deploy runs
on a host, in the released wheel's parser venv of scripts/build_catalogs.py (cached; the
first run builds it from the package index). Two proofs per argv: the parse alone (no
checkpoint config on the "host") and the deeper one (the checkpoint's config.json in a local
model path, 2x RTX A6000 as probed). Prints a table: per mistake and version, what each
proof said (SGLang's own message, cut) and the deeper proof's time. ``--mistakes`` picks some
of them by their index in MISTAKES (0: the reference plan; default: all), as the smoke run does
(benchmarks/smoke.py: the reference plan and one mistake only the deeper proof catches).

The parser venvs are not a GPU host's: torch is its CPU build and GPU-only packages
(sgl_kernel, flashinfer, ...) are stand-ins (scripts/catalogs/introspect.py), so a check
that calls into a GPU-only package cannot run its real code here; the e2e test
tests/e2e/test_real_sglang.py runs the same proof with the released package installed.

The checkpoint config: Qwen3.6-27B's published config.json, recorded under
sglang_deploy/simulator/hub/checkpoints/Qwen--Qwen3.6-27B (its provenance.json says where from).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from catalogs.config import DEFAULT_VERSIONS, default_cache_dir  # noqa: E402
from catalogs.venvs import ensure_env  # noqa: E402
from catalogs.wheels import ensure_wheel  # noqa: E402
from sglang_deploy.deploy.inventory import load_inventory  # noqa: E402
from sglang_deploy.plan.inventory_plan import plan_inventory  # noqa: E402

PROVE = ROOT / "sglang_deploy" / "deploy" / "host" / "prove_argv.py"
INTROSPECT_DIR = ROOT / "scripts" / "catalogs"
GPUS = ["--gpus", "2", "--gpu-name", "NVIDIA RTX A6000", "--capability", "8.6", "--memory-mib", "49140"]

# Runs in the parser venv: the GPU-only packages' stand-ins (as the catalog build does), then
# the deploy's own proof script as __main__.
WRAPPER = """
import contextlib, runpy, sys
sys.path.insert(0, {introspect!r})
import introspect
introspect._install_stub_finder()
with contextlib.suppress(Exception):
    import transformers.utils.import_utils as iu
    for n in sorted(dir(iu)):
        if n.startswith("is_") and n.endswith("_available"):
            with contextlib.suppress(Exception):
                getattr(iu, n)()
sys.argv = [{prove!r}, *sys.argv[1:]]
runpy.run_path({prove!r}, run_name="__main__")
"""

CHECKPOINT = ROOT / "sglang_deploy/simulator/hub/checkpoints/Qwen--Qwen3.6-27B"  # the published config.json, recorded


def _set(argv: list[str], flag: str, value: str | None) -> list[str]:
    """argv with ``flag`` set to ``value`` (None: removed with its value)."""
    out = list(argv)
    if flag in out:
        i = out.index(flag)
        del out[i:i + 2]
    if value is not None:
        out += [flag, value]
    return out


def _drop_flag(argv: list[str], flag: str) -> list[str]:
    return [a for a in argv if a != flag]


#: (what is planted, the change to the reference argv). Each names SGLang's rule it breaks.
MISTAKES = [
    ("none (the reference plan)", lambda a, v: a),
    ("speculative steps/top-k/draft tokens without --speculative-algorithm",
     lambda a, v: _set(a, "--speculative-algorithm", None)),
    ("--speculative-draft-sink-size 4 without its companion --speculative-draft-window-size",
     lambda a, v: _set(a, "--speculative-draft-sink-size", "4")),
    ("--language-model-only on Qwen3_5ForConditionalGeneration (text-only switch)",
     lambda a, v: a + ["--language-model-only"]),
    ("--tp-size 5: 24 attention heads are not divisible by 5",
     lambda a, v: _set(a, "--tp-size", "5")),
    ("--tp-size 16: 4 KV heads, 24 heads over 16 ranks",
     lambda a, v: _set(a, "--tp-size", "16")),
    ("prefill graph backend tc_piecewise (flag)",
     lambda a, v: _set(a, "--cuda-graph-backend-prefill", "tc_piecewise")),
    ("prefill graph backend tc_piecewise (inside --cuda-graph-config JSON)",
     lambda a, v: _set(_set(a, "--cuda-graph-backend-prefill", None), "--cuda-graph-config",
                       json.dumps({"prefill": {"backend": "tc_piecewise"}}))),
    ("--enable-piecewise-cuda-graph (a 0.5.9 flag; the catalogs of 0.5.15 on lack it)",
     lambda a, v: a + ["--enable-piecewise-cuda-graph"] if "--enable-piecewise-cuda-graph" not in a else a),
]


def reference_argv(version: str) -> list[str]:
    hosts = [(h.name, h.group_data, h.host_data) for h in load_inventory(str(ROOT / "inventory/a6000.py"))]
    plan = plan_inventory(hosts, sglang_version=version)[0]
    return list(plan.argv)


def prove(py: Path, src: Path, cache: Path, argv: list[str], deep: bool) -> tuple[bool, str, float]:
    """(accepted, the proof's one line, seconds) for one argv in the version's venv."""
    with tempfile.TemporaryDirectory() as tmp:
        argv_file = Path(tmp) / "argv.json"
        argv_file.write_text(json.dumps(argv))
        wrapper = WRAPPER.format(introspect=str(INTROSPECT_DIR), prove=str(PROVE))
        env = {"PATH": f"{py.parent}:/usr/bin:/bin", "HOME": str(cache / "home"), "PYTHONPATH": str(src),
               "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8", "TMPDIR": tmp}
        started = time.monotonic()
        proc = subprocess.run([str(py), "-c", wrapper, str(argv_file), *(GPUS if deep else [])],
                              capture_output=True, text=True, env=env, cwd=tmp, timeout=600)
        seconds = time.monotonic() - started
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    return proc.returncode == 0, (lines[-1] if lines else f"exit {proc.returncode}"), seconds


#: Signs that a failure came from a GPU-only package's stand-in in the parser venv (its
#: torch.library ops or attributes are MagicMocks), not from SGLang's own rules.
STANDIN_SIGNS = ("sgl_kernel::", "MagicMock", "flashinfer::")


def _cell(accepted: bool, line: str, width: int = 70) -> str:
    if accepted:
        return "accepted"
    reason = line.split("refuses the planned launch flags: ", 1)[-1]
    cut = reason if len(reason) <= width else reason[:width - 3] + "..."
    if any(sign in reason for sign in STANDIN_SIGNS):
        return "NOT RUN in the parser venv (a GPU-only package is stood in): " + cut
    return "REFUSED: " + cut


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", default=",".join(DEFAULT_VERSIONS))
    ap.add_argument("--mistakes", default=None,
                    help="indices into MISTAKES, comma-separated (0: the reference plan; default: all): "
                         + "; ".join(f"{i} {what}" for i, (what, _) in enumerate(MISTAKES)))
    ap.add_argument("--cache-dir", type=Path, default=None)
    args = ap.parse_args()
    try:
        picked = (MISTAKES if args.mistakes is None else
                  [MISTAKES[int(i)] for i in args.mistakes.split(",")])
    except (ValueError, IndexError):
        ap.error(f"--mistakes: indices from 0 to {len(MISTAKES) - 1}, comma-separated")
    cache = (args.cache_dir or default_cache_dir()).resolve()
    versions = args.versions.split(",")
    rows = []
    for version in versions:
        py, src = ensure_env(cache, version, ensure_wheel(cache / "wheels", version))
        base = _set(reference_argv(version), "--model-path", str(CHECKPOINT))
        for what, plant in picked:
            argv = plant(base, version)
            parsed = prove(py, src, cache, argv, deep=False)
            deep = prove(py, src, cache, argv, deep=True)
            rows.append((what, version, parsed, deep))
            print(f"{version:7} {what[:60]:60} parse: {_cell(*parsed[:2], 40):50} deep: {_cell(*deep[:2], 60)}",
                  file=sys.stderr, flush=True)
    print("| planted mistake | version | parse alone | parse + SGLang's own validation | deep proof s |")
    print("|---|---|---|---|---|")
    for what, version, parsed, deep in rows:
        print(f"| {what} | {version} | {_cell(*parsed[:2])} | {_cell(*deep[:2])} | {deep[2]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
