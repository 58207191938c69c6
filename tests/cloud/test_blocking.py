"""An agent that blocks its event loop past what the worker can wait: reported once, as ERROR.

Nothing inside the process can interrupt a synchronous call in the agent (docs/architecture.md,
"An agent that blocks the event loop"). On a stack, Lambda ends the worker at its timeout; the
retried event (Lambda's retry, once the rollout's lease ran out) or, when every retry fails, the
on-failure destination reports the rollout: within about three worker timeouts. Locally the
server hangs until it is restarted: the check shows it hanging, kills and restarts it, and the
restart sweep reports the rollout.
"""

from __future__ import annotations

import httpx
import pytest

from rollout_sdk.engine.recovery import LEASE_REASON, RESTART_REASON
from rollout_sdk.engine.settlement import OWNER_STOPPED
from testkit.wait import wait_until

from .agents import block
from .checks import require_suite_agent
from .conftest import say
from .target import DEFAULT_WORKER_TIMEOUT, Target, requested_stack

pytestmark = pytest.mark.integration

#: Longer than any worker timeout: the agent never returns on its own.
BLOCK_SECONDS = 3600.0
#: The slack beyond three worker timeouts on a stack (cold starts, the callback).
SLACK_SECONDS = 60.0
#: What reports it locally: the restart sweep.
LOCAL_REPORTERS: tuple[str, ...] = (RESTART_REASON,)
#: What may report it on a stack: the retried event, the re-drive's lease watch, the on-failure
#: destination (whose message begins so).
STACK_REPORTERS: tuple[str, ...] = (OWNER_STOPPED, LEASE_REASON, "the worker function failed (")
#: pytest-timeout's bound: locally two minutes; on a stack the longest worker timeout's budget.
HARD_TIMEOUT = 3 * DEFAULT_WORKER_TIMEOUT + 2 * SLACK_SECONDS if requested_stack() else 120.0


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.timeout(HARD_TIMEOUT)
def test_an_agent_blocking_its_event_loop_is_reported_once_as_error(
    own_target: Target, pytestconfig: pytest.Config
) -> None:
    target = own_target
    require_suite_agent(target)
    rollout_id = target.new_id("block")
    assert target.init(target.body(rollout_id, metadata=block(BLOCK_SECONDS))).status_code == 202
    target.wait_chat(rollout_id)  # its one turn; the agent blocks next
    if target.rig is not None:
        # Nothing in the process runs any more, not even /health.
        wait_until(
            lambda: not answers(f"{target.base_url}/health"),
            within=10,
            what="the server hanging on the blocked event loop",
        )
        target.rig.kill()
        target.rig.restart()
        within, reporters = target.callback_within, LOCAL_REPORTERS
    else:
        assert target.worker_timeout is not None
        within, reporters = 3 * target.worker_timeout + SLACK_SECONDS, STACK_REPORTERS
        say(pytestconfig, f"{rollout_id} blocks its worker; waiting up to {within:g} s")
    seen = target.wait_reported(rollout_id, within=within)
    assert len(seen["completions"]) == 1, seen
    done = seen["completions"][0]
    assert (done["status"], done["finish_reason"]) == ("ERROR", "error"), done
    assert str(done["error_message"]).startswith(reporters), done["error_message"]
    assert seen["runs"] == 1  # reported, never run again
    if target.rig is None:
        say(pytestconfig, f"{rollout_id} reported: {done['error_message']}")
