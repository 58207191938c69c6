"""docs/bodies.md is what the kit's models say: every field of each body described, no field
that is not one, and the file as ``python -m bench.wire_docs`` writes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout_sdk.engine.service import record_status
from rollout_sdk.store.record import RolloutRecord
from testkit.wire_docs import MODELS, V1_STATUS, render

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("heading", [m[0] for m in MODELS if m[2] is not None])
def test_each_body_s_fields_are_its_model_s(heading: str) -> None:
    (_, _, model, meanings) = next(m for m in MODELS if m[0] == heading)
    assert model is not None
    assert list(meanings) == list(model.model_fields)


def test_the_status_body_s_fields_are_record_status_s() -> None:
    record = RolloutRecord(rollout_id="r", slot="s", fingerprint="f", request={}, init_response={})
    assert list(V1_STATUS) == list(record_status(record))


def test_docs_bodies_md_is_what_the_generator_writes() -> None:
    written = (ROOT / "docs" / "bodies.md").read_text()
    assert written == render() + "\n", "run: python -m bench.wire_docs"
