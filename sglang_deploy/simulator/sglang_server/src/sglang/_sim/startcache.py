"""The simulated start (SIMULATED): its phases, the lines that end them, and its compile caches.

The phases, in order, each ended by the line the real SGLang releases log (``PHASES``):

- ``load``: the weights are read before the port is bound (weights.py), ended by "Load weight end. ...";
- ``kv_cache``: the KV-cache memory pool, ended by "Memory pool end. avail mem=<x.xx> GB", logged when
  the readiness wait begins (at bind, or once every follower node joined);
- ``cuda_graphs``: the CUDA graph capture, ended by the decode graph's capture line in the version's
  spelling (``graph_end_line``). It holds the cold compile (kernels are JIT-compiled at the first
  capture), so it ends ``cold_s + startup_delay_s - warmup_s`` after the wait began;
- ``warmup``: ``warmup_s`` (clipped to ``startup_delay_s``), ended at ready by "The server is fired up and
  ready to roll!". Readiness itself is unchanged: /health answers 200 ``startup_delay_s`` (plus
  ``cold_start_s`` when cold) after the wait began.

``stall_in`` in the behaviour file names a phase the start hangs in until it is stopped: that phase's
end line and every later one are never logged, and /health stays 503 (a stop still exits 0).

The compile caches: a real SGLang's first start of a version, model and layout compiles kernels
(DeepGEMM, Triton, FlashInfer, ...) into the caches under ``SGLANG_CACHE_DIR`` and is slow; a later
start finds them and is not. With ``cold_start_s`` in the behaviour file (0, the default: off, no
marker read or written), the server becomes ready that much later when the cache directory it is given
(``$SGLANG_CACHE_DIR``, else SGLang's default ``~/.cache/sglang``, srt/environ.py) holds no marker for
this version, model and layout, and writes the marker once it is ready; a warm start takes the usual
``startup_delay_s``.

Standard library only (the unit tests load this file by itself).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any, Mapping, Optional, Tuple

#: The server args that make a start's compiled kernels differ (the layout), besides the model.
LAYOUT_KEYS = ("tp_size", "dp_size", "ep_size", "pp_size", "quantization", "dtype", "kv_cache_dtype",
               "attention_backend", "enable_dp_attention", "speculative_algorithm")
#: Inside the cache directory: one empty file per warm version, model and layout.
MARKER_DIR = "sglang-sim-start"
#: The phases of a start, in order; ``stall_in`` names one of them.
PHASES = ("load", "kv_cache", "cuda_graphs", "warmup")
#: What a simulated start reports of GPU memory (nominal figures: no GPU is used): the GB of a
#: card, and what the decode CUDA graphs take of what the memory pool left.
NOMINAL_GPU_GB = 80.0
NOMINAL_GRAPH_GB = 0.5
#: The real server's ready line (srt/entrypoints/http_server.py, _wait_and_warmup).
READY_LINE = "The server is fired up and ready to roll!"


def _release(version: str) -> Tuple[int, ...]:
    """``0.5.15`` as (0, 5, 15): the leading digits of each dotted part (``0.5.15rc1`` is 0.5.15)."""
    parts = []
    for part in version.split("."):
        digits = re.match(r"\d*", part)
        parts.append(int(digits.group()) if digits and digits.group() else 0)
    return tuple(parts)


def memory_pool_line(mem_fraction_static: Any) -> str:
    """The line that ends the KV-cache phase. Real: "Memory pool end. avail mem=<x.xx> GB" --
    0.5.9 and 0.5.15: srt/model_executor/model_runner_kv_cache_mixin.py; 0.5.19 and 0.5.23:
    srt/mem_cache/kv_cache_configurator.py (``configure``)."""
    return f"Memory pool end. avail mem={_avail_after_pool(mem_fraction_static):.2f} GB (simulated)"


def graph_end_line(version: str, elapsed_s: float, mem_fraction_static: Any) -> str:
    """The line that ends the CUDA graph phase, in the version's spelling (any version >= 0.5.15 has
    the new one).  Real:
    0.5.9: "Capture cuda graph end. Time elapsed: <t:.2f> s. mem usage=<m:.2f> GB. avail mem=<a:.2f> GB."
    (srt/model_executor/model_runner.py, init_device_graphs);
    0.5.15: "Capture target decode CUDA graph end. elapsed=<t:.2f> s, mem usage=<m:.2f> GB,
    avail mem=<a:.2f> GB." (srt/model_executor/model_runner.py);
    0.5.19 and 0.5.23: same text, srt/model_executor/model_runner_components/cuda_graph_setup.py,
    capture_decode_graph."""
    usage = NOMINAL_GRAPH_GB
    avail = max(0.0, _avail_after_pool(mem_fraction_static) - usage)
    if _release(version) >= (0, 5, 15):
        text = (f"Capture target decode CUDA graph end. elapsed={elapsed_s:.2f} s, mem usage={usage:.2f} GB, "
                f"avail mem={avail:.2f} GB.")
    else:
        text = (f"Capture cuda graph end. Time elapsed: {elapsed_s:.2f} s. mem usage={usage:.2f} GB. "
                f"avail mem={avail:.2f} GB.")
    return text + " (simulated)"


def _avail_after_pool(mem_fraction_static: Any) -> float:
    try:
        fraction = float(mem_fraction_static)
    except (TypeError, ValueError):
        fraction = 0.85  # SGLang's usual resolved default
    return max(0.0, NOMINAL_GPU_GB * (1.0 - fraction))


def warmup_s(cfg: Mapping[str, Any]) -> float:
    """The warm-up phase's length: ``warmup_s``, clipped to ``startup_delay_s``."""
    return max(0.0, min(float(cfg.get("warmup_s", 0.5)), float(cfg.get("startup_delay_s") or 0.0)))


def cache_dir(env: Mapping[str, str]) -> str:
    return env.get("SGLANG_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "sglang")


def marker_path(directory: str, version: str, info: Mapping[str, Any]) -> str:
    """The marker of this version, model and layout: ``<dir>/sglang-sim-start/<version>-<digest>``."""
    key = {"version": version, "model": info.get("model_path"), **{k: info.get(k) for k in LAYOUT_KEYS}}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return os.path.join(directory, MARKER_DIR, f"{version}-{digest}")


def start_delay(cfg: Mapping[str, Any], env: Mapping[str, str], version: str,
                info: Mapping[str, Any]) -> Tuple[float, Optional[str], str]:
    """(extra seconds before ready, the marker to write once ready or None, a log line)."""
    cold = float(cfg.get("cold_start_s") or 0.0)
    if cold <= 0:  # the start model is off: nothing read, nothing written
        return 0.0, None, ""
    path = marker_path(cache_dir(env), version, info)
    if os.path.isfile(path):
        return 0.0, path, f"compile caches warm ({path}): no compilation at start"
    return cold, path, (f"compile caches cold (no {path}): compiling kernels for {cold:g} s before ready "
                        "(SIMULATED)")


def mark(path: Optional[str]) -> str:
    """Write the marker (its directories too); '' or the reason it could not be written (a real
    server whose cache is not writable still serves, only every start stays cold)."""
    if path is None:
        return ""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8"):
            pass
    except OSError as e:
        return f"cannot write the compile-cache marker {path}: {e.strerror or e}"
    return ""
