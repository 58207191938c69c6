"""Checks of the per-rollout cost estimate that tests of several tiers share: docs/cost.md's
formula, evaluated from the document itself, and an independent tally of the AWS requests a
runtime's clients made, DynamoDB's answers given consumed capacity the test chose.

    tally = Tally({"UpdateItem": 2.0, "TransactWriteItems": 4.0})
    detach = tally.attach(runtime.clients.dynamodb, runtime.clients.kms)
    ...                       # invocations under test
    seen = tally.take()       # Counter of (service, operation) since the last take()
    detach()
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from testkit import REPO_ROOT

DOC = REPO_ROOT / "docs" / "cost.md"


def docs_formula() -> str:
    """The ``python`` block of docs/cost.md's "Per-rollout estimate" that computes ``usd``."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Per-rollout estimate", 1)[1]
    for block in re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL):
        if "usd =" in block:
            return str(block)
    raise AssertionError("docs/cost.md has no formula block under 'Per-rollout estimate'")


def docs_durable_units(run: Mapping[str, Any]) -> dict[str, float]:
    """docs/cost.md's "Durable worker" block applied to ``run`` (what an execution's history
    holds: ``steps``, ``waits``, ``input_bytes``, ``checkpoint_bytes``, ``seconds``,
    ``retention_days``): the durable units a rollout's estimate must carry."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Durable worker", 1)[1]
    blocks = [b for b in re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)]
    if not blocks:
        raise AssertionError("docs/cost.md has no formula block under 'Durable worker'")
    names: dict[str, Any] = {"__builtins__": {"sum": sum}, "run": run}
    exec(blocks[0], names)  # noqa: S102 - the document's own formula, run as written
    return {k: float(v) for k, v in names["units"].items()}


def docs_usd(estimate: Mapping[str, Any], price: Mapping[str, float]) -> float:
    """docs/cost.md's formula applied to ``estimate`` (its JSON) at ``price``."""
    # One namespace: the formula's generator expressions see ``cost`` and ``price`` there.
    names: dict[str, Any] = {"__builtins__": {"sum": sum}, "cost": estimate, "price": price}
    exec(docs_formula(), names)  # noqa: S102 - the document's own formula, run as written
    return float(names["usd"])


class Tally:
    """Every answered request of the clients it is attached to, by (service, operation).

    ``capacity`` (DynamoDB operation -> capacity units) makes each such DynamoDB answer report
    that consumed capacity, as DynamoDB does when asked, before any other hook sees it (moto
    reports none for most writes); :attr:`units` adds up what was reported.
    """

    def __init__(self, capacity: Mapping[str, float] | None = None) -> None:
        self.capacity = dict(capacity or {})
        self._seen: Counter[tuple[str, str]] = Counter()
        self.units: dict[str, float] = {}
        self._lock = threading.Lock()

    def _report_capacity(self, parsed: Any, model: Any, **_: Any) -> None:
        units = self.capacity.get(model.name)
        if units is None or not isinstance(parsed, dict) or "Error" in parsed:
            return
        entry = {"TableName": "t", "CapacityUnits": units}
        parsed["ConsumedCapacity"] = [entry] if model.name.startswith("Transact") else entry
        with self._lock:
            self.units[model.name] = self.units.get(model.name, 0.0) + units

    def _count(self, model: Any, **_: Any) -> None:
        with self._lock:
            self._seen[(model.service_model.service_name, model.name)] += 1

    def attach(self, *clients: Any) -> Callable[[], None]:
        """Count ``clients``' requests until the returned function is called."""
        hooks: list[tuple[Any, str, Callable[..., None]]] = []
        for client in clients:
            service = client.meta.service_model.service_id.hyphenize()
            events = client.meta.events
            if client.meta.service_model.service_name == "dynamodb":
                events.register_first(f"after-call.{service}", self._report_capacity)
                hooks.append((events, f"after-call.{service}", self._report_capacity))
            events.register(f"after-call.{service}", self._count)
            hooks.append((events, f"after-call.{service}", self._count))

        def detach() -> None:
            for events, name, hook in hooks:
                events.unregister(name, hook)

        return detach

    def take(self) -> Counter[tuple[str, str]]:
        """The requests counted since the last take()."""
        with self._lock:
            seen, self._seen = self._seen, Counter()
            return seen
