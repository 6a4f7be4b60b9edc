"""The tuner stops recording noise: a setting moves off its prior value only when its gain
exceeds the measured spread and no other measured figure gets worse beyond the gate's tolerance
(sglang_deploy/tuning/settle.py, the settle step of sglang_deploy/tuning/search_settle.py)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sglang_deploy.gate.options import default as gate_default
from sglang_deploy.simulator.tuning_model import START, figure, grid_best, run_trial, scenario, sim_args
from sglang_deploy.tuning import trials
from sglang_deploy.tuning.search import Search, TrialResult
from sglang_deploy.tuning.settle import TOLERANCE, Measured, judge, pooled_sd, secondary, spread_of
from sglang_deploy.tuning.space import load_space


def tune(model, obj, space, seed, sigma, budget_trials=None, start=START):
    s = Search(space, start, obj, budget_trials=budget_trials, seed=seed)
    rng = random.Random(seed * 7919 + 1)
    while (trial := s.ask()) is not None:
        s.tell(trial, run_trial(model, trial.config, obj, rng, sigma, trial.abandon_below))
    return s


def ttft(model, config):
    return model.expected(sim_args(config), 1, 512, 256)["ttft_s"]


# ---- the reproduction: the planted optimum -------------------------------------------


def test_prefill_graph_off_is_noise_on_decode_and_clearly_worse_on_ttft():
    """The planted model (simulator/perf/a6000_qwen36.yaml): the prefill CUDA graph only saves
    15% of TTFT, so switching it off changes decode by nothing and TTFT by +17.6%."""
    model, obj, _ = scenario("mtp-4-steps")
    best = {**START, "speculative_num_steps": 4, "speculative_num_draft_tokens": 5}
    off = {**best, "prefill_cuda_graph": "off"}
    assert figure(model, off, obj) == figure(model, best, obj)
    assert ttft(model, off) / ttft(model, best) - 1 == pytest.approx(0.176, abs=0.001)


@pytest.mark.parametrize("seed", [12, 17, 24])
def test_repro_noise_no_longer_switches_the_prefill_graph_off(seed):
    """At 1% noise per trial, seeds 12, 17 and 24: the best measured configuration has the
    prefill CUDA graph off (a decode 'gain' of noise, TTFT +17.6%); before the settle step the
    record took it as it was. Now the setting stays at its prior with the reason, while the
    planted optimum (MTP 4 steps, +3.1%) is still found and moves."""
    model, obj, space = scenario("mtp-4-steps")
    s = tune(model, obj, space, seed, sigma=0.01, budget_trials=360)
    out = s.result()
    assert out.proposed["prefill_cuda_graph"] == "off"  # what the record used to set
    assert out.config["prefill_cuda_graph"] == START["prefill_cuda_graph"] == "default"
    d = out.decisions["prefill_cuda_graph"]
    assert not d.moved and d.value == "default" and d.proposed == "off"
    # within the spread, or (a noise gain just past one standard error) TTFT +17.6% beyond tolerance
    assert (d.reason.startswith("kept: gain ") and "within spread" in d.reason and d.gain <= d.spread) or \
        (d.reason.startswith("kept: ttft +") and "beyond tolerance 10%" in d.reason), d.reason
    # the planted optimum is kept: 4 MTP steps, a real gain beyond the spread
    assert out.config["speculative_num_steps"] == 4 and out.decisions["speculative_num_steps"].moved
    assert "moved: decode +" in out.decisions["speculative_num_steps"].reason
    # the configuration chosen was itself measured (twice) and is the noise-free best
    assert len(s.measurements(out.config)) >= 2 and out.objective is not None
    _, best, _ = grid_best(model, obj, space)
    assert figure(model, out.config, obj) >= 0.99 * best
    assert ttft(model, out.config) == ttft(model, START)


def test_repro_a_noise_gain_with_ttft_worse_is_kept_by_the_tolerance():
    """3% noise, seed 3: the trials show the prefill graph off 5% 'faster' at decode (noise:
    the planted model gives it no effect on decode), beyond the spread, and TTFT 17% worse:
    the tolerance keeps it."""
    model, obj, space = scenario("mtp-4-steps")
    out = tune(model, obj, space, 3, sigma=0.03, budget_trials=360).result()
    d = out.decisions["prefill_cuda_graph"]
    assert out.proposed["prefill_cuda_graph"] == "off" and not d.moved and out.config["prefill_cuda_graph"] == "default"
    assert d.reason.startswith("kept: ttft +") and "beyond tolerance 10%" in d.reason, d.reason
    assert 0.15 <= d.worse["ttft"] <= 0.20


def test_repro_the_record_keeps_the_prior_and_says_why(tmp_path):
    """The record the tune writes from the search's result: its intents and its decisions."""
    from sglang_deploy.plan.tuning_record import HardwareClass, TuningRecord
    from sglang_deploy.plan.tuning_record_file import load_records, save_record

    model, obj, space = scenario("mtp-4-steps")
    s = tune(model, obj, space, 12, sigma=0.01, budget_trials=360)
    out = s.result()
    rows = [{"trial": t.number, "config": t.config, "status": r.status, "objective": r.objective,
             "cause": r.cause, "figures": r.figures} for t, r in s.history]
    hw = HardwareClass("sm86", "RTX A6000", 2, "nvlink-pairs", "0.5.23", "org/mtp", None)
    record = TuningRecord(hardware=hw, objective=obj, intents=out.config, measured_on="a6000-1",
                          measured_at="2026-11-30T20:00:00+00:00", trial_count=len(rows),
                          evidence=trials.evidence(rows, out.config),
                          decisions={n: d.as_dict() for n, d in out.decisions.items()})
    path = tmp_path / "inv.tuning.yaml"
    save_record(path, record)
    (back,) = load_records(path)
    assert back.intents["prefill_cuda_graph"] == "default"
    assert back.decisions["prefill_cuda_graph"]["moved"] is False
    assert back.decisions["prefill_cuda_graph"]["reason"].startswith("kept: ")
    assert back.decisions["speculative_num_steps"]["moved"] is True


