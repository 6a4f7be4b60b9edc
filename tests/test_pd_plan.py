"""Prefill/decode disaggregation in the plan (issue: disaggregated fleets): ``sglang_role`` on a
gateway's workers becomes each server's --disaggregation-* flags, spelled and checked per SGLang
version, and the servers one gateway pairs are checked against each other as SGLang checks them when
they first meet (plan/pd.py). Planned from the recorded DeepSeek-R1 config.json (the architecture of
SGLang's own PD example, DeepSeek-V3-0324, docs/advanced_features/pd_disaggregation.md).

The gateway of such servers runs in sglang-router's prefill/decode mode (plan/pd_gateway.py): its
argv names each prefill server with its bootstrap port and each decode server, checked here against
the real 0.3.2 parser."""

from __future__ import annotations

import io
from typing import Any

import pytest

from sglang_deploy.commands import cli
from sglang_deploy.errors import PlanError
from sglang_deploy.plan import pd_split
from sglang_deploy.plan.catalog import SUPPORTED_VERSIONS, load_catalog
from sglang_deploy.plan.hostplan import Plan
from sglang_deploy.plan.inventory_plan import plan_inventory
from sglang_deploy.plan.output import print_plans
from sglang_deploy.plan.render import render
from sglang_deploy.plan.spec import build_spec
from tests.recorded_facts import QWEN3_32B
from tests.test_recipes import FIXTURES, recorded

R1 = recorded("deepseek-ai--DeepSeek-R1")
H200 = {"model": "H200", "count": 8, "topology": "nvswitch"}
B200 = {"model": "B200", "count": 8, "topology": "nvswitch"}


def _host(name: str, role: str | None, **data: Any) -> tuple[str, dict, dict]:
    base = {"sglang_model": R1.model, "sglang_gpus": H200, "sglang_gateways": ["gw"]}
    if role is not None:
        base["sglang_role"] = role
    return (name, {}, {**base, **data})


def plan_all(*hosts: tuple[str, dict, dict], version: str | None = None) -> dict[str, Plan | PlanError]:
    plans = plan_inventory(list(hosts), sglang_version=version, facts={h[0]: R1 for h in hosts})
    return {h[0]: p for h, p in zip(hosts, plans)}


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_each_role_gets_its_flags_in_every_supported_version(version):
    plans = plan_all(_host("p1", "prefill", sglang_intents={"disaggregation_ib_device": "mlx5_0,mlx5_1"}),
                     _host("d1", "decode", sglang_intents={"disaggregation_ib_device": "mlx5_2"}), version=version)
    p1, d1 = plans["p1"], plans["d1"]
    assert isinstance(p1, Plan) and isinstance(d1, Plan), plans
    assert option(p1.argv, "--disaggregation-mode") == "prefill"
    assert option(d1.argv, "--disaggregation-mode") == "decode"
    for p in (p1, d1):
        assert option(p.argv, "--disaggregation-transfer-backend") == "mooncake"
        # every option the plan emits is one the version's own parser has (catalog)
        catalog = load_catalog(version)
        assert all(w in catalog.options for w in p.argv if w.startswith("--disaggregation"))
    # the bootstrap port is the prefill server's own; the gateway hands it to decode per request
    assert option(p1.argv, "--disaggregation-bootstrap-port") == "8998"
    assert "--disaggregation-bootstrap-port" not in d1.argv
    assert option(p1.argv, "--disaggregation-ib-device") == "mlx5_0,mlx5_1"
    assert option(d1.argv, "--disaggregation-ib-device") == "mlx5_2"
    # the role is said where the plan says why; it is deployed (no warning that it is not)
    assert p1.intents["disaggregation_mode"].value == "prefill"
    assert "sglang_role: prefill" in p1.intents["disaggregation_mode"].reason
    assert not any("not deployed" in w for w in p1.warnings)


def test_a_server_without_a_role_gets_no_disaggregation_flags_and_a_transfer_setting_is_said_unused():
    plans = plan_all(("w1", {}, {"sglang_model": R1.model, "sglang_gpus": H200,
                                 "sglang_intents": {"disaggregation_transfer_backend": "nixl"}}))
    w1 = plans["w1"]
    assert isinstance(w1, Plan)
    assert not [w for w in w1.argv if w.startswith("--disaggregation")]
    assert any("disaggregation_transfer_backend='nixl'" in w and "not rendered" in w for w in w1.warnings)


