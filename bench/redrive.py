"""The re-drive's reads: what one scheduled pass reads to find 10 parked rollouts beside N
delivered ones, on moto's server (issue 10, item 1).

    python -m bench.redrive [--sizes 1000,10000,100000] [--threads 4] [--max-pass-seconds 120]

For each size N, on one embedded moto (:class:`~rollout_sdk.local.emulator.EmbeddedMoto`, on
127.0.0.1, fake credentials):

1. a fresh table made from ``template.yaml`` (``provision_table``: the indexes the template
   declares come with it);
2. 10 rollouts parked through the store's own moves (``create``, ``claim``, ``finish``, then
   ``park``, due from a second before, the callback key sealed by a :class:`LocalVault`), so
   their attributes are whatever the kit writes for a parked record, index keys included
   (parked first: moto copies the whole table for each item of a ``TransactWriteItems``, which
   ``create`` is, so on a full table each create would take seconds);
3. N DELIVERED records written as the DynamoDB store's codec writes them
   (``DynamoDBStore._to_item``), with their idempotency slots (``slot#<slot>``), by
   ``BatchWriteItem`` in 25s on ``--threads`` threads; progress goes to stderr;
4. two re-drive passes in a row (``engine.recovery.redrive()`` on an engine over that store, a
   TrainGate stand-in on loopback, the vault), each counted on the store's DynamoDB client with
   botocore hooks (:mod:`testkit.dynamo_reads`): requests by operation, items read (the sum of
   ``ScannedCount`` over Scans and Queries) and returned (``Count``), and timed;
5. what the stand-in received: each parked rollout exactly once, none of the delivered ones.

The goal, per size: at most 100 items read by each pass, each parked rollout delivered once. A
parked rollout never delivered or delivered twice, or a delivered one sent again, is a broken
measurement (exit 1), as elsewhere in ``make bench``. A full-table Scan reads the whole table
(2N + 20 items with the slots) every pass; an index of what waits reads about 10.

moto is not DynamoDB: it holds the table in one Python process, serves DynamoDB requests one at a
time, and answers a Query on an index by looking at every item of the table, so its time per
pass may still grow with the table when the items read do not. The figure that matters for cost
is items read (DynamoDB charges read units for every item a Scan or Query reads); the seconds are
moto's. Seeding is bounded by moto too (about a millisecond per record item on one core).

A size whose pass would run past ``--max-pass-seconds`` is skipped, with the reason: the time of
the size before it, scaled by the growth in table size (squared when that pass read more than the
goal: moto sorts the whole table again for each page of a Scan, so a full Scan is quadratic in
it; a full Scan of 100k records would take moto many minutes a pass).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bench.common import emit_result, rss
from testkit import REPO_ROOT
from testkit.aws import use_fake_aws
from testkit.bodies import calculator_body
from testkit.dynamo_reads import Counted, DynamoReads, describe

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from rollout_sdk.store.dynamodb import DynamoDBStore
    from rollout_sdk.store.record import RolloutRecord
    from rollout_sdk.testing.standin import TrainGateStandIn
    from rollout_sdk.vault import KeyVault

TEMPLATE = REPO_ROOT / "template.yaml"
DEFAULT_SIZES = (1_000, 10_000, 100_000)
PARKED = 10
#: At most this many items read by one pass, at every size.
GOAL_ITEMS_READ = 100
BATCH = 25  # BatchWriteItem's most
CALLBACK_KEY = "bench-redrive-callback-key"
TTL_SECONDS = 3600
PROGRESS_SECONDS = 5.0


_BEGAN = time.monotonic()


def log(message: str) -> None:
    """A progress line on stderr, with the seconds since this module was loaded."""
    print(f"[redrive {time.monotonic() - _BEGAN:5.0f} s] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- records


def _response(rollout_id: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The final response of a solved calculator rollout: one tool call, then the answer."""
    from rollout_sdk.protocol import RolloutResponse, RolloutStatus

    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "calculate", "arguments": '{"operation": "multiply", "a": 6, "b": 7}'},
    }
    return RolloutResponse(
        rollout_id=rollout_id,
        status=RolloutStatus.COMPLETED,
        reward=1.0,
        final_messages=[
            *messages,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
            {"role": "assistant", "content": "The answer is 42."},
        ],
    ).model_dump(mode="json")


