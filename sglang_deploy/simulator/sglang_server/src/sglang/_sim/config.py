"""The simulator's own behaviour: a JSON object read from the file named by
``$SGLANG_SIM_CONFIG`` (default ``/etc/sglang-sim.json``; a missing file means
all defaults).  Every key is optional; unknown keys are kept (later
behaviours read their own keys from the same dict) but reported on stdout.

See DEFAULTS for the keys, their defaults and meaning."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from sglang._sim import perf, startcache

ENV_VAR = "SGLANG_SIM_CONFIG"
DEFAULT_PATH = "/etc/sglang-sim.json"

def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: key: (default, meaning)
DEFAULTS: Dict[str, Tuple[Any, str]] = {
    "listen_delay_s": (0.0, "seconds before the HTTP port is bound at all (model loading)"),
    "startup_delay_s": (1.0, "seconds after binding during which /health* answer 503"),
    "cold_start_s": (0.0, "added to startup_delay_s when $SGLANG_CACHE_DIR holds no compile-cache marker for "
                     "this version, model and layout; the marker is written once ready (startcache.py; 0: off)"),
    "warmup_s": (0.5, "the last part of startup_delay_s, after the CUDA graph capture's end line and before "
                 "the ready line (startcache.py; clipped to startup_delay_s)"),
    "stall_in": (None, "a start phase (load, kv_cache, cuda_graphs, warmup) the start hangs in until stopped: "
                 "that phase's end line and every later one are never logged, /health stays 503 "
                 "(startcache.py; None: no stall)"),
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
    "usage": (True, "false: never send a usage object, even when stream_options.include_usage "
              "asks for one (a server that ignores it)"),
    "server_info_overrides": ({}, "deep-merged into the /server_info and /get_server_info "
                              "answer: SGLang resolving differently from the request"),
    "faults": ({}, "simulated failures, see FAULTS"),
    "dist_init_timeout_s": (300.0, "with --nnodes > 1: how long rank 0 waits for every follower to join, "
                            "and a follower keeps retrying to reach rank 0"),
    "weights_read_mb_s": (None, "MB/s at which the weights under a local --model-path are read before the "
                          "port is bound (None: as fast as the disk goes)"),
    "download_at_start": (False, "a Hub id as --model-path (not offline): download every file from "
                          "$HF_ENDPOINT before binding, as SGLang does at start"),
    "download_revision": ("main", "the revision download_at_start fetches"),
    "performance": (None, "a performance model (sglang/_sim/perf.py, KEYS): TTFT, decode rate and accept "
                    "length per request from the server args and the load, start failures, planted "
                    "crashes; None: the fixed figures above"),
    "pd_transfer_timeout_s": (30.0, "--disaggregation-mode decode: how long a request waits for its prefill "
                              "server's (simulated) KV transfer before it fails (disagg.py)"),
    "follower_health_server": (True, "with --node-rank > 0: serve SGLang's dummy /health, /health_generate "
                               "and /ping on --host/--port once joined"),
}

#: fault key: (check, what it must be, meaning).  All optional; see README.
FAULTS: Dict[str, Tuple[Callable[[Any], bool], str, str]] = {
    "never_ready": (lambda v: isinstance(v, bool), "true or false",
                    "/health* answer 503 forever (and generation 503)"),
    "crash_after_s": (lambda v: _number(v) and v >= 0, "a number >= 0",
                      "the process exits 1 this long after it started, with a fatal error line"),
    "http_500_every": (lambda v: _int(v) and v >= 1, "an integer >= 1",
                       "every Nth generation request answers 500"),
    "http_500_rate": (lambda v: _number(v) and 0 <= v <= 1, "a number in [0, 1]",
                      "each generation request answers 500 with this probability"),
    "seed": (_int, "an integer", "seed of the http_500_rate draws (default 0)"),
    "stall_after_tokens": (lambda v: _int(v) and v >= 0, "an integer >= 0",
                           "the stream pauses stall_s after this many tokens, then continues"),
    "stall_s": (lambda v: _number(v) and v >= 0, "a number >= 0",
                "length of the stall_after_tokens pause"),
    "stall_forever_after_tokens": (lambda v: _int(v) and v >= 0, "an integer >= 0",
                                   "after this many tokens nothing more is sent; the connection "
                                   "stays open until the client closes it"),
    "wrong_model_name": (lambda v: isinstance(v, str) and v != "", "a non-empty string",
                         "/v1/models lists this name and responses carry it as model"),
    "slow_first_token_s": (lambda v: _number(v) and v >= 0, "a number >= 0",
                           "added to the TTFT of the first generation request"),
    "slow_first_token_every": (lambda v: isinstance(v, bool), "true or false",
                               "slow_first_token_s applies to every request"),
    "health_500": (lambda v: isinstance(v, bool), "true or false",
                   "/health* answer 500 once the server would be ready"),
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
    for key in ("decode_tok_s", "ttft_s", "startup_delay_s", "listen_delay_s", "dist_init_timeout_s", "warmup_s",
                "pd_transfer_timeout_s", "cold_start_s"):
        if not isinstance(cfg[key], (int, float)) or cfg[key] < 0:
            raise ConfigError(f"simulator config {path}: {key} must be a number >= 0")
    if cfg["decode_tok_s"] <= 0:
        raise ConfigError(f"simulator config {path}: decode_tok_s must be > 0")
    problem = check(cfg)
    if problem:
        raise ConfigError(f"simulator config {path}: {problem}")
    return cfg, path, sorted(k for k in data if k not in DEFAULTS)


def check(cfg: Mapping[str, Any]) -> str:
    """What is wrong with the keys added for the post-deploy gate ('' if nothing)."""
    stall = cfg.get("stall_in")
    if stall is not None and stall not in startcache.PHASES:
        return f"stall_in must be null or one of {', '.join(startcache.PHASES)}, got {stall!r}"
    tpc = cfg.get("tokens_per_chunk")
    if tpc is not None and not (_int(tpc) and tpc >= 1):
        return f"tokens_per_chunk must be an integer >= 1 or null, got {tpc!r}"
    if not isinstance(cfg.get("follower_health_server"), bool):
        return f"follower_health_server must be true or false, got {cfg.get('follower_health_server')!r}"
    rate = cfg.get("weights_read_mb_s")
    if rate is not None and not (_number(rate) and rate > 0):
        return f"weights_read_mb_s must be a number > 0 or null, got {rate!r}"
    if not isinstance(cfg.get("download_at_start"), bool):
        return f"download_at_start must be true or false, got {cfg.get('download_at_start')!r}"
    if not isinstance(cfg.get("usage"), bool):
        return f"usage must be true or false, got {cfg.get('usage')!r}"
    if not isinstance(cfg.get("server_info_overrides"), dict):
        return "server_info_overrides must be a JSON object"
    if cfg.get("performance") is not None:
        try:
            performance_model(cfg)
        except ValueError as e:
            return str(e)
    faults = cfg.get("faults")
    if not isinstance(faults, dict):
        return "faults must be a JSON object"
    for key, value in faults.items():
        if key not in FAULTS:
            return f"unknown fault {key!r} (known: {', '.join(FAULTS)})"
        ok, want, _ = FAULTS[key]
        if not ok(value):
            return f"faults.{key} must be {want}, got {value!r}"
    if ("stall_after_tokens" in faults) != ("stall_s" in faults):
        return "faults.stall_after_tokens and faults.stall_s go together"
    if "slow_first_token_every" in faults and "slow_first_token_s" not in faults:
        return "faults.slow_first_token_every needs faults.slow_first_token_s"
    return ""


def performance_model(cfg: Mapping[str, Any]) -> Optional[perf.PerfModel]:
    """The behaviour file's performance model (None without a ``performance`` key).  Its
    decode_tok_s, ttft_s, prefill_tok_s and accept_length default to the file's own
    decode_tok_s, ttft_s, prefill_tok_s and spec_accept_length, so an empty model serves
    what the file says without one."""
    given = cfg.get("performance")
    if given is None:
        return None
    if not isinstance(given, dict):
        raise ValueError("performance must be a JSON object")
    inherited = {"decode_tok_s": cfg.get("decode_tok_s"), "ttft_s": cfg.get("ttft_s"),
                 "prefill_tok_s": cfg.get("prefill_tok_s"), "accept_length": cfg.get("spec_accept_length")}
    mapping = {k: v for k, v in inherited.items() if v is not None}
    mapping.update(given)
    return perf.load_model(mapping)


def deep_merge(base: Dict[str, Any], over: Mapping[str, Any]) -> Dict[str, Any]:
    """``base`` updated with ``over``: nested objects merge key by key, anything
    else (lists, scalars, null) replaces.  Neither argument is modified."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _leaves(obj: Mapping[str, Any], prefix: str = "") -> List[str]:
    out: List[str] = []
    for key, value in obj.items():
        if isinstance(value, dict) and value:
            out += _leaves(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}={json.dumps(value)}")
    return out


def describe(cfg: Mapping[str, Any]) -> str:
    """One banner fragment naming every fault and deviation in force."""
    faults = cfg.get("faults") or {}
    parts = []
    for key in FAULTS:
        if key in faults:
            value = faults[key]
            parts.append(key if value is True else f"{key}={json.dumps(value)}")
    text = "faults: " + (", ".join(parts) if parts else "none")
    if cfg.get("stall_in") is not None:
        text += f"; stall_in: {cfg['stall_in']} (the start hangs there)"
    if cfg.get("usage") is False:
        text += "; usage: never sent"
    model = performance_model(cfg)
    if model is not None:
        text += "; " + perf.describe(model)
    overrides = cfg.get("server_info_overrides") or {}
    if overrides:
        text += "; server_info_overrides: " + ", ".join(_leaves(overrides))
    return text
