"""botocore's data cut to the kit's services (infra/botocore_data.py, built into the dependency
layer) and the kit's clients that read it alone (rollout_sdk/aws/clients.py).

The folder holds each kit service's files as botocore ships them (but the examples) and an
endpoint file that keeps every partition as it was and, in each, only the kit's services;
clients on it resolve every kit service in every partition exactly as on the full data; it is
read only by the botocore it was built from, and only by the kit's own session (boto3's default
session, an agent's, keeps all of botocore's data); a rollout runs on it.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, get_args

import boto3
import botocore
import botocore.exceptions
import botocore.loaders
import botocore.session
import pytest

from rollout_sdk.aws.clients import BOTOCORE_VERSION_FILE, OPERATIONS, AwsClients, Service
from rollout_sdk.local.invoke import invoke, load_event
from rollout_sdk.testing.standin import TrainGateStandIn

from .conftest import ROOT


def _script(name: str) -> Any:
    """A script of infra/ (a folder of scripts, not a package), imported from its file."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "infra" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


botocore_data = _script("botocore_data")

pytestmark = pytest.mark.timeout(120)

SOURCE = Path(botocore.__file__).resolve().parent
#: Built once per test process, from this environment's botocore (so its version matches).
TRIMMED = Path(tempfile.gettempdir()) / f"rollout-sdk-test-botocore-data-{os.getpid()}"
#: One region of each partition the kit may be deployed in.
REGIONS = ("us-east-1", "eu-central-1", "ap-southeast-2", "us-gov-west-1", "cn-north-1")


@pytest.fixture(scope="module")
def trimmed() -> Path:
    botocore_data.build(SOURCE, TRIMMED, botocore_data.kit_services())
    return TRIMMED


def test_the_trimmed_data_keeps_each_partition_and_only_the_kits_services(trimmed: Path) -> None:
    full = json.loads((SOURCE / "data" / "endpoints.json").read_text(encoding="utf-8"))
    cut = json.loads((trimmed / "endpoints.json").read_text(encoding="utf-8"))
    kept = set(get_args(Service)) | {"sts"}
    assert (trimmed / BOTOCORE_VERSION_FILE).read_text().strip() == botocore.__version__
    assert set(botocore_data.kit_services()) == kept
    assert len(cut["partitions"]) == len(full["partitions"])
    for whole, part in zip(full["partitions"], cut["partitions"], strict=True):
        assert {k: v for k, v in part.items() if k != "services"} == {
            k: v for k, v in whole.items() if k != "services"
        }
        assert set(part["services"]) == kept & set(whole["services"])
        assert all(part["services"][name] == whole["services"][name] for name in part["services"])
    full_size = (SOURCE / "data" / "endpoints.json").stat().st_size
    assert (trimmed / "endpoints.json").stat().st_size < full_size / 10


def _without_docs(shape: Any) -> Any:
    if isinstance(shape, dict):
        return {k: _without_docs(v) for k, v in shape.items() if k != "documentation"}
    return shape


