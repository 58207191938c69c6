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
from testkit.artifact import (
    CODE_ENTRIES,
    DEPENDENCIES_LAYER,
    DURABLE_SDK_LAYER,
    Artifact,
    built_functions,
)

from .conftest import ROOT
from .permissions import stack_named_by_ids as stack
from .test_permissions import translate

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def translated() -> Any:
    return translate()


def of_type(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def translate_with_layer_object(
    tmp_path: Path, key: str, layer: str = DEPENDENCIES_LAYER
) -> dict[str, Any]:
    """template.yaml translated as if `sam package` had uploaded ``layer`` as ``key``."""
    text = (ROOT / "template.yaml").read_text(encoding="utf-8")
    packaged, count = re.subn(
        rf"(  {layer}:\n(?:    .*\n|\n)*?      ContentUri: )\.\n",
        rf"\1s3://layers/{key}\n",
        text,
    )
    assert count == 1, f"the template's {layer} has no local ContentUri"
    path = tmp_path / f"template-{layer}-{key}.yaml"
    path.write_text(packaged, encoding="utf-8")
    translated: dict[str, Any] = translate(template=path)
    return translated


#: DurableWorker=true: the functions that carry the DurableSdkLayer after the dependency layer
#: (the durable worker runs the SDK; the API and the re-drive start its executions).
DURABLE_SDK_CARRIERS = {"DurableWorkerFunction", "ApiFunction", "RedriveFunction"}


@pytest.mark.parametrize(
    ("parameters", "count"),
    [({"HandOff": "direct"}, 4), ({"HandOff": "queue"}, 6), ({"DurableWorker": "true"}, 5)],
)
def test_every_function_carries_the_one_dependency_layer(
    translated: Any, parameters: dict[str, str], count: int
) -> None:
    deployed = stack(translated, **parameters, Architecture="arm64")
    durable = parameters.get("DurableWorker") == "true"
    layers = {
        k: v
        for k, v in of_type(translated, "AWS::Lambda::LayerVersion").items()
        if deployed.exists(k)
    }
    assert sorted(k.rstrip("0123456789abcdef") for k in layers) == (
        [DEPENDENCIES_LAYER, DURABLE_SDK_LAYER] if durable else [DEPENDENCIES_LAYER]
    )
    arns = {k.rstrip("0123456789abcdef"): deployed.value({"Ref": k}) for k in layers}
    functions = {
        k: deployed.value(v["Properties"])
        for k, v in of_type(translated, "AWS::Lambda::Function").items()
        if deployed.exists(k)
    }
    assert len(functions) == count
    for layer_id, layer in layers.items():
        properties = deployed.value(layer["Properties"])
        for name, function in functions.items():
            assert function["Runtime"] in properties["CompatibleRuntimes"], name
            assert function["Architectures"] == properties["CompatibleArchitectures"] == ["arm64"]
        # Named per stack (two stacks in one account do not share a layer), deleted when
        # replaced.
        suffix = "dependencies" if layer_id.startswith(DEPENDENCIES_LAYER) else "durable-sdk"
        assert properties["LayerName"] == f"rollout-sdk-permission-test-{suffix}"
        assert layer["DeletionPolicy"] == "Delete"
    for name, function in functions.items():
        expected = [arns[DEPENDENCIES_LAYER]]
        if durable and name in DURABLE_SDK_CARRIERS:
            expected.append(arns[DURABLE_SDK_LAYER])  # after it: Lambda's order, SAM's too
        assert function["Layers"] == expected, name


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
    layer_ids = [
        {k for k in of_type(t, "AWS::Lambda::LayerVersion") if k.startswith(DEPENDENCIES_LAYER)}
        for t in (one, again, two)
    ]
    assert layer_ids[0] == layer_ids[1] != layer_ids[2]  # a new LayerVersion for new content
    assert versions(one) == versions(again)  # unchanged: nothing republished
    before, after = versions(one), versions(two)
    assert before.keys() == after.keys() and len(after) == len(LambdaFunction)
    for function, (_, description) in after.items():
        (layer_id,) = layer_ids[2]
        assert f" layer {layer_id}" in description, (function, description)
        assert description != before[function][1], function


def test_a_changed_durable_sdk_layer_publishes_a_new_version_of_each_function_carrying_it(
    tmp_path: Path,
) -> None:
    def descriptions(template: dict[str, Any]) -> dict[str, str]:
        deployed = stack(template, DurableWorker="true")
        return {
            v["Properties"]["FunctionName"]["Ref"]: deployed.value(v["Properties"])["Description"]
            for k, v in of_type(template, "AWS::Lambda::Version").items()
            if deployed.exists(k)
        }

    one = descriptions(translate_with_layer_object(tmp_path, "one.zip", DURABLE_SDK_LAYER))
    two = descriptions(translate_with_layer_object(tmp_path, "two.zip", DURABLE_SDK_LAYER))
    changed = {function for function in one if one[function] != two[function]}
    assert changed == DURABLE_SDK_CARRIERS


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
Parameters:
  DurableWorker:
    Type: String
    Default: "false"
Conditions:
  UseDurableWorker: !Equals [!Ref DurableWorker, "true"]
Globals:
  Function:
    Layers:
    - Ref: DependenciesLayer
Resources:
  DependenciesLayer:
    Type: AWS::Serverless::LayerVersion
    Properties:
      ContentUri: DependenciesLayer
  DurableSdkLayer:
    Type: AWS::Serverless::LayerVersion
    Condition: UseDurableWorker
    Properties:
      ContentUri: DurableSdkLayer
  ApiFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: ApiFunction
      Layers:
      - !If [UseDurableWorker, !Ref DurableSdkLayer, !Ref AWS::NoValue]
  Durable:
    Type: AWS::Serverless::Function
    Condition: UseDurableWorker
    Properties:
      CodeUri: Durable
      Layers:
      - Ref: DurableSdkLayer
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
            "Durable": ["handler.py"],
            "DependenciesLayer": ["python/fastapi/__init__.py"],
            "DurableSdkLayer": ["python/boto3/__init__.py"],
        },
    )
    layer = build_dir / "DependenciesLayer"
    durable_layer = build_dir / "DurableSdkLayer"
    # At the parameters' defaults: the durable function is not deployed, the If drops the layer.
    (api,) = built_functions(build_dir)
    assert api == Artifact("ApiFunction", build_dir / "ApiFunction", (layer,))
    # SAM adds a function's own Layers after the Globals' ones.
    api, durable = built_functions(build_dir, {"DurableWorker": "true"})
    assert api == Artifact("ApiFunction", build_dir / "ApiFunction", (layer, durable_layer))
    assert durable == Artifact("Durable", build_dir / "Durable", (layer, durable_layer))
    with pytest.raises(KeyError, match="no parameters"):
        built_functions(build_dir, {"Nope": "1"})
    # Lambda's order: the code (/var/task), then each layer's python/ (/opt/python).
    assert api.path_entries == [
        build_dir / "ApiFunction",
        layer / "python",
        durable_layer / "python",
    ]
    assert api.python_path(Path("/b")).split(":") == [
        str(build_dir / "ApiFunction"),
        str(layer / "python"),
        str(durable_layer / "python"),
        "/b",
    ]
    assert api.holds("fastapi") and durable.holds("boto3") and not durable.holds("pydantic")
    # A dependency in a function's own folder is a second copy: make package fails it.
    assert api.foreign_code_entries() == ["fastapi"]
    assert durable.foreign_code_entries() == []
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
    # The durable worker's layer: the SDK with the boto3 and botocore it needs, the runtime's
    # urllib3, dateutil and six left out, botocore's documentation examples dropped.
    durable = recipe("build-DurableSdkLayer")
    assert "requirements-durable.txt" in durable and "requirements-lambda.txt" not in durable
    assert 'rm -rf "/build/X/python"/urllib3' in durable and "examples-1.json" in durable
    assert "compileall" in durable
    wanted = (ROOT / "infra" / "requirements-durable.txt").read_text(encoding="utf-8").split()
    assert {"aws-durable-execution-sdk-python", "boto3", "botocore"} <= set(wanted)
    functions = ("Api", "Worker", "DurableWorker", "WorkerFailure", "Redrive", "QueueWorker")
    for function in (*functions, "DeadLetter"):
        code = recipe(f"build-{function}Function")
        assert "pip install" not in code, function
        assert "cp handler.py" in code and "compileall" in code, function
    assert "examples/m/main.py" in recipe("build-ApiFunction", MCP_FOLDER="examples/m")
