"""The simulated server's performance model (sglang_deploy/simulator/sglang_server/src/sglang/_sim/perf.py
through sglang_deploy/simulator/perf_model.py): its arithmetic, its validation, the reference
deployment's fixture, and the simulated server serving it."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any, Dict

import pytest

from sglang_deploy.simulator import perf_model as pm

ROOT = Path(__file__).resolve().parent.parent
A6000 = ROOT / "sglang_deploy" / "simulator" / "perf" / "a6000_qwen36.yaml"


def spec(steps: int, topk: int = 1, draft: int = 0, **extra: Any) -> Dict[str, Any]:
    return dict(speculative_algorithm="EAGLE", speculative_num_steps=steps, speculative_eagle_topk=topk,
                speculative_num_draft_tokens=draft or steps + 1, **extra)


# ---------------------------------------------------------------------------
# the acceptance model
# ---------------------------------------------------------------------------


def test_chain_acceptance_is_the_geometric_sum():
    m = pm.load_model({"accept_alpha": 0.8})
    # 1 + 0.8 + 0.64 + 0.512, by hand
    assert m.accept_length(spec(3)) == pytest.approx(2.952)
    assert m.accept_length(spec(1)) == pytest.approx(1.8)
    # top-k 1 forces draft tokens to steps + 1 (SGLang), whatever was asked
    assert m.accept_length(spec(3, 1, 2)) == pytest.approx(2.952)


def test_topk_widens_each_level_within_the_draft_token_budget():
    m = pm.load_model({"accept_alpha": 0.8})
    # top-k 2: each level right with 1 - 0.2^2 = 0.96; 3 levels need 6 tree nodes + the root
    assert m.accept_length(spec(3, 2, 7)) == pytest.approx(1 + 0.96 + 0.96 ** 2 + 0.96 ** 3)
    # 4 draft tokens = 3 nodes: levels get 2 and 1 candidates
    assert m.accept_length(spec(3, 2, 4)) == pytest.approx(1 + 0.96 + 0.96 * 0.8)
    # a chain limited by the draft tokens: NGRAM drafts draft - 1 deep
    ngram = {"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 3}
    assert m.accept_length(ngram) == pytest.approx(1.8 + 0.64)


def test_acceptance_decay_per_level():
    m = pm.load_model({"accept_alpha": 0.9, "accept_decay": 0.5})
    # levels accept 0.9, 0.45, 0.225
    assert m.accept_length(spec(3)) == pytest.approx(1 + 0.9 + 0.9 * 0.45 + 0.9 * 0.45 * 0.225)


def test_rate_has_an_interior_optimum_in_steps_where_planted():
    m = pm.load_model({"decode_tok_s": 20, "accept_alpha": 0.8, "draft_step_cost": 0.1,
                       "verify_token_cost": 0.05})
    rates = {s: m.single_stream_rate(spec(s)) for s in range(1, 9)}
    # steps 3: 20 * 2.952 / (1 + 0.3 + 0.2), by hand
    assert rates[3] == pytest.approx(20 * 2.952 / 1.5)
    best = max(rates, key=rates.get)
    assert 1 < best < 8 and rates[best] > rates[best - 1] and rates[best] > rates[best + 1]
    # without costs more steps always help: no interior optimum
    free = pm.load_model({"decode_tok_s": 20, "accept_alpha": 0.8})
    assert [free.single_stream_rate(spec(s)) for s in range(1, 9)] == sorted(
        free.single_stream_rate(spec(s)) for s in range(1, 9))


# ---------------------------------------------------------------------------
# batching, memory, TTFT, factors
# ---------------------------------------------------------------------------


def test_batch_above_the_cuda_graph_size_costs_the_penalty():
    m = pm.load_model({"decode_tok_s": 100, "batch_slowdown": 0.1, "over_graph_bs_factor": 2.0})
    args = {"cuda_graph_max_bs": 4}
    rng = random.Random(0)
    assert m.request(args, 0, 10, rng)[1] == pytest.approx(100)
    assert m.request(args, 3, 10, rng)[1] == pytest.approx(100 / 1.3)  # batch 4: inside the graph
    assert m.request(args, 4, 10, rng)[1] == pytest.approx(100 / 1.4 / 2)  # batch 5: eager
    # 0.5.15+ name it cuda_graph_max_bs_decode / cuda_graph_config.decode.max_bs
    assert m.request({"cuda_graph_config": {"decode": {"max_bs": 4}}}, 4, 10, rng)[1] == pytest.approx(100 / 2.8)
    # no graph size in args nor default_cuda_graph_max_bs: no penalty
    assert m.request({}, 4, 10, rng)[1] == pytest.approx(100 / 1.4)


def test_max_running_requests_queues_and_ttft_grows():
    m = pm.load_model({"decode_tok_s": 10, "ttft_s": 0.5})
    args = {"max_running_requests": 2}
    rng = random.Random(0)
    ttft0, rate0, _ = m.request(args, 1, 10, rng, max_tokens=11)
    assert ttft0 == pytest.approx(0.5) and rate0 == pytest.approx(10)
    ttft, rate, _ = m.request(args, 2, 10, rng, max_tokens=11)  # third in flight: waits one service time
    assert ttft == pytest.approx(0.5 + (0.5 + 1.0)) and rate == pytest.approx(10)
    ttft, _, _ = m.request(args, 4, 10, rng, max_tokens=11)  # fifth: two rounds
    assert ttft == pytest.approx(0.5 + 2 * 1.5)
    e = m.expected(args, 4, 10, 11)
    assert e["running"] == 2 and e["ttft_s"] == pytest.approx(0.5 + 1.5)
    assert e["output_tok_s"] == pytest.approx(2 * 11 / 1.5)


def test_kv_capacity_from_mem_fraction_static():
    m = pm.load_model({"kv_tokens_per_fraction": 10000, "weights_fraction": 0.5})
    # (0.7 - 0.5) * 10000 = 2000 tokens; 1000-token requests: 2 at once
    assert m.capacity({"mem_fraction_static": 0.7}, 1000) == 2
    assert m.capacity({"mem_fraction_static": 0.9}, 1000) == 4
    assert m.capacity({"mem_fraction_static": 0.9, "max_running_requests": 3}, 1000) == 3
    assert m.expected({"mem_fraction_static": 0.7}, 8, 500, 500)["running"] == 2


def test_ttft_prefill_chunks_and_graph():
    m = pm.load_model({"ttft_s": 0.1, "prefill_tok_s": 1000, "chunk_overhead_s": 0.05,
                       "prefill_graph_ttft_factor": 0.5})
    off = {"cuda_graph_config": {"prefill": {"backend": "disabled"}}, "chunked_prefill_size": 1000}
    # 0.1 + 2500 / 1000 + 3 chunks * 0.05
    assert m.base_ttft(off, 2500) == pytest.approx(2.75)
    on = dict(off, cuda_graph_config={"prefill": {"backend": "breakable"}})
    assert m.base_ttft(on, 2500) == pytest.approx(2.75 * 0.5)
    assert m.base_ttft({"enable_piecewise_cuda_graph": True, "chunked_prefill_size": -1}, 2500) == \
        pytest.approx((0.1 + 2.5 + 0.05) * 0.5)  # 0.5.9's spelling; chunking off: one chunk


def test_custom_allreduce_off_slows_decode_only_at_tp_above_1():
    m = pm.load_model({"decode_tok_s": 30, "no_custom_allreduce_factor": 1.5})
    assert m.single_stream_rate({"tp_size": 2, "disable_custom_all_reduce": True}) == pytest.approx(20)
    assert m.single_stream_rate({"tp_size": 2, "disable_custom_all_reduce": False}) == pytest.approx(30)
    assert m.single_stream_rate({"tp_size": 1, "disable_custom_all_reduce": True}) == pytest.approx(30)


# ---------------------------------------------------------------------------
# failures
# ---------------------------------------------------------------------------


def test_oom_above_the_threshold_and_too_low_below_the_floor():
    m = pm.load_model({"oom_above_mem_fraction": 0.9, "graph_mem_fraction_per_bs": 0.001,
                       "weights_fraction": 0.5, "mem_fraction_floor": 0.6})
    assert m.startup_failure({"mem_fraction_static": 0.85, "cuda_graph_max_bs": 32}) is None
    oom = m.startup_failure({"mem_fraction_static": 0.88, "cuda_graph_max_bs": 32})  # 0.9 - 0.032
    assert oom.startswith("Exception: Capture cuda graph failed: CUDA out of memory.")
    assert "set --cuda-graph-max-bs to a smaller value" in oom
    assert m.startup_failure({"mem_fraction_static": 0.88, "cuda_graph_max_bs": 16}) is None
    new = m.startup_failure({"mem_fraction_static": 0.95, "cuda_graph_max_bs_decode": None})
    assert "--cuda-graph-max-bs-decode" in new
    low = m.startup_failure({"mem_fraction_static": 0.55})
    assert low.startswith("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")
    assert m.startup_failure({"mem_fraction_static": 0.45}).startswith("RuntimeError: Not enough memory")


def test_crash_when_matches_partial_args():
    m = pm.load_model({"crash_when": [{"speculative_eagle_topk": 4, "speculative_algorithm": "eagle"}],
                       "crash_after_s": 3})
    assert m.crash_after_s(spec(3, 4, 8)) == 3.0
    assert m.startup_failure(spec(3, 4, 8)) is None
    assert m.crash_after_s(spec(3, 2, 8)) is None and m.crash_after_s({}) is None
    at_start = pm.load_model({"crash_when": [{"disable_custom_all_reduce": True}], "crash_after_s": 0})
    msg = at_start.startup_failure({"disable_custom_all_reduce": True})
    assert "Scheduler hit an exception" in msg and "Received sigquit" in msg
    assert at_start.startup_failure({"disable_custom_all_reduce": False}) is None


# ---------------------------------------------------------------------------
# noise, neutrality, validation
# ---------------------------------------------------------------------------


def test_noise_is_seeded_and_reproducible():
    m = pm.load_model({"decode_tok_s": 40, "noise_sigma": 0.1, "noise_seed": 7})
    a = [m.request({}, 0, 10, r)[:2] for r in [m.rng()] for _ in range(50)]
    r2 = m.rng()
    b = [m.request({}, 0, 10, r2)[:2] for _ in range(50)]
    assert a == b
    rates = [x[1] for x in a]
    assert len(set(rates)) == 50
    assert 0.85 < math.exp(sum(math.log(x / 40) for x in rates) / 50) < 1.15
    other = pm.load_model({"decode_tok_s": 40, "noise_sigma": 0.1, "noise_seed": 8})
    r3 = other.rng()
    assert [other.request({}, 0, 10, r3)[1] for _ in range(50)] != rates


def test_defaults_are_neutral():
    m = pm.load_model({})
    rng = random.Random(0)
    state = rng.getstate()
    busy = dict(spec(5, 4, 16), mem_fraction_static=0.99, cuda_graph_max_bs=1, max_running_requests=None,
                tp_size=8, disable_custom_all_reduce=True, chunked_prefill_size=16,
                cuda_graph_config={"prefill": {"backend": "breakable"}})
    for active in (0, 1, 100):
        ttft, rate, accept = m.request(busy, active, 5000, rng)
        assert (ttft, rate) == (0.05, 50.0)
    assert rng.getstate() == state  # no noise draws
    # the accept length keeps the server's old rule: min(draft tokens, 1 + steps / 2)
    assert m.accept_length(spec(3)) == 2.5 and m.accept_length({}) is None
    assert m.startup_failure(busy) is None and m.crash_after_s(busy) is None
    assert pm.load_model({"accept_length": 3.2}).accept_length(spec(3)) == 3.2


@pytest.mark.parametrize("mapping, key", [
    ({"decode_tok_s": 0}, "performance.decode_tok_s"),
    ({"accept_alpha": 1.5}, "performance.accept_alpha"),
    ({"noise_sigma": -1}, "performance.noise_sigma"),
    ({"noise_seed": 1.5}, "performance.noise_seed"),
    ({"over_graph_bs_factor": 0.5}, "performance.over_graph_bs_factor"),
    ({"crash_when": [{}]}, "performance.crash_when"),
    ({"crash_when": {"tp_size": 2}}, "performance.crash_when"),
    ({"default_cuda_graph_max_bs": 2.5}, "performance.default_cuda_graph_max_bs"),
    ({"prefill_tok_s": "fast"}, "performance.prefill_tok_s"),
    ({"decode_tok_s": True}, "performance.decode_tok_s"),
    ({"decode_tokens": 3}, "decode_tokens"),
])
def test_bad_values_name_the_key(mapping, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        pm.load_model(mapping)


def test_yaml_and_behaviour_fragment(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("decode_tok_s: 33\ncrash_when:\n  - {tp_size: 4}\n")
    assert pm.read_yaml(f) == {"decode_tok_s": 33, "crash_when": [{"tp_size": 4}]}
    assert pm.load_yaml(f).single_stream_rate({}) == 33
    assert pm.behaviour(pm.read_yaml(f)) == {"performance": {"decode_tok_s": 33, "crash_when": [{"tp_size": 4}]}}
    f.write_text("accept_alpha: 2\n")
    with pytest.raises(ValueError, match=r"m\.yaml: performance\.accept_alpha"):
        pm.load_yaml(f)
    with pytest.raises(ValueError, match="performance.accept_alpha"):
        pm.behaviour({"accept_alpha": 2})


# ---------------------------------------------------------------------------
# the reference deployment's fixture
# ---------------------------------------------------------------------------


def test_a6000_fixture_matches_the_operator_and_plants_a_better_setting():
    m = pm.load_yaml(A6000)
    base = {"tp_size": 2, "mem_fraction_static": 0.88}
    one = m.expected(dict(spec(1), **base), 1, 256, 256)["decode_tok_s"]
    profile = m.expected(dict(spec(3, 1, 4), **base), 1, 256, 256)["decode_tok_s"]
    assert 33 <= one <= 37  # operator: ~35 tok/s at 1-step MTP
    assert 50 <= profile <= 57  # operator: 50-57 tok/s at 3 steps, 4 draft tokens
    assert m.startup_failure(dict(spec(3), **base)) is None  # the operator's 0.88 starts
    space = {(s, k, d): m.single_stream_rate(dict(spec(s, k, d), **base))
             for s in range(1, 8) for k in (1, 2, 4) for d in range(s + 1, min(16, s * k + 1) + 1)
             if k > 1 or d == s + 1}
    best = max(space, key=space.get)
    assert best != (3, 1, 4) and space[best] > 1.08 * profile
    chain = {s: space[(s, 1, s + 1)] for s in range(1, 8)}
    assert max(chain, key=chain.get) == 4  # along top-k 1: 4 steps, an interior optimum


def test_server_args_parse_and_resolve_like_the_server():
    got = pm.server_args(["--model-path", "m", "--speculative-algorithm", "nextn", "--speculative-num-steps", "2",
                          "--tp-size", "2", "--disable-custom-all-reduce"], "0.5.23")
    assert (got["speculative_algorithm"], got["speculative_num_steps"], got["speculative_num_draft_tokens"]) == \
        ("EAGLE", 2, 3)
    assert got["cuda_graph_config"]["prefill"]["backend"] == "breakable"
    assert got["tp_size"] == 2 and got["disable_custom_all_reduce"] is True
    assert got["mem_fraction_static"] == 0.85  # the behaviour file's default
    m = pm.load_model({"decode_tok_s": 20, "accept_alpha": 0.5, "no_custom_allreduce_factor": 2})
    assert m.single_stream_rate(got) == pytest.approx(20 * 1.75 / 2)
    old = pm.server_args(["--model-path", "m", "--enable-piecewise-cuda-graph"], "0.5.9",
                         behaviour={"default_mem_fraction_static": 0.7})
    assert old["enable_piecewise_cuda_graph"] is True and old["mem_fraction_static"] == 0.7
    with pytest.raises(ValueError, match="unrecognized arguments: --no-such-flag"):
        pm.server_args(["--model-path", "m", "--no-such-flag"], "0.5.23")


# ---------------------------------------------------------------------------
# the simulated server serving a performance model
# ---------------------------------------------------------------------------

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import zipfile  # noqa: E402

import httpx  # noqa: E402

from tests.conftest import free_port  # noqa: E402

VERSION = "0.5.23"
#: How far a rate measured against the running stand-in may stray from the model's figure here: the
#: model's arithmetic is tested exactly above; a client on a 2-core machine under load reads tokens
#: late (tens of ms over a one-second stream). Wide enough for that, narrow enough that the figures
#: these tests tell apart (50 against 100 tok/s, 80 against 100) stay apart.
LOADED = 0.2


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The simulated sglang 0.5.23, unpacked: what PYTHONPATH points at."""
    from sglang_deploy.simulator.sglang_server import build

    tmp = tmp_path_factory.mktemp("simperf")
    wheel = build.build_wheel(VERSION, tmp / "wheel")
    out = tmp / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(out)
    return out


