"""A second opinion on a plan's speed: NVIDIA's aiconfigurator (the optional extra ``predict``,
``pip install -e '.[predict]'``; x86-64 only), asked for the plan's own layout at the gate's
workload. In the commands floor (the pure core, plan/, imports no third-party predictor), imported by
``plan --predict aiconfigurator`` and benchmarks/predict_aiconfigurator.py.

The machinery is the one ``aiconfigurator cli default`` runs for aggregated serving (aiconfigurator
0.12.0): ``sdk.task_v2.Task`` resolves the model, the system's perf database and the search space,
here pinned to one layout (tp, pp 1, dp, moe_tp, moe_ep, cp 1); ``sdk.perf_database
.get_database_view`` loads the database of one SGLang version; ``sdk.sweep.sweep_agg`` predicts it,
once per concurrency level with the batch capped at that level (its ``max_batch_size``) and no
TTFT/TPOT limit, so the best row is the level's own batch. Which SGLang data version: the plan's
when the tool has data for it, else the nearest the tool has (``perf_database.get_version_slots``:
"current", "previous", "next"), and the answer says which and why.

Everything the tool returns is untrusted data: each number must be finite, positive and below a
bound; the call runs in a worker thread bounded by a timeout; every failure is one line
(AicError), never a traceback.
"""

from __future__ import annotations

import io
import json
import logging
import math
import re
import threading
import warnings
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Mapping, Sequence, TextIO

from sglang_deploy.plan.predicted import LEVELS, OUTPUT_TOKENS, PROMPT_TOKENS

INSTALL_HINT = "aiconfigurator is not installed: pip install -e '.[predict]' (x86-64 only)"
#: The tool's system names for this project's GPU models (data/gpus.yaml names): the systems it ships
#: perf data for (aiconfigurator_core/systems/*.yaml in 0.12.0).
SYSTEMS = {"H200": "h200_sxm", "H100 80GB HBM3": "h100_sxm", "H100 PCIe": "h100_pcie", "B200": "b200_sxm",
           "A100-SXM4-80GB": "a100_sxm", "A100 80GB PCIe": "a100_pcie", "L40S": "l40s"}
#: Seconds one prediction may take (the database load is most of it: about 4 s per system on a laptop CPU).
TIMEOUT_S = 120.0
#: Bounds on an answer's figures: far above any GPU's (tok/s per GPU, per user, of a server) and any TTFT.
MAX_TOK_S = 1e7
MAX_MS = 1e8


class AicMissing(Exception):
    """The extra is not installed (one line: how to install it)."""


class AicError(Exception):
    """aiconfigurator could not answer, or answered nonsense (one line)."""


@dataclass(frozen=True)
class AicRequest:
    """One plan's layout and workload, as aiconfigurator is asked for it."""
    model: str               # Hugging Face id (the tool's bundled config of that name)
    gpu_model: str           # data/gpus.yaml name
    gpu_count: int           # GPUs of the host
    tp: int                  # GPUs per server (SGLang --tp-size)
    dp: int = 1              # servers / replicas of the host
    attn_dp: int = 1         # DP attention inside one server
    ep: int = 1              # expert parallel inside one server
    moe: bool = False
    sglang_version: str = ""
    isl: int = PROMPT_TOKENS
    osl: int = OUTPUT_TOKENS
    levels: tuple[int, ...] = LEVELS  # concurrent requests per server


@dataclass(frozen=True)
class AicLevel:
    concurrency: int         # requests per server
    batch_size: int          # the tool's bs
    tok_s_per_gpu: float
    tok_s_per_user: float
    ttft_ms: float
    output_tok_s: float      # all of the host's servers: the tool's tokens/s x replicas

    def as_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "batch_size": self.batch_size,
                "tok_s_per_gpu": round(self.tok_s_per_gpu, 2), "tok_s_per_user": round(self.tok_s_per_user, 2),
                "ttft_ms": round(self.ttft_ms, 2), "output_tok_s": round(self.output_tok_s, 2)}


