"""The whole matrix: every scenario at one scale, a crashed scenario a failed row."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from testkit.rigs import (
    AwsRig,
    LocalRig,
    control_env,
    fault_env,
)
from testkit.scenarios.aws import (
    run_aws_aged_out,
    run_aws_deadline,
    run_aws_duplicate_deliveries,
    run_aws_identical_inits,
    run_aws_parked_redrive,
    run_aws_worker_deaths,
)
from testkit.scenarios.bad_input import run_bad_input
from testkit.scenarios.base import (
    Row,
    Say,
    Scale,
    quiet,
)
from testkit.scenarios.control import run_backpressure, run_cancel, run_local_deadline
from testkit.scenarios.duplicates import run_duplicates
from testkit.scenarios.faults import run_fault_mix
from testkit.scenarios.kill import run_kill_restart


@contextmanager
def _section(rows: list[Row], title: str, say: Say) -> Iterator[None]:
    say(f"== {title}")
    started = time.monotonic()
    try:
        yield
    except Exception as exc:  # a scenario that crashed is a failed row, not a crashed run
        rows.append(
            Row(title, "the scenario runs", f"crashed: {type(exc).__name__}", failures=[str(exc)])
        )
        say(f"   CRASHED: {type(exc).__name__}: {exc}")
    say(f"   ({time.monotonic() - started:.1f} s)")


def run_matrix(scale: Scale, *, say: Say = quiet) -> list[Row]:
    """Every scenario at ``scale``; a crashed scenario becomes a failed row."""
    rows: list[Row] = []
    with (
        _section(rows, "local server: TrainGate faults under load", say),
        LocalRig(env=fault_env(scale), name="faults") as rig,
    ):
        rows += run_fault_mix(rig, scale, say)
        say("== local server: duplicates")
        rows += run_duplicates(rig, scale, say)
        say("== local server: bad input")
        rows.append(run_bad_input(rig))
    with (
        _section(rows, "local server: cancel, backpressure, deadline", say),
        LocalRig(env=control_env(scale), name="control", keep_chat=True) as rig,
    ):
        rows += run_cancel(rig, scale, say)
        rows.append(run_backpressure(rig, scale, say))
        say("== local server: the rollout deadline")
        rows.append(run_local_deadline(rig, scale, say))
    with _section(rows, "local server: SIGKILL in the middle of rollouts, restart", say):
        rows += run_kill_restart(scale, say)
    with (
        _section(rows, "AWS path: handler.py on moto's server", say),
        AwsRig(environments=scale.aws_environments) as aws,
    ):
        rows.append(run_aws_duplicate_deliveries(aws, scale, say))
        rows.append(run_aws_identical_inits(aws, scale, say))
        rows += run_aws_worker_deaths(aws, scale, say)
        rows.append(run_aws_aged_out(aws, scale, say))
        rows.append(run_aws_parked_redrive(aws, scale, say))
        rows.append(run_aws_deadline(aws, scale, say))
    return rows
