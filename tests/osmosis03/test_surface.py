"""The 0.3.8 author surface: each author-facing name of ``osmosis_ai.rollout`` (0.3.8) that
``rollout_sdk.osmosis03`` serves is there, under the same module, with 0.3.8's signature,
fields, defaults and members, compared live with osmosis-ai 0.3.8 itself.

Runs in the environment of its own that ``make test`` makes (``.venv-osmosis03``: Python 3.12 or
newer, osmosis-ai 0.3.8); the kit's modules are read from the repository (they need pydantic
only). Scope: what a workflow and a grader import (below, ``SURFACE``); not served, so not
here: ``LocalBackend`` and ``ExecutionBackend`` (the kit's engine runs the rollouts), the
execution types only a backend uses (``ExecutionRequest``, ``ExecutionResult``,
``ExecutionOutcome``), and 0.3.8's integrations, trajectory store and previews.
"""

from __future__ import annotations

import contextvars
import dataclasses
import enum
import importlib
import inspect
import re
import typing
from typing import Any

import osmosis_ai.rollout as theirs_package
import pydantic
import pytest

import rollout_sdk.osmosis03 as ours_package

#: module (under ``osmosis_ai.rollout`` and ``rollout_sdk.osmosis03``) -> the names it serves.
SURFACE: dict[str, tuple[str, ...]] = {
    "": (
        "AgentWorkflow",
        "AgentWorkflowConfig",
        "AgentWorkflowContext",
        "AgentWorkflowOutput",
        "BaseConfig",
        "ConcurrencyConfig",
        "Grader",
        "GraderConfig",
        "GraderContext",
        "MessageDict",
        "RolloutContext",
        "RolloutErrorCategory",
        "RolloutInitRequest",
        "RolloutInitResponse",
        "RolloutResultResponse",
        "RolloutSample",
        "RolloutStatus",
        "SampleSource",
        "get_rollout_context",
    ),
    "agent_workflow": ("AgentWorkflow",),
    "grader": ("Grader",),
    "context": (
        "AgentWorkflowContext",
        "GraderContext",
        "RolloutContext",
        "SampleSource",
        "get_rollout_context",
        "rollout_contextvar",
        "CHAT_COMPLETIONS_URL_ENV",
        "API_KEY_ENV",
        "ROLLOUT_ID_ENV",
    ),
    "types": (
        "POLLING_LEASE_HEADER",
        "AgentWorkflowConfig",
        "AgentWorkflowOutput",
        "BaseConfig",
        "CancelRolloutsRequest",
        "CancelRolloutsResponse",
        "ConcurrencyConfig",
        "GraderConfig",
        "MessageDict",
        "Messages",
        "RolloutErrorCategory",
        "RolloutInitRequest",
        "RolloutInitResponse",
        "RolloutLifecycle",
        "RolloutResultResponse",
        "RolloutSample",
        "RolloutStatus",
    ),
}

#: 0.3.8's package exports that the kit does not serve (see the module's docstring).
NOT_SERVED = {
    "ExecutionBackend",
    "LocalBackend",
    "ExecutionOutcome",
    "ExecutionRequest",
    "ExecutionResult",
}

#: Where the kit differs on purpose, by "module:name.member": why.
DIFFERENCES = {
    ":RolloutContext.progress": "0.3.8 types it as its RolloutProgress; the kit's worker passes its own object with the same async set_status",
    "context:RolloutContext.progress": "as above",
}


def _module(package: Any, name: str) -> Any:
    return package if not name else importlib.import_module(f"{package.__name__}.{name}")


def _pairs() -> list[tuple[str, str]]:
    return [(module, name) for module, names in SURFACE.items() for name in names]


def _normal(text: str) -> str:
    """An annotation's text without the modules that define its classes."""
    text = re.sub(r"\b(osmosis_ai|rollout_sdk|pathlib)\.[\w.]*\.(\w+)", r"\2", text)
    text = re.sub(r"<class '(\w+)'>", r"\1", text)
    # A PEP 695 type parameter (0.3.8's) prints without the "~" of a TypeVar (the kit's, for 3.11).
    return text.replace("typing.", "").replace("collections.abc.", "").replace("~", "")


