"""A performance model for the SIMULATED SGLang server: data in, timings out.

The behaviour file's ``performance`` object (and, on the controller, the YAML
form tests write, through ``sglang_deploy/simulator/perf_model.py``) says how
fast a configuration is, so that a tuner has something to find.  It is a
MODEL with planted numbers, not SGLang's performance.  Stdlib only; this file
is also loaded by file path (no package imports).

    model = load_model(mapping)             # ValueError naming the key on bad data
    model.startup_failure(args) -> str | None   # the lines SGLang prints when it cannot start
    model.crash_after_s(args) -> float | None   # a planted crash while serving
    model.request(args, active, prompt_tokens, rng, max_tokens=128)
        -> (ttft_s, decode_tok_s, accept_length)
    model.expected(args, concurrency, prompt_tokens, max_tokens)
        -> {"decode_tok_s", "output_tok_s", "ttft_s", "accept_length", "running"}

``args`` are SGLang ServerArgs dest names as the simulated server resolves
them (``resolve.server_info``): speculative_algorithm, speculative_num_steps,
speculative_eagle_topk, speculative_num_draft_tokens, mem_fraction_static,
cuda_graph_max_bs (or cuda_graph_max_bs_decode, or cuda_graph_config.decode.max_bs),
chunked_prefill_size, max_running_requests, disable_custom_all_reduce, tp_size,
cuda_graph_config.prefill.backend (0.5.15+) or enable_piecewise_cuda_graph (0.5.9).

Every key has a default under which it has no effect (see KEYS).  The model:

* Speculative decoding (``accept_alpha`` set): each draft token is accepted
  with probability alpha; with top-k k the chance that a tree level holds the
  right token is p = 1 - (1 - alpha)^k.  Expected tokens per verify step:
  sum_{i=0..d} p^i with depth d = min(steps, draft_tokens - 1) (chain, k = 1).
  With k > 1 the draft_tokens - 1 tree nodes fill the levels in order, k per
  level (the last one may get fewer; levels past the budget are not drafted).
  With accept_decay < 1 the level-i acceptance is alpha * accept_decay^i
  (the sum of the running products of the per-level chances).  One verify
  step costs 1 + draft_step_cost * steps + verify_token_cost * draft_tokens base
  steps, so the single-stream rate is decode_tok_s * E / cost: more steps
  accept more but cost more (an interior optimum where the data plants one).
* Batching: at batch b each step costs (1 + batch_slowdown * (b - 1)) steps,
  times over_graph_bs_factor when b exceeds the CUDA-graph batch size.  Batch
  b is the requests in flight, capped by max_running_requests and by the KV
  cache (kv_tokens_per_fraction * (mem_fraction_static - weights_fraction)
  tokens, each request holding prompt + max_tokens); the others wait, and
  their TTFT grows by the service time of the requests ahead of them.
* TTFT: ttft_s + prompt_tokens / prefill_tok_s + chunk_overhead_s per
  chunked_prefill_size chunk, times prefill_graph_ttft_factor when the prefill
  CUDA graph is on.
* custom all-reduce off at tp_size > 1: each step costs
  no_custom_allreduce_factor times more.
* Start: mem_fraction_static above oom_above_mem_fraction (lowered by
  graph_mem_fraction_per_bs per CUDA-graph batch size) fails with torch's
  CUDA out of memory during CUDA graph capture; at or below weights_fraction
  (or below mem_fraction_floor) with "Not enough memory".
* crash_when: a list of partial arg mappings; a config matching one of them
  crashes crash_after_s after start (0: at start).
* noise_sigma: each request's decode rate and TTFT are multiplied by
  exp(N(0, sigma)) draws from the rng the caller passes (seeded by noise_seed).
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _opt(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


_POS = (lambda v: _number(v) and v > 0, "a number > 0")
_NONNEG = (lambda v: _number(v) and v >= 0, "a number >= 0")
_GE1 = (lambda v: _number(v) and v >= 1, "a number >= 1")
_FRACTION = (lambda v: _number(v) and 0 <= v <= 1, "a number in [0, 1]")
_UNIT = (lambda v: _number(v) and 0 < v <= 1, "a number in (0, 1]")


def _nullable(spec: Tuple[Callable[[Any], bool], str]) -> Tuple[Callable[[Any], bool], str]:
    return _opt(spec[0]), spec[1] + " or null"


def _crash_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(m, dict) and m and all(isinstance(k, str) for k in m)
                                       for m in v)


#: key: (default, (check, what it must be), meaning).  Each default is neutral.
KEYS: Dict[str, Tuple[Any, Tuple[Callable[[Any], bool], str], str]] = {
    "decode_tok_s": (50.0, _POS, "single-stream decode rate without speculative decoding (tokens/s)"),
    "ttft_s": (0.05, _NONNEG, "fixed part of the time to first token"),
    "prefill_tok_s": (None, _nullable(_POS), "TTFT grows by prompt tokens / this (null: no growth)"),
    "chunk_overhead_s": (0.0, _NONNEG, "TTFT grows by this per chunked_prefill_size chunk of the prompt"),
    "prefill_graph_ttft_factor": (1.0, _UNIT, "TTFT is multiplied by this when the prefill CUDA graph is on"),
    "accept_length": (None, _nullable(_GE1), "without accept_alpha: the mean accept length reported "
                      "(null: min(draft tokens, 1 + steps / 2)); no effect on the rate"),
    "accept_alpha": (None, _nullable(_FRACTION), "per-draft-token acceptance probability (null: "
                     "speculative decoding does not change the rate)"),
    "accept_decay": (1.0, _UNIT, "the acceptance probability at draft depth i is accept_alpha * "
                     "accept_decay^i (1: the same at every depth)"),
    "draft_step_cost": (0.0, _NONNEG, "fraction of a base step each draft step costs"),
    "verify_token_cost": (0.0, _NONNEG, "fraction of a base step each verified draft token costs"),
    "batch_slowdown": (0.0, _NONNEG, "each further request in the batch makes a step this fraction slower"),
    "default_cuda_graph_max_bs": (None, _nullable((lambda v: isinstance(v, int) and not isinstance(v, bool)
                                                   and v >= 1, "an integer >= 1")),
                                  "CUDA-graph batch size when the args set none (null: no limit)"),
    "over_graph_bs_factor": (1.0, _GE1, "a step costs this many times more above the CUDA-graph batch size"),
    "kv_tokens_per_fraction": (None, _nullable(_POS), "KV-cache tokens per unit of mem_fraction_static "
                               "above weights_fraction (null: unlimited)"),
    "weights_fraction": (0.0, _FRACTION, "part of GPU memory the weights take; mem_fraction_static at or "
                         "below it cannot start (Not enough memory)"),
    "mem_fraction_floor": (None, _nullable(_FRACTION), "mem_fraction_static below this cannot start "
                           "(Not enough memory)"),
    "oom_above_mem_fraction": (None, _nullable(_FRACTION), "mem_fraction_static above this fails with "
                               "CUDA out of memory during CUDA graph capture"),
    "graph_mem_fraction_per_bs": (0.0, _NONNEG, "oom_above_mem_fraction is lowered by this per unit of "
                                  "the CUDA-graph batch size"),
    "no_custom_allreduce_factor": (1.0, _GE1, "a step costs this many times more with custom all-reduce "
                                   "off at tp_size > 1"),
    "crash_when": ([], (_crash_list, "a list of non-empty mappings of ServerArgs names to values"),
                   "configs matching one of these crash after start"),
    "crash_after_s": (5.0, _NONNEG, "when a crash_when config crashes, seconds after start (0: at start)"),
    "noise_sigma": (0.0, _NONNEG, "sigma of the per-request multiplicative log-normal noise"),
    "noise_seed": (0, (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
                   "seed of the noise draws"),
}

#: SGLang's hint after a failed CUDA graph capture (python/sglang/srt/model_executor/cuda_graph_runner.py,
#: CUDA_GRAPH_CAPTURE_FAILED_MSG, raised from CudaGraphRunner.__init__ as
#: ``Exception(f"Capture cuda graph failed: {e}\n{CUDA_GRAPH_CAPTURE_FAILED_MSG}")``).
_CAPTURE_HINT = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set {max_bs_flag} to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by {disable_flag}. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)

#: python/sglang/srt/model_executor/model_runner.py, ModelRunner.init_memory_pool (the KV pool
#: size is <= 0; later releases raise it from model_runner_kv_cache_mixin.py with the same words).
NOT_ENOUGH_MEMORY = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."


def _get(args: Mapping[str, Any], *path: str) -> Any:
    cur: Any = args
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def _int_or(v: Any, default: Optional[int]) -> Optional[int]:
    if isinstance(v, bool) or v is None:
        return default
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _same(want: Any, got: Any) -> bool:
    if isinstance(want, str) and isinstance(got, str):
        return want.lower() == got.lower()
    if isinstance(want, bool) or isinstance(got, bool):
        return want is got or (want is False and got is None)
    if _number(want) and _number(got):
        return math.isclose(float(want), float(got), rel_tol=1e-9, abs_tol=1e-12)
    return bool(want == got)


def _lognormal(rng: Any, sigma: float) -> float:
    return math.exp(rng.gauss(0.0, sigma)) if sigma > 0 else 1.0


class PerfModel:
    def __init__(self, values: Mapping[str, Any]):
        self.v: Dict[str, Any] = dict(values)

    def __repr__(self) -> str:
        return f"PerfModel({self.v!r})"

    def rng(self) -> random.Random:
        """The noise source the server keeps: one per process, seeded by noise_seed."""
        return random.Random(int(self.v["noise_seed"]))

    # -- what the args say ----------------------------------------------------------

    @staticmethod
    def speculative(args: Mapping[str, Any]) -> Optional[Tuple[int, int, int]]:
        """(steps, topk, draft tokens) as SGLang resolves them; None without speculative decoding."""
        alg = args.get("speculative_algorithm")
        if not alg:
            return None
        draft = _int_or(args.get("speculative_num_draft_tokens"), 4) or 4
        if str(alg).upper() == "NGRAM":
            return max(draft - 1, 0), 1, draft
        steps = _int_or(args.get("speculative_num_steps"), 3) or 0
        topk = max(1, _int_or(args.get("speculative_eagle_topk"), 1) or 1)
        if topk == 1:  # server_args.py _handle_speculative_decoding: topk 1 forces steps + 1
            draft = steps + 1
        return steps, topk, draft

    @staticmethod
    def graph_max_bs(args: Mapping[str, Any]) -> Optional[int]:
        for v in (args.get("cuda_graph_max_bs"), args.get("cuda_graph_max_bs_decode"),
                  _get(args, "cuda_graph_config", "decode", "max_bs")):
            n = _int_or(v, None)
            if n is not None and n > 0:
                return n
        return None

    @staticmethod
    def prefill_graph_on(args: Mapping[str, Any]) -> bool:
        backend = _get(args, "cuda_graph_config", "prefill", "backend")
        if backend is not None:
            return str(backend) != "disabled"
        return bool(args.get("enable_piecewise_cuda_graph"))

    def _graph_bs(self, args: Mapping[str, Any]) -> Optional[int]:
        return self.graph_max_bs(args) or self.v["default_cuda_graph_max_bs"]

    def _mem(self, args: Mapping[str, Any]) -> Optional[float]:
        m = args.get("mem_fraction_static")
        return float(m) if _number(m) else None

    # -- start ----------------------------------------------------------------------

    def _matching_crash(self, args: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
        for rule in self.v["crash_when"]:
            if all(_same(want, args.get(key)) for key, want in rule.items()):
                return rule
        return None

    def oom_threshold(self, args: Mapping[str, Any]) -> Optional[float]:
        above = self.v["oom_above_mem_fraction"]
        if above is None:
            return None
        bs = self._graph_bs(args) or 0
        return float(above) - float(self.v["graph_mem_fraction_per_bs"]) * bs

    def startup_failure(self, args: Mapping[str, Any]) -> Optional[str]:
        """The lines SGLang prints on stderr before it exits 1 (None: it starts)."""
        mem = self._mem(args)
        if mem is not None:
            floor = self.v["mem_fraction_floor"]
            if (floor is not None and mem < floor) or (self.v["weights_fraction"] > 0
                                                       and mem <= self.v["weights_fraction"]):
                return NOT_ENOUGH_MEMORY + " (SIMULATED: performance model)"
            limit = self.oom_threshold(args)
            if limit is not None and mem > limit:
                return self._capture_oom(args, mem, limit)
        rule = self._matching_crash(args)
        if rule is not None and float(self.v["crash_after_s"]) == 0:
            return self.crash_message(args)
        return None

    def _capture_oom(self, args: Mapping[str, Any], mem: float, limit: float) -> str:
        new_flags = "cuda_graph_max_bs_decode" in args or "cuda_graph_backend_decode" in args
        hint = _CAPTURE_HINT.format(
            max_bs_flag="--cuda-graph-max-bs-decode" if new_flags else "--cuda-graph-max-bs",
            disable_flag="--cuda-graph-backend-decode=disabled" if new_flags else "--disable-cuda-graph")
        over_gib = max(0.01, (mem - limit) * 48.0)
        return (
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate "
            f"{over_gib:.2f} GiB. GPU 0 has a total capacity of 47.41 GiB of which 0.00 B is free. "
            "Of the allocated memory 45.12 GiB is allocated by PyTorch, and 0.88 GiB is reserved by "
            "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
            "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html"
            "#environment-variables)\n" + hint
            + f"(SIMULATED: performance model, mem_fraction_static={mem:g} > {limit:g})"
        )

    def crash_message(self, args: Mapping[str, Any]) -> str:
        rule = self._matching_crash(args) or {}
        return ("Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "sglang/srt/managers/scheduler.py", line 2900, in run_scheduler_process\n'
                "    scheduler.event_loop_overlap()\n"
                "RuntimeError: CUDA error: an illegal memory access was encountered "
                f"(SIMULATED: performance model crash_when {rule!r})\n"
                "Received sigquit from a child process. It usually means the child failed.")

    def crash_after_s(self, args: Mapping[str, Any]) -> Optional[float]:
        if self._matching_crash(args) is None:
            return None
        return float(self.v["crash_after_s"])

    # -- speed ----------------------------------------------------------------------

    def accept_length(self, args: Mapping[str, Any]) -> Optional[float]:
        spec = self.speculative(args)
        if spec is None:
            return None
        steps, topk, draft = spec
        alpha = self.v["accept_alpha"]
        if alpha is None:
            given = self.v["accept_length"]
            length = given if given is not None else min(float(draft), 1.0 + steps / 2.0)
            return max(1.0, min(float(length), float(max(draft, 1))))
        total, reach, budget = 1.0, 1.0, draft - 1
        for i in range(steps):
            n = min(topk, budget)  # candidates at this level: the draft-token budget, level by level
            if n <= 0:
                break
            budget -= n
            a = float(alpha) * float(self.v["accept_decay"]) ** i
            reach *= 1.0 - (1.0 - a) ** n  # one of the n candidates at this level is right
            total += reach
        return total

    def single_stream_rate(self, args: Mapping[str, Any]) -> float:
        """Tokens/s of one request alone (no noise)."""
        rate = float(self.v["decode_tok_s"])
        if self.v["accept_alpha"] is not None:
            spec = self.speculative(args)
            if spec is not None:
                steps, _, draft = spec
                cost = 1.0 + self.v["draft_step_cost"] * steps + self.v["verify_token_cost"] * draft
                rate *= (self.accept_length(args) or 1.0) / cost
        tp = _int_or(args.get("tp_size"), 1) or 1
        if tp > 1 and args.get("disable_custom_all_reduce"):
            rate /= float(self.v["no_custom_allreduce_factor"])
        return rate

    def capacity(self, args: Mapping[str, Any], tokens_per_request: int) -> Optional[int]:
        """Requests that run at once (None: unlimited): max_running_requests and the KV cache."""
        cap = _int_or(args.get("max_running_requests"), None)
        cap = cap if cap is not None and cap > 0 else None
        per = self.v["kv_tokens_per_fraction"]
        mem = self._mem(args)
        if per is not None and mem is not None:
            tokens = round(float(per) * (mem - float(self.v["weights_fraction"])), 6)
            fits = max(1, int(tokens // max(1, tokens_per_request)))
            cap = fits if cap is None else min(cap, fits)
        return cap

    def batch_factor(self, args: Mapping[str, Any], batch: int) -> float:
        """How many times longer a step takes at this batch size than alone."""
        factor = 1.0 + float(self.v["batch_slowdown"]) * max(0, batch - 1)
        graph = self._graph_bs(args)
        if graph is not None and batch > graph:
            factor *= float(self.v["over_graph_bs_factor"])
        return factor

    def base_ttft(self, args: Mapping[str, Any], prompt_tokens: int) -> float:
        ttft = float(self.v["ttft_s"])
        if self.v["prefill_tok_s"]:
            ttft += prompt_tokens / float(self.v["prefill_tok_s"])
        if self.v["chunk_overhead_s"]:
            size = _int_or(args.get("chunked_prefill_size"), None)
            chunks = math.ceil(prompt_tokens / size) if size and size > 0 else 1
            ttft += max(1, chunks) * float(self.v["chunk_overhead_s"])
        if self.prefill_graph_on(args):
            ttft *= float(self.v["prefill_graph_ttft_factor"])
        return ttft

    def _service_s(self, args: Mapping[str, Any], prompt_tokens: int, max_tokens: int, batch: int) -> float:
        rate = self.single_stream_rate(args) / self.batch_factor(args, batch)
        return self.base_ttft(args, prompt_tokens) + max(0, max_tokens - 1) / rate

    def request(self, args: Mapping[str, Any], active: int, prompt_tokens: int, rng: Any,
                max_tokens: int = 128) -> Tuple[float, float, Optional[float]]:
        """(ttft_s, decode_tok_s, accept_length) of a request that arrives while ``active``
        others are in flight.  Noise draws come from ``rng`` only when noise_sigma > 0."""
        cap = self.capacity(args, prompt_tokens + max_tokens)
        in_flight = max(0, int(active)) + 1
        batch = in_flight if cap is None else min(in_flight, cap)
        rate = self.single_stream_rate(args) / self.batch_factor(args, batch)
        ttft = self.base_ttft(args, prompt_tokens)
        if cap is not None and in_flight > cap:
            ahead = in_flight - cap  # queued before this one, itself included
            ttft += math.ceil(ahead / cap) * self._service_s(args, prompt_tokens, max_tokens, cap)
        sigma = float(self.v["noise_sigma"])
        if sigma > 0:
            rate *= _lognormal(rng, sigma)
            ttft *= _lognormal(rng, sigma)
        return ttft, rate, self.accept_length(args)

    def expected(self, args: Mapping[str, Any], concurrency: int, prompt_tokens: int,
                 max_tokens: int) -> Dict[str, Any]:
        """Noise-free figures of a closed loop of ``concurrency`` clients: the per-stream
        decode rate, the aggregate output tokens/s, the mean TTFT (queueing included, by
        Little's law), the accept length."""
        concurrency = max(1, int(concurrency))
        cap = self.capacity(args, prompt_tokens + max_tokens)
        running = concurrency if cap is None else min(concurrency, cap)
        per_stream = self.single_stream_rate(args) / self.batch_factor(args, running)
        base_ttft = self.base_ttft(args, prompt_tokens)
        service = base_ttft + max(0, max_tokens - 1) / per_stream
        wait = (concurrency - running) / running * service
        return {
            "decode_tok_s": per_stream,
            "output_tok_s": running * max_tokens / service,
            "ttft_s": base_ttft + wait,
            "accept_length": self.accept_length(args),
            "running": running,
        }


def load_model(mapping: Optional[Mapping[str, Any]]) -> PerfModel:
    """A PerfModel from the ``performance`` mapping; ValueError naming the key on bad data."""
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, Mapping):
        raise ValueError(f"performance must be a mapping, got {type(mapping).__name__}")
    unknown = sorted(str(k) for k in mapping if k not in KEYS)
    if unknown:
        raise ValueError(f"performance: unknown key(s) {', '.join(unknown)} (known: {', '.join(KEYS)})")
    values: Dict[str, Any] = {}
    for key, (default, (check, want), _) in KEYS.items():
        value = mapping.get(key, default)
        if not check(value):
            raise ValueError(f"performance.{key} must be {want}, got {value!r}")
        values[key] = list(value) if isinstance(value, list) else value
    if values["mem_fraction_floor"] is not None and values["oom_above_mem_fraction"] is not None \
            and values["mem_fraction_floor"] >= values["oom_above_mem_fraction"]:
        raise ValueError("performance.mem_fraction_floor must be below performance.oom_above_mem_fraction")
    return PerfModel(values)


def describe(model: PerfModel) -> str:
    """The keys set away from their defaults, for the start-up banner."""
    parts: List[str] = []
    for key, (default, _, _) in KEYS.items():
        if model.v[key] != default:
            parts.append(f"{key}={model.v[key]!r}")
    return "performance model: " + (", ".join(parts) if parts else "neutral")
