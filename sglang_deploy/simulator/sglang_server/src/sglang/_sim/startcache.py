"""The simulated start's compile caches (SIMULATED): a real SGLang's first start of a version,
model and layout compiles kernels (DeepGEMM, Triton, FlashInfer, ...) into the caches under
``SGLANG_CACHE_DIR`` and is slow; a later start finds them and is not.

With ``cold_start_s`` in the behaviour file (0, the default: off, no marker read or written), the
server becomes ready that much later when the cache directory it is given (``$SGLANG_CACHE_DIR``, else SGLang's default
``~/.cache/sglang``, srt/environ.py) holds no marker for this version, model and layout, and
writes the marker once it is ready; a warm start takes the usual ``startup_delay_s``.

Standard library only (the unit tests load this file by itself).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Mapping, Optional, Tuple

#: The server args that make a start's compiled kernels differ (the layout), besides the model.
LAYOUT_KEYS = ("tp_size", "dp_size", "ep_size", "pp_size", "quantization", "dtype", "kv_cache_dtype",
               "attention_backend", "enable_dp_attention", "speculative_algorithm")
#: Inside the cache directory: one empty file per warm version, model and layout.
MARKER_DIR = "sglang-sim-start"


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
