"""Dollars per million rollouts on AWS, from measured figures: writes ``docs/cost.md``.

Inputs: ``bench/results/handoff-latest.json`` (`python -m bench.handoff`: invocation durations
per hand-off mode with a 2 s model) and the DynamoDB item sizes of a real calculator rollout,
encoded by :class:`DynamoDBStore` at each step. Prices are the kit's one price table
(:data:`rollout_sdk.prices.PRICE_TABLE`, us-east-1 on demand, with the page and date each
was read), which the per-rollout estimate uses too; change them there when they move.

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

from rollout_sdk.aws.durable import MIN_TURN_RESERVE_SECONDS
from rollout_sdk.aws.metering import QUEUE_REQUESTS_PER_BATCH
from rollout_sdk.aws.runtime import (
    DURABLE_RETENTION_DAYS,
    LAMBDA_POLL_RECHECK_SECONDS,
    LAMBDA_RESULT_WAIT_SECONDS,
)
from rollout_sdk.cost.usage import CostEstimate, LambdaPart, Usage
from rollout_sdk.prices import MONTH_SECONDS, PRICE_TABLE, PRICES_READ, effective_prices
from rollout_sdk.protocol import InitResponse, RolloutRequest, RolloutResponse, RolloutStatus
from rollout_sdk.store.dynamodb import DynamoDBStore
from rollout_sdk.store.record import RecordState, RolloutRecord

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

#: USD, us-east-1, on demand: the kit's one price table (rollout_sdk/prices.py).
PRICES = effective_prices()
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


def example_estimate(
    *, at: str, worker_seconds: float, write_units: float, memory_mb: int = MEMORY_MB
) -> dict[str, Any]:
    """The estimate a direct rollout's response (``at="finish"``) or record (``"delivery"``)
    carries: a warm API invocation of API_SECONDS_PER_INIT and a warm worker, x86_64."""
    usage = Usage(
        functions={
            "api": LambdaPart(API_SECONDS_PER_INIT, 0.0, memory_mb, "x86_64", 1),
            "worker": LambdaPart(worker_seconds, 0.0, memory_mb, "x86_64", 1),
        },
        dynamodb_calls=4 if at == "delivery" else 2,
    )
    usage.units.update(lambda_request=2, http_api_request=1, dynamodb_write_unit=write_units)
    return CostEstimate.of(
        usage,
        prices=PRICES,
        prices_label=PRICES_READ,
        at=at,
        function="worker",
        hand_off="direct",
    ).to_json(compact=at == "delivery")  # the record keeps the compact form


def write_units() -> dict[str, Any]:
    """WRU of the happy path's writes, from a calculator rollout's real item sizes (the
    response carrying its cost estimate at finish, the delivered record its full figure)."""
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
        extra_fields={
            "rollout_sdk": {
                "cost": example_estimate(at="finish", worker_seconds=5.04, write_units=5)
            }
        },
    )
    finished = running.evolve(state=RecordState.FINISHED, response=final.model_dump(mode="json"))
    delivered = finished.evolve(
        state=RecordState.DELIVERED,
        delivered_at=now,
        lease_until=None,
        extra={"cost": example_estimate(at="delivery", worker_seconds=5.05, write_units=7)},
    )
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


def render(
    measured: dict[str, Any], units: dict[str, Any], durable: dict[str, Any] | None = None
) -> str:
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
        "Prices (USD, us-east-1, on demand, first tier), the kit's one table (`PRICE_TABLE` in",
        f"`rollout_sdk/prices.py`), each read on {PRICES_READ} from the stored copies of the",
        "pages named. AWS's pricing pages draw their rate tables by script, so most figures could",
        "be checked only against summaries of those pages, as the last column says: verify them",
        "on the pages before relying on them, and override any with `ROLLOUT_SDK_PRICES`.",
        "",
        "| name | item | price | page | checked against |",
        "|---|---|---|---|---|",
    ]
    for name, price in PRICE_TABLE.items():
        lines.append(
            f"| `{name}` | {price.label} | ${price.usd:.10g} | <{price.page}> | {price.checked} |"
        )
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
        *per_rollout_section(),
        *(durable_section(measured, durable) if durable is not None else []),
        *poll_section(),
    ]
    return "\n".join(lines)


#: The per-rollout estimate's formula, as docs/cost.md shows it: Python over the estimate's JSON
#: (``cost``) and the prices (``price``). The tests evaluate this very block from docs/cost.md
#: against the kit's figure (testkit/cost.py), so the two cannot drift apart.
FORMULA = """usd = 0.0
for f in cost["lambda"].values():  # each function's GB-seconds, at its architecture's price
    gb_seconds = (f["seconds"] + f["init_seconds"]) * f["memory_mb"] / 1024
    usd += gb_seconds * price["lambda_gb_second_" + f["architecture"]]