# ---- the rule on hand-made trials ------------------------------------------------------------


def fig(ttft_s, decode=None):
    return {"ttft_s": ttft_s, **({"decode_tok_s": decode} if decode is not None else {})}


def test_a_gain_within_the_spread_is_kept():
    best = Measured((55.0, 54.0), (fig(0.25), fig(0.25)))
    other = Measured((54.6, 54.2), (fig(0.25), fig(0.25)))
    sd = pooled_sd([best, other])
    moved, reason, gain, spread, _ = judge(best, other, "decode", sd)
    assert not moved and gain == pytest.approx(0.1 / 54.4) and spread == pytest.approx(sd)  # sqrt(1/2 + 1/2)
    assert reason == "kept: gain +0.18% within spread 0.99%"


def test_a_gain_beyond_the_spread_without_a_regression_moves():
    best = Measured((57.0, 56.8), (fig(0.25), fig(0.26)))
    other = Measured((52.0, 51.6), (fig(0.25), fig(0.25)))
    moved, reason, gain, spread, worse = judge(best, other, "decode", pooled_sd([best, other]))
    assert moved and not worse and reason == "moved: decode +9.8% beyond spread 0.42%"


def test_a_gain_with_ttft_worse_beyond_the_tolerance_is_kept():
    best = Measured((57.0, 56.8), (fig(0.29), fig(0.30)))
    other = Measured((52.0, 51.6), (fig(0.25), fig(0.25)))
    moved, reason, _, _, worse = judge(best, other, "decode", 0.01)
    assert not moved and set(worse) == {"ttft"} and worse["ttft"] == pytest.approx(0.18)
    assert reason == "kept: ttft +18% beyond tolerance 10% (gain +9.8%)"
    # within the tolerance it moves (the gate's: 10%)
    assert TOLERANCE == gate_default("tolerance") == 0.10
    ok = Measured((57.0, 56.8), (fig(0.27), fig(0.27)))
    assert judge(ok, other, "decode", 0.01)[0]


def test_secondary_figures_of_each_objective():
    report = {"decode_tok_s": 50.0, "ttft_s": 0.2, "load": [
        {"concurrency": 1, "output_tok_s": 50.0},
        {"concurrency": 32, "output_tok_s": 1200.0, "ttft_s": {"p50": 0.3, "p90": 0.5, "p99": 0.9},
         "itl_s": {"p50": 0.02, "p90": 0.03, "p99": 0.05}, "goodput_req_s": 3.0}]}
    assert secondary(report, "decode") == {"ttft": (0.2, False), "throughput at 32": (1200.0, True),
                                           "ttft p90 at 32": (0.5, False), "itl p90 at 32": (0.03, False),
                                           "goodput at 32": (3.0, True)}
    # under load the single stream is not the objective's: only the concurrency figures guard it
    assert secondary(report, "throughput") == {"ttft p90 at 32": (0.5, False), "itl p90 at 32": (0.03, False),
                                               "goodput at 32": (3.0, True)}
    assert secondary(report, "goodput") == {"throughput at 32": (1200.0, True), "ttft p90 at 32": (0.5, False),
                                            "itl p90 at 32": (0.03, False)}


def test_a_regression_at_concurrency_keeps_the_setting():
    def report(tput, p90):
        return {"decode_tok_s": 50.0, "ttft_s": 0.2,
                "load": [{"concurrency": 32, "output_tok_s": tput, "ttft_s": {"p90": p90}}]}
    best = Measured((60.0, 60.2), (report(1000, 0.5), report(1000, 0.5)))
    other = Measured((50.0, 50.1), (report(1300, 0.5), report(1300, 0.5)))
    moved, reason, *_ = judge(best, other, "decode", 0.01)
    assert not moved and "throughput at 32 -23.1% beyond tolerance 10%" in reason