class Sim:
    def __init__(self, site: Path, tmp: Path, cfg: Dict[str, Any], argv: list):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cfg_path = tmp / f"sim-{self.port}.json"
        cfg_path.write_text(json.dumps(cfg))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SGLANG_", "HF_", "PIP_"))}
        env.update(PYTHONPATH=str(site), SGLANG_SIM_CONFIG=str(cfg_path))
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", *argv, "--port", str(self.port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)

    def wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.base, timeout=2) as c:
            while time.monotonic() < deadline:
                assert self.proc.poll() is None, self.proc.communicate()[1][-2000:]
                try:
                    if c.get("/health").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
        raise AssertionError("the simulated server never got ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()


@pytest.fixture
def sim(site, tmp_path):
    started = []

    def start(performance: Dict[str, Any], *argv: str, **cfg: Any) -> Sim:
        behaviour = dict({"startup_delay_s": 0.3}, **cfg, **pm.behaviour(performance))
        srv = Sim(site, tmp_path, behaviour, ["--model-path", "m", *argv])
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


def stream_rate(base: str, max_tokens: int) -> Dict[str, float]:
    """One streamed completion: decode tokens/s = (completion tokens - first chunk's one) / (last
    chunk's arrival - first chunk's), as a client measures it; TTFT; the number of chunks."""
    body = {"model": "m", "prompt": "hello " * 40, "max_tokens": max_tokens, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    times, usage = [], None
    with httpx.Client(base_url=base, timeout=30) as c:
        sent = time.monotonic()
        with c.stream("POST", "/v1/completions", json=body) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if event.get("usage"):
                    usage = event["usage"]["completion_tokens"]
                elif event.get("choices") and event["choices"][0].get("text"):
                    times.append(time.monotonic())
    assert usage == max_tokens
    return {"decode_tok_s": (max_tokens - 1) / (times[-1] - times[0]), "ttft_s": times[0] - sent,
            "chunks": len(times)}


def settled_rate(base: str, max_tokens: int, want: float, ttft: tuple[float, float] | None = None) -> Dict[str, float]:
    """stream_rate judged as a benchmark judges a figure: the best of up to three tries. Rate and
    TTFT are wall-clock readings, and a machine busy with other work (two busy loops beside the CI's
    lanes on 2 cores read a 0.1 s TTFT as 0.204 s) slows the client's reading, not the server's
    schedule. ``ttft``: (expected, absolute tolerance) a try must meet as well."""
    def meets(t: Dict[str, float]) -> bool:
        return (abs(t["decode_tok_s"] - want) / want < LOADED
                and (ttft is None or abs(t["ttft_s"] - ttft[0]) <= ttft[1]))

    tries = []
    for _ in range(3):
        tries.append(stream_rate(base, max_tokens))
        if meets(tries[-1]):
            return tries[-1]
    return min(tries, key=lambda t: abs(t["decode_tok_s"] - want))


def test_server_single_stream_rate_and_accept_length_follow_the_model(sim):
    perf = {"decode_tok_s": 100, "accept_alpha": 0.8, "draft_step_cost": 0.1, "verify_token_cost": 0.05,
            "ttft_s": 0.2, "prefill_tok_s": 500}
    argv = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--enable-metrics"]
    srv = sim(perf, *argv)
    want = pm.load_model(perf).expected(pm.server_args(["--model-path", "m", *argv], VERSION), 1, 60, 150)
    assert want["decode_tok_s"] == pytest.approx(100 * 2.952 / 1.5)
    srv.wait_ready()
    got = settled_rate(srv.base, 150, want["decode_tok_s"], (want["ttft_s"], max(0.1, LOADED * want["ttft_s"])))
    assert got["decode_tok_s"] == pytest.approx(want["decode_tok_s"], rel=LOADED)
    assert got["ttft_s"] == pytest.approx(want["ttft_s"], rel=LOADED, abs=0.1)  # 0.2 + 60 / 500
    # chunks average the accept length; /server_info reports it, with the measured rate
    assert (150 - 1) / (got["chunks"] - 1) == pytest.approx(2.952, abs=0.1)
    with httpx.Client(base_url=srv.base, timeout=5) as c:
        state = c.get("/server_info").json()["internal_states"][0]
    assert state["avg_spec_accept_length"] == pytest.approx(2.952, abs=0.1)
    assert state["last_gen_throughput"] == pytest.approx(want["decode_tok_s"], rel=LOADED)
    with httpx.Client(base_url=srv.base, timeout=5) as c:
        metrics = c.get("/metrics").text
    gauge = [ln for ln in metrics.splitlines() if ln.startswith("sglang:spec_accept_length{")]
    assert len(gauge) == 1 and float(gauge[0].split()[-1]) == pytest.approx(2.952, abs=0.1)


def test_server_concurrency_beyond_the_cuda_graph_batch_is_slower_per_stream(sim):
    perf = {"decode_tok_s": 100, "over_graph_bs_factor": 2.0}
    srv = sim(perf, "--cuda-graph-max-bs-decode", "2")
    srv.wait_ready()
    alone = settled_rate(srv.base, 80, 100)["decode_tok_s"]
    assert alone == pytest.approx(100, rel=LOADED)
    expected = [pytest.approx(50, rel=LOADED)] * 2 + [pytest.approx(100, rel=LOADED)] * 2
    for _ in range(3):  # the best of three rounds, as settled_rate
        rates: list = []

        def one(into: list = rates) -> None:
            into.append(stream_rate(srv.base, 80)["decode_tok_s"])

        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        if sorted(rates) == expected:
            break
    # the first two arrivals fit the CUDA graph (batch <= 2); the third and fourth run at half speed
    assert sorted(rates) == expected


def test_server_oom_config_exits_1_with_sglangs_message_before_ready(sim):
    srv = sim({"oom_above_mem_fraction": 0.9}, "--mem-fraction-static", "0.93", startup_delay_s=0.5)
    out, err = srv.proc.communicate(timeout=120)
    assert srv.proc.returncode == 1
    assert time.monotonic() - srv.started >= 0.5
    assert "Capture cuda graph failed: CUDA out of memory." in err
    assert "set --cuda-graph-max-bs-decode to a smaller value" in err
    assert "Uvicorn running" not in out  # it never served


def test_server_too_low_memory_and_planted_crash(sim):
    low = sim({"weights_fraction": 0.6}, "--mem-fraction-static", "0.55")
    crash = sim({"crash_when": [{"tp_size": 2, "speculative_algorithm": "EAGLE"}], "crash_after_s": 3.0},
                "--tp-size", "2", "--speculative-algorithm", "NEXTN")
    fine = sim({"crash_when": [{"tp_size": 2, "speculative_algorithm": "EAGLE"}], "crash_after_s": 3.0},
               "--tp-size", "2")
    _, err = low.proc.communicate(timeout=120)
    assert low.proc.returncode == 1
    assert "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." in err
    # the crash comes 3 s after the process started, ready or not: on a loaded machine (the first
    # wait above can take that long) it came before a poll saw /health, so none is asked for here
    _, err = crash.proc.communicate(timeout=120)
    assert crash.proc.returncode == 1 and "Scheduler hit an exception" in err and "crash_when" in err
    assert fine.proc.poll() is None


def test_server_refuses_a_bad_performance_value(site, tmp_path):
    srv = Sim(site, tmp_path, {"performance": {"accept_alpha": 3}}, ["--model-path", "m"])
    _, err = srv.proc.communicate(timeout=120)
    assert srv.proc.returncode == 1 and "performance.accept_alpha must be a number in [0, 1]" in err


def test_server_with_a_neutral_model_serves_the_files_figures(sim):
    srv = sim({}, decode_tok_s=80, ttft_s=0.1)
    srv.wait_ready()
    got = settled_rate(srv.base, 60, 80, (0.1, 0.1))
    assert got["decode_tok_s"] == pytest.approx(80, rel=LOADED)
    assert got["ttft_s"] == pytest.approx(0.1, abs=0.1)


def test_server_with_the_a6000_fixture_serves_the_operators_figure(sim):
    model = pm.read_yaml(A6000)
    argv = ["--tp-size", "2", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--mem-fraction-static", "0.88"]
    srv = sim(model, *argv)
    oom = sim(model, *argv[:-1], "0.95")
    want = pm.load_model(model).expected(pm.server_args(["--model-path", "m", *argv], VERSION), 1, 60, 80)
    assert 50 <= want["decode_tok_s"] <= 57
    srv.wait_ready()
    assert settled_rate(srv.base, 80, want["decode_tok_s"])["decode_tok_s"] == pytest.approx(want["decode_tok_s"],
                                                                                             rel=LOADED)
    _, err = oom.proc.communicate(timeout=120)
    assert oom.proc.returncode == 1 and "CUDA out of memory" in err
