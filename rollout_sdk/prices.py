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
