"""Intents -> argv, spelled for one SGLang version.

Each intent is compiled by one function that knows, per version range, how
that version spells it, whether it can at all, and whether SGLang would refuse
it at start-up for this model (server_args.py; arg_groups/ in 0.5.23). What a version cannot
express becomes a warning with the reason and no flag: a flag the installed
version does not know makes the unit crash-loop.

Version boundaries are the releases the catalogs were built from; a version
between two of them takes the older row, and the catalog check after
compilation has the last word on every emitted option.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from sglang_deploy.plan.intents import INTENTS

if TYPE_CHECKING:
    from sglang_deploy.plan.catalog import Catalog
    from sglang_deploy.plan.profiles import ModelProfile


def parse_version(text: str) -> tuple[int, ...]:
    """The release numbers of a version string: '0.5.15.post1' -> (0, 5, 15)."""
    match = re.match(r"\d+(?:\.\d+)*", text)
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


V0_5_15 = (0, 5, 15)
V0_5_19 = (0, 5, 19)


class DialectError(ValueError):
    """An intent value the version's parser would refuse (e.g. not among its choices)."""

    def __init__(self, intent: str, message: str) -> None:
        self.intent = intent
        super().__init__(message)


@dataclass
class Compiled:
    argv: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    env_refs: dict[int, str] = field(default_factory=dict)


@dataclass
class Context:
    version: str
    v: tuple[int, ...]
    catalog: "Catalog"
    intents: Mapping[str, Any]
    model_path: str
    model: "ModelProfile | None"
    out: Compiled

    def emit(self, *words: str) -> None:
        self.out.argv.extend(words)

    def warn(self, text: str) -> None:
        self.out.warnings.append(text)

    def has(self, option: str) -> bool:
        return option in self.catalog.options

    @property
    def architecture(self) -> str | None:
        return self.model.architecture if self.model else None

    def model_fact(self, key: str) -> Any:
        return self.model.facts.get(key) if self.model else None

    def choice(self, intent: str, option: str, value: str) -> None:
        spec = self.catalog.options.get(option)
        if spec is None:
            self.warn(f"{intent}={value!r}: SGLang {self.version} has no {option}; not rendered")
            return
        if spec.choices is not None:
            normalized = value.upper() if spec.value_type == "upper" else value
            if normalized not in spec.choices:
                raise DialectError(intent, f"{value!r} is not accepted by SGLang {self.version} {option}; "
                                   f"choices: {', '.join(spec.choices)}")
        self.emit(option, value)


Compiler = Callable[[Context], None]


def _basic(ctx: Context) -> None:
    i = ctx.intents
    ctx.emit("--model-path", ctx.model_path)
    if i["served_model_name"]:
        ctx.emit("--served-model-name", i["served_model_name"])
    ctx.emit("--host", i["host"], "--port", str(i["port"]))
    ctx.emit("--tp-size", str(i["tp_size"]))
    if i["trust_remote_code"]:
        ctx.emit("--trust-remote-code")
    for intent, option in (("mem_fraction_static", "--mem-fraction-static"),
                           ("context_length", "--context-length"),
                           ("chunked_prefill_size", "--chunked-prefill-size"),
                           ("max_running_requests", "--max-running-requests")):
        if i[intent] is not None:
            ctx.emit(option, f"{i[intent]:g}" if isinstance(i[intent], float) else str(i[intent]))
    if i["kv_cache_dtype"] != "auto":
        ctx.choice("kv_cache_dtype", "--kv-cache-dtype", i["kv_cache_dtype"])
    if i["quantization"]:
        ctx.choice("quantization", "--quantization", i["quantization"])
    if i["attention_backend"]:
        ctx.choice("attention_backend", "--attention-backend", i["attention_backend"])
    for intent, option in (("reasoning_parser", "--reasoning-parser"), ("tool_call_parser", "--tool-call-parser")):
        if i[intent]:
            ctx.choice(intent, option, i[intent])
    if i["enable_metrics"]:
        ctx.emit("--enable-metrics")
    if i["log_level"] != "info":
        ctx.emit("--log-level", i["log_level"])


def _parallel(ctx: Context) -> None:
    i = ctx.intents
    if i["nnodes"] > 1:
        # One instance over several hosts: the same argv on each but the rank; rank 0 hosts the
        # rendezvous (torch.distributed TCP store) at --dist-init-addr.
        ctx.emit("--nnodes", str(i["nnodes"]), "--node-rank", str(i["node_rank"]),
                 "--dist-init-addr", str(i["dist_init_addr"]))
    dp, replicas = i["attn_dp_size"], i.get("dp_size", 1)
    if dp > 1:
        if ctx.has("--attn-dp-size"):
            ctx.emit("--attn-dp-size", str(dp))
        elif replicas > 1:
            raise DialectError("dp_size", f"dp_size {replicas} with attn_dp_size {dp}: SGLang {ctx.version} spells "
                               "both as --dp-size (replicas and attention DP are separate only from 0.5.23, "
                               "--attn-dp-size)")
        else:
            # Before 0.5.23 data-parallel attention is a switch plus the DP size.
            ctx.emit("--enable-dp-attention", "--dp-size", str(dp))
    if replicas > 1:
        # Replicas of the model in one server, each over tp_size GPUs: --dp-size in every supported
        # version (0.5.9 stores it as data_parallel_size; world size dp x tp, 0.5.23 server_args.py
        # compute_world_size; managers/data_parallel_controller.py places them).
        ctx.emit("--dp-size", str(replicas))
    if i["ep_size"] > 1:
        # --ep-size in every supported version (0.5.9 stores it as expert_parallel_size, later
        # releases as ep_size); the default MoE all-to-all backend ("none") needs nothing more.
        ctx.emit("--ep-size", str(i["ep_size"]))


