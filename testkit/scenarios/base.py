"""What every scenario counts: a rollout's delivery as TrainGate saw it, a row of the matrix,
and the scale the matrix runs at."""

from __future__ import annotations

import asyncio
import functools
import json
import secrets
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from rollout_sdk.testing.standin import ACK_LOST, OK, REFUSED, Call, TrainGateStandIn

T = TypeVar("T")
P = ParamSpec("P")
TERMINAL = ("DELIVERED", "UNDELIVERABLE")
RESTART_WORDS = "server stopped while this rollout was in flight"

#: Whether retrying the rollout could succeed, by failure category, as docs/architecture.md's
#: table defines it (written out here, not read from the kit, so the matrix checks the kit).
RETRYABLE = {
    "agent_error": False,
    "timeout": True,
    "cancelled": False,
    "invalid_result": False,
    "infrastructure": True,
    "worker_lost": True,
    "never_started": True,
}
#: The category an agent's own ERROR may carry a reward in (it ended its rollout itself):
#: every other carries none, ``invalid_result`` included (the kit writes that ERROR: the
#: agent's result, its reward with it, could not be sent).
MAY_CARRY_A_REWARD = frozenset({"agent_error"})
#: What a row's category column counts for a final response that carries no failure.
NO_FAILURE = "none"

Say = Callable[[str], None]


def quiet(_: str) -> None:
    """Progress that goes nowhere (the tests)."""


