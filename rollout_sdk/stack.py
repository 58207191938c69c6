"""The stack's Lambda functions, each named once: what every part of the kit calls it.

A leaf: the Lambda side (``handler.py``, :mod:`rollout_sdk.aws`) and the tools that drive the
template locally (``rollout-sdk invoke``) read it. The template's logical id, ``handler.py``'s
entry points, the ``Function`` dimension of the metrics (dashboards and alarms
read it), the key of a cost estimate's ``lambda`` part, the log group and the hand-off each
serves all come from :class:`LambdaFunction`; ``template.yaml`` names the same handlers and log
groups (``tests/aws/test_functions.py`` holds the two to each other). The values are the ones
users and dashboards have seen since each first shipped, so they differ in spelling
(``queue_worker`` the dimension, ``queue-worker`` the cost label): renaming any would break a
dashboard or a stored estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class FunctionNames:
    """Everything one function is called."""

    #: Its logical id in ``template.yaml``.
    logical_id: str
    #: ``handler.<entry>``: the template's ``Handler``.
    entry: str
    #: The module of :mod:`rollout_sdk.aws.handlers` its events go to.
    events: str
    #: Its metrics' ``Function`` dimension.
    dimension: str
    #: Its key in a cost estimate's ``lambda`` part.
    cost_label: str
    #: Its log group: ``/rollout-sdk/<stack>/<log_group>``.
    log_group: str
    #: The hand-off its rollouts came by, where the function itself says it (None: the stack's
    #: ``HAND_OFF``, for the API and re-drive functions, which serve either).
    hand_off: str | None = None


class LambdaFunction(Enum):
    """The functions of ``template.yaml`` (the durable worker only with DurableWorker=true, the
    poll function only with a Workflow)."""

    API = FunctionNames("ApiFunction", "api", "api", "api", "api", "api")
    #: With a Workflow: osmosis-ai 0.3.8's result polls, which wait, on a function sized for
    #: waiting (the same app as the API function's).
    POLL = FunctionNames("PollFunction", "poll", "poll", "poll", "poll", "poll")
    WORKER = FunctionNames(
        "WorkerFunction", "worker", "worker", "worker", "worker", "worker", "direct"
    )
    DURABLE_WORKER = FunctionNames(
        "DurableWorkerFunction",
        "durable_worker",
        "durable",
        "durable_worker",
        "durable-worker",
        "durable-worker",
        "direct",
    )
    WORKER_FAILED = FunctionNames(
        "WorkerFailureFunction",
        "worker_failed",
        "failure",
        "failure",
        "worker-failed",
        "failure",
        "direct",
    )
    REDRIVE = FunctionNames(
        "RedriveFunction", "redrive", "redrive", "redrive", "redrive", "redrive"
    )
    QUEUE_WORKER = FunctionNames(
        "QueueWorkerFunction",
        "worker_batch",
        "queue",
        "queue_worker",
        "queue-worker",
        "queue-worker",
        "queue",
    )
    DEAD_LETTERS = FunctionNames(
        "DeadLetterFunction",
        "dead_letters",
        "dead_letter",
        "dead_letter",
        "dead-letters",
        "dead-letter",
        "queue",
    )

    @property
    def names(self) -> FunctionNames:
        names: FunctionNames = self.value
        return names

    def hand_off_in(self, configured: str) -> str:
        """The hand-off this function serves in a stack whose ``HAND_OFF`` is ``configured``."""
        return self.names.hand_off or configured

    @classmethod
    def by_dimension(cls, dimension: str) -> LambdaFunction | None:
        """The function whose ``Function`` dimension is ``dimension``, if any."""
        return _BY_DIMENSION.get(dimension)


_BY_DIMENSION = {function.names.dimension: function for function in LambdaFunction}
