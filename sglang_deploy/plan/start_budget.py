"""How long a restarted server may take to become ready before the gate calls it "never ready":
the start budget, derived from the plan, then from the host's own recorded starts. Pure: the
deploy reads the host's history, whether the version's compile caches hold anything and the
disk under the weights (``sglang_deploy/deploy/facts.StartHistory``), and passes them in.

A start is the phases ``sglang_deploy.downtime`` records: the process start, the weights' read,
the KV cache, the CUDA graph capture (with the kernels compiled at the first forward passes when
the caches are cold), the warm-up request. Without a recorded start of the same SGLang version,
model and GPUs, each phase gets an allowance (``derive``); with one, the host's slowest recent
start sets it (``from_history``), and a cold cache still adds the compile; without one of its
own, a rollout's host that takes the compile caches of the first host of its class gets that
host's start (``choose``, ``seeded``). The inventory's ``sglang_gate.ready_timeout_s`` (or
``sglang_timeout_start_s``) overrides them all.

The allowances are this deploy's own, stated as such; none is a figure a release publishes,
except DeepGEMM's: SGLang logs "It may take a long time (typically 10-20 mins)" when it enters
its JIT pre-compile (``srt/layers/deep_gemm_wrapper/compile_utils.py``,
``_maybe_compile_deep_gemm_one_type_all``, 0.5.9 to 0.5.23), and turns DeepGEMM on for compute
capability 9.0 and above (``deep_gemm_wrapper/configurer.py``, ``_compute_enable_deep_gemm``;
for SM120 only where the installed DeepGEMM has its SM120 kernels: counted, since a budget that
errs long only waits longer for a hang). Every allowance errs long: a too-short budget rolls a
healthy start back, a too-long one only finds a hung start later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from sglang_deploy.plan import perf

MIB = 1 << 20

#: Process start: Python, torch and SGLang imports, the scheduler processes, torch.distributed and
#: NCCL set-up; a multi-node group also waits for its members at the rendezvous.
PROCESS_S = 120
RENDEZVOUS_S = 120
#: Reading the weights, by the class of the disk that holds them (``disk_class``: the filesystem
#: and the block devices under it, as the host reports them), each below what such a disk
#: sustains, since SGLang's ranks read their shards in parallel and not always in order: a PCIe
#: NVMe SSD reads 2 to 7 GB/s, a SATA SSD up to its link's 600 MB/s, a hard disk 100 to 250 MB/s,
#: a network filesystem what its network and server give. "unknown" (an overlay, a device the
#: host does not say) is a SATA SSD's half. Weights SGLang downloads itself at start
#: (``sglang_weights_source: server``) at a modest network rate.
DISK_READ_BYTES_S = {"nvme": 1024 * MIB, "ssd": 400 * MIB, "hdd": 100 * MIB, "network": 100 * MIB,
                     "memory": 2048 * MIB, "unknown": 200 * MIB}
DOWNLOAD_BYTES_S = 50 * MIB
NETWORK_FS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs",
                        "9p", "virtiofs", "cephfs", "wekafs"})
MEMORY_FS = frozenset({"tmpfs", "ramfs"})
#: KV cache: SGLang profiles the free memory and allocates the pool.
KV_CACHE_S = 60
#: One graph capture (decode; prefill/piecewise where planned; each again for a draft model).
GRAPH_CAPTURE_S = 120
#: Kernels compiled at the first forward passes when the version's caches are cold: FlashInfer's
#: JIT and autotune, Triton and torch inductor (every version); DeepGEMM's pre-compile (above);
#: ``--enable-torch-compile``.
JIT_COLD_S = 300
DEEPGEMM_COLD_S = 20 * 60
TORCH_COMPILE_COLD_S = 15 * 60
#: The warm-up request SGLang sends itself before it says it is ready (srt/entrypoints/http_server.py,
#: _wait_and_warmup).
WARMUP_S = 60
#: From history: the slowest of the newest recorded starts, times this, never under MIN_S.
HISTORY_STARTS = 5
HISTORY_FACTOR = 3
MIN_S = 60
#: A bound on what the budget can be (a day): a setting above it is refused by the spec's checks.
MAX_S = 86400


@dataclass(frozen=True)
class Part:
    name: str
    seconds: int
    why: str


@dataclass(frozen=True)
class StartBudget:
    """The ready timeout and what it is made of. ``basis``: derived | history | class | inventory | profile."""

    total_s: float
    basis: str
    parts: tuple[Part, ...]
    caches: str  # "warm", "cold", "unknown" or "seeded" (the version's compile caches on the host)

    def line(self) -> str:
        made = ", ".join(f"{p.name} {p.seconds}" for p in self.parts)
        return f"{self.total_s:g} s ({self.basis}: {made})"

    def lines(self) -> list[str]:
        return [f"{p.name:<14} {p.seconds:>6} s  {p.why}" for p in self.parts]

    def as_dict(self) -> dict[str, Any]:
        return {"total_s": self.total_s, "basis": self.basis, "caches": self.caches,
                "parts": [{"name": p.name, "seconds": p.seconds, "why": p.why} for p in self.parts]}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def _round_up(seconds: float, step: int = 30) -> int:
    return int(min(MAX_S, max(MIN_S, -(-int(round(seconds)) // step) * step)))


def _intent(plan: Any, name: str) -> Any:
    r = plan.intents.get(name)
    return None if r is None else r.value


def deepgemm_compiles(plan: Any) -> bool:
    """Whether SGLang's DeepGEMM JIT runs for this plan: block-wise FP8 weights (what DeepGEMM's
    GEMMs serve) on compute capability 9.0 or above."""
    facts = plan.facts
    q = facts.quantization if facts is not None else None
    if q is None or q.weight_block_size is None or "fp8" not in q.method.lower():
        return False
    major = _version(str(plan.gpus.compute_capability))[:1]
    return bool(major) and major[0] >= 9


def graph_captures(plan: Any) -> list[str]:
    """The CUDA graph captures the plan's server does at start."""
    if _intent(plan, "cuda_graph") is False:
        return []
    out = ["decode"]
    prefill = _intent(plan, "prefill_cuda_graph")
    # On by default from 0.5.15 (srt/model_executor/model_runner.py in 0.5.15, cuda_graph_setup.py
    # from 0.5.19: capture_prefill_graph), opt-in in 0.5.9 (--enable-piecewise-cuda-graph).
    if prefill == "on" or (prefill != "off" and _version(plan.sglang_version) >= (0, 5, 15)):
        out.append("prefill")
    if _intent(plan, "speculative_algorithm"):
        out += [f"draft {c}" for c in out]
    return out


