"""The layout (TP x DP, DP attention) as a dimension of the tuner: its candidates come from the
host's own plan, the search finds a planted better layout and keeps the planned one when the
difference is noise or costs the single stream, and tuning records carry a layout only where the
plan takes it."""

from __future__ import annotations

import random

import pytest

from sglang_deploy.errors import PlanError
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.spec import IntentSetting, build_spec
from sglang_deploy.plan.tuning_record import TuningError, TuningRecord, hardware_class
from sglang_deploy.plan.tuning_record_file import dump_records, parse_records
from sglang_deploy.simulator import tuning_model as tm
from sglang_deploy.tuning.search import Search
from sglang_deploy.tuning.space import LAYOUT, load_space, space_as_dict, space_for_plan, space_from_dict, SpaceError

from tests.recorded_facts import DEEPSEEK_V3, QWEN36_27B

LAYOUT_OF = LAYOUT  # tp_size, dp_size, attn_dp_size


def layout(config):
    return tuple(config[n] for n in LAYOUT_OF)


def test_candidates_are_the_layouts_the_plan_accepts():
    plan, replan = tm.layout_plan("latency")
    space = space_for_plan(plan, replan)
    assert layout({k: plan.intents[k].value for k in LAYOUT_OF}) == (8, 1, 1)
    assert space.dimension("tp_size").values == (2, 4, 8)
    assert set(space.layouts) == {(2, 4, 1), (4, 2, 1), (8, 1, 1)}
    # every candidate is a plan the planner makes, serving the plan's context on every GPU
    for tp, dp, attn in space.layouts:
        other = replan({"tp_size": tp, "dp_size": dp, "attn_dp_size": attn})
        assert (other.intents["tp_size"].value, other.intents["dp_size"].value) == (tp, dp)
        assert other.intents["context_length"].value >= plan.intents["context_length"].value
        assert tp * dp == 8
    # TP 1 is refused by the plan (27B of bf16 weights on one 48 GB GPU), so it is not a candidate
    with pytest.raises(PlanError, match="weights-fit"):
        replan({"tp_size": 1, "dp_size": 8, "attn_dp_size": 1})
    assert any(n.startswith("layout TP 1 x DP 8: not tried: the plan refuses it") and "weights-fit" in n
               for n in space.notes)
    # and the simulator agrees: that layout would not start
    assert not tm.feasible(tm.LayoutModel(tm.fixture_mapping(), {}), {"tp_size": 1, "dp_size": 8})


def test_a_layout_that_serves_a_shorter_context_is_not_tried():
    """Without a declared context the model's 262,144 positions are the plan's; a layout whose
    plan holds less is never a candidate (the tuner trades speed, not what the server serves)."""
    data = {k: v for k, v in tm.LAYOUT_HOST.items() if k != "sglang_intents"}
    plan, replan = tm.layout_plan("latency", data)
    space = space_for_plan(plan, replan)
    full = plan.intents["context_length"].value
    for tp, dp, attn in space.layouts:
        assert replan(dict(zip(LAYOUT_OF, (tp, dp, attn)))).intents["context_length"].value >= full
    shorter = [n for n in space.notes if "its plan serves a context of" in n]
    for note in shorter:
        tp = int(note.split("layout TP ")[1].split(" ")[0])
        dp = 8 // tp
        assert replan({"tp_size": tp, "dp_size": dp, "attn_dp_size": 1}).intents["context_length"].value < full


def test_mla_model_tunes_attention_dp_within_the_layouts_the_plan_accepts():
    spec = build_spec("h200-1", {}, {"sglang_model": "deepseek-ai/DeepSeek-V3",
                                     "sglang_gpus": {"model": "H200", "count": 8, "topology": "nvswitch"}})
    plan = plan_host(spec, facts=DEEPSEEK_V3, sglang_version="0.5.23")

    def replan(lay):
        return plan_host(spec, facts=DEEPSEEK_V3, sglang_version="0.5.23",
                         trial={k: IntentSetting(v, "layout") for k, v in lay.items()})

    space = space_for_plan(plan, replan)
    assert set(space.layouts) == {(8, 1, 1), (8, 1, 8)}  # smaller TPs: 641 GiB of weights do not fit
    assert "tp_size" not in space and space.dimension("attn_dp_size").values == (1, 8)
    start = {k: r.value for k, r in plan.intents.items()}
    grid = load_space(tm.LAYOUT_ONLY, space).grid(start)
    assert sorted(layout(c) for c in grid) == [(8, 1, 1), (8, 1, 8)]
    # the space crosses processes (the deploy's precheck computes it, the tuner searches it)
    assert space_from_dict(space_as_dict(space)).layouts == space.layouts


def test_the_inventory_declared_layout_is_not_tuned():
    plan, replan = tm.layout_plan("throughput", {**tm.LAYOUT_HOST, "sglang_intents": {
        "context_length": 131072, "tp_size": 4}})
    space = space_for_plan(plan, replan)
    assert "tp_size" not in space and space.layouts == ()
    assert any("the inventory declares the layout: tp_size (host layer)" in n for n in space.notes)