@pytest.mark.parametrize("data, field, words", [
    ({"sglang_role": "both"}, "sglang_role", "must be prefill or decode"),
    ({"sglang_role": "prefill", "sglang_gateways": []}, "sglang_role", "name it in sglang_gateways"),
    ({"sglang_intents": {"disaggregation_mode": "prefill"}}, "sglang_intents.disaggregation_mode",
     "set sglang_role"),
    ({"sglang_intents": {"disaggregation_ib_device": "mlx5_0;rm -rf /"}}, "sglang_intents.disaggregation_ib_device",
     "must name RDMA devices"),
    ({"sglang_intents": {"disaggregation_bootstrap_port": 70000}}, "sglang_intents.disaggregation_bootstrap_port",
     "at most 65535"),
    ({"sglang_intents": {"disaggregation_transfer_backend": "fake"}},
     "sglang_intents.disaggregation_transfer_backend", "must be one of"),
])
def test_bad_role_data_is_refused_naming_the_host_and_the_field(data, field, words):
    with pytest.raises(PlanError) as exc:
        build_spec("p1", {}, {"sglang_model": R1.model, "sglang_gateways": ["gw"], **data})
    assert exc.value.host == "p1" and exc.value.field == field
    assert words in exc.value.message


def test_a_bootstrap_port_that_is_the_http_port_is_refused_naming_it():
    plans = plan_all(_host("p1", "prefill", sglang_intents={"port": 8998}), _host("d1", "decode"))
    p1 = plans["p1"]
    assert isinstance(p1, PlanError) and p1.field == "disaggregation_bootstrap_port (sglang-default layer)"
    assert "8998 is also the server's HTTP port" in p1.message


def test_mooncake_tcp_exists_from_0_5_15_and_0_5_9_refuses_it_by_name():
    hosts = [_host(n, r, sglang_intents={"disaggregation_transfer_backend": "mooncake_tcp"})
             for n, r in (("p1", "prefill"), ("d1", "decode"))]
    later = plan_all(*hosts, version="0.5.15")
    assert all(option(p.argv, "--disaggregation-transfer-backend") == "mooncake_tcp"  # type: ignore[union-attr]
               for p in later.values())
    old = plan_all(*hosts, version="0.5.9")
    assert isinstance(old["p1"], PlanError) and old["p1"].field == "sglang_intents.disaggregation_transfer_backend"
    assert "0.5.9" in old["p1"].message


@pytest.mark.parametrize("decode_data, field, words", [
    ({"sglang_intents": {"kv_cache_dtype": "fp8_e4m3"}}, "sglang_intents.kv_cache_dtype", "KV cache dtype"),
    ({"sglang_gpus": B200}, "sglang_gpus", "page size per architecture"),
    ({"sglang_version": "0.5.19"}, "sglang_version", "PrefillServerInfo"),
    ({"sglang_intents": {"attention_backend": "flashinfer"}}, "sglang_intents.attention_backend", "page size"),
    ({"sglang_extra_args": ["--page-size", "64"]}, "sglang_extra_args", "another page size"),
    ({"sglang_intents": {"disaggregation_transfer_backend": "nixl"}},
     "sglang_intents.disaggregation_transfer_backend", "same transfer engine"),
    ({"sglang_intents": {"speculative_algorithm": None}}, "sglang_intents.speculative_algorithm", "hidden states"),
])
def test_servers_one_gateway_pairs_must_meet_as_sglang_checks_them(decode_data, field, words):
    plans = plan_all(_host("p1", "prefill"), _host("d1", "decode", **decode_data))
    assert isinstance(plans["p1"], Plan)
    d1 = plans["d1"]
    assert isinstance(d1, PlanError), d1
    assert d1.field == field and words in d1.message
    assert "p1" in d1.message and "gateway gw" in d1.message


def test_the_tp_size_may_differ_between_the_roles():
    plans = plan_all(_host("p1", "prefill"), _host("d1", "decode", sglang_intents={"tp_size": 8, "attn_dp_size": 1}))
    assert isinstance(plans["p1"], Plan) and isinstance(plans["d1"], Plan), plans
    assert plans["p1"].intents["attn_dp_size"].value != plans["d1"].intents["attn_dp_size"].value


