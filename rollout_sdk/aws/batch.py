"""Powertools' asynchronous batch processor, run on the runtime's one event loop.

Powertools' ``AsyncBatchProcessor`` runs every record's handler concurrently and builds the
partial-batch response, and the kit uses both. What it cannot be trusted with is the loop: its
``async_process`` calls ``asyncio.run`` when ``LAMBDA_TASK_ROOT`` is unset (``rollout-sdk invoke``,
the tests, the benchmarks), a fresh loop per batch, and on Lambda it takes whatever
``asyncio.get_event_loop()`` returns. The TrainGate client's pooled connections, the store's
executor calls and Mangum all belong to the runtime's loop (``LambdaRuntime.loop``); a rollout
awaited on another loop fails on its first reused connection, and ``asyncio.run`` closes its loop
after the batch. So :class:`LoopBatchProcessor` overrides that one method to run the same gather
on the loop it is given, the same loop on Lambda and everywhere else.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import AsyncBatchProcessor, EventType

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.base import FailureResponse, SuccessResponse


class LoopBatchProcessor(AsyncBatchProcessor):
    """An SQS ``AsyncBatchProcessor`` whose records run concurrently on ``loop``, failures
    reported in the batch's order.

    ``raise_on_entire_batch_failure`` is off: a batch whose every rollout failed is answered
    with every message in ``batchItemFailures``, as a partial failure is, not raised.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        self._loop = loop

    def async_process(self) -> list[tuple[Any, ...]]:
        """Process every record concurrently on the given loop (see the module's docstring)."""

        async def process_all() -> list[SuccessResponse | FailureResponse]:
            return list(await asyncio.gather(*map(self._async_process_record, self.records)))

        results = self._loop.run_until_complete(process_all())
        # Each record is marked failed as it ends, in whatever order; report them in the
        # batch's order (gather keeps it), so one batch always gets the same answer.
        self.fail_messages[:] = [record for status, _, record in results if status == "fail"]
        return list(results)
