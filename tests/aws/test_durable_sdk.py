"""What DurableWorker=true needs of a function's packages (rollout_sdk/aws/durable_sdk.py): the
durable execution SDK with the boto3 it asks for, and a Lambda client whose Invoke knows
DurableExecutionName. Each is refused with a message naming the layer that brings it."""

from __future__ import annotations

import gzip
import importlib.metadata
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import botocore
import botocore.loaders
import botocore.session
import pytest

from rollout_sdk.aws import durable_sdk
from rollout_sdk.aws.durable_sdk import (
    SDK_DISTRIBUTION,
    SDK_MODULE,
    boto3_floor,
    require_durable_invoke,
    version_tuple,
)
from rollout_sdk.errors import ConfigurationError
from testkit.aws import FAKE_AWS

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _fresh_check() -> Iterator[None]:
    durable_sdk.durable_sdk.cache_clear()
    yield
    durable_sdk.durable_sdk.cache_clear()


def test_versions_compare_as_numbers() -> None:
    assert version_tuple("1.43.114") == (1, 43, 114)
    assert version_tuple("1.44.8") > version_tuple("1.43.114")
    assert version_tuple("1.9.0") < version_tuple("1.10.0")
    assert version_tuple("2.0.0rc1") == (2, 0, 0)


def test_the_boto3_floor_is_read_from_the_sdk_metadata() -> None:
    assert boto3_floor(["boto3>=1.43.114"]) == "1.43.114"
    assert boto3_floor(["requests", "boto3 >= 1.2"]) == "1.2"
    assert boto3_floor(["boto3"]) is None
    assert boto3_floor(None) is None
    # The installed SDK names one, and the pinned boto3 meets it.
    floor = boto3_floor(importlib.metadata.requires(SDK_DISTRIBUTION))
    assert floor is not None
    assert version_tuple(boto3.__version__) >= version_tuple(floor)


def test_the_sdk_is_returned_when_it_imports_with_its_boto3() -> None:
    module = durable_sdk.durable_sdk()
    assert module.__name__ == SDK_MODULE
    assert callable(module.durable_execution)


def test_a_missing_sdk_is_refused_naming_the_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, SDK_MODULE, None)  # what an absent package imports as
    with pytest.raises(ConfigurationError, match=r"does not import.*DurableSdkLayer"):
        durable_sdk.durable_sdk()


def test_a_boto3_older_than_the_sdk_needs_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(boto3, "__version__", "1.35.0")
    with pytest.raises(ConfigurationError, match=r"boto3 here is 1\.35\.0.*needs .* or newer"):
        durable_sdk.durable_sdk()


def _lambda_client(data_path: Path | None = None) -> object:
    session = botocore.session.get_session()
    if data_path is not None:
        session.register_component(
            "data_loader", botocore.loaders.Loader(extra_search_paths=[str(data_path)])
        )
    return session.create_client(
        "lambda",
        region_name=FAKE_AWS["AWS_DEFAULT_REGION"],
        aws_access_key_id=FAKE_AWS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_AWS["AWS_SECRET_ACCESS_KEY"],
        endpoint_url="http://127.0.0.1:9",
    )


def test_a_lambda_client_that_names_executions_passes() -> None:
    require_durable_invoke(_lambda_client())


def _older_lambda_client(tmp_path: Path) -> object:
    """A real client on Lambda's model as an older botocore has it: Invoke without
    DurableExecutionName (botocore would refuse the parameter at the call)."""
    shipped = Path(botocore.__file__).parent / "data" / "lambda"
    version = sorted(p.name for p in shipped.iterdir() if (p / "service-2.json.gz").exists())[-1]
    target = tmp_path / "lambda" / version
    shutil.copytree(shipped / version, target)
    model_file = target / "service-2.json.gz"
    model = json.loads(gzip.decompress(model_file.read_bytes()))
    del model["shapes"]["InvocationRequest"]["members"]["DurableExecutionName"]
    model_file.write_bytes(gzip.compress(json.dumps(model).encode()))
    return _lambda_client(tmp_path)


def test_a_botocore_whose_invoke_lacks_the_execution_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"DurableExecutionName.*DurableSdkLayer"):
        require_durable_invoke(_older_lambda_client(tmp_path))


def test_the_api_refuses_to_hand_off_to_the_durable_worker_through_such_a_botocore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API's and the re-drive's dispatcher is built only on a client that can name the
    execution: a ConfigurationError naming the layer, before any rollout is accepted."""
    from examples.calculator.agent import agent_loop
    from rollout_sdk.aws.clients import AwsClients
    from rollout_sdk.aws.runtime import LambdaRuntime
    from rollout_sdk.settings import load_settings

    for name, value in FAKE_AWS.items():
        monkeypatch.setenv(name, value)
    settings = load_settings(
        aws={
            "AGENT_LOOP": "m:a",
            "TABLE_NAME": "t",
            "WORKER_FUNCTION_NAME": "durable-worker",
            "DURABLE_WORKER": "true",
            "CALLBACK_KEY_KMS_KEY_ID": "alias/k",
        }
    )
    runtime = LambdaRuntime(agent_loop, settings=settings, clients=AwsClients())
    try:
        with pytest.raises(ConfigurationError, match=r"DurableExecutionName.*DurableSdkLayer"):
            vars(runtime.clients)["lambda_"] = _older_lambda_client(tmp_path)
            _ = runtime.dispatcher
        vars(runtime.clients)["lambda_"] = _lambda_client()
        assert type(runtime.dispatcher).__name__ == "DurableLambdaDispatcher"
    finally:
        runtime.close()
