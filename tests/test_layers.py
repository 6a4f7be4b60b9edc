"""The layer stack: one value names the planner's layers in order; the planner, `plan` and the
docs read it."""

from __future__ import annotations

import dataclasses
import io

from sglang_deploy.plan import facts_layer, layer_values, layers
from sglang_deploy.plan.layers import LAYERS, NAMES
from sglang_deploy.plan.output import print_plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.plan.spec import DeploySpec, build_spec, trial_intents
from sglang_deploy.plan.tuning_record import TuningRecord, hardware_class

from tests.recorded_facts import QWEN36_27B

ORDER = ("sglang-default", "arch", "topology", "model-facts", "model", "tuned", "group", "host", "trial")
DATA = {"sglang_model": "Qwen/Qwen3.6-27B", "sglang_gpus": {"model": "RTX A6000", "count": 2,
                                                            "topology": "nvlink-pairs"}}


def test_the_layers_lowest_first():
    assert NAMES == ORDER
    assert layers.DEFAULT == "sglang-default" and facts_layer.LAYER == "model-facts"
    assert layers.INVENTORY == ("group", "host")
    assert all(layer.source and "\n" not in layer.source for layer in LAYERS)


def test_the_planner_has_one_source_per_layer_in_the_stack_order():
    assert tuple(layer_values.SETTERS) == NAMES[1:]


def test_the_markdown_table_names_every_layer_in_order():
    text = layers.markdown()
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [row.split("|")[2].strip().strip("`") for row in rows] == list(NAMES)
    assert [int(row.split("|")[1]) for row in rows] == list(range(1, len(LAYERS) + 1))
    positions = [text.index(f"`{name}`") for name in NAMES]
    assert positions == sorted(positions)
    for layer in LAYERS:
        assert layer.source in text


def test_an_error_names_the_inventory_field_or_the_layer():
    assert layers.field("host", "tp_size") == "sglang_intents.tp_size"
    assert layers.field("group", "ep_size") == "sglang_intents.ep_size"
    assert layers.field("trial", "speculative_num_steps") == "speculative_num_steps (trial layer)"
    assert layers.field("model-facts", "tp_size") == "tp_size (model-facts layer)"


def test_the_highest_given_layer_wins_in_stack_order():
    """The tuning record, the group, the host and the trial each set the same intent: the last wins."""
    spec = build_spec("a6000-1", {}, DATA)
    hw = hardware_class(plan_host(spec, facts=QWEN36_27B))
    record = TuningRecord(hardware=hw, objective="decode", intents={"chunked_prefill_size": 1024}, evidence={},
                          measured_on="a6000-1", measured_at="2026-11-30T20:00:00+00:00", trial_count=1,
                          tool_version="0.1.0")
    given = [("group", 2048), ("host", 4096), ("trial", 8192)]
    for top in range(len(given) + 1):
        data = {layer: {"sglang_intents": {"chunked_prefill_size": v}} for layer, v in given[:top] if layer != "trial"}
        trial = {layer: v for layer, v in given[:top] if layer == "trial"}
        plan = plan_host(build_spec("a6000-1", data.get("group", {}), {**DATA, **data.get("host", {})}),
                         facts=QWEN36_27B, tuning=[record],
                         trial=trial_intents("a6000-1", "trial", {"chunked_prefill_size": trial["trial"]}, "t")
                         if trial else None)
        r = plan.intents["chunked_prefill_size"]
        assert (r.layer, r.value) == (given[top - 1] if top else ("tuned", 1024))


def test_every_layer_a_plan_names_is_in_the_stack_and_the_column_fits_them():
    plan = plan_host(build_spec("a6000-1", {"sglang_intents": {"log_level": "warning"}},
                                {**DATA, "sglang_intents": {"port": 30001}}), facts=QWEN36_27B,
                     trial=trial_intents("a6000-1", "trial", {"enable_metrics": True}, "t"))
    seen = {r.layer for r in plan.intents.values()}
    assert {"sglang-default", "model-facts", "model", "group", "host", "trial"} <= seen <= set(NAMES)
    out = io.StringIO()
    print_plan(plan, render(plan), True, out)
    line = next(s for s in out.getvalue().splitlines() if s.lstrip().startswith("tp_size "))
    assert "model-facts" + " " * (layers.WIDTH - len("model-facts") + 2) in line


def test_the_deploy_spec_holds_only_what_the_inventory_said():
    """The tuning record and a trial are the planner's inputs, not fields of the inventory's spec."""
    names = {f.name for f in dataclasses.fields(DeploySpec)}
    assert not names & {"trial_intents", "tuned_intents"}
