"""One invocation of the durable worker as a process: ``handler.py`` imported afresh, one
invocation of ``handler.durable_worker`` run against a durable execution testing SDK's web
runner (its checkpoint service), its answer written to a file. A test SIGKILLs it mid-turn
(:mod:`testkit.lambda_endpoint` starts one per Invoke the web runner sends).

    python -m testkit.durable_process EVENT_JSON OUT_JSON

The function's environment comes from this process's own (the endpoint sets it), with the web
runner's URL in :data:`CHECKPOINT_ENDPOINT_VARIABLE`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

#: The variable that names the checkpoint service's URL (the web runner's).
CHECKPOINT_ENDPOINT_VARIABLE = "TESTKIT_DURABLE_CHECKPOINT_ENDPOINT"
#: The logical id the invocation's context names (the template's durable worker function).
FUNCTION = "DurableWorkerFunction"
#: The invocation's Lambda timeout, unless TESTKIT_DURABLE_TIMEOUT_SECONDS says otherwise.
DEFAULT_TIMEOUT_SECONDS = 900.0


def main(argv: list[str] | None = None) -> int:
    event_path, out_path = (sys.argv[1:] if argv is None else argv)[:2]
    import boto3
    from aws_durable_execution_sdk_python import durable_execution
    from botocore.config import Config

    from rollout_sdk.aws.handlers.durable import durable_worker
    from rollout_sdk.local.emulator import LOCAL_REGION
    from rollout_sdk.local.invoke import LocalLambdaContext, import_handler

    handler = import_handler({})  # the endpoint set this process's environment
    durable = durable_worker(handler.runtime)  # the one the durable entry point runs
    # The runtime's clients all share one endpoint, moto's (ROLLOUT_SDK_AWS_ENDPOINT_URL), which
    # serves DynamoDB and KMS but has no durable execution API. Here the checkpoint service is
    # the testing SDK's web runner on another port: the SDK handler the worker builds lazily
    # (its cached ``_handler``) is built now on a Lambda client pointed there instead.
    checkpoints = boto3.client(
        "lambda",
        endpoint_url=os.environ[CHECKPOINT_ENDPOINT_VARIABLE],
        region_name=LOCAL_REGION,
        config=Config(connect_timeout=5, read_timeout=60, retries={"max_attempts": 2}),
    )
    execution = durable._execution  # noqa: SLF001 - the function the worker hands the SDK
    durable.__dict__["_handler"] = durable_execution(execution, boto3_client=checkpoints)
    event = json.loads(Path(event_path).read_text(encoding="utf-8"))
    timeout = float(os.environ.get("TESTKIT_DURABLE_TIMEOUT_SECONDS", DEFAULT_TIMEOUT_SECONDS))
    context = LocalLambdaContext(function_name=FUNCTION, timeout_seconds=timeout)
    try:
        result = handler.durable_worker(event, context)
    finally:
        handler.runtime.close()
    Path(out_path).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