def test_no_spread_measured_moves_nothing():
    once = [Measured((60.0,)), Measured((50.0,))]
    assert pooled_sd(once) is None
    moved, reason, *_ = judge(*once, "decode", pooled_sd(once))
    assert not moved and "no spread measured" in reason
    moved, reason, _, spread, _ = judge(*once, "decode", 0.05)  # the run's pooled sd from other repeats
    assert moved and spread == pytest.approx(0.05 * 2 ** 0.5) and "beyond spread 7.1%" in reason


def test_pooled_sd_is_the_repeats_relative_deviation():
    assert pooled_sd([Measured((99.0, 101.0)), Measured((49.0, 51.0, 50.0))]) == pytest.approx(
        ((0.01 ** 2 * 2 + 0.02 ** 2 * 2) / 3) ** 0.5)


# ---- the settle step in the search -----------------------------------------------------------


def test_a_real_gain_moves_without_regression_at_no_noise():
    model, obj, space = scenario("mtp-4-steps")
    s = tune(model, obj, space, 0, sigma=0.0, budget_trials=360)
    out = s.result()
    assert out.config["speculative_num_steps"] == 4 and out.decisions["speculative_num_steps"].moved
    # what ties exactly (no effect on a single stream) stays where the plan put it
    for name in ("mem_fraction_static", "cuda_graph_max_bs_decode", "prefill_cuda_graph", "custom_all_reduce"):
        assert out.config[name] == START[name], name


def test_a_setting_that_costs_ttft_beyond_tolerance_is_kept_even_with_a_real_gain():
    """Planted: a model where switching the prefill graph off also speeds decode by 5% (the
    decode factor is a stand-in for any gain) while TTFT is 17.6% worse: kept."""
    model, obj, space = scenario("mtp-4-steps")
    space = load_space({"speculative_num_steps": [3], "mem_fraction_static": [], "cuda_graph_max_bs_decode": [],
                        "custom_all_reduce": []}, space)
    s = Search(space, START, obj, seed=0)
    rng = random.Random(0)
    while (trial := s.ask()) is not None:
        r = run_trial(model, trial.config, obj, rng, 0.005, trial.abandon_below)
        if trial.config["prefill_cuda_graph"] == "off" and r.status == "ok":
            r = TrialResult("ok", r.objective * 1.05, figures={**r.figures, "decode_tok_s": r.objective * 1.05})
        s.tell(trial, r)
    out = s.result()
    assert out.proposed["prefill_cuda_graph"] == "off"
    d = out.decisions["prefill_cuda_graph"]
    assert not d.moved and out.config["prefill_cuda_graph"] == "default"
    assert "beyond tolerance 10%" in d.reason and 0.15 < d.worse["ttft"] < 0.2 and d.gain > d.spread


def test_settle_trials_fit_the_budget():
    model, obj, space = scenario("mtp-4-steps")
    for budget in (8, 16, 30):
        s = tune(model, obj, space, 1, sigma=0.03, budget_trials=budget)
        assert len(s.history) <= budget
        out = s.result()
        for n, d in out.decisions.items():
            assert d.moved == (out.config[n] != START[n]), (n, d)


# ---- property: never a value whose measured gain is within the spread --------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10 ** 6), sigma=st.sampled_from([0.0, 0.01, 0.03, 0.06]),
       name=st.sampled_from(["mtp-4-steps", "topk-2", "throughput-mem"]),
       budget=st.one_of(st.none(), st.integers(6, 60)),
       factor=st.floats(0.5, 1.5), effect=st.sampled_from(["prefill_cuda_graph", "custom_all_reduce"]))
