"""The AWS path's figures, against moto's server on 127.0.0.1 (nothing here reaches AWS).

    python -m bench.aws requests --runs 3     AWS requests per rollout on the happy path
    python -m bench.aws coldstart --runs 3    cold start of handler.api and handler.worker

``requests``: ``handler.py`` imported in this process against an embedded, provisioned moto; one
init through ``handler.api``, the worker run it dispatched through ``handler.worker``, one
callback to a stand-in; every request of the runtime's boto3 clients is counted with botocore's
``before-call`` hooks (API calls) and ``before-send`` hooks (HTTP attempts, retries included),
by phase, service and operation. The first rollout of an environment also reads the server key
(cached afterwards): it is reported apart, as ``first``; the figure is the median of the next.

``coldstart``: this process provisions moto and runs a stand-in; each measurement is a fresh
``python -m bench.coldchild`` process, timed from just before it is spawned: a bare import of
fastapi, mangum, boto3 and aws_lambda_powertools; ``handler.api`` to its first 202; and
``handler.worker`` to its first claimed rollout (the worker's first DynamoDB write) and to the
end of the rollout. One warm-up round (bytecode caches) is not counted. Each prints one
``BENCH-RESULT`` line of JSON (the handler's own logs share stdout).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import child_env, emit_result, median, parse_result
from bench.throughput import standin_thread
from testkit import REPO_ROOT
from testkit.processes import DEFAULT_AGENT

SERVER_KEY = "local-server-key"  # what events/*.json send
CALLBACK_KEY = "sample-callback-key"
TEMPLATE = REPO_ROOT / "template.yaml"
EVENTS = REPO_ROOT / "events"
#: The runtime's boto3 clients (attributes of ``AwsClients``) whose calls are counted.
CLIENTS = ("dynamodb", "s3", "lambda_", "kms", "secretsmanager", "sqs")


def init_event(rollout_id: str, server_url: str) -> dict[str, Any]:
    """events/init.json for ``rollout_id``, its ``server_url`` pointed at the stand-in."""
    event: dict[str, Any] = json.loads((EVENTS / "init.json").read_text(encoding="utf-8"))
    body = json.loads(event["body"])
    body["rollout_id"] = rollout_id
    body["server_url"] = server_url
    event["body"] = json.dumps(body)
    return event


# ---------------------------------------------------------------- requests per rollout


def count_requests(runs: int) -> dict[str, Any]:
    """``runs`` + 1 rollouts through handler.api and handler.worker, each request named."""
    from rollout_sdk.local.emulator import EmbeddedMoto, load_template, provision
    from rollout_sdk.local.invoke import function_environment, import_handler, invoke

    rollouts: list[dict[str, Any]] = []
    failures: list[str] = []
    with EmbeddedMoto() as moto, standin_thread(CALLBACK_KEY) as (standin, _, url):
        resources = provision(
            moto.endpoint_url,
            template_path=TEMPLATE,
            agent_loop=DEFAULT_AGENT,
            server_key=SERVER_KEY,
            prefix="bench-requests",
        )
        env = function_environment(load_template(TEMPLATE), "ApiFunction", resources)
        os.chdir(REPO_ROOT)
        module = import_handler(env)
        try:
            phase = ["setup"]
            calls: list[tuple[str, str]] = []
            sends: list[tuple[str, str]] = []

            def recorder(into: list[tuple[str, str]]) -> Callable[..., None]:
                def record(event_name: str, **_: Any) -> None:
                    service, operation = event_name.split(".", 2)[1:]
                    into.append((phase[0], f"{service}.{operation}"))

                return record

            hooked = []
            for name in CLIENTS:
                if not hasattr(type(module.runtime.clients), name):
                    continue
                client = getattr(module.runtime.clients, name)
                client.meta.events.register("before-call.*.*", recorder(calls))
                client.meta.events.register("before-send.*.*", recorder(sends))
                hooked.append(name.rstrip("_"))
            for i in range(runs + 1):
                calls.clear()
                sends.clear()
                rollout_id = f"bench-requests-{i}"
                phase[0] = "api"
                init = invoke(
                    module, "ApiFunction", init_event(rollout_id, url), timeout_seconds=29
                )
                if init.result.get("statusCode") != 202 or len(init.dispatched) != 1:
                    failures.append(f"{rollout_id}: init answered {init.result.get('statusCode')}")
                    continue
                phase[0] = "worker"
                ran = invoke(module, "WorkerFunction", init.dispatched[0], timeout_seconds=900)
                if not ran.result.get("delivered"):
                    failures.append(f"{rollout_id}: worker result {ran.result}")
                rollouts.append(
                    {
                        "rollout_id": rollout_id,
                        "calls": [f"{p}: {op}" for p, op in calls],
                        "api_calls": len(calls),
                        "http_attempts": len(sends),
                        "by_phase": dict(Counter(p for p, _ in calls)),
                    }
                )
            delivered = sum(1 for r in rollouts if standin.completions.get(r["rollout_id"]))
            if delivered != len(rollouts):
                failures.append(f"{len(rollouts) - delivered} rollouts never called back")
        finally:
            module.runtime.close()
            sys.modules.pop("handler", None)
    steady = rollouts[1:]
    return {
        "hooked_clients": hooked,
        "first": rollouts[0] if rollouts else None,
        "runs": [r["api_calls"] for r in steady],
        "median": median([float(r["api_calls"]) for r in steady]),
        "http_attempts": [r["http_attempts"] for r in steady],
        "requests": steady[0]["calls"] if steady else [],
        "rollouts": steady,
        "failures": failures,
    }


# ---------------------------------------------------------------- cold start


def _child(mode: str, env: dict[str, str], event: Any | None, workdir: Path) -> dict[str, Any]:
    """One fresh ``python -m bench.coldchild`` process; its stamps made relative to the spawn."""
    argv = [sys.executable, "-m", "bench.coldchild", mode]
    if event is not None:
        path = workdir / f"{mode}-event.json"
        path.write_text(json.dumps(event), encoding="utf-8")
        argv.append(str(path))
    spawned = time.monotonic()
    try:
        done = subprocess.run(  # noqa: S603 - a fixed argv list, no shell
            argv,
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except subprocess.TimeoutExpired:  # run() has killed it
        return {"mode": mode, "error": "timed out after 120 s"}
    try:
        out: dict[str, Any] = parse_result(done.stdout)
    except ValueError:
        return {"mode": mode, "error": f"exit {done.returncode}: {done.stderr[-800:]}"}
    for key in ("imported", "first_202", "claimed", "done"):
        if isinstance(out.get(key), float):
            out[f"{key}_ms"] = (out.pop(key) - spawned) * 1000
    return out


def cold_start(runs: int) -> dict[str, Any]:
    """``runs`` rounds (after one warm-up round) of bare import, API 202 and worker claim."""
    from rollout_sdk.local.emulator import EmbeddedMoto, load_template, provision
    from rollout_sdk.local.invoke import function_environment

    template = load_template(TEMPLATE)
    rounds: list[dict[str, Any]] = []
    failures: list[str] = []
    network: list[str] = []
    with (
        EmbeddedMoto() as moto,
        standin_thread(CALLBACK_KEY) as (_, _, url),
        tempfile.TemporaryDirectory(prefix="rollout-sdk-bench-") as workdir,
    ):
        resources = provision(
            moto.endpoint_url,
            template_path=TEMPLATE,
            agent_loop=DEFAULT_AGENT,
            server_key=SERVER_KEY,
            prefix="bench-cold",
        )
        api_env = child_env(function_environment(template, "ApiFunction", resources))
        worker_env = child_env(function_environment(template, "WorkerFunction", resources))
        for i in range(runs + 1):
            bare = _child("bare", api_env, None, Path(workdir))
            api = _child("api", api_env, init_event(f"bench-cold-{i}", url), Path(workdir))
            dispatched = api.get("dispatched") or []
            if api.get("status") != 202 or len(dispatched) != 1:
                failures.append(f"round {i}: api {api.get('status')} {api.get('error', '')}")
                worker: dict[str, Any] = {"mode": "worker", "error": "no worker event"}
            else:
                worker = _child("worker", worker_env, dispatched[0], Path(workdir))
                if (worker.get("result") or {}).get("state") != "DELIVERED":
                    failures.append(
                        f"round {i}: worker {worker.get('result')} {worker.get('error', '')}"
                    )
            for child in (bare, api, worker):
                network += child.get("network_attempts") or []
                if "error" in child and child["error"] != "no worker event":
                    failures.append(f"round {i}: {child['mode']}: {child['error']}")
            if i > 0:  # round 0 warms the bytecode caches
                rounds.append(
                    {
                        "bare_import_ms": bare.get("imported_ms"),
                        "api_import_ms": api.get("imported_ms"),
                        "api_first_202_ms": api.get("first_202_ms"),
                        "worker_import_ms": worker.get("imported_ms"),
                        "worker_first_claim_ms": worker.get("claimed_ms"),
                        "worker_claim_operation": worker.get("claim_operation"),
                        "worker_rollout_done_ms": worker.get("done_ms"),
                    }
                )
    return {"rounds": rounds, "network_at_import": network, "failures": failures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.aws", description=__doc__)
    parser.add_argument("what", choices=("requests", "coldstart"))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    result = count_requests(args.runs) if args.what == "requests" else cold_start(args.runs)
    emit_result(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