def test_a_gateway_runs_in_one_mode_and_needs_both_roles():
    only = plan_all(_host("p1", "prefill"), _host("w1", None))
    assert isinstance(only["p1"], PlanError) and "no decode server" in only["p1"].message
    assert isinstance(only["w1"], PlanError) and only["w1"].field == "sglang_role"
    assert "one mode" in only["w1"].message
    # a decode server that cannot be planned still counts as the prefill server's counterpart
    broken = plan_all(_host("p1", "prefill"), _host("d1", "decode", sglang_intents={"tp_size": 3}))
    assert isinstance(broken["p1"], Plan) and isinstance(broken["d1"], PlanError)


def test_each_prefill_replica_behind_the_gateway_listens_on_its_own_bootstrap_port():
    # Qwen3-32B fits one H200: TP 1 makes 8 replicas, each its own server behind the gateway
    hosts = [(n, {}, {"sglang_model": QWEN3_32B.model, "sglang_gpus": H200, "sglang_gateways": ["gw"],
                      "sglang_role": r, "sglang_intents": {"tp_size": 1}})
             for n, r in (("p1", "prefill"), ("d1", "decode"))]
    plans = dict(zip(("p1", "d1"), plan_inventory(hosts, facts={"p1": QWEN3_32B, "d1": QWEN3_32B})))
    p1, d1 = plans["p1"], plans["d1"]
    assert isinstance(p1, Plan) and isinstance(d1, Plan), plans
    assert len(p1.replicas) == 8 and len(d1.replicas) == 8
    ports = [(option(r.argv, "--port"), option(r.argv, "--disaggregation-bootstrap-port")) for r in p1.replicas]
    assert ports == [(str(30000 + i), str(8998 + i)) for i in range(8)]
    assert all("--disaggregation-bootstrap-port" not in r.argv for r in d1.replicas)


def test_prefill_replicas_whose_bootstrap_ports_meet_their_http_ports_are_refused():
    hosts = [(n, {}, {"sglang_model": QWEN3_32B.model, "sglang_gpus": H200, "sglang_gateways": ["gw"],
                      "sglang_role": r, "sglang_intents": {"tp_size": 1, "disaggregation_bootstrap_port": 30004}})
             for n, r in (("p1", "prefill"), ("d1", "decode"))]
    p1 = plan_inventory(hosts, facts={"p1": QWEN3_32B, "d1": QWEN3_32B})[0]
    assert isinstance(p1, PlanError) and p1.field == "sglang_intents.disaggregation_bootstrap_port"
    assert "30004..30011" in p1.message and "30000..30007" in p1.message


# SGLang's own PD example for DeepSeek-V3-0324 (the architecture of the recorded DeepSeek-R1), two
# nodes per role: docs/advanced_features/pd_disaggregation.md, "DeepSeek Multi-Node" (Mooncake), at
# sgl-project/sglang 08edc506b2da77e7fa8a6a3a1ec7a704241703d4. Per role, the flags that are not
# where a node listens or meets its group (--host, --port, --dist-init-addr, --nnodes, --node-rank,
# --disaggregation-ib-device ${device_name}).
DOCS_PD = {
    "prefill": ["--disaggregation-mode", "prefill", "--trust-remote-code", "--tp-size", "16", "--dp-size", "8",
                "--enable-dp-attention", "--moe-a2a-backend", "deepep", "--mem-fraction-static", "0.8"],
    "decode": ["--disaggregation-mode", "decode", "--trust-remote-code", "--tp-size", "16", "--dp-size", "8",
               "--enable-dp-attention", "--moe-a2a-backend", "deepep", "--mem-fraction-static", "0.8",
               "--max-running-requests", "128"],
}
#: Where the plan of one 8x H200 host per role differs from the two-node example, and why.
DOCS_PD_DIFFERENCES = {
    "--trust-remote-code": "SGLang ships DeepseekV3ForCausalLM: no repository code runs unless the operator consents "
                           "(sglang_trust_remote_code)",
    "--tp-size": "one 8-GPU host per role holds the FP8 weights: TP 8, not 16 over two nodes",
    "--dp-size": "attention DP over the host's 8 GPUs, spelled --attn-dp-size 8 from 0.5.23",
    "--enable-dp-attention": "0.5.23 spells attention DP --attn-dp-size",
    "--moe-a2a-backend": "DeepEP needs its own kernels (deep_ep) and RDMA between the nodes of an EP group; the "
                         "plan runs no DeepEP",
    "--mem-fraction-static": "sized by the plan from the checkpoint and the GPU (SGLang's own default otherwise)",
    "--max-running-requests": "128 is DeepEP low-latency's dispatch buffer per rank "
                              "(SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK, 0.5.23 srt/environ.py); "
                              "without DeepEP the plan sizes the cap itself",
}


