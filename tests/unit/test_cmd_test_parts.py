"""The parts of ``rollout-sdk test`` that need no server: v1's datasets, the model names, the
chat body sent to the endpoint, how the endpoint's failures are named, the endpoint's credentials
(never shown), ``--api-key-file``, and the forwarder's check of the callback key."""

from __future__ import annotations

import argparse
import hmac
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from rollout_sdk.errors import ConfigurationError, DatasetError
from rollout_sdk.local.cli import build_parser
from rollout_sdk.local.dataset import read_rows
from rollout_sdk.local.forward import (
    MAX_KEY_LINE,
    Endpoint,
    EndpointFailure,
    ForwardingTrainGate,
    classify_exception,
    classify_status,
    map_chat_body,
    read_key_file,
    resolve_endpoint,
    resolve_model,
)

ROW = {"system_prompt": "Be brief.", "user_prompt": "What is 1 + 1?", "ground_truth": "2"}


def _jsonl(tmp_path: Path, *rows: Any) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return path


# ---------------------------------------------------------------------------- datasets


def test_a_row_becomes_v1s_messages_and_metadata(tmp_path: Path) -> None:
    row = {"SYSTEM_PROMPT": "Be brief.", "User_Prompt": "Hi?", "Ground_Truth": "2", "level": 3}
    selection = read_rows(_jsonl(tmp_path, row))
    assert selection.total == 1
    (only,) = selection.rows
    assert only.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi?"},
    ]
    assert only.metadata == {
        "ground_truth": "2",
        "row_index": 0,
        "level": 3,
        "execution_mode": "test",
        "test_mode": True,
    }


def test_offset_and_limit_pick_rows_by_their_index(tmp_path: Path) -> None:
    rows = [{**ROW, "user_prompt": f"q{n}"} for n in range(5)]
    selection = read_rows(_jsonl(tmp_path, *rows), offset=2, limit=2)
    assert selection.total == 5
    assert [r.row_index for r in selection.rows] == [2, 3]
    assert [r.metadata["row_index"] for r in selection.rows] == [2, 3]