def new_record(rollout_id: str, server_url: str, now: float) -> RolloutRecord:
    """The ACCEPTED record of a calculator init (the calculator's tools in its 202 body)."""
    from examples.calculator.agent import TOOLS
    from rollout_sdk.protocol import InitResponse, RolloutRequest
    from rollout_sdk.store.record import RolloutRecord

    request = RolloutRequest.model_validate(
        calculator_body(rollout_id, server_url, callback_key=CALLBACK_KEY)
    )
    return RolloutRecord.new(
        request,
        InitResponse(rollout_id=rollout_id, tools=TOOLS),
        now=now,
        ttl_seconds=TTL_SECONDS,
    )


class DeliveredRecords:
    """DELIVERED records as a worker leaves them, each its own: one record is validated through
    the protocol's models, and each of the others is that one with its own id, slot, fingerprint
    and response (building each through pydantic would cost more than moto's write of it)."""

    def __init__(self, server_url: str, now: float, prefix: str) -> None:
        from rollout_sdk.protocol import RolloutRequest
        from rollout_sdk.store.record import RecordState, expiry

        self.prefix = prefix
        base = new_record(f"{prefix}-0", server_url, now)
        self._request = RolloutRequest.model_validate(base.request)
        self.base = base.evolve(
            state=RecordState.DELIVERED,
            attempt=1,
            response=_response(base.rollout_id, base.request["messages"]),
            finished_at=now,
            delivered_at=now,
            delivery_attempts=1,
            updated_at=now,
            expires_at=expiry(now, TTL_SECONDS),
        )

    def rollout_id(self, index: int) -> str:
        return f"{self.prefix}-{index}"

    def record(self, index: int) -> RolloutRecord:
        from rollout_sdk.store.record import idempotency_slot, request_fingerprint

        rollout_id = self.rollout_id(index)
        request = {**self.base.request, "rollout_id": rollout_id}
        assert self.base.response is not None
        return self.base.evolve(
            rollout_id=rollout_id,
            slot=idempotency_slot(self._request.model_copy(update={"rollout_id": rollout_id})),
            fingerprint=request_fingerprint(request),
            request=request,
            init_response={**self.base.init_response, "rollout_id": rollout_id},
            response={**self.base.response, "rollout_id": rollout_id},
        )


def slot_item(record: RolloutRecord) -> dict[str, Any]:
    """The idempotency slot's item, as ``DynamoDBStore.create`` writes it."""
    from rollout_sdk.store.dynamodb import SLOT_PREFIX, TTL_ATTRIBUTE

    return {
        "pk": {"S": SLOT_PREFIX + record.slot},
        "rollout_id": {"S": record.rollout_id},
        TTL_ATTRIBUTE: {"N": str(record.expires_at)},
    }


# ---------------------------------------------------------------- seeding


@dataclass
class Progress:
    """Items written so far, printed every few seconds."""

    label: str
    total: int
    began: float = field(default_factory=time.perf_counter)
    done: int = 0
    _printed: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, count: int) -> None:
        with self._lock:
            self.done += count
            now = time.perf_counter()
            if now - self._printed < PROGRESS_SECONDS and self.done < self.total:
                return
            self._printed = now
            done, elapsed = self.done, now - self.began
        rate = done / elapsed if elapsed > 0 else 0.0
        log(
            f"{self.label}: {done:,}/{self.total:,} items written, {elapsed:.0f} s, "
            f"{rate:,.0f} items/s"
        )


def _write(client: DynamoDBClient, table: str, items: list[dict[str, Any]]) -> int:
    """One BatchWriteItem of ``items`` (at most 25), again for whatever comes back
    unprocessed; returns the requests it took."""
    requests: list[Any] = [{"PutRequest": {"Item": item}} for item in items]
    for attempt in range(20):
        answer = client.batch_write_item(RequestItems={table: requests})
        requests = list(answer.get("UnprocessedItems", {}).get(table, []))
        if not requests:
            return attempt + 1
        time.sleep(min(1.0, 0.05 * 2**attempt))
    raise RuntimeError(f"BatchWriteItem left {len(requests)} items unprocessed 20 times")


