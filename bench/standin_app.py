"""A TrainGate stand-in as its own process: ``python -m uvicorn bench.standin_app:app``.

Benchmarks run it apart from the process they measure, so the two do not share a GIL.
``STANDIN_CHAT_DELAY`` (seconds) delays every chat answer, as a model would.
"""

from __future__ import annotations

import os

from rollout_sdk.testing.standin import TrainGateStandIn

standin = TrainGateStandIn(chat_delay=float(os.environ.get("STANDIN_CHAT_DELAY", "0")))
app = standin.app


@app.get("/health")
async def health() -> dict[str, str]:
    """Ready."""
    return {"status": "ok"}
