"""The per-rollout cost estimate (issue 12, item 2): time shares, the price table and its
overrides, docs/cost.md's formula, the botocore hooks, and the engine writing the figure at
finish into the final response and the full one into the record and the sink."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from rollout_sdk import prices
from rollout_sdk.aws import ledger as cost_ledger
from rollout_sdk.aws import metering
from rollout_sdk.aws.metering import Costs
from rollout_sdk.cost import meter as cost_meter
from rollout_sdk.cost.meter import Invocation
from rollout_sdk.cost.usage import CostEstimate, LambdaPart, Usage
from rollout_sdk.errors import ConfigurationError
from rollout_sdk.prices import PRICE_TABLE, PRICES_READ, UNITS, effective_prices
from rollout_sdk.protocol import RolloutResponse, RolloutStatus
from rollout_sdk.settings import load_settings
from testkit.cost import docs_usd


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def invocation(clock: Clock, **kw: Any) -> Invocation:
    defaults: dict[str, Any] = {
        "function": "worker",
        "hand_off": "direct",
        "memory_mb": 512,
        "architecture": "x86_64",
        "prices": effective_prices(),
    }
    return Invocation(**(defaults | kw), clock=clock)


# --------------------------------------------------------------------------- time shares


def test_a_batch_shares_the_invocation_and_the_shares_add_up_to_its_duration() -> None:
    clock = Clock()
    inv = invocation(clock, seats=3, init_seconds=0.9)
    seats = [inv.take_seat() for _ in range(3)]
    for seat, at in zip(seats, (1.0, 2.0, 4.0), strict=True):
        clock.now = 100.0 + at
        inv.leave(seat)
    shares = [inv.seconds(seat) for seat in seats]
    # 3 present for 1 s, then 2 for 1 s, then 1 for 2 s.
    assert shares == pytest.approx([1 / 3, 1 / 3 + 1 / 2, 1 / 3 + 1 / 2 + 2])
    assert sum(shares) == pytest.approx(4.0)
    assert inv.init_share == pytest.approx(0.3)  # the cold start's init, split over the batch
    assert inv.request_share == pytest.approx(1 / 3)
    clock.now += 10
    assert [inv.seconds(seat) for seat in seats] == shares  # left: nothing more charged


def test_a_re_drive_charges_each_rollout_only_while_it_works_on_it() -> None:
    clock = Clock()
    inv = invocation(clock, function="redrive", shares_request=False)
    clock.now = 101.0  # the pass's own start-up: no rollout's
    a = inv.take_seat()
    clock.now = 102.0
    b = inv.take_seat()
    clock.now = 104.0
    inv.leave(a)
    clock.now = 105.0
    inv.leave(b)
    assert inv.seconds(a) == pytest.approx(1 + 2 / 2)
    assert inv.seconds(b) == pytest.approx(2 / 2 + 1)
    assert inv.request_share == 0.0 and inv.init_share == 0.0  # the schedule's fixed cost


def test_seats_no_rollout_took_stop_sharing_when_the_handler_returns() -> None:
    clock = Clock()
    inv = invocation(clock, seats=2)
    only = inv.take_seat()
    clock.now = 102.0
    inv.close()  # the other message was malformed: no rollout for it
    clock.now = 104.0
    assert inv.seconds(only) == pytest.approx(2 / 2 + 2)


def test_only_the_first_invocation_of_an_environment_carries_the_init() -> None:
    costs = Costs(hand_off="direct", memory_mb=512, architecture="arm64", init_seconds=1.2)
    with costs.invocation("worker", seats=1) as first, cost_meter.rollout() as meter:
        assert meter is not None
        (part,) = meter.usage().functions.values()
        assert part.init_seconds == pytest.approx(1.2)
        assert (part.memory_mb, part.architecture) == (512, "arm64")
    with costs.invocation("worker", seats=1) as second:
        assert second.init_share == 0.0
    assert first.init_share == pytest.approx(1.2)


def test_outside_an_invocation_nothing_is_metered() -> None:
    with cost_meter.rollout() as meter:
        assert meter is None
        assert cost_meter.carried() is None
        response = RolloutResponse(rollout_id="r", status=RolloutStatus.COMPLETED)
        assert cost_ledger.with_estimate(response) is response


# --------------------------------------------------------------------------- prices


def test_every_price_names_its_page_and_what_it_was_checked_against() -> None:
    for name, price in PRICE_TABLE.items():
        assert price.usd > 0, name
        assert price.page.startswith("https://aws.amazon.com/"), name
        assert price.checked, name
    assert set(UNITS) <= set(PRICE_TABLE)
    assert {f"lambda_gb_second_{arch}" for arch in prices.ARCHITECTURES} <= set(PRICE_TABLE)


def test_prices_are_overridden_by_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUT_SDK_PRICES", '{"lambda_request": 3e-7, "kms_request": 0}')
    settings = load_settings()
    assert settings.kit.price_overrides() == {"lambda_request": 3e-7, "kms_request": 0.0}
    costs = Costs.for_lambda(settings, init_seconds=0.0)
    assert costs.prices["lambda_request"] == 3e-7
    assert costs.prices["kms_request"] == 0.0
    assert costs.prices["sqs_request"] == PRICE_TABLE["sqs_request"].usd
    assert costs.prices_label == PRICES_READ + "+overrides"


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ('{"lambda_requests": 2e-7}', "'lambda_requests'"),  # a misspelt name
        ('{"kms_request": -0.001}', "'kms_request' must not be negative"),
        ('{"sqs_request": "cheap"}', "'sqs_request' must be a number"),
        ('{"sqs_request": true}', "'sqs_request' must be a number"),
        ("[1, 2]", "JSON object"),
        ("{not json", "JSON object"),
    ],
)
def test_bad_overrides_are_refused_naming_the_key(
    monkeypatch: pytest.MonkeyPatch, value: str, named: str
) -> None:
    monkeypatch.setenv("ROLLOUT_SDK_PRICES", value)
    with pytest.raises(ConfigurationError) as refused:
        load_settings()
    assert "ROLLOUT_SDK_PRICES" in str(refused.value)
    assert named in str(refused.value)


# --------------------------------------------------------------------------- the formula


def _usage() -> Usage:
    usage = Usage(
        functions={
            "api": LambdaPart(0.061234567, 1.25, 512, "x86_64", 1),
            "queue-worker": LambdaPart(3.3333333, 0.09, 1024, "arm64", 10),
            "redrive": LambdaPart(0.2, 0.0, 512, "x86_64", 1),
        },
        dynamodb_calls=7,
        dynamodb_units_assumed=2,
    )
    usage.units.update(
        lambda_request=1.1,
        http_api_request=3,
        dynamodb_write_unit=11,
        dynamodb_read_unit=1.5,
        sqs_request=1.2,
        kms_request=4,
        s3_put_request=2,
        s3_get_request=1,
    )
    return usage


@pytest.mark.parametrize("overrides", [{}, {"lambda_gb_second_arm64": 2e-5, "kms_request": 0.0}])
def test_the_estimate_is_docs_cost_md_s_formula(overrides: dict[str, float]) -> None:
    prices = effective_prices(overrides)
    estimate = CostEstimate.of(
        _usage(),
        prices=prices,
        prices_label=PRICES_READ,
        at="delivery",
        function="redrive",
        hand_off="queue",
    )
    figures = estimate.to_json()
    assert figures["usd"] == pytest.approx(docs_usd(figures, prices), rel=1e-12)
    # The formula by hand, for these inputs: Lambda GB-seconds by architecture, then units.
    by_hand = (
        (0.061235 + 1.25) * 0.5 * prices["lambda_gb_second_x86_64"]
        + (3.333333 + 0.09) * 1.0 * prices["lambda_gb_second_arm64"]
        + 0.2 * 0.5 * prices["lambda_gb_second_x86_64"]
        + 1.1 * prices["lambda_request"]
        + 3 * prices["http_api_request"]
        + 11 * prices["dynamodb_write_unit"]
        + 1.5 * prices["dynamodb_read_unit"]
        + 1.2 * prices["sqs_request"]
        + 4 * prices["kms_request"]
        + 2 * prices["s3_put_request"]
        + 1 * prices["s3_get_request"]
    )
    assert figures["usd"] == pytest.approx(by_hand, rel=1e-12)
    # The record's compact form reads back as the same usage, at the same price.
    compact = estimate.to_json(compact=True)
    assert Usage.from_json(compact).to_json() == Usage.from_json(figures).to_json()
    assert docs_usd(compact, prices) == pytest.approx(figures["usd"], rel=1e-12)


def test_a_malformed_carried_cost_is_left_out() -> None:
    costs = Costs(hand_off="direct", memory_mb=512, architecture="x86_64")
    with costs.invocation("worker", seats=1), cost_meter.rollout() as meter:
        assert meter is not None
        meter.carry({"lambda": {"api": {"seconds": -1}}})
        meter.carry({"lambda": {"api": {"architecture": "sparc"}}})
        meter.carry("nonsense")
        usage = meter.usage()
    assert set(usage.functions) == {"worker"}


def test_an_invocations_own_part_leaves_out_what_it_carried_in() -> None:
    """What a durable invocation records at its suspension for the next ones to carry."""
    costs = Costs(hand_off="direct", memory_mb=512, architecture="x86_64")
    with costs.invocation("durable-worker", seats=1), cost_meter.rollout() as meter:
        assert meter is not None
        meter.carry(
            {
                "lambda": {"api": {"seconds": 0.2, "memory_mb": 512}},
                "units": {"lambda_request": 1, "dynamodb_write_unit": 4},
                "dynamodb": {"calls": 2, "units_assumed": 0},
            }
        )
        meter.add("kms_request", 1)
        meter.add_dynamodb(read=0.5, write=1, assumed=False)
        own = meter.own()
        whole = meter.usage()
    assert set(own.functions) == {"durable-worker"}
    assert own.units["lambda_request"] == 1  # this invocation's request, not the API's
    assert own.units["dynamodb_write_unit"] == 1 and own.units["kms_request"] == 1
    assert own.units["dynamodb_read_unit"] == 0.5 and own.dynamodb_calls == 1
    assert whole.units["dynamodb_write_unit"] == 5 and whole.units["lambda_request"] == 2
    # Carried into the next invocation's meter, it adds up as the two did here.
    with costs.invocation("durable-worker", seats=1), cost_meter.rollout() as later:
        assert later is not None
        later.carry(own.to_json(compact=True))
        assert later.usage().units["lambda_request"] == 2
        assert later.usage().units["dynamodb_write_unit"] == 1


def test_http_api_requests_are_metered_in_512_kb_increments() -> None:
    assert metering.http_api_requests({"body": "{}", "headers": {"a": "b"}}) == 1
    assert metering.http_api_requests({"body": "x" * (512 * 1024)}) == 1
    assert metering.http_api_requests({"body": "x" * (512 * 1024 + 1)}) == 2
    assert metering.http_api_requests({"body": "x" * (2 * 512 * 1024 + 1)}) == 3
    assert metering.http_api_requests(None) == 1


# --------------------------------------------------------------------------- botocore hooks


@pytest.fixture
def dynamodb() -> Iterator[tuple[Any, Stubber, list[dict[str, Any]]]]:
    client = metering.instrument(
        boto3.client(
            "dynamodb",
            region_name="us-east-1",
            aws_access_key_id="k",
            aws_secret_access_key="s",
        )
    )
    sent: list[dict[str, Any]] = []
    # What is sent, after every hook changed the parameters (the stub answers before-call).
    client.meta.events.register(
        "before-parameter-build.dynamodb", lambda params, **_: sent.append(dict(params))
    )
    with Stubber(client) as stubber:
        yield client, stubber, sent


def _update(client: Any) -> None:
    client.update_item(TableName="t", Key={"pk": {"S": "a"}}, UpdateExpression="SET x = :x")


def test_dynamodb_units_are_what_dynamodb_reports_else_the_request_s_minimum(
    dynamodb: tuple[Any, Stubber, list[dict[str, Any]]],
) -> None:
    client, stubber, sent = dynamodb
    stubber.add_response("update_item", {"ConsumedCapacity": {"CapacityUnits": 3.0}})
    stubber.add_response("update_item", {})
    stubber.add_response("transact_write_items", {})
    stubber.add_response("get_item", {"ConsumedCapacity": {"CapacityUnits": 1.0}})
    stubber.add_client_error("update_item", "ConditionalCheckFailedException")
    stubber.add_client_error("update_item", "ProvisionedThroughputExceededException")
    costs = Costs(hand_off="direct", memory_mb=512, architecture="x86_64")
    with costs.invocation("worker", seats=1), cost_meter.rollout() as meter:
        assert meter is not None
        _update(client)
        _update(client)
        put = {"Put": {"TableName": "t", "Item": {"pk": {"S": "a"}}}}
        client.transact_write_items(TransactItems=[put, put])
        client.get_item(TableName="t", Key={"pk": {"S": "a"}}, ConsistentRead=True)
        for _ in range(2):
            with pytest.raises(client.exceptions.ClientError):
                _update(client)
        usage = meter.usage()
    # 3 reported; 1 and 2 x 2 the minimum of an answer without units; 1 read reported; a
    # failed conditional write billed its minimum; a throttled one not at all.
    assert usage.units["dynamodb_write_unit"] == pytest.approx(3 + 1 + 4 + 1)
    assert usage.units["dynamodb_read_unit"] == pytest.approx(1.0)
    assert (usage.dynamodb_calls, usage.dynamodb_units_assumed) == (5, 3)
    assert all(body.get("ReturnConsumedCapacity") == "TOTAL" for body in sent)


def test_without_a_meter_the_hooks_change_nothing(
    dynamodb: tuple[Any, Stubber, list[dict[str, Any]]],
) -> None:
    client, stubber, sent = dynamodb
    stubber.add_response("update_item", {})
    _update(client)
    assert "ReturnConsumedCapacity" not in sent[0]
