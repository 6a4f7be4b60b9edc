"""sglang_deploy/commands/predict_aic.py against a stand-in of aiconfigurator 0.12.0's functions it calls
(sdk.perf_database.get_version_slots / get_database_view, sdk.task_v2.Task, sdk.sweep.sweep_agg),
serving the answers recorded from the real tool (tests/fixtures/perf/aiconfigurator_api.yaml),
and against hostile answers. Needs no aiconfigurator installed."""

from __future__ import annotations

import builtins
import copy
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from sglang_deploy.commands import predict_aic as m

FIXTURE = Path(__file__).parent / "fixtures" / "perf" / "aiconfigurator_api.yaml"
DOC = yaml.safe_load(FIXTURE.read_text())


class StandIn:
    """The functions of aiconfigurator predict_aic calls, answering as the recorded case did."""

    def __init__(self, case: dict[str, Any], sweep: Any = None) -> None:
        self.case = copy.deepcopy(case)
        self.tasks: list[dict[str, Any]] = []
        self.sweeps: list[int] = []
        self._sweep = sweep
        self.version = DOC["aiconfigurator_version"]
        stand_in = self

        class Task:
            def __init__(self, **kwargs: Any) -> None:
                stand_in.tasks.append(kwargs)

            def validate(self) -> None:
                pass

            def sweep_agg_kwargs(self, *, database: Any) -> dict[str, Any]:
                return {"database": database}

            def build_speculative_profile(self) -> None:
                return None

        self.Task = Task

    def get_version_slots(self, system: str, backend: str) -> Any:
        return self.case["version_slots"].get(f"{system}/{backend}")

    def get_database_view(self, system: str, backend: str, version: str) -> Any:
        return SimpleNamespace(system=system, version=version)

    def sweep_agg(self, **kwargs: Any) -> Any:
        c = kwargs["max_batch_size"]
        self.sweeps.append(c)
        if self._sweep is not None:
            return self._sweep(c)
        return next(s["rows"] for s in self.case["sweeps"] if s["max_batch_size"] == c)


def request(case: dict[str, Any], **changes: Any) -> m.AicRequest:
    r = dict(case["request"], levels=tuple(case["request"]["levels"]))
    r.update(changes)
    return m.AicRequest(**r)


@pytest.mark.parametrize("case", DOC["cases"], ids=lambda c: c["request"]["model"])
def test_recorded_answers_give_the_recorded_prediction(case: dict[str, Any]) -> None:
    api = StandIn(case)
    got = m.predict(request(case), api=api)
    assert got.as_dict() == case["prediction"]
    assert api.sweeps == case["request"]["levels"]
    task = api.tasks[0]
    assert task["backend_name"] == "sglang" and task["serving_mode"] == "agg"
    assert task["backend_version"] == case["prediction"]["sglang_data_version"]
    assert task["agg_num_gpu_candidates"] == [case["request"]["tp"]]


def test_the_dense_layout_and_replicas() -> None:
    case = DOC["cases"][0]  # Qwen3-32B on 8x H200, 4 x TP 2
    got = m.predict(request(case), api=StandIn(case))
    assert got.replicas == 4 and got.parallel.startswith("tp2pp1")
    one = got.levels[0]
    assert one.batch_size == 1 and one.output_tok_s == pytest.approx(4 * 97.362)


def test_the_moe_layout_is_expressed_as_moe_tp() -> None:
    case = DOC["cases"][1]  # Qwen3-30B-A3B on 2x H100, TP 2 (MoE TP 2, EP 1)
    api = StandIn(case)
    m.predict(request(case), api=api)
    assert api.tasks[0]["agg_moe_tp_candidates"] == [2] and api.tasks[0]["agg_moe_ep_candidates"] == [1]
    assert m.layout_of(request(case, tp=8, attn_dp=8, ep=8)) == (1, 8, 1, 8)


def test_version_choice() -> None:
    slots = {"current": "0.5.14", "next": "0.5.16"}
    assert m.choose_version("0.5.14", slots)[0] == "0.5.14"
    v, why = m.choose_version("0.5.23", slots)
    assert v == "0.5.16" and "nearest" in why and "0.5.23" in why
    assert m.choose_version("0.4.6.post5", slots)[0] == "0.5.14"
    assert m.choose_version("0.5.14rc1", {"current": "0.5.10"})[0] == "0.5.10"
    for hostile in (None, {}, {"current": 5}, {"current": "../../etc"}, "0.5.14"):
        with pytest.raises(m.AicError):
            m.choose_version("0.5.14", hostile)


def test_unknown_gpu_and_system_without_data() -> None:
    case = DOC["cases"][0]
    with pytest.raises(m.AicError, match="no aiconfigurator system"):
        m.predict(request(case, gpu_model="RTX A6000"), api=StandIn(case))
    api = StandIn(case)
    api.case["version_slots"] = {}
    with pytest.raises(m.AicError, match="no SGLang data"):
        m.predict(request(case), api=api)


