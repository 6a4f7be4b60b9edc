"""``status --verify-weights``, the pure part (sglang_deploy/status/): the host's re-hash
answer is data, checked for shape; a mismatch or a missing file is drift naming the file (exit 1);
a check that could not finish is a warning, never ``ok`` for the weights."""

from __future__ import annotations

import json

from sglang_deploy import status
from sglang_deploy.commands import status_table
from tests.test_status import PLANNED, fact_lines

SNAP = "/var/lib/sglang/models/models--Qwen--Qwen3-0.6B/snapshots/" + "c" * 40


def answer(**doc: object) -> str:
    base = {"served": SNAP, "files": 3, "bytes": 1000, "seconds": 0.1, "bad": [], "finished": True, "error": None}
    return "weights: noise before\n" + json.dumps({**base, **doc}) + "\n"


def row(text: str) -> status.Row:
    return status.build_row("gpu-1", status.parse_observed(fact_lines()), PLANNED,
                            weights=status.parse_weights_check(text))


def test_a_clean_snapshot_is_ok():
    r = row(answer())
    assert r.state == status.OK and r.drift["weights"] == "same" and status.exit_code([r]) == 0


def test_a_mismatch_and_a_missing_file_are_weights_drift_naming_the_file():
    r = row(answer(bad=[["model-00002.safetensors", "sha256 " + "a" * 64 + ", expected " + "b" * 64],
                        ["config.json", "missing"]]))
    assert r.state == status.DRIFTED and status.exit_code([r]) == 1
    assert r.drift["weights"] == "differs"
    assert f"weights drifted: {SNAP}/model-00002.safetensors: sha256" in "\n".join(r.problems)
    assert f"weights drifted: {SNAP}/config.json: missing" in r.problems
    cells = status_table.render_table([r]).splitlines()[1]
    assert "weights" in cells
    assert json.loads(status_table.rows_json([r]))[0]["drift"]["weights"] == "differs"


def test_many_bad_files_are_counted_not_all_listed():
    r = row(answer(bad=[[f"f{i}", "missing"] for i in range(50)]))
    assert len([p for p in r.problems if p.startswith("weights")]) == status.WEIGHTS_BAD_SHOWN + 1
    assert "30 more file(s)" in r.problems[-1]


def test_a_check_that_did_not_finish_is_unknown_and_said():
    r = row(answer(finished=False, error="the 60 s deadline passed after 1 of 3 files"))
    assert r.drift["weights"] == "unknown" and r.state == status.OK
    assert any("deadline passed" in w for w in r.warnings)


def test_no_store_snapshot_is_nothing_to_verify():
    r = row('{"served": null}')
    assert "weights" not in r.drift and any("nothing to verify" in w for w in r.warnings)


def test_a_hostile_answer_is_refused_not_shown():
    for text in ["", "not json", "[1]", '{"served": 5}', "[" * 10_000 + "]" * 10_000,
                 '{"served": "/x", "bad": "nope", "files": -1, "bytes": 1e999, "seconds": NaN}']:
        check = status.parse_weights_check(text)
        assert check.bad == () and check.files == 0
    check = status.parse_weights_check(answer(bad=[["a\x1b[2Jb", "evil\x1b]0;title\x07"], [1, 2], "x"],
                                              files=True, seconds=-1))
    assert len(check.bad) == 1 and "\x1b" not in repr(check.bad[0]).replace("\\x1b", "")
    assert "\x1b" not in check.bad[0][0] + check.bad[0][1] and check.files == 0 and check.seconds is None