def weights_bytes(plan: Any) -> tuple[int, str] | None:
    """The checkpoint's size: its own (the index or the safetensors headers), else its parameters
    counted from config.json at its dtype's or quantization's bytes (plan/perf.py, model_cost)."""
    facts = plan.facts
    if facts is None:
        return None
    if facts.total_weight_bytes:
        return int(facts.total_weight_bytes), ""
    try:
        cost = perf.model_cost(facts)
    except (ArithmeticError, KeyError, TypeError, ValueError):
        return None
    size = int(cost.total_params * cost.bytes_per_param)
    return (size, f" (estimated: {cost.total_params / 1e9:.1f}B parameters at {cost.bytes_per_param:.2f} B each)") \
        if size > 0 else None


def _weights_part(plan: Any, disk: str) -> Part | None:
    known = weights_bytes(plan)
    if known is None:
        return None
    size, estimated = known
    weights = plan.weights
    if weights is not None and weights.source == "server":
        rate, how = DOWNLOAD_BYTES_S, f"downloaded by SGLang at start at {DOWNLOAD_BYTES_S // MIB} MiB/s"
    else:
        rate = DISK_READ_BYTES_S.get(disk, DISK_READ_BYTES_S["unknown"])
        how = f"read at {rate // MIB} MiB/s ({disk} disk)" if disk != "unknown" else \
            f"read at {rate // MIB} MiB/s (disk class unknown)"
    return Part("weights", int(-(-size // rate)), f"{size / (1 << 30):.1f} GiB of weights{estimated} {how}")


def _jit_parts(plan: Any) -> list[Part]:
    parts = [Part("kernel JIT", JIT_COLD_S, "FlashInfer, Triton and inductor kernels compiled into cold caches")]
    if deepgemm_compiles(plan):
        parts.append(Part("DeepGEMM JIT", DEEPGEMM_COLD_S,
                          f"block-wise FP8 on SM{plan.gpus.compute_capability.replace('.', '')}: SGLang's DeepGEMM "
                          "pre-compile, \"typically 10-20 mins\" by its own log, in the first start (the deploy "
                          "does not run `python -m sglang.compile_deep_gemm` beforehand: that compile holds the same "
                          "GPUs; a rollout's later hosts of the class take the first one's caches)"))
    if "--enable-torch-compile" in plan.argv:
        parts.append(Part("torch.compile", TORCH_COMPILE_COLD_S, "--enable-torch-compile into a cold inductor cache"))
    return parts


def derive(plan: Any, caches: str = "unknown", disk: str = "unknown") -> StartBudget:
    """The budget from the plan alone: each phase's allowance (the module's docstring). ``caches``:
    "warm" leaves the kernel compile out; "cold" or "unknown" count it. A plan without the
    checkpoint's size or shapes falls back to the unit's start timeout (the model profile's)."""
    weights = _weights_part(plan, disk)
    if weights is None:
        return StartBudget(int(plan.timeout_start_s), "profile", (
            Part("start timeout", int(plan.timeout_start_s), "no checkpoint size to derive from: the unit's "
                 "TimeoutStartSec (sglang_timeout_start_s, else the model profile's)"),), caches)
    node = plan.tp_node
    parts = [Part("process", PROCESS_S, "imports, scheduler processes, torch.distributed and NCCL set-up")]
    if node is not None and node.nnodes > 1:
        parts.append(Part("rendezvous", RENDEZVOUS_S, f"{node.nnodes} nodes meeting at rank 0"))
    parts += [weights, Part("KV cache", KV_CACHE_S, "memory profiling and the KV pool")]
    captures = graph_captures(plan)
    if captures:
        parts.append(Part("CUDA graphs", GRAPH_CAPTURE_S * len(captures),
                          f"{len(captures)} capture(s) ({', '.join(captures)}) at {GRAPH_CAPTURE_S} s each"))
    if caches != "warm":
        parts += _jit_parts(plan)
    parts.append(Part("warm-up", WARMUP_S, "SGLang's own warm-up request"))
    return StartBudget(_round_up(sum(p.seconds for p in parts)), "derived", tuple(parts), caches)


def recorded_starts(entries: Iterable[Mapping[str, Any]], plan: Any, hardware: str) -> list[float]:
    """Seconds from process start to ready of the newest recorded starts of this SGLang version,
    model and hardware (the history's gate lines, oldest first), newest last, at most HISTORY_STARTS."""
    out: list[float] = []
    for e in entries:
        if not isinstance(e, Mapping) or e.get("sglang_version") != plan.sglang_version:
            continue
        summary, down = e.get("plan"), e.get("downtime")
        if not isinstance(summary, Mapping) or not isinstance(down, Mapping):
            continue
        if summary.get("model") != plan.model_path or summary.get("hardware") != hardware:
            continue
        start = down.get("start_s")
        if isinstance(start, (int, float)) and not isinstance(start, bool) and 0 < start < MAX_S:
            out.append(float(start))
    return out[-HISTORY_STARTS:]


def from_history(plan: Any, starts: Sequence[float], caches: str, disk: str = "unknown") -> StartBudget:
    """The budget from the host's own starts (``recorded_starts``) when there are any, else ``derive``."""
    if not starts:
        return derive(plan, caches, disk)
    slowest = max(starts)
    parts = [Part("history", int(-(-slowest * HISTORY_FACTOR // 1)),
                  f"{HISTORY_FACTOR}x the slowest of this host's last {len(starts)} start(s) of this version and "
                  f"model ({slowest:.0f} s)")]
    if caches != "warm":
        parts += _jit_parts(plan)
    return StartBudget(_round_up(sum(p.seconds for p in parts)), "history", tuple(parts), caches)


def given(seconds: float, setting: str, caches: str = "unknown") -> StartBudget:
    """The inventory's own ready timeout."""
    return StartBudget(float(seconds), "inventory", (Part("inventory", int(seconds), f"set by {setting}"),), caches)


def choose(plan: Any, ready_timeout_s: float | None, timeout_start_s: float | None,
           entries: Iterable[Mapping[str, Any]], caches: str, hardware: str, disk: str = "unknown",
           seeded: tuple[str, float] | None = None) -> StartBudget:
    """One host's budget: the inventory's ``sglang_gate.ready_timeout_s``, else its
    ``sglang_timeout_start_s``, else the host's recorded starts, else the plan's phases. A cache
    directory that holds something counts as warm only where a start of this version and model
    is recorded: the directory is the version's, and may hold only other models' kernels."""
    if ready_timeout_s is not None:
        return given(ready_timeout_s, "sglang_gate.ready_timeout_s", caches)
    if timeout_start_s is not None:
        return given(timeout_start_s, "sglang_timeout_start_s", caches)
    starts = recorded_starts(entries, plan, hardware)
    if not starts and seeded is not None:
        # A rollout's later host of a class takes the first one's caches before its stop
        # (lifecycle/cache_seed.py): that host's start, which compiled them, is this one's history. It
        # covers this start whether the seed arrives or not (a seed that does not starts cold, as that
        # one did).
        source, start = seeded
        part = Part("class's start", int(-(-start * HISTORY_FACTOR // 1)),
                    f"{HISTORY_FACTOR}x the start of {source} ({start:.0f} s), the first host of this class in "
                    "the rollout, whose compile caches this host takes")
        return StartBudget(_round_up(part.seconds), "class", (part,), "seeded")
    if caches == "warm" and not starts:
        caches = "unknown"
    return from_history(plan, starts, caches, disk)


def weights_dir(plan: Any) -> str | None:
    """The directory SGLang reads the weights from on the host, for its disk's class: the store
    the deploy stages into, a path on the host; None where SGLang downloads them at start or the
    model is named by a Hub id (its cache is wherever the service user's home puts it)."""
    w = plan.weights
    if w is not None:
        if w.source == "server":
            return None
        return str(w.snapshot_dir if w.source == "host" else w.store)
    return str(plan.model_path) if str(plan.model_path).startswith("/") else None


def disk_class(fstype: str, devices: Iterable[Mapping[str, str]]) -> str:
    """The class of the disk under a path: its filesystem type (``findmnt -T``) and the block
    devices it sits on, the device first and what it is built from after (``lsblk -s -P``: NAME,
    TRAN, ROTA, TYPE). Any rotational device makes it "hdd" (an array is as slow as its disks),
    an NVMe transport or device name "nvme", else a non-rotational disk "ssd"."""
    fs = fstype.strip().lower()
    if fs in NETWORK_FS or fs.startswith("fuse.") or fs.startswith("nfs"):
        return "network"
    if fs in MEMORY_FS:
        return "memory"
    disks = [d for d in devices if isinstance(d, Mapping)]
    if not disks or fs in ("overlay", "aufs", ""):
        return "unknown"
    if any(d.get("ROTA") == "1" for d in disks):
        return "hdd"
    if any(d.get("TRAN") == "nvme" or str(d.get("NAME", "")).startswith("nvme") for d in disks):
        return "nvme"
    if all(d.get("ROTA") == "0" for d in disks):
        return "ssd"
    return "unknown"
