"""The dependencies built once: one layer every function carries, as the SAM translator expands
template.yaml, and the Makefile recipes that build it apart from each function's code.

A changed layer must reach every function: SAM names the layer's version resource after its
content, so a new layer is a new LayerVersion whose ARN changes each function's ``Layers``, and
with ``AutoPublishAliasAllProperties`` that publishes a new version of every function (the alias
follows). An unchanged layer changes nothing. ``make package`` checks the built folders (the code
holds only the kit's and the agent's code; the budget is the code plus its layers).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rollout_sdk.stack import LambdaFunction
from testkit.artifact import CODE_ENTRIES, DEPENDENCIES_LAYER, Artifact, built_functions

from .conftest import ROOT
from .permissions import stack_named_by_ids as stack
from .test_permissions import translate

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def translated() -> Any:
    return translate()


def of_type(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def translate_with_layer_object(tmp_path: Path, key: str) -> dict[str, Any]:
    """template.yaml translated as if `sam package` had uploaded the layer as ``key``."""
    text = (ROOT / "template.yaml").read_text(encoding="utf-8")
    packaged, count = re.subn(
        r"(  DependenciesLayer:\n(?:    .*\n|\n)*?      ContentUri: )\.\n",
        rf"\1s3://layers/{key}\n",
        text,
    )
    assert count == 1, "the template's DependenciesLayer has no local ContentUri"
    path = tmp_path / f"template-{key}.yaml"
    path.write_text(packaged, encoding="utf-8")
    translated: dict[str, Any] = translate(template=path)
    return translated


@pytest.mark.parametrize("hand_off", ["direct", "queue"])
def test_every_function_carries_the_one_dependency_layer(translated: Any, hand_off: str) -> None:
    deployed = stack(translated, HandOff=hand_off, Architecture="arm64")
    layers = of_type(translated, "AWS::Lambda::LayerVersion")
    assert len(layers) == 1
    ((layer_id, layer),) = layers.items()
    assert layer_id.startswith(DEPENDENCIES_LAYER)
    functions = {
        k: deployed.value(v["Properties"])
        for k, v in of_type(translated, "AWS::Lambda::Function").items()
        if deployed.exists(k)
    }
    assert len(functions) == (6 if hand_off == "queue" else 4)
    properties = deployed.value(layer["Properties"])
    layer_arn = deployed.value({"Ref": layer_id})
    for name, function in functions.items():
        assert function["Layers"] == [layer_arn], name
        assert function["Runtime"] in properties["CompatibleRuntimes"], name
        assert function["Architectures"] == properties["CompatibleArchitectures"] == ["arm64"]
    # Named per stack (two stacks in one account do not share a layer), deleted when replaced.
    assert properties["LayerName"] == "rollout-sdk-permission-test-dependencies"
    assert layer["DeletionPolicy"] == "Delete"


def test_a_changed_layer_publishes_a_new_version_of_every_function(tmp_path: Path) -> None:
    # SAM's version logical ids hash the function's code and its properties as written (the
    # Ref to the layer, not the layer version it names): what changes is each version's
    # description, which names the layer version's number, and a new description replaces the
    # version (the alias moves to it), as for a parameter (test_snapstart.py).
    def versions(template: dict[str, Any]) -> dict[str, tuple[str, str]]:
        deployed = stack(template, HandOff="queue")
        return {
            v["Properties"]["FunctionName"]["Ref"]: (
                k,
                deployed.value(v["Properties"])["Description"],
            )
            for k, v in of_type(template, "AWS::Lambda::Version").items()
        }

    one = translate_with_layer_object(tmp_path, "one.zip")
    again = translate_with_layer_object(tmp_path, "one.zip")
    two = translate_with_layer_object(tmp_path, "two.zip")
    layer_ids = [set(of_type(t, "AWS::Lambda::LayerVersion")) for t in (one, again, two)]
    assert layer_ids[0] == layer_ids[1] != layer_ids[2]  # a new LayerVersion for new content
    assert versions(one) == versions(again)  # unchanged: nothing republished
    before, after = versions(one), versions(two)
    assert before.keys() == after.keys() and len(after) == len(LambdaFunction)
    for function, (_, description) in after.items():
        (layer_id,) = layer_ids[2]
        assert description.endswith(f" layer {layer_id}"), (function, description)
        assert description != before[function][1], function


# ---------------------------------------------------------------------- the built folders


def write_build(build_dir: Path, template: str, folders: dict[str, list[str]]) -> None:
    build_dir.mkdir()
    (build_dir / "template.yaml").write_text(template, encoding="utf-8")
    for folder, entries in folders.items():
        for entry in entries:
            path = build_dir / folder / entry
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("", encoding="utf-8")


BUILT = """\
Globals:
  Function:
    Layers:
    - Ref: DependenciesLayer
