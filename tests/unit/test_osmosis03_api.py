"""The 0.3.8 author API (rollout_sdk.osmosis03) on the kit's own Python (3.11 and newer): what a
workflow and a grader rely on, and that importing it stays light. Its names and signatures are
compared with osmosis-ai 0.3.8 itself by tests/osmosis03/test_surface.py."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
from typing import Any

import pydantic
import pytest

from rollout_sdk.osmosis03 import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    Grader,
    GraderContext,
    RolloutContext,
    RolloutInitRequest,
    RolloutInitResponse,
    RolloutSample,
    SampleSource,
    get_rollout_context,
)
from rollout_sdk.osmosis03.types import coerce_output

pytestmark = pytest.mark.timeout(60)


class Echo(AgentWorkflow[AgentWorkflowConfig]):
    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> list[dict[str, Any]]:
        return [*ctx.prompt, {"role": "assistant", "content": "done"}]


class Exact(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        ctx.set_reward(1.0 if ctx.label == "done" else 0.0)


def test_a_workflow_and_a_grader_written_as_for_0_3_8_run_here() -> None:
    config = AgentWorkflowConfig(name="echo")
    workflow = Echo(config)
    out = coerce_output(
        asyncio.run(
            workflow.run(
                AgentWorkflowContext(prompt=[{"role": "user", "content": "hi"}], config=config)
            )
        )
    )
    assert out is not None and out.messages == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "done"},
    ]
    sample = RolloutSample(messages=out.messages, label="done")
    asyncio.run(Exact().grade(GraderContext(label="done", sample=sample)))
    assert sample.reward == 1.0
    # Both are abstract: a subclass must write run and grade.
    with pytest.raises(TypeError, match="abstract"):
        AgentWorkflow()  # type: ignore[abstract]
    with pytest.raises(TypeError, match="abstract"):
        Grader()  # type: ignore[abstract]


def test_the_sample_keeps_its_trajectory_and_refuses_a_nan_reward() -> None:
    sample = RolloutSample(messages=[{"role": "user", "content": "x"}])
    assert sample.trajectory_messages == [{"role": "user", "content": "x"}]
    assert sample.trajectory_messages is not sample.messages
    assert RolloutSample(messages=[], trajectory_messages=None).trajectory_messages is None
    with pytest.raises(pydantic.ValidationError):
        GraderContext(sample=sample).set_reward(math.nan)
    with pytest.raises(ValueError, match="no sample"):
        GraderContext().set_reward(1.0)


def test_json_safe_copy_makes_numbers_plain_and_leaves_out_what_json_cannot_hold() -> None:
    class Number(float):  # as NumPy's float64 is a float of another type
        pass

    sample = RolloutSample(
        metrics={"a": Number(0.5), "b": math.inf, "c": [1, math.nan, 2], "d": object()},
        extra_fields={"k": {1: "one", (1, 2): "tuple key"}},
    )
    safe = sample.json_safe_copy()
    assert safe.metrics == {"a": 0.5, "c": [1, 2]} and type(safe.metrics["a"]) is float
    assert safe.extra_fields == {"k": {"1": "one"}}
    plain = RolloutSample(metrics={"x": 1})
    assert plain.json_safe_copy() is plain


def test_run_may_return_an_output_a_message_list_or_none_and_nothing_else() -> None:
    assert coerce_output(None) is None
    assert coerce_output([{"role": "user"}]) == AgentWorkflowOutput(messages=[{"role": "user"}])
    with pytest.raises(TypeError, match="returned a dict"):
        coerce_output({"messages": []})
    with pytest.raises(pydantic.ValidationError):
        AgentWorkflowOutput(messages=[], surprise=1)  # type: ignore[call-arg]


def test_the_rollout_context_is_the_current_ones_and_holds_one_sample_source() -> None:
    class Source(SampleSource):
        async def get_sample(self) -> RolloutSample:
            return RolloutSample(label="s")

    assert get_rollout_context() is None
    with RolloutContext(chat_completions_url="http://127.0.0.1:9/v1", rollout_id="r") as ctx:
        assert get_rollout_context() is ctx
        ctx.set_sample_source(Source())
        with pytest.raises(ValueError, match="one sample"):
            ctx.set_sample_source(Source())
        sample = asyncio.run(ctx.get_sample())
        assert sample is not None and sample.label == "s"
    assert get_rollout_context() is None


def test_the_context_reads_the_runners_variables_when_given_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OSMOSIS_CHAT_COMPLETIONS_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OSMOSIS_API_KEY", "k")
    monkeypatch.setenv("OSMOSIS_ROLLOUT_ID", "r-1")
    ctx = RolloutContext()
    assert (ctx.chat_completions_url, ctx.api_key, ctx.rollout_id) == (
        "http://127.0.0.1:9/v1",
        "k",
        "r-1",
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"rollout_id": "a/b"}, "rollout_id"),
        ({"rollout_id": ".."}, "rollout_id"),
        ({"llm_api_key": ""}, "llm_api_key"),
        ({"agent_timeout_sec": math.inf}, "agent_timeout_sec"),
        ({"grader_timeout_sec": math.nan}, "grader_timeout_sec"),
    ],
)
def test_an_init_request_names_the_field_it_refuses(change: dict[str, Any], field: str) -> None:
    body = {"rollout_id": "r-1", "initial_messages": [], "chat_completions_url": "http://x"}
    with pytest.raises(pydantic.ValidationError) as caught:
        RolloutInitRequest.model_validate({**body, **change})
    assert caught.value.errors()[0]["loc"] == (field,)


def test_the_polling_lease_must_outlast_the_wait() -> None:
    good = {"rollout_id": "r", "status": "queued", "polling_lease_token": "t"}
    RolloutInitResponse.model_validate(
        {**good, "result_wait_timeout_sec": 30, "polling_lease_timeout_sec": 120}
    )
    with pytest.raises(pydantic.ValidationError, match="exceed"):
        RolloutInitResponse.model_validate(
            {**good, "result_wait_timeout_sec": 30, "polling_lease_timeout_sec": 30}
        )


def test_importing_it_loads_no_web_framework_http_client_aws_sdk_or_sqlite() -> None:
    code = (
        "import sys, rollout_sdk.osmosis03;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'fastapi','starlette','httpx','aiohttp','boto3','botocore','sqlite3','uvicorn'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_v1_path_loads_none_of_the_0_3_8_modules() -> None:
    """A v1 server, and every Lambda function, runs without them (its cold start pays nothing
    for a protocol it does not serve): they load where a workflow is served."""
    code = (
        "import sys, rollout_sdk.engine.worker, rollout_sdk.engine.service,"
        " rollout_sdk.engine.assembly, rollout_sdk.http.app, rollout_sdk.aws.handlers.worker;"
        "print(sorted(m for m in sys.modules if m.startswith(('rollout_sdk.osmosis03',"
        " 'rollout_sdk.engine.workflows', 'rollout_sdk.engine.osmosis03',"
        " 'rollout_sdk.http.osmosis03'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