@dataclass(frozen=True)
class AicPrediction:
    system: str
    sglang_data_version: str
    version_reason: str
    parallel: str            # the tool's layout string
    replicas: int
    levels: tuple[AicLevel, ...]
    tool_version: str

    def as_dict(self) -> dict[str, Any]:
        return {"tool": f"aiconfigurator {self.tool_version}", "system": self.system,
                "sglang_data_version": self.sglang_data_version, "version_reason": self.version_reason,
                "parallel": self.parallel, "replicas": self.replicas,
                "levels": {str(lv.concurrency): lv.as_dict() for lv in self.levels},
                "basis": "aiconfigurator's aggregated-serving model at the gate's workload, "
                         "no speculative decoding"}


def load_api() -> Any:
    """aiconfigurator's functions this module calls, imported now (not at import time)."""
    try:
        from importlib.metadata import version

        from aiconfigurator.sdk.perf_database import get_database_view, get_version_slots
        from aiconfigurator.sdk.sweep import sweep_agg
        from aiconfigurator.sdk.task_v2 import Task
    except ImportError:
        raise AicMissing(INSTALL_HINT) from None
    for name in ("aiconfigurator", "aiconfigurator_core"):  # its notices about fallback data: not ours to print
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        tool_version = version("aiconfigurator")
    except Exception:
        tool_version = "unknown"
    return SimpleNamespace(Task=Task, sweep_agg=sweep_agg, get_database_view=get_database_view,
                           get_version_slots=get_version_slots, version=tool_version)


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:4])


def choose_version(plan_version: str, slots: Any) -> tuple[str, str]:
    """(the tool's SGLang data version to use, why): the plan's when the tool has it, else the nearest."""
    if not isinstance(slots, Mapping) or not slots:
        raise AicError("aiconfigurator has no SGLang data for this system")
    versions = sorted({str(v) for v in slots.values() if isinstance(v, str) and re.fullmatch(r"[0-9][0-9.a-z]*", v)},
                      key=_vkey)
    if not versions:
        raise AicError(f"aiconfigurator's SGLang data versions are not versions: {str(slots)[:80]!r}")
    names = ", ".join(f"{k} {v}" for k, v in slots.items()
                      if isinstance(k, str) and re.fullmatch(r"[a-z]{1,16}", k) and v in versions)
    if plan_version in versions:
        return plan_version, f"the plan's SGLang {plan_version} (the tool has: {names})"
    if not _vkey(plan_version):
        return versions[-1], f"the tool's newest, the plan naming no version (the tool has: {names})"
    want = _vkey(plan_version)

    def distance(v: str) -> tuple[int, ...]:
        k = _vkey(v)
        return tuple(abs(a - b) for a, b in zip(k + (0,) * 4, want + (0,) * 4))

    near = min(versions, key=lambda v: (distance(v), [-x for x in _vkey(v)]))
    return near, f"the nearest to the plan's SGLang {plan_version} that the tool has data for ({names})"


def _number(row: Mapping[str, Any], key: str, bound: float) -> float:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise AicError(f"aiconfigurator answered {key} = {str(value)[:40]!r}, not a number")
    x = float(value)
    if not math.isfinite(x) or x <= 0 or x > bound:
        raise AicError(f"aiconfigurator answered {key} = {x!r}, outside (0, {bound:g}]")
    return x


def _rows(frame: Any) -> list[Mapping[str, Any]]:
    """The sweep's DataFrame (or a list of row mappings) as a list of mappings."""
    to_dict = getattr(frame, "to_dict", None)
    rows = to_dict("records") if callable(to_dict) else frame
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
        raise AicError(f"aiconfigurator answered a {type(rows).__name__}, not a table of rows")
    return rows