def _communication(ctx: Context) -> None:
    i = ctx.intents
    if not i["custom_all_reduce"]:
        ctx.emit("--disable-custom-all-reduce")
    if i["p2p_check"]:
        ctx.emit("--enable-p2p-check")
    if i["nvls"]:
        ctx.emit("--enable-nccl-nvls")


def _cuda_graphs(ctx: Context) -> None:
    i = ctx.intents
    if not i["cuda_graph"]:
        ctx.emit("--disable-cuda-graph")
    bs = i["cuda_graph_max_bs_decode"]
    if bs is not None:
        # 0.5.15 split decode/prefill graph sizes; from 0.5.23 the old spelling is an
        # ambiguous prefix of both and argparse refuses it.
        ctx.emit("--cuda-graph-max-bs-decode" if ctx.v >= V0_5_15 else "--cuda-graph-max-bs", str(bs))
    _prefill_graph(ctx)


def _auto_disables_prefill_graph(ctx: Context) -> bool:
    """Whether this SGLang version turns the prefill graph off by itself for this model.

    0.5.9: the graph is opt-in and nothing turns it off for being multimodal.
    0.5.15: any multimodal model loses it unless a backend is given explicitly.
    0.5.19+: multimodal models lose it unless on an allowlist
    (configs/model_config.py), which the model profile records.
    A text-only override (language_model_only) makes the model non-multimodal.
    """
    if ctx.v < V0_5_15 or not ctx.model_fact("multimodal") or _text_only_route(ctx) is not None:
        return False
    if ctx.v >= V0_5_19:
        return not _since(ctx, "prefill_graph_allowlisted_from")
    return True


def _since(ctx: Context, fact: str) -> bool:
    """A model fact that lists the first SGLang version where something holds."""
    first = ctx.model_fact(fact)
    return first is not None and ctx.v >= parse_version(str(first))


def _prefill_graph(ctx: Context) -> None:
    want = ctx.intents["prefill_cuda_graph"]
    if not ctx.intents["cuda_graph"] and want != "off":
        return
    arch = ctx.architecture or "this model"
    if ctx.v < V0_5_15:
        # Opt-in; no multimodal auto-disable exists in 0.5.9 (model_runner only skips it
        # for torch.compile, PP > 1, DeepEP/mooncake all-to-all and the draft worker).
        if want == "on":
            ctx.emit("--enable-piecewise-cuda-graph")
        return
    # 0.5.15+: an explicit backend skips every compatibility rule. breakable, not the
    # deprecated --enforce-piecewise-cuda-graph (= tc_piecewise, which EAGLE/NEXTN
    # targets skip at run time in 0.5.15).
    if want == "on":
        ctx.choice("prefill_cuda_graph", "--cuda-graph-backend-prefill", "breakable")
    elif want == "off":
        ctx.choice("prefill_cuda_graph", "--cuda-graph-backend-prefill", "disabled")
    elif _auto_disables_prefill_graph(ctx):
        ctx.warn(f"prefill_cuda_graph=default: SGLang {ctx.version} turns the prefill CUDA graph off for multimodal "
                 f"{arch}; set prefill_cuda_graph: on to keep it")


LANGUAGE_MODEL_ONLY_OVERRIDE = '{"language_model_only": true}'


def _text_only_route(ctx: Context) -> str | None:
    """How this version skips the vision tower of this model, if it can."""
    if not ctx.intents["text_only"] or not ctx.model_fact("multimodal"):
        return None
    if _since(ctx, "language_model_only_flag_from"):
        return "flag"
    if _since(ctx, "language_model_only_config_from"):
        return "config"
    return None


