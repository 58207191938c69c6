"""Integration tier: real servers on 127.0.0.1 (uvicorn threads and subprocesses), real HTTP."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# The example agent and the test kit (`testkit`) live beside the package, not in it;
# `.venv/bin/pytest` does not put the project root on sys.path the way `python -m pytest` does.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from rollout_sdk.testing.standin import TrainGateStandIn  # noqa: E402 - after the path fix above
from rollout_sdk.testing.threads import ServerThread  # noqa: E402


@pytest.fixture
def standin() -> TrainGateStandIn:
    """A TrainGate stand-in with a scripted model that always answers right."""
    return TrainGateStandIn()


@pytest.fixture
def traingate(standin: TrainGateStandIn) -> Iterator[ServerThread]:
    """``standin`` served on a free loopback port."""
    with ServerThread(standin.app) as server:
        yield server