def _signature(obj: Any) -> list[tuple[str, str, str]]:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    return [
        (p.name, p.kind.name, "required" if p.default is p.empty else repr(p.default))
        for p in signature.parameters.values()
        if p.name != "self"
    ]


def _public_methods(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in vars(cls).items()
        if not name.startswith("_") and callable(member)
    }


def test_the_surface_covers_every_name_0_3_8_exports_but_the_unserved() -> None:
    exported = set(theirs_package.__all__)
    assert exported - set(SURFACE[""]) == NOT_SERVED
    assert set(ours_package.__all__) == set(SURFACE[""])


@pytest.mark.parametrize(("module", "name"), _pairs())
def test_each_name_is_0_3_8s(module: str, name: str) -> None:
    theirs = getattr(_module(theirs_package, module), name)
    ours = getattr(_module(ours_package, module), name)
    key = f"{module}:{name}"
    if isinstance(theirs, str | int | float):
        assert ours == theirs
        return
    if isinstance(theirs, type) and issubclass(theirs, enum.Enum):
        assert [(m.name, m.value) for m in ours] == [(m.name, m.value) for m in theirs]
        return
    if isinstance(theirs, type) and issubclass(theirs, pydantic.BaseModel):
        assert issubclass(ours, pydantic.BaseModel), key
        assert _fields(ours) == _fields(theirs), key
        assert dict(ours.model_config) == dict(theirs.model_config), key
        _same_methods(ours, theirs, key)
        return
    if isinstance(theirs, type):
        assert isinstance(ours, type), key
        assert inspect.isabstract(ours) == inspect.isabstract(theirs), key
        assert sorted(getattr(ours, "__abstractmethods__", ())) == sorted(
            getattr(theirs, "__abstractmethods__", ())
        ), key
        assert _signature(ours) == _signature(theirs), key
        if dataclasses.is_dataclass(theirs):
            mine, their_hints = typing.get_type_hints(ours), typing.get_type_hints(theirs)
            for field in dataclasses.fields(theirs):
                if f"{key}.{field.name}" in DIFFERENCES:
                    continue
                assert _normal(repr(mine[field.name])) == _normal(repr(their_hints[field.name])), (
                    f"{key}.{field.name}"
                )
        _same_methods(ours, theirs, key)
        return
    if callable(theirs):
        assert _signature(ours) == _signature(theirs), key
        assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(theirs), key
        return
    # A type alias (MessageDict, Messages) or the context variable.
    assert type(ours) is type(theirs), key
    if isinstance(theirs, contextvars.ContextVar):
        assert ours.get() is None and theirs.get() is None, key
        return
    assert _normal(repr(ours)) == _normal(repr(theirs)), key


def _fields(model: type[pydantic.BaseModel]) -> dict[str, tuple[str, Any, str]]:
    out: dict[str, tuple[str, Any, str]] = {}
    for name, info in model.model_fields.items():
        if info.is_required():
            default: Any = "required"
        elif info.default_factory is not None:
            made = info.default_factory()  # type: ignore[call-arg]
            default = (
                "factory",
                made.model_dump() if isinstance(made, pydantic.BaseModel) else made,
            )
        else:
            default = info.default
        out[name] = (_normal(repr(info.annotation)), default, repr(info.metadata))
    return out


def _same_methods(ours: type, theirs: type, key: str) -> None:
    mine = _public_methods(ours)
    for name in _public_methods(theirs):
        if name.startswith("model_") or f"{key}.{name}" in DIFFERENCES:
            continue
        assert name in mine, f"{key}.{name} is missing"
        target = getattr(ours, name)
        assert _signature(target) == _signature(getattr(theirs, name)), f"{key}.{name}"
        assert inspect.iscoroutinefunction(target) == inspect.iscoroutinefunction(
            getattr(theirs, name)
        ), f"{key}.{name}"