def test_a_space_file_narrows_the_layouts_to_accepted_ones():
    plan, replan = tm.layout_plan("latency")
    space = space_for_plan(plan, replan)
    narrowed = load_space({"tp_size": [4, 8]}, space)
    assert set(narrowed.layouts) == {(4, 2, 1), (8, 1, 1)}
    with pytest.raises(SpaceError, match="tp_size: 1: not a layout this host's plan accepts"):
        load_space({"tp_size": [1, 8]}, space)


def run(name, seed, sigma=0.03, budget=None):
    model, objective, space = tm.scenario(name)
    start = tm.scenario_start(name)
    grid = space.grid(start)
    search = Search(space, start, objective, budget_trials=budget or max(len(grid) // 3, 8), seed=seed)
    rng = random.Random(seed * 7919 + 1)
    tried = []
    while (trial := search.ask()) is not None:
        tried.append(layout(trial.config))
        search.tell(trial, tm.run_trial(model, trial.config, objective, rng, sigma, trial.abandon_below))
    return search, start, space, tried


def test_a_planted_better_layout_is_found_and_moved_to():
    """Planned TP 4 x DP 2 (the planner's ranking: the recurrent state allows 19 running requests per
    TP 2 replica); with the allreduce planted costly, TP 2 x DP 4 serves 29% more at 64 streams."""
    model, objective, space = tm.scenario("layout-found")
    start = tm.scenario_start("layout-found")
    _, best, best_config = tm.grid_best(model, objective, space, start)
    assert layout(start) == (4, 2, 1) and layout(best_config) == (2, 4, 1)
    chosen = []
    for seed in range(8):
        search, _, space, tried = run("layout-found", seed)
        assert set(tried) <= set(space.layouts)
        out = search.result()
        chosen.append(layout(out.config))
        if layout(out.config) == (2, 4, 1):
            assert out.decisions["tp_size"].moved and "beyond spread" in out.decisions["tp_size"].reason
            assert out.decisions["dp_size"].moved  # follows the TP
    assert chosen.count((2, 4, 1)) >= 7, chosen


def test_layouts_within_noise_keep_the_planned_layout():
    """TP 2 x DP 4 within 0.4% of the planned TP 4 x DP 2: where the best measured configuration
    has the other layout, the settle step keeps the planned one unless the gain beats the spread."""
    model, objective, space = tm.scenario("layout-noise")
    start = tm.scenario_start("layout-noise")
    a = tm.figure(model, {**start, "tp_size": 2, "dp_size": 4}, objective)
    b = tm.figure(model, {**start, "tp_size": 4, "dp_size": 2}, objective)
    assert abs(b / a - 1) < 0.005
    kept = moved = 0
    for seed in range(12):
        search, start, space, tried = run("layout-noise", seed)
        out = search.result()
        assert set(tried) <= set(space.layouts)
        d = out.decisions.get("tp_size")
        if d is None:
            assert layout(out.config) == (4, 2, 1)
            continue
        if d.moved:
            moved += 1
            assert "beyond spread" in d.reason
        else:
            kept += 1
            assert layout(out.config) == (4, 2, 1)
            assert d.reason.startswith("kept") and "within spread" in d.reason
    assert kept >= 1  # the settle reason shows where the best measured layout was noise
    assert sum(layout(run("layout-noise", s)[0].result().config) == (4, 2, 1) for s in range(12)) >= 8


def test_a_throughput_tune_of_a_latency_plan_moves_to_replicas():
    """Planned for latency (TP 8): TP 2 x DP 4 serves 2.8x the output tok/s at 64 streams while each
    stream decodes 72% slower. Under a throughput objective the single stream is not the
    objective's figure (sglang_deploy/tuning/settle.py), so the tune moves to the replicas."""
    for seed in range(4):
        search, start, space, tried = run("layout-latency-plan", seed)
        out = search.result()
        tp, dp, _ = layout(out.config)
        assert tp < 8 and tp * dp == 8, layout(out.config)
        d = out.decisions["tp_size"]
        assert d.moved and d.proposed == tp and "decode" not in d.reason, d.reason


# ---- tuning records ------------------------------------------------------------------------


def record_for(plan, intents):
    return TuningRecord(hardware=hardware_class(plan), objective="throughput", intents=intents,
                        measured_on="sim-a6000x8", measured_at="2026-12-01T20:00:00+00:00", trial_count=9)


def test_a_record_carries_the_layout_and_the_plan_applies_it():
    plan, _ = tm.layout_plan("throughput")
    rec = record_for(plan, {"tp_size": 4, "dp_size": 2, "attn_dp_size": 1})
    back = parse_records(dump_records([rec]))
    assert back[0].intents == {"tp_size": 4, "dp_size": 2, "attn_dp_size": 1}
    spec = build_spec("sim-a6000x8", {}, {**tm.LAYOUT_HOST, "sglang_objective": "throughput"})
    tuned = plan_host(spec, facts=QWEN36_27B, sglang_version="0.5.23", tuning=back)
    assert tuned.tuning is not None
    assert [(tuned.intents[n].value, tuned.intents[n].layer) for n in ("tp_size", "dp_size")] == [
        (4, "tuned"), (2, "tuned")]
    assert "TP 4 x DP 2" in tuned.intents["tp_size"].reason


@pytest.mark.parametrize("intents, field, words", [
    ({"tp_size": 8, "dp_size": 2}, "intents.dp_size", "TP 8 x DP 2 = 16 GPUs; the record's hardware has 8"),
    ({"tp_size": 4}, "intents.dp_size", "tp_size and dp_size together"),
    ({"tp_size": 4, "dp_size": 1, "attn_dp_size": 3}, "intents.attn_dp_size", "does not divide TP 4"),
    ({"tp_size": "all", "dp_size": 1}, "intents.tp_size", "a number of GPUs"),
])
def test_a_record_layout_is_bounded_by_its_own_gpus(intents, field, words):
    plan, _ = tm.layout_plan("throughput")
    text = dump_records([record_for(plan, intents)])
    with pytest.raises(TuningError) as info:
        parse_records(text, "inv.tuning.yaml")
    assert field in str(info.value) and words in str(info.value)


def test_a_record_from_eight_gpus_does_not_apply_its_tp_to_four():
    plan, _ = tm.layout_plan("latency")
    rec = record_for(plan, {"tp_size": 8, "dp_size": 1, "attn_dp_size": 1})
    spec = build_spec("a6000x4", {}, {**tm.LAYOUT_HOST, "sglang_gpus": {"model": "RTX A6000", "count": 4,
                                                                        "topology": "pcie"}})
    four = plan_host(spec, facts=QWEN36_27B, sglang_version="0.5.23", tuning=[rec])
    assert four.tuning is None and four.intents["tp_size"].value <= 4
    assert any("8 GPU(s) not applied: this host uses 4 GPU(s)" in n for n in four.tuning_notes)


def test_a_record_layout_the_plan_refuses_is_ignored_with_the_reason():
    """A record of the host's own class whose layout the plan refuses (TP 1: the weights do not
    fit one GPU): the rest of the record applies, the layout is the plan's, and the plan says why."""
    plan, _ = tm.layout_plan("throughput")
    rec = record_for(plan, {"tp_size": 1, "dp_size": 8, "attn_dp_size": 1, "chunked_prefill_size": 4096})
    spec = build_spec("sim-a6000x8", {}, {**tm.LAYOUT_HOST, "sglang_objective": "throughput"})
    out = plan_host(spec, facts=QWEN36_27B, sglang_version="0.5.23", tuning=parse_records(dump_records([rec])))
    assert out.tuning is not None and out.intents["chunked_prefill_size"].layer == "tuned"
    untuned = plan_host(spec, facts=QWEN36_27B, sglang_version="0.5.23")  # the same host, no record
    assert out.intents["tp_size"].value == untuned.intents["tp_size"].value
    assert out.intents["tp_size"].layer != "tuned"
    assert any(n.startswith("tuning record's layout (TP 1 x DP 8) not applied: ") and "weights-fit" in n
               for n in out.tuning_notes)


def test_a_declared_layout_wins_over_the_record_whole():
    plan, _ = tm.layout_plan("throughput")
    rec = record_for(plan, {"tp_size": 2, "dp_size": 4, "attn_dp_size": 1})
    spec = build_spec("sim-a6000x8", {}, {**tm.LAYOUT_HOST, "sglang_intents": {"context_length": 131072,
                                                                                "tp_size": 8}})
    out = plan_host(spec, facts=QWEN36_27B, sglang_version="0.5.23", tuning=[rec])
    assert (out.intents["tp_size"].value, out.intents["dp_size"].value) == (8, 1)
    assert "tuned" not in {out.intents[n].layer for n in LAYOUT}
    assert any("layout (TP 2 x DP 4) not applied: tp_size set by the inventory" in n for n in out.tuning_notes)


def test_layout_trial_args_are_what_the_simulated_server_resolves():
    """LayoutModel's replica args against the real path: the dialect's argv for the layout, parsed and
    resolved by the simulated SGLang 0.5.23 package (TP and DP as --tp-size / --dp-size)."""
    from sglang_deploy.plan import catalog as catalogs
    from sglang_deploy.plan.dialects import compile_intents
    from sglang_deploy.plan.intents import INTENTS
    from sglang_deploy.simulator import perf_model

    start = tm.scenario_start("layout-found")
    model = tm.LayoutModel(tm.fixture_mapping(), start, 0.03)
    for tp, dp in ((2, 4), (4, 2), (8, 1)):
        config = {**start, "tp_size": tp, "dp_size": dp, "attn_dp_size": 1}
        intents = {**{n: d.default for n, d in INTENTS.items()}, **config}
        argv = compile_intents(tm.VERSION, catalogs.load_catalog(tm.VERSION), intents, "org/mtp",
                               tm.MTP_MODEL).argv
        real = perf_model.server_args(argv, tm.VERSION)
        replica, mine, replicas = model.replica(config)
        assert (real["tp_size"], real["dp_size"]) == (tp, dp) and replicas == dp
        for c in (1, 64 // dp):
            assert replica.expected(mine, c, 512, 256) == replica.expected(real, c, 512, 256), config
