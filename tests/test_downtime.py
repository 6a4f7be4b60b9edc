"""The serving gap and its phases from the restart's stamps."""

from sglang_deploy.downtime import measure, parse_stamps, summary


def test_gap_and_phases_from_the_host_stamps():
    text = ("last_answer 100.0\nstopping 100.1\nstopped 100.6\ngpus_free 100.8\nstarted 100.9\n"
            "clock 130.0\nloaded 104.9\nbogus line\n")
    stamps = parse_stamps(text)
    assert "clock" not in stamps and stamps["loaded"] == 104.9
    d = measure({**stamps, "ready": 106.0})
    assert d["serving_gap_s"] == 6.0
    assert d["phases"] == {"stop": 0.5, "gpus_free": 0.2, "start": 0.1, "load": 4.0, "ready": 1.1}
    assert summary(d) == "serving gap 6.00 s (stop 0.50, GPUs free 0.20, start 0.10, load 4.00, ready 1.10)"


def test_without_a_load_line_ready_counts_from_the_start_and_without_an_old_server_no_gap():
    d = measure({"stopping": 1.0, "stopped": 1.5, "gpus_free": 1.5, "started": 2.0, "ready": 5.0})
    assert d["phases"]["load"] is None and d["phases"]["ready"] == 3.0
    assert d["serving_gap_s"] is None and not d["old_server_answered"]
    assert summary(d).startswith("serving gap unknown (no old server answered)")
    assert summary(None) == "serving gap not measured"
