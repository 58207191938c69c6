"""``rollout-sdk invoke``: run a function of ``template.yaml`` on an event file, the way
``sam local invoke`` does, without a container engine.

The environment is resolved from the template as SAM would (parameter defaults, plus the
resources of the embedded emulator for ``!Ref``, and fake credentials where Lambda would put
real ones) and written into this process's ``os.environ``: on purpose, the one place the kit
writes it, because the handler reads its settings from there, as on Lambda. ``handler.py`` is
then imported in this process, and the handler is called with a Lambda context whose remaining
time is the function's timeout.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rollout_sdk.errors import ConfigurationError
from rollout_sdk.local.emulator import EmbeddedMoto, LocalResources, load_template, provision
from rollout_sdk.project import importable_from_here
from rollout_sdk.stack import LambdaFunction

#: The short names ``rollout-sdk invoke`` takes for a function: its metrics' ``Function``
#: dimension and its cost label (``failure`` and ``worker-failed`` name one function).
ALIASES = {
    alias: function.names.logical_id
    for function in LambdaFunction
    for alias in (function.names.dimension, function.names.cost_label)
}
#: The handler.py entry point of each function.
ENTRY_POINTS = {function.names.logical_id: function.names.entry for function in LambdaFunction}


def resolve_function(template: dict[str, Any], name: str) -> str:
    """The template's logical id for ``name`` (itself, or a short alias such as ``api``)."""
    functions = [
        key
        for key, res in template["Resources"].items()
        if res.get("Type") == "AWS::Serverless::Function"
    ]
    if name in functions:
        return name
    by_lower = {f.lower(): f for f in functions}
    logical = ALIASES.get(name.lower()) or by_lower.get(name.lower())
    if logical is not None and logical in functions:
        return logical
    choices = ", ".join(functions + sorted(ALIASES))
    raise ConfigurationError(f"unknown function {name!r}; choose one of: {choices}")


def _resolve(value: Any, parameters: dict[str, Any], refs: dict[str, str]) -> str | None:
    if isinstance(value, str | int | float):
        return str(value)
    if isinstance(value, dict) and "Ref" in value:
        name = value["Ref"]
        if name in refs:
            return refs[name]
        if name in parameters:
            default = parameters[name].get("Default")
            return None if default in (None, "") else str(default)
        return None
    if isinstance(value, dict) and "Fn::If" in value:
        # The conditions the template uses pick the created resource when a parameter is
        # empty, which is how a local run leaves them.
        _, when_true, _ = value["Fn::If"]
        return _resolve(when_true, parameters, refs)
    return None


def function_environment(
    template: dict[str, Any],
    logical_id: str,
    resources: LocalResources,
    overrides: dict[str, str] | None = None,
) -> dict[str, str]:
    """The function's environment variables as deployed with the template parameters
    ``overrides`` names (as ``sam deploy --parameter-overrides``), pointed at the local
    resources."""
    parameters = {
        name: {**spec, "Default": overrides[name]} if overrides and name in overrides else spec
        for name, spec in template.get("Parameters", {}).items()
    }
    unknown = sorted(set(overrides or {}) - set(parameters))
    if unknown:
        raise ConfigurationError(f"the template has no parameter {', '.join(unknown)}")
    refs = {
        "RolloutTable": resources.table_name,
        "PayloadBucket": resources.bucket,
        "ServerKeySecret": resources.secret_arn,
        "WorkerFunction": resources.worker_function,
        "CallbackKeyKey": resources.kms_key_id,
        "RolloutQueue": resources.queue_url,
    }
    merged: dict[str, Any] = {}
    merged.update(
        template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    )
    props = template["Resources"][logical_id].get("Properties", {})
    merged.update(props.get("Environment", {}).get("Variables", {}))
    env = {}
    for key, value in merged.items():
        resolved = _resolve(value, parameters, refs)
        if resolved is not None:
            env[key] = resolved
    env.update(resources.environment)
    return env


def function_timeout(template: dict[str, Any], logical_id: str) -> float:
    """The function's timeout in seconds (parameter defaults resolved)."""
    props = template["Resources"][logical_id].get("Properties", {})
    value = props.get("Timeout", template.get("Globals", {}).get("Function", {}).get("Timeout", 3))
    resolved = _resolve(value, template.get("Parameters", {}), {})
    return float(resolved or 3)


@dataclass
class LocalLambdaContext:
    """The parts of a Lambda context handlers use."""

    function_name: str
    timeout_seconds: float
    memory_limit_in_mb: int = 512
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    log_group_name: str = "/aws/lambda/local"
    log_stream_name: str = "local"
    _started: float = field(default_factory=time.monotonic)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the function's timeout."""
        return max(0, int((self.timeout_seconds - (time.monotonic() - self._started)) * 1000))


