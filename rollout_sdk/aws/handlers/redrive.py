"""The re-drive's schedule (EventBridge Scheduler): send parked final responses again."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rollout_sdk.errors import ScanDenied
from rollout_sdk.stack import LambdaFunction

if TYPE_CHECKING:
    from rollout_sdk.aws.runtime import InvocationContext, LambdaRuntime

#: The answer to a backfill the role may not run: the stack grants the re-drive's Scan only
#: while the template parameter asks for it.
SCAN_NOT_GRANTED = (
    "the backfill of the due index scans the table, and this deployment does not grant the "
    "re-drive function dynamodb:Scan: deploy the stack with BackfillDueIndex=true, invoke this "
    "again, then deploy again with BackfillDueIndex=false (a grant just deployed may take a few "
    "seconds to apply; docs/aws.md, 'The due index'). {cause}"
)


def handle(runtime: LambdaRuntime, event: Any, context: InvocationContext | None) -> dict[str, Any]:
    """One pass of the re-drive over the store; answers what it found and did."""
    if isinstance(event, dict) and event.get("backfill_due_index") is True:
        # Once, by hand, after upgrading a stack deployed before the due index (docs/aws.md).
        from rollout_sdk.store.dynamodb import DynamoDBStore
        from rollout_sdk.store.dynamodb_backfill import backfill_due_index

        store = runtime.store
        if not isinstance(store, DynamoDBStore):  # pragma: no cover - the Lambda store
            return {"status": "rejected", "error": "the store has no due index to backfill"}
        try:
            return {"status": "done", "backfilled": runtime.run(backfill_due_index(store))}
        except ScanDenied as exc:
            # template.yaml grants the Scan only while its parameter asks for it.
            return {"status": "rejected", "error": SCAN_NOT_GRANTED.format(cause=exc)}
    # The scheduled event only says that it is time (Powertools' EventBridgeEvent would read
    # its "time" and "resources"); the pass reads the clock and the store, so it is not parsed.
    # Each rollout the pass takes up is charged its share of the pass (recovery opens its meter);
    # the schedule's own invocation request, and its time on no rollout, are fixed costs.
    with runtime.metered(LambdaFunction.REDRIVE, context, shares_request=False):
        report = runtime.run(runtime.recovery.redrive())
        # Where a 0.3.8 workflow is served: each polling lease that ran out (the live index's
        # key range, never the table) ends its rollout lease_expired, once; nothing else on
        # Lambda runs on a timer, so this pass bounds how late it is found without a poll.
        leases = runtime.leases
        expired = 0 if leases is None else runtime.run(leases.check_leases())
    return {
        "status": "done",
        "examined": report.examined,
        "delivered": len(report.delivered),
        "parked": len(report.parked),
        "undeliverable": len(report.undeliverable),
        "handed_off": len(report.handed_off),
        "failed": len(report.failed),
        "busy": report.busy,
        "cut_short": report.cut_short,
        "leases_expired": expired,
    }
