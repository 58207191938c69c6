"""The table as the template makes it (TTL attribute, due index) is the one the store uses."""

from __future__ import annotations

from rollout_sdk.engine.record import MAX_HANDOFF_WAIT_SECONDS, RolloutRecord
from rollout_sdk.local.emulator import load_template, ttl_attribute
from rollout_sdk.store.dynamodb import DUE_INDEX, DUE_PARTITION, DUE_SORT, TTL_ATTRIBUTE

from .conftest import ROOT


def test_the_templates_ttl_attribute_is_the_records_expiry_the_store_writes() -> None:
    assert ttl_attribute(load_template(ROOT / "template.yaml")) == TTL_ATTRIBUTE
    # The codec stores each record field under its own name: the TTL must be such a field.
    assert TTL_ATTRIBUTE in RolloutRecord.__dataclass_fields__


def test_the_templates_due_index_is_the_one_the_store_queries() -> None:
    template = load_template(ROOT / "template.yaml")
    props = template["Resources"]["RolloutTable"]["Properties"]
    (index,) = props["GlobalSecondaryIndexes"]
    assert index["IndexName"] == DUE_INDEX
    keys = {k["KeyType"]: k["AttributeName"] for k in index["KeySchema"]}
    assert keys == {"HASH": DUE_PARTITION, "RANGE": DUE_SORT}
    types = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
    assert (types[DUE_PARTITION], types[DUE_SORT]) == ("S", "N")
    # Keys only: the re-drive reads each record again, consistently, before acting on it.
    assert index["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    # The sort key is the record's own due_at field, stored under its name by the codec.
    assert DUE_SORT in RolloutRecord.__dataclass_fields__
    # The re-drive may query that index; it may scan only for the one-off upgrade backfill.
    redrive = template["Resources"]["RedriveFunction"]["Properties"]["Policies"][0]["Statement"]
    by_sid = {s["Sid"]: _list(s.get("Action", [])) for s in redrive if "Sid" in s}
    assert by_sid["DueIndex"] == ["dynamodb:Query"]
    assert [sid for sid, actions in by_sid.items() if "dynamodb:Scan" in actions] == [
        "BackfillDueIndexOnce"
    ]


def test_the_longest_hand_off_wait_is_the_templates() -> None:
    """Slots are kept as long as a record can live, which counts the longest a hand-off can
    wait for its worker: Lambda's event age and the queue's retention."""
    resources = load_template(ROOT / "template.yaml")["Resources"]
    worker = resources["WorkerFunction"]["Properties"]["EventInvokeConfig"]
    assert worker["MaximumEventAgeInSeconds"] == MAX_HANDOFF_WAIT_SECONDS
    queue = resources["RolloutQueue"]["Properties"]
    assert queue["MessageRetentionPeriod"] == MAX_HANDOFF_WAIT_SECONDS


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else [value]