def test_csv_rows(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text('system_prompt,user_prompt,ground_truth,tag\nBe brief.,"1, then 2?",2,x\n')
    (row,) = read_rows(path).rows
    assert row.messages[1]["content"] == "1, then 2?"
    assert row.metadata["tag"] == "x"


def test_parquet_rows(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({**{k: [v] for k, v in ROW.items()}, "score": [0.5]}), path)
    (row,) = read_rows(path).rows
    assert row.metadata["score"] == 0.5 and row.metadata["ground_truth"] == "2"


def test_parquet_without_pyarrow_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "data.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(DatasetError, match=r"-e '\.\[parquet\]'"):
        read_rows(path)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"system_prompt": "s", "user_prompt": "u"}, "no column 'ground_truth'"),
        ({**ROW, "ground_truth": 47}, "'ground_truth' must be a string, got a number"),
        ({**ROW, "user_prompt": None}, "'user_prompt' is null"),
        ({**ROW, "system_prompt": "  "}, "'system_prompt' is empty"),
        (["not", "an", "object"], "must be an object"),
    ],
)
def test_a_bad_row_names_file_row_line_and_column(tmp_path: Path, row: Any, message: str) -> None:
    path = _jsonl(tmp_path, ROW, row)
    with pytest.raises(DatasetError) as raised:
        read_rows(path)
    assert str(raised.value).startswith(f"{path}, row 1 (line 2): ")
    assert message in str(raised.value)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"use \.jsonl, \.csv or \.parquet"):
        read_rows(tmp_path / "data.txt")
    with pytest.raises(DatasetError, match="not found"):
        read_rows(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": \n')
    with pytest.raises(DatasetError, match=r"line 1: not valid JSON"):
        read_rows(bad)
    extra = tmp_path / "extra.csv"
    extra.write_text("system_prompt,user_prompt,ground_truth\na,b,c,d\n")
    with pytest.raises(DatasetError, match=r"line 2: more fields than the header"):
        read_rows(extra)


# ---------------------------------------------------------------------------- model names


def test_model_names() -> None:
    assert resolve_model("gpt-5-mini", base_url=None) == "gpt-5-mini"
    assert resolve_model("openai/gpt-4o", base_url=None) == "gpt-4o"
    assert resolve_model("openai/gpt-4o", base_url="http://h/v1") == "gpt-4o"
    assert resolve_model("Qwen/Qwen2.5-7B", base_url="http://h/v1") == "Qwen/Qwen2.5-7B"
    assert resolve_model("anthropic/claude-x", base_url="http://h/v1") == "anthropic/claude-x"
    with pytest.raises(ConfigurationError, match=r"'anthropic'.*--base-url"):
        resolve_model("anthropic/claude-x", base_url=None)
    with pytest.raises(ConfigurationError, match="empty"):
        resolve_model(" ", base_url=None)


def test_the_endpoint_and_its_key() -> None:
    env = {"OPENAI_API_KEY": "sk-env"}
    openai = resolve_endpoint(model="gpt-5-mini", base_url=None, api_key=None, environ=env)
    assert openai.base_url == "https://api.openai.com/v1" and openai.is_openai
    assert openai.api_key == "sk-env" and "sk-env" not in repr(openai)
    given = resolve_endpoint(model="m", base_url="http://h:8000/v1/", api_key="k", environ=env)
    assert given.chat_url == "http://h:8000/v1/chat/completions" and given.api_key == "k"
    keyless = resolve_endpoint(model="m", base_url="http://h/v1", api_key=None, environ={})
    assert keyless.api_key is None
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        resolve_endpoint(model="m", base_url=None, api_key=None, environ={})
    with pytest.raises(ConfigurationError, match="not an http"):
        resolve_endpoint(model="m", base_url="localhost:8000", api_key=None, environ={})


# ---------------------------------------------------------------------------- the chat body

KIT_BODY = {
    "model": "default",
    "temperature": 1.0,
    "top_p": 1.0,
    "max_tokens": 512,
    "logprobs": True,
    "seed": 7,
    "messages": [{"role": "user", "content": "hi"}],
    "rollout_id": "test-0",
}
TOOLS = [{"type": "function", "function": {"name": "f", "description": "d"}}]


def test_the_kits_fields_are_dropped_and_its_fillers_left_out() -> None:
    body = map_chat_body(
        KIT_BODY, model="m", tools=TOOLS, completion_params={}, limit_field="max_tokens"
    )
    assert body == {"model": "m", "seed": 7, "messages": KIT_BODY["messages"], "tools": TOOLS}


def test_given_params_are_kept_and_the_token_limit_renamed() -> None:
    body = map_chat_body(
        {**KIT_BODY, "temperature": 1.0, "max_tokens": 512},
        model="m",
        tools=[],
        completion_params={"temperature": 1.0, "max_tokens": 512},
        limit_field="max_completion_tokens",
    )
    assert body["temperature"] == 1.0 and body["max_completion_tokens"] == 512
    assert "max_tokens" not in body and "tools" not in body


def test_the_agents_own_tools_win() -> None:
    own = [{"type": "function", "function": {"name": "g", "description": "e"}}]
    body = map_chat_body(
        {**KIT_BODY, "tools": own},
        model="m",
        tools=TOOLS,
        completion_params={},
        limit_field="max_tokens",
    )
    assert body["tools"] == own


# ---------------------------------------------------------------------------- failures

ENDPOINT = Endpoint("https://api.openai.com/v1", "gpt-5-mini", "sk-secret-key", 10.0)


def _error(message: str) -> str:
    return json.dumps({"error": {"message": message, "code": None}})


def test_each_status_is_named_with_its_fix() -> None:
    cases = {
        401: ("unauthorized", True, "--api-key"),
        404: ("model_not_found", True, "--model"),
        400: ("bad_request", False, "leave it out"),
        500: ("server_error", False, "retry later"),
    }
    for status, (kind, systemic, fix) in cases.items():
        failure = classify_status(ENDPOINT, status, _error("boom"), {})
        assert (failure.kind, failure.systemic) == (kind, systemic)
        assert "boom" in failure.message and fix in failure.message and "Fix:" in failure.message
    limited = classify_status(ENDPOINT, 429, _error("slow"), {"retry-after": "3"})
    assert limited.retryable and not limited.systemic and limited.retry_after == "3"
    quota = classify_status(ENDPOINT, 429, _error("You exceeded your current quota"), {})
    assert quota.systemic and not quota.retryable and "credit" in quota.message


def test_the_key_is_cut_from_what_the_endpoint_says() -> None:
    failure = classify_status(ENDPOINT, 401, _error("Incorrect API key: sk-secret-key"), {})
    assert "sk-secret-key" not in failure.message and "***" in failure.message


def test_transport_failures() -> None:
    timeout = classify_exception(ENDPOINT, httpx.ReadTimeout("slow"))
    assert timeout.kind == "timeout" and "--timeout" in timeout.message and not timeout.systemic
    refused = classify_exception(ENDPOINT, httpx.ConnectError("refused"))
    assert refused.kind == "unreachable" and refused.systemic and "--base-url" in refused.message


async def test_a_chat_call_is_forwarded_with_the_key_in_the_header_only() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if "max_completion_tokens" in json.loads(request.content):
            return httpx.Response(
                400, json={"error": {"message": "Unsupported parameter: 'max_completion_tokens'"}}
            )
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant"}}]})

    traingate = ForwardingTrainGate(
        ENDPOINT, callback_key="cb", transport=httpx.MockTransport(answer)
    )
    got = await traingate.forward(KIT_BODY, TOOLS, {"max_tokens": 512})
    assert isinstance(got, dict) and got["choices"]
    # api.openai.com: max_completion_tokens first; refused, so max_tokens from then on.
    first, second = (json.loads(r.content) for r in seen)
    assert first["max_completion_tokens"] == 512 and second["max_tokens"] == 512
    assert traingate.token_field == "max_tokens"
    for request in seen:
        assert request.headers["authorization"] == "Bearer sk-secret-key"
        assert b"sk-secret-key" not in request.content


# ---------------------------------------------------------------------------- credentials

CREDENTIALED = "http://user:SECRET@127.0.0.1:8000/v1?api-key=QSECRET&api-version=2024-06-01"
BASIC = "dXNlcjpTRUNSRVQ="  # base64 of user:SECRET


def _credentialed(**more: Any) -> Endpoint:
    return resolve_endpoint(model="m", base_url=CREDENTIALED, api_key=None, environ={}, **more)


def test_user_info_leaves_the_url_and_is_sent_as_basic_auth() -> None:
    endpoint = resolve_endpoint(
        model="m", base_url=CREDENTIALED, api_key=None, environ={"OPENAI_API_KEY": "sk-env"}
    )
    assert endpoint.base_url == "http://127.0.0.1:8000/v1?api-key=QSECRET&api-version=2024-06-01"
    # The path goes before the query; the credentials are the URL's, not OPENAI_API_KEY.
    assert endpoint.chat_url == (
        "http://127.0.0.1:8000/v1/chat/completions?api-key=QSECRET&api-version=2024-06-01"
    )
    assert endpoint.api_key is None and endpoint.authorization == f"Basic {BASIC}".encode()
    shown = "http://***@127.0.0.1:8000/v1?api-key=***&api-version=2024-06-01"
    assert endpoint.shown() == shown
    assert endpoint.shown("/models").startswith("http://***@127.0.0.1:8000/v1/models?api-key=***")
    for text in (repr(endpoint), str(endpoint)):
        assert "SECRET" not in text and BASIC not in text and shown in text
    # The endpoint's echo, or an HTTP stack's message holding the URL, loses them too.
    said = f"bad key Basic {BASIC} for {endpoint.chat_url} (user:SECRET, SECRET, QSECRET)"
    assert "SECRET" not in endpoint.redact(said) and BASIC not in endpoint.redact(said)


def test_user_info_and_a_key_are_refused_together() -> None:
    with pytest.raises(ConfigurationError, match="--api-key or --api-key-file") as refused:
        resolve_endpoint(model="m", base_url=CREDENTIALED, api_key="sk-given", environ={})
    assert "SECRET" not in str(refused.value) and "sk-given" not in str(refused.value)


@pytest.mark.parametrize(
    "url", ["ftp://user:SECRET@host/v1", "user:SECRET@host/v1", "http://user:SECRET@host:port/v1"]
)
def test_a_bad_base_url_is_refused_without_its_credentials(url: str) -> None:
    with pytest.raises(ConfigurationError, match="not an http") as refused:
        resolve_endpoint(model="m", base_url=url, api_key=None, environ={})
    assert "SECRET" not in str(refused.value) and "***@host" in str(refused.value)


def test_every_failure_names_the_endpoint_without_its_credentials() -> None:
    endpoint = _credentialed(timeout=5.0)
    echo = _error(f"Incorrect API key provided: Basic {BASIC}")
    failures = [classify_status(endpoint, status, echo, {}) for status in (401, 404, 429, 400, 500)]
    failures += [classify_status(endpoint, 418, "SECRET", {})]
    embedded = f"Cannot connect to {endpoint.chat_url} as user:SECRET"
    for exc in (httpx.ConnectError(embedded), httpx.ReadTimeout(embedded), ValueError(embedded)):
        failures.append(classify_exception(endpoint, exc))
    for failure in failures:
        assert "http://***@127.0.0.1:8000/v1" in failure.message, failure.message
        assert "SECRET" not in failure.message and BASIC not in failure.message, failure.message


async def test_the_url_sent_has_no_user_info_and_basic_auth_is_its_header() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant"}}]})

    traingate = ForwardingTrainGate(
        _credentialed(), callback_key="cb", transport=httpx.MockTransport(answer)
    )
    got = await traingate.forward(KIT_BODY, TOOLS, {})
    assert isinstance(got, dict)
    (request,) = seen
    assert request.url.userinfo == b"" and request.url.path == "/v1/chat/completions"
    assert request.url.params["api-key"] == "QSECRET"
    assert request.headers["authorization"] == f"Basic {BASIC}"


async def test_an_unexpected_error_of_the_http_stack_is_a_failure_without_the_url() -> None:
    endpoint = _credentialed()

    def explode(request: httpx.Request) -> httpx.Response:
        raise ValueError(f"cannot send to {request.url} for user:SECRET")

    traingate = ForwardingTrainGate(
        endpoint, callback_key="cb", transport=httpx.MockTransport(explode)
    )
    failure = await traingate.forward(KIT_BODY, TOOLS, {})
    assert isinstance(failure, EndpointFailure) and failure.kind == "endpoint_error"
    assert failure.systemic and "ValueError" in failure.message
    assert "SECRET" not in failure.message


# ---------------------------------------------------------------------------- --api-key-file


def test_the_key_file_gives_its_first_line_stripped(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text("  sk-from-file  \nsecond line\n")
    assert read_key_file(str(path)) == "sk-from-file"
    path.write_bytes("\ufeffsk-bom\r\n".encode())
    assert read_key_file(str(path)) == "sk-bom"
    path.write_text("sk-no-newline")
    assert read_key_file(str(path)) == "sk-no-newline"


def test_a_bad_key_file_is_named_with_the_flag(tmp_path: Path) -> None:
    def refusal(path: Path) -> str:
        with pytest.raises(ConfigurationError) as refused:
            read_key_file(str(path))
        message = str(refused.value)
        assert message.startswith(f"--api-key-file {path}: "), message
        assert "sk-" not in message
        return message

    assert "no such file" in refusal(tmp_path / "missing")
    assert "a folder" in refusal(tmp_path)
    empty = tmp_path / "empty"
    empty.write_text("")
    assert "first line is empty" in refusal(empty)
    empty.write_text("   \nsk-on-the-second-line\n")
    assert "first line is empty" in refusal(empty)
    binary = tmp_path / "binary"
    binary.write_bytes(b"sk-\xff\xfe\n")
    assert "not UTF-8" in refusal(binary)
    long = tmp_path / "long"
    long.write_text("sk-" + "x" * MAX_KEY_LINE)
    assert "longer than" in refusal(long)
    assert "cannot read it" in refusal(long / "below-a-file")


def test_api_key_and_api_key_file_are_one_or_the_other(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(
            ["test", "-m", "a:b", "-d", "d", "--api-key", "k", "--api-key-file", "f"]
        )
    assert exit_.value.code == 2
    assert "--api-key-file: not allowed with argument --api-key" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["test", "demo", "serve", "register"])
def test_the_help_of_api_key_says_it_shows_in_the_process_list(command: str) -> None:
    sub = next(
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    option = next(a for a in sub.choices[command]._actions if "--api-key" in a.option_strings)
    assert option.help is not None and "process list" in option.help
    if command == "test":
        assert "--api-key-file" in option.help


# ---------------------------------------------------------------------------- the callback key


async def test_the_callback_key_is_compared_in_constant_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compared: list[tuple[object, object]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    traingate = ForwardingTrainGate(ENDPOINT, callback_key="cb-key")
    traingate.expect("r-1", {})
    transport = httpx.ASGITransport(app=traingate.app)
    body = {"rollout_id": "r-1", "status": "COMPLETED"}
    async with httpx.AsyncClient(transport=transport, base_url="http://traingate") as client:

        async def completed(headers: dict[str, Any] | None) -> int:
            answer = await client.post("/v1/rollout/completed", json=body, headers=headers)
            return answer.status_code

        assert await completed(None) == 401  # no header: refused, not an error
        assert await completed({"Authorization": "Bearer cb-wrong"}) == 401
        assert await completed({"Authorization": "Bearer cb-kéy".encode("latin-1")}) == 401
        assert await completed({"Authorization": "Bearer cb-key"}) == 200
    assert await traingate.result("r-1") == body
    # Every check went through compare_digest, on bytes (str would refuse non-ASCII).
    assert len(compared) == 4
    assert all(isinstance(a, bytes) and b == b"Bearer cb-key" for a, b in compared)
    assert compared[0][0] == b"" and compared[2][0] == "Bearer cb-kéy".encode("latin-1")


def test_a_row_may_give_its_messages_and_metadata(tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "1 + 1"}]
    path = _jsonl(tmp_path, {"messages": messages, "metadata": {"ground_truth": "2"}}, ROW)
    first, second = read_rows(path).rows
    assert first.messages == messages
    assert first.metadata == {"ground_truth": "2", "row_index": 0}
    assert second.metadata["test_mode"] is True  # the v1 row beside it, as before
    bad = _jsonl(tmp_path, {"messages": 3})
    with pytest.raises(DatasetError, match=r", row 0 \(line 1\): 'messages' must be"):
        read_rows(bad)