def seeding_client(endpoint: str, threads: int) -> DynamoDBClient:
    """A client of the emulator's session for seeding: a connection per thread, and no
    parameter validation (the items are the codec's own; it costs CPU the emulator needs)."""
    from botocore.config import Config

    from rollout_sdk.local.emulator import local_session

    config = Config(
        max_pool_connections=threads,
        parameter_validation=False,
        retries={"mode": "standard", "max_attempts": 4},
        read_timeout=60,
    )
    client: DynamoDBClient = local_session().client(
        "dynamodb", endpoint_url=endpoint, config=config
    )
    return client


def seed_delivered(
    client: DynamoDBClient,
    store: DynamoDBStore,
    records: DeliveredRecords,
    count: int,
    *,
    threads: int,
) -> dict[str, Any]:
    """Write ``count`` delivered records and their slots; how long it took."""
    progress = Progress(f"{count:,} records", total=2 * count)

    def chunk(start: int) -> int:
        stop = min(start + BATCH, count)
        made = [records.record(i) for i in range(start, stop)]
        # The codec's own items: the bytes and attributes the kit writes for a delivered record.
        items = [store._to_item(r) for r in made]  # noqa: SLF001
        calls = _write(client, store.table_name, items)
        progress.add(len(made))
        calls += _write(client, store.table_name, [slot_item(r) for r in made])
        progress.add(len(made))
        return calls

    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="seed") as pool:
        calls = sum(pool.map(chunk, range(0, count, BATCH)))
    seconds = time.perf_counter() - began
    return {
        "seconds": round(seconds, 3),
        "items": 2 * count,
        "items_per_s": round(2 * count / seconds, 1) if seconds > 0 else None,
        "batch_write_calls": calls,
        "threads": threads,
    }


# ---------------------------------------------------------------- parking and passes


async def park(store: DynamoDBStore, vault: KeyVault, rollout_id: str, server_url: str) -> None:
    """One rollout parked as the kit parks it: created, run, finished, every callback attempt
    failed, the key sealed, due from a second before now."""
    from rollout_sdk.protocol import RolloutResponse
    from rollout_sdk.store.record import expiry

    now = time.time()
    record = new_record(rollout_id, server_url, now - 30)
    created = await store.create(record, now=now - 30)
    claimed = await store.claim(
        rollout_id, attempt=1, lease_until=now + 60, expires_at=expiry(now, TTL_SECONDS), now=now
    )
    response = RolloutResponse.model_validate(_response(rollout_id, record.request["messages"]))
    finished = await store.finish(
        rollout_id,
        attempt=1,
        response=response,
        lease_until=now + 60,
        expires_at=expiry(now, TTL_SECONDS),
        now=now,
    )
    parked = await store.park(
        rollout_id,
        attempt=1,
        error="TrainGate answered 503 to every attempt",
        next_attempt_at=now - 1,
        delivery_attempts=3,
        expires_at=expiry(now, TTL_SECONDS),
        now=now,
        sealed_key=await vault.seal(CALLBACK_KEY, rollout_id=rollout_id),
    )
    if not (created.created and claimed.applied and finished.applied and parked.applied):
        raise RuntimeError(f"could not park {rollout_id}: a move of the store did not apply")


@dataclass
class Pass:
    """One re-drive pass: what it asked of DynamoDB, how long it took, what it sent."""

    number: int
    counted: Counted
    seconds: float
    report: dict[str, Any]
    received: int

    def to_json(self) -> dict[str, Any]:
        return {
            "pass": self.number,
            **self.counted.to_json(),
            "seconds": round(self.seconds, 4),
            "callbacks_received": self.received,
            "report": self.report,
        }


def received_total(completions: dict[str, list[dict[str, Any]]]) -> int:
    return sum(len(bodies) for bodies in completions.values())