for item, n in cost["units"].items():  # every billed unit, at its price
    usd += n * price[item]"""


def per_rollout_section() -> list[str]:
    """docs/cost.md's "Per-rollout estimate": where it is, the formula, its fields, its limits."""
    example = example_estimate(at="finish", worker_seconds=5.04, write_units=5)
    per_batch = QUEUE_REQUESTS_PER_BATCH
    return [
        "## Per-rollout estimate",
        "",
        "On AWS every final response says what its rollout cost so far, in",
        '`extra_fields["rollout_sdk"]["cost"]` (beside `failure` on an ERROR; the agent\'s own',
        "extra fields are left as they are). The response is fixed before its first delivery",
        'attempt, so this is the figure **at finish** (`"at": "finish"`). The figure **after',
        "delivery**, grown by every callback attempt, the park and each re-drive, is kept in the",
        'record (`extra["cost"]`, shown as `cost` by `GET /v1/rollout/{rollout_id}`; written by',
        "the delivery's own moves, so it costs no request of its own) and, once the rollout is",
        "DELIVERED or UNDELIVERABLE, handed to the runtime's cost sink, which emits the metric",
        "`RolloutCost` (USD; dimensions `Function` and `HandOff`; see docs/operations.md). The",
        "local server writes no estimate: there is no AWS bill, and the host's cost is not the",
        "kit's to estimate (`--store dynamodb` against a real table is not metered either).",
        "",
        "The formula, over the estimate (`cost`) and the prices above (`price`, with",
        "`ROLLOUT_SDK_PRICES` applied); `tests/unit/test_cost.py` and `tests/aws/test_cost.py`",
        "evaluate this block, taken from this file, against the kit's `usd`:",
        "",
        "```python",
        FORMULA,
        "```",
        "",
        "| field | what it is | where it comes from |",
        "|---|---|---|",
        "| `usd` | the formula's result | priced from the rounded figures below, so applying the formula to them gives this very number |",
        "| `at` | `finish` (the response's figure) or `delivery` (after the delivery attempts so far) | |",
        "| `function`, `hand_off` | the function that took the figure, and the hand-off mode | the handler; `HAND_OFF` |",
        "| `lambda.<function>.seconds` | the rollout's share of that function's invocation: while *n* rollouts are in it, each is charged 1/*n* of every second, so a batch's shares add up to the invocation's duration (direct: the whole invocation; a re-drive: the time the pass spent on it) | a monotonic clock, from the handler's start |",
        "| `lambda.<function>.init_seconds` | its share of a cold start's init, which Lambda bills with the invocation that follows it (on-demand functions, since 2025-08-01): split over that invocation's batch, 0 when warm | the process's age at the end of `handler.py`'s import (Linux's `/proc`); 0 under provisioned concurrency or SnapStart (`AWS_LAMBDA_INITIALIZATION_TYPE`) |",
        "| `lambda.<function>.memory_mb`, `.architecture`, `.batch` | what a second of it costs; the rollouts that shared the invocation | `AWS_LAMBDA_FUNCTION_MEMORY_SIZE` (or the context's), the processor the process runs on, the event's records |",
        "| `units.lambda_request` | 1 for the API function's invocation, 1/batch of the worker's (1 in direct mode), 1 for the failure destination's | the invocations themselves |",
        "| `units.http_api_request` | the init request, metered in 512 KB increments | the event's body and headers |",
        "| `units.dynamodb_write_unit`, `units.dynamodb_read_unit` | what DynamoDB reports for each request made for the rollout (`ReturnConsumedCapacity=TOTAL`: table and indexes); an answer reporting none counts the request's minimum (`dynamodb.units_assumed` says how many: moto reports none for `UpdateItem`) | botocore hooks on the runtime's clients |",
        f"| `units.sqs_request` | queue mode: the `SendMessage` its message proves, plus {per_batch}/batch for the event source mapping's receive and delete of the batch | the message; the batch's size |",
        "| `units.kms_request` | every `Encrypt` and `Decrypt` made for it: queue mode's sealed callback key (2), a park (1), each re-drive attempt (1) | botocore hooks |",
        "| `units.s3_put_request`, `units.s3_get_request` | large values offloaded to the payload bucket (a record's, a durable step's result) | botocore hooks |",
        '| `units.lambda_durable_operation`, `units.lambda_durable_written_byte`, `units.lambda_durable_retained_byte_month` | the durable worker\'s execution: its operations, the bytes of its input and checkpoints, and those bytes by the month kept ("Durable worker" below); 0 on the plain worker | its history, as the invocation that ends it replays it |',
        "| `dynamodb.calls`, `dynamodb.units_assumed` | DynamoDB requests made for it, and those whose answer reported no units | botocore hooks |",
        f"| `prices` | the table's date ({PRICES_READ}), with `+overrides` when `ROLLOUT_SDK_PRICES` changed any | |",
        "",
        "A success's estimate at finish, for a direct rollout whose worker had run 5.04 s when",
        "it finished, on warm 512 MB x86_64 functions (the API function's 0.05 s carried in the",
        "job; the write units of the claim's transaction and the worker's claim so far):",
        "",
        "```json",
        json.dumps(example, indent=1),
        "```",
        "",
        "What it leaves out:",
        "",
        "- **CloudWatch Logs** ingestion (by volume: about 2,250 bytes, $0.0000011, a rollout) and",
        "  storage, and the metrics, alarms, dashboard and **X-Ray** traces of docs/operations.md;",
        "- **free tiers** (Lambda's million requests and 400,000 GB-seconds a month, KMS's 20,000",
        "  requests, SQS's million): the estimate is at list price, as if they were used up; volume",
        "  tiers, Savings Plans, and provisioned concurrency (priced as on-demand);",
        "- **data transfer**: the chat calls and the callback leave AWS for TrainGate (billed per",
        "  GB out), and a NAT gateway's hours and bytes in a VPC;",
        "- **fixed costs**, not any one rollout's: the re-drive schedule's invocations and their",
        "  due-index queries and pass lease, the queue's empty long polls, the KMS key ($1 a month),",
        "  the server-key secret and its reads, DynamoDB and S3 storage;",
        "- **what no one can know**: a worker that died (timeout, out of memory, crash) leaves no",
        "  figure, so a rollout settled for it carries the recoverer's part and the API function's",
        "  only; the earlier receives of a redelivered message; a duplicate init's work and a",
        "  duplicated job that found its rollout claimed;",
        "- the write that stores a figure is not in it (the record's figure misses its own",
        "  `UpdateItem`, a write unit or two a park; the metric's, taken after the final move,",
        "  has it), nor Lambda's rounding up to the millisecond or the few milliseconds of the",
        "  handler outside the kit's meter.",
        "",
        "How to read it: the figure at finish is a floor of what the rollout cost (the delivery is",
        "still ahead); the metric's is the full one, and its sum over a training step is the",
        "step's variable AWS cost at list price. A cold start makes the rollouts of one invocation",
        "dearer (`init_seconds`); in queue mode a rollout that ends early in its batch pays less,",
        "one that ends last more. The estimate makes the stored response and the record a few",
        "hundred bytes larger (the item sizes above include it). Prices are us-east-1 list prices;",
        "for another Region set `ROLLOUT_SDK_PRICES` to a JSON object of prices by the names above,",
        '`{"lambda_gb_second_arm64": 0.0000133334, "dynamodb_write_unit": 7.1e-07}`: an unknown',
        "name or a negative price stops start-up with a message naming it.",
        "",
    ]


