"""One local server per state folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from examples.calculator.agent import agent_loop
from rollout_sdk.errors import ServeError
from rollout_sdk.local.server import LOCK_FILE, StateLock, build_local_app


async def test_a_second_server_on_the_same_folder_is_refused_naming_the_holder(
    tmp_path: Path,
) -> None:
    first = build_local_app(agent_loop, state_dir=tmp_path)
    async with first.router.lifespan_context(first):
        with pytest.raises(ServeError) as refused:
            build_local_app(agent_loop, state_dir=tmp_path)
    message = str(refused.value)
    assert str(tmp_path) in message and "--state-dir" in message
    assert "pid" in message
    # Shut down, the folder is free again.
    again = build_local_app(agent_loop, state_dir=tmp_path)
    async with again.router.lifespan_context(again):
        pass


def test_the_lock_is_released_by_release_and_by_the_process_dying(tmp_path: Path) -> None:
    lock = StateLock(tmp_path).acquire()
    lock.release()
    StateLock(tmp_path).acquire().release()
    # A process that takes the lock and dies without releasing it (as SIGKILL would) frees it.
    code = (
        "import sys, os; from rollout_sdk.local.server import StateLock; "
        f"StateLock({str(tmp_path)!r}).acquire(); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    StateLock(tmp_path).acquire().release()
    assert (tmp_path / LOCK_FILE).exists()
