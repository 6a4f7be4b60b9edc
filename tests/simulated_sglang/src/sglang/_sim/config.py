"""The simulator's own behaviour: a JSON object read from the file named by
``$SGLANG_SIM_CONFIG`` (default ``/etc/sglang-sim.json``; a missing file means
all defaults).  Every key is optional; unknown keys are kept (later
behaviours read their own keys from the same dict) but reported on stdout.

See DEFAULTS for the keys, their defaults and meaning."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Tuple

ENV_VAR = "SGLANG_SIM_CONFIG"
DEFAULT_PATH = "/etc/sglang-sim.json"

#: key: (default, meaning)
DEFAULTS: Dict[str, Tuple[Any, str]] = {
    "listen_delay_s": (0.0, "seconds before the HTTP port is bound at all (model loading)"),
    "startup_delay_s": (1.0, "seconds after binding during which /health* answer 503"),
    "ttft_s": (0.05, "time to first token of every request"),
    "prefill_tok_s": (None, "if set, TTFT also grows by prompt_tokens / prefill_tok_s"),
    "decode_tok_s": (50.0, "output tokens per second after the first token (one stream)"),
    "tokens_per_chunk": (None, "tokens per streamed chunk after the first; None: "
                         "--stream-interval, or the accept length with speculative decoding"),
    "spec_accept_length": (None, "mean tokens per decode step with speculative decoding; "
                           "None: min(draft tokens, 1 + steps / 2)"),
    "prompt_tokens_per_char": (0.25, "prompt tokens counted per character of prompt text"),
    "default_max_tokens": (128, "completion length when a request sets no max_tokens"),
    "eos_after_tokens": (None, "if set, the model 'emits EOS' after this many tokens "
                         "(finish_reason stop) unless ignore_eos"),
    "architectures": (["LlamaForCausalLM"], "what /model_info reports; drives the "
                      "multimodal prefill-graph auto-disable"),
    "multimodal": (None, "force the multimodal decision (None: from the architecture names)"),
    "context_length": (32768, "context length when --context-length is not given"),
    "default_attention_backend": ("flashinfer", "attention_backend when not given"),
    "default_mem_fraction_static": (0.85, "mem_fraction_static when not given"),
    "features": ({}, "override the per-version feature table (see resolve.FEATURES)"),
}


class ConfigError(ValueError):
    pass


def defaults() -> Dict[str, Any]:
    return {k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
            for k, (v, _) in DEFAULTS.items()}


def load(path: str = "") -> Tuple[Dict[str, Any], str, List[str]]:
    """(config, path read or '' when absent, unknown keys)."""
    path = path or os.environ.get(ENV_VAR) or DEFAULT_PATH
    cfg = defaults()
    if not os.path.exists(path):
        return cfg, "", []
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read simulator config {path}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"simulator config {path} must be a JSON object")
    cfg.update(data)
    for key in ("decode_tok_s", "ttft_s", "startup_delay_s", "listen_delay_s"):
        if not isinstance(cfg[key], (int, float)) or cfg[key] < 0:
            raise ConfigError(f"simulator config {path}: {key} must be a number >= 0")
    if cfg["decode_tok_s"] <= 0:
        raise ConfigError(f"simulator config {path}: decode_tok_s must be > 0")
    return cfg, path, sorted(k for k in data if k not in DEFAULTS)