def _pairs(argv: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, word in enumerate(argv):
        if word.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[word] = nxt if nxt is not None and not nxt.startswith("--") else None
    return out


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_sglangs_deepseek_pd_example_is_reproduced_or_each_difference_named(role):
    plans = plan_all(_host("p1", "prefill"), _host("d1", "decode"))
    plan = plans["p1" if role == "prefill" else "d1"]
    assert isinstance(plan, Plan), plan
    mine, docs = _pairs(plan.argv), _pairs(DOCS_PD[role])
    differing = sorted(flag for flag, value in docs.items() if mine.get(flag, "absent") != value)
    assert differing == sorted(f for f in DOCS_PD_DIFFERENCES if f in docs), differing
    assert mine["--disaggregation-mode"] == role and mine["--attn-dp-size"] == "8" and mine["--tp-size"] == "8"


def test_plan_shows_each_role_and_the_gateway_in_prefill_decode_mode(tmp_path):
    model_dir = FIXTURES / "deepseek-ai--DeepSeek-R1"
    common = {"sglang_model": R1.model, "sglang_model_dir": str(model_dir), "sglang_gpus": H200,
              "sglang_gateways": ["gw"]}
    inventory = tmp_path / "pd.py"
    inventory.write_text(f"gw = [('gw', {{'ssh_hostname': '10.0.0.1', 'sglang_gateway': {{'decode_policy': "
                         f"'power_of_two'}}}})]\n"
                         f"p = [('p1', {{**{common!r}, 'ssh_hostname': '10.0.0.11', 'sglang_role': 'prefill', "
                         f"'sglang_intents': {{'disaggregation_bootstrap_port': 9000}}}})]\n"
                         f"d = [('d1', {{**{common!r}, 'ssh_hostname': '10.0.0.12', 'sglang_role': 'decode'}})]\n")
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["plan", str(inventory)], out=out, err=err) == 0, err.getvalue()
    text, said = out.getvalue(), err.getvalue()
    assert "--disaggregation-mode prefill" in text and "--disaggregation-mode decode" in text
    assert text.count("PD split  gateway gw: 1 prefill : 1 decode server(s)") == 2
    # the gateway: prefill/decode mode, each worker by its role, the prefill server's bootstrap port
    assert "2 worker(s), prefill/decode mode" in text
    assert "worker http://10.0.0.11:30000 (prefill, bootstrap port 9000)" in text
    assert "worker http://10.0.0.12:30000 (decode)" in text
    assert ("--pd-disaggregation --decode-policy power_of_two --prefill http://10.0.0.11:30000 9000 "
            "--decode http://10.0.0.12:30000") in text
    assert "--worker-urls" not in text and "error" not in said


# ---- the split of a gateway's servers (plan/pd_split.py) ----------------------------------------

def test_the_best_split_serves_the_most_requests_and_prefers_fewer_prefill_servers_on_a_tie():
    assert pd_split.best_split(10.0, 5.0, 3) == (1, 10.0)  # 1 x 10 against 2 x 5
    assert pd_split.best_split(1.0, 9.0, 10) == (9, 1.0 * 9)
    assert pd_split.best_split(4.0, 4.0, 4) == (2, 8.0)


def test_a_split_far_from_the_suggestion_is_a_warning_and_every_role_plan_says_the_split():
    hosts = [_host("p1", "prefill"), *(_host(f"d{i}", "decode") for i in range(3))]
    plans = plan_all(*hosts)
    p1 = plans["p1"]
    assert isinstance(p1, Plan) and p1.pd_split is not None
    assert p1.pd_split.startswith("gateway gw: 1 prefill : 3 decode server(s) for 2,000 prompt / 500 output tokens")
    assert "2 : 2 would serve" in p1.pd_split
    assert all(isinstance(p, Plan) and p.pd_split == p1.pd_split and f"PD split: {p1.pd_split}" in p.warnings
               for p in plans.values())
    # the decode server runs no more streams than the plan lets it (max_running_requests)
    assert f"at {p1.intents['max_running_requests'].value} stream(s)" in p1.pd_split
    even = plan_all(_host("p1", "prefill"), _host("d1", "decode"))["p1"]
    assert isinstance(even, Plan) and "the most these 2 servers can" in (even.pd_split or "")
    assert not [w for w in even.warnings if w.startswith("PD split")]