def check_callbacks(
    completions: dict[str, list[dict[str, Any]]], parked: list[str], delivered_prefix: str
) -> tuple[dict[str, Any], list[str]]:
    """What the stand-in received against what it should have: each parked rollout once, no
    delivered one. Returns the tally and the failures."""
    counts = {rid: len(completions.get(rid, [])) for rid in parked}
    missing = sorted(rid for rid, n in counts.items() if n == 0)
    twice = sorted(rid for rid, n in counts.items() if n > 1)
    resent = sorted(rid for rid in completions if rid.startswith(delivered_prefix))
    failures = [
        *(f"parked {rid} never delivered" for rid in missing),
        *(f"parked {rid} delivered {counts[rid]} times" for rid in twice),
        *(f"delivered {rid} sent again" for rid in resent),
    ]
    tally = {
        "parked_delivered_once": sum(1 for n in counts.values() if n == 1),
        "parked_missing": missing,
        "parked_delivered_twice": twice,
        "delivered_sent_again": resent[:20],
        "delivered_sent_again_count": len(resent),
    }
    return tally, failures


async def park_all(
    store: DynamoDBStore, vault: KeyVault, parked: list[str], server_url: str
) -> None:
    for rollout_id in parked:
        await park(store, vault, rollout_id, server_url)


async def redrive_passes(
    store: DynamoDBStore,
    vault: KeyVault,
    reads: DynamoReads,
    standin: TrainGateStandIn,
    passes: int = 2,
) -> list[Pass]:
    """``passes`` re-drive passes in a row, each counted and timed."""
    from rollout_sdk.engine.assembly import Engine
    from rollout_sdk.settings import RolloutSettings
    from rollout_sdk.traingate.client import TrainGateClient

    settings = RolloutSettings()
    client = TrainGateClient(settings.client)
    engine = Engine.build(store=store, client=client, settings=settings, vault=vault)
    done: list[Pass] = []
    try:
        reads.take()  # only the passes' own requests
        for number in range(1, passes + 1):
            before = received_total(standin.completions)
            began = time.perf_counter()
            report = await engine.recovery.redrive()
            seconds = time.perf_counter() - began
            done.append(
                Pass(
                    number=number,
                    counted=reads.take(),
                    seconds=seconds,
                    report={
                        "examined": report.examined,
                        "delivered": len(report.delivered),
                        "parked": len(report.parked),
                        "undeliverable": len(report.undeliverable),
                        "skipped": len(report.skipped),
                        "failed": len(report.failed),
                    },
                    received=received_total(standin.completions) - before,
                )
            )
    finally:
        await client.aclose()
    return done


# ---------------------------------------------------------------- one size, all sizes


def predicted_pass_seconds(previous: dict[str, Any], size: int) -> float | None:
    """The first pass's time expected at ``size`` from the size measured before it (None:
    unknown): the last pass (which sends nothing) is the reading, scaled by the growth in table
    size (squared when it read more than the goal), and the first pass's sending comes on top."""
    passes = previous.get("passes") or []
    if not passes:
        return None
    reading = float(passes[-1]["seconds"])
    sending = max(0.0, float(passes[0]["seconds"]) - reading)
    read = max(int(p["scanned_count"]) for p in passes)
    growth = size / int(previous["delivered_records"])
    return sending + reading * (growth**2 if read > GOAL_ITEMS_READ else growth)


def judge(size: dict[str, Any]) -> bool | None:
    """The goal at one size: every pass read at most the goal, each parked rollout delivered
    once (None: not measured)."""
    passes = size.get("passes") or []
    if not passes:
        return None
    read = max(int(p["scanned_count"]) for p in passes)
    tally = size.get("callbacks") or {}
    once = tally.get("parked_delivered_once") == size.get("parked")
    return read <= GOAL_ITEMS_READ and once and not tally.get("delivered_sent_again_count")


