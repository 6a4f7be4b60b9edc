"""The `status --diff` scrubber (sglang_deploy/status/redact.py) against systemd's own parser: on
one throwaway host, batches of Hypothesis-drawn env files (blanks around ``=``, quotes, backslash
continuations, comments, ``export `` prefixes, odd names, CR line ends: tests/envfile_syntax.py)
are each given to a transient service as its ``EnvironmentFile=`` (``systemd-run --wait --pipe``),
which prints the environment systemd set (``env -0``). Every variable systemd set whose name marks
a secret (the scrubber's rule: sglang_deploy/secrecy.py CREDENTIAL_NAME) must have no token of its
value left in the scrubber's output for that file; and the model of systemd's parser that the unit
tier holds the scrubber to (tests/test_redact_env_syntax.py) must agree with systemd on them.

One host boot, a few batches of files, one SSH command per batch: well under 90 s.
"""

from __future__ import annotations

import itertools
import shlex
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from sglang_deploy.secrecy import CREDENTIAL_NAME
from sglang_deploy.simulator.testbed import Testbed, TestHost
from sglang_deploy.status.redact import redact
from tests.envfile_syntax import TOKEN, env_files, leaks, systemd_environment

NAME = "e2e-envparse"
BATCH = 40
_BATCH_IDS = itertools.count()
DIR = "/root/envfiles"  # not /tmp: the testbed mounts a tmpfs there inside the host

#: Spellings systemd and an earlier scrubber disagreed on, always tried (beside the drawn ones).
KNOWN = [
    'HF_TOKEN="tok0001v"tok0002v\n',
    "HF_TOKEN='tok0001v' 'tok0002v'\n",
    'HF_TOKEN="tok0001v"\\\ntok0002v\n',
    'HF_TOKEN="tok0001v" tok0002v\nA=1\n',
    "SGLANG_API_KEY = tok0001v\\\n  tok0002v\n",
    "HF_TOKEN= tok0001v\n",
    "  export_HF_TOKEN=tok0001v\r\nMY_KEY='tok0002v\ntok0003v'\r",
    "# comment \\\nHF_TOKEN=tok0001v\n",
]


@pytest.fixture(scope="module")
def host(testbed: Testbed) -> TestHost:
    (booted,) = testbed.boot([NAME])
    booted.ssh(f"mkdir -p {DIR}")
    return booted


def systemd_reads(host: TestHost, texts: list[str], tag: str) -> list[dict[str, str] | None]:
    """The environment a transient service gets from each text as its EnvironmentFile= (None
    where systemd-run failed), by one SSH command."""
    for i, text in enumerate(texts):
        (host.root / DIR.lstrip("/") / f"{tag}-{i}.env").write_bytes(text.encode())
    files = " ".join(shlex.quote(f"{DIR}/{tag}-{i}") for i in range(len(texts)))
    host.ssh(f"for f in {files}; do systemd-run --quiet --wait --pipe --collect -p EnvironmentFile=$f.env "
             f"/usr/bin/env -0 > $f.out 2> $f.err; echo $? > $f.rc; done", timeout=120)
    out: list[dict[str, str] | None] = []
    for i in range(len(texts)):
        base = host.root / DIR.lstrip("/") / f"{tag}-{i}"
        if Path(f"{base}.rc").read_text().strip() != "0":
            out.append(None)
            continue
        env = {}
        for entry in Path(f"{base}.out").read_bytes().split(b"\0"):
            if b"=" in entry:
                name, _, value = entry.decode("utf-8", "surrogateescape").partition("=")
                env[name] = value
        out.append(env)
    return out


def check_batch(host: TestHost, texts: list[str]) -> None:
    tag = f"b{next(_BATCH_IDS)}"
    got = systemd_reads(host, texts, tag)
    failures, secrets_seen = [], 0
    for i, (text, env) in enumerate(zip(texts, got)):
        assert env is not None, f"systemd-run failed on {tag}-{i}: {text!r}"
        secret = {k: v for k, v in env.items() if CREDENTIAL_NAME.search(k)}
        secrets_seen += sum(1 for v in secret.values() if TOKEN.search(v))
        # systemd before v254 and after read a comment continued by a backslash differently: either reading
        models = [{k: v for k, v in systemd_environment(text, continues).items() if CREDENTIAL_NAME.search(k)}
                  for continues in (True, False)]
        if secret not in models:
            failures.append(f"{tag}-{i}: the model of systemd's parser says {models[0]!r}, systemd {secret!r}: "
                            f"{text!r}")
        leaked = leaks(env, redact(text))
        if leaked:
            failures.append(f"{tag}-{i}: {leaked} shown by the scrubber: {text!r} -> {redact(text)!r}")
    assert not failures, "\n".join(failures[:10])
    assert secrets_seen > 0 or len(texts) < 5  # the batch did exercise secret-named values


@settings(max_examples=5, deadline=None, database=None, phases=(Phase.explicit, Phase.generate),
          suppress_health_check=list(HealthCheck))
@given(texts=st.lists(env_files(), min_size=BATCH, max_size=BATCH))
@example(texts=KNOWN)
def test_the_scrubber_masks_every_secret_systemd_reads_from_an_env_file(host, texts):
    check_batch(host, texts)

