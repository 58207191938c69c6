"""Lambda SnapStart runtime hooks (the template's ``SnapStart`` parameter; docs/aws.md, "SnapStart").

With SnapStart, Lambda runs the init phase once, when it publishes a version, snapshots the
process, and resumes every new execution environment of that version from the same snapshot.
Two things made before the snapshot must not be shared by the environments resumed from it:

- **pooled connections**: a connection in a pool at snapshot time belongs to a network session
  that no longer exists after a resume (and every copy would hold "the same" one). After a
  restore the hooks close the TrainGate client's pool and the pools of the boto3 clients that
  were built, so the next request opens fresh connections. The kit builds all of them on first
  use, so a snapshot of the kit alone holds none; the hook is there for an agent, or a later
  change, that warms one up during init.
- **random numbers**: the ``random`` module seeds itself once, at import, from the operating
  system; every environment resumed from one snapshot would draw the same sequence (the retry
  jitter among them, so retries of many rollouts would line up instead of spreading out).
  After a restore the hook reseeds it from the operating system. ``uuid4``, ``secrets`` and
  ``os.urandom`` read the kernel each time and need nothing. Nothing else the functions import
  keeps a generator of its own, but the X-Ray SDK's sampler (``Tracing=subsegments``), which
  Lambda does not use: Lambda makes the sampling decision.

Before the snapshot nothing is needed: nothing at import reads a secret or opens a
connection (``tests/aws/test_snapstart.py`` imports ``handler.py`` under a guard that fails
any connect or name lookup).

The hooks are registered through ``snapshot_restore_py``, which the Lambda Python runtime
provides (the artifact does not ship it); where it cannot be imported (the local server, tests
without the dev extra), :func:`register` does nothing.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rollout_sdk.aws.runtime import LambdaRuntime
    from rollout_sdk.traingate.client import TrainGateClient

logger = logging.getLogger("rollout_sdk.aws.snapstart")

#: How long closing the TrainGate client's pool may take after a restore (a hook's time counts
#: against the restore's).
CLOSE_TIMEOUT_SECONDS = 2.0


def register(runtime: LambdaRuntime) -> bool:
    """Register :func:`after_restore` for ``runtime``; False (and nothing registered) where
    ``snapshot_restore_py`` is not importable, as everywhere but on Lambda's Python runtime."""
    try:
        # Guarded: the Lambda Python runtime provides the package; the local server and the
        # tests without the dev extra have none, and SnapStart does not exist there.
        from snapshot_restore_py import register_after_restore
    except ImportError:
        return False
    register_after_restore(after_restore, runtime)
    return True


def after_restore(runtime: LambdaRuntime) -> None:
    """After a resume from a snapshot: reseed ``random`` and drop every pooled connection."""
    random.seed()
    drop_connections(runtime)


def drop_connections(runtime: LambdaRuntime) -> None:
    """Close the pools of the runtime's TrainGate client and boto3 clients, those already
    built (nothing is built for it); each client stays usable and connects afresh."""
    built = vars(runtime)
    client = built.get("client")
    if client is not None:
        drop_traingate_connections(client, runtime.loop)
    for name, aws_client in vars(runtime.clients).items():
        close = getattr(aws_client, "close", None)
        if callable(close) and hasattr(aws_client, "meta"):
            # botocore's close() empties the client's urllib3 pool managers, which open new
            # pools on the next request; the client object (and every holder of it) stays.
            close()
            logger.debug("dropped the %s client's connections after a restore", name)


def drop_traingate_connections(client: TrainGateClient, loop: asyncio.AbstractEventLoop) -> None:
    """Close ``client``'s connection pool on ``loop`` (not running: a hook runs between
    invocations); the client builds a new pool on its next request.

    This is what a ``TrainGateClient.drop_connections()`` would do; it goes through
    ``aclose()``, the client's public way to let go of its pool."""
    try:
        loop.run_until_complete(asyncio.wait_for(client.aclose(), CLOSE_TIMEOUT_SECONDS))
    except Exception as exc:  # a stale socket that will not close cleanly must not fail init
        logger.warning(
            "closing TrainGate connections after a SnapStart restore failed: %s; a request on "
            "a dead connection is then left to the client's retry rules",
            _describe(exc),
        )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
