"""The local rollout server: the same app and worker as on Lambda, one process, durable on disk.

The app, the stores, the vault and uvicorn are imported inside the functions that build them:
``serve_agent_loop`` imports this module and needs only what the chosen store uses.
"""

from __future__ import annotations

import errno
import gc
import os
import socket
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

from rollout_sdk.errors import ServeError

if TYPE_CHECKING:
    from fastapi import FastAPI

    from rollout_sdk.agent.loop import RolloutAgentLoop
    from rollout_sdk.engine.workflows import Workflows
    from rollout_sdk.local.exposure import Exposure
    from rollout_sdk.settings import RolloutSettings
    from rollout_sdk.store.base import Store

DEFAULT_STATE_DIR = Path(".rollout-state")
SQLITE_FILE = "rollouts.sqlite3"
LOCK_FILE = "server.lock"
KEY_FILE = "callback-keys.key"
OWNER_FILE = "server-id"

StoreKind = Literal["sqlite", "memory", "dynamodb"]


def owner_id(state_dir: str | Path = DEFAULT_STATE_DIR) -> str:
    """The id of the server instance that owns ``state_dir``: made once, kept in its
    ``server-id`` file. Records the server writes name it (a DynamoDB table may hold other
    servers' records too), so its restart sweep reports its own and no one else's."""
    import uuid

    path = Path(state_dir) / OWNER_FILE
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    made = uuid.uuid4().hex
    try:
        with path.open("x", encoding="utf-8") as handle:
            handle.write(made + "\n")
    except FileExistsError:  # another process made it first: use theirs
        return path.read_text(encoding="utf-8").strip()
    return made


def open_store(kind: StoreKind, state_dir: str | Path = DEFAULT_STATE_DIR) -> Store:
    """The store the local server runs on: SQLite under ``state_dir`` (default) or memory."""
    from rollout_sdk.store.memory import MemoryStore
    from rollout_sdk.store.sqlite import SQLiteStore

    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SQLiteStore(Path(state_dir) / SQLITE_FILE, owner=owner_id(state_dir))
    if kind == "dynamodb":
        raise ServeError("the dynamodb store needs an endpoint: use open_dynamodb_store()")
    raise ServeError(f"unknown store {kind!r}; choose sqlite, memory or dynamodb")


def open_dynamodb_store(
    endpoint_url: str,
    *,
    template: str | Path = "template.yaml",
    max_connections: int = 64,
    with_payload_bucket: bool = True,
    owner: str | None = None,
) -> Store:
    """The DynamoDB store on a local endpoint, its table created from ``template`` if missing.

    ``with_payload_bucket`` also creates an S3 bucket there for values too large for an item
    (moto has S3; a DynamoDB-only emulator does not, and then such values are refused).
    ``owner`` (a server's :func:`owner_id`) puts every record the server has in flight in the
    due index under its id, for its restart sweep. Raises StoreError when the endpoint cannot
    be used.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    from rollout_sdk.errors import StoreError
    from rollout_sdk.local.emulator import local_client, provision_table
    from rollout_sdk.store.dynamodb import DynamoDBStore

    # Clients of their own, with fake credentials given to them: the local server neither
    # uses the Lambda runtime's clients nor changes the process's AWS environment.
    dynamodb = local_client("dynamodb", endpoint_url, max_pool_connections=max_connections)
    s3 = local_client("s3", endpoint_url, max_pool_connections=max_connections)
    bucket = "rollout-sdk-local-payloads" if with_payload_bucket else None
    try:
        table = provision_table(endpoint_url, template_path=template)
        if bucket:
            s3.create_bucket(Bucket=bucket)
    except (BotoCoreError, ClientError) as exc:
        raise StoreError(f"cannot use the DynamoDB endpoint {endpoint_url}: {exc}") from exc
    return DynamoDBStore(
        table, client=dynamodb, s3=s3 if bucket else None, bucket=bucket, owner=owner
    )


class StateLock:
    """One local server per state folder: an exclusive ``flock`` on ``server.lock``.

    The restart sweep reports every rollout the store shows in flight; that is only right when
    no other live process is running them, which this lock guarantees. The OS drops it when the
    process dies, even by SIGKILL.
    """

    def __init__(self, state_dir: str | Path) -> None:
        self.path = Path(state_dir) / LOCK_FILE
        self._handle: IO[str] | None = None

    def acquire(self) -> StateLock:
        """Take the lock; ServeError naming the holder when another server has it."""
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise ServeError(
                f"the state folder {self.path.parent} is in use by a running server ({holder}); "
                "stop it, or give this one another --state-dir"
            ) from exc
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        self._handle = handle
        return self

    def release(self) -> None:
        """Drop the lock."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def build_local_app(
    agent_loop: RolloutAgentLoop,
    *,
    store: StoreKind | Store = "sqlite",
    state_dir: str | Path = DEFAULT_STATE_DIR,
    api_keys: Iterable[str] = (),
    settings: RolloutSettings | None = None,
    debug_dir: str | Path | None = None,
    docs: bool = True,
    host_check: Iterable[str] | None = None,
    workflows: Workflows | None = None,
) -> FastAPI:
    """The local server's app: :func:`rollout_sdk.http.app.local_app` on a durable store with
    the in-process worker, its metrics at ``GET /metrics`` (Prometheus' text format).

    ``host_check``: the Host header values it answers to (421 for any other; None: no check;
    :meth:`rollout_sdk.local.exposure.Exposure.host_check` says which for a bind address).

    On a store that outlives the process (SQLite, or a store with an owner: DynamoDB through
    ``--dynamodb-endpoint``) it owns ``state_dir`` (a lock), keeps callback keys sealed under a
    key file there, reports at start-up every rollout of its own a previous process left in
    flight, and re-drives undelivered responses. Raises ServeError when another server holds
    the folder.
    """
    app = _build_app(agent_loop, store, state_dir, api_keys, settings, debug_dir, docs, workflows)
    if host_check is not None:
        from rollout_sdk.http.host_check import HostCheckMiddleware

        # Added last, so it runs first: a request under a foreign name meets nothing else.
        app.add_middleware(HostCheckMiddleware, allowed=host_check)
    return app


