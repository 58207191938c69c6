"""Blocking back ends stay off the event loop: a slow KMS call, a SQLite transaction waiting for
another connection's lock, and a Secrets Manager read each wait on a thread of their adapter's
own while the other rollouts and requests of the same process carry on.

Each slow call blocks on a ``threading.Event`` with a bounded wait, so a call made on the loop
(the bug these tests guard against) fails the test in seconds instead of hanging it.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import httpx
import pytest

from rollout_sdk.agent.loop import RolloutContext, RolloutResult
from rollout_sdk.aws.secrets import SecretServerKeys
from rollout_sdk.dispatch.base import Job
from rollout_sdk.engine.worker import RolloutWorker
from rollout_sdk.errors import StoreError
from rollout_sdk.http.app import create_app
from rollout_sdk.protocol import Message
from rollout_sdk.store.base import Store
from rollout_sdk.store.memory import MemoryStore
from rollout_sdk.store.record import RecordState
from rollout_sdk.store.sqlite import SQLiteStore
from rollout_sdk.traingate.client import COMPLETED_PATH
from rollout_sdk.vault import KmsVault
from testkit.wait import until_true

from .support import (
    EchoAgent,
    FakeTrainGate,
    RecordingDispatcher,
    accepted_record,
    engine_for,
)

if TYPE_CHECKING:
    from mypy_boto3_kms import KMSClient

#: How long a blocked fake waits for its release before it gives up (and fails the test).
HOLD = 5.0
KEY = "cb-key"


def _worker(
    agent: EchoAgent, store: Store, gate: FakeTrainGate, *, vault: KmsVault | None = None
) -> RolloutWorker:
    engine = engine_for(gate, store=store, vault=vault, agent_loop=agent)
    return engine.require_worker()


async def _accept(store: Store, *rollout_ids: str) -> None:
    now = time.time()
    for rid in rollout_ids:
        assert (await store.create(accepted_record(rid, now=now), now=now)).created


# ---------------------------------------------------------------------- KMS


class BlockingKms:
    """KMS's Encrypt and Decrypt (boto3's keyword names), with Encrypt held until ``release``."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.threads: set[str] = set()

    def encrypt(self, *, KeyId: str, Plaintext: bytes, EncryptionContext: Any) -> dict[str, Any]:
        self.threads.add(threading.current_thread().name)
        self.started.set()
        if not self.release.wait(HOLD):
            raise TimeoutError("encrypt was never released")
        return {"CiphertextBlob": b"sealed:" + Plaintext}

    def decrypt(self, *, CiphertextBlob: bytes, EncryptionContext: Any) -> dict[str, Any]:
        self.threads.add(threading.current_thread().name)
        return {"Plaintext": CiphertextBlob.removeprefix(b"sealed:")}


class RefusingCallbacks(FakeTrainGate):
    """Answers 503 to the callback of ``refused``, and as scripted to every other rollout."""

    def __init__(self, refused: str) -> None:
        super().__init__()
        self.refused = refused

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if (
            path.endswith(COMPLETED_PATH)
            and json.loads(request.content)["rollout_id"] == self.refused
        ):
            self.requests.append(request)
            return httpx.Response(503)
        return await super().handle(request)


async def test_a_slow_kms_seal_does_not_stall_the_other_rollouts() -> None:
    kms = BlockingKms()
    vault = KmsVault("alias/callback", client=cast("KMSClient", kms))
    store = MemoryStore()
    others = [f"quick-{i}" for i in range(5)]
    await _accept(store, "parked", *others)
    worker = _worker(EchoAgent(), store, RefusingCallbacks("parked"), vault=vault)
    try:
        # Its callback fails, so the worker parks it for re-drive, sealing the key with KMS.
        parking = asyncio.create_task(worker.run(Job("parked", 1, KEY)))
        await until_true(kms.started.is_set, within=HOLD, what="the KMS encrypt call")
        done = await asyncio.wait_for(
            asyncio.gather(*(worker.run(Job(rid, 1, KEY)) for rid in others)), HOLD
        )
        assert [r.state if r else None for r in done] == [RecordState.DELIVERED] * len(others)
        assert not parking.done()  # still inside KMS, while the others came and went
        kms.release.set()
        parked = await asyncio.wait_for(parking, HOLD)
    finally:
        kms.release.set()
        vault.close()
    assert parked is not None
    assert parked.state == RecordState.FINISHED
    assert parked.next_attempt_at is not None
    assert parked.sealed_key is not None
    assert kms.threads and all(t.startswith("rollout-sdk-kms") for t in kms.threads)


async def test_kms_opens_off_the_loop_and_its_errors_stay_store_errors() -> None:
    from botocore.exceptions import ClientError

    kms = BlockingKms()
    kms.release.set()
    vault = KmsVault("alias/callback", client=cast("KMSClient", kms))
    token = await vault.seal(KEY, rollout_id="r")
    assert await vault.open(token, rollout_id="r") == KEY
    assert kms.threads and all(t.startswith("rollout-sdk-kms") for t in kms.threads)

    def refuse(**_: Any) -> dict[str, Any]:
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "Encrypt")

    kms.encrypt = refuse  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="KMS could not seal"):
        await vault.seal(KEY, rollout_id="r")
    vault.close()
    with pytest.raises(StoreError, match="closed"):
        await vault.open(token, rollout_id="r")