def test_the_missing_extra_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_aiconfigurator(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("aiconfigurator"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_aiconfigurator)
    with pytest.raises(m.AicMissing) as info:
        m.load_api()
    assert str(info.value) == m.INSTALL_HINT and "pip install -e '.[predict]'" in str(info.value)
    with pytest.raises(m.AicMissing):
        m.predict_plans([object()])


def _with(row_change: dict[str, Any]) -> Any:
    case = DOC["cases"][0]

    def sweep(c: int) -> Any:
        rows = copy.deepcopy(next(s["rows"] for s in case["sweeps"] if s["max_batch_size"] == c))
        rows[0].update(row_change)
        return rows
    return sweep


@pytest.mark.parametrize("change", [
    {"tokens/s/gpu": float("nan")}, {"tokens/s/gpu": -5.0}, {"tokens/s/user": 0}, {"ttft": float("inf")},
    {"tokens/s": 1e30}, {"ttft": "fast"}, {"tokens/s/gpu": None}, {"tokens/s/gpu": True}, {"bs": 64},
    {"bs": "1"}, {"tp": 4},
], ids=str)
def test_hostile_numbers_are_refused(change: dict[str, Any]) -> None:
    case = DOC["cases"][0]
    with pytest.raises(m.AicError) as info:
        m.predict(request(case), api=StandIn(case, sweep=_with(change)))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("answer", [None, "table", 42, [1, 2], {"tp": 2}], ids=repr)
def test_hostile_shapes_are_refused(answer: Any) -> None:
    case = DOC["cases"][0]
    with pytest.raises(m.AicError):
        m.predict(request(case), api=StandIn(case, sweep=lambda c: answer))


def test_an_exception_from_the_tool_is_one_line() -> None:
    case = DOC["cases"][0]
    recorded = DOC["errors"][0]

    class HuggingFaceDownloadError(Exception):
        pass

    def fail(c: int) -> Any:
        raise HuggingFaceDownloadError(recorded["message"] + "\n  at line 2\n" + "x" * 1000)

    with pytest.raises(m.AicError) as info:
        m.predict(request(case), api=StandIn(case, sweep=fail))
    text = str(info.value)
    assert text.startswith("aiconfigurator: HuggingFaceDownloadError: Failed to download")
    assert "\n" not in text and len(text) < 300


def test_a_hang_is_bounded_by_the_timeout() -> None:
    case = DOC["cases"][0]
    release = threading.Event()

    def hang(c: int) -> Any:
        release.wait()
        return []

    try:
        with pytest.raises(m.AicError, match="no answer within 0.05 s"):
            m.predict(request(case), api=StandIn(case, sweep=hang), timeout_s=0.05)
    finally:
        release.set()


def test_predict_plans_maps_failures_per_plan() -> None:
    case = DOC["cases"][0]
    intents = {k: SimpleNamespace(value=v) for k, v in (("tp_size", 2), ("dp_size", 4))}
    plan = SimpleNamespace(host="h", model_path="Qwen/Qwen3-32B", gpus=SimpleNamespace(model="H200", count=8),
                           intents=intents, facts=None, sglang_version="0.5.23", predicted=None,
                           predicted_missing="no facts")
    assert m.request_for(plan) == m.AicRequest(model="Qwen/Qwen3-32B", gpu_model="H200", gpu_count=8, tp=2, dp=4,
                                               sglang_version="0.5.23")
    moe = SimpleNamespace(**{**vars(plan), "facts": SimpleNamespace(moe=object())})
    assert m.request_for(moe).moe and not m.request_for(SimpleNamespace(**{**vars(plan), "facts": SimpleNamespace(
        moe=None)})).moe
    other = SimpleNamespace(**{**vars(plan), "gpus": SimpleNamespace(model="RTX A6000", count=2)})
    api = StandIn(case)
    (good, none), (bad, why), (again, _) = m.predict_plans([plan, other, plan], api=api)
    assert again is good and len(api.tasks) == 1  # one question per distinct layout and hardware
    assert good is not None and none is None and good.as_dict() == case["prediction"]
    assert bad is None and why is not None and "RTX A6000" in why
    lines = m.side_by_side(plan, good, None)
    assert "SGLang data 0.5.16" in lines[0] and any("at 32: 11302.9" in x for x in lines)
    from sglang_deploy.plan.perf import Band

    plan.predicted = SimpleNamespace(decode_tok_s=Band(80.0, 90.0, 100.0), ttft_ms=Band(20.0, 30.0, 40.0),
                                     output_tok_s={1: Band(300.0, 360.0, 400.0), 32: Band(9e3, 1e4, 1.1e4)})
    lines = m.side_by_side(plan, good, None)
    assert any(x.split() == ["decode", "tok/s,", "1", "stream", "90.0", "97.9"] for x in lines), lines
    assert any(x.split() == ["output", "tok/s", "at", "32", "10000.0", "11302.9"] for x in lines), lines


def test_plan_predict_without_the_extra_exits_2_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from sglang_deploy.commands.cli import main

    def missing() -> Any:
        raise m.AicMissing(m.INSTALL_HINT)

    monkeypatch.setattr(m, "load_api", missing)
    out, err = io.StringIO(), io.StringIO()
    assert main(["plan", "--predict", "aiconfigurator"], out, err) == 2
    assert err.getvalue() == f"error: {m.INSTALL_HINT}\n" and out.getvalue() == ""


def test_plan_predict_side_by_side(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference plan (2x RTX A6000, a GPU the tool has no data for): the roofline's figures and
    aiconfigurator's reason, in text and under each plan of --json."""
    import io
    import json

    from sglang_deploy.commands.cli import main

    monkeypatch.setattr(m, "load_api", lambda: StandIn(DOC["cases"][0]))
    out, err = io.StringIO(), io.StringIO()
    assert main(["plan", "--predict", "aiconfigurator"], out, err) == 0
    text = out.getvalue()
    assert "roofline vs aiconfigurator" in text and "aiconfigurator: none (RTX A6000: no aiconfigurator system" in text
    with_roofline = "decode tok/s, 1 stream" in text  # the checkpoint's facts read: the plan has its prediction
    assert with_roofline or "  roofline: none (" in text, text[-600:]
    out = io.StringIO()
    assert main(["plan", "--predict", "aiconfigurator", "--json"], out, err) == 0
    items = json.loads(out.getvalue())
    assert items and all("RTX A6000" in i["predicted_aiconfigurator"]["none"] for i in items)
    assert all("predicted" in i for i in items)