def measure_size(
    endpoint: str,
    standin: TrainGateStandIn,
    server_url: str,
    size: int,
    *,
    threads: int,
    seed_only: bool = False,
) -> dict[str, Any]:
    """Park 10 rollouts in a fresh table, seed it with ``size`` delivered records, run two
    passes."""
    from rollout_sdk.local.emulator import local_client, provision_table
    from rollout_sdk.store.dynamodb import DynamoDBStore
    from rollout_sdk.vault import LocalVault

    table = provision_table(endpoint, template_path=TEMPLATE, table_name=f"bench-redrive-{size}")
    seeder = seeding_client(endpoint, threads)
    ddb: DynamoDBClient = local_client("dynamodb", endpoint)
    store = DynamoDBStore(table, client=ddb)
    described = ddb.describe_table(TableName=table)["Table"]
    indexes = [i["IndexName"] for i in described.get("GlobalSecondaryIndexes", [])]
    log(
        f"{size:,} delivered records: table {table} "
        f"(indexes: {', '.join(indexes) or 'none'}), seeding on {threads} threads"
    )
    # Parked first: a create is a TransactWriteItems, and moto copies the whole table for each
    # item of a transaction (to roll back), so on a full table each would take seconds.
    vault = LocalVault()
    parked = [f"bench-redrive-{size}-parked-{i}" for i in range(PARKED)]
    if not seed_only:
        asyncio.run(park_all(store, vault, parked, server_url))
    prefix = f"bench-redrive-{size}-delivered"
    records = DeliveredRecords(server_url, time.time(), prefix)
    seeding = seed_delivered(seeder, store, records, size, threads=threads)
    log(
        f"{size:,} records: seeded {seeding['items']:,} items in {seeding['seconds']:.1f} s "
        f"({seeding['items_per_s']:,.0f} items/s)"
    )
    out: dict[str, Any] = {
        "delivered_records": size,
        "parked": PARKED,
        "table": table,
        "indexes": indexes,
        "seeding": seeding,
        "passes": [],
        "failures": [],
    }
    if seed_only:
        ddb.delete_table(TableName=table)
        return out
    reads = DynamoReads()
    detach = reads.attach(ddb)
    try:
        passes = asyncio.run(redrive_passes(store, vault, reads, standin))
    finally:
        detach()
    out["table_items"] = int(ddb.describe_table(TableName=table)["Table"].get("ItemCount", 0))
    out["passes"] = [p.to_json() for p in passes]
    tally, failures = check_callbacks(standin.completions, parked, prefix)
    if passes and passes[-1].received:
        failures.append(f"the pass after the first sent {passes[-1].received} callbacks")
    out["callbacks"] = tally
    out["failures"] = failures
    out["goal"] = judge(out)
    for p in passes:
        log(
            f"{size:,} records, pass {p.number}: read {p.counted.scanned:,} items "
            f"(returned {p.counted.returned:,}), {p.counted.describe()}, {p.seconds:.2f} s, "
            f"{p.received} callbacks"
        )
    ddb.delete_table(TableName=table)
    return out


@contextlib.contextmanager
def standin_server() -> Iterator[tuple[TrainGateStandIn, str]]:
    """The TrainGate stand-in on a free loopback port, checking the callback key."""
    from rollout_sdk.testing.standin import TrainGateStandIn
    from rollout_sdk.testing.threads import ServerThread

    standin = TrainGateStandIn(callback_key=CALLBACK_KEY)
    server = ServerThread(standin.app)
    server.start()
    try:
        yield standin, server.url
    finally:
        standin.release()
        server.stop()


def run(
    sizes: list[int],
    *,
    threads: int = 4,
    max_pass_seconds: float = 120.0,
    seed_only: bool = False,
) -> dict[str, Any]:
    """Every size in increasing order, on one embedded moto; the figure for ``make bench``."""
    import importlib.metadata

    from rollout_sdk.local.emulator import EmbeddedMoto

    measured: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    failures: list[str] = []
    with EmbeddedMoto() as moto, standin_server() as (standin, url):
        for size in sorted(set(sizes)):
            expected = predicted_pass_seconds(measured[-1], size) if measured else None
            if expected is not None and expected > max_pass_seconds:
                skipped[str(size)] = (
                    f"a pass would take about {expected:,.0f} s, over --max-pass-seconds "
                    f"{max_pass_seconds:g} (scaled from the pass beside "
                    f"{measured[-1]['delivered_records']:,} records)"
                )
                log(f"{size:,} records skipped: {skipped[str(size)]}")
                continue
            result = measure_size(
                moto.endpoint_url, standin, url, size, threads=threads, seed_only=seed_only
            )
            assert moto.pid is not None
            result["moto_rss_mib"] = round(rss(moto.pid) / 2**20, 1)
            measured.append(result)
            failures += [f"{size:,} records: {f}" for f in result["failures"]]
    return {
        "goal_items_read": GOAL_ITEMS_READ,
        "parked": PARKED,
        "sizes": measured,
        "skipped": skipped,
        "max_pass_seconds": max_pass_seconds,
        "moto": importlib.metadata.version("moto"),
        "note": "items read is the sum of ScannedCount over the pass's Scans and Queries "
        "(DynamoDB's read units follow it); the seconds are moto's, not DynamoDB's",
        "failures": failures,
    }


