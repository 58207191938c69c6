"""Dollars per million rollouts on AWS, from measured figures: writes ``docs/cost.md``.

Inputs: ``bench/results/handoff-latest.json`` (`python -m bench.handoff`: invocation durations
per hand-off mode with a 2 s model) and the DynamoDB item sizes of a real calculator rollout,
encoded by :class:`DynamoDBStore` at each step. Prices are the published on-demand prices for
us-east-1 listed in the output; change ``PRICES`` when they move.

Usage: python -m bench.cost
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout_sdk.engine.record import RecordState, RolloutRecord
from rollout_sdk.protocol import InitResponse, RolloutRequest, RolloutResponse, RolloutStatus
from rollout_sdk.store.dynamodb import DynamoDBStore

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

#: USD, us-east-1, on-demand, as published by AWS (checked for this kit in 2026; verify before use).
PRICES = {
    "lambda_gb_second_x86_64": 0.0000166667,
    "lambda_gb_second_arm64": 0.0000133334,
    "lambda_request": 0.20 / 1e6,
    "http_api_request": 1.00 / 1e6,
    "dynamodb_write_unit": 0.625 / 1e6,
    "dynamodb_read_unit": 0.125 / 1e6,
    "sqs_request": 0.40 / 1e6,
    "kms_request": 0.03 / 1e4,
    "cloudwatch_logs_gb": 0.50,
}
#: The queue's message carries the callback key sealed: an Encrypt at init, a Decrypt in the worker.
KMS_REQUESTS_PER_QUEUED_ROLLOUT = 2
LOG_BYTES_PER_ROLLOUT = 5 * 450  # five JSON lines (accepted, claimed, finished, delivered, request)
API_SECONDS_PER_INIT = 0.05  # warm init handling on Lambda: claim + invoke round trips
MODEL_LATENCIES = (0.5, 2.0, 10.0)
TURNS = (2, 8, 32)
MEMORY_MB = 512


def _item_kb(store: DynamoDBStore, record: RolloutRecord) -> float:
    item = store._to_item(record)  # noqa: SLF001 - the bytes DynamoDB bills are the encoded item
    size = 0
    for name, value in item.items():
        size += len(name.encode())
        for kind, raw in value.items():
            if kind == "M":
                size += sum(len(k) + len(json.dumps(v)) for k, v in raw.items())
            elif kind == "B":
                size += len(raw)
            else:
                size += len(str(raw).encode())
    return size / 1024


def write_units() -> dict[str, Any]:
    """WRU of the happy path's writes, from a calculator rollout's real item sizes."""
    store = DynamoDBStore("sizing", client=None)  # type: ignore[arg-type]  # encoding only
    request = RolloutRequest(
        rollout_id="rollout-000123",
        server_url="https://traingate.example.com",
        messages=[
            {"role": "system", "content": "You are a careful calculator. Use the tools."},
            {"role": "user", "content": "What is 43 * 12?"},
        ],
        completion_params={"temperature": 0.7, "max_tokens": 256},
        metadata={"ground_truth": "516"},
    )
    from examples.calculator.agent import agent_loop

    tools = agent_loop.get_tools(request)
    now = time.time()
    accepted = RolloutRecord.new(
        request,
        InitResponse(rollout_id=request.rollout_id, tools=tools),
        now=now,
        ttl_seconds=86400,
    )
    running = accepted.evolve(state=RecordState.RUNNING, attempt=1, lease_until=now + 60)
    final = RolloutResponse(
        rollout_id=request.rollout_id,
        status=RolloutStatus.COMPLETED,
        final_messages=[
            *request.messages,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {
                            "name": "calculate",
                            "arguments": '{"operation": "multiply", "a": 43, "b": 12}',
                        },
                    }
                ],
            },
            {"role": "tool", "content": "516", "tool_call_id": "c1"},
            {"role": "assistant", "content": "The answer is 516."},
        ],
        reward=1.0,
    )
    finished = running.evolve(state=RecordState.FINISHED, response=final.model_dump(mode="json"))
    delivered = finished.evolve(state=RecordState.DELIVERED, delivered_at=now, lease_until=None)
    sizes = {
        "accepted": _item_kb(store, accepted),
        "running": _item_kb(store, running),
        "finished": _item_kb(store, finished),
        "delivered": _item_kb(store, delivered),
    }
    # A transactional write costs 2 WRU per KB per item; an update costs the larger of the item
    # before and after, rounded up to the KB.
    wru = {
        "init claim (TransactWriteItems: slot + record)": 2 * (1 + math.ceil(sizes["accepted"])),
        "worker claim (UpdateItem)": math.ceil(max(sizes["accepted"], sizes["running"])),
        "finish (UpdateItem)": math.ceil(max(sizes["running"], sizes["finished"])),
        "delivered (UpdateItem)": math.ceil(max(sizes["finished"], sizes["delivered"])),
    }
    return {"item_kb": {k: round(v, 2) for k, v in sizes.items()}, "wru": wru}


@dataclass
class Scenario:
    mode: str
    latency: float
    turns: int
    arch: str
    dollars_per_million: float
    breakdown: dict[str, float]


def scenario(
    mode: str, latency: float, turns: int, arch: str, measured: dict[str, Any], wru: int
) -> Scenario:
    """Dollars per million rollouts for one mode, model latency, turn count and architecture."""
    modes = {m["mode"]: m for m in measured["modes"]}
    base_model_seconds = measured["chat_calls_per_rollout"] * measured["chat_delay_seconds"]
    gb = measured["memory_mb"] / 1024
    million = 1e6
    model_seconds = turns * latency
    if mode == "direct":
        # Measured: each invocation took the model's time plus an overhead; keep the overhead.
        overhead = modes["direct"]["mean_invocation_seconds"] - base_model_seconds
        invocations = million
        seconds_each = model_seconds + overhead
    else:
        batch = measured["batch"]
        overhead = modes["queue"]["mean_invocation_seconds"] - base_model_seconds
        invocations = million / batch
        seconds_each = model_seconds + overhead
    init_share = modes[mode]["init_gb_seconds_per_1000"] / modes[mode]["gb_seconds_per_1000"]
    worker_gb_s = invocations * seconds_each * gb * (1 + init_share)
    api_gb_s = million * API_SECONDS_PER_INIT * gb
    price = PRICES[f"lambda_gb_second_{arch}"]
    breakdown = {
        "worker Lambda GB-s": worker_gb_s * price,
        "API Lambda GB-s": api_gb_s * price,
        "Lambda requests": (million + invocations) * PRICES["lambda_request"],
        "HTTP API requests": million * PRICES["http_api_request"],
        "DynamoDB writes": million * wru * PRICES["dynamodb_write_unit"],
        "SQS requests": (3 * million / measured["batch"] + million) * PRICES["sqs_request"]
        if mode == "queue"
        else 0.0,
        "KMS requests": KMS_REQUESTS_PER_QUEUED_ROLLOUT * million * PRICES["kms_request"]
        if mode == "queue"
        else 0.0,
        "CloudWatch Logs": million * LOG_BYTES_PER_ROLLOUT / 1e9 * PRICES["cloudwatch_logs_gb"],
    }
    return Scenario(mode, latency, turns, arch, sum(breakdown.values()), breakdown)


def render(measured: dict[str, Any], units: dict[str, Any]) -> str:
    wru = sum(units["wru"].values())
    lines = [
        "# What a million rollouts cost on AWS",
        "",
        f"Generated by `python -m bench.cost` on {time.strftime('%Y-%m-%d', time.gmtime())} from measured figures",
        f"(`{measured['command']}`, {measured['date']}) and the published us-east-1 prices below.",
        "",
        "## Measured inputs",
        "",
        f"- A rollout of the calculator agent: {measured['chat_calls_per_rollout']} chat calls, "
        f"the stand-in answering each after {measured['chat_delay_seconds']:g} s; worker memory "
        f"{measured['memory_mb']} MB; queue batches of {measured['batch']}.",
        "",
        "| hand-off | invocations per 1,000 | mean invocation | peak concurrent executions | GB-s per 1,000 (+ init) |",
        "|---|---|---|---|---|",
    ]
    for m in measured["modes"]:
        lines.append(
            f"| {m['mode']} | {m['invocations_per_1000']:.0f} | {m['mean_invocation_seconds']:.2f} s | "
            f"{m['peak_concurrency']} | {m['gb_seconds_per_1000']:.0f} (+{m['init_gb_seconds_per_1000']:.0f}) |"
        )
    lines += [
        "",
        f"- DynamoDB item sizes of that rollout (KB): {units['item_kb']}; write units on the happy "
        f"path: {units['wru']} = **{wru} WRU per rollout**, no read units (every move returns the "
        "item it wrote). AWS requests per rollout on the happy path: five (TransactWriteItems and",
        "Invoke at init; three UpdateItem in the worker), counted by `make bench`.",
        "- Not per rollout, so not in the table: the re-drive function's schedule (one short",
        "  invocation per `RedriveIntervalMinutes`, whose queries of the due index read only what",
        "  waits: eight empty queries, 4 read units, when nothing does, and 2 write units for its",
        "  pass lease), the KMS key ($1 a month) and the server-key secret ($0.40 a month), and",
        "  the queue poller's empty receives.",
        "",
        "## Formula",
        "",
        "Per million rollouts, for a model latency `L` per chat call and `T` turns:",
        "",
        "- worker Lambda: `invocations x (T x L + overhead) x GB x (1 + init share) x price per GB-s`,",
        "  where invocations are 1,000,000 (direct) or 1,000,000 / batch (queue), and the overhead",
        "  and init share are the measured ones above;",
        f"- API Lambda: `1,000,000 x {API_SECONDS_PER_INIT} s x GB x price per GB-s`;",
        "- Lambda requests: one per init plus one per worker invocation;",
        "- HTTP API: one request per init; DynamoDB: the write units above;",
        "- SQS (queue mode): one SendMessage per rollout plus a receive and a delete batch per batch;",
        f"- KMS (queue mode): {KMS_REQUESTS_PER_QUEUED_ROLLOUT} requests per rollout, the message's callback key sealed",
        "  at init and opened in the worker (the free tier, 20,000 requests a month, left out);",
        f"- CloudWatch Logs: about {LOG_BYTES_PER_ROLLOUT} bytes of JSON log lines per rollout.",
        "",
        "Prices (USD, us-east-1, on-demand):",
        "",
        "| item | price |",
        "|---|---|",
    ]
    labels = {
        "lambda_gb_second_x86_64": "Lambda, per GB-second, x86_64",
        "lambda_gb_second_arm64": "Lambda, per GB-second, arm64",
        "lambda_request": "Lambda, per request",
        "http_api_request": "API Gateway HTTP API, per request",
        "dynamodb_write_unit": "DynamoDB on-demand, per write request unit",
        "dynamodb_read_unit": "DynamoDB on-demand, per read request unit",
        "sqs_request": "SQS standard, per request",
        "kms_request": "KMS, per request",
        "cloudwatch_logs_gb": "CloudWatch Logs, per GB ingested",
    }
    for name, value in PRICES.items():
        lines.append(f"| {labels[name]} | ${value:.10g} |")
    lines += ["", "## Dollars per million rollouts", ""]
    header = (
        "| model latency | turns | direct, x86_64 | direct, arm64 | queue, x86_64 | queue, arm64 |"
    )
    lines += [header, "|---|---|---|---|---|---|"]
    for latency in MODEL_LATENCIES:
        for turns in TURNS:
            cells = [
                scenario(mode, latency, turns, arch, measured, wru).dollars_per_million
                for mode in ("direct", "queue")
                for arch in ("x86_64", "arm64")
            ]
            lines.append(
                f"| {latency:g} s | {turns} | " + " | ".join(f"${c:,.0f}" for c in cells) + " |"
            )
    example = scenario("direct", 2.0, 8, "arm64", measured, wru)
    example_q = scenario("queue", 2.0, 8, "arm64", measured, wru)
    lines += [
        "",
        "Where the money goes, 2 s per call and 8 turns on arm64:",
        "",
        "| item | direct | queue |",
        "|---|---|---|",
    ]
    for item in example.breakdown:
        lines.append(
            f"| {item} | ${example.breakdown[item]:,.2f} | ${example_q.breakdown[item]:,.2f} |"
        )
    lines += [
        f"| **total** | **${example.dollars_per_million:,.2f}** | **${example_q.dollars_per_million:,.2f}** |",
        "",
        "## Recommendation",
        "",
        "- **Waiting dominates.** A worker spends nearly all of its time waiting on the model, and",
        "  Lambda bills that wait. With direct hand-off the bill grows with model latency x turns per",
        "  rollout; with the queue, one invocation waits for a whole batch at once, dividing both the",
        "  GB-seconds and the peak concurrency by about the batch size (measured above). Use",
        "  `HandOff=queue` for RL steps of hundreds of rollouts or more, or whenever model calls take",
        "  seconds; keep `direct` for small or latency-critical runs (no batching window, simplest).",
        "- **arm64** is 20% cheaper per GB-second and the kit has no native code of its own: set",
        "  `Architecture=arm64` and build with `make build-lambda ARCH=arm64`.",
        f"- **Memory**: {MEMORY_MB} MB. The worker is I/O bound, so more memory buys nothing while it",
        "  waits; less than 512 MB slows the cold start (Lambda gives CPU in proportion to memory) and",
        "  leaves little room for a batch of ten conversations in queue mode.",
        "- DynamoDB, API Gateway and logs cost a few dollars per million rollouts at most; the",
        "  re-drive's index queries and the KMS requests of parked responses are not on the happy path;",
        "  the queue's sealed callback keys add "
        f"${KMS_REQUESTS_PER_QUEUED_ROLLOUT * 1e6 * PRICES['kms_request']:,.0f} per million rollouts",
        "  (see docs/aws.md, where the callback key lives).",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    source = RESULTS / "handoff-latest.json"
    if not source.exists():
        print(f"{source} is missing: run `python -m bench.handoff` first", file=sys.stderr)
        return 1
    measured = json.loads(source.read_text())
    text = render(measured, write_units())
    (ROOT / "docs" / "cost.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