def _bounded(call: Callable[[], Any], timeout_s: float) -> Any:
    """call() in a daemon thread; AicError when it raises or takes longer than timeout_s."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            with warnings.catch_warnings():  # 0.12.0 warns that sweep_agg moves to aisimulate in 0.13.0
                warnings.simplefilter("ignore")
                box["value"] = call()
        except BaseException as exc:  # the tool's own failure, reported as one line below
            box["error"] = exc

    worker = threading.Thread(target=run, name="aiconfigurator", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise AicError(f"aiconfigurator gave no answer within {timeout_s:g} s")
    if "error" in box:
        exc = box["error"]
        if isinstance(exc, (AicError, AicMissing)):
            raise exc
        text = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise AicError(f"aiconfigurator: {type(exc).__name__}: {text}")
    return box.get("value")


def layout_of(req: AicRequest) -> tuple[int, int, int, int]:
    """The tool's (tp, dp, moe_tp, moe_ep) for one server of the plan: attention TP tp / attn_dp,
    attention DP attn_dp, MoE TP tp / ep and EP ep (a dense model: MoE TP 1, EP 1)."""
    attn = max(1, req.attn_dp)
    ep = max(1, req.ep)
    if req.tp < 1 or req.tp % attn or req.tp % ep:
        raise AicError(f"layout TP {req.tp}, DP attention {attn}, EP {ep}: not one aiconfigurator can express")
    return (req.tp // attn, attn, req.tp // ep, ep) if req.moe else (req.tp, 1, 1, 1)


def predict(req: AicRequest, api: Any = None, timeout_s: float = TIMEOUT_S) -> AicPrediction:
    """aiconfigurator's figures for ``req``'s layout at each concurrency level, or AicError/AicMissing."""
    system = SYSTEMS.get(req.gpu_model)
    if system is None:
        raise AicError(f"{req.gpu_model}: no aiconfigurator system for it (it has data for "
                       f"{', '.join(sorted(SYSTEMS))})")
    api = load_api() if api is None else api
    tp, dp, moe_tp, moe_ep = layout_of(req)
    replicas = max(1, req.gpu_count // req.tp)

    def ask() -> tuple[str, str, list[tuple[int, list[Mapping[str, Any]]]]]:
        version, why = choose_version(req.sglang_version, api.get_version_slots(system, "sglang"))
        task = api.Task(serving_mode="agg", model_path=req.model, system_name=system, backend_name="sglang",
                        backend_version=version, isl=req.isl, osl=req.osl, ttft=MAX_MS, tpot=MAX_MS,
                        pareto_sweep=False, agg_num_gpu_candidates=[req.tp], agg_tp_candidates=[tp],
                        agg_pp_candidates=[1], agg_dp_candidates=[dp], agg_moe_tp_candidates=[moe_tp],
                        agg_moe_ep_candidates=[moe_ep], agg_cp_candidates=[1])
        task.validate()
        database = api.get_database_view(system, "sglang", version)
        if database is None:
            raise AicError(f"aiconfigurator has no SGLang {version} data for {system}")
        kwargs = task.sweep_agg_kwargs(database=database)
        spec = task.build_speculative_profile()
        return version, why, [(c, _rows(api.sweep_agg(**kwargs, max_batch_size=c, top_k=1, speculative_profile=spec)))
                              for c in req.levels]

    version, why, answers = _bounded(ask, timeout_s)
    levels = []
    parallel = ""
    for c, rows in answers:
        rows = [r for r in rows if (r.get("tp"), r.get("dp"), r.get("moe_tp"), r.get("moe_ep"))
                == (tp, dp, moe_tp, moe_ep)]
        if not rows:
            raise AicError(f"aiconfigurator predicted nothing for tp {tp} dp {dp} moe_tp {moe_tp} moe_ep {moe_ep} "
                           f"at concurrency {c} (the layout does not fit, or it lacks data for it)")
        best = max(rows, key=lambda r: _number(r, "tokens/s/gpu", MAX_TOK_S))
        bs = best.get("bs")
        if isinstance(bs, bool) or not isinstance(bs, int) or not 1 <= bs <= c:
            raise AicError(f"aiconfigurator answered batch size {str(bs)[:20]!r} for concurrency {c}")
        levels.append(AicLevel(concurrency=c, batch_size=bs, tok_s_per_gpu=_number(best, "tokens/s/gpu", MAX_TOK_S),
                               tok_s_per_user=_number(best, "tokens/s/user", MAX_TOK_S),
                               ttft_ms=_number(best, "ttft", MAX_MS),
                               output_tok_s=_number(best, "tokens/s", MAX_TOK_S) * replicas))
        parallel = re.sub(r"[^A-Za-z0-9_.-]", "", str(best.get("parallel", "")))[:40]
    return AicPrediction(system=system, sglang_data_version=version, version_reason=why, parallel=parallel,
                         replicas=replicas, levels=tuple(levels), tool_version=str(getattr(api, "version", "?")))


def request_for(plan: Any) -> AicRequest:
    """The AicRequest of one planned host (sglang_deploy.plan.hostplan.Plan)."""
    def value(name: str, default: int = 1) -> int:
        r = plan.intents.get(name)
        v = getattr(r, "value", None)
        return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else default

    facts = plan.facts
    return AicRequest(model=plan.model_path, gpu_model=plan.gpus.model, gpu_count=plan.gpus.count,
                      tp=value("tp_size"), dp=value("dp_size"), attn_dp=value("attn_dp_size"), ep=value("ep_size"),
                      moe=facts is not None and getattr(facts, "moe", None) is not None,
                      sglang_version=plan.sglang_version)


def side_by_side(plan: Any, aic: AicPrediction | None, why: str | None) -> list[str]:
    """The lines `plan --predict aiconfigurator` prints for one host: the roofline's expected figures
    (plan.predicted) and aiconfigurator's for the same layout, level by level."""
    lines = [f"Predicted {plan.host}: roofline vs aiconfigurator"
             + (f" {aic.tool_version} (SGLang data {aic.sglang_data_version}: {aic.version_reason}; "
                f"{aic.system}, {aic.parallel} x{aic.replicas})" if aic else "")]
    p = plan.predicted
    if p is None:
        lines.append(f"  roofline: none ({plan.predicted_missing})")
    if aic is None:
        lines.append(f"  aiconfigurator: none ({why})")
    if p is not None:
        lines.append(f"  {'':22} {'roofline':>10} {'aiconfigurator':>15}")
    by_c = {lv.concurrency: lv for lv in aic.levels} if aic else {}
    single = by_c.get(1)
    if p is not None:
        lines.append(f"  {'decode tok/s, 1 stream':22} {p.decode_tok_s.expected:10.1f} "
                     f"{(f'{single.tok_s_per_user:.1f}' if single else '-'):>15}")
        lines.append(f"  {'TTFT ms, 1 stream':22} {p.ttft_ms.expected:10.1f} "
                     f"{(f'{single.ttft_ms:.1f}' if single else '-'):>15}")
        for c, band in sorted(p.output_tok_s.items()):
            lv = by_c.get(c)
            lines.append(f"  {f'output tok/s at {c}':22} {band.expected:10.1f} "
                         f"{(f'{lv.output_tok_s:.1f}' if lv else '-'):>15}")
    elif aic is not None:
        for lv in aic.levels:
            lines.append(f"  aiconfigurator at {lv.concurrency}: {lv.output_tok_s:.1f} output tok/s, "
                         f"{lv.tok_s_per_user:.1f} tok/s/user, TTFT {lv.ttft_ms:.1f} ms")
    return lines