# --------------------------------------------------------------------- the durable worker

#: The durable worker's table: turns per rollout, and seconds per model turn.
DURABLE_TURNS = (10, 50, 200)
DURABLE_LATENCIES = (2.0, 10.0, 30.0)
#: The template's defaults: WorkerTimeout and DeadlineMarginSeconds.
WORKER_TIMEOUT_SECONDS = 900.0
DEADLINE_MARGIN_SECONDS = 10.0
#: Lambda gives a function a whole vCPU at 1,769 MB and CPU in proportion to memory below it,
#: so CPU-bound work measured on one core takes about 1769 / MB times as long there.
FULL_VCPU_MB = 1769
#: The length of a KMS ciphertext of a callback key, in base64 (the job's sealed key).
SEALED_KEY_CHARS = 248

#: How a durable rollout's own units follow from its execution: Python over ``run``, what the
#: execution's history holds. tests/aws/test_durable_worker.py evaluates this very block from
#: docs/cost.md over a real execution's history, against the kit's figure.
DURABLE_FORMULA = """units = {
    # its start, then each step (the claim, each chat turn, each ctx.step, each batch of
    # tool calls, each suspension's decision) and each wait (one after each suspension)
    "lambda_durable_operation": 1 + run["steps"] + run["waits"],
    # its input (the job, as the dispatcher wrote it) and every step's checkpoint
    "lambda_durable_written_byte": run["input_bytes"] + sum(run["checkpoint_bytes"]),
}
# kept from the execution's start until its history's retention has ended
kept_seconds = run["seconds"] + run["retention_days"] * 86400
units["lambda_durable_retained_byte_month"] = (
    units["lambda_durable_written_byte"] * kept_seconds / (730 * 3600)
)"""


