"""The ``Dispatcher`` port: hands an accepted rollout to a worker before init answers 202."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rollout_sdk.errors import DispatchError

if TYPE_CHECKING:
    from rollout_sdk.protocol import RolloutRequest


@dataclass(frozen=True)
class Job:
    """What a worker needs beyond the record: the id, the attempt, and the callback key.

    The callback key travels with the job, never in the record (protocol.md section 3).
    ``request`` is init's validated request, when the job stays in this process (the local
    server's in-process dispatcher): the worker then uses it rather than validating the stored
    copy again. Dispatchers that send the job elsewhere carry only the first three fields.
    """

    rollout_id: str
    attempt: int = 1
    api_key: str | None = field(default=None, repr=False)
    request: RolloutRequest | None = field(default=None, repr=False, compare=False)


@runtime_checkable
class Dispatcher(Protocol):
    """Starts workers. ``dispatch`` returns once the hand-off is durable or running."""

    async def dispatch(self, job: Job) -> None:
        """Hand ``job`` to a worker; raise DispatchError when that is impossible."""
        ...

    @property
    def active(self) -> int:
        """Rollouts this process is running or holding (for /health)."""
        ...

    @property
    def completed(self) -> int:
        """Rollouts this process has finished since it started (for /health); a job that found
        its rollout owned by another delivery (a duplicate's hand-off) is not one."""
        ...

    async def aclose(self) -> None:
        """Stop; rollouts still running are left to the record's recovery rules."""
        ...


class RemoteDispatcher:
    """Base of the dispatchers that hand rollouts to AWS (an invoke, a queue message).

    The API function runs no rollouts itself, so it counts none (the store knows what is in
    flight); there is nothing to stop; an AWS call runs in a worker thread and its botocore
    errors become DispatchError naming ``what`` failed.
    """

    @property
    def active(self) -> int:
        return 0

    @property
    def completed(self) -> int:
        return 0

    async def aclose(self) -> None:
        """Nothing to stop: AWS holds what was handed off."""

    @staticmethod
    async def call_aws(what: str, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run ``call`` in a thread; DispatchError naming ``what`` on a botocore error."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return await asyncio.to_thread(call)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise DispatchError(
                f"{what} failed: {error.get('Code')}: {error.get('Message')}"
            ) from exc
        except BotoCoreError as exc:
            raise DispatchError(f"{what} failed: {exc}") from exc