Resources:
  DependenciesLayer:
    Type: AWS::Serverless::LayerVersion
    Properties:
      ContentUri: DependenciesLayer
  ApiFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: ApiFunction
  Bare:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: Bare
      Layers: []
"""


def test_the_built_functions_are_read_with_the_layers_their_template_gives(
    tmp_path: Path,
) -> None:
    build_dir = tmp_path / "build"
    write_build(
        build_dir,
        BUILT,
        {
            "ApiFunction": ["handler.py", "rollout_sdk/__init__.py", "fastapi/__init__.py"],
            "Bare": ["handler.py"],
            "DependenciesLayer": ["python/fastapi/__init__.py"],
        },
    )
    api, bare = built_functions(build_dir)
    layer = build_dir / "DependenciesLayer"
    assert api == Artifact("ApiFunction", build_dir / "ApiFunction", (layer,))
    assert bare == Artifact("Bare", build_dir / "Bare", ())  # its own Layers win over Globals
    # Lambda's order: the code (/var/task), then each layer's python/ (/opt/python).
    assert api.path_entries == [build_dir / "ApiFunction", layer / "python"]
    assert api.python_path(Path("/b")).split(":") == [
        str(build_dir / "ApiFunction"),
        str(layer / "python"),
        "/b",
    ]
    assert api.holds("fastapi") and not bare.holds("fastapi")
    # A dependency in a function's own folder is a second copy: make package fails it.
    assert api.foreign_code_entries() == ["fastapi"]
    assert bare.foreign_code_entries() == []
    assert {"handler.py", "rollout_sdk"} <= CODE_ENTRIES


def test_nothing_built_reads_as_no_functions(tmp_path: Path) -> None:
    assert built_functions(tmp_path) == []


def test_the_makefile_builds_the_dependencies_into_the_layer_and_only_code_per_function() -> None:
    # make -n prints the recipes without running them: what each target would do.
    def recipe(target: str, **variables: str) -> str:
        done = subprocess.run(
            [
                "make",
                "-n",
                "--no-print-directory",
                target,
                "ARTIFACTS_DIR=/build/X",
                *(f"{k}={v}" for k, v in variables.items()),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout

    layer = recipe("build-DependenciesLayer")
    assert "pip install" in layer and '--target "/build/X/python"' in layer
    assert "requirements-lambda.txt" in layer and "-r requirements.txt" in layer
    assert "compileall" in layer and "requirements-mcp.txt" not in layer
    assert "requirements-mcp.txt" in recipe("build-DependenciesLayer", MCP_FOLDER="examples/m")
    # botocore's data: from the botocore the install brought, or from the runtime's version.
    assert 'botocore_data.py "/build/X/python/botocore" "/build/X/botocore-data"' in layer
    assert "pip download" not in layer
    pinned = recipe("build-DependenciesLayer", LAMBDA_BOTOCORE="1.40.0")
    assert '"botocore==1.40.0"' in pinned and "pip download" in pinned
    assert 'botocore_data.py "/build/X/.botocore/botocore" "/build/X/botocore-data"' in pinned
    for function in ("Api", "Worker", "WorkerFailure", "Redrive", "QueueWorker", "DeadLetter"):
        code = recipe(f"build-{function}Function")
        assert "pip install" not in code, function
        assert "cp handler.py" in code and "compileall" in code, function
    assert "examples/m/main.py" in recipe("build-ApiFunction", MCP_FOLDER="examples/m")
