"""What one rollout cost on AWS, estimated from what really happened to it (docs/cost.md,
"Per-rollout estimate", has the formula and what it leaves out).

Two figures, one formula:

- **at finish**, in the final response, ``extra_fields["rollout_sdk"]["cost"]``. The response
  is fixed before its first delivery attempt, so it holds what is known then: the rollout's share
  of the worker invocation's duration so far (in a queue batch, split with the rollouts running
  beside it), its share of the cold start's init, the API function's part (carried in the job),
  and the requests made for it so far;
- **after delivery and re-drive**, the same figure grown by each later attempt: kept in the
  record (``extra["cost"]``, written by the delivery's own moves, so it costs no request of its
  own) and handed to the runtime's cost sink once the rollout is DELIVERED or UNDELIVERABLE, for
  the metric ``RolloutCost``.

The modules, by concept: :mod:`~rollout_sdk.cost.usage` (what a rollout used, in dollars),
:mod:`~rollout_sdk.cost.meter` (an invocation shared among its rollouts, each rollout's meter),
:mod:`~rollout_sdk.cost.guard` (the one guard: nothing here may fail a rollout). The prices are
:mod:`rollout_sdk.prices`. The engine sees the estimate only through the collaborator it is
given (:mod:`rollout_sdk.engine.costs`, nothing on the local server); on Lambda that is
:mod:`rollout_sdk.aws.ledger` (the figures written into responses and records), beside
:mod:`rollout_sdk.aws.metering` (the environment's facts, the botocore hooks, what AWS bills
around the kit's requests).

The local server opens no invocation, so its responses carry no estimate: there is no AWS bill
(the host's own cost is not the kit's to estimate).
"""
