"""Run on the host with the SGLang venv's python: prove a planned argv with the installed
SGLang itself, before any restart.

    python prove_argv.py ARGV.json [--gpus N --gpu-name NAME --capability 8.6 --memory-mib 49140]

1. The parse: the installed version's own ``prepare_server_args`` (what
   ``python -m sglang.launch_server`` runs), stopped right after argparse returns.
2. SGLang's own validation, when the checkpoint's ``config.json`` is on this host (a local
   model path, or the model's snapshot in the Hugging Face cache): ``prepare_server_args``
   in full (0.5.9 and 0.5.15 validate in ``ServerArgs.__post_init__``), then
   ``ServerArgs.resolve_once()`` where the version has it (0.5.19 and later resolve there:
   sglang/launch_server.py calls it before launching), then ``check_server_args()`` (what
   sglang/srt/entrypoints/engine.py calls before it starts the scheduler). This reads the
   model config (``ModelConfig``: heads vs TP, architectures a switch refuses, ...).

The process touches no GPU: ``CUDA_VISIBLE_DEVICES`` is empty, and the few device queries
SGLang's resolution makes (``torch.cuda`` availability, device count, name, capability,
memory; sglang/srt/utils/common.py ``get_device_memory_capacity``, which runs nvidia-smi)
are answered from the GPUs the deploy probed (``--gpus`` ...). Nothing is downloaded
(``HF_HUB_OFFLINE``). Nothing on the host is written.

Exit 0 when accepted (one line says how far the proof went and how long it took); exit 1
with one line naming the installed version and SGLang's own complaint when refused.
"""

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import time
import types
import warnings

REFUSES = "SGLang {version} installed on this host refuses the planned launch flags: {reason}"


class _Parsed(Exception):
    pass


def _options(argv):
    ap = argparse.ArgumentParser(prog="prove_argv.py")
    ap.add_argument("argv_file")
    ap.add_argument("--gpus", type=int, default=0, help="GPUs the server uses (0: no device answers)")
    ap.add_argument("--gpu-name", default="")
    ap.add_argument("--capability", default="", help="compute capability, e.g. 8.6")
    ap.add_argument("--memory-mib", type=int, default=0, help="memory of one GPU, MiB")
    ap.add_argument("--hf-hub-cache", default=None,
                    help="the service's Hugging Face hub cache, where a staged checkpoint's config.json is")
    return ap.parse_args(argv)


def _quiet_environment(hf_hub_cache):
    # Before torch is imported: no device is visible to this process, nothing is downloaded.
    if hf_hub_cache:
        os.environ["HF_HUB_CACHE"] = hf_hub_cache
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    warnings.simplefilter("ignore")


def _one_line(text):
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _parse(sa, argv):
    """argparse's complaint, or None when the parse accepts ``argv``."""
    orig = argparse.ArgumentParser.parse_args

    def stop_after_parse(self, args=None, namespace=None):
        raise _Parsed(orig(self, args, namespace))

    argparse.ArgumentParser.parse_args = stop_after_parse
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            sa.prepare_server_args(list(argv))
    except _Parsed as parsed:
        return None, parsed.args[0]
    except SystemExit as exc:
        complaint = [line for line in err.getvalue().splitlines() if "error:" in line]
        if complaint:
            return complaint[-1].split("error:", 1)[1].strip(), None
        return _one_line(err.getvalue()) or f"exit {exc.code}", None
    except Exception as exc:  # an action or type function raised
        return f"{type(exc).__name__}: {_one_line(exc)}", None
    finally:
        argparse.ArgumentParser.parse_args = orig
    return "prepare_server_args never parsed", None


def _config_on_host(model_path, revision):
    """Where the checkpoint's config.json is on this host, or None: a local model directory, or
    the repo's snapshot in the hub cache (``HF_HUB_CACHE``, else ``HF_HOME``/hub, else
    ~/.cache/huggingface/hub), laid out as huggingface_hub/file_download.py
    ``try_to_load_from_cache`` reads it: ``models--ORG--NAME/refs/REVISION`` names the snapshot."""
    if os.path.isdir(model_path):
        path = os.path.join(model_path, "config.json")
        return path if os.path.isfile(path) else None
    if model_path.count("/") != 1:
        return None
    cache = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
    repo = os.path.join(cache, "models--" + model_path.replace("/", "--"))
    revision = revision or "main"
    ref = os.path.join(repo, "refs", revision)
    commit = open(ref).read().strip() if os.path.isfile(ref) else revision
    path = os.path.join(repo, "snapshots", commit, "config.json")
    return path if os.path.isfile(path) else None


