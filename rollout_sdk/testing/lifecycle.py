"""``with thing as started:`` for the kit's local services (servers, emulators, subprocesses)."""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Any, Self


class StartStop(abc.ABC):
    """A service with ``start()`` (returning itself once ready) and ``stop()``; as a context
    manager it starts on entry and always stops on exit."""

    @abc.abstractmethod
    def start(self) -> Self:
        """Start and wait until ready."""

    @abc.abstractmethod
    def stop(self) -> Any:
        """Stop; safe to call more than once."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