def durable_measured() -> dict[str, Any]:
    """The durable figures the table needs, from the kit's own journal and serializer run
    through the testing SDK's runner (bench/durable_replay.py's agent: a 1 KB answer a turn):
    the bytes a turn's checkpoint adds, the rest of what an execution writes, and the CPU a
    replayed turn costs."""
    from bench.durable_replay import run_execution, run_replay
    from rollout_sdk.aws.durable import ExecutionBill
    from rollout_sdk.dispatch.base import Job
    from rollout_sdk.dispatch.sealed import sealed_event

    carried = Usage(
        functions={"api": LambdaPart(API_SECONDS_PER_INIT, 0.0, MEMORY_MB, "x86_64", 1)}
    )
    carried.units.update(lambda_request=1, http_api_request=1, dynamodb_write_unit=4)
    job = Job("rollout-000123", 1, cost=carried.to_json())
    input_bytes = len(json.dumps(sealed_event(job, "A" * SEALED_KEY_CHARS)).encode())
    bill = ExecutionBill(input_bytes=input_bytes, started_at=0.0, retention_seconds=0.0)

    def written(turns: int) -> float:
        usage = run_execution(turns, bill).usage
        assert usage is not None
        return usage.units["lambda_durable_written_byte"] - input_bytes

    small, large = 10, 50
    w_small, w_large = written(small), written(large)
    per_turn = (w_large - w_small) / (large - small)
    replay = run_replay((200,), runs=3)["cases"][0]
    return {
        "input_bytes": input_bytes,
        "turn_checkpoint_bytes": per_turn,
        # The rest of the measured execution: its one suspension's decision (with the
        # invocation's cost part, in the kit's) beside the turns' checkpoints.
        "suspension_bytes": w_small - (small + 1) * per_turn,
        "replay_us_per_turn": replay["per_turn_us"],
        "replay_turns": replay["turns"],
    }


