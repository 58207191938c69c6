"""The cloud suite's target, chosen once and said before anything contacts it.

Without a stack (every ``make test``), the environment is made fake-AWS here too, before any
boto3 client could exist, so that even ``make test-cloud``'s ``pytest`` run (which does not load
``tests/conftest.py``) cannot reach AWS on the local path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from testkit.aws import use_fake_aws

from .target import (
    STACK_VARIABLE,
    CloudSuiteUsageError,
    Target,
    check_stand_in_url,
    local_rig,
    local_target,
    requested_stack,
    stack_target,
)

STACK = requested_stack()
if STACK is None:
    use_fake_aws()


def pytest_configure(config: pytest.Config) -> None:
    # Refuse a stack run missing its stand-in before any test (and any AWS call) starts.
    if STACK is not None:
        try:
            check_stand_in_url(os.environ)
        except CloudSuiteUsageError as exc:
            raise pytest.UsageError(str(exc)) from exc


def say(config: pytest.Config, line: str) -> None:
    """Print ``line`` past pytest's output capture, on a line of its own."""
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\ntests/cloud: {line}", flush=True)


@pytest.fixture(scope="package")
def target(pytestconfig: pytest.Config) -> Iterator[Target]:
    """The stack ``AWS_SAM_STACK_NAME`` names, else the local server (started here, stopped
    when the suite ends)."""
    if STACK is not None:
        try:
            found = stack_target(STACK, os.environ, lambda line: say(pytestconfig, line))
        except CloudSuiteUsageError as exc:
            pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)
        try:
            yield found
        finally:
            found.close()
        return
    if os.environ.get(STACK_VARIABLE, "").strip():
        say(
            pytestconfig,
            f"{STACK_VARIABLE} is set, but this run fakes AWS (tests/conftest.py): testing the "
            "local server; `make test-cloud` tests the stack",
        )
    with local_rig("cloud") as rig:
        found = local_target(rig)
        say(pytestconfig, f"against {found.description}; no AWS")
        try:
            yield found
        finally:
            found.close()


@pytest.fixture
def own_target(target: Target) -> Iterator[Target]:
    """A target a check may break: locally a server of its own (killed and restarted by the
    check, sharing nothing with the others); on a stack, the stack."""
    if target.rig is None:
        yield target
        return
    with local_rig("cloud-own") as rig:
        found = local_target(rig)
        try:
            yield found
        finally:
            found.close()
