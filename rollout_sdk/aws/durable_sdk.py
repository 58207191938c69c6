"""What ``DurableWorker=true`` needs of the function's packages, checked before it is relied on.

Two needs, each refused with a message that names the fix rather than failing later inside
botocore or the SDK:

- the durable worker imports AWS's durable execution SDK, and the SDK's checkpoint calls need
  the boto3 its package metadata asks for (``Requires-Dist: boto3>=...``);
- every function that starts an execution (the API and re-drive functions) needs a Lambda
  client whose ``Invoke`` knows ``DurableExecutionName``: botocore validates a call's
  parameters against its own model, so an older one refuses the field.

On Lambda both come from template.yaml's ``DurableSdkLayer`` (the Makefile's
build-DurableSdkLayer), which ships the SDK with boto3 and botocore and which those three
functions carry when ``DurableWorker`` is true; the Lambda runtime's own boto3 differs by
region and runtime update, so the kit does not rely on it.
"""

from __future__ import annotations

import importlib.metadata
import re
from functools import cache
from typing import TYPE_CHECKING, Any

from rollout_sdk.errors import ConfigurationError

if TYPE_CHECKING:
    from types import ModuleType

#: The SDK's distribution and import names.
SDK_DISTRIBUTION = "aws-durable-execution-sdk-python"
SDK_MODULE = "aws_durable_execution_sdk_python"
#: Where the fix is: the layer that ships the SDK with its boto3.
FIX = (
    "the function needs template.yaml's DurableSdkLayer (built by `sam build`, the Makefile's "
    "build-DurableSdkLayer, from infra/requirements-durable.txt)"
)
_FLOOR = re.compile(r"^boto3\s*>=\s*([0-9][0-9.]*)")


def version_tuple(version: str) -> tuple[int, ...]:
    """``"1.43.114"`` as ``(1, 43, 114)``; a non-numeric tail (``rc1``) ends the tuple."""
    parts: list[int] = []
    for piece in version.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.group() != piece:
            break
    return tuple(parts)


def boto3_floor(requirements: list[str] | None) -> str | None:
    """The lowest boto3 the SDK's requirements name (``boto3>=X``), or None without one."""
    for requirement in requirements or ():
        match = _FLOOR.match(requirement.strip())
        if match:
            return match.group(1).rstrip(".")
    return None


@cache
def durable_sdk() -> ModuleType:
    """The durable execution SDK, once it is known to import and to have the boto3 it needs;
    ConfigurationError naming the fix otherwise."""
    try:
        module = importlib.import_module(SDK_MODULE)
    except ImportError as exc:
        raise ConfigurationError(
            f"DURABLE_WORKER is true but the durable execution SDK ({SDK_MODULE}) does not "
            f"import here ({exc}): {FIX}"
        ) from exc
    import boto3

    try:
        floor = boto3_floor(importlib.metadata.requires(SDK_DISTRIBUTION))
    except importlib.metadata.PackageNotFoundError:
        floor = None  # no metadata shipped: nothing to compare against
    if floor is not None and version_tuple(boto3.__version__) < version_tuple(floor):
        raise ConfigurationError(
            f"DURABLE_WORKER is true but boto3 here is {boto3.__version__} (from "
            f"{boto3.__file__}); the durable execution SDK needs {floor} or newer: {FIX}"
        )
    return module


def require_durable_invoke(client: Any) -> None:
    """ConfigurationError unless ``client`` (a Lambda client) can start a named durable
    execution: its model's ``Invoke`` takes ``DurableExecutionName``."""
    members = client.meta.service_model.operation_model("Invoke").input_shape.members
    if "DurableExecutionName" not in members:
        import botocore

        raise ConfigurationError(
            f"DURABLE_WORKER is true but botocore here ({botocore.__version__}) does not know "
            f"Lambda's Invoke parameter DurableExecutionName, which starts the rollout's "
            f"durable execution: {FIX}"
        )