# ---------------------------------------------------------------------- SQLite


class CountingAgent(EchoAgent):
    """``held`` waits for ``go`` once it runs, then makes ``turns`` chat turns; others make one."""

    name = "counting"

    def __init__(self, held: str, turns: int) -> None:
        self.held = held
        self.turns = turns
        self.running = asyncio.Event()
        self.go = asyncio.Event()
        self.done_turns = 0

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        messages: list[Message] = list(ctx.request.messages)
        if ctx.request.rollout_id != self.held:
            return await super().run(ctx)
        self.running.set()
        await self.go.wait()
        for _ in range(self.turns):
            result = await ctx.chat(messages)
            messages.append(result.message)
            self.done_turns += 1
        return ctx.complete(messages, reward=1.0)


async def test_a_sqlite_transaction_waiting_for_a_lock_does_not_stall_other_rollouts(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rollouts.db"
    store = SQLiteStore(path, busy_timeout_seconds=HOLD)
    await _accept(store, "running", "waiting")
    agent = CountingAgent("running", turns=5)
    worker = _worker(agent, store, FakeTrainGate())
    running = asyncio.create_task(worker.run(Job("running", 1, KEY)))
    await asyncio.wait_for(agent.running.wait(), HOLD)  # claimed: its agent is under way
    # Another connection (another process, a backup) takes the write lock.
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        waiting = asyncio.create_task(worker.run(Job("waiting", 1, KEY)))  # its claim must wait
        agent.go.set()
        await until_true(lambda: agent.done_turns == agent.turns, within=HOLD, what="the turns")
        assert not waiting.done()  # its transaction still waits for the lock, off the loop
    finally:
        other.execute("ROLLBACK")
        other.close()
    finals = await asyncio.wait_for(asyncio.gather(running, waiting), HOLD)
    assert [r.state if r else None for r in finals] == [RecordState.DELIVERED] * 2
    await store.close()


def _sqlite_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("rollout-sdk-sqlite")]


async def test_a_sqlite_transaction_that_need_not_wait_runs_on_the_loop_and_one_that_must_hops(
    tmp_path: Path,
) -> None:
    # A hop costs milliseconds on a busy loop; a transaction nothing holds up costs microseconds.
    path = tmp_path / "rollouts.db"
    store = SQLiteStore(path, busy_timeout_seconds=HOLD)
    assert _sqlite_threads() == []
    await _accept(store, "r1", "r2")
    assert await store.get("r1", now=time.time()) is not None
    assert _sqlite_threads() == []  # nothing waited: no thread was needed
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        waiting = asyncio.create_task(store.get("r2", now=time.time()))
        await until_true(lambda: len(_sqlite_threads()) == 1, within=HOLD, what="the hop")
        assert not waiting.done()  # it waits for the lock on the store's thread
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert await asyncio.wait_for(waiting, HOLD) is not None
    await store.close()
    assert _sqlite_threads() == []


async def test_a_closed_sqlite_store_refuses_at_once(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "rollouts.db")
    await _accept(store, "r1")
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await store.get("r1", now=time.time())


# ---------------------------------------------------------------------- Secrets Manager


class BlockingSecret:
    """A secret reader whose first read is held until ``release`` is set."""

    def __init__(self, value: str) -> None:
        self.value = value
        self.started = threading.Event()
        self.release = threading.Event()
        self.threads: set[str] = set()

    def __call__(self, name: str, max_age: int) -> str:
        self.threads.add(threading.current_thread().name)
        self.started.set()
        if not self.release.wait(HOLD):
            raise TimeoutError("the secret read was never released")
        return self.value


async def test_a_slow_secret_read_does_not_stall_other_requests() -> None:
    reader = BlockingSecret(json.dumps(["server-key"]))
    keys = SecretServerKeys("server-key-secret", max_age_seconds=0, reader=reader)
    app = create_app(EchoAgent(), key_provider=keys, dispatcher=RecordingDispatcher())
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://rollout.test") as http:
            headers = {"authorization": "Bearer server-key"}
            checked = asyncio.create_task(http.get("/platform/health", headers=headers))
            await until_true(reader.started.is_set, within=HOLD, what="the secret read")
            health = await asyncio.wait_for(http.get("/health"), HOLD)
            assert health.status_code == 200
            assert not checked.done()  # still reading the secret, off the loop
            reader.release.set()
            assert (await asyncio.wait_for(checked, HOLD)).status_code == 200
    finally:
        reader.release.set()
        keys.close()
    assert reader.threads and all(t.startswith("rollout-sdk-secret") for t in reader.threads)


@pytest.mark.parametrize("value", ["[]", None])
async def test_a_failed_secret_read_still_fails_closed_with_retry_after(value: str | None) -> None:
    def read(name: str, max_age: int) -> str:
        if value is None:
            raise ConnectionError("Secrets Manager is unreachable")
        return value

    keys = SecretServerKeys("server-key-secret", max_age_seconds=0, reader=read)
    app = create_app(EchoAgent(), key_provider=keys, dispatcher=RecordingDispatcher())
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://rollout.test"
        ) as http:
            answer = await http.get(
                "/platform/health", headers={"authorization": "Bearer server-key"}
            )
    finally:
        keys.close()
    assert answer.status_code == 503
    assert "retry-after" in answer.headers
