"""The price table the cost estimate multiplies by: AWS's published prices, where each was read
and checked, and ``ROLLOUT_SDK_PRICES``' overrides of them.

A leaf (the standard library only), so that the settings can check an override without
loading the estimate (:mod:`rollout_sdk.cost`), and ``bench/cost.py`` and docs/cost.md
read the same figures.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

#: When every price below was read (the search tools' stored copies of the pages named).
PRICES_READ = "2026-12-01"

LAMBDA_PAGE = "https://aws.amazon.com/lambda/pricing/"
API_GATEWAY_PAGE = "https://aws.amazon.com/api-gateway/pricing/"
DYNAMODB_PAGE = "https://aws.amazon.com/dynamodb/pricing/on-demand/"
SQS_PAGE = "https://aws.amazon.com/sqs/pricing/"
KMS_PAGE = "https://aws.amazon.com/kms/pricing/"
S3_PAGE = "https://aws.amazon.com/s3/pricing/"
CLOUDWATCH_PAGE = "https://aws.amazon.com/cloudwatch/pricing/"


#: A month as AWS's pricing examples count one for storage: 730 hours.
MONTH_SECONDS = 730 * 3600
#: A GB of storage or data as AWS's storage prices count it: 2**30 bytes.
GIB = 2**30
#: Where the durable functions' three prices were checked (on 2026-12-04): the stored text of
#: the Lambda page draws them by script too.
DURABLE_CHECKED = (
    "read 2026-12-04 from summaries of the page only: $8.00 per million operations "
    "(api-evangelist's transcription of the page, 2026-09-20, and two 2026 write-ups), $0.25 "
    "per GB written and $0.15 per GB-month retained (a 2026 research note citing the page); "
    "together they reproduce the page's worked example as a second summary gives it ($490.46 a "
    "month: 4M operations, 104 GB written, 72.8 GB-months retained, beside 32M arm64 "
    "GB-seconds less the free tier)"
)
DURABLE_CHECKED_TOO = "as `lambda_durable_operation`'s"


@dataclass(frozen=True)
class Price:
    """One published price: US dollars per ``per``, us-east-1, on demand, first tier."""

    usd: float
    per: str
    label: str
    #: AWS's pricing page for it.
    page: str
    #: What the figure was checked against on :data:`PRICES_READ`. AWS's pricing pages draw their
    #: rate tables by script, so the stored text of most of them holds no figure.
    checked: str


#: The one price table (``bench/cost.py`` and docs/cost.md use it too). ``ROLLOUT_SDK_PRICES``
#: overrides any of them (a JSON object by these names).
PRICE_TABLE: dict[str, Price] = {
    "lambda_gb_second_x86_64": Price(
        0.0000166667,
        "GB-second",
        "Lambda duration, x86_64, per GB-second",
        LAMBDA_PAGE,
        "AWS's whitepaper 'How AWS Pricing Works' (Lambda): $0.00001667, rounded; the exact "
        "digits from summaries of the page (artillery's prices.js, cloudchipr.com)",
    ),
    "lambda_gb_second_arm64": Price(
        0.0000133334,
        "GB-second",
        "Lambda duration, arm64, per GB-second",
        LAMBDA_PAGE,
        "summaries of the page only (cloudchipr.com, artillery's prices.js); not on an AWS page",
    ),
    "lambda_request": Price(
        0.20 / 1e6,
        "request",
        "Lambda, per request",
        LAMBDA_PAGE,
        "AWS's whitepaper 'How AWS Pricing Works' (Lambda): $0.20 per 1 million requests",
    ),
    "http_api_request": Price(
        1.00 / 1e6,
        "request (512 KB metered)",
        "API Gateway HTTP API, per request",
        API_GATEWAY_PAGE,
        "summaries only for the price (learnaws.org, awsforengineers.com, 2025); the 512 KB "
        "metering from AWS's whitepaper on API Gateway private APIs (cost optimization)",
    ),
    "dynamodb_write_unit": Price(
        0.625 / 1e6,
        "write request unit",
        "DynamoDB on-demand, per write request unit",
        DYNAMODB_PAGE,
        "summaries only (airbyte.com, jusdb.com, 2025: half the earlier price since "
        "2024-11-01); not on an AWS page",
    ),
    "dynamodb_read_unit": Price(
        0.125 / 1e6,
        "read request unit",
        "DynamoDB on-demand, per read request unit",
        DYNAMODB_PAGE,
        "summaries only (airbyte.com, 2025); one summary (infratally.com) still says $0.25",
    ),
    "sqs_request": Price(
        0.40 / 1e6,
        "request (64 KB chunk)",
        "SQS standard, per request",
        SQS_PAGE,
        "summaries only (cloudburn.io, March 2026; factualminds.com, June 2026)",
    ),
    "kms_request": Price(
        0.03 / 1e4,
        "request",
        "KMS, per request (symmetric)",
        KMS_PAGE,
        "summaries only (wring.co, March 2026; factualminds.com); the page's stored text has the "
        "free tier and the key's $1 a month, not this table",
    ),
    "s3_put_request": Price(
        0.005 / 1e3,
        "request",
        "S3 Standard, per PUT request",
        S3_PAGE,
        "summaries only (c3x.dev, cloudkaramchari.com)",
    ),
    "s3_get_request": Price(
        0.0004 / 1e3,
        "request",
        "S3 Standard, per GET request",
        S3_PAGE,
        "summaries only (c3x.dev)",
    ),
    "lambda_durable_operation": Price(
        8.00 / 1e6,
        "durable operation",
        "Lambda durable functions, per durable operation (an execution's start, each step, each wait)",
        LAMBDA_PAGE,
        DURABLE_CHECKED,
    ),
    "lambda_durable_written_byte": Price(
        0.25 / GIB,
        "byte written",
        "Lambda durable functions, data written ($0.25 per GB), per byte",
        LAMBDA_PAGE,
        DURABLE_CHECKED_TOO,
    ),
    "lambda_durable_retained_byte_month": Price(
        0.15 / GIB,
        "byte-month retained",
        "Lambda durable functions, data retained ($0.15 per GB-month), per byte-month",
        LAMBDA_PAGE,
        DURABLE_CHECKED_TOO,
    ),
    "cloudwatch_logs_gb": Price(
        0.50,
        "GB ingested",
        "CloudWatch Logs, per GB ingested (standard class)",
        CLOUDWATCH_PAGE,
        "summaries only (c3x.dev, June 2026; hykell.com); not in the per-rollout estimate",
    ),
}

#: What a rollout is charged per unit of (the estimate's ``units``): each is a price's name.
UNITS = (
    "lambda_request",
    "http_api_request",
    "dynamodb_write_unit",
    "dynamodb_read_unit",
    "sqs_request",
    "kms_request",
    "s3_put_request",
    "s3_get_request",
    "lambda_durable_operation",
    "lambda_durable_written_byte",
    "lambda_durable_retained_byte_month",
)
ARCHITECTURES = ("x86_64", "arm64")


def price_overrides(text: str) -> dict[str, float]:
    """``ROLLOUT_SDK_PRICES``: a JSON object of prices by name, in US dollars per unit.

    ValueError naming each key that is unknown, not a number, or negative.
    """
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"must be a JSON object of prices by name: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError('must be a JSON object of prices by name, e.g. {"lambda_request": 2e-7}')
    problems: list[str] = []
    prices: dict[str, float] = {}
    for key, usd in value.items():
        if key not in PRICE_TABLE:
            problems.append(f"unknown price {key!r} (known: {', '.join(PRICE_TABLE)})")
        elif isinstance(usd, bool) or not isinstance(usd, int | float) or not math.isfinite(usd):
            problems.append(f"price {key!r} must be a number of US dollars, got {usd!r}")
        elif usd < 0:
            problems.append(f"price {key!r} must not be negative, got {usd!r}")
        else:
            prices[key] = float(usd)
    if problems:
        raise ValueError("; ".join(problems))
    return prices


def effective_prices(overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """The table's prices with ``overrides`` applied."""
    return {name: price.usd for name, price in PRICE_TABLE.items()} | dict(overrides or {})
