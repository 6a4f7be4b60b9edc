"""Fixtures for the end-to-end tests: a session-wide testbed of throwaway hosts.

The e2e tests need root, ``systemd-nspawn`` (package systemd-container) and
``sshd`` (package openssh-server). Where those are missing they are skipped
with the reason, except when the environment variable ``CI`` is set (to
anything non-empty): CI must run them, so there they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sglang_deploy.simulator.testbed import Testbed, missing_requirements

E2E_DIR = Path(__file__).resolve().parent
#: The gate's allowed drop below a host's own best recent result (``sglang_gate.tolerance``, 10% by
#: default), for the e2e tests that are not about speed: on a loaded 2-core machine the simulated
#: server's measured rate swings by more than that (CI once measured 157.9 tok/s against the same
#: host's 202.6 a few minutes earlier, and rolled a tp group back), and such a test must not fail on
#: speed. Each of those gates keeps its target, set well below the simulated rate, so it can still
#: fail; the tests about speed (the gate's, the check's) keep the default.
NOT_ABOUT_SPEED = {"tolerance": 0.9, "prediction_floor": 0.0}


def in_ci() -> bool:
    return bool(os.environ.get("CI"))


def require_testbed() -> None:
    """Skip (or, in CI, fail) the calling test when a testbed cannot run here."""
    missing = missing_requirements()
    if not missing:
        return
    reason = "e2e testbed unavailable: " + "; ".join(missing)
    if in_ci():
        pytest.fail(reason + " (CI is set, so this fails instead of skipping; see .ci/run)", pytrace=False)
    pytest.skip(reason + " (run as root with systemd-container and openssh-server installed)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers",
                            "e2e: end-to-end test against throwaway hosts booted by sglang_deploy/simulator/testbed")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(autouse=True)
def _e2e_requirements() -> None:
    require_testbed()


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    """One :class:`Testbed` for the whole session; closed (and verified) at the end."""
    require_testbed()
    with Testbed() as bed:
        yield bed
