"""The record's copy (``evolve``, which every move's ``Update.applied_to`` uses) is what
``dataclasses.replace`` would make, and ``Update.changes`` names exactly the fields set."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import pytest

from rollout_sdk.store.base import UNSET, Update
from rollout_sdk.store.record import RecordState, RolloutRecord

RECORD = RolloutRecord(
    rollout_id="r1",
    slot="rid:r1",
    fingerprint="f",
    request={"messages": [{"role": "user", "content": "hi"}]},
    init_response={"rollout_id": "r1", "tools": []},
    sealed_key="sealed",
    extra={"cost": {"usd": 0.1}},
)

CHANGES: list[dict[str, Any]] = [
    {},
    {"state": RecordState.RUNNING, "attempt": 2, "lease_until": 10.0},
    {"response": {"status": "COMPLETED"}, "due_at": None, "sealed_key": None},
    {f.name: getattr(RECORD, f.name) for f in fields(RolloutRecord)},  # every field
]


@pytest.mark.parametrize("changes", CHANGES, ids=["none", "claim", "finish", "all"])
def test_evolve_makes_what_replace_makes(changes: dict[str, Any]) -> None:
    evolved = RECORD.evolve(**changes)
    assert evolved == replace(RECORD, **changes)
    assert evolved is not RECORD
    assert type(evolved) is RolloutRecord
    # The original is untouched, and the big parts are shared, not copied.
    assert RECORD.state == RecordState.ACCEPTED and RECORD.attempt == 0
    assert evolved.request is RECORD.request
    with pytest.raises(AttributeError):
        evolved.attempt = 5  # type: ignore[misc]  # still frozen


def test_evolve_refuses_a_name_that_is_no_field() -> None:
    with pytest.raises(TypeError, match="atempt"):
        RECORD.evolve(atempt=1)


def test_update_changes_are_the_fields_set() -> None:
    update = Update(state=RecordState.FINISHED, lease_until=None, extra={})
    expected = {f.name: v for f in fields(Update) if (v := getattr(update, f.name)) is not UNSET}
    assert (
        update.changes()
        == expected
        == {
            "state": RecordState.FINISHED,
            "lease_until": None,
            "extra": {},
        }
    )
    assert Update().changes() == {}
    assert update.applied_to(RECORD) == replace(RECORD, **expected)