def turns_per_invocation(latency: float) -> int:
    """How many turns of ``latency`` seconds one invocation starts before it suspends: a turn
    starts while its reserve (30 s, or twice the longest turn) is left before the invocation's
    end (WorkerTimeout less DeadlineMarginSeconds; rollout_sdk/aws/durable.py)."""
    usable = WORKER_TIMEOUT_SECONDS - DEADLINE_MARGIN_SECONDS
    reserve = max(MIN_TURN_RESERVE_SECONDS, 2 * latency)
    return max(1, math.floor((usable - reserve) / latency) + 1)


@dataclass
class DurableScenario:
    turns: int
    latency: float
    invocations: int
    plain: float | None
    durable: float
    extra: dict[str, float]


def durable_scenario(
    turns: int, latency: float, arch: str, measured: dict[str, Any], durable: dict[str, Any]
) -> DurableScenario:
    """Dollars per million rollouts of ``turns`` chat turns of ``latency`` seconds each, on the
    plain worker (None where it cannot run them: longer than one invocation) and on the
    durable worker, with what the durable worker adds, item by item."""
    million = 1e6
    gb = MEMORY_MB / 1024
    price = PRICES[f"lambda_gb_second_{arch}"]
    modes = {m["mode"]: m for m in measured["modes"]}
    base_model_seconds = measured["chat_calls_per_rollout"] * measured["chat_delay_seconds"]
    overhead = modes["direct"]["mean_invocation_seconds"] - base_model_seconds
    init_share = (
        modes["direct"]["init_gb_seconds_per_1000"] / modes["direct"]["gb_seconds_per_1000"]
    )
    model_seconds = turns * latency
    fits = model_seconds + overhead <= WORKER_TIMEOUT_SECONDS - DEADLINE_MARGIN_SECONDS

    def common(invocations: float, worker_seconds: float) -> float:
        return float(
            million
            * (
                worker_seconds * gb * (1 + init_share) * price
                + API_SECONDS_PER_INIT * gb * price
                + (1 + invocations) * PRICES["lambda_request"]
                + PRICES["http_api_request"]
            )
        )

    per_invocation = turns_per_invocation(latency)
    invocations = math.ceil(turns / per_invocation)
    suspensions = invocations - 1
    # Each later invocation replays the turns before it, at the measured CPU a replayed turn
    # costs, slowed by the share of a vCPU the function's memory buys.
    replayed_turns = sum(i * per_invocation for i in range(1, invocations))
    replay_seconds = replayed_turns * durable["replay_us_per_turn"] / 1e6 * FULL_VCPU_MB / MEMORY_MB
    worker_seconds = model_seconds + invocations * overhead + replay_seconds
    operations = 1 + 1 + turns + 2 * suspensions
    written = (
        durable["input_bytes"]
        + turns * durable["turn_checkpoint_bytes"]
        + suspensions * durable["suspension_bytes"]
    )
    kept_seconds = worker_seconds + DURABLE_RETENTION_DAYS * 86400
    extra = {
        "durable operations": million * operations * PRICES["lambda_durable_operation"],
        "data written": million * written * PRICES["lambda_durable_written_byte"],
        "data retained": million
        * written
        * kept_seconds
        / MONTH_SECONDS
        * PRICES["lambda_durable_retained_byte_month"],
        # (in the worker's GB-seconds already: shown apart)
        "replay (worker GB-s)": million * replay_seconds * gb * (1 + init_share) * price,
    }
    durable_usd = common(invocations, worker_seconds) + sum(
        extra[k] for k in ("durable operations", "data written", "data retained")
    )
    plain = common(1, model_seconds + overhead) if fits else None
    return DurableScenario(turns, latency, invocations, plain, durable_usd, extra)


def _more(s: DurableScenario) -> str:
    return f"{(s.durable / (s.plain or 1) - 1) * 100:.0f}%"