def _build_app(
    agent_loop: RolloutAgentLoop,
    store: StoreKind | Store,
    state_dir: str | Path,
    api_keys: Iterable[str],
    settings: RolloutSettings | None,
    debug_dir: str | Path | None,
    docs: bool,
    workflows: Workflows | None = None,
) -> FastAPI:
    from rollout_sdk.http.app import local_app, local_engine
    from rollout_sdk.http.prometheus import PrometheusTelemetry
    from rollout_sdk.settings import get_settings
    from rollout_sdk.vault import LocalVault

    settings = settings or get_settings()
    metrics = PrometheusTelemetry()  # the client's chat calls and callbacks count here too
    durable = store == "sqlite" or (not isinstance(store, str) and store.owner is not None)
    if not durable:
        engine = local_engine(
            agent_loop,
            settings,
            store=open_store(store, state_dir) if isinstance(store, str) else store,
            debug_dir=debug_dir,
            telemetry=metrics,
            workflows=workflows,
        )
        return local_app(agent_loop, engine, keys=api_keys, docs=docs, metrics=metrics)
    lock = StateLock(state_dir).acquire()
    opened: Store | None = None
    try:
        opened = open_store("sqlite", state_dir) if isinstance(store, str) else store
        engine = local_engine(
            agent_loop,
            settings,
            store=opened,
            vault=LocalVault(Path(state_dir) / KEY_FILE),
            debug_dir=debug_dir,
            telemetry=metrics,
            workflows=workflows,
        )
        return local_app(
            agent_loop,
            engine,
            keys=api_keys,
            docs=docs,
            # Every rollout of its own a previous process left in flight, reported once.
            on_startup=[engine.recovery.sweep_after_restart],
            on_shutdown=[lock.release],
            metrics=metrics,
        )
    except BaseException:
        from rollout_sdk.store.sqlite import SQLiteStore

        if isinstance(opened, SQLiteStore):
            opened.close_now()  # nothing started: close the file here, not through the app
        lock.release()
        raise


def what_a_restart_forgets(store: str, *, embedded: bool) -> str | None:
    """What the chosen store loses when the server stops, said at start-up; None for SQLite and
    ``--dynamodb-endpoint``, whose restart sweep reports every rollout a stopped server left in
    flight (the server's owner id, in its state folder, names its records)."""
    if store == "memory" or embedded:
        what = "the memory store" if store == "memory" else "the embedded emulator"
        return (
            f"{what} forgets everything when this server stops: idempotency records, final "
            "responses, and rollouts still in flight, which are then never reported; the "
            "default SQLite store keeps them"
        )
    return None


@dataclass(frozen=True)
class StoreChoice:
    """The record store a server runs on: ``kind``, and for ``dynamodb`` its endpoint (None:
    an embedded moto server, started and stopped with the server) and the SAM template its
    table is created from."""

    kind: StoreKind = "sqlite"
    dynamodb_endpoint: str | None = None
    template: str | Path = "template.yaml"


