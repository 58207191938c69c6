"""A process-wide registry of agent loops by name (the v1 API)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from rollout_sdk.errors import AgentLoopNotFoundError

if TYPE_CHECKING:
    from rollout_sdk.agent.loop import RolloutAgentLoop


class AgentLoopRegistry:
    """Agent loops by ``name``; thread-safe."""

    def __init__(self) -> None:
        self._loops: dict[str, RolloutAgentLoop] = {}
        self._lock = threading.Lock()

    def register(self, loop: RolloutAgentLoop) -> None:
        """Add ``loop``; raise ValueError when its name is taken."""
        with self._lock:
            if loop.name in self._loops:
                raise ValueError(
                    f"Agent loop {loop.name!r} is already registered. Use a different name "
                    "or unregister the existing one first."
                )
            self._loops[loop.name] = loop

    def unregister(self, name: str) -> bool:
        """Remove the loop called ``name``; True when there was one."""
        with self._lock:
            return self._loops.pop(name, None) is not None

    def get(self, name: str) -> RolloutAgentLoop | None:
        """The loop called ``name``, or None."""
        with self._lock:
            return self._loops.get(name)

    def list_names(self) -> list[str]:
        """Registered names, in registration order."""
        with self._lock:
            return list(self._loops)

    def clear(self) -> None:
        """Forget every loop."""
        with self._lock:
            self._loops.clear()


_registry = AgentLoopRegistry()


def register_agent_loop(loop: RolloutAgentLoop) -> None:
    """Register ``loop`` globally; ValueError on a duplicate name."""
    _registry.register(loop)


def unregister_agent_loop(name: str) -> bool:
    """Remove a globally registered loop; True when there was one."""
    return _registry.unregister(name)


def get_agent_loop(name: str) -> RolloutAgentLoop:
    """The globally registered loop called ``name``; AgentLoopNotFoundError when unknown."""
    loop = _registry.get(name)
    if loop is None:
        raise AgentLoopNotFoundError(name, _registry.list_names())
    return loop


def list_agent_loops() -> list[str]:
    """Names of the globally registered loops."""
    return _registry.list_names()
