"""The start budget (sglang_deploy/plan/start_budget.py): derived from the plan's phases, then from
the host's recorded starts, overridden by the inventory; shown by `plan` and `plan --json`."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest

from sglang_deploy.plan import start_budget as sb
from sglang_deploy.plan.output import plan_json, print_plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.plan.weights import Weights
from tests.recorded_facts import DEEPSEEK_V3, GPT_OSS_120B, QWEN3_235B_FP8, QWEN36_27B

H200X8 = {"model": "H200", "count": 8}
H100X8 = {"model": "H100 SXM", "count": 8}
A6000X2 = {"model": "RTX A6000", "count": 2}
HW = "8x NVIDIA H200 (sm90)"


def plan(facts, gpus, version="0.5.23", **data):
    data = {"sglang_model": facts.model, "sglang_gpus": gpus, **data}
    return plan_host(build_spec("gpu-1", {}, data), sglang_version=version, facts=facts)


def parts(budget):
    return {p.name: p.seconds for p in budget.parts}


def test_an_fp8_moe_on_hopper_gets_the_weights_read_graphs_and_deepgemm_compile():
    p = plan(DEEPSEEK_V3, H200X8)
    b = p.start_budget
    assert b.basis == "derived" and b.caches == "unknown"
    got = parts(b)
    # 641.3 GiB at 200 MiB/s, rounded up to a second
    assert got["weights"] == -(-DEEPSEEK_V3.total_weight_bytes // (200 << 20))
    assert got["DeepGEMM JIT"] == 1200 and got["kernel JIT"] == 300
    assert b.total_s >= sum(got.values()) and b.total_s % 30 == 0 and b.total_s - sum(got.values()) < 30
    assert b.total_s > 900  # the fixed timeout the gate had would have rolled this first start back


def test_deepgemm_only_for_block_fp8_on_sm90_and_up():
    assert sb.deepgemm_compiles(plan(QWEN3_235B_FP8, H100X8))
    assert not sb.deepgemm_compiles(plan(GPT_OSS_120B, H100X8))  # MXFP4, not block FP8
    assert not sb.deepgemm_compiles(plan(QWEN36_27B, A6000X2))  # BF16
    ampere = plan(QWEN3_235B_FP8, {"model": "A100 SXM 80GB", "count": 8})
    assert not sb.deepgemm_compiles(ampere) and "DeepGEMM JIT" not in parts(ampere.start_budget)


def test_graph_captures_follow_the_plan_and_the_version():
    p = plan(GPT_OSS_120B, H100X8)
    assert sb.graph_captures(p)[:2] == ["decode", "prefill"]
    old = plan(GPT_OSS_120B, H100X8, version="0.5.9")
    assert "prefill" not in sb.graph_captures(old)  # opt-in before 0.5.15
    off = plan(GPT_OSS_120B, H100X8, sglang_intents={"cuda_graph": False})
    assert sb.graph_captures(off) == [] and "CUDA graphs" not in parts(off.start_budget)


def test_warm_caches_drop_the_compile_and_downloads_at_start_are_slower():
    p = plan(QWEN3_235B_FP8, H100X8)
    warm = sb.derive(p, "warm")
    assert "kernel JIT" not in parts(warm) and "DeepGEMM JIT" not in parts(warm)
    assert warm.total_s < p.start_budget.total_s
    local = dataclasses.replace(p, weights=Weights(source="host", model="/srv/m", revision=None, commit=None,
                                                   store="/srv", origin="a directory on the host", margin_bytes=0,
                                                   keep=1))
    served = dataclasses.replace(p, weights=dataclasses.replace(local.weights, source="server"))
    assert parts(sb.derive(local))["weights"] == parts(sb.derive(p))["weights"]
    assert parts(sb.derive(served))["weights"] == -(-QWEN3_235B_FP8.total_weight_bytes // (50 << 20))


def test_no_checkpoint_size_falls_back_to_the_units_start_timeout():
    p = plan(QWEN36_27B, A6000X2)
    bare = dataclasses.replace(p, facts=None)
    b = sb.derive(bare)
    assert b.basis == "profile" and b.total_s == p.timeout_start_s


def entry(start_s, version="0.5.23", model="deepseek-ai/DeepSeek-V3", hardware=HW, **down):
    return {"kind": "gate", "sglang_version": version, "plan": {"model": model, "hardware": hardware},
            "downtime": {"start_s": start_s, **down}}


def test_the_hosts_own_starts_set_it_and_cold_caches_add_the_compile():
    p = plan(DEEPSEEK_V3, H200X8)
    entries = [entry(400.0), entry(9999.0, version="0.5.19"), entry(8888.0, model="other"),
               entry(7777.0, hardware="2x RTX A6000 (sm86)"), entry(380.0), {"junk": 1}, entry(True),
               entry(float("nan")), entry(-5), entry("300"), entry(1e9)]
    assert sb.recorded_starts(entries, p, HW) == [400.0, 380.0]
    warm = sb.choose(p, None, None, entries, "warm", HW)
    assert warm.basis == "history" and parts(warm) == {"history": 1200} and warm.total_s == 1200
    cold = sb.choose(p, None, None, entries, "cold", HW)
    assert parts(cold) == {"history": 1200, "kernel JIT": 300, "DeepGEMM JIT": 1200} and cold.total_s == 2700


def test_only_the_newest_five_starts_count():
    p = plan(DEEPSEEK_V3, H200X8)
    entries = [entry(3000.0)] + [entry(100.0)] * 5
    assert sb.choose(p, None, None, entries, "warm", HW).total_s == 300


def test_caches_with_no_recorded_start_of_this_model_are_not_warm():
    p = plan(DEEPSEEK_V3, H200X8)
    b = sb.choose(p, None, None, [entry(50.0, model="other")], "warm", HW)
    assert b.basis == "derived" and b.caches == "unknown" and "DeepGEMM JIT" in parts(b)


def test_the_inventory_overrides_and_a_minimum_holds():
    p = plan(DEEPSEEK_V3, H200X8)
    assert sb.choose(p, 45.5, 3600, [entry(10.0)], "warm", HW).total_s == 45.5
    b = sb.choose(p, None, 3600, [entry(10.0)], "warm", HW)
    assert (b.basis, b.total_s) == ("inventory", 3600) and "sglang_timeout_start_s" in b.parts[0].why
    assert sb.choose(p, None, None, [entry(1.0)], "warm", HW).total_s == sb.MIN_S
    inv = plan(DEEPSEEK_V3, H200X8, sglang_gate={"ready_timeout_s": 600})
    assert inv.start_budget.basis == "inventory" and inv.start_budget.total_s == 600


def test_plan_shows_the_budget_and_its_parts():
    p = plan(DEEPSEEK_V3, H200X8)
    short, explained = io.StringIO(), io.StringIO()
    print_plan(p, render(p), False, short)
    print_plan(p, render(p), True, explained)
    line = next(ln for ln in short.getvalue().splitlines() if ln.startswith("Start "))
    assert f"up to {p.start_budget.total_s:g} s to ready (derived" in line
    assert "DeepGEMM pre-compile" not in short.getvalue()
    assert "DeepGEMM pre-compile, \"typically 10-20 mins\"" in explained.getvalue()
    doc = json.loads(json.dumps(plan_json(p, render(p))))
    assert doc["start_budget"]["total_s"] == p.start_budget.total_s
    assert {x["name"] for x in doc["start_budget"]["parts"]} >= {"weights", "CUDA graphs", "DeepGEMM JIT"}


@pytest.mark.parametrize("caches", ["warm", "cold", "unknown"])
def test_every_budget_is_bounded(caches):
    p = plan(DEEPSEEK_V3, H200X8)
    for starts in ([], [0.5], [80000.0]):
        b = sb.from_history(p, starts, caches)
        assert sb.MIN_S <= b.total_s <= sb.MAX_S


def test_the_hosts_fact_reads_bounded_lines_and_keeps_only_objects():
    from sglang_deploy.deploy.facts import StartHistory

    fact = StartHistory()
    command = fact.command("/var/lib/sglang-deploy/sglang/history.jsonl", "/var/lib/sglang/cache/sglang-0.5.23",
                           "/var/lib/sglang/models")
    assert "tail -n 50" in command and "cut -c1-65536" in command and "-maxdepth 2" in command
    assert "findmnt" in command and "lsblk" in command and "head -n 16" in command
    assert "caches=unknown" in fact.command("/h", None, None) and "findmnt" not in fact.command("/h", None, None)
    line = json.dumps(entry(12.5))
    got = fact.process(["caches=warm", line, "not json", "[1, 2]", '{"kind": "gate"'])
    assert got == {"entries": [json.loads(line)], "caches": "warm", "disk": {"fstype": "", "devices": []}}
    assert fact.process(["caches=lukewarm"])["caches"] == "unknown"
    assert len(fact.process(['NAME="sda" TRAN="" ROTA="1" TYPE="disk"'] * 100)["disk"]["devices"]) == 16
    assert StartHistory.default() == {"entries": [], "caches": "unknown", "disk": {"fstype": "", "devices": []}}


LSBLK_NVME_RAID = ['fstype=xfs', 'NAME="md0" TRAN="" ROTA="0" TYPE="raid0"',
                   'NAME="nvme0n1" TRAN="nvme" ROTA="0" TYPE="disk"', 'NAME="nvme1n1" TRAN="nvme" ROTA="0" TYPE="disk"']


@pytest.mark.parametrize("lines, expected", [
    (LSBLK_NVME_RAID, "nvme"),
    (['fstype=ext4', 'NAME="sda1" TRAN="" ROTA="0" TYPE="part"', 'NAME="sda" TRAN="sata" ROTA="0" TYPE="disk"'], "ssd"),
    (['fstype=ext4', 'NAME="md1" TRAN="" ROTA="0" TYPE="raid1"', 'NAME="sdb" TRAN="sas" ROTA="1" TYPE="disk"'], "hdd"),
    (['fstype=nfs4'], "network"),
    (['fstype=fuse.juicefs'], "network"),
    (['fstype=tmpfs'], "memory"),
    (['fstype=overlay'], "unknown"),
    (['fstype=ext4'], "unknown"),
    (['fstype=ext4', 'NAME="x$(reboot)" TRAN="" ROTA="0" TYPE="disk"'], "unknown"),  # not a device name: dropped
    ([], "unknown"),
])
def test_the_disk_under_the_weights_sets_the_read_rate(lines, expected):
    from sglang_deploy.deploy.facts import StartHistory

    assert sb.disk_class(**StartHistory().process(lines)["disk"]) == expected


def test_the_read_rate_follows_the_disk_class_and_the_weights_source():
    p = plan(QWEN3_235B_FP8, H100X8)
    size = QWEN3_235B_FP8.total_weight_bytes
    assert parts(sb.derive(p, disk="nvme"))["weights"] == -(-size // (1024 << 20))
    assert parts(sb.derive(p, disk="hdd"))["weights"] == -(-size // (100 << 20))
    assert "nvme disk" in next(x.why for x in sb.derive(p, disk="nvme").parts if x.name == "weights")
    assert sb.weights_dir(p) is None  # a Hub id, no weights planned: SGLang's own cache
    staged = dataclasses.replace(p, weights=Weights(source="hub", model=p.model_path, revision="main", commit="c" * 40,
                                                    store="/srv/models", origin="the Hub", margin_bytes=0, keep=1))
    assert sb.weights_dir(staged) == "/srv/models"
    assert sb.weights_dir(dataclasses.replace(staged, weights=dataclasses.replace(staged.weights, source="server"))) \
        is None


def test_a_checkpoint_without_an_index_is_counted_from_its_shapes():
    p = plan(QWEN3_235B_FP8, H100X8)
    bare = dataclasses.replace(p, facts=dataclasses.replace(QWEN3_235B_FP8, total_weight_bytes=None))
    size, how = sb.weights_bytes(bare)
    assert "estimated" in how and 0.8 < size / QWEN3_235B_FP8.total_weight_bytes < 1.25


def test_a_seeded_host_takes_the_start_of_the_first_host_of_its_class():
    p = plan(DEEPSEEK_V3, H200X8)
    b = sb.choose(p, None, None, [], "cold", HW, seeded=("gpu-7", 1900.0))
    assert (b.basis, b.caches, b.total_s) == ("class", "seeded", 5700) and "gpu-7" in b.parts[0].why
    # the host's own starts, and the inventory, come first
    assert sb.choose(p, None, None, [entry(400.0)], "cold", HW, seeded=("gpu-7", 1900.0)).basis == "history"
    assert sb.choose(p, 600, None, [], "cold", HW, seeded=("gpu-7", 1900.0)).basis == "inventory"
