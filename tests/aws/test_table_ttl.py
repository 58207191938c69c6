"""The table's TTL attribute, as the template enables it, is the one the store writes."""

from __future__ import annotations

from rollout_sdk.engine.record import RolloutRecord
from rollout_sdk.local.emulator import load_template, ttl_attribute
from rollout_sdk.store.dynamodb import TTL_ATTRIBUTE

from .conftest import ROOT


def test_the_templates_ttl_attribute_is_the_records_expiry_the_store_writes() -> None:
    assert ttl_attribute(load_template(ROOT / "template.yaml")) == TTL_ATTRIBUTE
    # The codec stores each record field under its own name: the TTL must be such a field.
    assert TTL_ATTRIBUTE in RolloutRecord.__dataclass_fields__