def predict_plans(plans: Sequence[Any], api: Any = None, timeout_s: float = TIMEOUT_S
                  ) -> list[tuple[AicPrediction | None, str | None]]:
    """(prediction, None) or (None, why) per plan, the tool asked once per distinct request (hosts of one
    hardware class and layout share the answer); AicMissing when the extra is not installed."""
    api = load_api() if api is None else api
    answers: dict[AicRequest, tuple[AicPrediction | None, str | None]] = {}
    out: list[tuple[AicPrediction | None, str | None]] = []
    for plan in plans:
        req = request_for(plan)
        if req not in answers:
            try:
                answers[req] = (predict(req, api=api, timeout_s=timeout_s), None)
            except AicError as exc:
                answers[req] = (None, str(exc))
        out.append(answers[req])
    return out


def write_side_by_side(results: Sequence[tuple[Any, Any]], as_json: bool, explain: bool, out: TextIO,
                       class_files: Any = None, api: Any = None, timeout_s: float = TIMEOUT_S) -> None:
    """`plan --predict aiconfigurator`: the plans as `plan` writes them, each with aiconfigurator's
    figures for its layout (text: a block per host after the plans; --json: ``predicted_aiconfigurator``
    on each plan, ``{"none": why}`` where the tool could not answer). AicMissing before anything is written."""
    from sglang_deploy.plan.output import print_plans, write_plans_json

    answers = predict_plans([plan for plan, _ in results], api=api, timeout_s=timeout_s)
    if as_json:
        buffer = io.StringIO()
        write_plans_json(results, buffer, class_files)
        items = json.loads(buffer.getvalue())
        for item, (aic, why) in zip(items, answers):
            item["predicted_aiconfigurator"] = aic.as_dict() if aic is not None else {"none": why}
        out.write(json.dumps(items, indent=2) + "\n")
        return
    print_plans(results, explain, out, class_files)
    for (plan, _), (aic, why) in zip(results, answers):
        out.write("\n" + "\n".join(side_by_side(plan, aic, why)) + "\n")