def load_event(path: str | Path) -> Any:
    """Read an event file; ConfigurationError naming the file on bad JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read event file {path}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"event file {path} is not JSON: line {exc.lineno}: {exc.msg}"
        ) from exc


def results_channel() -> TextIO:
    """This process's stdout for results alone: a stream on it is returned, and file
    descriptor 1 becomes stderr, line-buffered, so everything else written there (Powertools'
    log lines and metrics, which write to ``sys.stdout``) goes to stderr. Call it before
    ``handler.py`` is imported (its logger keeps the stream it was given)."""
    results = os.fdopen(os.dup(1), "w", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(2, 1)
    # Line by line, as Lambda's log stream takes them: nothing is left in a buffer when the
    # process is stopped.
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    return results


def import_handler(environment: dict[str, str], module: str = "handler") -> Any:
    """Import ``handler.py`` afresh (a cold start) with ``environment`` applied to this process's
    ``os.environ`` (a cold start's environment; it stays applied after the call). The settings
    are read afresh, as a new execution environment reads them."""
    # Here, beside the handler's import it prepares (the settings are read afresh for it).
    from rollout_sdk.settings import reset_settings

    os.environ.update(environment)
    reset_settings()
    importable_from_here()
    sys.modules.pop(module, None)
    return importlib.import_module(module)


@dataclass
class Invocation:
    """One handler call and what it caused."""

    function: str
    result: Any
    dispatched: list[dict[str, Any]] = field(default_factory=list)


def invoke(
    handler_module: Any,
    logical_id: str,
    event: Any,
    *,
    timeout_seconds: float,
) -> Invocation:
    """Call the handler for ``logical_id``; record the worker events the call dispatched."""
    entry: Callable[[Any, Any], Any] = getattr(handler_module, ENTRY_POINTS[logical_id])
    dispatched: list[dict[str, Any]] = []

    def capture(params: dict[str, Any], **_: Any) -> None:
        body = params.get("body") or b"{}"
        dispatched.append(json.loads(body if isinstance(body, bytes | str) else body.read()))

    lambda_client = handler_module.runtime.clients.lambda_
    lambda_client.meta.events.register("before-call.lambda.Invoke", capture)
    try:
        context = LocalLambdaContext(function_name=logical_id, timeout_seconds=timeout_seconds)
        result = entry(event, context)
    finally:
        lambda_client.meta.events.unregister("before-call.lambda.Invoke", capture)
    return Invocation(logical_id, result, dispatched)


def load(template_path: str | Path) -> dict[str, Any]:
    """The template (re-exported for the CLI)."""
    return load_template(template_path)


def parse_overrides(pairs: list[str], template: dict[str, Any] | None = None) -> dict[str, str]:
    """``NAME=VALUE`` tokens (as ``sam deploy --parameter-overrides`` takes them, each token
    possibly holding several separated by spaces) as a dict; ConfigurationError naming a token
    without ``=``, or a name ``template`` has no parameter of."""
    overrides: dict[str, str] = {}
    for token in (t for pair in pairs for t in pair.split()):
        name, equals, value = token.partition("=")
        if not equals or not name:
            raise ConfigurationError(
                f"--parameter-overrides {token!r}: give NAME=VALUE, e.g. "
                "Workflow=my_agent.workflow:MyWorkflow"
            )
        overrides[name] = value
    known = (template or {}).get("Parameters", {})
    unknown = sorted(set(overrides) - set(known)) if template is not None else []
    if unknown:
        raise ConfigurationError(
            f"--parameter-overrides: the template has no parameter {', '.join(unknown)} "
            f"(it has {', '.join(sorted(known))})"
        )
    return overrides


def load_env_vars(path: str | Path) -> dict[str, dict[str, str]]:
    """An ``--env-vars`` file, as sam local reads one: ``{"Parameters": {NAME: VALUE}}`` for
    every function, ``{LOGICAL_ID: {NAME: VALUE}}`` for one. ConfigurationError naming the file
    and what is wrong."""
    data = load_event(path)
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) for k, v in data.items()
    ):
        raise ConfigurationError(
            f"--env-vars {path}: give a JSON object of objects, e.g. "
            '{"Parameters": {"LOG_LEVEL": "DEBUG"}, "ApiFunction": {...}}'
        )
    return {scope: {str(k): str(v) for k, v in values.items()} for scope, values in data.items()}


def template_agent(template: dict[str, Any], given: str | None) -> str:
    """The agent loop to run: ``given``, else the template's AgentLoop parameter default."""
    return given or str(template.get("Parameters", {}).get("AgentLoop", {}).get("Default"))


@dataclass
class EmulatedStack:
    """The stack's AWS side on an emulator: where it is, what was made there, and the embedded
    moto server when this made one (stop it with :meth:`stop`)."""

    endpoint: str
    resources: LocalResources
    emulator: EmbeddedMoto | None = None

    def stop(self) -> None:
        if self.emulator is not None:
            self.emulator.stop()


def emulated_stack(
    template_path: str | Path, *, endpoint: str | None, agent: str, server_key: str
) -> EmulatedStack:
    """The template's table, bucket, secret and worker made on ``endpoint`` (None: an
    embedded moto server, started here), as ``invoke`` and ``start-api`` run on them."""
    emulator = EmbeddedMoto().start() if endpoint is None else None
    where = emulator.endpoint_url if emulator is not None else str(endpoint)
    try:
        resources = provision(
            where, template_path=template_path, agent_loop=agent, server_key=server_key
        )
    except BaseException:
        if emulator is not None:
            emulator.stop()
        raise
    return EmulatedStack(where, resources, emulator)