def blocking(scenario: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """A scenario written as a coroutine, called as the matrix and the tests call every
    scenario: run to its end on an event loop of its own."""

    @functools.wraps(scenario)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return asyncio.run(scenario(*args, **kwargs))

    return run


def fresh_ids(prefix: str, count: int, *, width: int = 2) -> list[str]:
    """``count`` rollout ids no other scenario on the same rig uses: ``<prefix>-<tag>-<n>``, the
    tag random, ``n`` from 0, ``width`` digits wide."""
    tag = secrets.token_hex(3)
    return [f"{prefix}-{tag}-{n:0{width}d}" for n in range(count)]


class ScenarioError(RuntimeError):
    """A scenario could not set up what it means to test, or a wait ran out."""


def _canonical(body: dict[str, Any] | None) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Delivery:
    """What TrainGate saw of one rollout's final response: the POSTs to /v1/rollout/completed,
    in the order they arrived, and the agent runs its chat calls show."""

    rollout_id: str
    calls: tuple[Call, ...]
    runs: int

    @property
    def attempts(self) -> int:
        """POSTs of the final response, whatever became of them."""
        return len(self.calls)

    @property
    def received(self) -> int:
        """POSTs TrainGate handled (acknowledged, or acknowledged and the 2xx lost)."""
        return sum(1 for c in self.calls if c.handled)

    @property
    def refused(self) -> int:
        """POSTs TrainGate answered with a final 4xx."""
        return sum(1 for c in self.calls if c.outcome == REFUSED)

    @property
    def reported(self) -> bool:
        """TrainGate received a final response (and took it, or refused it for good)."""
        return self.received > 0 or self.refused > 0

    @property
    def body(self) -> dict[str, Any] | None:
        """The final response TrainGate first received (or refused)."""
        for call in self.calls:
            if call.handled or call.outcome == REFUSED:
                return call.body
        return None

    @property
    def distinct_bodies(self) -> int:
        """Different final responses among every POST (a re-send must be identical)."""
        return len({_canonical(c.body) for c in self.calls if c.body is not None})

    def _first_ack(self) -> Call | None:
        acked = [c for c in self.calls if c.outcome == OK]
        return min(acked, key=lambda c: c.answered) if acked else None

    @property
    def sent_after_ack(self) -> int:
        """POSTs after one got its 2xx back (a second acknowledged one included)."""
        first = self._first_ack()
        if first is None:
            return 0
        return sum(1 for c in self.calls if c is not first and c.arrived >= first.answered) + sum(
            1
            for c in self.calls
            if c is not first and c.outcome == OK and c.arrived < first.answered
        )

    @property
    def sent_after_refusal(self) -> int:
        """POSTs after a final 4xx (which must not be retried)."""
        refused = [c.answered for c in self.calls if c.outcome == REFUSED]
        return sum(1 for c in self.calls if refused and c.arrived > min(refused))

    @property
    def duplicated(self) -> int:
        """Re-sends after a 2xx, plus one for two different final responses, plus extra runs."""
        different = 1 if self.distinct_bodies > 1 else 0
        return self.sent_after_ack + different + max(0, self.runs - 1)

    @property
    def resent_after_lost_ack(self) -> int:
        """POSTs after TrainGate took the response but the kit never saw the 2xx, up to the
        first acknowledged one."""
        lost = [c for c in self.calls if c.outcome == ACK_LOST]
        if not lost:
            return 0
        first_lost = min(lost, key=lambda c: c.arrived)
        ack = self._first_ack()
        cutoff = ack.arrived if ack is not None else float("inf")
        return sum(1 for c in self.calls if first_lost.arrived < c.arrived <= cutoff)

    def describe(self) -> str:
        """The POSTs in short, for failure messages."""
        shown = ", ".join(f"{c.outcome}:{c.status}" for c in self.calls) or "none"
        return f"{self.rollout_id}: POSTs [{shown}], runs {self.runs}"


def failure_in(body: dict[str, Any] | None) -> dict[str, Any] | None:
    """The failure a final response carries, read from the wire shape TrainGate receives:
    ``extra_fields["rollout_sdk"]["failure"]`` (None when it carries none)."""
    extra = (body or {}).get("extra_fields")
    kit = extra.get("rollout_sdk") if isinstance(extra, dict) else None
    failure = kit.get("failure") if isinstance(kit, dict) else None
    return failure if isinstance(failure, dict) else None


def delivery(standin: TrainGateStandIn, rollout_id: str) -> Delivery:
    """``rollout_id``'s final-response POSTs as TrainGate saw them."""
    calls = sorted(standin.calls_for("completed", rollout_id), key=lambda c: c.arrived)
    return Delivery(rollout_id, tuple(calls), standin.runs(rollout_id))


@dataclass
class Row:
    """One line of the matrix, and the checks that failed for it."""

    fault: str
    expected: str
    measured: str = ""
    sent: int = 0
    reported: int = 0
    lost: int = 0
    duplicated: int = 0
    resent: int = 0
    failures: list[str] = field(default_factory=list)
    #: False when the row's rollouts are counted by another row too (not added to the total).
    distinct: bool = True
    #: The rollouts counted, by id (not shown in the table).
    ids: list[str] = field(default_factory=list)
    #: What the scenario counted beyond the columns, by name (the tests assert these; the
    #: measured cell prints them).
    counts: Counter[str] = field(default_factory=Counter)
    #: The failure category of each final response TrainGate received (``NO_FAILURE`` for one
    #: that carries none): the table's category column.
    categories: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.failures and self.lost == 0 and self.duplicated == 0

    def fail(self, message: str) -> None:
        """Record a wrong outcome."""
        self.failures.append(message)

    def check(self, condition: bool, message: str) -> bool:
        """Record ``message`` as a wrong outcome unless ``condition``."""
        if not condition:
            self.fail(message)
        return condition

    def count(self, deliveries: Iterable[Delivery]) -> None:
        """Add rollouts: sent, reported, lost, duplicated, re-sent after a lost ack."""
        for item in deliveries:
            self.sent += 1
            self.ids.append(item.rollout_id)
            if item.reported:
                self.reported += 1
            else:
                self.lost += 1
                self.fail(f"lost: {item.describe()}")
            if item.duplicated:
                self.duplicated += item.duplicated
                self.fail(f"duplicated: {item.describe()}, {item.distinct_bodies} bodies")
            self.resent += item.resent_after_lost_ack

    def count_rollouts(
        self, standin: TrainGateStandIn, rollout_ids: Iterable[str]
    ) -> list[Delivery]:
        """:meth:`count` the rollouts ``rollout_ids`` as TrainGate saw them; their deliveries."""
        items = [delivery(standin, rid) for rid in rollout_ids]
        self.count(items)
        return items

    def check_once(self, item: Delivery) -> bool:
        """``item`` ran once and its final response was POSTed once."""
        return self.check(item.attempts == 1 and item.runs == 1, f"{item.describe()}: not once")

    def check_failure(
        self,
        item: Delivery,
        category: str | None,
        *,
        attempt: int = 1,
        shown: dict[str, Any] | None = None,
    ) -> None:
        """The final response TrainGate received for ``item`` carries the failure ``category``
        (None: no failure at all), with the category's ``retryable``, ``attempt`` (the worker's
        claim: 0 for a rollout settled before any worker claimed it) and a null reward unless
        the category is the agent's own; counted in :attr:`categories`. ``shown`` is the
        rollout's status (GET /v1/rollout/{id}), when there is one: its ``failure`` must be the
        one TrainGate received."""
        body = item.body
        if body is None:
            return  # not reported: counted lost
        rid = item.rollout_id
        failure = failure_in(body)
        got = None if failure is None else str(failure.get("category"))
        self.categories[got or NO_FAILURE] += 1
        if not self.check(got == category, f"{rid}: failure category {got}, expected {category}"):
            return
        if failure is not None and category is not None:
            self.check(
                failure.get("retryable") is RETRYABLE[category]
                and failure.get("attempt") == attempt
                and set(failure) == {"category", "retryable", "attempt"},
                f"{rid}: failure {failure}, expected retryable {RETRYABLE[category]}, "
                f"attempt {attempt}",
            )
            if category not in MAY_CARRY_A_REWARD:
                self.check(
                    body.get("reward") is None,
                    f"{rid}: reward {body.get('reward')} on a failure of category {category}, "
                    "expected null",
                )
        if shown is not None:
            self.check(
                shown.get("failure") == failure,
                f"{rid}: the status endpoint shows failure {shown.get('failure')}, TrainGate "
                f"received {failure}",
            )

    def shown(self, say: Say) -> Row:
        """Say the measured cell (the scenario's progress line); the row."""
        say(f"   {self.measured}")
        return self

    def summary(self) -> str:
        """The row and its failures, for an assertion message."""
        head = (
            f"{self.fault}: sent {self.sent}, reported {self.reported}, lost {self.lost}, "
            f"duplicated {self.duplicated}, re-sent {self.resent}; {self.measured}"
        )
        shown = self.failures[:8]
        more = len(self.failures) - len(shown)
        lines = [head, *(f"  - {f}" for f in shown)]
        if more:
            lines.append(f"  - ... and {more} more")
        return "\n".join(lines)


def spread(values: Iterable[float | int]) -> str:
    items = sorted(values)
    if not items:
        return "-"
    low, high = items[0], items[-1]
    fmt = "{:g}"
    return fmt.format(low) if low == high else f"{fmt.format(low)}-{fmt.format(high)}"


def tally(counter: Counter[str]) -> str:
    return ", ".join(f"{n} {k}" for k, n in counter.most_common()) or "none"


def tally_field(items: Iterable[Delivery], name: str) -> str:
    """:func:`tally` of one field of the final responses TrainGate received (``status``,
    ``finish_reason``)."""
    return tally(Counter(str((item.body or {}).get(name)) for item in items))


def categories_cell(counter: Counter[str]) -> str:
    """The category column: ``-`` when the row counted no final response, ``none`` when none
    carried a failure, else the count of each category (``none`` included)."""
    if not counter:
        return "-"
    if set(counter) == {NO_FAILURE}:
        return NO_FAILURE
    return tally(counter)


@dataclass(frozen=True)
class Scale:
    """How many rollouts each scenario runs."""

    name: str
    per_profile: int
    concurrency: int
    client_timeout: float
    duplicate_rollouts: int
    conflicts: int
    cancel_rounds: int
    control_running: int
    control_queued: int
    backpressure: int
    kill_delivered: int
    kill_parked: int
    kill_running: int
    kill_finished: int
    kill_queued: int
    aws_environments: int
    aws_deliveries: int
    aws_init_rollouts: int
    aws_deaths: int
    aws_parked: int
    aws_deadlines: int
    deadline: float


#: ``make test``: every row, a few rollouts each.
FAST = Scale(
    name="fast",
    per_profile=2,
    concurrency=16,
    client_timeout=2.0,
    duplicate_rollouts=1,
    conflicts=1,
    cancel_rounds=1,
    control_running=2,
    control_queued=2,
    backpressure=12,
    kill_delivered=2,
    kill_parked=2,
    kill_running=2,
    kill_finished=2,
    kill_queued=2,
    aws_environments=3,
    aws_deliveries=1,
    aws_init_rollouts=1,
    aws_deaths=1,
    aws_parked=2,
    aws_deadlines=1,
    deadline=300.0,
)

#: ``make reliability``: over 1,000 rollouts under mixed faults.
FULL = Scale(
    name="full",
    per_profile=60,
    concurrency=40,
    client_timeout=5.0,
    duplicate_rollouts=20,
    conflicts=5,
    cancel_rounds=4,
    control_running=4,
    control_queued=4,
    backpressure=120,
    kill_delivered=20,
    kill_parked=10,
    kill_running=20,
    kill_finished=10,
    kill_queued=20,
    aws_environments=4,
    aws_deliveries=10,
    aws_init_rollouts=4,
    aws_deaths=4,
    aws_parked=10,
    aws_deadlines=4,
    deadline=600.0,
)

SCALES = {"fast": FAST, "full": FULL}