def test_the_folder_holds_each_kit_service_cut_to_the_operations_the_kit_calls(
    trimmed: Path,
) -> None:
    folders = {p.name for p in trimmed.iterdir() if p.is_dir()}
    assert folders == set(get_args(Service)) | {"sts"}
    for service in folders:
        ours = {p.relative_to(trimmed): p for p in (trimmed / service).rglob("*") if p.is_file()}
        theirs = {
            p.relative_to(SOURCE / "data"): p
            for p in (SOURCE / "data" / service).rglob("*")
            if p.is_file() and p.name != "examples-1.json"
        }
        assert ours.keys() <= theirs.keys(), service  # old API versions may be left out
        if service not in OPERATIONS:  # STS, for the credential providers: whole
            assert ours.keys() == theirs.keys()
            assert all(ours[k].read_bytes() == theirs[k].read_bytes() for k in ours), service
            continue
        wanted = OPERATIONS[service]
        full = botocore.session.get_session().get_service_model(service)
        version = full.api_version
        for key, path in ours.items():
            if key.parts[1] == version and key.name.startswith(("endpoint-rule-set", "service-2")):
                continue
            if key.parts[1] == version:  # paginators and waiters: the kit's operations' only
                listing = json.loads(path.read_bytes())
                entries = listing.get("pagination") or listing.get("waiters") or {}
                assert all(e.get("operation", n) in wanted for n, e in entries.items()), key
            else:
                assert path.read_bytes() == theirs[key].read_bytes(), key
        model = json.loads(
            gzip.decompress((trimmed / service / version / "service-2.json.gz").read_bytes())
        )
        assert sorted(model["operations"]) == sorted(wanted), service
        whole = json.loads(
            gzip.decompress(
                (SOURCE / "data" / service / version / "service-2.json.gz").read_bytes()
            )
        )
        assert model["metadata"] == whole["metadata"]
        for name in wanted:  # each operation and every shape it reaches, as botocore has them
            assert model["operations"][name] == _without_docs(whole["operations"][name])
        for name, shape in model["shapes"].items():
            assert shape == _without_docs(whole["shapes"][name]), (service, name)
        # A client on the cut model: each kit operation's input and output as on the whole one.
        session = botocore.session.Session()
        session.register_component(
            "data_loader",
            botocore.loaders.Loader(
                extra_search_paths=[str(trimmed)], include_default_search_paths=False
            ),
        )
        cut = session.get_service_model(service)
        assert sorted(cut.operation_names) == sorted(wanted)
        for name in wanted:
            for side in ("input_shape", "output_shape"):
                ours_shape = getattr(cut.operation_model(name), side)
                their_shape = getattr(full.operation_model(name), side)
                assert (ours_shape is None) == (their_shape is None), (service, name, side)
                if ours_shape is not None:
                    assert list(ours_shape.members) == list(their_shape.members)
        assert (trimmed / service / version / "service-2.json.gz").stat().st_size < (
            SOURCE / "data" / service / version / "service-2.json.gz"
        ).stat().st_size
    top = {p.name for p in (SOURCE / "data").iterdir() if p.is_file()}
    assert {p.name for p in trimmed.iterdir() if p.is_file()} == top | {BOTOCORE_VERSION_FILE}


def test_an_operation_the_model_lacks_is_refused_by_name() -> None:
    whole = json.loads(
        gzip.decompress((SOURCE / "data" / "sqs" / "2012-11-05" / "service-2.json.gz").read_bytes())
    )
    with pytest.raises(KeyError, match="has no operation NoSuchOperation"):
        botocore_data.cut_model(whole, ("SendMessage", "NoSuchOperation"))


