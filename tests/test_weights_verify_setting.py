"""sglang_weights_verify: a boolean, default false; on, the stager re-hashes the served snapshot
(``--verify``) on every deploy; the setting is not part of the revision (turning it on restarts
nothing)."""

from __future__ import annotations

import pytest

from sglang_deploy.deploy.weights import stage_command
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.render import render
from sglang_deploy.lifecycle.revision import revision_id
from sglang_deploy.plan.spec import build_spec
from tests.test_weights import A6000, _plan


def test_default_off_and_the_stager_is_told_when_on():
    off, on = _plan(A6000), _plan({**A6000, "sglang_weights_verify": True})
    assert off.weights is not None and on.weights is not None
    assert not off.weights.verify and on.weights.verify
    assert " --verify" not in (stage_command(off.weights, "py", "/env", "u:g", "gpu1") or "")
    assert " --verify;" in (stage_command(on.weights, "py", "/env", "u:g", "gpu1") or "")


def test_turning_it_on_changes_no_revision():
    off, on = _plan(A6000), _plan({**A6000, "sglang_weights_verify": True})
    assert revision_id(render(off), off.sglang_version) == revision_id(render(on), on.sglang_version)


@pytest.mark.parametrize("value", ["yes", 1, None, [True]])
def test_not_a_boolean_names_the_host_and_field(value):
    with pytest.raises(PlanError) as err:
        build_spec("gpu1", {}, {**A6000, "sglang_weights_verify": value})
    assert err.value.host == "gpu1" and err.value.field == "sglang_weights_verify"
