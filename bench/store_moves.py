"""CPU per rollout of a store's moves alone: create, claim, finish, deliver, as the server makes
them, with ``concurrency`` rollouts' moves interleaved on one event loop.

    python -m bench.store_moves --store sqlite --rollouts 1000 --concurrency 50 [--runs 3]

Each of ``concurrency`` tasks takes the next rollout and makes its four moves, one
``await asyncio.sleep(0)`` between two moves (another rollout's turn, as the server's other
requests and agent turns come between them), so the moves of many rollouts meet in each loop
iteration. The records (a calculator init: its request and tools) and the final responses are
built before the clock starts; what is measured is ``time.process_time()`` around the moves,
which covers the store's thread too (none is used unless a transaction must wait). A few
rollouts warm the store up first. The figure is this machine's, for comparing stores and
versions of one store, not a server's throughput (``python -m bench.throughput``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from examples.calculator.agent import TOOLS
from rollout_sdk.protocol import InitResponse, RolloutRequest, RolloutResponse, RolloutStatus
from rollout_sdk.store.base import Store
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.record import RolloutRecord, expiry
from rollout_sdk.store.sqlite import SQLiteStore
from testkit.bodies import calculator_body, make_questions

TTL = 3600.0
WARMUP = 50
URL = "http://127.0.0.1:9/traingate"


def _rollout(rollout_id: str, question: str, truth: str) -> tuple[RolloutRecord, RolloutResponse]:
    request = RolloutRequest.model_validate(
        calculator_body(rollout_id, URL, question=question, truth=truth)
    )
    record = RolloutRecord.new(
        request, InitResponse(rollout_id=rollout_id, tools=TOOLS), now=time.time(), ttl_seconds=TTL
    )
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "calculate", "arguments": '{"operation":"add","a":19,"b":23}'},
    }
    messages = [
        *request.messages,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": truth},
        {"role": "assistant", "content": f"The answer is {truth}."},
    ]
    response = RolloutResponse.model_validate(
        {
            "rollout_id": rollout_id,
            "status": RolloutStatus.COMPLETED,
            "final_messages": messages,
            "finish_reason": "stop",
            "reward": 1.0,
        }
    )
    return record, response


async def _moves(store: Store, record: RolloutRecord, response: RolloutResponse) -> None:
    rid = record.rollout_id
    now = time.time()
    assert (await store.create(record, now=now)).created
    await asyncio.sleep(0)
    claimed = await store.claim(
        rid, attempt=1, lease_until=now + 60, expires_at=expiry(now, TTL), now=now
    )
    assert claimed.applied
    await asyncio.sleep(0)
    finished = await store.finish(
        rid,
        attempt=1,
        response=response,
        lease_until=now + 60,
        expires_at=expiry(now, TTL),
        now=now,
    )
    assert finished.applied
    await asyncio.sleep(0)
    delivered = await store.deliver(
        rid,
        attempt=1,
        delivery_attempts=1,
        expires_at=expiry(now, TTL),
        now=now,
        extra={"cost": {"usd": 0.0}},
    )
    assert delivered.applied


async def _run(store: Store, rollouts: list[tuple[RolloutRecord, RolloutResponse]], n: int) -> None:
    pending = iter(rollouts)

    async def lane() -> None:
        for record, response in pending:
            await _moves(store, record, response)

    await asyncio.gather(*(lane() for _ in range(n)))


async def _measure(kind: str, rollouts: int, concurrency: int, folder: Path) -> float:
    store: Store = SQLiteStore(folder / "rollouts.sqlite3") if kind == "sqlite" else MemoryStore()
    questions = make_questions(WARMUP + rollouts)
    built = [_rollout(f"r-{i}", q, t) for i, (q, t) in enumerate(questions)]
    try:
        await _run(store, built[:WARMUP], concurrency)
        started = time.process_time()
        await _run(store, built[WARMUP:], concurrency)
        spent = time.process_time() - started
    finally:
        await store.close()
    return spent / rollouts * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    figures = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="store-moves-") as folder:
            figure = asyncio.run(
                _measure(args.store, args.rollouts, args.concurrency, Path(folder))
            )
        figures.append(figure)
        print(f"{args.store}: {figure:.0f} us CPU per rollout", flush=True)
    if args.runs > 1:
        print(f"{args.store}: median {statistics.median(figures):.0f} us CPU per rollout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
