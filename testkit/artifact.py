"""A Lambda function's artifact as `sam build` makes it: the function's own code, and the layers
it carries (the dependencies, built once into ``DependenciesLayer``).

On Lambda the code is ``/var/task`` and each layer is unpacked into ``/opt``, whose ``python/``
folder is on the runtime's path after the code; here the same folders go on ``PYTHONPATH`` in
that order (:meth:`Artifact.python_path`), before the runtime's own boto3, and a variable that
names a path under ``/opt`` (the template's ``ROLLOUT_SDK_BOTOCORE_DATA``) names it in the
layer's folder (:meth:`Artifact.environment`).

The layers of a function are read from the template ``sam build`` wrote beside the artifacts
(the ``Globals`` ones, then its own ``Layers``, as SAM adds them, each a ``Ref`` to a layer of
the template, conditions resolved under the parameters given), so what is measured is what the
template deploys.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit import REPO_ROOT

#: The layer every function carries (template.yaml, the Makefile's build-DependenciesLayer).
DEPENDENCIES_LAYER = "DependenciesLayer"
#: DurableWorker=true: the durable execution SDK with its boto3 and botocore, carried by the
#: durable worker and the functions that start its executions (build-DurableSdkLayer).
DURABLE_SDK_LAYER = "DurableSdkLayer"
#: Where a Python layer keeps its packages (what Lambda puts on the path, as /opt/python).
LAYER_SITE = "python"
#: What a function's own artifact may hold at its top level: the kit's code and the agent's
#: (AGENT_SOURCES at its default); anything else would be a second copy of a dependency.
CODE_ENTRIES = frozenset({"handler.py", "rollout_sdk", "examples", "__pycache__"})

FUNCTION = "AWS::Serverless::Function"
LAYER = "AWS::Serverless::LayerVersion"


@dataclass(frozen=True)
class Artifact:
    """One function's code folder and its layers' folders."""

    name: str
    code: Path
    layers: tuple[Path, ...]

    @property
    def path_entries(self) -> list[Path]:
        """What Lambda puts on the path for it, in order: the code, then each layer's python/."""
        return [self.code, *(layer / LAYER_SITE for layer in self.layers)]

    def python_path(self, *after: Path) -> str:
        """``PYTHONPATH`` for a process run as Lambda runs the function, then ``after``."""
        return os.pathsep.join(str(p) for p in [*self.path_entries, *after])

    def at_opt(self, value: str) -> str:
        """``value`` with a leading ``/opt/`` (where Lambda unpacks the layers) pointed at the
        first layer folder here that holds the rest of it; any other value as it is."""
        if not value.startswith("/opt/"):
            return value
        rest = value.removeprefix("/opt/")
        for layer in self.layers:
            if (layer / rest).exists():
                return str(layer / rest)
        return value

    def environment(self, variables: Mapping[str, str]) -> dict[str, str]:
        """A function's ``variables`` as they read here: each ``/opt/`` path at its layer."""
        return {name: self.at_opt(value) for name, value in variables.items()}

    def holds(self, name: str) -> bool:
        """Whether the code or a layer holds the top-level entry ``name``."""
        return any((entry / name).exists() for entry in self.path_entries)

    def foreign_code_entries(self) -> list[str]:
        """Top-level entries of the code folder that are not the kit's or the agent's code."""
        return sorted(p.name for p in self.code.iterdir() if p.name not in CODE_ENTRIES)


def _resources(template: Mapping[str, Any]) -> dict[str, Any]:
    resources: dict[str, Any] = template.get("Resources") or {}
    return resources


