"""What the simulated SGLang "decides" from its arguments: the flat
/server_info dict (every parsed dest plus the resolved fields SGLang
reports), /model_info, the speculative settings, and start-up validation.

Approximations of SGLang's own logic (server_args.__post_init__ and the
arg_groups hooks), limited to what a deployment checks."""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

from sglang.srt.server_args import SECRET_DEST, ServerArgs


def version_key(version: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


#: Per-version behaviour of the HTTP side (``features`` in the config overrides).
FEATURES: Dict[str, Dict[str, Any]] = {
    # /server_info and /get_server_info (deprecated) both answer in all four (http_server.py of each wheel).
    "server_info_path": {"0.5.9": True, "0.5.15": True, "0.5.19": True, "0.5.23": True},
    "launch_command": {"0.5.9": False, "0.5.15": False, "0.5.19": False, "0.5.23": True},
    # prefill CUDA graph as a cuda_graph_config (0.5.15+) vs enable_piecewise_cuda_graph
    "cuda_graph_config": {"0.5.9": False, "0.5.15": True, "0.5.19": True, "0.5.23": True},
    # speculative_algorithm: free string upper-cased (0.5.15+) vs case-sensitive choices
    "spec_algorithm_upper": {"0.5.9": False, "0.5.15": True, "0.5.19": True, "0.5.23": True},
}


def feature(name: str, version: str, cfg: Mapping[str, Any]) -> Any:
    override = (cfg.get("features") or {}).get(name)
    if override is not None:
        return override
    table = FEATURES[name]
    if version in table:
        return table[version]
    # unknown version: the value of the nearest older known one
    known = sorted(table, key=version_key)
    older = [v for v in known if version_key(v) <= version_key(version)]
    return table[(older or known)[-1]]


# -- multimodal prefill-graph auto-disable ------------------------------------

_MM_HINT = re.compile(r"(ForConditionalGeneration|VL|Vision|Omni|Llava)")
#: 0.5.15 keeps prefill graphs on for these multimodal architectures only
_KEEP_PREFILL_0515 = {"Cohere2VisionForConditionalGeneration"}
#: 0.5.19+ keep an allowlist (configs/model_config.py, arg_groups/cuda_graph_hook.py)
_KEEP_PREFILL_0519 = {
    "Cohere2VisionForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
}


def architectures(cfg: Mapping[str, Any]) -> List[str]:
    archs = cfg.get("architectures") or ["LlamaForCausalLM"]
    return [str(a) for a in (archs if isinstance(archs, list) else [archs])]


def is_multimodal(cfg: Mapping[str, Any]) -> bool:
    if cfg.get("multimodal") is not None:
        return bool(cfg["multimodal"])
    return any(_MM_HINT.search(a) for a in architectures(cfg))


def _prefill_auto_disabled(version: str, cfg: Mapping[str, Any]) -> bool:
    if not is_multimodal(cfg):
        return False
    keep = _KEEP_PREFILL_0515 if version_key(version) < (0, 5, 19) else _KEEP_PREFILL_0519
    return not any(a in keep for a in architectures(cfg))


# -- speculative --------------------------------------------------------------


def speculative(info: Mapping[str, Any], version: str, cfg: Mapping[str, Any]) -> Dict[str, Any]:
    alg = info.get("speculative_algorithm")
    out: Dict[str, Any] = {"speculative_algorithm": alg}
    if not alg:
        return out
    alg = str(alg)
    if feature("spec_algorithm_upper", version, cfg):
        alg = alg.upper()
    if alg == "NEXTN":
        alg = "EAGLE"
    out["speculative_algorithm"] = alg
    if alg == "NGRAM":
        out["speculative_num_draft_tokens"] = info.get("speculative_num_draft_tokens") or 4
        return out
    steps = info.get("speculative_num_steps") or 3
    topk = info.get("speculative_eagle_topk") or 1
    draft = info.get("speculative_num_draft_tokens") or 4
    if topk == 1:
        draft = steps + 1
    out.update(
        speculative_num_steps=steps,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=draft,
    )
    return out


def spec_accept_length(info: Mapping[str, Any], cfg: Mapping[str, Any]) -> Optional[float]:
    """Mean tokens per decode step; None without speculative decoding."""
    if not info.get("speculative_algorithm"):
        return None
    draft = int(info.get("speculative_num_draft_tokens") or 4)
    steps = int(info.get("speculative_num_steps") or 3)
    length = cfg.get("spec_accept_length")
    if length is None:
        length = min(float(draft), 1.0 + steps / 2.0)
    return max(1.0, min(float(length), float(max(draft, 1))))


# -- CUDA graphs --------------------------------------------------------------


def cuda_graph_config(info: Mapping[str, Any], version: str, cfg: Mapping[str, Any]) -> Dict[str, Any]:
    given = info.get("cuda_graph_config")
    given = given if isinstance(given, dict) else {}
    all_off = bool(info.get("disable_cuda_graph"))

    def phase(name: str, default_backend: str, auto_off: bool) -> Dict[str, Any]:
        settings = dict(given.get(name) or {})
        explicit = info.get(f"cuda_graph_backend_{name}") or settings.get("backend")
        if all_off or info.get(f"disable_{name}_cuda_graph"):
            backend = "disabled"
        elif explicit:
            backend = explicit
        elif auto_off:
            backend = "disabled"
        else:
            backend = default_backend
        settings["backend"] = backend
        settings["max_bs"] = info.get(f"cuda_graph_max_bs_{name}") or settings.get("max_bs")
        settings["bs"] = info.get(f"cuda_graph_bs_{name}") or settings.get("bs")
        return settings

    return {
        "decode": phase("decode", "full", False),
        "prefill": phase("prefill", "breakable", _prefill_auto_disabled(version, cfg)),
    }


# -- the flat server_info -------------------------------------------------------


def jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if isinstance(value, (list, tuple, set)):
            return [jsonable(v) for v in value]
        if isinstance(value, dict):
            return {str(k): jsonable(v) for k, v in value.items()}
        return repr(value)


def redact_argv(argv: List[str], secret_options: List[str]) -> List[str]:
    out, hide = [], False
    for a in argv:
        if hide:
            out.append("<redacted>")
            hide = False
            continue
        opt = a.split("=", 1)[0]
        if opt in secret_options:
            if "=" in a:
                out.append(opt + "=<redacted>")
            else:
                out.append(a)
                hide = True
            continue
        out.append(a)
    return out


def server_info(args: ServerArgs, version: str, cfg: Mapping[str, Any], argv: List[str],
                secret_options: List[str]) -> Dict[str, Any]:
    info: Dict[str, Any] = {k: jsonable(v) for k, v in args.redacted().items()}
    info["version"] = version
    info["tp_size"] = info.get("tp_size") or 1
    info["dp_size"] = info.get("dp_size") or 1
    info.update(speculative(info, version, cfg))
    for key in ("speculative_num_steps", "speculative_num_draft_tokens"):
        info.setdefault(key, None)
    info["disable_custom_all_reduce"] = bool(info.get("disable_custom_all_reduce"))
    info["enable_nccl_nvls"] = bool(info.get("enable_nccl_nvls"))
    info["attention_backend"] = info.get("attention_backend") or cfg["default_attention_backend"]
    if info.get("mem_fraction_static") is None:
        info["mem_fraction_static"] = cfg["default_mem_fraction_static"]
    if not info.get("served_model_name"):
        info["served_model_name"] = info.get("model_path")
    if info.get("context_length") is None:
        info["context_length"] = cfg["context_length"]
    if feature("cuda_graph_config", version, cfg):
        info["cuda_graph_config"] = cuda_graph_config(info, version, cfg)
    else:
        info["enable_piecewise_cuda_graph"] = bool(info.get("enable_piecewise_cuda_graph"))
    if feature("launch_command", version, cfg):
        words = ["python3", "-m", "sglang.launch_server"] + redact_argv(argv, secret_options)
        info["launch_command"] = " ".join(words)
    return info


def model_info(info: Mapping[str, Any], cfg: Mapping[str, Any]) -> Dict[str, Any]:
    return {
        "model_path": info.get("model_path"),
        "tokenizer_path": info.get("tokenizer_path") or info.get("model_path"),
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "has_image_understanding": is_multimodal(cfg),
        "has_audio_understanding": False,
        "model_type": cfg.get("model_type"),
        "architectures": architectures(cfg),
    }


# -- start-up validation (after the parser accepted the argv) -------------------


def startup_errors(info: Mapping[str, Any], version: str, cfg: Mapping[str, Any]) -> List[str]:
    """ValueErrors SGLang raises after parsing (server_args.py; arg_groups/model_hook.py in 0.5.23), approximated."""
    errors = []
    vk = version_key(version)
    if vk < (0, 5, 15) and info.get("language_only") and not info.get("encoder_urls"):
        errors.append("--language-only requires --encoder-urls (encoder disaggregation)")
    if vk >= (0, 5, 23) and info.get("language_model_only"):
        if not any(re.search(r"DeepseekV4|MuseGlimmer|Cosmos3", a) for a in architectures(cfg)):
            errors.append(
                "--language-model-only is not supported for architectures "
                + ", ".join(architectures(cfg))
            )
    tp = info.get("tp_size") or 1
    if not isinstance(tp, int) or tp < 1:
        errors.append(f"tp_size must be >= 1, got {tp!r}")
    nnodes, rank = info.get("nnodes") or 1, info.get("node_rank") or 0
    if isinstance(nnodes, int) and nnodes > 1:
        if not info.get("dist_init_addr"):
            errors.append("--dist-init-addr is required when --nnodes > 1 (rank 0's rendezvous HOST:PORT)")
        if isinstance(rank, int) and not 0 <= rank < nnodes:
            errors.append(f"node_rank {rank} is out of range for nnodes {nnodes}")
        if isinstance(tp, int) and tp % nnodes:
            errors.append(f"tp_size {tp} must be divisible by nnodes {nnodes}")
    return errors


def secret_option_strings(data: Mapping[str, Any]) -> List[str]:
    return sorted(o for o, s in data["options"].items() if SECRET_DEST.search(s["dest"]))


def warn(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