# ---------------------------------------------------------------- report


def _fmt_int(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "-"


def summary_lines(figure: dict[str, Any]) -> list[str]:
    """The re-drive's rows of a summary table."""
    lines = [
        f"re-drive: one pass finds {figure.get('parked', PARKED)} parked rollouts beside N "
        f"delivered records, moto {figure.get('moto', '?')}; goal: each pass reads <= "
        f"{figure.get('goal_items_read', GOAL_ITEMS_READ)} items, each parked rollout sent once",
        f"  {'delivered':>9}{'table items':>13}{'pass':>6}{'items read':>12}{'returned':>10}"
        f"{'seconds':>9}{'sent':>6}  requests",
    ]
    for size in figure.get("sizes", []):
        seeding = size.get("seeding", {})
        lead = f"  {_fmt_int(size['delivered_records']):>9}{_fmt_int(size.get('table_items')):>13}"
        for p in size.get("passes", []):
            lines.append(
                f"{lead}{p['pass']:>6}{_fmt_int(p['scanned_count']):>12}"
                f"{_fmt_int(p['count']):>10}{p['seconds']:>9.2f}{p['callbacks_received']:>6}  "
                f"{describe(p['requests'])}"
            )
            lead = " " * len(lead)
        lines.append(
            f"  {'':>9}  seeded {_fmt_int(seeding.get('items'))} items in "
            f"{seeding.get('seconds', math.nan):.1f} s ({seeding.get('items_per_s') or 0:,.0f} "
            f"items/s, {seeding.get('threads')} threads); indexes: "
            f"{', '.join(size.get('indexes') or []) or 'none'}; moto RSS "
            f"{size.get('moto_rss_mib', '-')} MiB"
        )
    for size, reason in (figure.get("skipped") or {}).items():
        lines.append(f"  {int(size):>9,}  skipped: {reason}")
    lines.append(
        "  (items read: ScannedCount over the Scans and Queries, what read units are charged "
        "for; returned: Count; seconds are moto's)"
    )
    return lines


# ---------------------------------------------------------------- command line


def parse_sizes(text: str) -> list[int]:
    """``1000,10000`` as sizes; ValueError for anything else."""
    sizes = [int(part) for part in text.split(",") if part.strip()]
    if not sizes or any(not 1 <= s <= 1_000_000 for s in sizes):
        raise ValueError(f"sizes are 1 to 1,000,000 records, comma-separated: {text!r}")
    return sizes


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.redrive", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=list(DEFAULT_SIZES),
        help="delivered records per table, comma-separated (default 1000,10000,100000)",
    )
    parser.add_argument("--threads", type=int, default=4, help="seeding threads (default 4)")
    parser.add_argument(
        "--max-pass-seconds",
        type=float,
        default=120.0,
        help="skip a size whose pass would take longer than this, judged from the size before "
        "(default 120)",
    )
    parser.add_argument(
        "--seed-only", action="store_true", help="seed each size and time it; run no pass"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 1 <= args.threads <= 32:
        print("bench.redrive: --threads 1-32", file=sys.stderr)
        return 2
    use_fake_aws()  # before any boto3 client: nothing here may reach real AWS
    result = run(
        args.sizes,
        threads=args.threads,
        max_pass_seconds=args.max_pass_seconds,
        seed_only=args.seed_only,
    )
    print("\n".join(summary_lines(result)))
    for failure in result["failures"]:
        print(f"  BROKEN: {failure}")
    emit_result(result)
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