def _conditions(template: Mapping[str, Any], parameters: Mapping[str, str]) -> dict[str, bool]:
    """Each of the template's conditions under ``parameters`` (the others at their defaults):
    the subset of CloudFormation's condition functions the template uses (Equals of a
    parameter and a literal, Not, And, Or, Condition)."""
    declared: Mapping[str, Any] = template.get("Parameters") or {}
    unknown = set(parameters) - set(declared)
    if unknown:
        raise KeyError(f"the template has no parameters {sorted(unknown)}")
    values = {
        name: str(parameters.get(name, spec.get("Default", ""))) for name, spec in declared.items()
    }
    definitions: Mapping[str, Any] = template.get("Conditions") or {}
    found: dict[str, bool] = {}

    def operand(node: Any) -> str:
        if isinstance(node, Mapping) and set(node) == {"Ref"}:
            return values[node["Ref"]]
        return str(node)

    def test(node: Any) -> bool:
        ((fn, args),) = node.items()
        if fn == "Fn::Equals":
            return operand(args[0]) == operand(args[1])
        if fn == "Fn::Not":
            return not test(args[0])
        if fn == "Fn::And":
            return all(test(a) for a in args)
        if fn == "Fn::Or":
            return any(test(a) for a in args)
        if fn == "Condition":
            return condition(args)
        raise ValueError(f"cannot evaluate the condition {node!r}")

    def condition(name: str) -> bool:
        if name not in found:
            found[name] = test(definitions[name])
        return found[name]

    for name in definitions:
        condition(name)
    return found


def _layer_refs(
    template: Mapping[str, Any], function: str, conditions: Mapping[str, bool]
) -> list[str]:
    """The layers ``function`` carries, as SAM gives them: the Globals' list, then the
    function's own (SAM adds lists), each ``Fn::If`` item resolved and ``AWS::NoValue`` gone."""
    properties = _resources(template)[function].get("Properties") or {}
    entries = [
        *(((template.get("Globals") or {}).get("Function") or {}).get("Layers") or []),
        *(properties.get("Layers") or []),
    ]
    refs = []
    for entry in entries:
        chosen = entry
        while isinstance(chosen, dict) and "Fn::If" in chosen:
            name, when_true, when_false = chosen["Fn::If"]
            chosen = when_true if conditions[name] else when_false
        if isinstance(chosen, dict) and "Ref" in chosen and chosen["Ref"] != "AWS::NoValue":
            refs.append(chosen["Ref"])
    return refs


def built_functions(build_dir: Path, parameters: Mapping[str, str] | None = None) -> list[Artifact]:
    """Every function ``sam build`` wrote into ``build_dir`` that the stack has under the
    template ``parameters`` (a function whose ``Condition`` is false is left out), with its
    layers (from the template it wrote there); empty when nothing was built."""
    from rollout_sdk.local.emulator import load_template

    built_template = build_dir / "template.yaml"
    if not built_template.exists():
        return []
    template = load_template(built_template)
    conditions = _conditions(template, parameters or {})
    resources = _resources(template)
    artifacts = []
    for name, resource in sorted(resources.items()):
        if resource.get("Type") != FUNCTION or not (build_dir / name).is_dir():
            continue
        if "Condition" in resource and not conditions[resource["Condition"]]:
            continue
        layers = []
        for ref in _layer_refs(template, name, conditions):
            layer = resources.get(ref) or {}
            if layer.get("Type") == LAYER:
                layers.append(build_dir / str((layer.get("Properties") or {})["ContentUri"]))
        artifacts.append(Artifact(name, build_dir / name, tuple(layers)))
    return artifacts


def make_artifact(
    target: Path,
    function: str,
    *,
    variables: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 900,
) -> Artifact:
    """Build ``function``'s code into ``target/<function>`` and the dependency layer into
    ``target/DependenciesLayer`` with the Makefile's own recipes (what `sam build` runs, without
    SAM); ``variables`` are make's (``MCP_FOLDER``, ``LAMBDA_PYTHON``, ``PYTHON``).
    CalledProcessError (its stderr captured) when a recipe fails."""
    artifact = Artifact(function, target / function, (target / DEPENDENCIES_LAYER,))
    for name, folder in ((DEPENDENCIES_LAYER, artifact.layers[0]), (function, artifact.code)):
        subprocess.run(  # noqa: S603 - a fixed argv list, no shell
            [  # noqa: S607 - make from PATH, as `sam build` runs it
                "make",
                "--no-print-directory",
                f"build-{name}",
                f"ARTIFACTS_DIR={folder}",
                *(f"{key}={value}" for key, value in (variables or {}).items()),
            ],
            cwd=REPO_ROOT,
            env=None if env is None else dict(env),
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    return artifact
