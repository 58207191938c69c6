"""`rollout-sdk redrive` sends a parked response from the local store once."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollout_sdk.local.server import KEY_FILE, SQLITE_FILE
from rollout_sdk.protocol import InitResponse, RolloutRequest
from rollout_sdk.store.record import RecordState, RolloutRecord
from rollout_sdk.store.sqlite import SQLiteStore
from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread
from rollout_sdk.vault import LocalVault

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


async def _park(state: Path, server_url: str, *, due: float) -> None:
    store = SQLiteStore(state / SQLITE_FILE)
    vault = LocalVault(state / KEY_FILE)
    now = time.time()
    request = RolloutRequest(
        rollout_id="parked-1",
        server_url=server_url,
        messages=[{"role": "user", "content": "What is 1 + 1?"}],
        completion_params={},
    )
    record = RolloutRecord.new(
        request, InitResponse(rollout_id="parked-1"), now=now, ttl_seconds=3600
    )
    response = {
        "rollout_id": "parked-1",
        "status": "COMPLETED",
        "final_messages": [],
        "reward": 1.0,
    }
    record = record.evolve(
        state=RecordState.FINISHED,
        response=response,
        finished_at=now,
        next_attempt_at=due,
        due_at=due,  # as park leaves it: in the due index at its next try
        sealed_key=await vault.seal("callback-key", rollout_id="parked-1"),
    )
    assert (await store.create(record, now=now)).created
    await store.close()


def _redrive(state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollout_sdk", "redrive", "--state-dir", str(state)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_redrive_sends_a_due_response_once_with_its_callback_key(tmp_path: Path) -> None:
    traingate = TrainGateStandIn(callback_key="callback-key")
    with ServerThread(traingate.app) as server:
        asyncio.run(_park(tmp_path, server.url, due=time.time() - 1))
        first = _redrive(tmp_path)
        assert first.returncode == 0, first.stderr
        assert "delivered 1" in first.stdout
        second = _redrive(tmp_path)
        assert "examined 0" in second.stdout
    (report,) = traingate.completions["parked-1"]
    assert (report["status"], report["reward"]) == ("COMPLETED", 1.0)


def test_redrive_leaves_a_response_that_is_not_due_yet(tmp_path: Path) -> None:
    traingate = TrainGateStandIn()
    with ServerThread(traingate.app) as server:
        asyncio.run(_park(tmp_path, server.url, due=time.time() + 3600))
        done = _redrive(tmp_path)
    assert done.returncode == 0
    assert "examined 0" in done.stdout
    assert traingate.completions == {}
