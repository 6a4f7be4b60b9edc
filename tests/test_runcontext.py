"""The one typed context a runner (rollout, tune) hands the deploy it starts (sglang_deploy/runcontext.py):
written and read back whole, and a file that is not one a runner wrote refused naming the field."""

from __future__ import annotations

import json

import pytest

from sglang_deploy import runcontext
from sglang_deploy.runcontext import RUN_ENV, RunContext, RunContextError, from_environ, parse, write


def test_a_plain_pyinfra_run_has_the_empty_context():
    assert from_environ({}) == RunContext() and not RunContext().regate


def test_what_a_runner_writes_the_deploy_reads_back(tmp_path):
    ctx = RunContext(results_file=str(tmp_path / "r.jsonl"), max_unavailable="25%", trial_file=str(tmp_path / "t"),
                     regate=True, tuning_file=str(tmp_path / "x.tuning.yaml"))
    env = write(ctx, str(tmp_path / "run.json"))
    assert env == {RUN_ENV: str(tmp_path / "run.json")}
    assert (tmp_path / "run.json").stat().st_mode & 0o777 == 0o600
    assert from_environ(env) == ctx
    # rewritten (the tuner's next trial): read again
    write(ctx.merged(trial_file=str(tmp_path / "t2"), regate=False), str(tmp_path / "run.json"))
    assert from_environ(env).trial_file == str(tmp_path / "t2") and not from_environ(env).regate


@pytest.mark.parametrize("doc, named", [
    ("[]", "must be a JSON object"),
    ("{", "not JSON"),
    (json.dumps({"trial": "/x"}), "unknown key(s) 'trial'"),
    (json.dumps({"regate": "1"}), "regate: must be true or false"),
    (json.dumps({"results_file": "results.jsonl"}), "results_file: must be an absolute path"),
    (json.dumps({"max_unavailable": 3}), "max_unavailable: must be a non-empty string"),
    (json.dumps({"state_file": ""}), "state_file: must be a non-empty string"),
])
def test_a_run_file_a_runner_did_not_write_is_refused_naming_the_field(doc, named):
    with pytest.raises(RunContextError) as err:
        parse(doc)
    assert named in str(err.value) and str(err.value).startswith(RUN_ENV) and "\n" not in str(err.value)


def test_a_run_file_that_cannot_be_read_says_so(tmp_path):
    with pytest.raises(RunContextError, match="cannot read"):
        from_environ({RUN_ENV: str(tmp_path / "absent.json")})
    big = tmp_path / "big.json"
    big.write_text(" " * (runcontext.MAX_BYTES + 1))
    with pytest.raises(RunContextError, match=f"more than the {runcontext.MAX_BYTES} accepted"):
        from_environ({RUN_ENV: str(big)})


def test_a_fifo_named_as_the_run_file_is_refused_not_read(tmp_path):
    """A FIFO would block the deploy's read forever: it is refused before anything is read."""
    import os

    fifo = tmp_path / "run.fifo"
    os.mkfifo(fifo)
    with pytest.raises(RunContextError, match=RUN_ENV):
        from_environ({RUN_ENV: str(fifo)})
