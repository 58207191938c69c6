"""Size limits through the local server: just under the metadata limit completes, over it is 413."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from examples.calculator.agent import agent_loop
from rollout_sdk.local.server import build_local_app
from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.testing.threads import ServerThread

pytestmark = pytest.mark.integration
LIMIT = 1024 * 1024


def _metadata(size: int) -> dict[str, Any]:
    metadata: dict[str, Any] = {"ground_truth": "42", "blob": ""}
    overhead = len(json.dumps(metadata, separators=(",", ":")).encode())
    metadata["blob"] = os.urandom(size).hex()[: size - overhead]
    assert len(json.dumps(metadata, separators=(",", ":")).encode()) == size
    return metadata


def _body(url: str, metadata: dict[str, Any]) -> dict[str, Any]:
    history = [{"role": "user", "content": f"earlier turn {i} " + "x" * 200} for i in range(300)]
    return {
        "rollout_id": "big-1",
        "server_url": url,
        "messages": [*history, {"role": "user", "content": "What is 6 * 7?"}],
        "completion_params": {},
        "metadata": metadata,
    }


def test_metadata_just_under_the_limit_completes_and_over_it_is_413(tmp_path: Path) -> None:
    traingate = TrainGateStandIn()
    app = build_local_app(agent_loop, state_dir=tmp_path)
    with ServerThread(traingate.app) as gate, ServerThread(app) as server:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            over = http.post("/v1/rollout/init", json=_body(gate.url, _metadata(LIMIT + 1)))
            assert over.status_code == 413
            detail = over.json()["detail"]
            assert str(LIMIT) in detail and "OSMOSIS_ROLLOUT_MAX_METADATA_SIZE_BYTES" in detail
            accepted = http.post("/v1/rollout/init", json=_body(gate.url, _metadata(LIMIT - 8)))
            assert accepted.status_code == 202, accepted.text
        assert traingate.wait_for(1, timeout=30)
    (report,) = traingate.completions["big-1"]
    assert (report["status"], report["reward"]) == ("COMPLETED", 1.0)
    assert len(report["final_messages"]) == 301 + 3