def test_the_cut_is_the_same_bytes_each_build(tmp_path: Path) -> None:
    botocore_data.build(SOURCE, tmp_path / "a", botocore_data.kit_services())
    botocore_data.build(SOURCE, tmp_path / "b", botocore_data.kit_services())
    files = sorted(
        p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file()
    )
    assert files and all(
        (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files
    )


def test_a_service_botocore_does_not_know_is_refused_by_name() -> None:
    full = json.loads((SOURCE / "data" / "endpoints.json").read_text(encoding="utf-8"))
    with pytest.raises(KeyError, match="no service nosuchservice"):
        botocore_data.trimmed(full, ("dynamodb", "nosuchservice"))


def test_the_script_says_what_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert botocore_data.main([str(SOURCE), str(tmp_path / "out")]) == 0
    assert f"botocore {botocore.__version__}: data of dynamodb," in capsys.readouterr().out
    assert botocore_data.main([str(tmp_path), str(tmp_path / "x")]) == 2  # no botocore there
    assert "no botocore with its data here" in capsys.readouterr().err


@pytest.mark.parametrize("region", REGIONS)
def test_every_kit_service_resolves_as_on_the_full_data(
    trimmed: Path, region: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", region)
    kit = AwsClients(botocore_data=trimmed)
    loader = kit.session._session.get_component("data_loader")
    # The folder, then boto3's own (its resource models, a few files); not botocore's.
    assert loader.search_paths == [str(trimmed), str(Path(boto3.__file__).parent / "data")]
    assert loader.list_available_services("service-2") == sorted({*get_args(Service), "sts"})
    full = boto3.Session()  # a session of its own, on botocore's whole data
    for service in get_args(Service):
        ours, theirs = (
            getattr(kit, "lambda_" if service == "lambda" else service),
            full.client(service, config=kit.config),
        )
        assert ours.meta.endpoint_url == theirs.meta.endpoint_url, (service, region)
        assert ours.meta.partition == theirs.meta.partition, (service, region)
        assert ours.meta.region_name == theirs.meta.region_name == region
        signer, full_signer = ours._request_signer, theirs._request_signer
        assert (signer.signing_name, signer.region_name) == (
            full_signer.signing_name,
            full_signer.region_name,
        ), (service, region)


def test_only_the_botocore_it_was_built_from_reads_it(
    tmp_path: Path, trimmed: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rollout_sdk.aws.clients")
    other = tmp_path / "other"
    botocore_data.build(SOURCE, other, ("dynamodb",))
    (other / BOTOCORE_VERSION_FILE).write_text("0.0.1\n")
    for folder in (other, tmp_path / "missing", None):
        clients = AwsClients(botocore_data=folder)
        assert clients.session is boto3.DEFAULT_SESSION  # botocore's own data, as before
    # The one that is there but for another botocore says so, and how to build it to match.
    said = [r.getMessage() for r in caplog.records if r.name == "rollout_sdk.aws.clients"]
    assert len(said) == 1, said
    assert f"is for botocore 0.0.1, and this runtime has botocore {botocore.__version__}" in said[0]
    assert f"build with LAMBDA_BOTOCORE={botocore.__version__}" in said[0]
    assert AwsClients(botocore_data=trimmed).session is not boto3.DEFAULT_SESSION


def test_the_default_session_keeps_every_service(trimmed: Path) -> None:
    kit = AwsClients(botocore_data=trimmed)
    kit.session.client("dynamodb")
    with pytest.raises(botocore.exceptions.UnknownServiceError):
        kit.session.client("athena")  # the kit's session knows the kit's services only
    # An agent's own client of a service the kit does not call still finds its endpoint.
    assert boto3.client("athena", region_name="eu-west-1").meta.endpoint_url == (
        "https://athena.eu-west-1.amazonaws.com"
    )


@pytest.mark.parametrize(
    "handler", [{"HAND_OFF": "direct", "ROLLOUT_SDK_BOTOCORE_DATA": str(TRIMMED)}], indirect=True
)
def test_a_rollout_runs_on_the_trimmed_data(
    trimmed: Path, handler: Any, standin: tuple[TrainGateStandIn, str]
) -> None:
    traingate, url = standin
    event = load_event(ROOT / "events" / "init.json")
    body = json.loads(event["body"])
    body.update(server_url=url, rollout_id="trimmed-data")
    event["body"] = json.dumps(body)
    accepted = invoke(handler, "ApiFunction", event, timeout_seconds=29)
    assert accepted.result["statusCode"] == 202
    ran = invoke(handler, "WorkerFunction", accepted.dispatched[0], timeout_seconds=900)
    assert ran.result["state"] == "DELIVERED"
    assert [r["status"] for r in traingate.completions["trimmed-data"]] == ["COMPLETED"]
    session = handler.runtime.clients.session
    assert session is not boto3.DEFAULT_SESSION
    assert session._session.get_component("data_loader").search_paths[0] == str(trimmed)
    assert str(SOURCE / "data") not in session._session.get_component("data_loader").search_paths
