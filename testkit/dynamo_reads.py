"""What a boto3 DynamoDB client asked of the table: its requests by operation, and the items its
Scans and Queries read (``ScannedCount``: what DynamoDB charges read units for, filtered or not)
and returned (``Count``), counted with botocore's ``after-call`` hooks. ``make bench``'s re-drive
figure (:mod:`bench.redrive`) counts a pass with it; a test may count a code path the same way.

    reads = DynamoReads()
    detach = reads.attach(client)
    ...                       # the code under measurement, on that client
    counted = reads.take()    # what it did since the last take(); counting goes on
    detach()
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: The operations whose answers say how many items they read.
READS = ("Scan", "Query")


def describe(requests: Mapping[str, int]) -> str:
    """``Scan 3, GetItem 10``: requests by operation, most frequent first, or ``none``."""
    ordered = sorted(requests.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{op} {n}" for op, n in ordered) or "none"


@dataclass(frozen=True)
class Counted:
    """Requests by operation, and the items the Scans and Queries among them read."""

    requests: dict[str, int] = field(default_factory=dict)
    #: Sum of ``ScannedCount`` over the Scans and Queries: items read.
    scanned: int = 0
    #: Sum of ``Count`` over them: items that passed the filter and came back.
    returned: int = 0
    #: Requests that failed before an answer (connection errors, timeouts), by operation.
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Every request answered, whatever the operation."""
        return sum(self.requests.values())

    def describe(self) -> str:
        """The requests as :func:`describe` puts them."""
        return describe(self.requests)

    def to_json(self) -> dict[str, Any]:
        return {
            "scanned_count": self.scanned,
            "count": self.returned,
            "requests": dict(sorted(self.requests.items())),
            "request_errors": dict(sorted(self.errors.items())),
        }


class DynamoReads:
    """Counts the requests of the DynamoDB clients it is attached to (thread-safe: the store
    calls boto3 from worker threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        self._scanned = 0
        self._returned = 0

    def attach(self, client: Any) -> Callable[[], None]:
        """Count ``client``'s requests from now on; returns what stops counting them."""
        events = client.meta.events
        events.register("after-call.dynamodb.*", self._answered)
        events.register("after-call-error.dynamodb.*", self._failed)

        def detach() -> None:
            events.unregister("after-call.dynamodb.*", self._answered)
            events.unregister("after-call-error.dynamodb.*", self._failed)

        return detach

    def _answered(self, *, model: Any, parsed: Mapping[str, Any], **_: Any) -> None:
        operation = str(model.name)
        scanned = returned = 0
        if operation in READS:
            scanned = int(parsed.get("ScannedCount") or 0)
            returned = int(parsed.get("Count") or 0)
        with self._lock:
            self._requests[operation] += 1
            self._scanned += scanned
            self._returned += returned

    def _failed(self, *, event_name: str, **_: Any) -> None:
        with self._lock:
            self._errors[event_name.rpartition(".")[2]] += 1

    def take(self) -> Counted:
        """What was counted since the last ``take`` (or since the start), and start again."""
        with self._lock:
            counted = Counted(
                requests=dict(self._requests),
                scanned=self._scanned,
                returned=self._returned,
                errors=dict(self._errors),
            )
            self._requests.clear()
            self._errors.clear()
            self._scanned = self._returned = 0
        return counted