def test_each_replica_is_a_server_of_the_split_and_a_tpot_no_stream_meets_gives_no_suggestion():
    hosts = [(n, {}, {"sglang_model": QWEN3_32B.model, "sglang_gpus": H200, "sglang_gateways": ["gw"],
                      "sglang_role": r, "sglang_intents": {"tp_size": 1}})
             for n, r in (("p1", "prefill"), ("d1", "decode"))]
    p1 = plan_inventory(hosts, facts={"p1": QWEN3_32B, "d1": QWEN3_32B})[0]
    assert isinstance(p1, Plan) and "8 prefill : 8 decode server(s)" in (p1.pd_split or "")
    strict = [(n, g, {**d, "sglang_objective": {"tpot_ms": 0.5}}) for n, g, d in hosts]
    p1 = plan_inventory(strict, facts={"p1": QWEN3_32B, "d1": QWEN3_32B})[0]
    assert isinstance(p1, Plan) and "no suggestion" in (p1.pd_split or "") and "TPOT limit of 0.5 ms" in p1.pd_split
    assert not [w for w in p1.warnings if w.startswith("PD split")]


def test_plan_json_and_explain_carry_the_split():
    plans = plan_all(_host("p1", "prefill"), _host("d1", "decode"))
    p1 = plans["p1"]
    assert isinstance(p1, Plan)
    assert p1.as_dict()["pd_split"] == p1.pd_split
    out = io.StringIO()
    print_plans([(p1, render(p1, {}))], True, out, {})
    assert f"PD split  {p1.pd_split}" in out.getvalue()


def test_a_role_that_is_not_a_word_is_refused_on_its_host_and_the_gateways_other_servers_still_plan():
    # an unhashable role once broke the cross-role check of the whole inventory (a TypeError)
    plans = plan_all(_host("p1", "prefill"), _host("d1", "decode"), ("x1", {}, {**_host("x1", None)[2],
                                                                              "sglang_role": []}))
    assert isinstance(plans["x1"], PlanError) and plans["x1"].field == "sglang_role"
    assert isinstance(plans["p1"], Plan) and isinstance(plans["d1"], Plan)


@pytest.mark.parametrize("backend, engine", [("mooncake", "mooncake-transfer-engine==0.3.13.post1"),
                                             ("mooncake_tcp", "mooncake-transfer-engine==0.3.13.post1"),
                                             ("nixl", "nixl==1.5.2")])
def test_each_role_server_names_the_transfer_engine_its_venv_gets(backend, engine):
    intents = {"disaggregation_transfer_backend": backend}
    plans = plan_all(_host("p1", "prefill", sglang_intents=intents), _host("d1", "decode", sglang_intents=intents))
    for plan in plans.values():
        assert isinstance(plan, Plan) and plan.transfer_engine is not None
        assert plan.transfer_engine.requirement == engine and plan.as_dict()["transfer_engine"] == engine
        out = io.StringIO()
        print_plans([(plan, render(plan, {}))], False, out, {})
        assert f"KV engine {engine} into {plan.venv}" in out.getvalue()
    pinned = plan_all(_host("p1", "prefill", sglang_transfer_engine_version="0.3.10.post1"), _host("d1", "decode"))
    assert pinned["p1"].transfer_engine.requirement == "mooncake-transfer-engine==0.3.10.post1"  # type: ignore[union-attr]
    alone = plan_all(("w1", {}, {"sglang_model": R1.model, "sglang_gpus": H200}))["w1"]
    assert isinstance(alone, Plan) and alone.transfer_engine is None and "transfer_engine" not in alone.as_dict()
    refused = plan_all(("w1", {}, {"sglang_model": R1.model, "sglang_gpus": H200,
                                   "sglang_transfer_engine_version": "1.0"}))["w1"]
    assert isinstance(refused, PlanError) and refused.field == "sglang_transfer_engine_version"


@pytest.mark.parametrize("bad", ["x y", "", "0.3;rm -rf /", 3, ["0.3.13"]])
def test_a_bad_transfer_engine_version_is_refused_naming_the_field(bad):
    plans = plan_all(_host("p1", "prefill", sglang_transfer_engine_version=bad), _host("d1", "decode"))
    refused = plans["p1"]
    assert isinstance(refused, PlanError) and refused.field == "sglang_transfer_engine_version"
    assert "must be a version such as 0.3.13.post1" in refused.message
