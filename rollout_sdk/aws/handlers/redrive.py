"""The re-drive's schedule (EventBridge Scheduler): send parked final responses again."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollout_sdk.aws.runtime import InvocationContext, LambdaRuntime


def handle(runtime: LambdaRuntime, event: Any, context: InvocationContext | None) -> dict[str, Any]:
    """One pass of the re-drive over the store; answers what it found and did."""
    # The scheduled event only says that it is time (Powertools' EventBridgeEvent would read
    # its "time" and "resources"); the pass reads the clock and the store, so it is not parsed.
    report = runtime.run(runtime.recovery.redrive())
    return {
        "status": "done",
        "examined": report.examined,
        "delivered": len(report.delivered),
        "parked": len(report.parked),
        "undeliverable": len(report.undeliverable),
        "failed": len(report.failed),
    }