@contextmanager
def _opened(choice: StoreChoice, state_dir: str | Path) -> Iterator[tuple[StoreKind | Store, str]]:
    """The store to build the app on, and how the start-up line names it."""
    if choice.kind != "dynamodb":
        where = (
            f"SQLite at {Path(state_dir) / SQLITE_FILE}" if choice.kind == "sqlite" else "memory"
        )
        yield choice.kind, where
        return
    from rollout_sdk.local.emulator import EmbeddedMoto

    emulator = EmbeddedMoto().start() if choice.dynamodb_endpoint is None else None
    endpoint = emulator.endpoint_url if emulator is not None else str(choice.dynamodb_endpoint)
    try:
        store = open_dynamodb_store(
            endpoint,
            template=choice.template,
            with_payload_bucket=emulator is not None,
            # On an endpoint that outlives this server, its records name it: its restart
            # sweep finds them (the embedded emulator dies with the server: nothing to find).
            owner=None if emulator is not None else owner_id(state_dir),
        )
        embedded = " (embedded moto, stopped on exit)" if emulator else ""
        yield store, f"DynamoDB at {endpoint}{embedded}"
    finally:
        if emulator is not None:
            emulator.stop()


def _bound(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (what uvicorn would bind); ServeError naming the
    fix when the port is taken or not this user's to take."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        taken = exc.errno == errno.EADDRINUSE
        why = "another process listens there" if taken else exc.strerror or str(exc)
        raise ServeError(
            f"cannot serve on {host}:{port}: {why}; give another --port"
            + (" (or stop that process)" if taken else "")
        ) from exc
    return sock


#: The youngest generation's collection threshold while the server runs, in allocations
#: (CPython's default is 700). Every rollout allocates thousands of short-lived objects (parsed
#: bodies, models, records), so at 700 the collector ran a young collection every 5 or 6
#: rollouts, a middle one every 60 and a full one, which walks every record the store holds,
#: every 750 or so (3,000 rollouts: 546, 50 and 4, counted with ``gc.callbacks``, about 12% of
#: the server's CPU). Measured with ``python -m bench.instructions``-style runs (1,000 rollouts
#: under callgrind), 7,000 took 3.2% of the server's instructions off with the memory store and
#: 2.9% with SQLite (2,000 took 2.5% and 2.8%). Garbage in cycles waits at most that many
#: allocations longer.
GC_YOUNG_THRESHOLD = 7000


@contextmanager
def collecting_less() -> Iterator[None]:
    """The youngest generation's threshold raised to :data:`GC_YOUNG_THRESHOLD` (never
    lowered, if the process set its own higher, nor set at all where the process turned
    automatic collection off with a threshold of 0), and put back after."""
    before = gc.get_threshold()
    if before[0]:
        gc.set_threshold(max(before[0], GC_YOUNG_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def run_server(
    agent_loop: RolloutAgentLoop,
    exposure: Exposure,
    *,
    api_keys: Iterable[str] = (),
    store: StoreChoice | None = None,
    state_dir: str | Path = DEFAULT_STATE_DIR,
    settings: RolloutSettings | None = None,
    debug_dir: str | Path | None = None,
    log_level: str = "info",
    loop: str = "auto",
    http: str = "auto",
    announce: Callable[[str], None] = lambda _line: None,
    workflows: Workflows | None = None,
) -> None:
    """Serve ``agent_loop`` with uvicorn on ``exposure``'s address until interrupted: the one
    path of ``rollout-sdk serve`` and of :func:`~rollout_sdk.serving.serve_agent_loop`. ``announce`` gets the start-up lines
    (where, which store, who may call; what a restart forgets).

    The caller has checked ``exposure`` (each words its opt-out its own way). Raises
    ConfigurationError, StoreError or ServeError when the server cannot start.
    """
    import uvicorn

    from rollout_sdk.engine.no_v1 import NoV1AgentLoop

    choice = store or StoreChoice()
    with _opened(choice, state_dir) as (opened, where):
        app = build_local_app(
            agent_loop,
            store=opened,
            state_dir=state_dir,
            api_keys=list(api_keys),
            settings=settings,
            debug_dir=debug_dir,
            host_check=exposure.host_check(),
            workflows=workflows,
        )
        what = (
            []
            if isinstance(agent_loop, NoV1AgentLoop)
            else [f"agent loop {agent_loop.name!r} (v1)"]
        )
        if workflows is not None:
            graded = f", grader {workflows.grader_name}" if workflows.grader_name else ", no grader"
            what.append(f"workflow {workflows.name}{graded} (osmosis-ai 0.3.8)")
        # Bound first, then said: the server says it serves only once the port is its own.
        sock = _bound(exposure.host, exposure.port)
        announce(
            f"serving {' and '.join(what)} on http://{exposure.host}:{exposure.port} "
            f"(store: {where}; {exposure.describe()})"
        )
        embedded = choice.kind == "dynamodb" and choice.dynamodb_endpoint is None
        forgets = what_a_restart_forgets(choice.kind, embedded=embedded)
        if forgets:
            announce(f"note: {forgets}")
        with sock, collecting_less():
            # uvicorn serves the socket bound above (by its descriptor), not one of its own.
            uvicorn.run(
                app,
                host=exposure.host,
                port=exposure.port,
                fd=sock.fileno(),
                log_level=log_level,
                access_log=False,
                loop=loop,
                http=http,
            )
