"""Load an agent loop named as ``module:attribute`` (the form ``template.yaml`` and the CLI use),
or as ``mcp:FOLDER``.

Above both the agent API and :mod:`rollout_sdk.mcp`, which it can load; the runtimes (Lambda's
composition root, the CLI) call it.
"""

from __future__ import annotations

import importlib
import inspect
import os
import traceback
from typing import Any

from rollout_sdk.errors import ConfigurationError
from rollout_sdk.project import importable_from_here


def _import_failed(module_name: str, spec: str, exc: BaseException) -> str:
    """What went wrong importing ``module_name``: the error, and the last line of the user's
    code it came from (``rollout-sdk --debug`` shows the whole traceback)."""
    kit = os.path.dirname(os.path.abspath(__file__))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    # The last line of the user's own code: the kit's (an author API's check) says less.
    theirs = [f for f in frames if not os.path.abspath(f.filename).startswith(kit)] or frames
    where = f" at {theirs[-1].filename}:{theirs[-1].lineno}" if theirs else ""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    fix = f"install {missing} (the agent's requirements.txt)" if missing else "fix the module"
    return (
        f"importing module {module_name!r} for {spec!r} failed: "
        f"{exc.__class__.__name__}: {exc}{where}; {fix} (--debug shows the traceback)"
    )


def load_object(spec: str) -> Any:
    """Import ``module:attribute`` (dots allowed in both parts). The current directory is put on
    ``sys.path`` first, as uvicorn does, so an agent beside the project imports as it is.

    Raises ConfigurationError naming what is wrong and how to write it.
    """
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise ConfigurationError(
            f"agent {spec!r} must be written MODULE:ATTRIBUTE, e.g. examples.calculator.agent:agent_loop"
        )
    importable_from_here()
    cwd = os.getcwd()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # The module itself or one of its parent packages is missing (a plain prefix test would
        # also swallow a missing dependency "foo" of a module "foo_agent").
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigurationError(
                f"cannot import module {module_name!r} for agent {spec!r}: {exc} "
                f"(run from the folder that contains it; current folder: {cwd})"
            ) from exc
        raise ConfigurationError(_import_failed(module_name, spec, exc)) from exc
    except Exception as exc:  # the module's own code failed: its error, where, and the fix
        raise ConfigurationError(_import_failed(module_name, spec, exc)) from exc
    target: Any = module
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise ConfigurationError(
                f"module {module_name!r} has no attribute {attr_path!r} (agent {spec!r})"
            ) from exc
    return target


def load_agent_loop(spec: str) -> Any:
    """Load an agent loop instance; a class with a no-argument constructor is instantiated.

    ``mcp:FOLDER`` names an MCP folder instead (what the template's McpFolder parameter sets):
    the :class:`~rollout_sdk.mcp.MCPAgentLoop` of its FastMCP server; MCPLoadError if it cannot
    be loaded. (``mcp`` is also the MCP SDK's package name, which holds no agent loop.)
    """
    if spec.startswith("mcp:"):
        # Here, not at the top: the mcp extra may not be installed, and an agent given as
        # module:attribute never needs it.
        from rollout_sdk.mcp import agent_loop_from_folder

        return agent_loop_from_folder(spec.removeprefix("mcp:"))
    target = load_object(spec)
    if inspect.isclass(target):
        try:
            target = target()
        except TypeError as exc:
            raise ConfigurationError(
                f"{spec} is a class that cannot be built without arguments ({exc}); "
                "point at an instance instead"
            ) from exc
    return target


def load_workflows(
    workflow: str,
    grader: str | None = None,
    workflow_config: str | None = None,
    grader_config: str | None = None,
) -> Any:
    """The osmosis-ai 0.3.8 workflow (and grader) to serve, each named ``module:attribute``:
    an ``AgentWorkflow`` subclass, a ``Grader`` subclass, and optionally an instance of each
    one's configuration (``AgentWorkflowConfig``, ``GraderConfig``), as 0.3.8's
    ``LocalBackend`` takes them. ConfigurationError naming the option when one is not that."""
    from rollout_sdk.engine.workflows import Workflows
    from rollout_sdk.osmosis03 import AgentWorkflow, AgentWorkflowConfig, Grader, GraderConfig

    def kind(spec: str | None, base: type, option: str, *, instance: bool) -> Any:
        if spec is None:
            return None
        target = load_object(spec)
        ok = (
            isinstance(target, base)
            if instance
            else inspect.isclass(target) and issubclass(target, base)
        )
        if not ok:
            what = (
                f"an instance of {base.__name__}" if instance else f"a subclass of {base.__name__}"
            )
            raise ConfigurationError(
                f"{option} {spec}: {spec.split(':')[-1]} is {type(target).__name__ if instance else target!r}, "
                f"not {what} (from rollout_sdk.osmosis03, or osmosis_ai.rollout moved over by its imports)"
            )
        return target

    return Workflows(
        workflow=kind(workflow, AgentWorkflow, "--workflow", instance=False),
        grader=kind(grader, Grader, "--grader", instance=False),
        workflow_config=kind(
            workflow_config, AgentWorkflowConfig, "--workflow-config", instance=True
        ),
        grader_config=kind(grader_config, GraderConfig, "--grader-config", instance=True),
        name=workflow,
        grader_name=grader,
    )
