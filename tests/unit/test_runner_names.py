"""What the one runner changed for ``demo`` and for ``create_app``'s callers, as docs/local.md
(the demo) and docs/porting.md (``create_app``) say: the demo's rollouts are named as test's (``demo-N``, numbered on across ``--repeat``), and
``create_app``'s old kit-only switches are ignored with a warning naming them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, cast

import pytest

from rollout_sdk.http.app import create_app
from rollout_sdk.local.demo import _rows
from rollout_sdk.local.runner import LocalRun, TrainGateSide
from rollout_sdk.settings import RolloutSettings

from .support import EchoAgent

pytestmark = pytest.mark.timeout(30)


def test_demo_rows_are_numbered_on_across_repeats(tmp_path: Path) -> None:
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text(
        '{"messages": [{"role": "user", "content": "1+1"}], "metadata": {"answer": 2}}\n'
        '{"messages": [{"role": "user", "content": "2+2"}], "metadata": {"answer": 4}}\n'
    )
    rows = _rows(argparse.Namespace(dataset=str(dataset), repeat=3))
    assert [row.row_index for row in rows] == [0, 1, 2, 3, 4, 5]
    assert [row.metadata["row_index"] for row in rows] == [0, 1, 2, 3, 4, 5]
    assert [row.metadata["answer"] for row in rows] == [2, 4, 2, 4, 2, 4]
    run = LocalRun(
        EchoAgent(),
        cast(TrainGateSide, object()),
        settings=RolloutSettings(),
        prefix="demo",
    )
    assert [run.rollout_id(row.row_index) for row in rows] == [f"demo-{n}" for n in range(6)]
    assert run.rollout_id(0) == "demo-0.2"  # a row run again gets a new name


@pytest.mark.parametrize(
    "switch", ["seal_at_init", "sweep_on_start", "build_all_models", "redrive", "metrics"]
)
def test_create_app_ignores_the_old_kit_switches_with_a_warning_naming_them(switch: str) -> None:
    options: dict[str, Any] = {switch: True}
    with pytest.warns(UserWarning, match=rf"ignoring unknown arguments \['{switch}'\]"):
        app = create_app(EchoAgent(), **options)
    assert any(getattr(route, "path", None) == "/v1/rollout/init" for route in app.routes)
