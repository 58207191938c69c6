"""Print the CloudFormation that the SAM translator makes of a template (for cfn-lint).

Runs in the deployment tools' own virtual environment (.venv-sam), which has samtranslator.
Usage: python infra/transform.py template.yaml > transformed.json
"""

from __future__ import annotations

import json
import sys

import boto3
from samtranslator.model.exceptions import InvalidDocumentException
from samtranslator.translator.managed_policy_translator import ManagedPolicyLoader
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class _NoLookupPolicies(ManagedPolicyLoader):
    """The template names no managed policies by name; never call IAM to look them up."""

    def __init__(self) -> None:
        super().__init__(boto3.client("iam", region_name="us-east-1"))

    def load(self) -> dict[str, str]:
        return {}


def as_packaged(template: dict) -> dict:
    """Point local code at a placeholder S3 object, as `sam package` would, so the translator runs."""
    placeholder = "s3://rollout-sdk-placeholder/artifact.zip"
    function_globals = template.get("Globals", {}).get("Function", {})
    if "CodeUri" in function_globals:
        function_globals["CodeUri"] = placeholder
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") == "AWS::Serverless::Function":
            props = resource.setdefault("Properties", {})
            if "CodeUri" in props or "CodeUri" in function_globals:
                props["CodeUri"] = placeholder
    return template


def main(path: str) -> int:
    with open(path, encoding="utf-8") as handle:
        template = as_packaged(yaml_parse(handle.read()))
    try:
        output = transform(template, {}, _NoLookupPolicies())
    except InvalidDocumentException as exc:
        for cause in exc.causes:
            print(f"{path}: {cause.message}", file=sys.stderr)
        return 1
    json.dump(output, sys.stdout, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "template.yaml"))