def durable_section(measured: dict[str, Any], durable: dict[str, Any]) -> list[str]:
    """docs/cost.md's "Durable worker": what a rollout of N turns costs beside the plain worker."""
    lines = [
        "## Durable worker: a rollout of N turns",
        "",
        "With `DurableWorker=true` a rollout is one durable execution, checkpointed every turn",
        "and carried across invocations (docs/aws.md). Lambda bills it as any invocation, each",
        "replay included, and three charges more (prices above): **durable operations**",
        "(the execution's start, each step, each wait), **data written** (its input and every",
        "step's checkpoint) and **data retained** (what it wrote, by the month, while it runs and",
        f"for its history's retention after, `RetentionPeriodInDays` {DURABLE_RETENTION_DAYS} in",
        "template.yaml). A durable rollout's estimate (`extra_fields.rollout_sdk.cost`) has them as",
        "`units.lambda_durable_operation`, `units.lambda_durable_written_byte` and",
        "`units.lambda_durable_retained_byte_month`, which follow from its execution thus (the",
        "block `tests/aws/test_durable_worker.py` evaluates over a real execution's history):",
        "",
        "```python",
        DURABLE_FORMULA,
        "```",
        "",
        "Every invocation replays the whole history, so the one that ends the rollout knows",
        "these in full and its estimate carries them (with each earlier invocation's own time",
        "and request, which each suspension recorded). The retained figure is an upper bound",
        "(the bytes of a later step are kept for less time than the execution's); the",
        "execution's own result (under 200 bytes) and a step's retried attempts are not in it,",
        "nor an invocation killed before it recorded its suspension (a timeout, a crash): its",
        "own time is lost with it, as a plain worker's that dies (above), its retry's is in.",
        "",
        "Measured for the table (`python -m bench.cost`, the kit's journal and checkpoint",
        "serializer through the testing SDK's runner, an answer of about 1 KB a turn):",
        f"the input (the job, its key sealed, the API function's cost part) {durable['input_bytes']:,}",
        f"bytes; {durable['turn_checkpoint_bytes']:,.0f} bytes of checkpoint a turn; a suspension's",
        f"decision {durable['suspension_bytes']:,.0f} bytes (the bench's journal has no cost meter:",
        "the kit's adds the invocation's cost part, a few hundred bytes); a replayed turn "
        f"{durable['replay_us_per_turn']:,.0f} µs of CPU (at {durable['replay_turns']} turns, the",
        f"largest replay below), taken as {FULL_VCPU_MB}/{MEMORY_MB} times that on a {MEMORY_MB} MB",
        "function (Lambda's share of a vCPU). A turn here is one chat call; a turn with tool calls",
        "adds one step (an operation and its checkpoint) for the batch. The plain worker's column",
        f"is empty where the rollout outlasts one invocation ({WORKER_TIMEOUT_SECONDS:g} s less the",
        f"{DEADLINE_MARGIN_SECONDS:g} s margin), which it cannot.",
        "",
        "Dollars per million rollouts, arm64, 512 MB, direct hand-off:",
        "",
        "| turns | model latency | invocations | plain worker | durable worker | operations | data written | data retained | replay |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for turns in DURABLE_TURNS:
        for latency in DURABLE_LATENCIES:
            s = durable_scenario(turns, latency, "arm64", measured, durable)
            plain = "—" if s.plain is None else f"${s.plain:,.2f}"
            lines.append(
                f"| {turns} | {latency:g} s | {s.invocations} | {plain} | ${s.durable:,.2f} | "
                f"${s.extra['durable operations']:,.2f} | ${s.extra['data written']:,.2f} | "
                f"${s.extra['data retained']:,.2f} | ${s.extra['replay (worker GB-s)']:,.2f} |"
            )
    both = [
        durable_scenario(t, lat, "arm64", measured, durable)
        for t in DURABLE_TURNS
        for lat in DURABLE_LATENCIES
    ]
    paired = [s for s in both if s.plain is not None]
    dearest = max(paired, key=lambda s: s.durable / (s.plain or 1))
    cheapest = min(paired, key=lambda s: s.durable / (s.plain or 1))
    longest = max(both, key=lambda s: s.invocations)
    lines += [
        "",
        "How to read it: where both run a rollout, the durable worker costs "
        f"{_more(dearest)} more than the plain one at {dearest.turns} turns of "
        f"{dearest.latency:g} s, and {_more(cheapest)} at {cheapest.turns} of "
        f"{cheapest.latency:g} s: its operations ($8 per million a rollout makes, one a turn",
        "and one more for a turn's batch of tool calls) weigh most where turns are short, and",
        "the model's time, billed alike by both, where they are long. Replays grow with the",
        "square of the invocations (each replays every turn before it): "
        f"${longest.extra['replay (worker GB-s)']:,.2f} a million at {longest.turns} turns "
        f"in {longest.invocations} invocations. Fewer, longer",
        "invocations keep them down (`WorkerTimeout` 900 s, the longest, is the default); the",
        "durable worker is for rollouts that outlast an invocation, or must survive one ending.",
        "",
    ]
    return lines


#: A running 0.3.8 rollout's record as the table holds it (a prompt of a few messages).
POLLED_PROMPT = [{"role": "user", "content": "What is 17 * 23? Answer with the number."}] * 3
#: The template's MaxLiveRollouts default, and a new account's Lambda concurrency.
MAX_LIVE_ROLLOUTS = 400
ACCOUNT_CONCURRENCY = 1000


def polled_record_kb() -> float:
    """The encoded size of a running 0.3.8 rollout's record (what a poll reads and renews)."""
    from rollout_sdk.store.record import PROTOCOL_OSMOSIS03, idempotency_slot_for

    store = DynamoDBStore("bench", client=None)  # type: ignore[arg-type]  # encoding only
    request = {
        "rollout_id": "r" * 36,
        "initial_messages": POLLED_PROMPT,
        "chat_completions_url": "https://trainer.example.com/v1",
        "label": "391",
        "metadata": {"dataset": "arithmetic", "index": 12345},
        "grade": True,
    }
    record = RolloutRecord(
        rollout_id="r" * 36,
        slot=idempotency_slot_for("r" * 36),
        fingerprint="f" * 64,
        request=request,
        init_response={"status": "queued", "result_wait_timeout_sec": 20.0},
        state=RecordState.RUNNING,
        attempt=1,
        lease_until=time.time() + 60,
        created_at=time.time(),
        updated_at=time.time(),
        expires_at=int(time.time()) + 86400,
        protocol=PROTOCOL_OSMOSIS03,
        poll_digest="d" * 64,
        poll_until=time.time() + 120,
        poll_seen="running",
    )
    return _item_kb(store, record)


def poll_memory_mb() -> int:
    """The poll function's memory as template.yaml deploys it (PollMemorySize's default)."""
    from rollout_sdk.local.emulator import load_template

    return int(load_template(ROOT / "template.yaml")["Parameters"]["PollMemorySize"]["Default"])


def poll_section() -> list[str]:
    """docs/cost.md's "osmosis-ai 0.3.8 result polls": their Lambda concurrency and what a
    rollout-minute of polling costs."""
    wait, recheck = LAMBDA_RESULT_WAIT_SECONDS, LAMBDA_POLL_RECHECK_SECONDS
    memory = poll_memory_mb()
    kb = polled_record_kb()
    read_units = math.ceil(kb / 4)  # a consistent read: a unit per 4 KB
    write_units = math.ceil(kb)  # a unit per KB of the larger of the old and new item
    polls = 60 / wait
    reads = 1 + math.floor(wait / recheck)
    rows = []
    for arch in ("arm64", "x86_64"):
        parts = {
            "poll function (GB-s)": 60 * memory / 1024 * PRICES[f"lambda_gb_second_{arch}"],
            "Lambda requests": polls * PRICES["lambda_request"],
            "HTTP API requests": polls * PRICES["http_api_request"],
            "DynamoDB reads": polls * reads * read_units * PRICES["dynamodb_read_unit"],
            "DynamoDB writes (renewal, live index)": polls
            * (write_units + 1)
            * PRICES["dynamodb_write_unit"],
        }
        rows.append((arch, parts))
    lines = [
        "## osmosis-ai 0.3.8 result polls",
        "",
        "A deploy with a `Workflow` also serves 0.3.8's `GET /rollout/{id}/result`, which the",
        "trainer's `RolloutClient` keeps open for each rollout in flight: each poll waits up to",
        f"{wait:g} s for the rollout's status to change (its `result_wait_timeout_sec`; API",
        "Gateway cuts a request at 30 s, docs/aws.md says why 20), then the client polls again at",
        "once. On Lambda nothing wakes a waiting poll (the worker runs in another function), so",
        f"it reads the record every {recheck:g} s: a poll makes one read and one renewal of the",
        f"polling lease (a write, and one to the live index), then at most {reads - 1} reads, and",
        "one more write when it answers a new status.",
        "",
        "Polls go to a function of their own, `PollFunction` (API Gateway's route",
        "`GET /rollout/{rollout_id}/result`, the same code as the API function's), sized for",
        f"waiting: `PollMemorySize` {memory} MB, as a poll does almost nothing while it waits.",
        "",
        "**Concurrency.** A waiting poll holds a poll function instance for its whole wait, so a",
        "0.3.8 rollout in flight holds two instances: its worker, and its poll. At the",
        f"template's `MaxLiveRollouts` {MAX_LIVE_ROLLOUTS} that is {2 * MAX_LIVE_ROLLOUTS} of a new",
        f"account's {ACCOUNT_CONCURRENCY:,}; a submit past it is answered 429 with `Retry-After`,",
        "which the client waits out. Past the account's limit Lambda throttles, and API Gateway",
        "answers a throttled request 500, which 0.3.8's client does not retry for a poll (it",
        "retries 502, 503 and 504): raise `MaxLiveRollouts` only with the account's limit.",
        "",
        f"**Cost per rollout-minute polled** ({memory} MB, {polls:g} polls a minute, a running",
        f"record of {kb:.1f} KB: {read_units} read unit a read, {write_units} write unit a renewal",
        "and 1 for the live index), per million rollout-minutes:",
        "",
        "| item | arm64 | x86_64 |",
        "|---|---|---|",
    ]
    for item in rows[0][1]:
        lines.append(
            f"| {item} | ${rows[0][1][item] * 1e6:,.2f} | ${rows[1][1][item] * 1e6:,.2f} |"
        )
    totals = [sum(parts.values()) * 1e6 for _, parts in rows]
    lines += [
        f"| **total** | **${totals[0]:,.2f}** | **${totals[1]:,.2f}** |",
        "",
        "The poll function's time is nearly all of it: beside the worker's own while it waits on",
        f"the model ({MEMORY_MB} MB the whole minute), polling adds {memory / MEMORY_MB:.0%} to a 0.3.8",
        f"rollout's Lambda GB-seconds ({memory / MEMORY_MB:.0%} of what they would cost on the API",
        f"function's {MEMORY_MB} MB). Less memory saves more and slows the poll function's cold start (Lambda",
        "gives CPU in proportion to memory; a cold start must fit in the 9 s the wait leaves).",
        "The per-rollout estimate (`extra_fields.rollout_sdk.cost`) does not carry the polls: they",
        "run in invocations of their own, for as long as the trainer polls.",
        "",
    ]
    return lines


def main() -> int:
    source = RESULTS / "handoff-latest.json"
    if not source.exists():
        print(f"{source} is missing: run `python -m bench.handoff` first", file=sys.stderr)
        return 1
    measured = json.loads(source.read_text())
    text = render(measured, write_units(), durable_measured())
    (ROOT / "docs" / "cost.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