def _answer_device_queries(opts):
    """The device queries of SGLang's resolution, answered from the probed GPUs (before
    SGLang is imported: some of its platform checks are cached at import)."""
    try:
        import torch
    except ImportError:  # nothing to answer: this package does not ask torch about devices
        return

    major, _, minor = opts.capability.partition(".")
    capability = (int(major), int(minor or 0))
    total = opts.memory_mib * 1024 * 1024
    props = types.SimpleNamespace(name=opts.gpu_name, total_memory=total, major=capability[0],
                                  minor=capability[1], multi_processor_count=0, gcnArchName="",
                                  L2_cache_size=0, warp_size=32, uuid="")
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: opts.gpus
    cuda.current_device = lambda: 0
    cuda.set_device = lambda device: None
    cuda.get_device_capability = lambda device=None: capability
    cuda.get_device_name = lambda device=None: opts.gpu_name
    cuda.get_device_properties = lambda device=None: props
    cuda.mem_get_info = lambda device=None: (total, total)
    cuda.is_bf16_supported = lambda *a, **k: capability >= (8, 0)
    if torch.version.cuda is None:  # a CPU build of torch (a parser venv, not a GPU host's)
        torch.version.cuda = "12.8"


def _answer_memory_capacity(opts):
    """sglang/srt/utils/common.py get_device_memory_capacity runs nvidia-smi: answered instead."""

    def capacity(*args, **kwargs):
        return float(opts.memory_mib)

    for name, module in list(sys.modules.items()):
        if name == "sglang" or name.startswith("sglang."):
            for fn in ("get_device_memory_capacity", "get_nvgpu_memory_capacity"):
                if isinstance(module, types.ModuleType) and callable(getattr(module, fn, None)):
                    setattr(module, fn, capacity)


def _validate(sa, argv, steps):
    """SGLang's own validation of ``argv``: its complaint, or None. ``steps`` gets the name of
    each step that ran."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
            server_args = sa.prepare_server_args(list(argv))
            steps.append("prepare_server_args")
            logging.disable(logging.CRITICAL)
            for step in ("resolve_once", "check_server_args"):  # absent from some versions
                if callable(getattr(server_args, step, None)):
                    getattr(server_args, step)()
                    steps.append(step)
    except SystemExit as exc:
        return _one_line(out.getvalue()) or f"exit {exc.code}"
    except Exception as exc:
        return f"{type(exc).__name__}: {_one_line(exc) or 'no message'}"
    finally:
        logging.disable(logging.NOTSET)
    return None


def main(argv=None):
    opts = _options(argv)
    started = time.monotonic()
    planned = json.load(open(opts.argv_file))
    _quiet_environment(opts.hf_hub_cache)
    if opts.gpus:
        _answer_device_queries(opts)
    try:
        import sglang
        import sglang.srt.server_args as sa

        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(ImportError):
            # What ``python -m sglang.launch_server`` imports before it parses (some choices
            # come from registries its imports fill).
            import sglang.launch_server  # noqa: F401
    except Exception as exc:  # the venv has no usable SGLang
        print(f"cannot import the installed SGLang: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return 1
    version = getattr(sglang, "__version__", "unknown")
    complaint, namespace = _parse(sa, planned)
    if complaint is not None:
        print(REFUSES.format(version=version, reason=complaint), file=sys.stderr)
        return 1
    config = _config_on_host(namespace.model_path, getattr(namespace, "revision", None))
    if config is None or not opts.gpus:
        why = ("no GPUs given" if config is not None
               else f"the config.json of {namespace.model_path} is not on this host")
        print(f"SGLang {version} parses the planned launch flags; its own validation not run ({why}); "
              f"{time.monotonic() - started:.1f} s")
        return 0
    _answer_memory_capacity(opts)
    steps = []
    complaint = _validate(sa, planned, steps)
    if complaint is not None:
        print(REFUSES.format(version=version, reason=complaint), file=sys.stderr)
        return 1
    print(f"SGLang {version} accepts the planned launch flags: {' + '.join(steps)} with {config} and "
          f"{opts.gpus}x {opts.gpu_name} (sm {opts.capability}); {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