def _text_only(ctx: Context) -> None:
    if ctx.intents["enable_multimodal"]:
        if ctx.model_fact("multimodal"):
            ctx.emit("--enable-multimodal")  # every supported release (data/catalogs)
        else:
            ctx.warn("enable_multimodal=true on a text-only model: no vision tower to serve, no flag")
    if not ctx.intents["text_only"]:
        return
    arch = ctx.architecture or "this model"
    if not ctx.model_fact("multimodal"):
        ctx.warn("text_only=true on a text-only model: nothing to skip, no flag")
        return
    route = _text_only_route(ctx)
    if route == "flag":
        ctx.emit("--language-model-only")
    elif route == "config":
        # The model's config carries `language_model_only`; SGLang then builds no vision
        # tower (visual = None), treats the model as text-only and skips vision weights.
        # --language-model-only itself raises ValueError for this architecture.
        ctx.emit("--json-model-override-args", LANGUAGE_MODEL_ONLY_OVERRIDE)
    elif ctx.v < V0_5_15:
        ctx.warn(f"text_only: SGLang {ctx.version} cannot skip the vision tower of {arch}: its --language-only is "
                 "encoder disaggregation and raises ValueError without --encoder-urls, and --language-model-only "
                 "does not exist yet; not rendered")
    else:
        ctx.warn(f"text_only: SGLang {ctx.version} cannot skip the vision tower of {arch}: --language-only puts the "
                 "server in encoder-disaggregation mode and still loads the vision tower, and --language-model-only "
                 "is missing or refuses this architecture; not rendered")


def _mamba_cache(ctx: Context) -> None:
    strategy = ctx.intents["mamba_cache_strategy"]
    if strategy == "default":
        return
    if not ctx.model_fact("hybrid_attention"):
        ctx.warn(f"mamba_cache_strategy={strategy}: the model has no linear-attention (mamba) layers; not rendered")
        return
    option = "--mamba-radix-cache-strategy" if ctx.v >= V0_5_15 else "--mamba-scheduler-strategy"
    ctx.choice("mamba_cache_strategy", option, strategy)


def _single_batch_overlap(ctx: Context) -> None:
    if ctx.intents["single_batch_overlap"]:
        ctx.emit("--enable-single-batch-overlap")


def _speculative(ctx: Context) -> None:
    i = ctx.intents
    algo = i["speculative_algorithm"]
    if algo is None:
        return
    ctx.choice("speculative_algorithm", "--speculative-algorithm", algo)
    for intent, option in (("speculative_num_steps", "--speculative-num-steps"),
                           ("speculative_eagle_topk", "--speculative-eagle-topk"),
                           ("speculative_num_draft_tokens", "--speculative-num-draft-tokens")):
        if i[intent] is not None:
            ctx.emit(option, str(i[intent]))


def _disaggregation(ctx: Context) -> None:
    """A prefill or decode server of a disaggregated fleet. Every supported release spells the four
    options alike (data/catalogs); SGLang's own defaults are written out so that the gateway's
    registration and the unit say the same (the bootstrap port is a prefill server's only: the
    gateway sends it to the decode server with each request, sglang-router 0.3.2 PD mode)."""
    i = ctx.intents
    mode = i["disaggregation_mode"]
    if mode is None:
        for intent in ("disaggregation_transfer_backend", "disaggregation_bootstrap_port", "disaggregation_ib_device"):
            if i[intent] != INTENTS[intent].default:
                ctx.warn(f"{intent}={i[intent]!r} on a server that is neither prefill nor decode (no sglang_role): "
                         "not rendered")
        return
    ctx.choice("disaggregation_mode", "--disaggregation-mode", mode)
    ctx.choice("disaggregation_transfer_backend", "--disaggregation-transfer-backend",
               i["disaggregation_transfer_backend"])
    if mode == "prefill":
        if i["disaggregation_bootstrap_port"] == i["port"]:
            raise DialectError("disaggregation_bootstrap_port", f"{i['port']} is also the server's HTTP port: a "
                               "prefill server's bootstrap server listens on a port of its own")
        ctx.emit("--disaggregation-bootstrap-port", str(i["disaggregation_bootstrap_port"]))
    if i["disaggregation_ib_device"] is not None:
        if i["disaggregation_transfer_backend"] == "mooncake_tcp":
            ctx.warn("disaggregation_ib_device with mooncake_tcp: SGLang drops the RDMA device for the TCP "
                     "transport (0.5.23 arg_groups/pd_disaggregation_hook.py handle_pd_disaggregation); not rendered")
        else:
            ctx.emit("--disaggregation-ib-device", i["disaggregation_ib_device"])


COMPILERS: tuple[Compiler, ...] = (
    _basic, _parallel, _communication, _cuda_graphs, _text_only, _mamba_cache, _single_batch_overlap, _speculative,
    _disaggregation,
)


def compile_intents(
    version: str,
    catalog: "Catalog",
    intents: Mapping[str, Any],
    model_path: str,
    model: "ModelProfile | None",
    api_key: bool = False,
) -> Compiled:
    out = Compiled()
    ctx = Context(version=version, v=parse_version(version), catalog=catalog, intents=intents,
                  model_path=model_path, model=model, out=out)
    for compiler in COMPILERS:
        compiler(ctx)
    if api_key:
        # The key itself stays in the root-only env file; systemd substitutes it at start.
        ctx.emit("--api-key", "${SGLANG_API_KEY}")
        out.env_refs[len(out.argv) - 1] = "SGLANG_API_KEY"
    return out
