"""The serving gap and its phases from the restart's stamps and the server's own log lines."""

from sglang_deploy.downtime import log_stamps, measure, parse_stamps, stalled_in, summary

# Journal lines as `journalctl -o short-unix` prints them, with the texts the released SGLang logs
# (0.5.23: model_runner.py, kv_cache_configurator.py, cuda_graph_setup.py, http_server.py; the
# 0.5.9 spelling of the graph line from its model_runner.py), two TP ranks each.
JOURNAL = """\
104.100000 gpu-1 python[81]: [2026-12-06 10:00:04 TP0] Load weight end. elapsed=3.10 s, type=Qwen3ForCausalLM
104.900000 gpu-1 python[82]: [2026-12-06 10:00:04 TP1] Load weight end. elapsed=3.90 s, type=Qwen3ForCausalLM
105.500000 gpu-1 python[81]: [2026-12-06 10:00:05 TP0] Memory pool end. avail mem=12.31 GB
105.600000 gpu-1 python[82]: [2026-12-06 10:00:05 TP1] Memory pool end. avail mem=12.30 GB
120.000000 gpu-1 python[81]: [TP0] Capture target decode CUDA graph end. elapsed=14.20 s, mem usage=0.51 GB
121.000000 gpu-1 python[82]: [TP1] Capture cuda graph end. Time elapsed: 15.10 s. mem usage=0.51 GB.
122.500000 gpu-1 python[80]: The server is fired up and ready to roll!
130.000000 gpu-1 python[82]: [TP1] Capture target decode CUDA graph end. elapsed=1.00 s (a later line)
not a line
nan gpu-1 python[1]: Load weight end.
99.000000 gpu-1 python[1]: Load weight end. (the old server's)
"""


def test_gap_and_phases_from_the_host_stamps_and_the_log():
    text = ("last_answer 100.0\nstopping 100.1\nstopped 100.6\ngpus_free 100.8\nstarted 100.9\n"
            "clock 130.0\nbogus line\nready nan\n")
    stamps = parse_stamps(text)
    assert "clock" not in stamps and "ready" not in stamps
    logged = log_stamps(JOURNAL.splitlines(), since=stamps["started"])
    # the last rank's line of each phase, up to the first "fired up"
    assert logged == {"loaded": 104.9, "kv_ready": 105.6, "graphs_captured": 121.0, "fired_up": 122.5}
    d = measure({**stamps, **logged, "ready": 123.0})
    assert d["serving_gap_s"] == 23.0 and d["start_s"] == 22.1
    assert d["phases"] == {"stop": 0.5, "gpus_free": 0.2, "start": 0.1, "load": 4.0, "kv_cache": 0.7,
                           "cuda_graphs": 15.4, "warmup": 1.5, "ready": 0.5}
    assert round(sum(d["phases"].values()), 3) == round(d["ready"] - stamps["stopping"], 3)
    assert summary(d) == ("serving gap 23.00 s (stop 0.50, GPUs free 0.20, start 0.10, load 4.00, KV cache 0.70, "
                          "CUDA graphs 15.40, warm-up 1.50, ready 0.50)")


def test_a_missing_line_moves_its_time_to_the_next_phase_and_without_an_old_server_no_gap():
    d = measure({"stopping": 1.0, "stopped": 1.5, "gpus_free": 1.5, "started": 2.0, "kv_ready": 4.0, "ready": 5.0})
    assert d["phases"]["load"] is None and d["phases"]["kv_cache"] == 2.0
    assert d["phases"]["cuda_graphs"] is None and d["phases"]["ready"] == 1.0
    assert d["serving_gap_s"] is None and d["start_s"] == 3.0 and not d["old_server_answered"]
    assert summary(d).startswith("serving gap unknown (no old server answered)")
    assert summary(None) == "serving gap not measured"


def test_a_stalled_start_names_its_phase_and_the_line_it_never_wrote():
    base = {"started": 100.0, "loaded": 130.0, "kv_ready": 131.0}
    assert stalled_in(base, 400.0) == (
        "stalled in CUDA graphs (capturing CUDA graphs, compiling kernels where the caches are cold): KV cache "
        "done 31 s after the start, nothing after it for 269 s, no 'Capture ... graph end' in its log")
    assert stalled_in({"started": 100.0}, 160.0).startswith("stalled in load (reading the weights): the process "
                                                            "started, nothing after it for 60 s")
    assert "stalled in warm-up" in stalled_in({**base, "graphs_captured": 140.0}, 200.0)
    assert stalled_in({**base, "graphs_captured": 140.0, "fired_up": 141.0}, 200.0).startswith(
        "stalled in ready (answering the health check)")
    assert stalled_in({}, 1.0).startswith("no stamp of the process start")