# Found by Hypothesis: a throughput objective whose move worsens single-stream TTFT, which does not
# veto there (sglang_deploy/tuning/settle.py, secondary).
@example(seed=42, sigma=0.06, name="throughput-mem", budget=38, factor=1.0, effect="prefill_cuda_graph")
# Found by Hypothesis: draft tokens put back as noise, then set again by the top-k and steps that
# moved (SGLang derives it): its decision carried the put-back judgement's gain as if that moved it.
@example(seed=565, sigma=0.06, name="topk-2", budget=None, factor=1.0, effect="prefill_cuda_graph")
def test_the_chosen_value_never_has_a_measured_gain_within_the_spread(seed, sigma, name, budget, factor, effect):
    """Random trial sets: the planted scenarios under noise, with one more setting given a random
    planted effect on the objective. Every setting the result moves off its prior has, in the
    trials, a mean gain over its counterfactual beyond the larger of the two spreads, and no
    other figure of the objective (``secondary``: under a throughput objective the single-stream
    figures are not among them) worse beyond the tolerance."""
    model, obj, space = scenario(name)
    s = Search(space, START, obj, budget_trials=budget, seed=seed)
    rng = random.Random(seed)
    while (trial := s.ask()) is not None:
        r = run_trial(model, trial.config, obj, rng, sigma, trial.abandon_below)
        if r.objective is not None and trial.config.get(effect) not in (None, START[effect]):
            r = TrialResult(r.status, r.objective * factor, r.cause, r.oom, r.figures)
        s.tell(trial, r)
    out = s.result()
    if out.config is None or out.objective is None:
        return  # nothing feasible, or the budget was spent before the configuration chosen was measured
    by_config: dict = {}
    for t, r in s.history:
        if r.status == "ok":
            by_config.setdefault(tuple(sorted(t.config.items())), []).append((r.objective, r.figures))
    sd = pooled_sd([Measured(tuple(o for o, _ in rows)) for rows in by_config.values()])
    for intent, d in out.decisions.items():
        assert d.moved == (out.config[intent] != START.get(intent))
        if not d.moved or d.gain is None:
            continue  # kept, or it follows a setting that moved (its own gain is not what moved it)
        other = space.normalize({**out.config, intent: START.get(intent)}, START)
        if d.reason.startswith("moved with the others"):  # not measured alone: judged against the plan's own
            other = space.normalize({n: START.get(n) for n in space.intents}, START)
        mine = by_config[tuple(sorted(out.config.items()))]
        theirs = by_config[tuple(sorted(other.items()))]
        a = Measured(tuple(o for o, _ in mine))
        b = Measured(tuple(o for o, _ in theirs))
        gain = a.mean / b.mean - 1
        assert gain > spread_of(a, b, sd), (intent, gain, sd, len(a.values), len(b.values))
        mine_figures = [secondary(f, obj) for _, f in mine]
        their_figures = [secondary(f, obj) for _, f in theirs]
        for label in set(mine_figures[0]) & set(their_figures[0]):
            higher = mine_figures[0][label][1]
            va = sum(f[label][0] for f in mine_figures) / len(mine_figures)
            vb = sum(f[label][0] for f in their_figures) / len(their_figures)
            worse = (vb - va) / abs(vb) if higher else (va - vb) / abs(vb)  # as judge() reckons it
            assert worse <= TOLERANCE + 1e-12, (intent, label, va, vb)



@pytest.mark.parametrize("decision, words", [
    ({"value": "off", "prior": "default", "moved": True, "reason": "x"}, "is not the record's value"),
    ({"value": "default", "prior": "default", "moved": "no", "reason": "x"}, "must be true or false"),
    ({"value": "default", "prior": "default", "moved": False, "reason": "x\x1b[2J"}, "control characters"),
    ({"value": "default", "prior": "default", "moved": False, "reason": "x", "gain": "big"}, "finite number"),
    ({"value": "default", "prior": "default", "moved": False, "reason": "x", "host": "h"}, "unknown key"),
])
def test_a_record_with_a_malformed_decision_is_refused(decision, words):
    from sglang_deploy.plan.tuning_record import TuningError
    from sglang_deploy.plan.tuning_record_file import parse_records

    text = {"format": 1, "records": [{
        "hardware": {"arch": "sm86", "gpu_model": "RTX A6000", "gpu_count": 2, "topology": "nvlink-pairs",
                     "sglang_version": "0.5.23", "model": "org/mtp", "revision": None},
        "objective": "decode", "intents": {"prefill_cuda_graph": "default"}, "measured_on": "a6000-1",
        "measured_at": "2026-11-30T20:00:00+00:00", "trial_count": 3,
        "decisions": {"prefill_cuda_graph": decision}}]}
    import json
    with pytest.raises(TuningError, match="decisions.prefill_cuda_graph") as info:
        parse_records(json.dumps(text))
    assert words in str(info.value)


def test_a_setting_put_back_then_derived_again_carries_no_gain_of_its_own():
    """Draft tokens judged noise and put back, then set again by the top-k and steps that moved
    (SGLang derives it): the decision says so, moved, and with no gain of its own (the gain it was
    judged on was of a configuration that was not chosen)."""
    model, obj, space = scenario("topk-2")
    s = Search(space, START, obj, budget_trials=None, seed=565)
    rng = random.Random(565)
    while (trial := s.ask()) is not None:
        s.tell(trial, run_trial(model, trial.config, obj, rng, 0.06, trial.abandon_below))
    d = s.result().decisions["speculative_num_draft_tokens"]
    assert d.moved and d.value != d.prior
    assert d.reason.startswith("kept: gain") and "by the settings that moved (SGLang derives it)" in d.reason
    assert (d.gain, d.spread, d.worse) == (None, None, {})
