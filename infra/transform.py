"""Print the CloudFormation that the SAM translator makes of a template (for cfn-lint, and for
the permission test, tests/aws/test_permissions.py).

Runs in the deployment tools' own virtual environment (.venv-sam), which has samtranslator.
Usage:
  python infra/transform.py template.yaml > transformed.json
  python infra/transform.py template.yaml --without ApiFunction.RolloutRecords   # that statement removed
  python infra/transform.py template.yaml --each --without A.X --without B.Y      # one translation each
  python infra/transform.py template.yaml --parameter SnapStart=PublishedVersions  # a deploy's value

A statement is named FUNCTION.SID: the statement with that Sid in the function's Policies (in an
``!If``, that branch becomes ``AWS::NoValue``); FUNCTION.Policies[N] is the function's N-th
Policies entry whole (a SAM policy template, whose statements have no Sid). ``--each`` prints one JSON object mapping each
name to the translation of the template without that statement alone.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from typing import Any

import boto3
from samtranslator.model.exceptions import InvalidDocumentException
from samtranslator.translator.managed_policy_translator import ManagedPolicyLoader
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

NO_VALUE = {"Ref": "AWS::NoValue"}


class _NoLookupPolicies(ManagedPolicyLoader):
    """The template names no managed policies by name; never call IAM to look them up."""

    def __init__(self) -> None:
        super().__init__(boto3.client("iam", region_name="us-east-1"))

    def load(self) -> dict[str, str]:
        return {}


def as_packaged(template: dict) -> dict:
    """Point local code at a placeholder S3 object, as `sam package` would, so the translator
    runs: each function's CodeUri and each layer's ContentUri (one kept when it already names
    an S3 object, so a test can give a layer content of its own)."""
    placeholder = "s3://rollout-sdk-placeholder/artifact.zip"
    function_globals = template.get("Globals", {}).get("Function", {})
    if "CodeUri" in function_globals:
        function_globals["CodeUri"] = placeholder
    for logical_id, resource in template.get("Resources", {}).items():
        if resource.get("Type") == "AWS::Serverless::Function":
            props = resource.setdefault("Properties", {})
            if "CodeUri" in props or "CodeUri" in function_globals:
                props["CodeUri"] = placeholder
        elif resource.get("Type") == "AWS::Serverless::LayerVersion":
            props = resource.setdefault("Properties", {})
            if not str(props.get("ContentUri", "")).startswith("s3://"):
                props["ContentUri"] = f"s3://rollout-sdk-placeholder/{logical_id}.zip"
    return template


def without(template: dict, name: str) -> dict:
    """A copy of ``template`` without the statement ``FUNCTION.SID`` (or the whole entry
    ``FUNCTION.Policies[N]``, such as a SAM policy template); KeyError when there is none."""
    function, _, sid = name.partition(".")
    copied = copy.deepcopy(template)
    policies = copied["Resources"][function]["Properties"].get("Policies", [])
    entry = re.fullmatch(r"Policies\[(\d+)\]", sid)
    if entry and isinstance(policies, list) and int(entry.group(1)) < len(policies):
        del policies[int(entry.group(1))]
        return copied
    for policy in policies if isinstance(policies, list) else []:
        statements = policy.get("Statement", []) if isinstance(policy, dict) else []
        for index, statement in enumerate(statements):
            if statement.get("Sid") == sid:
                del statements[index]
                return copied
            branches = statement.get("Fn::If")
            if isinstance(branches, list) and len(branches) == 3:
                for branch in (1, 2):
                    if isinstance(branches[branch], dict) and branches[branch].get("Sid") == sid:
                        branches[branch] = copy.deepcopy(NO_VALUE)
                        return copied
    raise KeyError(f"{function} has no statement with Sid {sid!r}")


def translate(template: dict, parameters: dict[str, str] | None = None) -> dict[str, Any]:
    """The translator's CloudFormation, given ``parameters`` as a deploy passes them to the
    transform (the others at their defaults); InvalidDocumentException when SAM refuses it."""
    packaged = as_packaged(copy.deepcopy(template))
    return dict(transform(packaged, dict(parameters or {}), _NoLookupPolicies()))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("template", nargs="?", default="template.yaml")
    parser.add_argument("--without", action="append", default=[], metavar="FUNCTION.SID")
    parser.add_argument("--each", action="store_true", help="one translation per --without")
    parser.add_argument("--parameter", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    parameters = dict(item.partition("=")[::2] for item in args.parameter)
    with open(args.template, encoding="utf-8") as handle:
        template = yaml_parse(handle.read())
    try:
        if args.each:
            output: Any = {
                name: translate(without(template, name), parameters) for name in args.without
            }
        else:
            for name in args.without:
                template = without(template, name)
            output = translate(template, parameters)
    except KeyError as exc:
        print(f"{args.template}: {exc.args[0]}", file=sys.stderr)
        return 1
    except InvalidDocumentException as exc:
        for cause in exc.causes:
            print(f"{args.template}: {cause.message}", file=sys.stderr)
        return 1
    json.dump(output, sys.stdout, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
