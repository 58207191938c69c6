"""The table as the template makes it (TTL attribute, due index) is the one the store uses."""

from __future__ import annotations

from typing import Any

from rollout_sdk.local.emulator import load_template, ttl_attribute
from rollout_sdk.store.dynamodb import (
    DUE_INDEX,
    DUE_PARTITION,
    DUE_SORT,
    LIVE_INDEX,
    LIVE_PARTITION,
    LIVE_SORT,
    TTL_ATTRIBUTE,
)
from rollout_sdk.store.record import MAX_HANDOFF_WAIT_SECONDS, RolloutRecord

from .conftest import ROOT


def test_the_templates_ttl_attribute_is_the_records_expiry_the_store_writes() -> None:
    assert ttl_attribute(load_template(ROOT / "template.yaml")) == TTL_ATTRIBUTE
    # The codec stores each record field under its own name: the TTL must be such a field.
    assert TTL_ATTRIBUTE in RolloutRecord.__dataclass_fields__


def test_the_templates_due_index_is_the_one_the_store_queries() -> None:
    template = load_template(ROOT / "template.yaml")
    props = template["Resources"]["RolloutTable"]["Properties"]
    indexes = {index["IndexName"]: index for index in props["GlobalSecondaryIndexes"]}
    assert indexes.keys() == {DUE_INDEX, LIVE_INDEX}
    index = indexes[DUE_INDEX]
    keys = {k["KeyType"]: k["AttributeName"] for k in index["KeySchema"]}
    assert keys == {"HASH": DUE_PARTITION, "RANGE": DUE_SORT}
    types = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
    assert (types[DUE_PARTITION], types[DUE_SORT]) == ("S", "N")
    # Keys only: the re-drive reads each record again, consistently, before acting on it.
    assert index["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    # The sort key is the record's own due_at field, stored under its name by the codec.
    assert DUE_SORT in RolloutRecord.__dataclass_fields__
    # The re-drive may query that index; it may scan only for the one-off upgrade backfill, in
    # a deploy with BackfillDueIndex=true (tests/aws/test_permissions.py checks the roles).
    redrive = template["Resources"]["RedriveFunction"]["Properties"]["Policies"][0]["Statement"]
    by_sid = {
        s["Sid"]: (condition, _list(s.get("Action", [])))
        for condition, s in _statements(redrive)
        if "Sid" in s
    }
    assert by_sid["DueIndex"] == (None, ["dynamodb:Query"])
    scans = {
        sid: condition for sid, (condition, actions) in by_sid.items() if "dynamodb:Scan" in actions
    }
    assert scans == {"BackfillDueIndex": "GrantBackfillScan"}
    assert template["Conditions"]["GrantBackfillScan"] == {
        "Fn::Equals": [{"Ref": "BackfillDueIndex"}, "true"]
    }


def test_the_templates_live_index_is_the_one_the_store_queries() -> None:
    template = load_template(ROOT / "template.yaml")
    props = template["Resources"]["RolloutTable"]["Properties"]
    (index,) = [i for i in props["GlobalSecondaryIndexes"] if i["IndexName"] == LIVE_INDEX]
    keys = {k["KeyType"]: k["AttributeName"] for k in index["KeySchema"]}
    assert keys == {"HASH": LIVE_PARTITION, "RANGE": LIVE_SORT}
    types = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
    assert (types[LIVE_PARTITION], types[LIVE_SORT]) == ("S", "N")
    assert index["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    # Both keys are the record's own fields, stored under their names by the codec: a record
    # is in the index exactly while it holds a polling lease.
    assert {LIVE_PARTITION, LIVE_SORT} <= RolloutRecord.__dataclass_fields__.keys()


def test_the_longest_hand_off_wait_is_the_templates() -> None:
    """Slots are kept as long as a record can live, which counts the longest a hand-off can
    wait for its worker: Lambda's event age and the queue's retention."""
    resources = load_template(ROOT / "template.yaml")["Resources"]
    worker = resources["WorkerFunction"]["Properties"]["EventInvokeConfig"]
    assert worker["MaximumEventAgeInSeconds"] == MAX_HANDOFF_WAIT_SECONDS
    queue = resources["RolloutQueue"]["Properties"]
    assert queue["MessageRetentionPeriod"] == MAX_HANDOFF_WAIT_SECONDS


def _statements(statements: list[Any]) -> list[tuple[str | None, dict[str, Any]]]:
    """Each statement with the condition it is granted under (an ``!If``'s false branch: the
    condition's name after ``not``)."""
    found: list[tuple[str | None, dict[str, Any]]] = []
    for statement in statements:
        if "Fn::If" in statement:
            condition, when_true, when_false = statement["Fn::If"]
            for under, branch in ((condition, when_true), (f"not {condition}", when_false)):
                if "Sid" in branch:  # not AWS::NoValue
                    found.append((under, branch))
        else:
            found.append((None, statement))
    return found


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else [value]
